"""Freeing GPU memory safely: choose processes, check each one, signal, wait, say what was freed.

Three steps, so that a command can show the plan and ask before anything happens:

    plan = make_plan(machine, Criteria(gpus=(4,), idle=1800))   # select and pre-check
    report = execute(machine, plan, signal.SIGTERM, timeout=10)  # re-check, signal, wait, re-sample

`kill()` does both, for the Python API. Every target is identified by pid *and* start time,
recorded at selection. At the moment of signalling the process is pinned with pidfd_open, its
identity, owner and protection are checked again, and the signal goes through the pidfd: a pid
reused in between cannot receive it. Refusals name their rule (protect.Refusal).
"""

from __future__ import annotations

import os
import pwd
import signal as _signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import procs
from .collector import Collector
from .errors import RequestError, no_such_gpu
from .model import GpuProcess, Snapshot
from .protect import Candidate, Protection, Refusal, load
from .snapshot import Machine, open_machine

if TYPE_CHECKING:  # imported where used: `import vramkit` stays cheap for `vram status`
    from .audit import AuditLog
    from .holders import Holder, HolderScan

# Result of one target.
WOULD_SIGNAL = "would signal"  # --dry-run: every check passed, nothing sent
SIGNALLED = "signalled"  # sent a signal that does not end a process (USR1, STOP, ...), or no wait
EXITED = "exited"
STILL_RUNNING = "still running"
REFUSED = "refused"

# Signals whose purpose is to end the process: after them vram waits and reports who is left.
ENDING = frozenset({_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGKILL})
KILL_GRACE = 5.0  # seconds to wait for an exit after SIGKILL (a process in the driver can take a moment)
SETTLE = 2.0  # seconds to re-sample NVML while it still lists processes that exited


class KillRequestError(RequestError):
    """A request that cannot be carried out as asked (bad signal, unknown GPU, nothing selected...)."""


Progress = Callable[[str, float, float, int], None]  # (stage "idle"|"wait", done s, total s, count)


@dataclass
class Criteria:
    """What to select. Selectors narrow each other (pids AND gpus AND users ...)."""

    pids: tuple[int, ...] = ()
    gpus: tuple[int, ...] | None = None
    users: tuple[str, ...] | None = None
    idle: float | None = None  # seconds of 0% utilization while holding memory
    zombie: bool = False  # defunct or orphaned processes
    holders: bool = False  # include processes holding /dev/nvidia* open that NVML does not list
    all_users: bool = False

    def selects_anything(self) -> bool:
        return bool(self.pids or self.gpus is not None or self.users is not None or self.idle is not None
                    or self.zombie or self.holders)

    def check(self) -> None:
        """Raise KillRequestError when these criteria select nothing at all."""
        if not self.selects_anything():
            raise KillRequestError("name what to signal: processes by pid, or by GPU, user, idle time, zombie "
                                   "state or device-file holders")


@dataclass
class Caller:
    uid: int
    euid: int
    user: str
    chain: tuple[int, ...]  # this process, then its parents up to pid 1

    @property
    def root(self) -> bool:
        return self.euid == 0

    @classmethod
    def current(cls) -> Caller:
        uid = os.getuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        return cls(uid=uid, euid=os.geteuid(), user=name, chain=tuple(procs.ancestors()))


@dataclass
class Target:
    """One process to signal (a job on four GPUs is one target), and what became of it."""

    pid: int
    command: str
    name: str = ""
    argv0: str = ""
    user: str | None = None
    uids: tuple[int, int, int] | None = None  # real, effective, saved
    start_ticks: int | None = None  # identity, with the pid; None: no real process (simulated)
    start_time: float | None = None
    state: str | None = None
    ppid: int | None = None
    container: str | None = None
    ns_pids: tuple[int, ...] = ()
    kernel_thread: bool = False
    gpus: dict[int, int | None] = field(default_factory=dict)  # GPU -> memory NVML lists
    devices: tuple[str, ...] = ()  # /dev/nvidia* nodes it holds open (when scanned)
    holder_gpus: tuple[int, ...] = ()
    synthetic: bool = False  # a scenario's made-up process: nothing real to signal
    unmapped: str | None = None  # why the pid cannot be mapped to a process here
    zombie: bool = False  # shown as a zombie (its main thread has exited)
    defunct: bool = False  # every thread has exited: it waits to be reaped and cannot be signalled
    orphaned: bool = False
    explicit: bool = False  # named by pid
    # --- the outcome
    status: str = WOULD_SIGNAL
    refusal: Refusal | None = None
    signals: list[str] = field(default_factory=list)
    seconds: float | None = None  # from the first signal until it was seen gone
    notes: list[str] = field(default_factory=list)

    @property
    def uid(self) -> int | None:
        return self.uids[0] if self.uids else None

    @property
    def memory(self) -> int | None:
        known = [m for m in self.gpus.values() if m is not None]
        return sum(known) if known else None

    @property
    def all_gpus(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.gpus) | set(self.holder_gpus)))

    @property
    def nvml_listed(self) -> bool:
        return bool(self.gpus)

    @property
    def elapsed(self) -> float | None:
        return None if self.start_time is None else max(0.0, time.time() - self.start_time)

    @property
    def container_pid(self) -> int | None:
        return self.ns_pids[-1] if len(self.ns_pids) > 1 else None


@dataclass
class Plan:
    snapshot: Snapshot
    criteria: Criteria
    targets: list[Target]
    caller: Caller
    holder_scan: HolderScan | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def to_signal(self) -> list[Target]:
        return [t for t in self.targets if t.refusal is None]


@dataclass
class GpuChange:
    index: int
    used_before: int | None
    used_after: int | None
    targets_held: int  # what the targets held on it before, per NVML
    still: list[GpuProcess]  # who holds memory on it afterwards
    unattributed: int | None  # used memory no listed process accounts for

    @property
    def freed(self) -> int | None:
        if self.used_before is None or self.used_after is None:
            return None
        return self.used_before - self.used_after


@dataclass
class KillReport:
    plan: Plan
    signal: str
    dry_run: bool
    gpus: list[GpuChange] = field(default_factory=list)
    after: Snapshot | None = None
    audit_log: str | None = None
    # Processes that still hold a touched GPU's device files open although NVML lists no memory
    # for them (forked workers that inherited a dead job's files, ...): what else holds memory.
    holders_after: list[Holder] = field(default_factory=list)

    @property
    def targets(self) -> list[Target]:
        return self.plan.targets

    @property
    def ok(self) -> bool:
        """Every target did what was asked: exited, or took the signal (or would, in a dry run)."""
        return all(t.status in (EXITED, SIGNALLED, WOULD_SIGNAL) for t in self.targets)


# ---------------------------------------------------------------- signals

def parse_signal(value: str | int) -> _signal.Signals:
    """'TERM', 'SIGTERM', 'term', '15' or 15 -> signal.SIGTERM."""
    text = str(value).strip().upper()
    try:
        sig = _signal.Signals(int(text)) if text.isdigit() else _signal.Signals[
            text if text.startswith("SIG") else "SIG" + text]
    except (KeyError, ValueError):
        raise KillRequestError(f"unknown signal {value!r} (try TERM, INT, HUP, KILL, USR1 or a number)",
                               param="signal") from None
    return sig


def check_force(sig: int, force: bool) -> None:
    """force escalates to SIGKILL when the process did not end: only for a signal meant to end it."""
    if force and sig not in ENDING:
        name = _signal.Signals(sig).name
        raise KillRequestError(f"escalates to SIGKILL after the wait for the process to end, but {name} does not "
                               "end a process: use TERM (the default), INT or HUP", param="force")


# ---------------------------------------------------------------- selection

def _from_gpu_process(p: GpuProcess, machine: Machine | Collector, trusted: bool) -> Target:
    t = Target(pid=p.pid, command=p.command or "", name=p.name or "", user=p.user, state=p.state,
               ppid=p.ppid, container=p.container, start_time=p.start_time, start_ticks=p.start_ticks, zombie=p.zombie,
               orphaned=p.orphaned, ns_pids=(p.pid,))
    if not p.real:
        t.synthetic = True
        t.defunct = p.zombie
        t.uids = None if p.uid is None else (p.uid,) * 3
        t.argv0 = t.command.split(" ", 1)[0].rsplit("/", 1)[-1]
        return t
    if p.host_missing:
        t.unmapped = p.host_missing
        return t
    if not trusted:
        t.unmapped = ("vram runs in its own PID namespace (a container): NVML reports host pids, which "
                      "cannot be mapped to processes here; --holders finds GPU processes in this /proc")
        return t
    _fill_identity(t)
    return t


def _fill_identity(t: Target) -> None:
    now = procs.identity(t.pid)
    if now is None:
        t.unmapped = procs.NOT_VISIBLE
        return
    if t.start_ticks is not None and now.start_ticks != t.start_ticks:
        # The pid was reused between the snapshot and this read: it is not the GPU process.
        t.unmapped = "the pid now belongs to another process than the one NVML listed"
        return
    t.start_ticks, t.start_time, t.uids = now.start_ticks, now.start_time, now.uids
    t.name, t.argv0, t.kernel_thread, t.ns_pids, t.ppid = now.name, now.argv0, now.kernel_thread, now.ns_pids, now.ppid
    t.state = now.state
    t.zombie = now.state == "zombie"
    t.defunct = t.zombie and procs.is_defunct(t.pid)
    if t.zombie and not t.defunct:
        t.notes.append("its main thread has exited (shown as defunct) but other threads still run and hold "
                       "its memory: a signal ends them")
    t.orphaned = now.ppid == 1 and t.pid != 1


def _from_holder(h: Holder) -> Target:
    host = h.host
    t = Target(pid=h.pid, command=host.command, name=host.name, user=host.user, state=host.state,
               ppid=host.ppid, container=host.container, start_time=host.start_time,
               start_ticks=host.start_ticks, ns_pids=h.ns_pids,
               devices=h.devices, holder_gpus=h.gpus)
    _fill_identity(t)
    return t


def _plain_target(pid: int, table: procs.ProcessTable) -> Target:
    """A pid named on the command line that is not a GPU process: enough to say what it is."""
    host = table.read(pid)
    if isinstance(host, str):
        return Target(pid=pid, command=f"({host})", ns_pids=(pid,))
    t = Target(pid=pid, command=host.command, name=host.name, user=host.user, state=host.state,
               ppid=host.ppid, container=host.container, start_time=host.start_time,
               start_ticks=host.start_ticks, ns_pids=(pid,))
    _fill_identity(t)
    return t


def candidate(t: Target) -> Candidate:
    return Candidate(pid=t.pid, name=t.name, argv0=t.argv0, command=t.command, user=t.user,
                     kernel_thread=t.kernel_thread, real=not t.synthetic)


def ownership(t: Target, caller: Caller, all_users: bool) -> Refusal | None:
    if t.uids is None:
        return Refusal("ownership", "its owner cannot be read")
    real, effective, _saved = t.uids
    who = t.user or str(real)
    if caller.root:
        if real == 0 and effective == 0:
            return None
        if not all_users:
            return Refusal("ownership", f"it belongs to {who}; as root, other users' processes also need --all-users")
        return None
    if real == effective == caller.uid:
        return None
    if real == caller.uid:
        return Refusal("ownership", f"it runs with another user's privileges (effective uid {effective})")
    extra = " (--all-users needs root)" if all_users else ""
    return Refusal("ownership", f"it belongs to {who}; you ({caller.user}) may signal only your own processes{extra}")


def _defunct_reason(t: Target) -> str:
    if t.ppid == 1:
        parent = ("its parent is init (pid 1), which should reap it; in a container this means the "
                  "container's init does not reap children (run it with --init)")
    else:
        parent = f"its parent (pid {t.ppid}) has not reaped it: ending the parent frees it"
    return (f"it has already exited (defunct) and cannot be signalled; {parent}. Memory still charged to it "
            "is usually held by a child that inherited its GPU files (vram ps --holders)")


def check(t: Target, caller: Caller, protection: Protection, all_users: bool) -> Refusal | None:
    """Why t must not be signalled, or None. The order decides which rule a refusal names."""
    if t.unmapped:
        return Refusal("unmapped", t.unmapped)
    refusal = protection.check(candidate(t))
    if refusal:
        return refusal
    refusal = ownership(t, caller, all_users)
    if refusal:
        return refusal
    if t.defunct:
        return Refusal("zombie", _defunct_reason(t))
    if t.synthetic:
        return Refusal("simulated", "a made-up process of the simulated scenario: there is no real process "
                                    "to signal")
    return None


def _is_own(t: Target, caller: Caller) -> bool:
    return t.uid == (0 if caller.root else caller.uid)


def make_plan(machine: Machine | Collector, criteria: Criteria, *, protection: Protection | None = None,
              caller: Caller | None = None, progress: Progress | None = None) -> Plan:
    """Select targets and check each one. Nothing is signalled."""
    criteria.check()
    caller = caller or Caller.current()
    protection = protection or load(caller_chain=caller.chain)
    if not protection.caller_chain:
        protection.caller_chain = caller.chain
    source = machine if isinstance(machine, Collector) else Collector(machine)
    snap = source.snapshot()
    have = [g.index for g in snap.gpus]
    for gpu in criteria.gpus or ():
        if gpu not in have:
            raise no_such_gpu(gpu, have, kind=KillRequestError)
    trusted = machine.backend.pids_visible()
    table = procs.ProcessTable()

    # Every GPU process, one target per pid; then the holders NVML does not list.
    by_pid: dict[int, Target] = {}
    for p in snap.processes:
        t = by_pid.get(p.pid)
        if t is None:
            t = by_pid[p.pid] = _from_gpu_process(p, machine, trusted)
        t.gpus[p.gpu] = p.memory
    holder_scan = None
    unlisted = [pid for pid in criteria.pids if pid not in by_pid]
    if criteria.holders or unlisted:
        from .holders import scan

        holder_scan = scan(snap, machine.backend, pids=None if criteria.holders else unlisted, table=table)
        for h in holder_scan.holders:
            existing = by_pid.get(h.pid)
            if existing is not None and existing.unmapped is None:
                existing.devices, existing.holder_gpus = h.devices, h.gpus
            elif criteria.holders:
                by_pid[h.pid] = _from_holder(h)

    notes: list[str] = []
    targets: list[Target] = []
    if criteria.pids:
        for pid in dict.fromkeys(criteria.pids):
            t = by_pid.get(pid)
            if t is None:
                t = _plain_target(pid, table)
                held = next((h for h in (holder_scan.holders if holder_scan else []) if h.pid == pid), None)
                if held is not None:
                    t.devices = held.devices
                    t.refusal = Refusal("not-gpu", "NVML lists no GPU memory for it, but it holds "
                                        f"{', '.join(os.path.basename(d) for d in held.devices)} open: "
                                        "add --holders to include such processes")
                elif t.start_ticks is None and t.command.startswith("("):
                    t.refusal = Refusal("no-such-process", f"no process {pid} {t.command}")
                else:
                    t.refusal = Refusal("not-gpu", "it holds no GPU memory NVML reports and no /dev/nvidia* "
                                        "open (use kill(1) for other processes)")
            t.explicit = True
            targets.append(t)
    else:
        targets = list(by_pid.values())

    if criteria.gpus is not None:
        targets = _narrow(targets, lambda t: bool(set(t.all_gpus) & set(criteria.gpus)), notes,
                          f"--gpu {','.join(map(str, criteria.gpus))}")
    if criteria.users is not None:
        targets = _narrow(targets, lambda t: t.user in criteria.users, notes, f"--user {','.join(criteria.users)}")
    if criteria.zombie:
        targets = _narrow(targets, lambda t: t.zombie or t.orphaned, notes, "--zombie")
    if criteria.users is None and not criteria.pids:
        # Broad selectors pick the caller's own processes; others' only for root with --all-users.
        if not (caller.root and criteria.all_users):
            others = [t for t in targets if not _is_own(t, caller) and not t.unmapped]
            if others:
                names = sorted({t.user or "?" for t in others})
                how = "add --all-users to include them" if caller.root else "only root may signal them"
                notes.append(f"not selected: {len(others)} matching process{'es' if len(others) != 1 else ''} "
                             f"of other users ({', '.join(names)}): {how}")
                targets = [t for t in targets if _is_own(t, caller) or t.unmapped]
    if criteria.idle is not None:
        targets = _idle(source, snap, targets, criteria.idle, notes, progress)

    for t in targets:
        if t.refusal is None:
            t.refusal = check(t, caller, protection, criteria.all_users)
        t.status = REFUSED if t.refusal else WOULD_SIGNAL
        if t.container_pid == 1:
            t.notes.append(f"pid 1 of its container{f' {t.container}' if t.container else ''}: ending it "
                           "stops the whole container, and it ignores signals it has no handler for (only "
                           "SIGKILL, e.g. with --force, always ends it)")
    targets.sort(key=lambda t: (t.refusal is not None, t.all_gpus[:1] or (999,), -(t.memory or 0), t.pid))
    if holder_scan is not None:
        notes.extend(holder_scan.notes)
    return Plan(snapshot=snap, criteria=criteria, targets=targets, caller=caller, holder_scan=holder_scan,
                notes=notes)


def _narrow(targets: list[Target], keep, notes: list[str], label: str) -> list[Target]:
    out = []
    for t in targets:
        if keep(t):
            out.append(t)
        elif t.explicit:
            notes.append(f"pid {t.pid} does not match {label}: not selected")
    return out


def _idle(source: Collector, snap: Snapshot, targets: list[Target], seconds: float, notes: list[str],
          progress: Progress | None) -> list[Target]:
    """Keep the targets idle (idle.py's rule) on every GPU they use for `seconds`, as the
    collector's idle clock has seen: sampled about every second until each target has been
    idle that long or stopped being idle. A holder NVML does not list has no row of its own:
    its GPUs at 0% stand in for it (the rule where the driver keeps no per-process samples)."""
    unknown = sorted({g.index for g in snap.gpus if g.utilization is None
                      and any(g.index in t.all_gpus for t in targets)})
    if unknown:
        notes.append(f"GPU {','.join(map(str, unknown))}: utilization is N/A, so --idle cannot judge the "
                     "processes there (not selected)")
    first_idle: dict[int, float] = {}  # pid -> first sample of an unbroken idle run (holder GPUs)

    def idle_for(t: Target, now: Snapshot) -> float | None:
        """How long t has been idle on every GPU it uses; None when it is not idle now."""
        rows = {p.gpu: p for p in now.processes if p.pid == t.pid and p.key == (t.pid, t.start_ticks)}
        util = {g.index: g.utilization for g in now.gpus}
        if not t.all_gpus or t.memory == 0:
            return None
        spans = []
        for g in t.all_gpus:
            row = rows.get(g)
            if row is not None:
                if row.idle_for is None:
                    return None
                spans.append(row.idle_for)
            elif g in t.gpus or util.get(g) != 0:
                return None  # no longer holds memory there, or its GPU is busy
        if len(spans) < len(t.all_gpus):  # a holder GPU: idle since the first sample that saw it so
            since = first_idle.setdefault(t.pid, now.time)
            spans.append(now.time - since)
        return min(spans)

    alive = {t.pid: t for t in targets if idle_for(t, snap) is not None}
    explicit_busy = [t for t in targets if t.explicit and t.pid not in alive]
    chosen = {pid for pid, t in alive.items() if (idle_for(t, snap) or 0) >= seconds}
    waiting = {pid: t for pid, t in alive.items() if pid not in chosen}
    interval = min(1.0, max(0.1, seconds / 10))
    start = time.monotonic()
    end = start + seconds
    while waiting and time.monotonic() < end:
        time.sleep(max(0.0, min(interval, end - time.monotonic())))
        now = source.snapshot()
        for pid, t in list(waiting.items()):
            span = idle_for(t, now)
            if span is None:
                del waiting[pid]
            elif span >= seconds:
                chosen.add(pid)
                del waiting[pid]
        if progress is not None:
            progress("idle", min(seconds, time.monotonic() - start), seconds, len(waiting) + len(chosen))
    chosen |= set(waiting)  # idle at every sample for the whole wait
    for t in explicit_busy:
        notes.append(f"pid {t.pid} was not idle for {seconds:g}s: not selected")
    return [t for t in targets if t.pid in chosen]


# ---------------------------------------------------------------- signalling

def _audit_target(t: Target) -> dict:
    return {"target": {"pid": t.pid, "start_time": None if t.start_time is None else round(t.start_time, 2),
                       "start_ticks": t.start_ticks, "user": t.user, "uid": t.uid, "command": t.command,
                       "container": t.container, "ns_pids": list(t.ns_pids), "devices": list(t.devices)},
            "gpus": {str(g): m for g, m in sorted(t.gpus.items())}, "memory": t.memory}


def _recheck(t: Target, pinned: procs.Pinned, caller: Caller, protection: Protection,
             all_users: bool) -> Refusal | None:
    """The checks again, on what the process is now (an exec may have changed name or owner)."""
    now = pinned.identity
    fresh = Target(pid=t.pid, command=procs.ProcessTable._cmdline(f"/proc/{t.pid}") or f"[{now.name}]",
                   name=now.name, argv0=now.argv0, user=t.user, uids=now.uids, start_ticks=now.start_ticks,
                   start_time=now.start_time, state=now.state, ppid=now.ppid, kernel_thread=now.kernel_thread,
                   defunct=now.state == "zombie" and procs.is_defunct(t.pid))
    if now.uids != t.uids:
        fresh.user = procs.ProcessTable().user_name(now.uids[0])
    return check(fresh, caller, protection, all_users)


def execute(machine: Machine | Collector, plan: Plan, sig: int = _signal.SIGTERM, *, timeout: float = 10.0,
            force: bool = False, audit: AuditLog | None = None, protection: Protection | None = None,
            progress: Progress | None = None) -> KillReport:
    """Signal every target of the plan that passed its checks, wait, and re-sample the GPUs.

    The audit log (if given) must be open; each refusal, signal and outcome is a line in it."""
    sig = _signal.Signals(sig)
    protection = protection or load(caller_chain=plan.caller.chain)
    if not protection.caller_chain:
        protection.caller_chain = plan.caller.chain
    report = KillReport(plan=plan, signal=sig.name, dry_run=False,
                        audit_log=str(audit.path) if audit is not None else None)
    log = audit.write if audit is not None else (lambda *a, **k: None)
    before = machine.snapshot()
    pinned: dict[int, procs.Pinned] = {}
    started: dict[int, float] = {}
    try:
        for t in plan.targets:
            if t.refusal is not None:
                t.status = REFUSED
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule=t.refusal.rule,
                    reason=t.refusal.reason)
                continue
            held = procs.pin(t.pid, t.start_ticks)  # type: ignore[arg-type]
            if held == "exited":
                t.status, t.seconds = EXITED, 0.0
                t.notes.append("it had already exited")
                log("outcome", **_audit_target(t), signal=None, result=EXITED, reason="had already exited")
                continue
            if held == "identity":
                t.status = REFUSED
                t.refusal = Refusal("identity", f"pid {t.pid} now belongs to another process (its start time "
                                                "is not the one recorded when it was selected)")
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule="identity",
                    reason=t.refusal.reason)
                continue
            assert isinstance(held, procs.Pinned)
            refusal = _recheck(t, held, plan.caller, protection, plan.criteria.all_users)
            if refusal is not None:
                held.close()
                t.status, t.refusal = REFUSED, refusal
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule=refusal.rule,
                    reason=refusal.reason)
                continue
            if not _send(t, held, sig, log):
                held.close()
                continue
            started[t.pid] = time.monotonic()
            if held.identity.state == "stopped" and sig in ENDING and sig != _signal.SIGKILL:
                # A stopped process acts on SIGTERM only once continued (as the shell's kill does for jobs).
                if _send(t, held, _signal.SIGCONT, log):
                    t.notes.append("it was stopped: SIGCONT sent so it can act on the signal")
            pinned[t.pid] = held

        waiting = list(pinned.values())
        if sig in ENDING and waiting:
            ended = procs.wait_gone(waiting, time.monotonic() + timeout, _ticker(progress, timeout))
            survivors = [p for p in waiting if p.pid not in ended]
            _mark_ended(plan, ended, started)
            if force and survivors and sig != _signal.SIGKILL:
                for p in survivors:
                    t = _target(plan, p.pid)
                    t.notes.append(f"still running {timeout:g}s after {sig.name}: sent SIGKILL (--force)")
                    _send(t, p, _signal.SIGKILL, log)
                grace = KILL_GRACE
                ended2 = procs.wait_gone(survivors, time.monotonic() + grace, _ticker(progress, grace))
                _mark_ended(plan, ended2, started)
                survivors = [p for p in survivors if p.pid not in ended2]
            for p in survivors:
                t = _target(plan, p.pid)
                t.status = STILL_RUNNING
                now = procs.identity(p.pid)  # read once: it may exit between two reads
                waited = timeout if not (force and sig != _signal.SIGKILL) else KILL_GRACE
                t.notes.append(f"did not exit within {waited:g}s of {t.signals[-1]}"
                               + ("" if force or sig == _signal.SIGKILL else ": --force sends SIGKILL after the wait")
                               + (" (it is in uninterruptible sleep, often stuck in the driver)"
                                  if now is not None and now.state == "disk-sleep" else ""))
        else:
            for p in waiting:
                t = _target(plan, p.pid)
                t.status = EXITED if p.gone() else SIGNALLED
        for t in plan.targets:
            if t.pid in pinned:
                log("outcome", **_audit_target(t), signal=t.signals[-1] if t.signals else None, result=t.status,
                    seconds=None if t.seconds is None else round(t.seconds, 3))
    finally:
        for p in pinned.values():
            p.close()
    report.after = _settle(machine, plan)
    report.gpus = gpu_changes(before, report.after, plan.targets)
    report.holders_after = _unlisted_holders(machine, report)
    return report


def _unlisted_holders(machine: Machine | Collector, report: KillReport) -> list[Holder]:
    from .holders import scan

    touched = {c.index for c in report.gpus}
    if machine.backend.device_nodes()[0] is None or not touched or report.after is None:
        return []
    found = scan(report.after, machine.backend)
    return [h for h in found.holders if not h.nvml_listed and set(h.gpus) & touched]


def _send(t: Target, held: procs.Pinned, sig: int, log) -> bool:
    name = _signal.Signals(sig).name
    why = held.send(sig)
    if why is None:
        t.signals.append(name)
        log("signal", **_audit_target(t), signal=name, result="sent")
        return True
    if why == "exited":
        t.status, t.seconds = EXITED, 0.0
        log("outcome", **_audit_target(t), signal=name, result=EXITED, reason="had already exited")
        return False
    t.status = REFUSED
    t.refusal = Refusal("identity" if why == "identity" else "permission",
                        "the pid now belongs to another process" if why == "identity"
                        else "the kernel refused the signal (EPERM)")
    log("refusal", **_audit_target(t), signal=name, result=REFUSED, rule=t.refusal.rule, reason=t.refusal.reason)
    return False


def _target(plan: Plan, pid: int) -> Target:
    return next(t for t in plan.targets if t.pid == pid)


def _mark_ended(plan: Plan, ended: dict[int, float], started: dict[int, float]) -> None:
    for pid, when in ended.items():
        t = _target(plan, pid)
        if t.status != EXITED:
            t.status = EXITED
            t.seconds = max(0.0, when - started.get(pid, when))


def _ticker(progress: Progress | None, total: float):
    if progress is None:
        return None
    start = time.monotonic()
    return lambda remaining: progress("wait", time.monotonic() - start, total, len(remaining))


def _settle(machine: Machine | Collector, plan: Plan) -> Snapshot:
    """Re-sample; the driver may list an exited process for a moment while it frees its memory."""
    exited = {t.pid for t in plan.targets if t.status == EXITED}
    deadline = time.monotonic() + SETTLE
    while True:
        snap = machine.snapshot()
        if not exited & {p.pid for p in snap.processes} or time.monotonic() >= deadline:
            return snap
        time.sleep(0.2)


def gpu_changes(before: Snapshot, after: Snapshot, targets: list[Target]) -> list[GpuChange]:
    """Per GPU any target was on: memory used before and after, and who still holds memory there."""
    touched = sorted({g for t in targets for g in t.all_gpus})
    old = {g.index: g for g in before.gpus}
    new = {g.index: g for g in after.gpus}
    out = []
    for index in touched:
        b, a = old.get(index), new.get(index)
        held = sum(t.gpus.get(index) or 0 for t in targets)
        still = sorted(a.processes, key=lambda p: -(p.memory or 0)) if a else []
        unattributed = None
        if a is not None and a.memory_used is not None and all(p.memory is not None for p in still):
            unattributed = max(0, a.memory_used - sum(p.memory for p in still))  # type: ignore[misc]
        out.append(GpuChange(index=index, used_before=b.memory_used if b else None,
                             used_after=a.memory_used if a else None, targets_held=held, still=still,
                             unattributed=unattributed))
    return out


def dry_report(plan: Plan) -> KillReport:
    """The report of a plan that is not carried out: who would be signalled, who is refused."""
    return KillReport(plan=plan, signal="", dry_run=True)


# ---------------------------------------------------------------- the Python API

def kill(pids: Iterable[int] = (), *, gpu: int | Iterable[int] | None = None, user: str | Iterable[str] | None = None,
         idle: float | str | None = None, zombie: bool = False, holders: bool = False, signal: str | int = "TERM",
         timeout: float = 10.0, force: bool = False, all_users: bool = False, dry_run: bool = False,
         simulate: str | None = None, audit_log: str | os.PathLike | None = None) -> KillReport:
    """Signal GPU processes with every safety check of `vram kill`, without asking.

    >>> report = vramkit.kill([4242], timeout=5, force=True)
    >>> [(t.pid, t.status, t.refusal) for t in report.targets]
    [(4242, 'exited', None)]

    Each target ends as 'exited', 'still running', 'signalled' (a signal that does not end a
    process, e.g. USR1), 'refused' (t.refusal names the rule and says why) or, with
    dry_run=True, 'would signal'. report.gpus says per GPU how much memory was freed and who
    still holds memory. Every signal, refusal and outcome goes to the audit log (default: see
    docs/safety.md); when it cannot be written nothing is signalled (audit.AuditError).
    Raises KillRequestError for a request that makes no sense (nothing selected, bad signal).
    """
    from .audit import AuditLog

    sig = parse_signal(signal)
    check_force(sig, force)
    criteria = Criteria(
        pids=tuple(int(p) for p in pids),
        gpus=None if gpu is None else ((gpu,) if isinstance(gpu, int) else tuple(gpu)),
        users=None if user is None else ((user,) if isinstance(user, str) else tuple(user)),
        idle=None if idle is None else _duration(idle), zombie=zombie, holders=holders, all_users=all_users)
    machine = open_machine(simulate)
    try:
        plan = make_plan(machine, criteria)
        if dry_run:
            return dry_report(plan)
        with AuditLog(audit_log, machine.audit_context("python")) as log:
            return execute(machine, plan, sig, timeout=timeout, force=force, audit=log)
    finally:
        machine.close()



def _duration(value: float | str) -> float:
    from .units import parse_duration

    try:
        return parse_duration(value)
    except ValueError as e:
        raise KillRequestError(str(e), param="idle") from None


class _CallableModule(type(sys)):
    """`vramkit.kill(...)` runs kill() while `vramkit.kill` stays this module: importing a
    submodule rebinds the package attribute to the module, so a plain function there would not
    last. Being callable keeps both, and lets `vramkit` load this module only when it is used."""

    def __call__(self, *args, **kwargs):
        return kill(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
