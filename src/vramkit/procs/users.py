"""Who a process belongs to: user names (cached) and the owner of a pid's /proc directory."""

from __future__ import annotations

import os
import pwd

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


def uid_of(pid: int) -> int | None:
    """The uid that owns the process (its /proc directory), None when there is no such pid."""
    if pid <= 0:
        return None
    try:
        return os.stat(f"/proc/{int(pid)}").st_uid
    except OSError:
        return None
