"""/proc/PID/stat: the one parser, the readers built on it (kept-open descriptors for watch
loops, parents, zombies), and what turns its start ticks into time: the boot time, the clock
tick, and the boot id that tells one boot's ticks from another's."""

from __future__ import annotations

import os
import threading

from .text import sanitize

_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "Z": "zombie", "T": "stopped",
           "t": "tracing-stop", "X": "dead", "I": "idle", "W": "paging", "P": "parked"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # start ticks and CPU time are counted in these per second


class Stat:
    """/proc/PID/stat (or a task's): the fields vramkit uses (see proc(5) for their numbers), each parsed
    when it is read: the simulator asks every snapshot for only the state and start ticks."""

    __slots__ = ("_name", "_fields")

    def __init__(self, raw: bytes):
        close = raw.rfind(b")")  # the name may hold spaces and ')': it ends at the last ')'
        self._name = raw[raw.find(b"(") + 1:close]
        # _fields[0] is stat field 3 (state); split only up to rss (field 24), the last one read:
        # the thirty fields after it would be split for nothing, for every process on every tick.
        self._fields = raw[close + 2:].split(None, 22)

    @property
    def name(self) -> str:
        """comm, sanitized."""
        return sanitize(self._name.decode(errors="replace"))

    @property
    def raw_name(self) -> bytes:
        """comm as the kernel wrote it: to tell whether it changed without sanitizing it again."""
        return self._name

    @property
    def state(self) -> str:
        """The state letter: R, S, D, Z, T, ..."""
        return self._fields[0].decode()

    @property
    def ppid(self) -> int:
        return int(self._fields[1])

    @property
    def flags(self) -> int:
        """PF_* task flags."""
        return int(self._fields[6])

    @property
    def cpu_ticks(self) -> int:
        """User + system CPU time, in clock ticks."""
        return int(self._fields[11]) + int(self._fields[12])

    @property
    def start_ticks(self) -> int:
        """Start time in clock ticks since boot: with the pid, the process's identity."""
        return int(self._fields[19])

    @property
    def rss_pages(self) -> int:
        return int(self._fields[21])

    @property
    def exec_mark(self) -> bytes:
        """What tells one exec from the next under the same pid, start ticks and comm (a launcher that
        execs python again): the stack's start address (field 28), new at every exec where the
        stack is randomized. The kernel writes 0 to a reader that may not ptrace the process (another
        user's, for an ordinary user): then only comm tells."""
        return self.marks(0)[0]

    def marks(self, size: int) -> tuple[bytes, int]:
        """(exec_mark, how many bytes of the line, `size` bytes long, hold every field vramkit
        reads: up to the exec mark and the separator after it; 0 when no field follows it). A
        later line that starts with those bytes says the same of every field read (the name ends
        at the line's last ')'; the fields after it are numbers)."""
        rest = self._fields[22].split(None, 4) if len(self._fields) > 22 else []
        return rest[3] if len(rest) > 3 else b"", size - len(rest[4]) if len(rest) > 4 else 0

    def changing(self) -> tuple[str, int, int, int, int]:
        """(state_name(state), start ticks, ppid, CPU ticks, rss pages): what a watch loop reads of
        every process on every tick, in one call instead of one per property."""
        f = self._fields
        letter = f[0].decode()
        return _STATES.get(letter, letter), int(f[19]), int(f[1]), int(f[11]) + int(f[12]), int(f[21])


def read_stat(pid: int) -> Stat | None:
    """The pid's stat, or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return Stat(f.read())
    except OSError:
        return None


def state_name(letter: str) -> str:
    return _STATES.get(letter, letter)


def parent(pid: int) -> int | None:
    stat = read_stat(pid)
    return None if stat is None else stat.ppid


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `pid` is `ancestor` or one of its descendants (torchrun's workers, a shell's python)."""
    for _ in range(64):
        if pid == ancestor:
            return True
        up = parent(pid)
        if up is None or up <= 1:
            return False
        pid = up
    return False


def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    return 0.0


_BOOT: list[float] = []  # read once: the boot time does not change while we run
_BOOT_ID: list[str | None] = []


def boot_time() -> float:
    """When this machine booted (unix time, whole seconds: /proc/stat's btime)."""
    if not _BOOT:
        _BOOT.append(_boot_time())
    return _BOOT[0]


def start_time(start_ticks: int) -> float:
    """Start ticks as unix time (to a second: the boot time is in whole seconds). For showing and
    for counting time, never for telling processes apart: compare ticks for that."""
    return boot_time() + start_ticks / CLOCK_TICKS


def boot_id() -> str | None:
    """This boot's id (/proc/sys/kernel/random/boot_id, a random UUID the kernel draws at boot;
    the same inside containers): start ticks count from one boot, so (pid, start ticks) names one
    process only together with it. None where it cannot be read."""
    if not _BOOT_ID:
        try:
            with open("/proc/sys/kernel/random/boot_id", "rb") as f:
                text = f.read(64).decode("ascii", errors="replace").strip()
        except OSError:
            text = ""
        _BOOT_ID.append(text or None)
    return _BOOT_ID[0]


def is_defunct(pid: int) -> bool:
    """True when every thread of pid has exited: a zombie waiting to be reaped. A process whose
    main thread exited shows 'Z' too, but lives (and holds its GPU memory) while others run."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        if Stat(raw).state not in ("Z", "X"):
            return False
    return True


MAX_KEPT_FDS = 8192  # descriptors one cache keeps open, at most (see kept_fds_limit)


def kept_fds_limit() -> int:
    """How many descriptors one cache of open files (StatFiles, the simulator's pidfds) may keep:
    MAX_KEPT_FDS, or a quarter of this process's limit where that is lower (a server's default
    soft limit is often 1024): past it a file is opened and closed on each read, instead of
    opening failing (EMFILE) for the cache and for the rest of the program."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_KEPT_FDS if soft == resource.RLIM_INFINITY else max(0, min(MAX_KEPT_FDS, soft // 4))


class StatFiles:
    """/proc/PID/stat of watched processes, through descriptors kept open: a re-read is one pread
    (3.5 us, where open, read and close take 12). A descriptor belongs to one process: once it
    exits, reading it fails (ESRCH), even if its pid is used again, so nothing stale is read."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}  # pid -> an open descriptor of /proc/PID/stat
        self._keep = kept_fds_limit()
        self._lock = threading.Lock()  # the pynvml shim serves threaded programs (nvitop)

    def read(self, pid: int, keep: bool = True) -> bytes:
        """The stat line (b"" or OSError when the process is gone or unreadable). keep=False: its
        descriptor is not kept open (a caller whose descriptors share this one's limit)."""
        with self._lock:
            return self._read(pid, keep)

    def kept(self) -> int:
        """How many descriptors are kept open."""
        return len(self._fds)

    def holds(self, pid: int) -> int:
        """1 when pid's descriptor is kept open, else 0."""
        return int(pid in self._fds)

    def forget(self, pid: int) -> None:
        """Close pid's kept descriptor, if there is one."""
        with self._lock:
            fd = self._fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def _read(self, pid: int, keep: bool = True) -> bytes:
        fd = self._fds.get(pid)
        if fd is not None:
            try:
                raw = os.pread(fd, 4096, 0)
                if raw:
                    return raw
            except OSError:
                pass
            os.close(self._fds.pop(pid))  # that process is gone; the pid may be another's now
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 4096)
        except BaseException:
            os.close(fd)
            raise
        if keep and len(self._fds) < self._keep:
            self._fds[pid] = fd
        else:
            os.close(fd)
        return raw

    def stat(self, pid: int) -> Stat | None:
        """read() parsed, or None when the process is gone or unreadable."""
        try:
            raw = self.read(pid)
        except OSError:
            return None
        return Stat(raw) if raw else None

    def forget_all_but(self, pids: set[int]) -> None:
        with self._lock:
            for pid in [p for p in self._fds if p not in pids]:
                os.close(self._fds.pop(pid))

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def __del__(self) -> None:  # dropped without close() (a one-shot kill plan's table)
        try:
            self.close()
        except (AttributeError, OSError):
            pass
