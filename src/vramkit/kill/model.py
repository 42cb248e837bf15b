"""vram kill's records: what to select (Criteria), who asks (Caller), each process and what
became of it (Target, Status), the plan and the report. No logic beyond reading them."""

from __future__ import annotations

import os
import signal as _signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from .. import procs
from ..errors import RequestError
from ..model import GpuProcess, Snapshot
from ..protect import Refusal

if TYPE_CHECKING:
    from ..holders import Holder, HolderScan


class Status(str, Enum):
    """What became of one target. A str, so it compares, prints and goes into JSON as its text."""

    WOULD_SIGNAL = "would signal"  # --dry-run: every check passed, nothing sent
    SIGNALLED = "signalled"  # sent a signal that does not end a process (USR1, STOP, ...), or no wait
    EXITED = "exited"
    STILL_RUNNING = "still running"
    REFUSED = "refused"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


WOULD_SIGNAL, SIGNALLED, EXITED, STILL_RUNNING, REFUSED = (
    Status.WOULD_SIGNAL, Status.SIGNALLED, Status.EXITED, Status.STILL_RUNNING, Status.REFUSED)

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
        return cls(uid=uid, euid=os.geteuid(), user=procs.user_name(uid), chain=tuple(procs.ancestors()))


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
    status: Status = WOULD_SIGNAL
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
