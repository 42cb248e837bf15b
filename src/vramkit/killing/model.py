"""vram kill's records: what to select (Criteria), who asks (Caller), each process and what
became of it (Target, Status), the plan and the report. No logic beyond reading them."""

from __future__ import annotations

import os
import signal as _signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from .. import procs
from ..errors import RequestError
from ..gpu_state import GpuProcess, Snapshot
from ..i18n import N_, _
from ..procs.namespaces import orphaned as left_to_init
from ..protect import Refusal

if TYPE_CHECKING:
    from ..gpu_state import Workload
    from ..holders import Holder, HolderScan


class Status(str, Enum):
    """What became of one target. A str, so it compares, prints and goes into JSON as its text."""

    WOULD_SIGNAL = "would signal"  # --dry-run: every check passed, nothing sent
    SIGNALLED = "signalled"  # took a signal not meant to end it (USR1, STOP, ...) and still ran after it
    EXITED = "exited"
    STILL_RUNNING = "still running"
    REFUSED = "refused"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


WOULD_SIGNAL, SIGNALLED, EXITED, STILL_RUNNING, REFUSED = (
    Status.WOULD_SIGNAL, Status.SIGNALLED, Status.EXITED, Status.STILL_RUNNING, Status.REFUSED)

# Signals whose purpose is to end the process: after them vram waits and reports who is left (and
# --force follows with SIGKILL).
ENDING = frozenset({_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGKILL})
# The signals whose default action leaves a process running (ignored, or stop and continue). Every
# other one (USR1, ALRM, PIPE, the real-time ones...) ends a process that does not handle, ignore
# or block it, though it is meant as a request to one that handles it: after such a signal vram
# does not wait, it only looks for up to LOOK seconds, so one it ended is reported as exited.
LEAVES_RUNNING = frozenset({_signal.SIGCHLD, _signal.SIGCONT, _signal.SIGSTOP, _signal.SIGTSTP, _signal.SIGTTIN,
                            _signal.SIGTTOU, _signal.SIGURG, _signal.SIGWINCH})
LOOK = 1.0
KILL_GRACE = 5.0  # seconds to wait for an exit after SIGKILL (a process in the driver can take a moment)
# Why a process read in this /proc is refused where /proc is an outer PID namespace's
# (procs.namespaces.proc_numbers_ours): the pid it shows there names another process for a signal.
OTHER_NUMBERING = N_("this /proc is an outer PID namespace's (vram's own namespace has no /proc of its own "
                     "mounted), while a signal goes by the pids of vram's namespace, where this pid is another "
                     "process or none: run vram kill where /proc is the namespace's own (unshare --mount-proc), "
                     "or on the host")
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
            raise KillRequestError(_("name what to signal: processes by pid, or by GPU, user, idle time, zombie "
                                     "state or device-file holders"))


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


class Listed(Protocol):
    """What the snapshot or /proc said of a process at selection (a GpuProcess or HostProcess)."""

    @property
    def user(self) -> str | None: ...
    @property
    def uid(self) -> int | None: ...
    @property
    def name(self) -> str | None: ...
    @property
    def state(self) -> str | None: ...
    @property
    def ppid(self) -> int | None: ...
    @property
    def container(self) -> str | None: ...
    @property
    def workload(self) -> Workload | None: ...
    @property
    def start_ticks(self) -> int | None: ...
    @property
    def start_time(self) -> float | None: ...


@dataclass
class Target:
    """One process to signal (a job on four GPUs is one target), and what became of it.

    It wraps the process's identity, read from /proc at selection (pid, start ticks, owner,
    names; None when the pid maps to no process here: a simulated one, or not visible), and
    its GPU rows from the snapshot. What it is comes from the identity where there is one,
    else from what was listed; nothing is copied between the two."""

    pid: int
    command: str
    listed: Listed | None = None
    identity: procs.Identity | None = None
    rows: list[GpuProcess] = field(default_factory=list)  # its rows in the snapshot (GPU memory)
    devices: tuple[str, ...] = ()  # /dev/nvidia* nodes it holds open (when scanned)
    holder_gpus: tuple[int, ...] = ()
    holder_ns_pids: tuple[int, ...] = ()  # NSpid from the holder scan, when it has no identity
    # Inside a container: GPU -> memory NVML lists under host pids that this process and others here
    # holding that GPU hold between them (which holds what cannot be told: pidmap.py)
    shared: dict[int, int] = field(default_factory=dict)
    synthetic: bool = False  # a scenario's made-up process: nothing real to signal
    unmapped: str | None = None  # why the pid cannot be mapped to a process here
    defunct: bool = False  # every thread has exited: it waits to be reaped and cannot be signalled
    explicit: bool = False  # named by pid
    # --- the outcome
    status: Status = WOULD_SIGNAL
    refusal: Refusal | None = None
    signals: list[str] = field(default_factory=list)
    seconds: float | None = None  # from the first signal until it was seen gone
    notes: list[str] = field(default_factory=list)

    # ------------------------------------------------------------ what it is
    @property
    def start_ticks(self) -> int | None:
        """With the pid, the identity; None: no process here (simulated, or not visible)."""
        if self.identity is not None:
            return self.identity.start_ticks
        return self.listed.start_ticks if self.listed is not None and not self.synthetic else None

    @property
    def uids(self) -> tuple[int, int, int] | None:
        """(real, effective, saved); a simulated process's scenario uid stands for all three."""
        if self.identity is not None:
            return self.identity.uids
        if self.synthetic and self.listed is not None and self.listed.uid is not None:
            return (self.listed.uid,) * 3
        return None

    @property
    def uid(self) -> int | None:
        return self.uids[0] if self.uids else None

    @property
    def user(self) -> str | None:
        listed = self.listed
        if listed is not None and (self.identity is None or listed.uid == self.identity.uids[0]):
            return listed.user
        return procs.user_name(self.identity.uids[0]) if self.identity is not None else None

    def _fact(self, name: str) -> Any:
        """A fact from the identity read at selection, else from what was listed, else None."""
        source: object = self.identity if self.identity is not None else self.listed
        return None if source is None else getattr(source, name)

    @property
    def name(self) -> str:
        return str(self._fact("name") or "")

    @property
    def argv0(self) -> str:
        """Basename of argv[0] (what `exec -a` sets): from /proc, or the listed command's first word."""
        if self.identity is not None:
            return self.identity.argv0
        return self.command.split(" ", 1)[0].rsplit("/", 1)[-1] if self.synthetic else ""

    @property
    def kernel_thread(self) -> bool:
        return self.identity is not None and self.identity.kernel_thread

    @property
    def ns_pids(self) -> tuple[int, ...]:
        if self.identity is not None:
            return self.identity.ns_pids
        return self.holder_ns_pids or (self.pid,)

    @property
    def state(self) -> str | None:
        value: str | None = self._fact("state")
        return value

    @property
    def ppid(self) -> int | None:
        value: int | None = self._fact("ppid")
        return value

    @property
    def start_time(self) -> float | None:
        value: float | None = self._fact("start_time")
        return value

    @property
    def container(self) -> str | None:
        return self.listed.container if self.listed is not None else None

    @property
    def workload(self) -> Workload | None:
        """Its container, pod or Slurm job, as listed (procs/workload.py)."""
        return self.listed.workload if self.listed is not None else None

    @property
    def zombie(self) -> bool:
        """Shown as a zombie (its main thread has exited; other threads may still run)."""
        return self.state == "zombie"

    @property
    def orphaned(self) -> bool:
        return left_to_init(self.pid, self.ppid, read_here=not self.synthetic)

    # ------------------------------------------------------------ what it holds
    @property
    def gpus(self) -> dict[int, int | None]:
        """GPU -> memory NVML lists for it there (its MIG instances on one GPU added up)."""
        out: dict[int, int | None] = {}
        for row in self.rows:
            if row.gpu in out:
                before = out[row.gpu]
                out[row.gpu] = None if before is None or row.memory is None else before + row.memory
            else:
                out[row.gpu] = row.memory
        return out

    @property
    def memory(self) -> int | None:
        known = [r.memory for r in self.rows if r.memory is not None]
        return sum(known) if known else None

    @property
    def all_gpus(self) -> tuple[int, ...]:
        return tuple(sorted({r.gpu for r in self.rows} | set(self.holder_gpus)))

    @property
    def nvml_listed(self) -> bool:
        return bool(self.rows)

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
        # ASCII digits only: int() also takes "1_5" and other scripts' digits
        sig = _signal.Signals(int(text)) if text.isascii() and text.isdigit() else _signal.Signals[
            text if text.startswith("SIG") else "SIG" + text]
    except (KeyError, ValueError):
        raise KillRequestError(_("unknown signal {signal} (try TERM, INT, HUP, KILL, USR1 or a number)").format(
            signal=repr(value)), param="signal") from None
    return sig


def ends_unhandled(sig: int) -> bool:
    """Does sig end a process that does not handle, ignore or block it (its default action)?"""
    return sig not in LEAVES_RUNNING


def check_force(sig: int, force: bool) -> None:
    """force escalates to SIGKILL when the process did not end: only for a signal meant to end it."""
    if force and sig not in ENDING:
        name = _signal.Signals(sig).name
        if ends_unhandled(sig):
            text = _("escalates to SIGKILL after the wait for the process to end, and vram waits only after a "
                     "signal meant to end one (TERM, INT, HUP, QUIT): {signal} ends only a process that does not "
                     "handle, ignore or block it: use TERM (the default), INT or HUP")
        else:
            text = _("escalates to SIGKILL after the wait for the process to end, but {signal} does not end a "
                     "process: use TERM (the default), INT or HUP")
        raise KillRequestError(text.format(signal=name), param="force")
