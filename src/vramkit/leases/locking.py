"""A look at the lease directory: its lock and every GPU's lock, taken in name order; a lock kept
too long is gone around, its holder named (docs/leases.md, "Locks")."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..i18n import _
from ..procs import comm, flock_holder, sanitize, uid_of, user_name
from .errors import LeaseError
from .files import _names, _open_shared, _owner
from .settings import HOLD_PATIENCE, LOCK_PATIENCE, MAX_UNIT_LOCKS, MAX_UNIT_LOCKS_PER_OWNER, RELOCKS

_UNIT_LOCK_RE = re.compile(r"^gpu-([A-Za-z0-9_.%-]{1,600})\.lock$")


# ---------------------------------------------------------------- the directory

@dataclass
class LeaseDir:
    path: Path
    shared: bool  # shared by the machine's users (else per-user: only your own jobs coordinate)
    note: str | None = None  # why the shared directory was not used
    # Read too (read-only): every other user's lease directory in `others_in` (/tmp) named
    # `others_base` (vramkit-leases) or `others_base`-*: leases shared where no admin made the
    # shared directory (others.py). None: this directory alone ($VRAM_LEASE_DIR, a private one).
    others_in: Path | None = None
    others_base: str = ""
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
        shown = "; ".join(new[:3])
        if len(new) > 3:
            shown = _("{entries}; and {n} more").format(entries=shown, n=len(new) - 3)
        self.warn(_("ignored in the lease directory (not a valid lease or ticket): {entries}").format(entries=shown))

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
            self.warn(_("{error}; going around it: each GPU has a lock of its own").format(error=e))
            return
        pid = self._acquire(self._lock_fd, patience)
        if pid is None:
            assert self._look is not None
            self._look.append((self._lock_fd, False))
            return
        self.warn(_("the lease directory lock {path} is held by {who} for {seconds}s or more; going around it: "
                    "each GPU has a lock of its own").format(path=path, who=_describe(pid), seconds=f"{patience:g}"))

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
                return _("its lock file, which cannot be used: {error}").format(error=e)
            pid = self._acquire(fd, patience)
            if pid is not None:
                os.close(fd)
                return _("{who}, which holds its lock in the lease directory").format(who=_describe(pid))
            if _names(path, fd) or attempt == RELOCKS - 1:
                break
            # Replaced meanwhile (its owner may unlink it in the sticky directory): a lock on a
            # file no longer at that name keeps nobody out. Take the lock of the one that is.
            self.warn(_("the lock file {path} was replaced while this vram locked it (its owner now: {owner}); "
                        "leases are checked after they are written, so no GPU is given twice").format(
                            path=path, owner=_owner(path)))
            os.close(fd)
        self._look.append((fd, True))
        self._units_held.add(key)
        self.locked_out.pop(key, None)
        return None

    def _acquire(self, fd: int, patience: float) -> int | None:
        """_acquire, giving up at once on a lock held by a process seen keeping one too long, or by
        another user one of whose processes was."""
        pid = _acquire(fd, patience, lambda holder: holder in self._hostile_pids or
                       uid_of(holder) in self._hostile_uids)
        if pid:
            self._hostile_pids.add(pid)
            uid = uid_of(pid)
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
    holder = flock_holder(fd)
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
            pid = flock_holder(fd)
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


def _describe(pid: int) -> str:
    """'pid P of user U (comm)' for a lock holder."""
    if pid <= 0:
        return _("a process not visible from here (another pid namespace, or a stopped vram)")
    uid, name = uid_of(pid), comm(pid)
    if uid is None or name is None:
        return f"pid {pid}"
    return _("pid {pid} of user {user} ({name})").format(pid=pid, user=user_name(uid), name=sanitize(name))
