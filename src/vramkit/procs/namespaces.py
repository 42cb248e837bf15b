"""PID namespaces: pids compare only within one, and NVML reports the host's."""

from __future__ import annotations

import os

# The inode number of the initial PID namespace (PROC_PID_INIT_INO in include/linux/proc_ns.h).
INITIAL_PID_NS_INODE = 0xEFFFFFFC


def in_initial_pid_namespace() -> bool | None:
    """Whether this process sees the host's PID namespace (the one NVML reports pids in);
    None when it cannot be told."""
    return in_pid_namespace(INITIAL_PID_NS_INODE)


def in_pid_namespace(namespace: int) -> bool | None:
    """Whether this process runs in PID namespace `namespace` (an inode number), as far as this
    /proc can say: False where /proc has no /proc/self (it is a namespace this process is not in:
    a container's /proc seen from outside, `nsenter --mount` without --pid, so no pid read there is
    one this process's numbering shares); None when it cannot be told."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == namespace
    except OSError:
        return False if proc_lacks_self() else None


def proc_lacks_self() -> bool:
    """Whether /proc/self does not resolve: this /proc is mounted by a PID namespace in which this
    process has no pid (the kernel's /proc/self then dangles), or no /proc is mounted. Either way a
    pid read there names no process a signal from here reaches by that number."""
    try:
        os.readlink("/proc/self")
    except FileNotFoundError:
        return True
    except OSError:  # refused (a sandbox's rule): not known to lack it
        return False
    return False


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


def namespace_inode(value: object) -> int | None:
    """A PID namespace as an inode number, from the number itself or the text /proc/PID/ns/pid
    links to ("pid:[4026531836]"); None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    if isinstance(value, str) and value.startswith("pid:[") and value.endswith("]") and value[5:-1].isdigit():
        return int(value[5:-1]) or None
    return None


def proc_pid_namespace() -> int | None:
    """The PID namespace whose pids this /proc shows (the namespace of its pid 1), as an inode
    number; None when it cannot be told. Usually this process's own, but a /proc mounted by a
    parent namespace (a pid namespace made without remounting /proc) shows the parent's pids."""
    try:
        return os.stat("/proc/1/ns/pid").st_ino
    except OSError:  # pid 1 is not ours to inspect (another user's init): ask who is
        pass
    try:
        nspid = _nspid("self")
        own = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    if nspid is None:
        return None
    if len(nspid) == 1:  # this /proc numbers us with one pid: it is our namespace's
        return own
    # An outer namespace's /proc: the namespace of the nearest ancestor that has one pid in it, where
    # its link may be read (`unshare --pid --fork` without --mount-proc: unshare itself).
    from .stat import parent

    pid = parent(nspid[0])
    for _unused in range(64):
        if pid is None or pid < 1:
            return None
        try:
            if len(_nspid(str(pid)) or ()) == 1:
                return os.stat(f"/proc/{pid}/ns/pid").st_ino
        except OSError:
            pass  # gone, or not ours to inspect: its parent may be
        pid = parent(pid)
    return None


def _nspid(pid: str) -> list[int] | None:
    """NSpid of /proc/PID/status: the pid as this /proc numbers it, then in each nested namespace."""
    with open(f"/proc/{pid}/status", "rb") as f:
        line = next((line for line in f if line.startswith(b"NSpid:")), None)
    return None if line is None else [int(x) for x in line.split()[1:]]


def shows_pids_of(namespace: int) -> bool:
    """Whether this /proc numbers processes as PID namespace `namespace` does (a pid reported in
    that namespace names the same process here). Unknown counts as yes only where this process
    itself is in that namespace (or its own namespace cannot be read either: as before)."""
    shown = proc_pid_namespace()
    if shown is not None:
        return shown == namespace
    return in_pid_namespace(namespace) is not False


_OURS: list[bool] = []  # proc_numbers_ours(), read once: a process's namespaces stay as they are


def proc_numbers_ours() -> bool:
    """Whether this /proc numbers processes as this process's PID namespace does, so that a pid
    read there is the pid a signal (os.kill, pidfd_open) or os.getpid() uses. Not where /proc is an
    outer namespace's (a PID namespace made without remounting /proc: `unshare --pid --fork`): its
    pid N is another process, or none, for a signal sent from here; a lease's holders are not
    looked up there, and vram kill refuses what it reads there. Nor where /proc has no /proc/self
    (a container's /proc entered without its PID namespace). Otherwise unknown counts as yes (as
    before vram asked)."""
    if not _OURS:
        own = namespace_inode(pid_namespace())
        _OURS.append(not proc_lacks_self() if own is None else shows_pids_of(own))
    return _OURS[0]


_PROC_IS_HOSTS: list[bool] = []  # whether this /proc's pid 1 is the host's init, read once


def proc_is_hosts() -> bool:
    """Whether this /proc numbers processes as the host does, so that its pid 1 is the host's init;
    unknown counts as yes (as before vram asked)."""
    if not _PROC_IS_HOSTS:
        shown = proc_pid_namespace()
        _PROC_IS_HOSTS.append(shown is None or shown == INITIAL_PID_NS_INODE)
    return _PROC_IS_HOSTS[0]


def orphaned(pid: int, ppid: int | None, read_here: bool = True) -> bool:
    """Whether a process was left to init by its parent: its parent is pid 1, the host's init. In a
    container's PID namespace pid 1 is the container's own first process (its entrypoint, tini, a
    shell), the parent of what it starts: a child of it is no orphan there, as it is none seen from
    the host (and an orphan there cannot be told from one). `read_here` False: a simulated
    scenario's made-up process, whose parent is the one the scenario's host gives it."""
    return ppid == 1 and pid != 1 and (not read_here or proc_is_hosts())
