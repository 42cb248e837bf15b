"""Who a process is: (pid, start ticks), within this boot (ProcessKey); what decides whether it may
be signalled (Identity, read in one go); whether it has ended; its ancestors; PID namespaces.
Used by `vram kill`, the holders scan and leases, never by status/ps: they cost extra reads per pid."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .files import cmdline
from .stat import boot_id, is_defunct, read_stat, start_time, state_name

PF_KTHREAD = 0x00200000  # task flag of kernel threads (include/linux/sched.h)


@dataclass
class Identity:
    """What identifies a process and decides whether it may be signalled, read in one go."""

    pid: int
    start_ticks: int  # start time in clock ticks since boot: with the pid, the process's identity
    start_time: float  # the same as unix time
    state: str
    ppid: int
    uids: tuple[int, int, int]  # real, effective, saved
    name: str  # /proc/PID/comm, sanitized
    argv0: str  # basename of argv[0] (what `exec -a` sets), sanitized; "" for kernel threads
    kernel_thread: bool
    ns_pids: tuple[int, ...]  # NSpid: this pid, then in each nested PID namespace (innermost last)


def _status_fields(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    out = {}
    for line in raw.splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def identity(pid: int) -> Identity | None:
    """The process's identity now, or None when there is no such pid (or it is unreadable)."""
    if pid <= 0:
        return None
    stat = read_stat(pid)
    if stat is None:
        return None
    status = _status_fields(pid)
    if status is None:
        return None
    try:
        real, effective, saved = (int(x) for x in status.get("Uid", "").split()[:3])
    except ValueError:  # fewer than three, or not numbers
        return None
    try:
        ns_pids = tuple(int(x) for x in status.get("NSpid", str(pid)).split())
    except ValueError:
        ns_pids = (pid,)
    argv0 = cmdline(pid).split(" ", 1)[0]
    return Identity(pid=pid, start_ticks=stat.start_ticks, start_time=start_time(stat.start_ticks),
                    state=state_name(stat.state), ppid=stat.ppid, uids=(real, effective, saved), name=stat.name,
                    argv0=argv0.rsplit("/", 1)[-1].rstrip(":"),
                    kernel_thread=bool(stat.flags & PF_KTHREAD), ns_pids=ns_pids or (pid,))


def gone(pid: int, start_ticks: int) -> bool:
    """Has the process (pid, start_ticks) ended: reaped, replaced by another, or defunct?"""
    now = identity(pid)
    return now is None or now.start_ticks != start_ticks or is_defunct(pid)


def ancestors(pid: int | None = None) -> list[int]:
    """pid (default: this process) and its parents up to pid 1, nearest first."""
    chain: list[int] = []
    current = os.getpid() if pid is None else pid
    while current > 0 and current not in chain:
        chain.append(current)
        found = identity(current)
        if found is None:
            break
        current = found.ppid
    return chain


ALIVE, GONE, REUSED, OTHER_BOOT = "alive", "gone", "reused", "other boot"


@dataclass(frozen=True)
class ProcessKey:
    """One process across the machine's life: its pid, its start ticks (a pid is reused, a pid
    with its start ticks is not) and the boot they count from (boot_id: None where unreadable).
    What a lease records of its holder and its job."""

    pid: int
    start_ticks: int
    boot_id: str | None

    @classmethod
    def of(cls, pid: int) -> ProcessKey | None:
        """The process that has `pid` now, None when there is none (or it cannot be read)."""
        stat = read_stat(pid) if pid > 0 else None
        return None if stat is None else cls(pid, stat.start_ticks, boot_id())

    def status(self) -> str:
        """ALIVE (the pid is still this process), GONE (no such pid now), REUSED (the pid is
        another process's) or OTHER_BOOT (recorded in a boot before this one: gone with it).
        A defunct process whose pid is not yet reaped is ALIVE: its pid is not free."""
        now = boot_id()
        if self.boot_id is not None and now is not None and self.boot_id != now:
            return OTHER_BOOT
        stat = read_stat(self.pid)
        if stat is None:
            return GONE
        return ALIVE if stat.start_ticks == self.start_ticks else REUSED

    @property
    def start_time(self) -> float:
        """Its start as unix time (to a second), for counting time, never for identity."""
        return start_time(self.start_ticks)
