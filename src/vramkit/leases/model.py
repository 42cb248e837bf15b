"""What the lease directory holds, as data: leases, the GPUs someone keeps locked, waiters'
tickets; and what a lease may say of the command it was taken for."""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from ..i18n import _
from ..procs import ProcessKey


@dataclass
class Lease:
    id: str
    units: list[str]  # unit keys still reserved
    labels: dict[str, str]  # unit key -> "GPU 4", for messages
    kind: str  # "run" (vram run), "api" (use_gpus), "hold" (vram pick --hold)
    user: str
    uid: int
    pid: int  # the holder: the launcher, or the Python process
    created: float
    expires: float
    locked: bool = True  # alive only while lease-ID.lock is held ("hold" leases: by time only)
    job_pid: int | None = None  # the launched job (its descendants count as it)
    pidns: str | None = None  # pid namespace of the pids above
    host: str = ""
    command: str | None = None
    baseline: dict[str, list[int]] = field(default_factory=dict)  # "hold": pids already on each unit
    # The holder and the job are (pid, start ticks) within the boot `boot_id`. A lease written by
    # vram before these fields has none (None): its pids are told from reused ones by start time.
    start_ticks: int | None = None  # of `pid`
    job_start_ticks: int | None = None  # of `job_pid`
    boot_id: str | None = None  # /proc/sys/kernel/random/boot_id when the lease was written

    @property
    def holder_key(self) -> ProcessKey | None:
        """The process holding the lease, None for a lease that does not record its start ticks."""
        return None if self.start_ticks is None else ProcessKey(self.pid, self.start_ticks, self.boot_id)

    @property
    def job_key(self) -> ProcessKey | None:
        """The launched job, None when there is none yet (or its start ticks are not recorded)."""
        if self.job_pid is None or self.job_start_ticks is None:
            return None
        return ProcessKey(self.job_pid, self.job_start_ticks, self.boot_id)

    def who(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        if self.kind == "run":
            text = _("a vram run of {user} (pid {pid}, {ago}s ago)")
        elif self.kind == "api":
            text = _("a use_gpus() call of {user} (pid {pid}, {ago}s ago)")
        elif self.kind == "hold":
            text = _("vram pick --hold of {user} (pid {pid}, {ago}s ago)")
        else:
            text = _("a lease of {user} (pid {pid}, {ago}s ago)")
        return text.format(user=self.user, pid=self.pid, ago=f"{max(0, now - self.created):.0f}")


@dataclass
class LockedGpu(Lease):
    """Not a file: a GPU whose lock someone else kept for the whole look (read_state adds one per
    GPU in LeaseDir.locked_out), so that nothing chooses it, and every message names the holder."""

    holder: str = ""

    def who(self, now: float | None = None) -> str:
        return self.holder


@dataclass
class Ticket:
    seq: int
    pid: int
    user: str
    policy: dict[str, Any]
    created: float

    def who(self) -> str:
        return f"{self.user}, pid {self.pid}"


@dataclass
class State:
    leases: list[Lease]
    tickets: list[Ticket]  # in queue order


def program_name(command: str | list[str] | None) -> str | None:
    """'python' for "/usr/bin/python train.py --db-password=x" (or its argv): the name, no arguments."""
    if not command:
        return None
    if isinstance(command, str):
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
    else:
        words = list(command)
    return os.path.basename(words[0])[:256] or None if words else None
