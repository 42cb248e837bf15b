"""Freeing GPU memory safely: choose processes, check each one, signal, wait, say what was freed.

Three steps, so that a command can show the plan and ask before anything happens:

    plan = make_plan(machine, Criteria(gpus=(4,), idle=1800))   # select and pre-check
    report = execute(machine, plan, signal.SIGTERM, timeout=10)  # re-check, signal, wait, re-sample

`kill()` does both, for the Python API (`vramkit.kill()` calls it). Every target is identified
by pid *and* start ticks, recorded at selection. At the moment of signalling the process is
pinned with pidfd_open, its identity, owner and protection are checked again, and the signal
goes through the pidfd: a pid reused in between cannot receive it. Refusals name their rule (protect.Refusal).

The package: model.py (the records and Status), selection.py (make_plan), rules.py (check,
recheck), idle.py (kill --idle), execute.py (execute, the report). Everything documented is
importable from here: `from vramkit.killing import Criteria, make_plan, execute`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..machine import open_machine
from .execute import INTERRUPTED, KillInterrupted, Stopped, dry_report, execute, gpu_changes, stop_on
from .model import (
    ENDING,
    EXITED,
    KILL_GRACE,
    LEAVES_RUNNING,
    LOOK,
    REFUSED,
    SETTLE,
    SIGNALLED,
    STILL_RUNNING,
    WOULD_SIGNAL,
    Caller,
    Criteria,
    GpuChange,
    KillReport,
    KillRequestError,
    Plan,
    Progress,
    Status,
    Target,
    check_force,
    ends_unhandled,
    parse_signal,
)
from .rules import candidate, check, ownership, recheck
from .selection import make_plan

__all__ = ["ENDING", "EXITED", "INTERRUPTED", "KILL_GRACE", "LEAVES_RUNNING", "LOOK", "REFUSED", "SETTLE", "SIGNALLED",
           "STILL_RUNNING", "WOULD_SIGNAL", "Caller", "Criteria", "GpuChange", "KillInterrupted", "KillReport",
           "KillRequestError", "Plan", "Progress", "Status", "Stopped", "Target", "candidate", "check", "check_force",
           "dry_report", "ends_unhandled", "execute", "gpu_changes", "kill", "make_plan", "ownership", "parse_signal",
           "recheck", "stop_on"]


def kill(pids: Iterable[int] = (), *, gpu: int | Iterable[int] | None = None, user: str | Iterable[str] | None = None,
         idle: float | str | None = None, zombie: bool = False, holders: bool = False, signal: str | int = "TERM",
         timeout: float = 10.0, force: bool = False, all_users: bool = False, dry_run: bool = False,
         simulate: str | None = None, audit_log: str | os.PathLike[str] | None = None) -> KillReport:
    """Signal GPU processes with every safety check of `vram kill`, without asking.

    >>> report = kill([4242], timeout=5, force=True)
    >>> [(t.pid, t.status, t.refusal) for t in report.targets]
    [(4242, 'exited', None)]

    Each target ends as 'exited', 'still running', 'signalled' (it took a signal not meant to
    end it, e.g. USR1, and still ran after it), 'refused' (t.refusal names the rule and says
    why: t.refusal.reason in English, as the audit log has it, t.refusal.text in the reader's
    language) or, with dry_run=True, 'would signal'. report.gpus says per GPU how much memory was freed and who
    still holds memory. Every signal, refusal and outcome goes to the audit log (default: see
    docs/safety.md); when it cannot be written nothing is signalled (audit.AuditError).
    Raises KillRequestError for a request that makes no sense (nothing selected, bad signal).
    Ctrl-C while it signals or waits raises KillInterrupted (a KeyboardInterrupt) once the audit
    log has each signalled target's outcome ("interrupted", with the signals sent); its `report`
    says what is known so far.
    """
    from ..audit import AuditLog

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
        path = None if audit_log is None else os.fspath(audit_log)
        with AuditLog(path, machine.audit_context("python")) as log:
            return execute(machine, plan, sig, timeout=timeout, force=force, audit=log)
    finally:
        machine.close()


def _duration(value: float | str) -> float:
    from ..units import parse_duration

    try:
        return parse_duration(value)
    except ValueError as e:
        raise KillRequestError(str(e), param="idle") from None

