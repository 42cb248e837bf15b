"""The audit log of `vram kill`: one JSON object a line for every signal, refusal and outcome.

Where: $VRAM_AUDIT_LOG if set; as root /var/log/vramkit/audit.log; otherwise
$XDG_STATE_HOME/vramkit/audit.log (default ~/.local/state/vramkit/audit.log). A kill on a
simulated machine (its audit context says `simulated`) goes to audit-simulated.log in that
per-user directory, root's too: a rehearsal must not add lines to the machine's real log, while
a real process a scenario names still gets its signal on record. The file is
created with mode 0600 (and tightened to 0600 if it was looser), its directory 0700, and it is
only ever appended to: one write() per line, so concurrent vram runs do not interleave lines.
Every line is on disk (fsync) before write() returns: kill writes its "signal" record before
it sends the signal, so a signal the log does not show was never sent.

The log is opened before anything is signalled: when it cannot be written, nothing is. It is
opened without blocking (a FIFO planted at its path cannot hang vram) and must be a regular
file; its directories are walked one by one, never through a symlink that someone other than
root or the caller could have planted (one in a directory that others may write); a file that
everyone may write, or that belongs to another user than root or the caller, is refused (anyone,
or its owner, could have forged or erased lines in it).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from .errors import VramkitError
from .i18n import _
from .procs import user_name

SYSTEM_LOG = Path("/var/log/vramkit/audit.log")


class AuditError(VramkitError, OSError):
    """The audit log cannot be opened or written. The message names the file."""


def default_path(simulated: bool = False) -> Path:
    env = os.environ.get("VRAM_AUDIT_LOG")
    if env:
        return Path(env)
    if os.geteuid() == 0 and not simulated:
        return SYSTEM_LOG
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "vramkit" / ("audit-simulated.log" if simulated else "audit.log")


def _open_directory(path: Path, fail: Any) -> int:
    """An O_RDONLY fd of directory `path`, creating what is missing (0700), walked one component at
    a time. A symlink on the way is followed only when the directory holding it belongs to root or
    the caller and nobody else may write it: otherwise another user could have planted it."""
    todo = list(path.parts[1:])
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            try:
                nfd = _open_child(fd, name, 0o755 if todo else 0o700)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode):
                    raise
                holder = os.fstat(fd)
                if holder.st_uid not in (0, os.geteuid()) or holder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    fail(_("{name} on its path is a symlink in a directory others may write: give the path "
                           "without it").format(name=name))
                links += 1
                if links > 40:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                target = os.readlink(name, dir_fd=fd)
                todo[:0] = Path(target).parts
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                    todo.pop(0)
                continue
            os.close(fd)
            fd = nfd
    except AuditError:  # fail()'s own, which names the file already
        os.close(fd)
        raise
    except OSError as e:
        os.close(fd)
        fail(e.strerror or str(e))
    except BaseException:
        os.close(fd)
        raise
    # Whoever may remove or rename its entries could erase the records (or put a file of their
    # own in the log's place): the log's directory is root's or the caller's, sticky if others may write it.
    held = os.fstat(fd)
    if held.st_uid not in (0, os.geteuid()):
        os.close(fd)
        fail(_("its directory belongs to uid {uid}, not to root or you (its owner could erase the records)").format(
            uid=held.st_uid))
    if held.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not held.st_mode & stat.S_ISVTX:
        os.close(fd)
        fail(_("its directory may be written by others and is not sticky (they could erase the records)"))
    return fd


def _open_child(fd: int, name: str, mode: int) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=fd)
    except FileNotFoundError:
        try:
            os.mkdir(name, mode, dir_fd=fd)
        except FileExistsError:
            pass
        return os.open(name, flags, dir_fd=fd)


def caller() -> dict[str, Any]:
    """Who is acting: uid, user name, pid; and the sudo user behind root, when there is one."""
    uid = os.getuid()
    out: dict[str, Any] = {"uid": uid, "user": user_name(uid), "pid": os.getpid()}
    if os.geteuid() != uid:
        out["euid"] = os.geteuid()
    if uid == 0 and os.environ.get("SUDO_USER"):
        out["sudo_user"] = os.environ["SUDO_USER"]
    return out


class AuditLog:
    def __init__(self, path: Path | str | None = None, context: dict[str, Any] | None = None):
        self.path = Path(path) if path is not None else default_path(bool((context or {}).get("simulated")))
        # Fields every line carries: caller, host, simulated scenario, the command line.
        self.context = {"caller": caller(), "host": os.uname().nodename, **(context or {})}
        self._fd: int | None = None

    def open(self) -> AuditLog:
        path = self.path if self.path.is_absolute() else Path.cwd() / self.path
        dfd = _open_directory(path.parent, self._fail)
        try:
            try:
                # O_NOFOLLOW: as root, never append to whatever a planted symlink points at;
                # O_NONBLOCK: a FIFO there must not hang us (it is refused below).
                fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC | os.O_NOCTTY, 0o600, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ENXIO:  # a FIFO nobody reads
                    self._fail(_("not a regular file"))
                if e.errno == errno.ELOOP:
                    self._fail(_("it is a symlink"))
                self._fail(e.strerror or str(e))
        finally:
            os.close(dfd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self._fail(_("not a regular file"))
            if info.st_mode & stat.S_IWOTH:
                self._fail(_("everyone may write it (anyone could have forged lines in it): remove it or chmod o-w "
                             "it"))
            if info.st_uid not in (0, os.geteuid()):  # its owner could edit or erase the records
                self._fail(_("it belongs to uid {uid}, not to root or you (its owner could edit or erase the "
                             "records)").format(uid=info.st_uid))
            if stat.S_IMODE(info.st_mode) != 0o600 and info.st_uid == os.geteuid():
                os.fchmod(fd, 0o600)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def _fail(self, why: str) -> NoReturn:
        raise AuditError(_("cannot write the audit log {path}: {why}").format(path=self.path, why=why)) from None

    def write(self, event: str, **fields: Any) -> None:
        """Append one record and fsync it: when this returns, the line is on disk."""
        fd = self._fd if self._fd is not None else self.open()._fd
        assert fd is not None  # open() set it, or raised
        now = time.time()
        record = {"time": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds"),
                  "timestamp": round(now, 3), "event": event, **self.context, **fields}
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        try:
            written = os.write(fd, line)
            if written != len(line):  # a short write: the disk filled up in the middle of the line
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except OSError as e:
            self._fail(e.strerror or str(e))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> AuditLog:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def read(path: Path | str | None = None) -> list[dict[str, Any]]:
    """Every record of an audit log, oldest first (for tests and reports)."""
    p = Path(path) if path is not None else default_path()
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
