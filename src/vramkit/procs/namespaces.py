"""PID namespaces: pids compare only within one, and NVML reports the host's."""

from __future__ import annotations

import os

# The inode number of the initial PID namespace (PROC_PID_INIT_INO in include/linux/proc_ns.h).
INITIAL_PID_NS_INODE = 0xEFFFFFFC


def in_initial_pid_namespace() -> bool | None:
    """Whether this process sees the host's PID namespace (the one NVML reports pids in);
    None when it cannot be told."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INITIAL_PID_NS_INODE
    except OSError:
        return None


_PIDNS: list[str | None] = []  # this process's pid namespace, read once (a process never changes its own)


def pid_namespace() -> str | None:
    """This process's PID namespace ("pid:[4026531836]"), None where it cannot be read. Pids
    compare only within one."""
    if not _PIDNS:
        try:
            _PIDNS.append(os.readlink("/proc/self/ns/pid"))
        except OSError:
            _PIDNS.append(None)
    return _PIDNS[0]
