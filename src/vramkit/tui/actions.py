"""The live view's actions, through exactly the path `vram kill` takes (vramkit.killing): select and
check (identity, ownership, protected list), then re-check, signal, wait and audit. Nothing here
re-implements a check; this only adapts the calls to one pid chosen in the table."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..collector import Collector
    from ..killing import KillReport, Plan


class KillActions:
    """Blocking calls: the app runs them off the UI thread, never beside a snapshot.

    vramkit.killing and the audit log are imported at the first kill, not with the view: most
    sessions never kill, and those modules stay resident once imported (~0.5 MiB)."""

    def __init__(self, machine: Collector, audit_path: str | None = None, timeout: float = 10.0,
                 all_users: bool = False):
        self.machine = machine
        self.audit_path = audit_path
        self.timeout = timeout
        self.all_users = all_users

    def plan(self, pid: int) -> Plan:
        from ..killing import Criteria, make_plan

        return make_plan(self.machine, Criteria(pids=(pid,), all_users=self.all_users))

    def execute(self, plan: Plan, force: bool = False, sig: int = signal.SIGTERM) -> KillReport:
        """Send `sig` (SIGTERM, or SIGINT: a Python job's KeyboardInterrupt) through kill's checked
        path; with `force`, SIGKILL after the wait if it still runs."""
        if sig not in (signal.SIGTERM, signal.SIGINT):
            raise ValueError(f"the live view sends SIGTERM or SIGINT, not {signal.Signals(sig).name}")
        from ..audit import AuditLog
        from ..killing import execute

        m = self.machine
        # Not writable: AuditError, and nothing is signalled.
        with AuditLog(self.audit_path, m.audit_context("vram top")) as log:
            return execute(m, plan, sig, timeout=self.timeout, force=force, audit=log)
