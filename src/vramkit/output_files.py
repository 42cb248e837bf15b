"""Files vram writes where the user names them: `vram sim spawn -o`, `vram doctor --timeline`,
`vram estimate --trace --timeline`, `vram report --plot`.

vram often runs as root, and such a path is often in a shared directory (/tmp). So nothing already
at the path is opened: the file is written to a new name created with O_EXCL|O_NOFOLLOW beside it,
then renamed over the path. Nothing is written through a symlink another user planted or into a file
of theirs, and no FIFO is waited on. What is at the path is checked first (and again just before the
rename): a symlink, a FIFO, a directory or device, or another user's file there is refused.
"""

from __future__ import annotations

import os
import stat

from .errors import RequestError
from .i18n import _


class OutputRefused(RequestError):
    """The output path cannot be written (one line; exit 2: choose another path)."""


def _refused(path: str, why: object, param: str) -> OutputRefused:
    from .procs import sanitize

    return OutputRefused(_("{path}: cannot write it: {why}").format(path=sanitize(path), why=why), param=param)


def check_output(path: str, param: str = "output") -> None:
    """Refuse, in one line, an output path that holds something other than a regular file of the
    caller's: a FIFO (opening it to write would wait for a reader forever), a symlink, a directory
    or device, or a file someone else planted there (in a shared /tmp: root must not reuse it). `param`:
    the argument that named the path."""
    from .procs import sanitize, user_name

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _refused(path, e.strerror, param) from None
    if stat.S_ISLNK(info.st_mode):
        why = _("it is a symlink")
    elif stat.S_ISFIFO(info.st_mode):
        why = _("it is a FIFO, not a file")
    elif not stat.S_ISREG(info.st_mode):
        why = _("it is not a regular file")
    elif info.st_uid != os.geteuid():
        why = _("it belongs to {user}, not to you").format(user=user_name(info.st_uid))
    else:
        return
    raise OutputRefused(_("{path}: cannot write it: {why}; choose another file").format(path=sanitize(path), why=why),
                        param=param)


def write_new(path: str, data: bytes, mode: int = 0o644, param: str = "output") -> None:
    """Write `data` to `path` afresh (see the module's docstring), the file readable as `mode` says
    whatever the umask. OutputRefused when the path is refused or cannot be written."""
    import secrets

    check_output(path, param)
    directory, name = os.path.split(path)
    try:
        dfd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise _refused(path, e.strerror, param) from None
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        tmp = f".vram-{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        except OSError as e:
            raise _refused(path, e.strerror, param) from None
        try:
            try:
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            check_output(path, param)  # planted meanwhile: still refused (the rename would only unlink it)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as e:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            if isinstance(e, OSError):
                raise _refused(path, e.strerror, param) from None
            raise
    finally:
        os.close(dfd)
