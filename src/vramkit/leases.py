"""Leases: a GPU vram handed out stays reserved until its job shows up on it in NVML, exits,
or the lease times out, so that concurrent launchers never hand out the same GPU twice.

Everything lives in one directory shared by the machine's users (docs/leases.md):

  .lock                 flock'd (exclusively, for milliseconds) around every read-decide-write, so
                        that launchers take turns; one that is held too long is gone around
  gpu-KEY.lock          one per GPU (or MIG instance) of the machine: no lease is written for a
                        GPU without holding its lock, so whoever holds one blocks that GPU only;
                        its owner may swap it for another file, so a lease is also checked after
                        it is written (create_lease)
  lease-ID.json         a lease: which units, whose, until when (replaced atomically)
  lease-ID.lock         held (flock) by the launcher and, inherited, by its job: while anyone
                        holds it the lease is alive; when both are gone (even by SIGKILL) the
                        kernel drops the lock and the lease is stale at once
  wait-SEQ-PID.json     a waiter's ticket (its policy), flock'd by the waiter; SEQ orders the queue

A crashed holder needs no clean-up: the next vram that reads the directory sees the lock free
(or the time up) and removes the files it may remove (in a sticky directory, the owner's).
Locks are flock(2) through Python's fcntl module: they belong to the open file, so a job
started with the lease's file descriptor keeps the lease alive after its launcher is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import secrets
import shlex
import socket
import stat
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import VramkitError
from .procs import boot_time, descends_from, read_stat, sanitize, user_name

ENV_DIR = "VRAM_LEASE_DIR"
ENV_TIMEOUT = "VRAM_LEASE_TIMEOUT"
SHARED_DIR = Path("/tmp/vramkit-leases")
DEFAULT_TIMEOUT = 600.0  # seconds a lease waits for its job to appear on the GPU
MAX_LEASE = 24 * 3600.0  # no lease lasts longer, whatever its file says
HOLD_PATIENCE = 2.0  # seconds one holder may keep a lock before vram goes around it (vram holds one for ms)
LOCK_PATIENCE = 30.0  # seconds a lock may change hands without this vram getting it, before it goes around
PID_SLACK = 1.0  # seconds: a process's start time from /proc is exact to the boot time's second
MAX_UNIT_LOCKS = 256  # GPU lock files taken per look (a machine has at most a few dozen GPUs and MIG slices)
MAX_UNIT_LOCKS_PER_OWNER = 64  # of them from one owner: another user's junk cannot make every look slow
MAX_FILE = 64 * 1024  # bytes: a lease or ticket is a few hundred; anything larger is junk, never read
MAX_PER_OWNER = 256  # lease and ticket files read per owner per round; the rest of theirs are ignored
RELOCKS = 4  # tries to lock a GPU's lock file that keeps being replaced (create_lease's check still guards)
_LEASE_RE = re.compile(r"^lease-([0-9a-z-]+)\.json$")
# A ticket's SEQ is written with at least 10 digits and read with up to 19: a waiter takes the
# highest live SEQ + 1, so a ticket planted at 9999999999 must not push the next ones out of sight.
_TICKET_RE = re.compile(r"^wait-(\d{10,19})-(\d+)\.json$")
MAX_SEQ = 10**19 - 1  # the last queue number (only a planted ticket gets near it)
_TICKS = os.sysconf("SC_CLK_TCK")
_UNIT_LOCK_RE = re.compile(r"^gpu-([A-Za-z0-9_.%-]{1,600})\.lock$")


class LeaseError(VramkitError):
    """The lease directory cannot be used. The message is one line."""


class LeaseConflict(LeaseError):
    """Another launcher reserved a chosen GPU while this one was choosing (possible only while the
    directory lock is gone around: for a GPU not locked from the look's start, or whose lock file
    its owner swapped): nothing was reserved; choosing again gives a right answer."""


_PIDNS: list[str | None] = []  # this process's pid namespace, read once (a process never changes its own)


def _pidns() -> str | None:
    if not _PIDNS:
        try:
            _PIDNS.append(os.readlink("/proc/self/ns/pid"))
        except OSError:
            _PIDNS.append(None)
    return _PIDNS[0]


# ---------------------------------------------------------------- the directory

@dataclass
class LeaseDir:
    path: Path
    shared: bool  # shared by the machine's users (else per-user: only your own jobs coordinate)
    note: str | None = None  # why the shared directory was not used
    # Told once per file about lease-directory entries that were ignored (other users' junk) and
    # about locks held too long: one line each time something new is found. None: warnings.warn.
    on_warning: Callable[[str], None] | None = field(default=None, repr=False)
    # In a look (locked()): GPU keys whose lock could not be taken -> who keeps it ("pid P of user U (comm), ...")
    locked_out: dict[str, str] = field(default_factory=dict, repr=False)
    _lock_fd: int | None = field(default=None, repr=False)
    _warned: set[str] = field(default_factory=set, repr=False)
    _look: list[tuple[int, bool]] | None = field(default=None, repr=False)  # (fd, close it after) held now
    _units_held: set[str] = field(default_factory=set, repr=False)  # GPU keys locked since the look began
    _seen: set[str] = field(default_factory=set, repr=False)  # lease ids read_state returned in this look
    # Other users seen keeping a lock too long: locks their processes hold are gone around at once,
    # so that many locks held by one neighbour cost one wait, not one each. Of one's own user, the
    # very processes (one's own vrams hold locks for milliseconds and must not be gone around).
    _hostile_uids: set[int] = field(default_factory=set, repr=False)
    _hostile_pids: set[int] = field(default_factory=set, repr=False)

    def warn(self, line: str) -> None:
        """`line` once per LeaseDir: to on_warning, else as a RuntimeWarning."""
        if line in self._warned:
            return
        self._warned.add(line)
        if self.on_warning is not None:
            self.on_warning(line)
        else:
            import warnings
            warnings.warn(line, RuntimeWarning, stacklevel=3)

    def warn_ignored(self, ignored: list[str]) -> None:
        """One warning line for the entries in `ignored` ("path (owner: why)") not reported yet."""
        new = [i for i in ignored if f"ignored:{i}" not in self._warned]
        if not new:
            return
        self._warned.update(f"ignored:{i}" for i in new)
        shown = "; ".join(new[:3]) + (f"; and {len(new) - 3} more" if len(new) > 3 else "")
        self.warn(f"ignored in the lease directory (not a valid lease or ticket): {shown}")

    @contextlib.contextmanager
    def locked(self, patience: float = HOLD_PATIENCE, units: Iterable[str] = ()) -> Iterator[None]:
        """A look at the directory: hold it only for a read-decide-write, never across a wait.

        Takes the directory lock, so that launchers take turns, then the lock of every GPU leased
        here before and of the GPU keys in `units` (the machine's: then even a GPU never leased
        here cannot be chosen by two launchers at once while the directory lock is gone around,
        see create_lease). A lock that one holder keeps for `patience` seconds (a vram keeps one for
        milliseconds: this holder is stopped or hostile) is gone around and named once in a
        warning: the GPUs stay usable, guarded by their own locks; a GPU whose lock is held that
        long is reserved by its holder for this look (read_state says so, naming them)."""
        if self._look is not None:
            yield  # already looking (a nested call): the locks are held
            return
        self._look, self.locked_out, self._units_held, self._seen = [], {}, set(), set()
        try:
            self._lock_directory(patience)
            for key in sorted({*_unit_lock_keys(self.path), *units}, key=_unit_lock_name):
                why = self.hold_unit(key, patience)
                if why is not None:
                    self.locked_out[key] = why
            yield
        finally:
            for fd, close in reversed(self._look):
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                if close:
                    os.close(fd)
            self._look = None

    def _lock_directory(self, patience: float) -> None:
        path = self.path / ".lock"
        try:
            if self._lock_fd is None:
                self._lock_fd = _open_shared(path)
        except LeaseError as e:  # a symlink, FIFO, directory, mode 000...: theirs to remove
            self.warn(f"{e}; going around it: each GPU has a lock of its own")
            return
        pid = self._acquire(self._lock_fd, patience)
        if pid is None:
            assert self._look is not None
            self._look.append((self._lock_fd, False))
            return
        self.warn(f"the lease directory lock {path} is held by {_describe(pid)} for {patience:g}s or more; "
                  "going around it: each GPU has a lock of its own")

    def hold_unit(self, key: str, patience: float = HOLD_PATIENCE) -> str | None:
        """Take GPU `key`'s lock for the rest of this look (creating its file): None once held,
        else who keeps the GPU from being leased (a holder, or a file that is not a lock). Call
        inside locked()."""
        assert self._look is not None, "hold_unit() outside locked()"
        if key in self._units_held:
            return None
        path = self.path / _unit_lock_name(key)
        for attempt in range(RELOCKS):
            try:
                fd = _open_shared(path)
            except LeaseError as e:
                return f"its lock file, which cannot be used: {e}"
            pid = self._acquire(fd, patience)
            if pid is not None:
                os.close(fd)
                return f"{_describe(pid)}, which holds its lock in the lease directory"
            if _names(path, fd) or attempt == RELOCKS - 1:
                break
            # Replaced meanwhile (its owner may unlink it in the sticky directory): a lock on a
            # file no longer at that name keeps nobody out. Take the lock of the one that is.
            self.warn(f"the lock file {path} was replaced while this vram locked it (its owner now: {_owner(path)}); "
                      "leases are checked after they are written, so no GPU is given twice")
            os.close(fd)
        self._look.append((fd, True))
        self._units_held.add(key)
        self.locked_out.pop(key, None)
        return None

    def _acquire(self, fd: int, patience: float) -> int | None:
        """_acquire, giving up at once on a lock held by a process seen keeping one too long, or by
        another user one of whose processes was."""
        pid = _acquire(fd, patience, lambda holder: holder in self._hostile_pids or
                       _uid_of(holder) in self._hostile_uids)
        if pid:
            self._hostile_pids.add(pid)
            uid = _uid_of(pid)
            if uid is not None and uid != os.getuid():
                self._hostile_uids.add(uid)
        return pid

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def change_stamp(self) -> int:
        """Changes whenever a lease or ticket is created or removed (waiters watch it)."""
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return 0


def _unit_lock_name(key: str) -> str:
    """gpu-KEY.lock, KEY with any byte outside [A-Za-z0-9_.-] written %XX (a key names a GPU
    by UUID: GPU-..., MIG-...)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else
                   "".join(f"%{b:02X}" for b in c.encode()) for c in key)
    return f"gpu-{safe}.lock"


def _unit_key(name: str) -> str | None:
    """The GPU key of a gpu-KEY.lock name, None for another name."""
    m = _UNIT_LOCK_RE.match(name)
    if not m:
        return None
    raw, out, i = m.group(1), bytearray(), 0
    while i < len(raw):
        if raw[i] == "%":
            try:
                out.append(int(raw[i + 1:i + 3], 16))
            except ValueError:
                return None
            i += 3
        else:
            out.append(ord(raw[i]))
            i += 1
    try:
        key = out.decode()
    except UnicodeDecodeError:
        return None
    return key if _unit_lock_name(key) == name else None


def _unit_lock_keys(path: Path) -> list[str]:
    """Keys of the GPU lock files in the directory (locked() takes them in name order, as every
    vram does, so two never wait for each other), at most MAX_UNIT_LOCKS and MAX_UNIT_LOCKS_PER_OWNER
    of one owner."""
    found: list[tuple[str, int]] = []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.startswith("gpu-"):
                with contextlib.suppress(OSError):
                    found.append((entry.name, entry.stat(follow_symlinks=False).st_uid))
    keys: list[str] = []
    per_owner: dict[int, int] = {}
    for name, owner in sorted(found):
        key = _unit_key(name)
        per_owner[owner] = per_owner.get(owner, 0) + 1
        if key is None or per_owner[owner] > MAX_UNIT_LOCKS_PER_OWNER:
            continue
        keys.append(key)
        if len(keys) >= MAX_UNIT_LOCKS:
            break
    return keys


def _acquire(fd: int, patience: float, known_hostile: Callable[[int], bool] = lambda pid: False) -> int | None:
    """Take the flock on `fd`: None once taken. Gives up, returning the holder's pid (0: not
    visible from here), once one holder has kept it `patience` seconds, or once it has changed
    hands for LOCK_PATIENCE without this vram getting it; at once when known_hostile(holder)."""
    if _try_lock(fd):
        return None
    holder = _lock_holder_pid(fd)
    if holder and known_hostile(holder):
        return holder
    started = since = looked = time.monotonic()
    pause = 0.001
    while True:
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
        if _try_lock(fd):
            return None
        now = time.monotonic()
        if now - looked >= 0.25:  # /proc/locks lists every lock on the machine: not at every try
            looked = now
            pid = _lock_holder_pid(fd)
            if pid and pid != holder:
                holder, since = pid, now  # another holder: vrams taking turns, not one keeping it
        if now - since >= patience or now - started >= max(patience, LOCK_PATIENCE):
            return holder


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _open_shared(path: Path) -> int:
    """Open (creating, readable by all) a file in the lease directory, never through a symlink."""
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO planted there must not hang us
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
        except PermissionError:  # another user's file: reading is enough to flock it
            fd = os.open(path, os.O_RDONLY | flags)
    except OSError as e:
        with contextlib.suppress(OSError):
            _refuse_irregular(path, os.lstat(path))
        raise LeaseError(f"cannot open {path}: {e.strerror} (owner {_owner(path)})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        _refuse_irregular(path, st)
    with contextlib.suppress(OSError):
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != 0o644:
            os.fchmod(fd, 0o644)  # despite a umask of 077: other users must be able to lock it
    return fd


def _names(path: Path, fd: int) -> bool:
    """Whether `path` (not followed) still names the file open as `fd`."""
    try:
        there, mine = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def _owner(path: Path) -> str:
    try:
        return user_name(os.lstat(path).st_uid)
    except OSError:
        return "?"


def _refuse_irregular(path: Path, st: os.stat_result) -> None:
    """LeaseError when a lock file is a symlink, directory, FIFO...: nobody can take that lock
    until its owner or root removes it. One line naming them."""
    if stat.S_ISREG(st.st_mode):
        return
    what = "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else \
        "not a regular file"
    raise LeaseError(f"{path} is {what}, made by {user_name(st.st_uid)} (they or root can remove it: rm -r {path})")


def _lock_holder_pid(fd: int) -> int:
    """The pid holding a flock on `fd`'s file, from /proc/locks (read up to 1 MiB); 0 when none
    is listed (released meanwhile, or held from another pid namespace)."""
    try:
        st = os.fstat(fd)
        ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return 0
    for line in lines:
        parts = line.split()  # "1: FLOCK  ADVISORY  WRITE 4121 08:01:1234 0 EOF"; waiters have "->"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == ident and parts[4].isdigit():
            return int(parts[4])
    return 0


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _describe(pid: int) -> str:
    """'pid P of user U (comm)' for a lock holder."""
    if pid <= 0:
        return "a process not visible from here (another pid namespace, or a stopped vram)"
    try:
        who = user_name(os.stat(f"/proc/{pid}").st_uid)
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            comm = sanitize(f.read(64).strip())
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} of user {who} ({comm})"


def _usable(path: Path, shared: bool) -> str | None:
    """None when `path` can hold leases, else why not."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            os.makedirs(path.parent, exist_ok=True)
            os.mkdir(path, 0o700)
            os.chmod(path, 0o1777 if shared else 0o700)  # sticky: users can only remove their own
            st = os.lstat(path)
        except FileExistsError:
            st = os.lstat(path)  # created by someone else just now
        except OSError as e:
            return f"cannot create {path}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    mine = st.st_uid == os.getuid()
    if shared and not mine and st.st_uid != 0:
        # Its owner could remove anyone's leases (a GPU then goes to two jobs) or lock others out:
        # a shared directory must be root's (contrib/tmpfiles.d/vramkit.conf creates it at boot).
        return (f"{path} belongs to {user_name(st.st_uid)}, not to root or you "
                f"(its owner could remove your leases; an admin should create it root-owned)")
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable by you"
    return None


def lease_dir(env: Mapping[str, str] | None = None) -> LeaseDir:
    """$VRAM_LEASE_DIR, else the shared /tmp/vramkit-leases, else a per-user directory."""
    env = os.environ if env is None else env
    chosen = env.get(ENV_DIR)
    if chosen:
        path = Path(chosen)
        why = _usable(path, shared=True)
        if why:
            raise LeaseError(f"{ENV_DIR}: {why}")
        return LeaseDir(path, shared=True)
    why = _usable(SHARED_DIR, shared=True)
    if why is None:
        return LeaseDir(SHARED_DIR, shared=True)
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        private = Path(runtime) / "vramkit-leases"
    else:
        try:
            private = Path.home() / ".cache" / "vramkit" / "leases"
        except RuntimeError:  # no HOME and no passwd entry
            raise LeaseError(f"no usable lease directory: {why}; set {ENV_DIR}") from None
    why_private = _usable(private, shared=False)
    if why_private:
        raise LeaseError(f"no usable lease directory: {why}; {why_private}")
    return LeaseDir(private, shared=False,
                    note=f"leases are per-user ({private}): {why}; other users' vram runs cannot see them")


def lease_timeout(env: Mapping[str, str] | None = None) -> float:
    from .units import parse_duration

    env = os.environ if env is None else env
    raw = env.get(ENV_TIMEOUT)
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = parse_duration(raw)
    except ValueError as e:
        raise LeaseError(f"{ENV_TIMEOUT}: {e}") from None
    if not 0 < value <= MAX_LEASE:
        raise LeaseError(f"{ENV_TIMEOUT}: must be more than 0 and at most 24h")
    return value


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` atomically, so a reader never sees half a file."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, json.dumps(data).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


class _Junk(Exception):
    """A file in the lease directory that is not a lease or ticket; the message says why."""


def _read_json(path: Path) -> tuple[dict[str, Any], os.stat_result]:
    """A JSON object from a regular file of at most MAX_FILE bytes, and the file's stat; _Junk
    otherwise. Never blocks (a FIFO), never follows a symlink, never reads more than MAX_FILE."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise _Junk("a symlink" if e.errno == errno.ELOOP else f"cannot open it: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Junk("not a regular file")
        if st.st_size > MAX_FILE:
            raise _Junk(f"larger than {MAX_FILE // 1024} KiB")
        raw = os.read(fd, MAX_FILE + 1)
    except OSError as e:
        raise _Junk(f"cannot read it: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE:
        raise _Junk(f"larger than {MAX_FILE // 1024} KiB")
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise _Junk("not JSON") from None
    if not isinstance(data, dict):
        raise _Junk("not a JSON object")
    return data, st


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")  # NaN, Infinity, -Infinity


def _held(path: Path, owner: int | None = None) -> bool:
    """Whether someone holds the flock on `path` (False when it is missing, not a regular file,
    or not owned by `owner`: a lock planted by someone else does not keep a lease alive)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (owner is not None and st.st_uid != owner):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True  # cannot tell: keep it
    finally:
        os.close(fd)
    return False


def _remove(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.unlink(p)  # PermissionError: another user's file in a sticky directory; it stays, ignored


# ---------------------------------------------------------------- leases and tickets

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

    def who(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        what = {"run": "a vram run", "api": "a use_gpus() call", "hold": "vram pick --hold"}.get(self.kind, "a lease")
        return f"{what} of {self.user} (pid {self.pid}, {max(0, now - self.created):.0f}s ago)"


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


def read_state(d: LeaseDir, now: float | None = None, *, known: Collection[str] | None = None) -> State:
    """Live leases and tickets; stale ones are removed where allowed. Call with d.locked().
    With `known` (lease ids), only the leases not in it, and no tickets: what appeared since.

    Every file is another user's input: anything that is not a regular file of at most MAX_FILE
    bytes holding a valid lease or ticket is ignored (never opened blocking, never followed) and
    named once in a warning (d.warn_ignored); at most MAX_PER_OWNER files of each owner are read."""
    now = time.time() if now is None else now
    me = os.getuid()
    leases: list[Lease] = []
    tickets: list[Ticket] = []
    ignored: list[str] = []
    per_owner: dict[int, int] = {}
    for entry in os.scandir(d.path):
        name = entry.name
        lease_m, ticket_m = _LEASE_RE.match(name), _TICKET_RE.match(name)
        if known is not None and (ticket_m or (lease_m and lease_m.group(1) in known)):
            continue
        if not (lease_m or ticket_m):
            with contextlib.suppress(OSError):
                if name.startswith(".tmp-") and now - entry.stat(follow_symlinks=False).st_mtime > 60:
                    _remove(Path(entry.path))  # left by a writer killed mid-write
            continue
        path = Path(entry.path)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        owner = st.st_uid
        per_owner[owner] = per_owner.get(owner, 0) + 1
        if per_owner[owner] > MAX_PER_OWNER:
            if per_owner[owner] == MAX_PER_OWNER + 1:
                ignored.insert(0, f"files of {user_name(owner)} in {d.path} beyond the first {MAX_PER_OWNER} "
                                  "(not read)")
            continue
        try:
            if stat.S_ISLNK(st.st_mode):
                raise _Junk("a symlink")
            if not stat.S_ISREG(st.st_mode):
                raise _Junk("not a regular file")
            if st.st_size > MAX_FILE:
                raise _Junk(f"larger than {MAX_FILE // 1024} KiB")
            if lease_m:
                lock = path.with_name(f"lease-{lease_m.group(1)}.lock")
                try:
                    data, st = _read_json(path)
                    lease = _lease_from(data, st, lease_m.group(1))
                except _Junk:
                    if owner == me and not _held(lock):
                        _remove(path, lock)  # our own, half-written (cannot happen) or corrupted
                    raise
                if now >= lease.expires or (lease.locked and not _held(lock, owner)):
                    _remove(path, lock)  # timed out (or its pid reused), or its launcher and job are both gone
                    continue
                leases.append(lease)
            elif ticket_m:
                if not _held(path, owner):
                    _remove(path)  # the waiter is gone
                    continue
                data, st = _read_json(path)
                tickets.append(_ticket_from(data, st, int(ticket_m.group(1)), int(ticket_m.group(2))))
        except FileNotFoundError:
            continue  # removed meanwhile
        except _Junk as e:
            ignored.append(f"{path} ({user_name(owner)}: {e})")
    tickets.sort(key=lambda t: (t.seq, t.pid))  # the same order for every reader, even on a tie
    if ignored:
        d.warn_ignored(ignored)
    d._seen.update(lease.id for lease in leases)
    for key, holder in d.locked_out.items():
        leases.append(LockedGpu(id=f"locked-{key}", units=[key], labels={}, kind="lock", user="?", uid=-1, pid=0,
                                created=now, expires=now, locked=False, holder=holder))
    return State(leases, tickets)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _pid(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31


def _text(value: object, most: int = 4096) -> bool:
    return isinstance(value, str) and len(value) <= most


def _lease_from(data: dict[str, Any], st: os.stat_result, lease_id: str) -> Lease:
    """A lease from its file, or _Junk saying why not. Lease files are written by other users:
    every field is checked (types, finite numbers), text is stripped of control characters, the
    user is the file's owner (never what the file says), and the lease lasts at most MAX_LEASE
    from the file's own mtime, whatever the file says."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise _Junk(what)

    need(data.get("id") == lease_id, "its id is not its name's")
    units, labels, baseline = data.get("units"), data.get("labels"), data.get("baseline", {})
    need(isinstance(units, list) and len(units) <= 4096 and all(_text(u, 256) for u in units),
         "units is not a list of GPU keys")
    assert isinstance(units, list)
    need(isinstance(labels, dict) and all(_text(k, 256) and _text(v, 256) for k, v in labels.items()),
         "labels is not a map of text")
    assert isinstance(labels, dict)
    need(data.get("kind") in ("run", "api", "hold"), "kind is not run, api or hold")
    need(_pid(data.get("pid")), "pid is not a pid")
    need(data.get("job_pid") is None or _pid(data.get("job_pid")), "job_pid is not a pid")
    need(_finite(data.get("created")) and _finite(data.get("expires")), "created or expires is not a finite number")
    need(isinstance(data.get("locked", True), bool), "locked is not true or false")
    need(data.get("pidns") is None or _text(data.get("pidns"), 256), "pidns is not text")
    need(_text(data.get("host", ""), 256), "host is not text")
    need(data.get("command") is None or _text(data.get("command")), "command is not text")
    need(isinstance(baseline, dict) and all(
        _text(k, 256) and isinstance(v, list) and all(_pid(p) for p in v) for k, v in baseline.items()),
        "baseline is not a map of pid lists")
    assert isinstance(baseline, dict)
    written = min(st.st_mtime, st.st_ctime)  # a future mtime (touch -d) moves the ctime to now
    created = min(float(data["created"]), written)  # a lease cannot postdate its file
    expires = min(float(data["expires"]), written + MAX_LEASE, _holder_deadline(data, written))
    return Lease(id=lease_id, units=list(units), labels={k: sanitize(v) for k, v in labels.items()},
                 kind=data["kind"], user=sanitize(user_name(st.st_uid)), uid=st.st_uid, pid=data["pid"],
                 created=created, expires=expires, locked=data.get("locked", True), job_pid=data.get("job_pid"),
                 pidns=data.get("pidns"), host=sanitize(data.get("host", "")),
                 command=sanitize(data["command"]) if data.get("command") else None,
                 baseline={k: list(v) for k, v in baseline.items()})


def _start_time(pid: int) -> float | None:
    """When `pid` started (unix time, from /proc/PID/stat), None when there is no such process."""
    stat_ = read_stat(pid)
    return None if stat_ is None else boot_time() + stat_.start_ticks / _TICKS


def _holder_deadline(data: dict[str, Any], written: float) -> float:
    """When a lease must end by its holders' start times (/proc, not the file): MAX_LEASE after
    the first of its pid and job_pid that is alive and older than the file; at once when one
    started after the file was written (a reused pid: its holder is gone) and none is. Pids of
    another pid namespace cannot be looked up here: math.inf (the file's times still cap it)."""
    pidns = data.get("pidns")
    if pidns is None or pidns != _pidns():
        return math.inf
    starts, reused = [], False
    for pid in (data["pid"], data.get("job_pid")):
        started = _start_time(pid) if pid is not None else None
        if started is None:
            continue  # gone: its lock (or the time) says whether the lease lives
        if started > written + PID_SLACK:
            reused = True
        else:
            starts.append(started)
    if starts:
        return min(starts) + MAX_LEASE
    return -math.inf if reused else math.inf


def _ticket_from(data: dict[str, Any], st: os.stat_result, seq: int, pid: int) -> Ticket:
    """A waiter's ticket from its file, or _Junk: the policy must be a map whose numbers are
    finite; its uid (whose processes count as "other users'") is the file's owner."""
    policy = data.get("policy")
    if not isinstance(policy, dict):
        raise _Junk("policy is not a map")
    if any(isinstance(v, float) and not math.isfinite(v) for v in policy.values()):
        raise _Junk("policy has a number that is not finite")
    created = data.get("created", st.st_mtime)
    if not _finite(created):
        raise _Junk("created is not a finite number")
    return Ticket(seq=seq, pid=pid, user=sanitize(user_name(st.st_uid)), policy={**policy, "uid": st.st_uid},
                  created=min(float(created), st.st_mtime))


def fulfilled(lease: Lease, key: str, pids_on_unit: list[int], is_real: Callable[[int], bool] = lambda p: True) -> bool:
    """Whether the lease's job now shows on the unit in NVML, which ends the reservation.

    Pids are only comparable inside one pid namespace: NVML reports the host's pids, so a lease
    taken in a container is only fulfilled by its own launcher, or by time."""
    if lease.kind == "lock":
        return False
    if lease.kind == "hold":
        before = {p for p in lease.baseline.get(key, []) if isinstance(p, int)}
        return any(p not in before for p in pids_on_unit if is_real(p))
    job = lease.job_pid or lease.pid
    if lease.pidns is None or lease.pidns != _pidns():
        return False
    return any(descends_from(p, job) for p in pids_on_unit if is_real(p))


class HeldLease:
    """A lease this process holds. Pass `fd` to the job so the lease outlives a crashed launcher."""

    def __init__(self, d: LeaseDir, lease: Lease, fd: int | None):
        self.dir, self.lease = d, lease
        self.fd: int | None = fd
        self.path = d.path / f"lease-{lease.id}.json"
        self.lock_path = d.path / f"lease-{lease.id}.lock"

    @property
    def pending(self) -> list[str]:
        return list(self.lease.units)

    def set_job(self, pid: int) -> None:
        with self.dir.locked():
            self.lease.job_pid = pid
            if self.lease.units and self.path.exists():
                _write_json(self.path, asdict(self.lease))

    def release_units(self, keys: list[str]) -> None:
        """The job shows on these units: they are no longer reserved."""
        with self.dir.locked():
            self.lease.units = [k for k in self.lease.units if k not in keys]
            if not self.lease.units:
                _remove(self.path, self.lock_path)
            elif self.path.exists():
                _write_json(self.path, asdict(self.lease))

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.lease.expires

    def release(self) -> None:
        """End the lease (the job exited, or it never started). Safe to call twice."""
        if self.lease.units:
            self.lease.units = []
            with contextlib.suppress(LeaseError), self.dir.locked():
                _remove(self.path, self.lock_path)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def create_lease(d: LeaseDir, units: list[tuple[str, str]], kind: str, timeout: float, *,
                 command: str | None = None, baseline: dict[str, list[int]] | None = None) -> HeldLease:
    """Reserve `units` ((key, label) pairs). Call with d.locked(), after deciding. Of `command`
    only the program's name is written: lease files are readable by every user, and arguments
    can hold secrets (--db-password=...).

    No lease is written for a GPU without holding its lock (LeaseDir.hold_unit; one this look
    did not lock from its start is locked now). A lock file's owner can swap it for another file,
    so that two launchers each hold "its lock": so, write, then check (_check_written). Another
    lease on one of these GPUs that the caller did not choose by (read_state in this look) means
    LeaseConflict, and nothing is left reserved; choosing again gives a right answer."""
    now = time.time()
    labels = dict(units)
    for key in sorted(labels):
        holder = d.hold_unit(key)
        if holder is not None:
            raise LeaseError(f"{labels[key]} is reserved by {holder}")
    own = _start_time(os.getpid())
    expires = min(now + timeout, own + MAX_LEASE if own is not None else math.inf)
    if expires <= now:  # a lease counts at most MAX_LEASE from its holder's start (_holder_deadline)
        raise LeaseError("this process started more than 24 hours ago, and a lease lasts at most 24 hours from "
                         "its holder's start: start the job with `vram run`, or from a new process")
    uid = os.getuid()
    lease = Lease(id=f"{int(now * 1000):x}-{os.getpid()}-{secrets.token_hex(3)}", units=[k for k, _ in units],
                  labels=labels, kind=kind, user=user_name(uid), uid=uid, pid=os.getpid(), created=now,
                  expires=expires, locked=kind != "hold", pidns=_pidns(), host=socket.gethostname(),
                  command=program_name(command), baseline=baseline or {})
    seen = set(d._seen)  # what the caller chose by
    fd = None
    lock_path = d.path / f"lease-{lease.id}.lock"
    if lease.locked:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            os.fchmod(fd, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if fd is not None:
                os.close(fd)
            raise LeaseError(f"cannot create a lease in {d.path}: {e.strerror}") from None
    try:
        _write_json(d.path / f"lease-{lease.id}.json", asdict(lease))
    except OSError as e:
        if fd is not None:
            os.close(fd)
        _remove(lock_path)
        raise LeaseError(f"cannot write a lease in {d.path}: {e.strerror}") from None
    held = HeldLease(d, lease, fd)
    try:
        _check_written(d, lease, seen)
    except BaseException:  # LeaseConflict, or Ctrl-C half-way: no lease left behind
        held.release()
        raise
    return held


def _check_written(d: LeaseDir, lease: Lease, seen: set[str]) -> None:
    """LeaseConflict when the directory, read again after `lease` was written, holds another live
    lease on one of its GPUs that the caller did not choose by (not in `seen`).

    Of two launchers that both chose a GPU (each holding a flock on a different file under its
    lock's name), the second to write its lease reads after both were written and finds the
    first's: it backs off. The first may find the second's too, and back off as well: nothing is
    then reserved and both choose again; never do both keep. No tie-break by time or id can let
    one keep a lease it found another beside: the other may have read before this one wrote,
    and kept its own."""
    for other in read_state(d, known={*seen, lease.id}).leases:
        if other.kind == "lock":
            continue
        taken = [lease.labels[k] for k in other.units if k in lease.labels]
        if taken:
            now = time.time()
            raise LeaseConflict(f"{taken[0]} was reserved by {other.who(now)} while this vram was choosing; "
                                "nothing was reserved: try again")


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


class HeldTicket:
    """This process's place in the queue; leave() when served or giving up."""

    def __init__(self, d: LeaseDir, path: Path, fd: int, seq: int):
        self.dir, self.path, self.seq = d, path, seq
        self.fd: int | None = fd

    def leave(self) -> None:
        """Call with d.locked() (or accept that the queue sees the departure a moment later)."""
        if self.fd is not None:
            _remove(self.path)
            os.close(self.fd)
            self.fd = None


def enqueue(d: LeaseDir, state: State, policy: dict[str, Any]) -> HeldTicket:
    """Join the queue behind every live waiter. Call with d.locked()."""
    last = max(state.tickets, key=lambda t: t.seq, default=None)
    seq = 1 if last is None else last.seq + 1
    if seq > MAX_SEQ:  # someone's ticket took the last number: say whose, rather than wait unseen
        assert last is not None
        raise LeaseError(f"cannot join the queue in {d.path}: the ticket of {last.who()} took its last number "
                         f"({last.seq}); it must leave the queue first")
    path = d.path / f"wait-{seq:010d}-{os.getpid()}.json"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:  # a stale ticket with our pid and seq: it was ours before a crash
        _remove(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise LeaseError(f"cannot join the queue in {d.path}: {e.strerror}") from None
    try:
        os.fchmod(fd, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"user": user_name(os.getuid()), "pid": os.getpid(), "created": time.time(),
                                 "policy": policy}).encode())
        return HeldTicket(d, path, fd, seq)
    except BaseException:  # Ctrl-C or a full disk half-way: no ticket left behind
        os.close(fd)
        _remove(path)
        raise


def leftovers(d: LeaseDir) -> list[str]:
    """Lease (.json and .lock) and ticket files present now: after every job is done, none."""
    return sorted(n for n in os.listdir(d.path) if n.startswith(("lease-", "wait-")))

