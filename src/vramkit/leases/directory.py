"""Which directory holds the leases: $VRAM_LEASE_DIR; the shared /tmp/vramkit-leases when it is
safe (root's or yours, a real directory; only root creates it); else this user's own
/tmp/vramkit-leases-UID, every other user's read beside it (others.py); else a private one. Sticky
when others may write it, and reached from / through nothing another user could move or swap."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ..i18n import N_, _
from ..procs import user_name
from .errors import LeaseError, LeaseSettingError
from .locking import LeaseDir
from .settings import ENV_DIR, SHARED_DIR

ADMIN_FIX = N_("an admin can make one directory shared by all users: sudo scripts/install-system.sh, or "
                "sudo systemd-tmpfiles --create /etc/tmpfiles.d/vramkit.conf with contrib/tmpfiles.d/vramkit.conf")


def made_dir(path: Path, mode: int, create: bool, parents: bool = False) -> os.stat_result | str:
    """`path`'s own status (never through a symlink) when it is a real directory, made with `mode`
    (whatever the umask) when missing and `create` (`parents`: its parents too, 0755); else why not.
    Its parents are walked from / (_walk): none that another user could swap."""
    walked = _walk(path, create and parents)
    if isinstance(walked, str):
        return walked
    dfd, name = walked
    try:
        try:
            fd = _open_dir(dfd, name, mode if create else None)
        except FileNotFoundError:
            return _("{path} does not exist").format(path=path)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or a file (O_NOFOLLOW, O_DIRECTORY)
            return _("{path} is not a directory").format(path=path)
        if create:
            return _("cannot create {path}: {error}").format(path=path, error=e.strerror)
        return _("cannot open {path}: {why}").format(path=path, why=e.strerror)
    finally:
        os.close(dfd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(dfd: int, name: str, make: int | None) -> int:
    """An fd of directory `name` in `dfd` (never through a symlink), made with mode `make` (whatever
    the umask) when missing; make None: FileNotFoundError. One made by someone else just now is
    opened like any other (the caller checks it)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        if make is None:
            raise
    try:
        os.mkdir(name, 0o700, dir_fd=dfd)
        made = True
    except FileExistsError:
        made = False
    fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    if made:
        os.fchmod(fd, make)
    return fd


def _walk(path: Path, create: bool) -> tuple[int, str] | str:
    """An fd of `path`'s parent and `path`'s last name, or why not. Walked from / one name at a
    time (missing parents made 0755 when `create`), each directory on the way root's or the
    caller's and sticky if others may write it (else they could rename the lease directory away
    and put theirs there); a symlink on the way is followed only when root's or the caller's (in
    such a directory nobody else can replace it: /var/run -> /run is root's)."""
    me = os.geteuid()
    todo = list(path.parts[1:])
    if not todo:  # "/" itself: its parent is itself
        todo = ["."]
    here = Path("/")
    fd = os.open("/", _DIR_FLAGS)
    links = 0
    try:
        while True:
            st = os.fstat(fd)
            if st.st_uid not in (0, me):
                return _("{path}: {directory} on the way belongs to {user}, not to root or you (they could move "
                         "the lease directory away)").format(path=path, directory=here, user=user_name(st.st_uid))
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
                return _("{path}: {directory} on the way may be written by other users and is not sticky (they "
                         "could move the lease directory away): chmod +t {directory}, or choose another "
                         "place").format(path=path, directory=here)
            name = todo.pop(0)
            if not todo:
                result, fd = (fd, name), -1
                return result
            try:
                nfd = _open_dir(fd, name, 0o755 if create else None)
            except FileNotFoundError:
                return _("{path} does not exist").format(path=path)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode):
                    return _("{path} is not a directory").format(path=here / name)
                if info.st_uid not in (0, me):
                    return _("{path}: {link} on the way is a symlink of {user}, not of root or you: give the path "
                             "without it").format(path=path, link=here / name, user=user_name(info.st_uid))
                links += 1
                if links > 40:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                target = os.readlink(name, dir_fd=fd)
                todo[:0] = [part for part in Path(target).parts if part != "/"]
                if target.startswith("/"):
                    os.close(fd)
                    fd, here = -1, Path("/")
                    fd = os.open("/", _DIR_FLAGS)
                continue
            os.close(fd)
            fd, here = nfd, (here.parent if name == ".." else here / name)
    except OSError as e:
        if create:
            return _("cannot create {path}: {error}").format(path=path, error=e.strerror)
        return _("cannot open {path}: {why}").format(path=path, why=e.strerror)
    finally:
        if fd >= 0:
            os.close(fd)


def _usable(path: Path, shared: bool, create: bool = True) -> str | None:
    """None when `path` can hold leases, else why not (`create`: make it when missing)."""
    # sticky when shared: users can only remove their own
    st = made_dir(path, 0o1777 if shared else 0o700, create, parents=True)
    if isinstance(st, str):
        return st
    mine = st.st_uid == os.getuid()
    if shared and not mine and st.st_uid != 0:
        # Its owner could remove anyone's leases (a GPU then goes to two jobs) or lock others out:
        # a shared directory must be root's (contrib/tmpfiles.d/vramkit.conf creates it at boot).
        return _("{path} belongs to {user}, not to root or you (its owner could remove your leases; an admin "
                 "should create it root-owned)").format(path=path, user=user_name(st.st_uid))
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        # Without the sticky bit (as on /tmp) anyone who may write it may remove anyone's leases
        return _("{path} may be written by users other than its owner and is not sticky (they could remove "
                 "others' leases): chmod +t {path}, or chmod go-w {path}").format(path=path)
    if not os.access(path, os.W_OK | os.X_OK):
        return _("{path} is not writable by you").format(path=path)
    return None


def _too_long(value: str) -> str | None:
    """Why no directory can have the name `value`, when it is too long for the kernel (a bad value, not
    a directory that cannot be used)."""
    raw = os.fsencode(value)
    if len(raw) >= _PATH_MAX:
        return _("the path is longer than {limit} bytes").format(limit=_PATH_MAX - 1)
    if any(len(name) > _NAME_MAX for name in raw.split(b"/")):
        return _("a name in the path is longer than {limit} bytes").format(limit=_NAME_MAX)
    return None


_NAME_MAX, _PATH_MAX = 255, 4096  # Linux's limits (limits.h): longer names get ENAMETOOLONG


def lease_dir(env: Mapping[str, str] | None = None, shared_dir: Path = SHARED_DIR) -> LeaseDir:
    """$VRAM_LEASE_DIR, else the shared `shared_dir` (/tmp/vramkit-leases), else a per-user directory."""
    env = os.environ if env is None else env
    chosen = env.get(ENV_DIR)
    if chosen:
        path = Path(chosen)
        if not path.is_absolute():  # relative to each process's own directory: two runs, two lease sets
            raise LeaseSettingError(_("{variable}: give an absolute path (a relative one names another directory "
                                      "for each working directory), got {value}").format(variable=ENV_DIR,
                                                                                          value=repr(chosen)))
        too_long = _too_long(chosen)
        if too_long:
            raise LeaseSettingError(f"{ENV_DIR}: {too_long}")
        why = _usable(path, shared=True)
        if why:
            raise LeaseError(f"{ENV_DIR}: {why}")
        return LeaseDir(path, shared=True)
    # Only root creates the shared directory: one an ordinary user made would be theirs, and its
    # owner could remove every other user's leases (so others would not use it).
    why = _usable(shared_dir, shared=True, create=os.geteuid() == 0)
    if why is None:
        return LeaseDir(shared_dir, shared=True, others_in=shared_dir.parent, others_base=shared_dir.name)
    from .others import own_dir

    own, why_own = own_dir(shared_dir)
    if own is not None:
        return LeaseDir(own, shared=True, others_in=shared_dir.parent, others_base=shared_dir.name)
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        private = Path(runtime) / "vramkit-leases"
    else:
        try:
            private = Path.home() / ".cache" / "vramkit" / "leases"
        except RuntimeError:  # no HOME and no passwd entry
            raise LeaseError(_("no usable lease directory: {why}; {why_own}; set {variable}").format(
                why=why, why_own=why_own, variable=ENV_DIR)) from None
    why_private = _usable(private, shared=False)
    if why_private:
        raise LeaseError(_("no usable lease directory: {why}; {why_own}; {why_private}").format(
            why=why, why_own=why_own, why_private=why_private))
    return LeaseDir(private, shared=False,
                    note=_("leases are per-user ({path}): {why}; {why_own}; other users' vram runs cannot see "
                           "them ({fix})").format(path=private, why=why, why_own=why_own, fix=_(ADMIN_FIX)))
