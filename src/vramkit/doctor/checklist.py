"""`vram doctor` without a log: the usual reasons a job on this machine runs out of memory.

Checks, on the GPUs this shell can use (CUDA_VISIBLE_DEVICES respected):
- GPUs lost (fallen off the bus, or needing a reset): NVML cannot read them, so no job can use them;
- GPUs nearly full;
- other users' processes on the GPUs you chose (only when CUDA_VISIBLE_DEVICES picks GPUs: on a
  shared server every GPU has other users, which is not by itself a problem);
- defunct (zombie) processes still holding memory, and pids /proc cannot see that still hold it;
- your own orphaned processes holding memory on an idle GPU (a launcher died, its worker lives on);
- idle holders: memory held on a GPU at 0% utilization for a while;
- CUDA_VISIBLE_DEVICES pitfalls: indices that do not exist, an empty value, index order versus
  PCI order on a machine with different GPUs, every job crowding onto GPU 0;
- DataParallel imbalance: one process with far more memory on its first GPU than on its others;
- a process holding memory on a GPU its own CUDA_VISIBLE_DEVICES did not name (read from
  /proc/PID/environ where this user may: process_view);
- GPU health, when the snapshot's health was read (Machine.read_health): uncorrected ECC errors,
  a row remap or page retirement waiting for a reset (or failed), clocks held back by power or
  heat, a busy GPU stuck in a low performance state.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .. import process_view
from .. import visible as visible_devices
from ..cuda_env import ORDER_PCI, VISIBLE, Visible, devices_of
from ..gpu_state import Device, GpuProcess, Snapshot
from ..i18n import N_, _, join_words, ngettext, pgettext
from ..procs import Environ, read_environ, user_name
from ..units import format_duration, format_size

NEAR_FULL_FREE = 0.05  # a GPU with less than 5% of its memory free is nearly full
IDLE_MIN_AGE = 600.0  # seconds: a process that just started is not yet an idle holder
DP_RATIO = 1.5  # first GPU holds >= 1.5x the median of the others ...
DP_MIN_EXTRA = 2 * 1024**3  # ... and at least 2 GiB more
ECC_CORRECTED_MANY = 1000  # corrected errors since the driver loaded that say the memory is wearing
BUSY = 20  # % utilization: a GPU this busy should be in P0-P2, not idling its clocks
LOW_PSTATE = 5  # P5 and above: clocks for an idle or display-only GPU
# What holds clocks back that a person should know of; the rest are normal (idle, app clocks, sync boost).
THROTTLES = {"sw power cap": N_("its power cap"), "hw slowdown": N_("a hardware slowdown (power brake or heat)"),
             "sw thermal": N_("its temperature (software limit)"),
             "hw thermal": N_("its temperature (hardware limit)"), "hw power brake": N_("an external power brake")}
SEVERITY_ORDER = {"problem": 0, "warning": 1, "info": 2}


@dataclass
class Finding:
    code: str  # gpu_lost, near_full, other_users, defunct_holder, not_visible, stale_orphan, idle_holder,
    #            cvd_missing, cvd_empty, cvd_order, crowded_gpu0, dataparallel_imbalance,
    #            ecc_errors, memory_repair_pending, memory_repair_failed, throttled, low_pstate,
    #            told_other_gpu, container_pids
    severity: str  # problem, warning, info
    title: str
    detail: str
    fix: str
    gpus: list[int] = field(default_factory=list)
    pid: int | None = None
    user: str | None = None
    command: str | None = None
    memory: int | None = None  # bytes the finding is about


@dataclass
class Checklist:
    findings: list[Finding]
    gpus_checked: list[int]
    cuda_visible_devices: str | None  # the NVIDIA rule's value (the JSON name kept); None: not set
    me: str | None
    notes: list[str] = field(default_factory=list)
    visible_variable: str = VISIBLE  # the variable that chooses GPUs here (HIP's on AMD)
    visible_set: str | None = None  # what the environment set, as NAME=value (None: nothing)


def _visible(snap: Snapshot, vis: Visible) -> tuple[list[int], list[Finding], list[str]]:
    """vram's indices of the GPUs this shell's programs can see (each vendor's rule: visible.py),
    with findings about the variables themselves."""
    all_gpus = [g.index for g in snap.gpus]
    if not vis.is_set:
        return all_gpus, [], []
    findings: list[Finding] = []
    notes: list[str] = []
    cvd = vis.value or ""
    if vis.vendor == "nvidia" and not cvd.strip():
        findings.append(Finding("cvd_empty", "problem", _("CUDA_VISIBLE_DEVICES is empty"),
                                _("an empty CUDA_VISIBLE_DEVICES hides every GPU: CUDA programs see none"),
                                _("unset it, or set it to the GPUs you want: export CUDA_VISIBLE_DEVICES=0")))
        return [], findings, notes
    # the runtime's own reading of the variables (visible.py), so doctor, pick and run agree on it,
    # and a 4,300-digit entry is an index out of range, not an int() error
    name, runtime = vis.variable, "CUDA" if vis.vendor == "nvidia" else "ROCm"
    seen: list[int] = []
    for entry in (e for e in vis.entries if e.source is not None and e.status == "invalid"):  # ROCm's
        shown = entry.text.strip() if len(entry.text.strip()) <= 40 else entry.text.strip()[:37] + "..."
        title = (_("{variable} is set but empty").format(variable=entry.source) if not shown
                 else _("{variable} has {value}, which names no GPU").format(variable=entry.source,
                                                                              value=repr(shown)))
        detail = entry.why if not shown else _("{why}; ROCm stops reading the list at the first invalid entry, so "
                                               "the entries after it are left out too").format(why=entry.why)
        findings.append(Finding("cvd_missing", "problem", title, detail or "",
                                _("fix the list: vram status shows the GPUs (a partition is a GPU of its own to "
                                  "ROCm)")))
    for entry in (e for e in vis.entries if e.source is None):  # CUDA's, one variable
        item = entry.text.strip()
        if entry.status == "invalid":
            shown = item if len(item) <= 40 else item[:37] + "..."
            if item.isascii() and item.isdigit():
                index = int(item) if len(item) <= 18 else None
                findings.append(Finding("cvd_missing", "problem",
                                        _("{variable} names GPU {index}, which does not exist").format(
                                            variable=name, index=shown),
                                        _("this machine has GPUs {gpus}; {runtime} stops reading the list at the "
                                          "first invalid entry, so the GPUs after it are hidden too").format(
                                              gpus=_span(all_gpus), runtime=runtime),
                                        _("fix the list: vram status shows the indices"),
                                        gpus=[index] if index is not None else []))
            else:
                findings.append(Finding("cvd_missing", "problem",
                                        _("{variable} has {value}, which names no GPU here").format(
                                            variable=name, value=repr(shown)),
                                        _("{runtime} stops reading the list at the first invalid entry").format(
                                            runtime=runtime),
                                        _("use indices or GPU UUIDs from vram status")))
            break
        if entry.device is None or entry.status not in ("ok", "duplicate"):
            continue
        if entry.device.is_mig and entry.device.vendor == "nvidia":
            notes.append(_("{entry}: MIG instances are not mapped here; checking every GPU").format(entry=item))
            return all_gpus, findings, notes
        if entry.device.index not in seen:
            seen.append(entry.device.index)
    # ROCm's GPUs are what its two variables leave (no entry alone says it); CUDA's, when it set none
    cuda_named = any(e.source is None for e in vis.entries)
    seen += [d.index for d in vis.devices if (d.vendor != "nvidia" or not cuda_named) and d.index not in seen]
    if vis.vendor != "nvidia":
        ended = [e.why for e in vis.entries if e.status == "invalid" and e.why]
        notes += [p for p in vis.pitfalls if not any(why in p for why in ended)]  # those are findings above
    return seen, findings, notes


def _span(indices: list[int]) -> str:
    if not indices:
        return pgettext("gpus", "none")
    if indices == list(range(indices[0], indices[-1] + 1)) and len(indices) > 2:
        return f"{indices[0]}-{indices[-1]}"
    return ",".join(map(str, indices))


def _who(p: GpuProcess) -> str:
    if p.pid_here is None:  # inside a container: a host pid, never said as a pid here
        return _("a process of another PID namespace (host pid {pid})").format(pid=p.nvml_pid)
    return (_("{user} (pid {pid})").format(user=p.user, pid=p.pid) if p.user
            else _("unknown user (pid {pid})").format(pid=p.pid))


def _holding(p: GpuProcess) -> str:
    """Who holds how much, in one message (a translator may put the size inside the brackets)."""
    if p.pid_here is None:
        return _("a process of another PID namespace (host pid {pid}) {size}").format(
            pid=p.nvml_pid, size=format_size(p.memory))
    return (_("{user} (pid {pid}) {size}").format(user=p.user, pid=p.pid, size=format_size(p.memory)) if p.user
            else _("unknown user (pid {pid}) {size}").format(pid=p.pid, size=format_size(p.memory)))


def run_checklist(snap: Snapshot, env: Mapping[str, str] | None = None, me: str | None = None,
                  only: list[int] | None = None, idle_known: bool = False,
                  read_env: Callable[[int, tuple[str, ...]], Environ] = read_environ,
                  pids_visible: bool = True) -> Checklist:
    """Findings for this machine; `env` defaults to os.environ, `me` to the current user,
    `only` narrows the GPUs checked (vram doctor --gpu). `idle_known`: each process's idle_for
    comes from recorded history (a collector seeded from it), so an idle holder is one idle for
    IDLE_MIN_AGE, not merely idle now and running that long. `read_env` reads a process's own
    environment (a stand-in in tests); `pids_visible`: the backend's word that NVML's pids are
    this /proc's (in a container's own PID namespace a pid's environment is another process's)."""
    env = os.environ if env is None else env
    if me is None:
        me = user_name(os.getuid())
    vis = visible_devices.read(env, devices_of(snap))
    usable, findings, notes = _visible(snap, vis)
    if only is not None:
        usable = [i for i in usable if i in only]
    findings += _lost(snap, usable)
    gpus = [g for g in snap.gpus if g.index in usable and not g.lost]
    findings += _near_full(gpus)
    if vis.is_set:
        findings += _other_users(gpus, me)
    findings += _holders(gpus, me, idle_known)
    findings += _inside_container(gpus)
    findings += _order(snap, vis)
    if only is None:
        findings += _crowded(snap)
    findings += _dataparallel(snap, set(usable))
    findings += _health(gpus)
    findings += _told_other_gpu(snap, set(usable), read_env, pids_visible)
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.gpus[:1] or [-1], f.code))
    return Checklist(findings=findings, gpus_checked=usable, me=me, notes=notes,
                     cuda_visible_devices=vis.value if vis.vendor == "nvidia" else None,
                     visible_variable=vis.variable, visible_set=vis.described)


def _lost(snap: Snapshot, usable: list[int]) -> list[Finding]:
    """A GPU the driver lost: every other check skips it (it has no readings), so it is named here."""
    return [Finding("gpu_lost", "problem", _("GPU {index} is lost").format(index=g.index),
                    _("{error}: NVML cannot read it, and a job started on it fails").format(
                        error=_(g.error) if g.error else _("GPU is lost")),  # the backend's are N_-marked
                    _("use another GPU; an admin resets it when nothing runs there (as root: nvidia-smi -r -i {index}) "
                      "or reboots, and checks the kernel log (dmesg) for Xid errors").format(index=g.index),
                    gpus=[g.index])
            for g in snap.gpus if g.lost and g.index in usable]


def _near_full(gpus: list[Device]) -> list[Finding]:
    out = []
    for g in gpus:
        if g.memory_total and g.memory_free is not None and g.memory_free < NEAR_FULL_FREE * g.memory_total:
            holders = sorted(g.processes, key=lambda p: -(p.memory or 0))[:3]
            names = join_words([_holding(p) for p in holders]) or _("no listed process")
            out.append(Finding("near_full", "warning", _("GPU {index} is nearly full").format(index=g.index),
                               _("{free} free of {total}; held by {holders}").format(
                                   free=format_size(g.memory_free), total=format_size(g.memory_total), holders=names),
                               _("a job started here will run out of memory: pick another GPU (vram status)"),
                               gpus=[g.index], memory=g.memory_free))
    return out


def _other_users(gpus: list[Device], me: str | None) -> list[Finding]:
    out = []
    for g in gpus:
        others = [p for p in g.processes if p.user is not None and p.user != me]
        if others:
            held = sum(p.memory or 0 for p in others)
            names = join_words(sorted({p.user for p in others if p.user}))
            out.append(Finding("other_users", "info",
                               _("other users hold memory on GPU {index}, which you chose").format(index=g.index),
                               _("{users}: {held} of {total}").format(users=names, held=format_size(held),
                                                                      total=format_size(g.memory_total)),
                               _("your job gets what they leave: check vram status before starting"),
                               gpus=[g.index], memory=held))
    return out


def _inside_container(gpus: list[Device]) -> list[Finding]:
    """Inside a container NVML lists host pids: say why nvidia-smi shows no processes here, and
    what vram matched them to (pidmap.py), in one finding."""
    rows = [p for g in gpus for p in g.processes if p.nvml_pid is not None]
    if not rows:
        return []
    from ..pidmap import summary

    told = [_("pid {pid} holds {size} on GPU {index} (host pid {host_pid}: the only process here holding that GPU "
              "where nothing else could be it)").format(pid=p.pid, size=format_size(p.memory), index=p.gpu,
                                                         host_pid=p.nvml_pid)
            for p in rows if p.pid_here is not None]
    return [Finding("container_pids", "info", _("vram runs in a container: NVML lists the host's pids"),
                    _("the driver reports each process by its pid on the host, which this container's /proc does "
                      "not have (or gives to another process): that is why nvidia-smi shows no processes here; "
                      "vram matched them to the processes here that hold the GPUs' device files open: {matches}"
                      ).format(matches=pgettext("clause separator", "; ").join(told + summary(rows))),
                    _("use the pids vram shows (vram ps, vram kill PID); memory held outside this container can "
                      "only be freed from the host, where vram ps names its process"),
                    gpus=sorted({p.gpu for p in rows}), memory=sum(p.memory or 0 for p in rows))]


def _idle_holder(p: GpuProcess, idle_known: bool) -> bool:
    if not p.idle:
        return False
    if idle_known:
        return (p.idle_for or 0) >= IDLE_MIN_AGE
    return (p.elapsed or 0) >= IDLE_MIN_AGE  # idle now, and not just started: how long is unknown


def _holders(gpus: list[Device], me: str | None, idle_known: bool = False) -> list[Finding]:
    out = []
    any_visible = any(p.host_missing is None for g in gpus for p in g.processes)
    for g in gpus:
        for p in g.processes:
            mine = me is not None and p.user == me
            if p.zombie:
                if mine:
                    fix = _("its parent must reap it: kill the parent (pid {ppid}) or vram kill {pid}").format(
                        ppid=p.ppid, pid=p.pid)
                elif p.user:
                    fix = _("ask {user} or an admin: the driver frees the memory when the process is reaped (a parent "
                            "that died leaves it to init; a stuck one may need a reset)").format(user=p.user)
                else:
                    fix = _("ask its owner or an admin: the driver frees the memory when the process is reaped (a "
                            "parent that died leaves it to init; a stuck one may need a reset)")
                detail = (_("{who}, {size}, a zombie for {duration}, orphaned") if p.orphaned
                          else _("{who}, {size}, a zombie for {duration}")).format(
                              who=_who(p), size=format_size(p.memory), duration=format_duration(p.elapsed))
                out.append(Finding("defunct_holder", "problem",
                                   _("defunct process {pid} still holds memory on GPU {index}").format(
                                       pid=p.pid, index=g.index),
                                   detail, fix, gpus=[g.index], pid=p.pid,
                                   user=p.user, command=p.command, memory=p.memory))
            elif p.host_missing and any_visible and p.nvml_pid is None:  # a host pid: _inside_container
                out.append(Finding("not_visible", "warning",
                                   _("pid {pid} holds memory on GPU {index} but /proc cannot see it").format(
                                       pid=p.pid, index=g.index),
                                   _("{size}; {why}").format(size=format_size(p.memory), why=_(p.host_missing)),
                                   _("if it exited, its memory should be freed soon; if it stays, an admin "
                                     "can find it with nvidia-smi on the host"), gpus=[g.index], pid=p.pid,
                                   memory=p.memory))
            elif _idle_holder(p, idle_known):
                if mine:
                    fix = _("free it: release the memory (del + torch.cuda.empty_cache()), stop it, or vram kill "
                            "{pid}").format(pid=p.pid)
                elif p.user:
                    fix = _("ask {user} to free it (a notebook kernel often holds memory long after its last "
                            "cell)").format(user=p.user)
                else:
                    fix = _("ask its owner to free it (a notebook kernel often holds memory long after its last cell)")
                size = format_size(p.memory)
                user = p.user or _("unknown")
                title = (_("{user}'s pid {pid} holds {size} on idle GPU {index}") if g.utilization == 0
                         else _("{user}'s pid {pid} holds {size} on GPU {index} without running kernels")).format(
                             user=user, pid=p.pid, size=size, index=g.index)
                why = (_("GPU {index} is at 0% utilization now").format(index=g.index) if g.utilization == 0 else
                       _("its own utilization samples are 0% while GPU {index} is at {utilization} with other "
                         "work").format(index=g.index,
                                        utilization="N/A" if g.utilization is None else f"{g.utilization}%"))
                if idle_known:
                    why = _("idle for {duration} by the recorded history; {why}").format(
                        duration=format_duration(p.idle_for), why=why)
                out.append(Finding("idle_holder", "warning", title,
                                   _("{why}; the process has run {duration}: {command}").format(
                                       why=why, duration=format_duration(p.elapsed),
                                       command=p.command or p.name or "?"), fix,
                                   gpus=[g.index], pid=p.pid, user=p.user, command=p.command, memory=p.memory))
            elif mine and p.orphaned and g.utilization == 0:
                out.append(Finding("stale_orphan", "warning",
                                   _("your orphaned process {pid} holds memory on GPU {index}").format(
                                       pid=p.pid, index=g.index),
                                   _("{size}; its parent exited (a launcher or notebook that died, a DataLoader "
                                     "worker left behind)").format(size=format_size(p.memory)),
                                   _("vram kill {pid} if it is no longer needed").format(pid=p.pid),
                                   gpus=[g.index], pid=p.pid,
                                   user=p.user, command=p.command, memory=p.memory))
    return out


def _order(snap: Snapshot, vis: Visible) -> list[Finding]:
    """CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; NVML (nvidia-smi, vram)
    uses PCI order. With identical GPUs the two agree; with different models they may not. (ROCm
    numbers in KFD's order, as vram does: nothing to warn of.)"""
    if not vis.is_set or vis.vendor == "amd" or vis.order.order == ORDER_PCI:
        return []
    if not any(e.text.strip().isdigit() for e in vis.entries if e.device is None or e.device.vendor == "nvidia"):
        return []  # UUIDs do not depend on the order
    kinds = {(g.name, g.memory_total) for g in snap.gpus if not g.lost and g.vendor == "nvidia"}
    if len(kinds) < 2:
        return []
    return [Finding("cvd_order", "warning", _("CUDA_VISIBLE_DEVICES indices may not mean the GPUs vram shows"),
                    _("this machine has different GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA "
                      "numbers the fastest GPU 0, while nvidia-smi and vram use PCI order"),
                    _("export CUDA_DEVICE_ORDER=PCI_BUS_ID (or use GPU UUIDs in CUDA_VISIBLE_DEVICES)"))]


def _crowded(snap: Snapshot) -> list[Finding]:
    """Several jobs on GPU 0 while other GPUs sit empty: nobody set CUDA_VISIBLE_DEVICES. Inside a
    container a row with no pid here is left out: its host pid may be the number of a process here."""
    by_pid: dict[int, set[int]] = {}
    for p in snap.processes:
        if p.pid_here is not None:
            by_pid.setdefault(p.pid_here, set()).add(p.gpu)
    on_zero_only = [p for p in snap.processes if p.gpu == 0 and p.pid_here is not None and by_pid[p.pid_here] == {0}]
    empty = [g.index for g in snap.gpus if g.index != 0 and not g.processes and not g.lost]
    if len(on_zero_only) < 2 or not empty:
        return []
    users = ", ".join(sorted({p.user or "?" for p in on_zero_only}))
    return [Finding("crowded_gpu0", "warning",
                    ngettext("{n} jobs share GPU 0 while GPU {gpus} is empty",
                             "{n} jobs share GPU 0 while GPUs {gpus} are empty", len(empty)).format(
                                 n=len(on_zero_only), gpus=_span(empty)),
                    _("jobs by {users}: a program uses GPU 0 unless told otherwise").format(users=users),
                    _("start jobs with CUDA_VISIBLE_DEVICES set (e.g. CUDA_VISIBLE_DEVICES={index}), "
                      "or vram pick / vram run").format(index=empty[0]), gpus=[0])]


def _dataparallel(snap: Snapshot, usable: set[int]) -> list[Finding]:
    """One process with far more on its first GPU than on its other GPUs of the same kind.

    Like is compared with like: on a machine with 80 GB and 48 GB cards a job that fills each
    card holds more on the big ones by design, so the first GPU is compared with the process's
    other GPUs of the same model and size when it has any (with all of them when it has none),
    and only the GPUs that hold markedly less than the first are named. Inside a container a row
    with no pid here is left out: its host pid may be the number of another process here."""
    kinds = {g.index: (g.name, g.memory_total) for g in snap.gpus}
    per_pid: dict[int, list[GpuProcess]] = {}
    for p in snap.processes:
        if p.memory and p.pid_here is not None:
            per_pid.setdefault(p.pid_here, []).append(p)
    out = []
    for pid, rows in per_pid.items():
        if len(rows) < 2 or not usable & {r.gpu for r in rows}:
            continue
        rows.sort(key=lambda r: r.gpu)
        first, rest = rows[0], rows[1:]
        peers = [r for r in rest if kinds.get(r.gpu) == kinds.get(first.gpu)] or rest
        typical = statistics.median(r.memory or 0 for r in peers)
        if not (first.memory and first.memory >= DP_RATIO * typical and first.memory - typical >= DP_MIN_EXTRA):
            continue
        lighter = [r.gpu for r in peers
                   if first.memory >= DP_RATIO * (r.memory or 0) and first.memory - (r.memory or 0) >= DP_MIN_EXTRA]
        if not lighter:
            continue
        values = {"user": first.user or _("unknown"), "pid": pid, "ratio": first.memory / typical,
                  "first": first.gpu, "gpus": _span(lighter), "size": format_size(first.memory),
                  "typical": format_size(int(typical))}
        title = ngettext("{user}'s pid {pid} holds {ratio:.1f}x more on GPU {first} than on GPU {gpus}",
                         "{user}'s pid {pid} holds {ratio:.1f}x more on GPU {first} than on GPUs {gpus}",
                         len(lighter)).format(**values)
        if len(peers) == len(rest):
            detail = ngettext("{size} on GPU {first} vs {typical} on the other: the pattern of nn.DataParallel, "
                              "which gathers outputs and keeps the master copy on the first GPU (that GPU runs out "
                              "first)",
                              "{size} on GPU {first} vs {typical} on the others: the pattern of nn.DataParallel, "
                              "which gathers outputs and keeps the master copy on the first GPU (that GPU runs out "
                              "first)", len(lighter)).format(**values)
        else:
            detail = ngettext("{size} on GPU {first} vs {typical} on the other of the same model: the pattern of "
                              "nn.DataParallel, which gathers outputs and keeps the master copy on the first GPU "
                              "(that GPU runs out first)",
                              "{size} on GPU {first} vs {typical} on the others of the same model: the pattern of "
                              "nn.DataParallel, which gathers outputs and keeps the master copy on the first GPU "
                              "(that GPU runs out first)", len(lighter)).format(**values)
        out.append(Finding(
            "dataparallel_imbalance", "warning", title, detail,
            _("use DistributedDataParallel (one process per GPU, launched with torchrun): memory is even and "
              "it is faster"), gpus=[first.gpu, *lighter], pid=pid, user=first.user, command=first.command,
            memory=first.memory))
    return out


def _health(gpus: list[Device]) -> list[Finding]:
    """What the GPU's health says is wrong: only on GPUs whose health was read."""
    out = []
    for g in gpus:
        h = g.health
        if h is None:
            continue
        uncorrected = max(h.ecc_uncorrected_volatile or 0, h.ecc_uncorrected_aggregate or 0)
        if uncorrected or (h.ecc_corrected_volatile or 0) >= ECC_CORRECTED_MANY:
            out.append(Finding(
                "ecc_errors", "problem" if uncorrected else "warning",
                _("GPU {index} has ECC memory errors").format(index=g.index),
                _("{uncorrected} uncorrected and {corrected} corrected since the driver loaded ({uncorrected_life} "
                  "and {corrected_life} over its life): an uncorrected error kills the job that met it").format(
                      uncorrected=h.ecc_uncorrected_volatile, corrected=h.ecc_corrected_volatile,
                      uncorrected_life=h.ecc_uncorrected_aggregate, corrected_life=h.ecc_corrected_aggregate),
                _("watch the count; if uncorrected errors come back after a reset, have the GPU replaced"),
                gpus=[g.index]))
        if h.remap_failed:
            out.append(Finding("memory_repair_failed", "problem",
                               _("GPU {index} could not remap a failing memory row").format(index=g.index),
                               _("{rows} rows remapped for uncorrectable errors and no spare row left: its memory is "
                                 "unreliable").format(rows=h.remapped_rows_uncorrectable),
                               _("drain the GPU and have it replaced"), gpus=[g.index]))
        elif h.remap_pending or h.retired_pages_pending:
            title = (_("GPU {index} has a memory row remap waiting for a reset") if h.remap_pending
                     else _("GPU {index} has a page retirement waiting for a reset")).format(index=g.index)
            out.append(Finding("memory_repair_pending", "problem", title,
                               _("the bad memory stays in use until the GPU is reset: errors may recur"),
                               _("when no job runs on it, reset the GPU (as root: nvidia-smi -r -i {index}) "
                                 "or reboot").format(index=g.index), gpus=[g.index]))
        held = [_(THROTTLES[r]) for r in h.throttle_reasons or () if r in THROTTLES]
        if held:
            if h.sm_clock is None or not h.sm_clock_max:
                detail = _("the clocks are lowered; jobs run slower than the GPU can")
            else:
                detail = _("the clocks are lowered: SM clock {clock} of {max_clock} MHz; jobs run slower than the "
                           "GPU can").format(clock=h.sm_clock, max_clock=h.sm_clock_max)
            fix = (_("its draw is at the limit; a higher limit (nvidia-smi -pl) or less work per GPU restores the "
                     "clock") if "sw power cap" in (h.throttle_reasons or ()) else
                   _("check the cooling (fans, airflow, the room) and the power supply"))
            out.append(Finding("throttled", "warning", _("GPU {index} is held back by {reasons}").format(
                index=g.index, reasons=pgettext("list", " and ").join(held)), detail, fix, gpus=[g.index]))
        if (h.performance_state is not None and h.performance_state >= LOW_PSTATE
                and (g.utilization or 0) >= BUSY):
            detail = (_("{utilization}% utilization at the clocks of an idle GPU") if h.sm_clock is None
                      else _("{utilization}% utilization at the clocks of an idle GPU (SM {clock} of {max_clock} MHz)")
                      ).format(utilization=g.utilization, clock=h.sm_clock, max_clock=h.sm_clock_max)
            out.append(Finding("low_pstate", "warning",
                               _("GPU {index} is busy but stuck in P{state}").format(index=g.index,
                                                                                     state=h.performance_state),
                               detail,
                               _("a GPU at work runs in P0-P2: check persistence mode (nvidia-smi -pm 1), "
                                 "application clocks and locked clocks (nvidia-smi -rgc), or reset it"),
                               gpus=[g.index]))
    return out


def _told_other_gpu(snap: Snapshot, usable: set[int], read_env: Callable[[int, tuple[str, ...]], Environ],
                    pids_visible: bool) -> list[Finding]:
    """Processes whose memory is on a GPU their own CUDA_VISIBLE_DEVICES did not name."""
    out = []
    for view in process_view.mismatches(snap, read_env, pids_visible):
        gpus = sorted({d.index for d in view.holds})
        if not usable.intersection(gpus):
            continue
        out.append(Finding("told_other_gpu", "warning",
                           _("pid {pid} runs on a GPU it was not told to use").format(pid=view.pid),
                           f"{view.mismatch}; {process_view.STARTED_WITH}",
                           _("check how the job sets CUDA_VISIBLE_DEVICES (vram ps --env PID shows what it was "
                             "told); vram run sets it from a lease"), gpus=gpus, pid=view.pid, user=view.user,
                           command=view.command))
    return out
