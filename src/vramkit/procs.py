"""The host side of a process, read straight from /proc.

vramkit runs on Linux GPU servers; reading /proc directly costs a few file reads per pid and
keeps `vram status` fast (importing psutil alone costs ~30 ms). Process names and command
lines come from other users, so they are stripped of control characters here, once.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "Z": "zombie", "T": "stopped",
           "t": "tracing-stop", "X": "dead", "I": "idle", "W": "paging", "P": "parked"}
_CONTAINER_RE = re.compile(r"(?:docker|containerd|crio|libpod|cri-containerd)[-/:]?([0-9a-f]{64})"
                           r"|/([0-9a-f]{64})(?:\.scope)?$", re.M)
# Characters that reorder or hide text: Unicode format characters (Cf: U+202E right-to-left
# override, the bidi isolates, zero-width space/joiners, the BOM, soft hyphen, tag characters ...),
# the line separator (Zl, U+2028) and the paragraph separator (Zp, U+2029). Literal ranges,
# because scanning every code point with unicodedata at import costs ~120 ms. Generated with
# Python 3.11 (Unicode 14.0):
#   [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp")]
# merged into ranges; Unicode 15.0 extends the Egyptian hieroglyph format controls to U+1343F.
_FORMAT_RANGES = (
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F),
    (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E),
    (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
    (0xD800, 0xDFFF),  # lone surrogates (text decoded with surrogateescape, JSON \ud800): not printable
)
NOT_VISIBLE = "not visible in /proc: the process exited, or runs in another PID namespace"
_control: dict[int, str] = {}  # the str.translate table, built on first use (~0.4 ms): see _control_table


def _control_table() -> dict[int, str]:
    """Control characters (C0, DEL, C1) and the ranges above -> '?'."""
    if not _control:
        _control.update(dict.fromkeys([*range(0x00, 0x20), *range(0x7F, 0xA0),
                                       *(c for low, high in _FORMAT_RANGES for c in range(low, high + 1))], "?"))
    return _control


def sanitize(text: str) -> str:
    """Replace control characters (terminal escapes, newlines, tabs...) and the characters that
    reorder or hide text (Unicode categories Cf, Zl, Zp: U+202E, zero-width spaces, U+2028...)
    with '?'."""
    # Printable ASCII (0x20-0x7E) holds none of them: most command lines need no table at all.
    if text.isascii() and text.isprintable():
        return text
    return text.translate(_control_table())


@dataclass
class HostProcess:
    """A process's host side, from /proc (or a scenario's made-up process)."""

    pid: int
    user: str | None
    uid: int | None
    command: str
    name: str
    state: str
    start_time: float  # unix time
    cpu_time: float  # seconds of user + system CPU
    rss: int  # bytes
    ppid: int
    container: str | None
    start_ticks: int | None = None  # clock ticks since boot: with the pid, the process's identity
    real: bool = True  # False: a simulated scenario's made-up process (nothing here to signal)


class Stat:
    """/proc/PID/stat (or a task's): the fields vramkit uses (see proc(5) for their numbers), each parsed
    when it is read: the simulator asks every snapshot for only the state and start ticks."""

    __slots__ = ("_name", "_fields")

    def __init__(self, raw: bytes):
        close = raw.rfind(b")")  # the name may hold spaces and ')': it ends at the last ')'
        self._name = raw[raw.find(b"(") + 1:close]
        self._fields = raw[close + 2:].split()  # _fields[0] is stat field 3 (state)

    @property
    def name(self) -> str:
        """comm, sanitized."""
        return sanitize(self._name.decode(errors="replace"))

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


def read_stat(pid: int) -> Stat | None:
    """The pid's stat, or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return Stat(f.read())
    except OSError:
        return None


def state_name(letter: str) -> str:
    return _STATES.get(letter, letter)


_USERS: dict[int, str] = {}


def user_name(uid: int) -> str:
    """The user name of uid; the number itself when this machine has no name for it (e.g. a uid
    from a container's /etc/passwd)."""
    name = _USERS.get(uid)
    if name is None:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        _USERS[uid] = name
    return name


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

    def read(self, pid: int) -> bytes:
        """The stat line (b"" or OSError when the process is gone or unreadable)."""
        with self._lock:
            return self._read(pid)

    def _read(self, pid: int) -> bytes:
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
        if len(self._fds) < self._keep:
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


MAX_CMDLINE_BYTES = 256 * 1024  # a command line is another user's text: bounded (ARG_MAX is ~2 MiB)
MAX_CGROUP_BYTES = 64 * 1024


def _read_proc_file(path: str, limit: int) -> bytes | None:
    """At most `limit` bytes of a /proc file (None: unreadable). Plain os reads: a one-shot
    `vram status` reads two such files per process, and open() costs twice as much."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(limit - size, 8192))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


MAX_ENVIRON_BYTES = 4 * 1024 * 1024  # environ is another user's text and can be megabytes: read this much at most
ENV_NOT_VISIBLE = "not visible (another user's process)"
# root is refused too where the kernel's ptrace rules (Yama, a dumpable-flag cleared) keep it out
ENV_REFUSED_TO_ROOT = "not visible (the kernel refused to show its environment)"


@dataclass
class Environ:
    """Some variables of a process's environment as it started (a change the process made to
    itself later, os.environ in Python, is not in /proc), or why they cannot be read."""

    values: dict[str, str]  # the wanted names that are set, sanitized
    problem: str | None = None  # why nothing could be read (values is then empty)
    truncated: bool = False  # the environment is longer than the bound: a name not found may be set after it


def read_environ(pid: int, names: tuple[str, ...], limit: int = MAX_ENVIRON_BYTES) -> Environ:
    """The values of `names` in /proc/PID/environ. Read in chunks, keeping only the wanted
    entries, at most `limit` bytes; the file is opened without following a symlink (a /proc
    entry is never one; pid is an int, so the path names no other directory)."""
    wanted = {n.encode(): n for n in names}
    try:
        fd = os.open(f"/proc/{int(pid)}/environ", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except PermissionError:
        return Environ({}, ENV_REFUSED_TO_ROOT if os.geteuid() == 0 else ENV_NOT_VISIBLE)
    except FileNotFoundError:
        return Environ({}, NOT_VISIBLE)
    except OSError as e:
        return Environ({}, f"cannot read its environment: {e.strerror}")
    found: dict[str, str] = {}
    pending = b""  # an entry cut by the chunk boundary
    size = 0
    truncated = False
    try:
        while size < limit:
            chunk = os.read(fd, min(limit - size, 65536))
            if not chunk:
                break
            size += len(chunk)
            *entries, pending = (pending + chunk).split(b"\0")
            for entry in entries:
                key, eq, value = entry.partition(b"=")
                if eq and key in wanted:
                    found[wanted[key]] = sanitize(value[:4096].decode(errors="replace"))
            if len(pending) > 65536:  # one entry longer than that is none we want: skip to its end
                pending = pending[:65536]
        else:  # the bound reached: is there more?
            truncated = bool(os.read(fd, 1))
    except PermissionError:  # the open succeeds for a process whose environ ptrace rules hide
        return Environ({}, ENV_REFUSED_TO_ROOT if os.geteuid() == 0 else ENV_NOT_VISIBLE)
    except OSError as e:  # ESRCH: it exited meanwhile
        return Environ({}, NOT_VISIBLE if e.errno == errno.ESRCH else f"cannot read its environment: {e.strerror}")
    finally:
        os.close(fd)
    if pending and not truncated:  # the last entry has no NUL after it
        key, eq, value = pending.partition(b"=")
        if eq and key in wanted:
            found[wanted[key]] = sanitize(value[:4096].decode(errors="replace"))
    return Environ(found, truncated=truncated)


@dataclass
class HostLoad:
    """The host's CPU time counters and memory, from /proc/stat and /proc/meminfo. CPU % is the
    busy share of the ticks between two readings (busy_percent)."""

    cpu_busy: int  # clock ticks spent not idle (nor waiting for I/O), all CPUs
    cpu_total: int
    cpus: int
    mem_total: int | None  # bytes
    mem_available: int | None
    swap_total: int | None
    swap_free: int | None

    def busy_percent(self, before: HostLoad | None) -> float | None:
        if before is None or self.cpu_total <= before.cpu_total:
            return None
        return 100 * (self.cpu_busy - before.cpu_busy) / (self.cpu_total - before.cpu_total)


def read_host_load() -> HostLoad | None:
    """The host's load now (None: /proc/stat unreadable)."""
    stat = _read_proc_file("/proc/stat", 64 * 1024)
    if not stat:
        return None
    cpus = 0
    busy = total = 0
    for line in stat.split(b"\n"):
        if line.startswith(b"cpu "):
            ticks = [int(x) for x in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
            total = sum(ticks)
            busy = total - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        elif line.startswith(b"cpu"):
            cpus += 1
    mem: dict[bytes, int] = {}
    for line in (_read_proc_file("/proc/meminfo", 16 * 1024) or b"").split(b"\n"):
        key, _, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree") and rest.split():
            mem[key] = int(rest.split()[0]) * 1024  # kB
    return HostLoad(busy, total, cpus, mem.get(b"MemTotal"), mem.get(b"MemAvailable"), mem.get(b"SwapTotal"),
                    mem.get(b"SwapFree"))


class ProcessTable:
    """Reads processes from /proc, remembering what does not change between reads."""

    def __init__(self) -> None:
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._boot = _boot_time()
        # (pid, start ticks) -> (command, container): what does not change while a process lives,
        # so watch loops and the live view read /proc/PID/stat only.
        self._fixed: dict[tuple[int, int], tuple[str, str | None]] = {}
        self.stats = StatFiles()

    def read(self, pid: int) -> HostProcess | str:
        """The process, or a one-line reason why its host side cannot be read."""
        base = f"/proc/{pid}"
        try:
            raw = self.stats.read(pid)
            uid = os.stat(base).st_uid
        except (FileNotFoundError, ProcessLookupError):
            return NOT_VISIBLE
        except PermissionError:
            return "no permission to read /proc for this pid"
        except OSError as e:
            return f"cannot read /proc/{pid}: {e.strerror}"
        if not raw:
            return NOT_VISIBLE
        stat = Stat(raw)
        state, ticks, name = state_name(stat.state), stat.start_ticks, stat.name
        key = (pid, ticks)
        fixed = self._fixed.get(key)
        if fixed is None or state == "zombie":  # a zombie's cmdline is empty: read it as it is
            fixed = self._fixed[key] = (self._cmdline(base) or f"[{name}]", self._container(base))
        command, container = fixed
        return HostProcess(pid=pid, user=user_name(uid), uid=uid, command=command, name=name,
                           state=state, start_time=self._boot + ticks / self._ticks,
                           cpu_time=stat.cpu_ticks / self._ticks, rss=stat.rss_pages * self._page,
                           ppid=stat.ppid, container=container, start_ticks=ticks)

    def forget_all_but(self, pids: set[int]) -> None:
        """Drop what is remembered about processes not in `pids` (the latest snapshot's), so a
        long-running view does not grow with every process that came and went."""
        if any(k[0] not in pids for k in self._fixed):
            self._fixed = {k: v for k, v in self._fixed.items() if k[0] in pids}
        self.stats.forget_all_but(pids)

    def close(self) -> None:
        self.stats.close()

    @staticmethod
    def _cmdline(base: str) -> str:
        raw = _read_proc_file(f"{base}/cmdline", MAX_CMDLINE_BYTES)
        return sanitize(raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")) if raw else ""

    @staticmethod
    def _container(base: str) -> str | None:
        raw = _read_proc_file(f"{base}/cgroup", MAX_CGROUP_BYTES)
        if raw is None:
            return None
        match = _CONTAINER_RE.search(raw.decode(errors="replace"))
        if not match:
            return None
        return (match.group(1) or match.group(2))[:12]


def cpu_percent_since(proc: HostProcess, now: float,
                      previous: dict[tuple[int, int | None], tuple[float, float]]) -> float:
    """CPU % since the previous reading of this process in `previous` (updated; keyed by pid and
    start ticks), else averaged over its lifetime (as ps does)."""
    key = (proc.pid, proc.start_ticks)
    before = previous.get(key)
    previous[key] = (proc.cpu_time, now)
    if before is not None and now > before[1]:
        return max(0.0, 100 * (proc.cpu_time - before[0]) / (now - before[1]))
    lifetime = now - proc.start_time
    return 100 * proc.cpu_time / lifetime if lifetime > 0 else 0.0


# ---------------------------------------------------------------- identity, namespaces, signalling
# Used by `vram kill` and the holders scan, never by status/ps: they cost extra reads per pid.

PF_KTHREAD = 0x00200000  # task flag of kernel threads (include/linux/sched.h)
# The inode number of the initial PID namespace (PROC_PID_INIT_INO in include/linux/proc_ns.h).
INITIAL_PID_NS_INODE = 0xEFFFFFFC


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


_BOOT: float | None = None
_TICKS = os.sysconf("SC_CLK_TCK")


def boot_time() -> float:
    global _BOOT
    if _BOOT is None:
        _BOOT = _boot_time()
    return _BOOT


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
    argv0 = ProcessTable._cmdline(f"/proc/{pid}").split(" ", 1)[0]
    return Identity(pid=pid, start_ticks=stat.start_ticks, start_time=boot_time() + stat.start_ticks / _TICKS,
                    state=state_name(stat.state), ppid=stat.ppid, uids=(real, effective, saved), name=stat.name,
                    argv0=argv0.rsplit("/", 1)[-1].rstrip(":"),
                    kernel_thread=bool(stat.flags & PF_KTHREAD), ns_pids=ns_pids or (pid,))


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


def in_initial_pid_namespace() -> bool | None:
    """Whether this process sees the host's PID namespace (the one NVML reports pids in);
    None when it cannot be told."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INITIAL_PID_NS_INODE
    except OSError:
        return None


class Pinned:
    """A process held by a pidfd after its identity was checked: a signal sent through the pidfd
    reaches that process or nobody, even if the pid is reused in between. Where the kernel has
    no pidfd_open (before 5.3) the identity is checked again just before each os.kill."""

    def __init__(self, pid: int, start_ticks: int, fd: int | None, now: Identity):
        self.pid, self.start_ticks, self.fd, self.identity = pid, start_ticks, fd, now

    def send(self, sig: int) -> str | None:
        """Send sig. None when sent, else why not: 'exited', 'identity' or 'permission'."""
        if self.pid <= 1 or self.pid == os.getpid():  # last line of defence; protect.py says why
            return "permission"
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                if gone(self.pid, self.start_ticks):
                    return "identity" if identity(self.pid) is not None else "exited"
                os.kill(self.pid, sig)
        except ProcessLookupError:
            return "exited"
        except PermissionError:
            return "permission"
        return None

    def gone(self) -> bool:
        return gone(self.pid, self.start_ticks)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def pin(pid: int, start_ticks: int) -> Pinned | str:
    """Hold (pid, start_ticks) for signalling, or say why not: 'exited' (no such pid, or it is
    defunct) or 'identity' (the pid now belongs to another process)."""
    fd = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return "exited"
    except (AttributeError, OSError) as e:  # no pidfd_open in this kernel or Python
        if isinstance(e, OSError) and e.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            raise
    # Read the identity after opening the pidfd: if it still matches, the pidfd holds the
    # process recorded at selection (a pid is only reused after that process is gone).
    now = identity(pid)
    if now is None:
        _close(fd)
        return "exited"
    if now.start_ticks != start_ticks:
        _close(fd)
        return "identity"
    return Pinned(pid, start_ticks, fd, now)


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def wait_gone(pinned: list[Pinned], deadline: float,
              tick: Callable[[list[int]], object] | None = None) -> dict[int, float]:
    """Wait until each pinned process has ended or time.monotonic() passes deadline. Returns
    {pid: time.monotonic() when it was seen gone}. tick(remaining pids) is called about every
    0.1 s (progress lines)."""
    ended: dict[int, float] = {}
    poller = select.poll()
    by_fd: dict[int, Pinned] = {}
    for p in pinned:
        if p.fd is not None:
            poller.register(p.fd, select.POLLIN)
            by_fd[p.fd] = p
    while True:
        for p in pinned:
            if p.pid not in ended and p.gone():
                ended[p.pid] = time.monotonic()
        remaining = [p.pid for p in pinned if p.pid not in ended]
        if not remaining or time.monotonic() >= deadline:
            return ended
        if tick is not None:
            tick(remaining)
        wait = min(0.1, max(0.0, deadline - time.monotonic()))
        if by_fd:
            for fd, _ in poller.poll(wait * 1000):
                # Readable: the whole thread group has exited (it may be a zombie until reaped).
                ended.setdefault(by_fd[fd].pid, time.monotonic())
                poller.unregister(fd)
                del by_fd[fd]
        else:
            time.sleep(wait)
