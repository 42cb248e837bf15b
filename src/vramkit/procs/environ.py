"""A process's environment as it started (/proc/PID/environ): the few variables asked for,
read in bounded chunks, or why they cannot be read."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from ..i18n import N_
from .text import NOT_VISIBLE, sanitize

MAX_ENVIRON_BYTES = 4 * 1024 * 1024  # environ is another user's text and can be megabytes: read this much at most
ENV_NOT_VISIBLE = N_("not visible (another user's process)")
# root is refused too where the kernel's ptrace rules (Yama, a dumpable-flag cleared) keep it out
CANNOT_READ = "cannot read its environment: "  # then the system's reason (process_view says it in words)
ENV_REFUSED_TO_ROOT = N_("not visible (the kernel refused to show its environment)")


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
        return Environ({}, f"{CANNOT_READ}{e.strerror}")
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
        return Environ({}, NOT_VISIBLE if e.errno == errno.ESRCH else f"{CANNOT_READ}{e.strerror}")
    finally:
        os.close(fd)
    if pending and not truncated:  # the last entry has no NUL after it
        key, eq, value = pending.partition(b"=")
        if eq and key in wanted:
            found[wanted[key]] = sanitize(value[:4096].decode(errors="replace"))
    return Environ(found, truncated=truncated)
