"""Inside a container: NVML's pids are the host's, and this /proc numbers processes its own way.

The driver reports every process by its pid in the host's PID namespace; a container's /proc has
other numbers (and may give one of the host's numbers to an unrelated process). So nvidia-smi
shows no processes there, and reading /proc/PID for a pid NVML reported would show the wrong
process. What can be known from inside: which of this container's processes hold a GPU's device
file open (holders.py), and which GPUs NVML lists each host pid on, with its memory. A host pid
is matched to a process here only when nothing else fits: one process here holds (at least) the
GPUs NVML lists that pid on, and no other listed pid could be it nor other process here could
hold it. Otherwise the rows say which processes here may hold the memory, between them, and a
row no process here can hold is said to run outside this container. A host pid is never shown
as a pid of this container.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .backends import Backend
from .gpu_state import Device, GpuProcess, Snapshot
from .holders import Holder, scan
from .i18n import N_, _, ngettext
from .procs import OTHER_NAMESPACE, HostProcess, ProcessTable
from .units import format_size

Join = Callable[[GpuProcess, Device, HostProcess], None]  # fills a row's host side (machine._join_host)


def map_to_this_namespace(snap: Snapshot, backend: Backend, join: Join) -> None:
    """Give each row NVML listed under another PID namespace's pid (host_missing is
    OTHER_NAMESPACE) its process here where that is certain, else the processes here that may
    hold it (`holders_here`) or none. Changes the rows in place."""
    rows = [(p, dev) for dev in snap.gpus for p in dev.processes if p.host_missing == OTHER_NAMESPACE]
    if not rows:
        return
    for p, _host in rows:
        p.nvml_pid = p.pid  # from here on not a pid of this /proc (the holders scan reads pid_here)
    table = ProcessTable()
    try:
        holders = [h for h in scan(snap, backend, table=table).holders if h.gpus]
    finally:
        table.close()
    on: dict[int, set[int]] = {}  # host pid -> the GPUs NVML lists it on
    for p, _host in rows:
        on.setdefault(p.pid, set()).add(p.gpu)
    fits = {pid: [h for h in holders if gpus <= set(h.gpus)] for pid, gpus in on.items()}
    fitted_by: dict[int, set[int]] = {}  # holder pid -> the host pids it may be
    for pid, fitting in fits.items():
        for h in fitting:
            fitted_by.setdefault(h.pid, set()).add(pid)
    mapped = _certain(fits, fitted_by)
    for p, dev in rows:
        holder = mapped.get(p.pid)
        if holder is not None:
            p.pid, p.host_missing = holder.pid, None
            join(p, dev, holder.host)
            continue
        fitting = fits[p.pid]
        p.holders_here = tuple(h.pid for h in fitting)
        if not fitting:
            reason = _NOT_ALL if any(p.gpu in h.gpus for h in holders) else _OUTSIDE
        elif len(fitting) == 1:
            reason = _MAYBE_ONE  # (not certain: another host pid may be that holder too)
        else:
            rivals = set().union(*(fitted_by[h.pid] for h in fitting))  # the host pids they may be
            reason = _ONE_OF_OR_OUTSIDE if len(rivals) > len(fitting) else _ONE_OF
        p.host_missing = _said(reason, p, local=False)


def _certain(fits: dict[int, list[Holder]], fitted_by: dict[int, set[int]]) -> dict[int, Holder]:
    """Host pid -> its process here, where nothing else fits: the host pid and the holder form a
    group of their own (no other host pid may be that holder, no other holder may be that pid)."""
    return {pid: holders[0] for pid, holders in fits.items()
            if len(holders) == 1 and fitted_by[holders[0].pid] == {pid}}


# Why a host pid has no process here, by what holds its GPU here. None: no process here holds it,
# or (NVML lists the host pid on more GPUs than this one) none holds every GPU it is listed on.
_OUTSIDE = N_("host pid {pid}, of another PID namespace: no process of this container holds GPU {gpu} open, so it "
              "runs outside it")
_NOT_ALL = N_("host pid {pid}, of another PID namespace: NVML lists it on other GPUs besides GPU {gpu}, and no "
              "process of this container holds all of them open, so it runs outside it")
# One holds them all, but another host pid may be that process.
_MAYBE_ONE = N_("host pid {pid}, of another PID namespace: pid {here} here holds GPU {gpu}, but so may a process "
                "outside this container: which holds this memory cannot be told")
# Several hold them all: as many host pids as they may be, or more (then some run outside).
_ONE_OF = N_("host pid {pid}, of another PID namespace: held by one of pids {pids} here, which cannot be told apart")
_ONE_OF_OR_OUTSIDE = N_("host pid {pid}, of another PID namespace: held by one of pids {pids} here or by a process "
                        "outside this container (NVML lists more processes than these), which cannot be told")
_BY_HOLDERS = {0: (_OUTSIDE, _NOT_ALL), 1: (_MAYBE_ONE,), 2: (_ONE_OF, _ONE_OF_OR_OUTSIDE)}


def _said(reason: str, p: GpuProcess, local: bool) -> str:
    pids = p.holders_here
    listed = _pid_list(pids) if local and pids else ", ".join(map(str, pids))
    return (_(reason) if local else reason).format(pid=p.nvml_pid, gpu=p.gpu, here=pids[0] if pids else "",
                                                   pids=listed)


def why_unmapped(p: GpuProcess, local: bool = True) -> str:
    """Why a row NVML lists under a host pid has no process here: in English (`local=False`: what
    the row keeps, the JSON's host_missing) or in the reader's words. Which reason it is, the row
    says by the English it keeps (map_to_this_namespace chose it from what it alone sees: the
    other rows, every holder here)."""
    reasons = _BY_HOLDERS[min(len(p.holders_here), 2)]
    reason = next((r for r in reasons if _said(r, p, local=False) == p.host_missing), reasons[0])
    return _said(reason, p, local)


def _pid_list(pids: Iterable[int]) -> str:
    """311 / 311 and 420 / 311, 420 and 512."""
    shown = [str(p) for p in pids]
    if len(shown) == 1:
        return shown[0]
    return _("{pids} and {last}").format(pids=", ".join(shown[:-1]), last=shown[-1])


def summary(procs: list[GpuProcess]) -> list[str]:
    """What the rows NVML lists under host pids that no process here could be told to be add up to,
    a line per GPU and group of processes here that may hold them:
    '2 processes of this container hold GPU 0: 14.2GiB between pids 311 and 420'."""
    groups: dict[tuple[int, tuple[int, ...]], list[GpuProcess]] = {}
    for p in procs:
        if p.pid_here is None:
            groups.setdefault((p.gpu, p.holders_here), []).append(p)
    lines = []
    for (gpu, here), rows in sorted(groups.items()):
        known = [p.memory for p in rows if p.memory is not None]
        held = format_size(sum(known)) if known else "N/A"
        n = len(rows)
        if not here:
            lines.append(ngettext("GPU {gpu}: {held} held by {n} process outside this container (host pid {pids})",
                                  "GPU {gpu}: {held} held by {n} processes outside this container (host pids {pids})",
                                  n).format(gpu=gpu, held=held, n=n, pids=_pid_list(p.nvml_pid or 0 for p in rows)))
        elif len(here) == 1:
            lines.append(ngettext("1 process of this container holds GPU {gpu} (pid {pid}); NVML lists {n} process "
                                  "there with {held}: which are its cannot be told",
                                  "1 process of this container holds GPU {gpu} (pid {pid}); NVML lists {n} processes "
                                  "there with {held}: which are its cannot be told", n).format(
                gpu=gpu, pid=here[0], n=n, held=held))
        elif n == len(here):
            lines.append(_("{count} processes of this container hold GPU {gpu}: {held} between pids {pids}").format(
                count=len(here), gpu=gpu, held=held, pids=_pid_list(here)))
        else:
            lines.append(ngettext("{count} processes of this container hold GPU {gpu}: {held} between pids {pids} "
                                  "(NVML lists {n} process)", "{count} processes of this container hold GPU {gpu}: "
                                  "{held} between pids {pids} (NVML lists {n} processes)", n).format(
                count=len(here), gpu=gpu, held=held, pids=_pid_list(here), n=n))
    return lines
