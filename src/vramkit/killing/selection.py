"""Selection: every GPU process (and, when asked, every holder of the device files) becomes a
target, narrowed by the criteria, then checked by the rules. Nothing is signalled here."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import procs
from ..collector import Collector
from ..errors import no_such_gpu
from ..gpu_state import GpuProcess, Snapshot
from ..i18n import N_, _, join_words, ngettext
from ..idle import busy_percent
from ..machine import Machine
from ..procs.namespaces import proc_numbers_ours
from ..protect import Protection, Refusal, load, said
from ..units import format_size
from ..vendor_terms import lister
from .idle import select_idle
from .model import OTHER_NUMBERING, REFUSED, WOULD_SIGNAL, Caller, Criteria, KillRequestError, Plan, Progress, Target
from .rules import check

if TYPE_CHECKING:
    from ..holders import Holder, HolderScan


def _from_gpu_process(p: GpuProcess, trusted: bool) -> Target:
    t = Target(pid=p.pid, command=p.command or "", listed=p)
    if not p.real:
        t.synthetic = True
        t.defunct = p.zombie
        return t
    if p.host_missing:
        t.unmapped = p.host_missing
        return t
    if not trusted and p.nvml_pid is None:  # read in an outer namespace's /proc (pidmap's rows have nvml_pid)
        t.unmapped = N_("vram runs in a PID namespace of its own while this /proc is the host's: it reads NVML's "
                        "host pids there, but a signal goes by the pids of vram's own namespace, where this "
                        "process has another number or none; run vram kill in the host's PID namespace")
        return t
    _fill_identity(t)
    return t


def _fill_identity(t: Target) -> None:
    """Read t's identity from /proc now, if it is still the process that was listed."""
    if not proc_numbers_ours():  # /proc's pid N is not the process a signal to N reaches
        t.unmapped = OTHER_NUMBERING
        return
    now = procs.identity(t.pid)
    if now is None:
        t.unmapped = procs.NOT_VISIBLE
        return
    if t.start_ticks is not None and now.start_ticks != t.start_ticks:
        # The pid was reused between the snapshot and this read: it is not the GPU process.
        t.unmapped = N_("the pid now belongs to another process than the one NVML listed")
        return
    t.identity = now
    t.defunct = t.zombie and procs.is_defunct(t.pid)
    if t.zombie and not t.defunct:
        t.notes.append(_("its main thread has exited (shown as defunct) but other threads still run and hold "
                         "its memory: a signal ends them"))


def _from_holder(h: Holder) -> Target:
    t = Target(pid=h.pid, command=h.host.command, listed=h.host, devices=h.devices, holder_gpus=h.gpus,
               holder_ns_pids=h.ns_pids)
    _fill_identity(t)
    return t


NO_SUCH_PROCESS = N_("(no such process)")  # the command of a pid that no process has (shown translated)


def _plain_target(pid: int, table: procs.ProcessTable) -> Target:
    """A pid named on the command line that is not a GPU process: enough to say what it is."""
    host = table.read(pid)
    if host == procs.NOT_VISIBLE:  # neither the driver nor /proc lists it: as kill(1) says
        return Target(pid=pid, command=NO_SUCH_PROCESS)
    if isinstance(host, str):
        return Target(pid=pid, command=f"({host})")
    t = Target(pid=pid, command=host.command, listed=host)
    _fill_identity(t)
    return t


def _is_own(t: Target, caller: Caller) -> bool:
    return t.uid == (0 if caller.root else caller.uid)


def make_plan(machine: Machine | Collector, criteria: Criteria, *, protection: Protection | None = None,
              caller: Caller | None = None, progress: Progress | None = None,
              idle_known: bool = False) -> Plan:
    """Select targets and check each one. Nothing is signalled. `idle_known`: the collector's
    idle clock was seeded from recorded history that covers the whole --idle window, so idle
    time is judged at once instead of by watching (see select_idle)."""
    criteria.check()
    caller = caller or Caller.current()
    protection = protection or load(caller_chain=caller.chain, caller_uid=0 if caller.root else caller.uid)
    if not protection.caller_chain:
        protection.caller_chain = caller.chain
    source = machine if isinstance(machine, Collector) else Collector(machine)
    snap = source.snapshot()
    have = [g.index for g in snap.gpus]
    for gpu in criteria.gpus or ():
        if gpu not in have:
            raise no_such_gpu(gpu, have, kind=KillRequestError)
    table = procs.ProcessTable()
    by_pid, holder_scan = _gather(source, snap, criteria, table)
    notes: list[str] = []
    if criteria.pids:
        nodes = ", ".join(source.backend.device_nodes()[0]) or _("device file")
        targets = [_named(pid, by_pid, holder_scan, table, snap, nodes) for pid in dict.fromkeys(criteria.pids)]
    else:
        targets = list(by_pid.values())
        notes.extend(_held_outside(snap, criteria))
    notes.extend(protection.notes)
    targets = _narrow_by_criteria(targets, criteria, caller, notes, snap)
    if criteria.idle is not None:
        targets = select_idle(source, snap, targets, criteria.idle, notes, progress, known=idle_known)
    for t in targets:
        _judge(t, caller, protection, criteria.all_users)
    targets.sort(key=lambda t: (t.refusal is not None, t.all_gpus[:1] or (999,), -(t.memory or 0), t.pid))
    if holder_scan is not None:
        notes.extend(holder_scan.notes)
    return Plan(snapshot=snap, criteria=criteria, targets=targets, caller=caller, holder_scan=holder_scan,
                notes=notes)


def _held_outside(snap: Snapshot, criteria: Criteria) -> list[str]:
    """Inside a container: what NVML lists on the GPUs asked for under host pids that no process
    here holds open. No target stands for it and only the host can free it: said, as ps and doctor
    say it, rather than a bare "no process matches". Not for --user or --zombie, which such a row
    cannot be told to match."""
    if criteria.users is not None or criteria.zombie:
        return []
    gpus = None if criteria.gpus is None else set(criteria.gpus)
    outside = [p for p in snap.processes
               if p.pid_here is None and not p.holders_here and (gpus is None or p.gpu in gpus)]
    if not outside:
        return []
    from ..pidmap import summary

    return [*summary(outside), _("vram kill cannot signal a process outside this container: only the host can free "
                                 "that memory (vram ps there names its processes)")]


def _gather(source: Collector, snap: Snapshot, criteria: Criteria,
            table: procs.ProcessTable) -> tuple[dict[int, Target], HolderScan | None]:
    """Every GPU process, one target per pid; then the holders of the device files NVML does not
    list (all of them with criteria.holders, else only the pids named that NVML does not list)."""
    trusted = source.backend.pids_visible()
    by_pid: dict[int, Target] = {}
    for p in snap.processes:
        if p.pid_here is None:  # a host pid no process here could be told to be: its holders_here stand in
            continue
        t = by_pid.get(p.pid)
        if t is None:
            t = by_pid[p.pid] = _from_gpu_process(p, trusted)
        t.rows.append(p)
    # Inside a container: processes here that hold memory NVML lists under host pids, between them
    shared: dict[int, dict[int, int]] = {}  # pid here -> GPU -> what the rows it may hold add up to
    between: dict[int, set[int]] = {}  # GPU -> the processes here those rows may be
    for p in snap.processes:
        if p.pid_here is None:
            between.setdefault(p.gpu, set()).update(p.holders_here)
            for pid in p.holders_here:
                on = shared.setdefault(pid, {})
                on[p.gpu] = on.get(p.gpu, 0) + (p.memory or 0)
    unlisted = [pid for pid in criteria.pids if pid not in by_pid]
    if not (criteria.holders or unlisted or shared):
        return by_pid, None
    from ..holders import scan

    wanted = None if criteria.holders else sorted(set(unlisted) | set(shared))
    holder_scan = scan(snap, source.backend, pids=wanted, table=table)
    for h in holder_scan.holders:
        existing = by_pid.get(h.pid)
        if existing is not None and existing.unmapped is None:
            existing.devices, existing.holder_gpus = h.devices, h.gpus
        elif criteria.holders or h.pid in shared:
            t = by_pid[h.pid] = _from_holder(h)
            t.shared = shared.get(h.pid, {})
            for gpu, held in sorted(t.shared.items()):
                others = sorted(between[gpu] - {h.pid})
                who = lister(g.vendor for g in snap.gpus if g.index == gpu)
                if others:
                    note = ngettext("it holds GPU {gpu} open with pid {pids}, where {who} lists {size} under host "
                                    "pids that cannot be told apart here: it may hold some or all of it",
                                    "it holds GPU {gpu} open with pids {pids}, where {who} lists {size} under host "
                                    "pids that cannot be told apart here: it may hold some or all of it", len(others))
                else:
                    note = _("it holds GPU {gpu} open, where {who} lists {size} under host pids that cannot be told "
                             "apart here: it may hold some or all of it")
                t.notes.append(note.format(gpu=gpu, pids=", ".join(map(str, others)), who=who,
                                           size=format_size(held)))
    return by_pid, holder_scan


def _named(pid: int, by_pid: dict[int, Target], holder_scan: HolderScan | None,
           table: procs.ProcessTable, snap: Snapshot, nodes: str) -> Target:
    """The target for a pid named explicitly; refused already when it is no GPU process. nodes: the
    backend's device files, for the refusal's words."""
    t = by_pid.get(pid)
    if t is None:
        t = _plain_target(pid, table)
        held = next((h for h in (holder_scan.holders if holder_scan else []) if h.pid == pid), None)
        if t.unmapped:
            pass  # refused by the rules as unmapped: what /proc says of the pid is not about this one
        elif held is not None:
            t.devices = held.devices
            who = lister(g.vendor for g in snap.gpus if g.index in held.gpus)
            t.refusal = Refusal.of("not-gpu", said(
                N_("{who} lists no GPU memory for it, but it holds {devices} open: include device-file holders "
                   "(--holders) to select such processes"),
                who=who, devices=", ".join(os.path.basename(d) for d in held.devices)))
        elif t.start_ticks is None and t.command == NO_SUCH_PROCESS:
            t.refusal = Refusal.of("no-such-process", said(
                N_("no such process: neither the driver nor /proc lists pid {pid}"), pid=pid))
        elif t.start_ticks is None and t.command.startswith("("):
            t.refusal = Refusal.of("no-such-process", said(N_("no process {pid} {command}"), pid=pid,
                                                           command=t.command))
        else:
            t.refusal = Refusal.of("not-gpu", said(
                N_("it holds no GPU memory {who} reports and no {nodes} open (use kill(1) for other processes)"),
                who=lister(g.vendor for g in snap.gpus), nodes=nodes))
    t.explicit = True
    return t


def _unknown_user(names: tuple[str, ...], snap: Snapshot) -> str | None:
    """The first of `names` that is no user here: not in the user database (NSS), not the user of
    a process the snapshot lists (a simulated scenario's made-up users), and not a number (a uid
    without a name, as inside a container)."""
    import pwd

    seen = {p.user for p in snap.processes}
    for name in names:
        if name in seen or name.isascii() and name.isdigit():
            continue
        try:
            pwd.getpwnam(name)
        except (KeyError, ValueError):  # ValueError: a name with a NUL
            return name
    return None


def _narrow_by_criteria(targets: list[Target], criteria: Criteria, caller: Caller, notes: list[str],
                        snap: Snapshot) -> list[Target]:
    """Selectors narrow each other: GPUs AND users AND zombie; broad selectors keep the caller's
    own processes (others' only for root with all_users)."""
    if criteria.gpus is not None:
        gpus = set(criteria.gpus)
        targets = _narrow(targets, lambda t: bool(set(t.all_gpus) & gpus), notes,
                          _("pid {pid} does not match GPU {gpus}: not selected"),
                          ",".join(map(str, criteria.gpus)))
    if criteria.users is not None:
        users = set(criteria.users)
        unknown = _unknown_user(criteria.users, snap)
        if unknown is not None:  # a typo must not read as "nothing to signal", exit 0
            raise KillRequestError(_("there is no user {user} here (not in the user database, and no GPU "
                                     "process of that name)").format(user=procs.sanitize(unknown)), param="user")
        targets = _narrow(targets, lambda t: t.user in users, notes,
                          _("pid {pid} does not match user {users}: not selected"), ",".join(criteria.users))
    if criteria.zombie:
        targets = _narrow(targets, lambda t: t.zombie or (t.orphaned and _stale_orphan(t, snap, notes)), notes,
                          _("pid {pid} is neither a zombie nor orphaned: not selected"))
    if criteria.users is not None or criteria.pids or (caller.root and criteria.all_users):
        return targets
    others = [t for t in targets if not _is_own(t, caller) and not t.unmapped]
    if others:
        names = sorted({t.user or "?" for t in others})
        if caller.root:
            note = ngettext("not selected: {n} matching process of other users ({users}): add --all-users to "
                            "include them",
                            "not selected: {n} matching processes of other users ({users}): add --all-users to "
                            "include them", len(others))
        else:
            note = ngettext("not selected: {n} matching process of other users ({users}): only root may signal "
                            "them",
                            "not selected: {n} matching processes of other users ({users}): only root may signal "
                            "them", len(others))
        notes.append(note.format(n=len(others), users=join_words(names)))
    return [t for t in targets if _is_own(t, caller) or t.unmapped]


BUSY_CPU = 10.0  # % of one CPU: an orphan using more is at work, not a stale holder


def _orphan_at_work(t: Target, snap: Snapshot) -> str | None:
    """Why an orphan (a process whose parent is init) is at work rather than left holding memory,
    or None. Daemons are re-parented to init on purpose: only one that runs no kernels (the idle
    rule: its own samples, else its GPU's) and uses little CPU counts as a stale holder. A GPU
    whose utilization cannot be read cannot tell: that counts as at work (it is not selected)."""
    devices = {d.index: d for d in snap.gpus}
    for row in t.rows:
        dev = devices.get(row.gpu)
        busy = busy_percent(row, dev) if dev is not None else row.sm_utilization
        if busy is None:
            why = row.utilization_na or "N/A"
            return _("whether it runs kernels on GPU {gpu} cannot be read ({why})").format(gpu=row.gpu, why=why)
        if busy > 0:
            # ({busy} is "40%": a "% o" in the message would read as a printf directive)
            return _("it runs kernels on GPU {gpu} ({busy} of the time)").format(gpu=row.gpu, busy=f"{busy}%")
    cpu = max((r.cpu_percent for r in t.rows if r.cpu_percent is not None), default=None)
    if cpu is None and t.listed is not None and not t.rows:  # a holder NVML does not list: /proc's lifetime average
        cpu_time, started = getattr(t.listed, "cpu_time", None), t.start_time
        if cpu_time is not None and started is not None and snap.time > started:
            cpu = 100 * cpu_time / (snap.time - started)
    if cpu is not None and cpu >= BUSY_CPU:
        return _("it uses {cpu} of a CPU").format(cpu=f"{cpu:.0f}%")
    return None


def _stale_orphan(t: Target, snap: Snapshot, notes: list[str]) -> bool:
    """--zombie's test of an orphan; one at work is left out with a note."""
    busy = _orphan_at_work(t, snap)
    if busy is None:
        return True
    notes.append(_("pid {pid} is orphaned (its parent is init) but at work: {busy}; a daemon is re-parented "
                   "to init on purpose: not selected by --zombie").format(pid=t.pid, busy=busy))
    return False


def _judge(t: Target, caller: Caller, protection: Protection, all_users: bool) -> None:
    if t.refusal is None:
        t.refusal = check(t, caller, protection, all_users)
    t.status = REFUSED if t.refusal else WOULD_SIGNAL
    if t.container_pid == 1:
        if t.container:
            note = _("pid 1 of its container {container}: ending it stops the whole container, and it ignores "
                     "signals it has no handler for (only SIGKILL, e.g. with --force, always ends it)")
        else:
            note = _("pid 1 of its container: ending it stops the whole container, and it ignores signals it has "
                     "no handler for (only SIGKILL, e.g. with --force, always ends it)")
        t.notes.append(note.format(container=t.container))


def _narrow(targets: list[Target], keep: Callable[[Target], bool], notes: list[str], left_out: str,
            selector: str = "") -> list[Target]:
    """left_out: the note for a pid named but not kept ({pid}, and {gpus} or {users}: the selector)."""
    out = []
    for t in targets:
        if keep(t):
            out.append(t)
        elif t.explicit:
            notes.append(left_out.format(pid=t.pid, gpus=selector, users=selector))
    return out
