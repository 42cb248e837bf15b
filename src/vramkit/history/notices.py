"""Idle-holder notices: a collector consumer that tells people about memory held idle, and may
reclaim it, as the policy file says (policy.py).

For every process that holds at least a rule's `min_memory` on one GPU and has been idle there
for at least its `idle_for` (the collector's idle clock, seeded from the recorder's history so a
restart does not forget a long idle stretch), the rule's command runs with the facts as JSON on
its stdin. One notice per (rule, pid, start ticks, GPU) per `repeat`; at most `max_per_minute`
notices a minute over all rules (the rest wait for a later sample, counted). With
`reclaim_after`, the process is sent SIGTERM that long after its first notice if it is still
the same process, still idle and still holding the memory, through vram kill's checked and
audited path (killing.make_plan, killing.execute): a protected process is never signalled, and
every signal and refusal is an audit line with via "policy".

Commands and reclaims run in one worker thread, never in the sampling loop: a command runs
without a shell, in its own session, with a fixed environment and cwd /, its output capped; one
still running after the policy's `timeout` is killed with its whole process group. As root the
command runs as root: it is the admin's command, in a file only root may change (policy.py).

    notifier = Notifier(policy, collector, say=print)
    collector.subscribe(notifier)
    ...
    notifier.close()
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..i18n import N_, _, ngettext
from ..procs import sanitize
from ..units import format_duration, format_size
from .policy import SYSTEM_POLICY, Policy, Rule
from .policy import load as load_policy

if TYPE_CHECKING:
    import queue

    from ..collector import Collector
    from ..gpu_state import Snapshot

Say = Callable[[str], None]
NoticeKey = tuple[str, int, "int | None", int]  # (rule, pid, start ticks, GPU)
OUTPUT_LIMIT = 4096  # bytes of a command's output kept (to say why it failed)
QUEUE_LIMIT = 256  # notices and reclaims waiting for the worker; past this they are dropped, counted
RECLAIM_TIMEOUT = 10.0  # seconds a reclaimed process has to exit after SIGTERM
COMMAND_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


@dataclass
class Holding:
    """One process's memory on one GPU in one snapshot (its MIG instances there added up)."""

    pid: int
    start_ticks: int | None
    gpu: int
    gpu_uuid: str | None
    memory: int | None  # None: N/A on some instance
    idle_for: float | None  # None: busy (on some instance), or not idle
    user: str | None
    uid: int | None
    name: str | None


def holdings(snap: Snapshot) -> list[Holding]:
    out: dict[tuple[int, int | None, int], Holding] = {}
    for dev in snap.gpus:
        for p in dev.processes:
            key = (p.pid, p.start_ticks, dev.index)
            h = out.get(key)
            if h is None:
                out[key] = Holding(p.pid, p.start_ticks, dev.index, dev.uuid, p.memory, p.idle_for, p.user,
                                   p.uid, p.name)
                continue
            h.memory = None if h.memory is None or p.memory is None else h.memory + p.memory
            h.idle_for = None if h.idle_for is None or p.idle_for is None else min(h.idle_for, p.idle_for)
    return list(out.values())


@dataclass
class _Noticed:
    first: float  # monotonic time of the first notice of this idle stretch
    last: float  # ... and of the newest
    reclaim_at: float | None  # monotonic; None: the rule does not reclaim
    reclaim_queued: bool = False


@dataclass
class CommandResult:
    returncode: int | None  # None: killed after the timeout
    output: str  # the first OUTPUT_LIMIT bytes of stdout and stderr, sanitized

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_command(argv: tuple[str, ...], stdin: bytes, timeout: float) -> CommandResult:
    """Run argv (no shell) in a new session with `stdin` as its input; keep the first
    OUTPUT_LIMIT bytes of its output; kill its process group if it runs past `timeout`."""
    import selectors
    import subprocess

    env = {**COMMAND_ENV, "HOME": os.path.expanduser("~")}
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd="/", env=env, close_fds=True, start_new_session=True)
    except OSError as e:
        return CommandResult(127, _("cannot run it: {why}").format(why=e.strerror))
    assert proc.stdin is not None and proc.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        proc.stdin.write(stdin)  # a few hundred bytes: fits the pipe, never blocks
        proc.stdin.close()
    except OSError:  # it exited without reading its input
        pass
    kept = bytearray()
    timed_out = False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(left):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            kept += chunk[: max(0, OUTPUT_LIMIT - len(kept))]  # the rest is read and dropped
    proc.stdout.close()
    if not timed_out:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the whole group it started
        except OSError:
            pass
        proc.wait()
    text = sanitize(kept.decode(errors="replace").strip().replace("\n", " | "))
    return CommandResult(None if timed_out else proc.returncode, text)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


class Notifier:
    """The consumer. Call it with each snapshot (collector.subscribe(notifier)); close() when done."""

    def __init__(self, policy: Policy, collector: Collector, *, say: Say, dry_run: bool = False,
                 audit_path: Path | str | None = None, host: str | None = None,
                 reclaim_timeout: float = RECLAIM_TIMEOUT):
        self.policy = policy
        self.collector = collector
        self.say = say
        self.dry_run = dry_run
        self.audit_path = audit_path
        self.host = host or os.uname().nodename
        self.reclaim_timeout = reclaim_timeout
        self.sent = 0  # notices sent (or, in a dry run, that would have been)
        self.failed = 0  # notice commands that failed or timed out
        self.held_back = 0  # notices the rate limit made wait (each counted once)
        self.dropped = 0  # jobs the full queue could not take
        self.reclaimed = 0  # processes reclaimed (exited after the signal)
        self._noticed: dict[NoticeKey, _Noticed] = {}
        self._waiting: set[NoticeKey] = set()  # held back by the rate limit, not yet sent
        self._recent: deque[float] = deque()  # monotonic times of the notices of the last minute
        self._limit_said = False
        import queue  # here, not at the top: `vram status` builds the parser that imports this module

        self._lock = threading.Lock()  # state; the worker and the sampling thread both touch it
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(QUEUE_LIMIT)
        self._worker = threading.Thread(target=self._work, name="vramkit-notices", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------ the consumer
    def __call__(self, snap: Snapshot) -> None:
        now = snap.monotonic if snap.monotonic is not None else snap.time
        read_gpus = {d.index for d in snap.gpus if d.error is None and not d.lost}
        with self._lock:
            matched: set[NoticeKey] = set()
            for h in holdings(snap):
                for rule in self.policy.rules:
                    if not self._applies(rule, h):
                        continue
                    key = (rule.name, h.pid, h.start_ticks, h.gpu)
                    matched.add(key)
                    self._consider(rule, key, h, snap, now)
            # An idle stretch that ended (busy, gone, or below the rule) starts over; a GPU that
            # could not be read this time says nothing either way.
            for key in [k for k in self._noticed if k not in matched and k[3] in read_gpus]:
                del self._noticed[key]
            self._waiting &= matched

    @staticmethod
    def _applies(rule: Rule, h: Holding) -> bool:
        return (h.idle_for is not None and h.idle_for >= rule.idle_for and h.memory is not None
                and h.memory >= rule.min_memory and rule.covers(h.user))

    def _consider(self, rule: Rule, key: NoticeKey, h: Holding, snap: Snapshot, now: float) -> None:
        state = self._noticed.get(key)
        if state is None or now - state.last >= rule.repeat:
            if self._rate_allows(now):
                self._waiting.discard(key)
                first = state is None
                reclaim_at = None if rule.reclaim_after is None else now + rule.reclaim_after
                if state is None:
                    state = self._noticed[key] = _Noticed(now, now, reclaim_at)
                state.last = now
                facts = self._facts(rule, h, snap, state, now)
                self._notice(rule, h, facts, first)
            elif key not in self._waiting:
                self._waiting.add(key)
                self.held_back += 1
                if not self._limit_said:
                    self._limit_said = True
                    self.say(_("policy: more than {n} notices a minute: the rest wait for a later minute (counted; "
                               "said once)").format(n=self.policy.max_per_minute))
        if state is not None and state.reclaim_at is not None and now >= state.reclaim_at \
                and not state.reclaim_queued:
            state.reclaim_queued = True
            self._submit(lambda: self._reclaim(rule, h))

    def _rate_allows(self, now: float) -> bool:
        while self._recent and now - self._recent[0] >= 60:
            self._recent.popleft()
        if len(self._recent) >= self.policy.max_per_minute:
            return False
        self._recent.append(now)
        return True

    def _facts(self, rule: Rule, h: Holding, snap: Snapshot, state: _Noticed, now: float) -> dict[str, Any]:
        reclaim_time = None if state.reclaim_at is None else snap.time + (state.reclaim_at - now)
        return {
            "rule": rule.name, "host": self.host, "time": _iso(snap.time), "timestamp": round(snap.time, 3),
            "user": h.user, "uid": h.uid, "pid": h.pid, "start_ticks": h.start_ticks,
            "name": None if h.name is None else sanitize(h.name),
            "gpu": h.gpu, "gpu_uuid": h.gpu_uuid, "memory_bytes": h.memory,
            "idle_seconds": round(h.idle_for or 0.0, 1),
            "reclaim": {"scheduled": reclaim_time is not None,
                        "at": None if reclaim_time is None else _iso(reclaim_time),
                        "timestamp": None if reclaim_time is None else round(reclaim_time, 3)},
            "simulated": snap.simulated,
        }

    @staticmethod
    def _describe(h: Holding) -> str:
        who = sanitize(h.user) if h.user else f"uid {h.uid}" if h.uid is not None else _("an unknown user")
        return _("{who}'s pid {pid} holds {size} on GPU {gpu}, idle for {idle}").format(
            who=who, pid=h.pid, size=format_size(h.memory), gpu=h.gpu, idle=format_duration(h.idle_for))

    def _notice(self, rule: Rule, h: Holding, facts: dict[str, Any], first: bool) -> None:
        self.sent += 1
        reclaim = (_("; reclaim at {time}").format(time=facts["reclaim"]["at"])
                   if first and facts["reclaim"]["scheduled"] else "")
        values = {"rule": rule.name, "holding": self._describe(h), "command": rule.command[0], "reclaim": reclaim}
        if self.dry_run:
            self.say(_("policy (dry run): rule {rule}: {holding}: would run {command}{reclaim}").format(**values))
            return
        self.say(_("policy: rule {rule}: {holding}: running {command}{reclaim}").format(**values))
        data = (json.dumps(facts, sort_keys=True) + "\n").encode()
        self._submit(lambda: self._run(rule, h, data))

    def _run(self, rule: Rule, h: Holding, data: bytes) -> None:
        result = run_command(rule.command, data, self.policy.timeout)
        if result.ok:
            return
        with self._lock:
            self.failed += 1
        why = (_("still running after {timeout}: killed").format(timeout=format_duration(self.policy.timeout))
               if result.returncode is None else _("exit status {code}").format(code=result.returncode))
        if result.output:
            self.say(_("policy: rule {rule}: the notice command for pid {pid} failed ({why}): {output}").format(
                rule=rule.name, pid=h.pid, why=why, output=result.output[:200]))
        else:
            self.say(_("policy: rule {rule}: the notice command for pid {pid} failed ({why})").format(
                rule=rule.name, pid=h.pid, why=why))

    # ------------------------------------------------------------ reclaim
    def _reclaim(self, rule: Rule, h: Holding) -> None:
        """In the worker: select the process afresh through vram kill's path, check it is the one
        noticed and still idle with the memory, then signal it (or, in a dry run, say so)."""
        from ..audit import AuditLog
        from ..killing import EXITED, Caller, Criteria, dry_report, execute, make_plan
        from ..protect import Refusal, said

        caller = Caller.current()
        plan = make_plan(self.collector, Criteria(pids=(h.pid,), all_users=caller.root), caller=caller)
        target = plan.targets[0]
        what = {"rule": rule.name, "pid": h.pid, "gpu": h.gpu}
        on_gpu = [x for x in holdings(plan.snapshot) if x.pid == h.pid and x.gpu == h.gpu]
        same = [x for x in on_gpu if x.start_ticks == h.start_ticks]
        if not on_gpu:
            self.say(_("policy: rule {rule}: pid {pid} on GPU {gpu}: no longer holds memory there (exited or freed "
                       "it): nothing to reclaim").format(**what))
            return
        if not same or (h.start_ticks is not None and target.start_ticks != h.start_ticks):
            # Not the process that was noticed: never signal it; the refusal is audited below.
            target.refusal = Refusal.of("identity", said(N_("pid {pid} now belongs to another process than the "
                                                            "one the notice was about"), pid=h.pid))
        elif not self._applies(rule, same[0]):
            self.say(_("policy: rule {rule}: pid {pid} on GPU {gpu}: no longer idle with {size} or more: not "
                       "reclaimed").format(size=format_size(rule.min_memory), **what))
            return
        if self.dry_run:
            report = dry_report(plan)
            t = report.targets[0]
            if t.refusal is None:
                self.say(_("policy: rule {rule}: pid {pid} on GPU {gpu} (dry run): would send SIGTERM to "
                           "{holding}").format(holding=self._describe(same[0] if same else h), **what))
            else:
                self.say(_("policy: rule {rule}: pid {pid} on GPU {gpu} (dry run): would refuse: {refusal}").format(
                    refusal=f"{t.refusal.rule}: {t.refusal.text}", **what))
            return
        context = {**self.collector.audit_context("policy"), "policy": self.policy.path, "policy_rule": rule.name}
        with AuditLog(self.audit_path, context) as log:
            report = execute(self.collector, plan, signal.SIGTERM, timeout=self.reclaim_timeout, audit=log)
        t = report.targets[0]
        if t.refusal is not None:
            self.say(_("policy: rule {rule}: pid {pid} on GPU {gpu}: not reclaimed: {refusal}").format(
                refusal=f"{t.refusal.rule}: {t.refusal.text}", **what))
            return
        with self._lock:
            if t.status == EXITED:
                self.reclaimed += 1
        freed = sum(c.freed or 0 for c in report.gpus)
        if t.status == EXITED:
            self.say(_("policy: rule {rule}: pid {pid} on GPU {gpu}: reclaimed: SIGTERM sent to {holding}: {status}, "
                       "{size} freed").format(holding=self._describe(h), status=t.status, size=format_size(freed),
                                              **what))
        else:
            self.say(_("policy: rule {rule}: pid {pid} on GPU {gpu}: reclaimed: SIGTERM sent to {holding}: "
                       "{status}").format(holding=self._describe(h), status=t.status, **what))

    # ------------------------------------------------------------ the worker
    def _submit(self, job: Callable[[], None]) -> None:
        import queue

        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                self.say(_("policy: more than {n} notices and reclaims waiting (a command that hangs?): further "
                           "ones are dropped, counted").format(n=QUEUE_LIMIT))

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
            except Exception as e:  # noqa: BLE001 - one job's failure (an audit log, a config) is said, not fatal
                self.say(f"policy: {type(e).__name__}: {e}")
            finally:
                self._jobs.task_done()

    def drain(self) -> None:
        """Wait until every notice and reclaim submitted so far has run."""
        self._jobs.join()

    def close(self, wait: float | None = None) -> None:
        """Let the queued jobs finish (at most `wait` seconds: default the command timeout plus the
        reclaim's), stop the worker, and say what the rate limit and the queue held back."""
        import queue

        wait = self.policy.timeout + self.reclaim_timeout + 5 if wait is None else wait
        try:
            self._jobs.put(None, timeout=wait)
        except queue.Full:
            pass
        self._worker.join(wait)
        if self.held_back or self.dropped:
            values = {"n": self.held_back, "limit": self.policy.max_per_minute, "dropped": self.dropped}
            if self.dropped:
                self.say(ngettext("policy: {n} notice waited for the rate limit ({limit} a minute), {dropped} dropped "
                                  "(the queue was full)", "policy: {n} notices waited for the rate limit ({limit} a "
                                  "minute), {dropped} dropped (the queue was full)", self.held_back).format(**values))
            else:
                self.say(ngettext("policy: {n} notice waited for the rate limit ({limit} a minute)",
                                  "policy: {n} notices waited for the rate limit ({limit} a minute)",
                                  self.held_back).format(**values))


# ---------------------------------------------------------------- wiring into `vram record`

def add_policy_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(N_("idle-holder notices (docs/policy-examples/)"))
    group.add_argument("--policy", metavar="FILE",  # /etc/vramkit/policy.toml: SYSTEM_POLICY
                       help=N_("notify (and maybe reclaim) idle holders as FILE says (default: "
                               "/etc/vramkit/policy.toml when it exists)"))
    group.add_argument("--dry-run", action="store_true",
                       help=N_("with a policy: say which notices and reclaims it would make; run and signal nothing"))


def attach_policy(collector: Collector, args: argparse.Namespace, say: Say) -> Callable[[], None] | None:
    """Load the policy (args.policy, else /etc/vramkit/policy.toml when it exists), seed the idle
    clock from the recorder's history (args.db) and subscribe a Notifier. Returns the function
    that closes it, or None without a policy. A bad policy raises PolicyError (exit 2)."""
    path = getattr(args, "policy", None)
    if path is None:
        if not os.path.lexists(SYSTEM_POLICY):
            return None
        path = SYSTEM_POLICY
    policy = load_policy(path)
    seed_idle_from_history(collector, getattr(args, "db", None), say)
    notifier = Notifier(policy, collector, say=say, dry_run=bool(getattr(args, "dry_run", False)))
    unsubscribe = collector.subscribe(notifier)
    rules = ", ".join(r.name for r in policy.rules)
    n = len(policy.rules)
    if notifier.dry_run:
        line = ngettext("policy {path}: {n} rule ({rules}) (dry run: no command is run, nothing is signalled)",
                        "policy {path}: {n} rules ({rules}) (dry run: no command is run, nothing is signalled)", n)
    else:
        line = ngettext("policy {path}: {n} rule ({rules})", "policy {path}: {n} rules ({rules})", n)
    say(line.format(path=sanitize(str(path)), n=n, rules=rules))

    def close() -> None:
        unsubscribe()
        notifier.close()
    return close


def seed_idle_from_history(collector: Collector, db: str | Path | None, say: Say) -> None:
    """Tell the collector's idle clock what the history says: a process idle for 2 h before the
    recorder restarted is still idle for 2 h now (when the recorder's newest sample is recent)."""
    from .recorded_idle import read_recorded_idle

    recorded = read_recorded_idle(collector.backend.now(), db)
    if recorded.since:
        collector.idle.seed(recorded.since)
        say(_("policy: {note}").format(note=recorded.note))
