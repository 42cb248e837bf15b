"""Carrying out a plan: pin each target through a pidfd, check it again, signal, wait, escalate
with force, re-sample the GPUs and say per GPU what was freed; every step goes to the audit log."""

from __future__ import annotations

import signal as _signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .. import procs
from ..collector import Collector
from ..gpu_state import Snapshot
from ..i18n import N_, _
from ..machine import Machine
from ..protect import Protection, Refusal, load, said
from .model import (
    ENDING,
    EXITED,
    KILL_GRACE,
    LOOK,
    OTHER_NUMBERING,
    REFUSED,
    SETTLE,
    SIGNALLED,
    STILL_RUNNING,
    WOULD_SIGNAL,
    GpuChange,
    KillReport,
    Plan,
    Progress,
    Target,
    ends_unhandled,
)
from .rules import recheck

if TYPE_CHECKING:
    from ..audit import AuditLog
    from ..holders import Holder


AuditWrite = Callable[..., None]  # AuditLog.write(event, **fields)
INTERRUPTED = "interrupted"  # the audit outcome of a target vram stopped waiting for on Ctrl-C
# What stops vram while it signals or waits: Ctrl-C, and SIGHUP and SIGTERM where stop_on() turns
# them into Stopped. All three are held back while a record and its signal go, or records are closed.
STOPS = frozenset({_signal.SIGINT, _signal.SIGHUP, _signal.SIGTERM})


class KillInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT), or SIGHUP or SIGTERM under stop_on(), while execute() signalled or
    waited. Raised once every target with a signal record has its outcome record (result
    "interrupted" with the signals sent, or "exited"); `report` says what is known so far: each
    target signalled and still running is 'signalled' with a note, each one not reached is
    refused by the rule 'interrupted'. `signum`: the signal that stopped vram."""

    def __init__(self, report: KillReport, signum: int = _signal.SIGINT) -> None:
        super().__init__("interrupted")
        self.report = report
        self.signum = signum


class Stopped(KeyboardInterrupt):
    """SIGHUP or SIGTERM to vram under stop_on(): execute() closes every record as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(_signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stop_on(signals: tuple[int, ...] = (_signal.SIGHUP, _signal.SIGTERM)) -> Iterator[None]:
    """Within it, these signals raise Stopped (main thread only): a dropped ssh session, systemd or
    timeout(1) stopping `vram kill` leaves no record open. A signal ignored already (nohup) or
    handled by someone else stays as it was."""
    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    old = {s: _signal.getsignal(s) for s in signals}
    for s, handler in old.items():
        if handler == _signal.SIG_DFL:
            _signal.signal(s, stop)
    try:
        yield
    finally:
        for s, handler in old.items():
            if handler == _signal.SIG_DFL:
                _signal.signal(s, handler)


def _no_audit(event: str, **fields: Any) -> None:
    pass


def _audit_target(t: Target) -> dict[str, Any]:
    return {"target": {"pid": t.pid, "start_time": None if t.start_time is None else round(t.start_time, 2),
                       "start_ticks": t.start_ticks, "user": t.user, "uid": t.uid, "command": t.command,
                       "container": t.container, "ns_pids": list(t.ns_pids), "devices": list(t.devices)},
            "gpus": {str(g): m for g, m in sorted(t.gpus.items())}, "memory": t.memory}


def execute(machine: Machine | Collector, plan: Plan, sig: int = _signal.SIGTERM, *, timeout: float = 10.0,
            force: bool = False, audit: AuditLog | None = None, protection: Protection | None = None,
            progress: Progress | None = None) -> KillReport:
    """Signal every target of the plan that passed its checks, wait, and re-sample the GPUs.

    The audit log (if given) must be open; each refusal, signal and outcome is a line in it, and
    each signal's line is written (and fsync'd) before the signal is sent: when a line cannot be
    written, AuditError is raised before any further signal."""
    sig = _signal.Signals(sig)
    protection = protection or load(caller_chain=plan.caller.chain)
    if not protection.caller_chain:
        protection.caller_chain = plan.caller.chain
    report = KillReport(plan=plan, signal=sig.name, dry_run=False,
                        audit_log=str(audit.path) if audit is not None else None)
    log: AuditWrite = audit.write if audit is not None else _no_audit
    before = machine.snapshot()
    pinned: dict[int, procs.Pinned] = {}  # every handle held open: signalled, or being checked
    started: dict[int, float] = {}
    unfinished: dict[int, Target] = {}  # targets with a signal record and no outcome record yet
    try:
        for t in plan.targets:
            if t.refusal is not None:
                t.status = REFUSED
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule=t.refusal.rule,
                    reason=t.refusal.reason)
                continue
            if t.start_ticks is None:  # check() refuses these; never signal a process not identified
                t.status, t.refusal = REFUSED, Refusal.of("identity", said(N_("no start time was recorded for it")))
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule="identity",
                    reason=t.refusal.reason)
                continue
            held = procs.pin(t.pid, t.start_ticks)
            if held == "exited":
                t.status, t.seconds = EXITED, 0.0
                t.notes.append(_("it had already exited"))
                log("outcome", **_audit_target(t), signal=None, result=EXITED, reason="had already exited")
                continue
            if held == "namespace":
                t.status, t.refusal = REFUSED, Refusal.of("unmapped", said(OTHER_NUMBERING))
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule="unmapped",
                    reason=t.refusal.reason)
                continue
            if held == "identity":
                t.status = REFUSED
                t.refusal = Refusal.of("identity", said(N_("pid {pid} now belongs to another process (its start "
                                                           "time is not the one recorded when it was selected)"),
                                                        pid=t.pid))
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule="identity",
                    reason=t.refusal.reason)
                continue
            assert isinstance(held, procs.Pinned)
            pinned[t.pid] = held
            refusal = recheck(t, held, plan.caller, protection, plan.criteria.all_users)
            if refusal is not None:
                pinned.pop(t.pid).close()
                t.status, t.refusal = REFUSED, refusal
                log("refusal", **_audit_target(t), signal=sig.name, result=REFUSED, rule=refusal.rule,
                    reason=refusal.reason)
                continue
            if not _send(t, held, sig, log, unfinished):
                pinned.pop(t.pid).close()
                continue
            started[t.pid] = time.monotonic()
            if held.identity.state == "stopped" and sig in ENDING and sig != _signal.SIGKILL:
                # A stopped process acts on SIGTERM only once continued (as the shell's kill does for jobs).
                if _send(t, held, _signal.SIGCONT, log, unfinished):
                    t.notes.append(_("it was stopped: SIGCONT sent so it can act on the signal"))

        waiting = list(pinned.values())
        if sig in ENDING and waiting:
            ended = procs.wait_gone(waiting, time.monotonic() + timeout, _ticker(progress, timeout))
            survivors = [p for p in waiting if p.pid not in ended]
            _mark_ended(plan, ended, started)
            if force and survivors and sig != _signal.SIGKILL:
                for p in survivors:
                    t = _target(plan, p.pid)
                    t.notes.append(_("still running {seconds}s after {signal}: sent SIGKILL (--force)").format(
                        seconds=f"{timeout:g}", signal=sig.name))
                    _send(t, p, _signal.SIGKILL, log, unfinished)
                grace = KILL_GRACE
                ended2 = procs.wait_gone(survivors, time.monotonic() + grace, _ticker(progress, grace))
                _mark_ended(plan, ended2, started)
                survivors = [p for p in survivors if p.pid not in ended2]
            for p in survivors:
                t = _target(plan, p.pid)
                t.status = STILL_RUNNING
                now = procs.identity(p.pid)  # read once: it may exit between two reads
                waited = timeout if not (force and sig != _signal.SIGKILL) else KILL_GRACE
                t.notes.append(_still_running_note(waited, t.signals[-1], hint=not (force or sig == _signal.SIGKILL),
                                                   stuck=now is not None and now.state == "disk-sleep"))
        else:
            look = min(timeout, LOOK) if ends_unhandled(sig) else None
            if look is not None and waiting:
                # Not meant to end it, but it does unless handled, ignored or blocked: a look, not a
                # wait, so that one it ended is reported as exited (and its memory waited for)
                _mark_ended(plan, procs.wait_gone(waiting, time.monotonic() + look), started)
            for p in waiting:
                t = _target(plan, p.pid)
                if t.status == EXITED:
                    continue
                if p.gone():
                    t.status = EXITED
                    continue
                t.status = SIGNALLED
                if look is not None:
                    t.notes.append(_("still running {seconds}s after {signal}: it handles, ignores or blocks it, "
                                     "or has not ended yet").format(seconds=f"{look:g}", signal=sig.name))
        for t in plan.targets:
            if t.pid in pinned:
                log("outcome", **_audit_target(t), signal=t.signals[-1] if t.signals else None, result=t.status,
                    seconds=None if t.seconds is None else round(t.seconds, 3))
                unfinished.pop(t.pid, None)
    except KeyboardInterrupt as e:
        signum = e.signum if isinstance(e, Stopped) else _signal.SIGINT
        _interrupted(plan, pinned, unfinished, log, signum)
        raise KillInterrupted(_partial(machine, report, before), signum) from None
    finally:
        for p in pinned.values():
            p.close()
    report.after = _settle(machine, plan)
    report.gpus = gpu_changes(before, report.after, plan.targets)
    report.holders_after = _unlisted_holders(machine, report)
    return report


def _still_running_note(waited: float, signal: str, hint: bool, stuck: bool) -> str:
    if hint and stuck:
        text = _("did not exit within {seconds}s of {signal}: --force sends SIGKILL after the wait (it is in "
                 "uninterruptible sleep, often stuck in the driver)")
    elif hint:
        text = _("did not exit within {seconds}s of {signal}: --force sends SIGKILL after the wait")
    elif stuck:
        text = _("did not exit within {seconds}s of {signal} (it is in uninterruptible sleep, often stuck in the "
                 "driver)")
    else:
        text = _("did not exit within {seconds}s of {signal}")
    return text.format(seconds=f"{waited:g}", signal=signal)


def _unlisted_holders(machine: Machine | Collector, report: KillReport) -> list[Holder]:
    from ..holders import scan

    touched = {c.index for c in report.gpus}
    if not machine.backend.device_nodes()[0] or not touched or report.after is None:
        return []
    found = scan(report.after, machine.backend)
    return [h for h in found.holders if not h.nvml_listed and set(h.gpus) & touched]


def _send(t: Target, held: procs.Pinned, sig: int, log: AuditWrite, unfinished: dict[int, Target]) -> bool:
    """Record the signal, then send it. The record is on disk (fsync) before the signal goes: when
    it cannot be written, AuditError stops everything before this signal (nothing unrecorded is
    ever sent). If the send then fails, the next record for the target says why; `unfinished`
    holds the target until a record closes it."""
    name = _signal.Signals(sig).name
    unfinished[t.pid] = t
    # The record, the signal and the note that it went are one step: a Ctrl-C within it waits until
    # it is done, so a signal that went is reported as sent (not as "may not have been sent").
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, STOPS)
    try:
        log("signal", **_audit_target(t), signal=name, result="sending")
        why = held.send(sig)
        if why is None:
            t.signals.append(name)
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
    if why is None:
        return True
    unfinished.pop(t.pid, None)
    if why == "exited":
        t.status, t.seconds = EXITED, 0.0
        log("outcome", **_audit_target(t), signal=name, result=EXITED, reason="had already exited")
        return False
    t.status = REFUSED
    t.refusal = (Refusal.of("identity", said(N_("the pid now belongs to another process"))) if why == "identity"
                 else Refusal.of("permission", said(N_("the kernel refused the signal (EPERM)"))))
    log("refusal", **_audit_target(t), signal=name, result=REFUSED, rule=t.refusal.rule, reason=t.refusal.reason)
    return False


def _interrupted(plan: Plan, pinned: dict[int, procs.Pinned], unfinished: dict[int, Target],
                 log: AuditWrite, signum: int = _signal.SIGINT) -> None:
    """Ctrl-C (or SIGHUP, SIGTERM: signum): close every open signal record with what is known
    (the process exited, or it was still running after the signals sent), and mark the targets
    not reached. STOPS are held back while the records are written, so a second Ctrl-C (or a
    SIGTERM after it) cannot leave one half done."""
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, STOPS)
    # The Ctrl-C words stay as they were; a signal to vram is named
    stop = _signal.Signals(signum).name
    cause = "Ctrl-C" if signum == _signal.SIGINT else stop
    if signum == _signal.SIGINT:
        waiting = _("vram was interrupted (Ctrl-C) while waiting for it to exit: it was still running after {signals}")
        sending = N_("vram was interrupted (Ctrl-C) as it was about to signal it: the signal may not have been sent")
        unreached = N_("not signalled: vram was interrupted (Ctrl-C) before its turn")
    else:
        waiting = _("vram was stopped by {stop} while waiting for it to exit: it was still running after {signals}")
        sending = N_("vram was stopped by {stop} as it was about to signal it: the signal may not have been sent")
        unreached = N_("not signalled: vram was stopped by {stop} before its turn")
    try:
        for pid, t in list(unfinished.items()):
            held = pinned.get(pid)
            exited = t.status == EXITED or (held is not None and held.gone())
            if exited:
                t.status = EXITED
                log("outcome", **_audit_target(t), signal=t.signals[-1] if t.signals else None, result=EXITED,
                    sent=list(t.signals), seconds=None if t.seconds is None else round(t.seconds, 3))
            elif t.signals:
                t.status = SIGNALLED
                t.notes.append(waiting.format(signals=", ".join(t.signals), stop=stop))
                log("outcome", **_audit_target(t), signal=t.signals[-1], result=INTERRUPTED, sent=list(t.signals),
                    reason=f"interrupted ({cause}) while waiting for it to exit; it was still running")
            else:
                t.status = REFUSED
                t.refusal = Refusal.of(INTERRUPTED, said(sending, stop=stop))
                log("outcome", **_audit_target(t), signal=None, result=INTERRUPTED, sent=[],
                    reason=f"interrupted ({cause}) as the signal was being sent; it may not have been sent")
            unfinished.pop(pid)
        for t in plan.targets:
            if t.status == WOULD_SIGNAL and not t.signals:  # never reached (or still being checked)
                t.status = REFUSED
                t.refusal = Refusal.of(INTERRUPTED, said(unreached, stop=stop))
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)


def _partial(machine: Machine | Collector, report: KillReport, before: Snapshot) -> KillReport:
    """The report of an interrupted run: one more reading of the GPUs (skipped on a second Ctrl-C)."""
    try:
        report.after = machine.snapshot()
    except KeyboardInterrupt:
        return report
    report.gpus = gpu_changes(before, report.after, report.plan.targets)
    return report


def _target(plan: Plan, pid: int) -> Target:
    return next(t for t in plan.targets if t.pid == pid)


def _mark_ended(plan: Plan, ended: dict[int, float], started: dict[int, float]) -> None:
    for pid, when in ended.items():
        t = _target(plan, pid)
        if t.status != EXITED:
            t.status = EXITED
            t.seconds = max(0.0, when - started.get(pid, when))


def _ticker(progress: Progress | None, total: float) -> Callable[[list[int]], None] | None:
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
        if not exited & {p.pid_key for p in snap.processes} or time.monotonic() >= deadline:
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
