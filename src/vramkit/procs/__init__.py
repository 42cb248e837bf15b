"""The host side of a pid, read straight from /proc: every /proc read of vramkit is in this package.

vramkit runs on Linux GPU servers; reading /proc directly costs a few file reads per pid and
keeps `vram status` fast (importing psutil alone costs ~30 ms). Process names, command lines
and environments come from other users, so they are stripped of control characters here, once.

One concern per module:

  text.py        sanitize: the one sanitizer of other users' text; NOT_VISIBLE, OTHER_NAMESPACE
  files.py       bounded reads of a process's files: cmdline, comm
  workload.py    whom a process works for, from its cgroup: container, Kubernetes pod, Slurm job
  stat.py        /proc/PID/stat: the one parser (Stat), StatFiles (kept-open descriptors), parents,
                 zombies (is_defunct), boot time, clock ticks, boot id
  users.py       user names (cached), the uid owning a pid
  table.py       HostProcess and ProcessTable: what a snapshot shows of each pid; CPU %
  environ.py     a few variables of /proc/PID/environ, bounded, or why they cannot be read
  load.py        the host's CPU counters and memory
  identities.py  who a process is: ProcessKey (pid, start ticks, boot id), Identity (what kill
                 checks), gone, ancestors
  namespaces.py  PID namespaces: this process's, this /proc's, and whether it is the host's
  signals.py     pidfd pinning, signalling and waiting (Pinned, pin, wait_gone)
  locks.py       who holds a flock (/proc/locks)

The names below are importable from `vramkit.procs` and load their module on first use, so
`vram status` loads neither the signalling nor the environment readers.
"""

from __future__ import annotations

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from .environ import ENV_NOT_VISIBLE, ENV_REFUSED_TO_ROOT, MAX_ENVIRON_BYTES, Environ, read_environ
    from .files import MAX_CGROUP_BYTES, MAX_CMDLINE_BYTES, cmdline, comm, read_proc_file
    from .identities import (
        ALIVE,
        GONE,
        OTHER_BOOT,
        PF_KTHREAD,
        REUSED,
        Identity,
        ProcessKey,
        ancestors,
        gone,
        identity,
    )
    from .load import HostLoad, read_host_load
    from .locks import flock_holder, flock_holders
    from .namespaces import (
        INITIAL_PID_NS_INODE,
        in_initial_pid_namespace,
        in_pid_namespace,
        namespace_inode,
        pid_namespace,
        proc_pid_namespace,
        shows_pids_of,
    )
    from .signals import Pinned, pin, wait_gone
    from .stat import (
        CLOCK_TICKS,
        MAX_KEPT_FDS,
        Stat,
        StatFiles,
        boot_id,
        boot_time,
        descends_from,
        is_defunct,
        kept_fds_limit,
        parent,
        read_stat,
        start_time,
        state_name,
    )
    from .table import HostProcess, ProcessTable, cpu_percent_since
    from .text import NOT_VISIBLE, OTHER_NAMESPACE, sanitize
    from .users import uid_of, user_name

_MODULES = {
    "environ": ("ENV_NOT_VISIBLE", "ENV_REFUSED_TO_ROOT", "MAX_ENVIRON_BYTES", "Environ", "read_environ"),
    "files": ("MAX_CGROUP_BYTES", "MAX_CMDLINE_BYTES", "cmdline", "comm", "read_proc_file"),
    "identities": ("ALIVE", "GONE", "OTHER_BOOT", "PF_KTHREAD", "REUSED", "Identity", "ProcessKey", "ancestors",
                   "gone", "identity"),
    "namespaces": ("INITIAL_PID_NS_INODE", "in_initial_pid_namespace", "in_pid_namespace", "namespace_inode",
                   "pid_namespace", "proc_pid_namespace", "shows_pids_of"),
    "load": ("HostLoad", "read_host_load"),
    "locks": ("flock_holder", "flock_holders"),
    "signals": ("Pinned", "pin", "wait_gone"),
    "stat": ("CLOCK_TICKS", "MAX_KEPT_FDS", "Stat", "StatFiles", "boot_id", "boot_time", "descends_from",
             "is_defunct", "kept_fds_limit", "parent", "read_stat", "start_time", "state_name"),
    "table": ("HostProcess", "ProcessTable", "cpu_percent_since"),
    "text": ("NOT_VISIBLE", "OTHER_NAMESPACE", "sanitize"),
    "users": ("uid_of", "user_name"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}
# The same names as _WHERE's (tests/test_procs_package.py checks).
__all__ = ["ALIVE", "CLOCK_TICKS", "ENV_NOT_VISIBLE", "ENV_REFUSED_TO_ROOT", "Environ", "GONE", "HostLoad",
           "HostProcess", "INITIAL_PID_NS_INODE", "Identity", "MAX_CGROUP_BYTES", "MAX_CMDLINE_BYTES",
           "MAX_ENVIRON_BYTES", "MAX_KEPT_FDS", "NOT_VISIBLE", "OTHER_BOOT", "OTHER_NAMESPACE",
           "PF_KTHREAD", "Pinned",
           "ProcessKey", "ProcessTable", "REUSED", "Stat", "StatFiles", "ancestors", "boot_id", "boot_time",
           "cmdline", "comm", "cpu_percent_since", "descends_from", "flock_holder",
           "flock_holders", "gone", "identity", "in_initial_pid_namespace", "in_pid_namespace", "is_defunct",
           "kept_fds_limit", "namespace_inode", "parent", "pid_namespace", "pin", "proc_pid_namespace",
           "read_environ", "read_host_load", "read_proc_file", "read_stat",
           "sanitize", "shows_pids_of", "start_time", "state_name", "uid_of", "user_name", "wait_gone"]


def __getattr__(name: str) -> object:
    """A name of a submodule, imported on first use (then kept here: later uses cost nothing)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(__import__(f"{__name__}.{module}", fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
