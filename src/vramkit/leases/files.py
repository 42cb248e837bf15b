"""Files in the shared lease directory, which every user can write to: opened without following
symlinks or blocking, regular files only, bounded reads, atomic writes, removal where allowed.
Everything read here is another user's input until checked."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from ..i18n import _
from ..procs import user_name
from .errors import LeaseError
from .settings import MAX_FILE


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
        raise LeaseError(_("cannot open {path}: {error} (owner {owner})").format(
            path=path, error=e.strerror, owner=_owner(path))) from None
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
    if stat.S_ISLNK(st.st_mode):
        text = _("{path} is a symlink, made by {user} (they or root can remove it: rm -r {path})")
    elif stat.S_ISDIR(st.st_mode):
        text = _("{path} is a directory, made by {user} (they or root can remove it: rm -r {path})")
    else:
        text = _("{path} is not a regular file, made by {user} (they or root can remove it: rm -r {path})")
    raise LeaseError(text.format(path=path, user=user_name(st.st_uid)))


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


def _read_json(path: Path | str, dir_fd: int | None = None) -> tuple[dict[str, Any], os.stat_result]:
    """A JSON object from a regular file of at most MAX_FILE bytes, and the file's stat; _Junk
    otherwise. Never blocks (a FIFO), never follows a symlink, never reads more than MAX_FILE.
    With `dir_fd`, `path` is a name in that directory (another user's, opened once)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise _Junk(_("a symlink") if e.errno == errno.ELOOP else _("cannot open it: {error}").format(
            error=e.strerror)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Junk(_("not a regular file"))
        if st.st_size > MAX_FILE:
            raise _Junk(_("larger than {size} KiB").format(size=MAX_FILE // 1024))
        raw = os.read(fd, MAX_FILE + 1)
    except OSError as e:
        raise _Junk(_("cannot read it: {error}").format(error=e.strerror)) from None
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE:
        raise _Junk(_("larger than {size} KiB").format(size=MAX_FILE // 1024))
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise _Junk(_("not JSON")) from None
    if not isinstance(data, dict):
        raise _Junk(_("not a JSON object"))
    return data, st


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")  # NaN, Infinity, -Infinity


def _held(path: Path | str, owner: int | None = None, dir_fd: int | None = None) -> bool:
    """Whether someone holds the flock on `path` (False when it is missing, not a regular file,
    or not owned by `owner`: a lock planted by someone else does not keep a lease alive). With
    `dir_fd`, `path` is a name in that directory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
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
