"""The host side of the processes a snapshot lists: one HostProcess per pid, from /proc, with
what does not change while a process lives (command line) read once, and what rarely changes (its
container, pod or Slurm job: a process can be moved to another cgroup) checked again every
WORKLOAD_RECHECK_S seconds at most. A reader that needs only who each process is (the recorder:
not its state, CPU or memory) reads a known process's /proc files only at those checks: a pidfd
says, for all of them in one poll() a reading, which have ended."""

from __future__ import annotations

import errno
import os
import random
import select
from dataclasses import dataclass
from time import monotonic

from ..gpu_state import Workload
from ..i18n import N_
from . import workload
from .files import MAX_CGROUP_BYTES, cmdline, read_proc_file
from .stat import CLOCK_TICKS, Stat, StatFiles, boot_time, kept_fds_limit
from .text import NOT_VISIBLE
from .users import user_name

# A process moved to another cgroup after it was first read (pam_slurm_adopt adopting an ssh session
# into a job, `systemd-run --scope`, a container runtime) shows its new workload within this many
# seconds: each kept process's /proc/PID/cgroup is read again at a time drawn between half this and
# this (spread, so 200 processes cost ~9 reads a second, not 200 at once), and parsed only when it
# changed.
WORKLOAD_RECHECK_S = 30.0


@dataclass(slots=True)  # one for every process on every tick: slots build it quicker, smaller
class HostProcess:
    """A process's host side, from /proc (or a scenario's made-up process). Shared, never changed:
    a ProcessTable hands back the same object while /proc says the same of the process."""

    pid: int
    user: str | None
    uid: int | None
    command: str
    name: str
    state: str
    start_time: float  # unix time
    cpu_time: float  # seconds of user + system CPU
    rss: int  # bytes
    ppid: int
    container: str | None
    start_ticks: int | None = None  # clock ticks since boot: with the pid, the process's identity
    real: bool = True  # False: a simulated scenario's made-up process (nothing here to signal)
    workload: Workload | None = None  # its container, pod or Slurm job (procs/workload.py)


class ProcessTable:
    """Reads processes from /proc, remembering what does not change between reads."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._boot = boot_time()
        # (pid, start ticks) -> (comm as read and the exec mark, name, command, workload, container, start
        # time): what does not change while a process lives (its workload: until _cgroups says it
        # moved), so watch loops and the live view read /proc/PID/stat only. The raw comm and
        # Stat.exec_mark are kept to see an exec or a rename (same pid and start, a new name or a
        # new stack), and the name sanitized from comm is reused while they stay the same.
        self._fixed: dict[tuple[int, int], tuple[tuple[bytes, bytes], str, str, Workload | None, str | None,
                                                  float]] = {}
        # pid -> (its stat line, its owner's uid, the HostProcess made of them), for a process whose
        # fixed part is kept: while /proc says exactly the same of it (a process that sleeps: its
        # CPU time, memory and state unchanged), the next read is that same object, unparsed.
        # HostProcess objects are shared, never changed.
        self._last: dict[int, tuple[bytes, int, HostProcess, float]] = {}
        # (pid, start ticks) -> (its /proc/PID/cgroup as last read, the monotonic time to read it
        # again): a kept workload holds until then, and is read whole again only if the file changed.
        self._cgroups: dict[tuple[int, int], tuple[bytes | None, float]] = {}
        self.runtime_names = workload.RuntimeNames()  # container names from the runtimes' state files
        self.stats = StatFiles()
        # pid -> a pidfd of the process, opened before the read that put it in _last (so the process
        # it holds is the one read: had that one ended in between, the pidfd would say so).
        # Opened for readers with usage=False only. A pinned process is read only at its checks,
        # so its stat descriptor is not kept: pidfds and kept stat descriptors share one limit.
        self._pidfds: dict[int, int] = {}
        self._fd_budget = kept_fds_limit()
        self._use_pidfd = hasattr(os, "pidfd_open")
        self._poll = select.poll()
        self._ended: set[int] | None = None  # pidfds readable (ended) at this reading's poll

    def read(self, pid: int, usage: bool = True) -> HostProcess | str:
        """The process, or a one-line reason why its host side cannot be read. usage=False: only
        who it is must be current: a process read before that has not ended since (its pidfd) is
        handed back as read then, until its next workload check (its state, CPU and RSS as of
        then). An ended one is read at once (a zombie, or another process under its pid); an exec,
        a new owner, a move to another cgroup, or a main thread that exited while others run (a
        zombie leader) are seen at that check, within WORKLOAD_RECHECK_S."""
        if not usage:
            fd = self._pidfds.get(pid)
            if fd is not None and fd in self._ended_now():  # ended: the pid may be another's by now
                self._unpin(pid)
                fd = None
            if fd is None:
                self._pin(pid)
            elif (last := self._last.get(pid)) is not None and monotonic() < last[3]:
                return last[2]
        try:
            raw = self.stats.read(pid, keep=pid not in self._pidfds and self._room())
            uid = os.stat(f"/proc/{pid}").st_uid
        except (FileNotFoundError, ProcessLookupError):
            return NOT_VISIBLE
        except PermissionError:
            return N_("no permission to read /proc for this pid")
        except OSError as e:
            return f"cannot read /proc/{pid}: {e.strerror}"
        if not raw:
            return NOT_VISIBLE
        last = self._last.get(pid)
        now = monotonic()
        if last is not None and last[0] == raw and last[1] == uid and now < last[3]:
            return last[2]
        stat = Stat(raw)
        state, ticks, ppid, cpu_ticks, rss_pages = stat.changing()
        seen = (stat.raw_name, stat.exec_mark)
        key = (pid, ticks)
        fixed = self._fixed.get(key)
        if fixed is None or fixed[0] != seen or state == "zombie":
            # An empty command line (a zombie, a kernel thread, or a process caught inside exec) is
            # shown by name and not kept: the next read may find the real one.
            cgroup = read_proc_file(f"/proc/{pid}/cgroup", MAX_CGROUP_BYTES)
            name, line, owner = stat.name, cmdline(pid), self._workload(pid, cgroup)
            fixed = (seen, name, line or f"[{name}]", owner, workload.short_id(owner) if owner else None,
                     self._boot + ticks / CLOCK_TICKS)
            if line:
                self._fixed[key] = fixed
                self._cgroups[key] = (cgroup, now + _recheck_in())
        elif now >= self._cgroups[key][1]:  # moved to another cgroup since? (the file alone says)
            cgroup = read_proc_file(f"/proc/{pid}/cgroup", MAX_CGROUP_BYTES)
            if cgroup != self._cgroups[key][0]:
                owner = self._workload(pid, cgroup)
                fixed = (*fixed[:3], owner, workload.short_id(owner) if owner else None, fixed[5])
                self._fixed[key] = fixed
            self._cgroups[key] = (cgroup, now + _recheck_in())
        _seen, name, command, owner, container, started = fixed
        host = HostProcess(pid=pid, user=user_name(uid), uid=uid, command=command, name=name, state=state,
                           start_time=started, cpu_time=cpu_ticks / CLOCK_TICKS, rss=rss_pages * self._page,
                           ppid=ppid, container=container, start_ticks=ticks, workload=owner)
        if self._fixed.get(key) is fixed and state != "zombie":
            self._last[pid] = (raw, uid, host, self._cgroups[key][1])
        else:  # read whole again next time (a command line not read yet, a zombie)
            self._last.pop(pid, None)
        return host

    def _workload(self, pid: int, cgroup: bytes | None) -> Workload | None:
        """The workload of pid, from its cgroup file as just read (None: unreadable, in none)."""
        found = None if cgroup is None else workload.read(pid, self.runtime_names, raw=cgroup)
        if isinstance(found, str):  # a cgroup file that cannot be the kernel's: said, not believed
            return Workload(note=workload.PID_NOTE.format(pid=pid, why=found))
        if found is not None and found.slurm_job is not None:
            from .environ import read_environ  # only for a Slurm job's processes: status stays light

            env = read_environ(pid, workload.slurm_variables()).values
            found = workload.with_environment(found, env)
        return found

    def _ended_now(self) -> set[int]:
        """The pidfds of processes that have ended, polled once a reading (forget_all_but ends one)."""
        if self._ended is None:
            self._ended = {fd for fd, _ in self._poll.poll(0)} if self._pidfds else set()
        return self._ended

    def _room(self) -> bool:
        """Whether one more descriptor may be kept (pidfds and stat descriptors together)."""
        return len(self._pidfds) + self.stats.kept() < self._fd_budget

    def _pin(self, pid: int) -> None:
        """Hold pid's process by a pidfd (none where the kernel has no pidfds, or past the limit:
        then its kept stat descriptor, if any, stays, and each read is one pread)."""
        if not self._use_pidfd or len(self._pidfds) + self.stats.kept() - self.stats.holds(pid) >= self._fd_budget:
            return
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except OSError as e:
            if e.errno in (errno.ENOSYS, errno.EPERM):  # no pidfds here (an old kernel, a seccomp filter)
                self._use_pidfd = False
            return  # out of descriptors (EMFILE): read through /proc, and tried again next time
        self.stats.forget(pid)  # pinned, it is read only at its checks: its stat descriptor goes
        self._pidfds[pid] = fd
        self._poll.register(fd, select.POLLIN)

    def _unpin(self, pid: int) -> None:
        fd = self._pidfds.pop(pid)
        self._poll.unregister(fd)
        os.close(fd)
        if self._ended is not None:
            self._ended.discard(fd)  # the number may come back as another pidfd this reading

    def forget_all_but(self, pids: set[int]) -> None:
        """Drop what is remembered about processes not in `pids` (the latest snapshot's), so a
        long-running view does not grow with every process that came and went. Ends a reading."""
        self._ended = None
        for pid in [p for p in self._pidfds if p not in pids]:
            self._unpin(pid)
        if any(k[0] not in pids for k in self._fixed):
            self._fixed = {k: v for k, v in self._fixed.items() if k[0] in pids}
            self._cgroups = {k: v for k, v in self._cgroups.items() if k[0] in pids}
        if any(pid not in pids for pid in self._last):
            self._last = {pid: v for pid, v in self._last.items() if pid in pids}
        self.stats.forget_all_but(pids)

    def close(self) -> None:
        for pid in list(self._pidfds):
            self._unpin(pid)
        self.stats.close()


def _recheck_in() -> float:
    return random.uniform(WORKLOAD_RECHECK_S / 2, WORKLOAD_RECHECK_S)


def cpu_percent_since(proc: HostProcess, now: float,
                      previous: dict[tuple[int, int | None], tuple[float, float]]) -> float:
    """CPU % since the previous reading of this process in `previous` (updated; keyed by pid and
    start ticks), else averaged over its lifetime (as ps does)."""
    key = (proc.pid, proc.start_ticks)
    before = previous.get(key)
    previous[key] = (proc.cpu_time, now)
    if before is not None and now > before[1]:
        return max(0.0, 100 * (proc.cpu_time - before[0]) / (now - before[1]))
    lifetime = now - proc.start_time
    return 100 * proc.cpu_time / lifetime if lifetime > 0 else 0.0
