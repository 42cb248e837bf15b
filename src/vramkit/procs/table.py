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


class _Known:
    """What a ProcessTable keeps of one process between reads: one object, not a tuple in each of
    three dicts (the live view keeps one for each of hundreds of processes)."""

    __slots__ = ("ticks", "comm", "exec_mark", "name", "command", "workload", "container", "started",
                 "cgroup", "recheck_at", "stat_end", "stat_hash", "uid", "host")

    def __init__(self, ticks: int, comm: bytes, exec_mark: bytes, name: str, command: str,
                 owner: Workload | None, started: float, cgroup: bytes | None, recheck_at: float) -> None:
        self.ticks = ticks  # with the pid, the process (a reused pid has other start ticks)
        # comm as read and the exec mark: a new name or a new stack under the same pid and start
        # is an exec or a rename, read whole again; the name sanitized from comm is kept meanwhile
        self.comm, self.exec_mark, self.name, self.command = comm, exec_mark, name, command
        self.workload, self.container, self.started = owner, workload.short_id(owner) if owner else None, started
        # /proc/PID/cgroup as last read, and the monotonic time to read it again: the workload
        # holds until then, and is parsed again only if the file changed
        self.cgroup, self.recheck_at = cgroup, recheck_at
        # The stat line as last read, up to the last field read (Stat.marks): its length and the
        # hash of those bytes (an int, not the ~200-byte line: 90 KiB at 500 processes), its
        # owner's uid, and the HostProcess made of them. While /proc says the same (a process that
        # sleeps: its CPU time, memory and state unchanged), the next read is that object,
        # unparsed. 0: parse the next read (a zombie). HostProcess objects are shared, never
        # changed. The hash is the interpreter's keyed one (SipHash, a key drawn at start): a line
        # cannot be written to collide with another, and a chance collision of two readings of one
        # process would at worst show its last state, CPU and RSS until its next workload check.
        self.stat_end, self.stat_hash = 0, 0
        self.uid = -1
        self.host: HostProcess | None = None


class ProcessTable:
    """Reads processes from /proc, remembering what does not change between reads."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._boot = boot_time()
        # pid -> what is kept of its process while it lives (its command line, workload, last stat
        # line), so watch loops and the live view read /proc/PID/stat only.
        self._known: dict[int, _Known] = {}
        # One object for equal texts of processes kept (a job's workers: one name, command line and
        # cgroup file): text -> itself; those of processes that ended go as they end.
        self._shared_bytes: dict[bytes, bytes] = {}
        self._shared_text: dict[str, str] = {}
        self.runtime_names = workload.RuntimeNames()  # container names from the runtimes' state files
        self.stats = StatFiles()
        # pid -> a pidfd of the process, opened before the read that kept its stat line (so the
        # process it holds is the one read: had that one ended in between, the pidfd would say so).
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
            elif (kept := self._known.get(pid)) is not None and kept.host is not None and monotonic() < kept.recheck_at:
                return kept.host
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
        kept = self._known.get(pid)
        now = monotonic()
        # The kept part ends just after a separator, 26 fields past the comm (the comm is at most
        # 64 bytes; it ends at the line's last ')', and only numbers follow it): a line that starts
        # with the same bytes has its last ')' where the kept one is, so it says the same of every
        # field read.
        if kept is not None and (end := kept.stat_end) and hash(raw[:end]) == kept.stat_hash and kept.uid == uid \
                and now < kept.recheck_at and (host := kept.host) is not None:
            return host
        stat = Stat(raw)
        state, ticks, ppid, cpu_ticks, rss_pages = stat.changing()
        comm, (mark, length) = stat.raw_name, stat.marks(len(raw))
        if kept is None or kept.ticks != ticks or kept.comm != comm or kept.exec_mark != mark or state == "zombie":
            # An empty command line (a zombie, a kernel thread, or a process caught inside exec) is
            # shown by name and not kept: the next read may find the real one.
            cgroup = read_proc_file(f"/proc/{pid}/cgroup", MAX_CGROUP_BYTES)
            name, line = stat.name, cmdline(pid)
            kept = _Known(ticks, comm, mark, name, line or f"[{name}]", self._workload(pid, cgroup),
                          self._boot + ticks / CLOCK_TICKS, cgroup, now + _recheck_in())
            if line:
                self._known[pid] = self._share(kept)
            else:
                self._known.pop(pid, None)
        elif now >= kept.recheck_at:  # moved to another cgroup since? (the file alone says)
            cgroup = read_proc_file(f"/proc/{pid}/cgroup", MAX_CGROUP_BYTES)
            if cgroup != kept.cgroup:
                kept.workload = self._workload(pid, cgroup)
                kept.container = workload.short_id(kept.workload) if kept.workload else None
                kept.cgroup = None if cgroup is None else self._shared_copy(cgroup)
            kept.recheck_at = now + _recheck_in()
        host = HostProcess(pid=pid, user=user_name(uid), uid=uid, command=kept.command, name=kept.name, state=state,
                           start_time=kept.started, cpu_time=cpu_ticks / CLOCK_TICKS, rss=rss_pages * self._page,
                           ppid=ppid, container=kept.container, start_ticks=kept.ticks,  # the int kept
                           workload=kept.workload)
        if state != "zombie" and self._known.get(pid) is kept:
            kept.stat_end, kept.stat_hash = (length, hash(raw[:length])) if length else (0, 0)
            kept.uid, kept.host = uid, host
        else:  # read whole again next time (a command line not read yet, a zombie)
            kept.stat_end, kept.host = 0, None
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
        if any(pid not in pids for pid in self._known):
            self._known = {pid: kept for pid, kept in self._known.items() if pid in pids}
            self._reshare()
        elif len(self._shared_bytes) > 2 * len(self._known) + 64:  # cgroup files that processes left
            self._reshare()
        self.stats.forget_all_but(pids)

    def _share(self, kept: _Known) -> _Known:
        """kept, its texts replaced by equal ones another process keeps, if any."""
        kept.comm = self._shared_copy(kept.comm)
        if kept.cgroup is not None:
            kept.cgroup = self._shared_copy(kept.cgroup)
        kept.name = self._shared_text.setdefault(kept.name, kept.name)
        kept.command = self._shared_text.setdefault(kept.command, kept.command)
        return kept

    def _shared_copy(self, value: bytes) -> bytes:
        shared = self._shared_bytes.get(value)
        if shared is None:  # a copy of its size: os.read's bytes sit where its 8 KiB buffer was, in the C heap
            shared = self._shared_bytes[value] = bytes(memoryview(value))
        return shared

    def _reshare(self) -> None:
        """Only the texts of the processes kept stay shared (not those of processes that ended)."""
        self._shared_bytes, self._shared_text = {}, {}
        for kept in self._known.values():
            for value in (kept.comm, kept.cgroup):
                if value is not None:
                    self._shared_bytes.setdefault(value, value)
            self._shared_text.setdefault(kept.name, kept.name)
            self._shared_text.setdefault(kept.command, kept.command)

    def close(self) -> None:
        for pid in list(self._pidfds):
            self._unpin(pid)
        self.stats.close()


def _recheck_in() -> float:
    return random.uniform(WORKLOAD_RECHECK_S / 2, WORKLOAD_RECHECK_S)


def cpu_percent_since(proc: HostProcess, now: float,
                      previous: dict[int, tuple[int | None, float, float]]) -> float:
    """CPU % since the previous reading of this process in `previous` (updated; pid -> its start
    ticks, CPU seconds and when: one tuple a process), else averaged over its lifetime (as ps does)."""
    before = previous.get(proc.pid)
    previous[proc.pid] = (proc.start_ticks, proc.cpu_time, now)
    if before is not None and before[0] == proc.start_ticks and now > before[2]:  # not a reused pid
        return max(0.0, 100 * (proc.cpu_time - before[1]) / (now - before[2]))
    lifetime = now - proc.start_time
    return 100 * proc.cpu_time / lifetime if lifetime > 0 else 0.0
