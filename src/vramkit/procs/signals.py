"""Signalling a process without racing pid reuse: pin it through a pidfd after checking its
(pid, start ticks), send through the pidfd, wait for it to end."""

from __future__ import annotations

import errno
import os
import select
import signal
import time
from collections.abc import Callable

from .identities import Identity, gone, identity
from .namespaces import proc_numbers_ours


class Pinned:
    """A process held by a pidfd after its identity was checked: a signal sent through the pidfd
    reaches that process or nobody, even if the pid is reused in between. Where the kernel has
    no pidfd_open (before 5.3) the identity is checked again just before each os.kill."""

    def __init__(self, pid: int, start_ticks: int, fd: int | None, now: Identity):
        self.pid, self.start_ticks, self.fd, self.identity = pid, start_ticks, fd, now

    def send(self, sig: int) -> str | None:
        """Send sig. None when sent, else why not: 'exited', 'identity' or 'permission'."""
        if self.pid <= 1 or self.pid == os.getpid():  # last line of defence; protect.py says why
            return "permission"
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                if gone(self.pid, self.start_ticks):
                    return "identity" if identity(self.pid) is not None else "exited"
                os.kill(self.pid, sig)
        except ProcessLookupError:
            return "exited"
        except PermissionError:
            return "permission"
        return None

    def gone(self) -> bool:
        return gone(self.pid, self.start_ticks)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def pin(pid: int, start_ticks: int) -> Pinned | str:
    """Hold (pid, start_ticks) for signalling, or say why not: 'exited' (no such pid, or it is
    defunct), 'identity' (the pid now belongs to another process) or 'namespace' (this /proc
    numbers processes as another PID namespace does: its /proc/PID, whose start ticks were
    checked, is not the process a signal to PID reaches)."""
    fd = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # no such pid in vram's namespace: exited, where /proc numbers as it does
        return "exited" if proc_numbers_ours() else "namespace"
    except (AttributeError, OSError) as e:  # no pidfd_open in this kernel or Python
        if isinstance(e, OSError) and e.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            raise
    # The pidfd holds the process `pid` names in vram's PID namespace; /proc/PID is the one this
    # /proc numbers PID. They are one process only where the two number alike: the kernel says
    # which pid this /proc gives the pidfd's process, else (no pidfd, or a kernel that does not say)
    # the namespaces are compared. Never signal on doubt.
    seen = None if fd is None else pidfd_pid(fd)
    if seen == -1:
        _close(fd)
        return "exited"
    if seen != pid and (seen is not None or not proc_numbers_ours()):
        _close(fd)
        return "namespace"
    # Read the identity after opening the pidfd: if it still matches, the pidfd holds the
    # process recorded at selection (a pid is only reused after that process is gone).
    now = identity(pid)
    if now is None:
        _close(fd)
        return "exited"
    if now.start_ticks != start_ticks:
        _close(fd)
        return "identity"
    return Pinned(pid, start_ticks, fd, now)


def pidfd_pid(fd: int) -> int | None:
    """The pid this /proc gives the process pidfd `fd` holds, from the `Pid:` line of
    /proc/self/fdinfo/FD (the kernel prints it in the numbering of the /proc it is read through: 0
    where that namespace has no pid for it, -1 once it has exited); None where there is no such
    line (older kernels print none) or it cannot be read."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            text = f.read(4096)  # a few short lines: bounded all the same
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(b"Pid:"):
            try:
                return int(line[4:])
            except ValueError:
                return None
    return None


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def wait_gone(pinned: list[Pinned], deadline: float,
              tick: Callable[[list[int]], object] | None = None) -> dict[int, float]:
    """Wait until each pinned process has ended or time.monotonic() passes deadline. Returns
    {pid: time.monotonic() when it was seen gone}. tick(remaining pids) is called about every
    0.1 s (progress lines)."""
    ended: dict[int, float] = {}
    poller = select.poll()
    by_fd: dict[int, Pinned] = {}
    for p in pinned:
        if p.fd is not None:
            poller.register(p.fd, select.POLLIN)
            by_fd[p.fd] = p
    while True:
        for p in pinned:
            if p.pid not in ended and p.gone():
                ended[p.pid] = time.monotonic()
        remaining = [p.pid for p in pinned if p.pid not in ended]
        if not remaining or time.monotonic() >= deadline:
            return ended
        if tick is not None:
            tick(remaining)
        wait = min(0.1, max(0.0, deadline - time.monotonic()))
        if by_fd:
            for fd, _ in poller.poll(wait * 1000):
                # Readable: the whole thread group has exited (it may be a zombie until reaped).
                ended.setdefault(by_fd[fd].pid, time.monotonic())
                poller.unregister(fd)
                del by_fd[fd]
        else:
            time.sleep(wait)
