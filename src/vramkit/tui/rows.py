"""The process table's rows: filter, search, sort and tree order, as plain data (no Textual).

A row is one (process, GPU, MIG instance), as in `vram ps`. In tree view the rows of a process
follow its parent's; siblings whose parent holds no GPU memory are gathered under a parent row
that says only what is known (its pid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..gpu_state import Device, GpuProcess, Snapshot, pid_key_text
from ..i18n import N_, _, pgettext
from ..procs import workload
from ..render import fmt
from ..render.text_width import cells as text_cells
from ..render.text_width import fit
from ..units import format_size

SORT_KEYS: dict[str, Callable[[GpuProcess], Any]] = {
    "memory": lambda p: -(p.memory or 0),
    "gpu": lambda p: (p.gpu, -(p.memory or 0)),
    "pid": lambda p: (p.pid_here is None, p.pid, p.gpu),  # a host pid with no process here: last
    "user": lambda p: (p.user or "~", -(p.memory or 0)),
    "elapsed": lambda p: -(p.elapsed or 0),
    "cpu": lambda p: -(p.cpu_percent or 0),
    "rss": lambda p: -(p.rss or 0),
}
SORT_ORDER = tuple(SORT_KEYS)
# The sort keys as the view line names them (the keys themselves are --sort's values)
SORT_WORDS = {"memory": N_("memory"), "gpu": N_("gpu"), "pid": N_("pid"), "user": N_("user"),
              "elapsed": N_("elapsed"), "cpu": N_("cpu"), "rss": N_("rss")}

# (key, header); the column a sort key belongs to, for clicking a header. SM%, BW%, ENC and DEC
# are the process's own (NVML's per-process samples: kernels, memory bandwidth, video encoder and
# decoder); UTIL is its GPU's, the same on every row of that GPU. config.TOP_COLUMNS lists the keys.
# The headers as shown are headers(): in the reader's language.
COLUMNS = (("gpu", "GPU"), ("pid", "PID"), ("user", "USER"), ("memory", "MEMORY"), ("share", "%GPU"),
           ("sm", "SM%"), ("bw", "BW%"), ("enc", "ENC"), ("dec", "DEC"), ("util", "UTIL"), ("cpu", "CPU%"),
           ("rss", "RSS"), ("elapsed", "ELAPSED"), ("flags", "FLAGS"), ("owner", "OWNER"), ("command", "COMMAND"))
# Given up, in this order, when the terminal is narrow (the command stays readable; the process's
# own SM% outlasts its GPU's utilization, which misleads beside one process).
DROP_ORDER = ("enc", "dec", "rss", "bw", "cpu", "share", "util", "flags", "elapsed", "owner")


def owned(procs: list[GpuProcess]) -> bool:
    """Whether the OWNER column is shown: some process works for a container, pod or Slurm job
    (fmt.owner, as `vram ps` decides it; not a config column: it comes and goes with them)."""
    return any(fmt.owner(p) is not None for p in procs)


def row_key(p: GpuProcess) -> str:
    # A host pid no process here could be told to be is not this /proc's pid of that number.
    return f"{pid_key_text(p.pid_key)}/{p.gpu}/{'' if p.mig_gi is None else p.mig_gi}"


@dataclass
class View:
    """What the person asked to see."""

    sort: str = "memory"
    reverse: bool = False
    users: set[str] = field(default_factory=set)  # empty: everyone
    gpus: set[int] = field(default_factory=set)  # empty: every GPU
    search: str = ""
    tree: bool = False
    # Fixed by the command line (Esc does not clear them):
    pids: set[int] = field(default_factory=set)  # --pid: empty, every process
    kind: str | None = None  # --compute / --graphics: "compute" or "graphics"
    visible: set[tuple[int, int | None]] | None = None  # --only-visible: (GPU, MIG instance) units
    workload: dict[str, str] = field(default_factory=dict)  # --container, --pod, --slurm-job (workload.matches)

    def describe(self) -> str:
        key = _(SORT_WORDS.get(self.sort, self.sort))
        parts = [(_("sort {key} (reversed)") if self.reverse else _("sort {key}")).format(key=key)]
        if self.pids:
            parts.append(_("pid {pids}").format(pids=",".join(map(str, sorted(self.pids)))))
        if self.kind:
            parts.append(_(KIND_WORDS[self.kind]))
        if self.visible is not None:
            parts.append(_("visible to vram's CUDA_VISIBLE_DEVICES"))
        for name, value in self.workload.items():
            parts.append(_(WORKLOAD_WORDS[name]).format(value=value))
        if self.users:
            parts.append(_("user {users}").format(users=",".join(sorted(self.users))))
        if self.gpus:
            parts.append(_("GPU {gpus}").format(gpus=",".join(map(str, sorted(self.gpus)))))
        if self.search:
            parts.append(_("search {text}").format(text=repr(self.search)))
        if self.tree:
            parts.append(_("tree"))
        return "  ·  ".join(parts)


# The view line's words for --compute/--graphics and the workload filters (owners.wanted's keys)
KIND_WORDS = {"compute": N_("compute only"), "graphics": N_("graphics only")}
WORKLOAD_WORDS = {"container": N_("container {value}"), "pod": N_("pod {value}"),
                  "slurm_job": N_("slurm job {value}")}


def matches(p: GpuProcess, view: View) -> bool:
    if view.pids and p.pid_here not in view.pids:
        return False
    if view.kind and view.kind not in p.types:
        return False
    if view.visible is not None and (p.gpu, p.mig_gi) not in view.visible:
        return False
    if view.workload and not workload.matches(p.workload, **view.workload):
        return False
    if view.users and (p.user or "?") not in view.users:
        return False
    if view.gpus and p.gpu not in view.gpus:
        return False
    if view.search:
        needle = view.search.lower()
        hay = f"{fmt.pid(p)} {p.user or ''} {p.command or (fmt.missing(p) if p.host_missing else '')}".lower()
        if needle not in hay:
            return False
    return True


@dataclass(slots=True)  # one a process, made again at every refresh
class Row:
    key: str
    proc: GpuProcess | None  # None: a parent row in tree view
    prefix: str = ""  # tree drawing before the command
    parent_pid: int | None = None  # for a parent row


def ordered(snap: Snapshot, view: View) -> list[Row]:
    procs = [p for p in snap.processes if matches(p, view)]
    key = SORT_KEYS[view.sort]
    procs.sort(key=key, reverse=view.reverse)
    if not view.tree:
        return [Row(row_key(p), p) for p in procs]
    return _tree(procs)


def _tree(every: list[GpuProcess]) -> list[Row]:
    """Rows in sort order, each process's children right after it (each level keeps the sort).
    Rows under a host pid no process here could be told to be stand alone, after the tree: their
    number is another namespace's, no parent's or child's here."""
    procs = [p for p in every if p.pid_here is not None]
    pids = {p.pid for p in procs}
    by_pid: dict[int, list[GpuProcess]] = {}
    for p in procs:
        by_pid.setdefault(p.pid, []).append(p)
    children: dict[int, list[int]] = {}
    roots: list[int] = []
    for p in procs:  # first appearance of each pid, in sort order
        if p is by_pid[p.pid][0]:
            if p.ppid in pids and p.ppid != p.pid:
                children.setdefault(p.ppid, []).append(p.pid)
            else:
                roots.append(p.pid)
    # Siblings under a parent that holds no GPU memory (a torchrun launcher, a notebook server):
    # gather them under a row for that parent.
    by_parent: dict[int, list[int]] = {}
    for pid in roots:
        ppid = by_pid[pid][0].ppid
        if ppid not in (None, 0, 1):
            by_parent.setdefault(ppid, []).append(pid)
    rows: list[Row] = []
    seen: set[int] = set()

    def emit(pid: int, prefix: str, last: bool, depth: int) -> None:
        if pid in seen:  # a ppid loop cannot happen in /proc, but a scenario may say anything
            return
        seen.add(pid)
        branch = "" if depth == 0 else prefix + ("└─ " if last else "├─ ")
        for p in by_pid[pid]:
            rows.append(Row(row_key(p), p, branch))
        kids = children.get(pid, [])
        below = "" if depth == 0 else prefix + ("   " if last else "│  ")
        for i, kid in enumerate(kids):
            emit(kid, below, i == len(kids) - 1, depth + 1)

    for pid in roots:
        if pid in seen:
            continue
        ppid = by_pid[pid][0].ppid
        group = by_parent.get(ppid, []) if ppid is not None else []
        if len(group) >= 2:
            rows.append(Row(f"parent/{ppid}", None, "", parent_pid=ppid))
            for i, sibling in enumerate(group):
                emit(sibling, "", i == len(group) - 1, 1)
        else:
            emit(pid, "", True, 0)
    rows.extend(Row(row_key(p), p) for p in every if p.pid_here is None)
    return rows


def cells(row: Row, snap_gpus: dict[int, Device], columns: list[str], command_width: int,
          flag_words: dict[str, str] | None = None) -> list[str]:
    """Text of each shown column for one row. `flag_words`: the flags as shown (fmt.flag_words,
    asked once by the caller; default as fmt.flags names them)."""
    p = row.proc
    if p is None:
        values = {c: "" for c in columns}
        values["pid"] = str(row.parent_pid)
        values["command"] = fit(_("(parent: holds no GPU memory)"), command_width)
        return [values[c] for c in columns]
    dev = snap_gpus.get(p.gpu)
    share = fmt.memory_share(p, dev)  # of its MIG instance's, in one
    command = p.command if p.command is not None else f"({fmt.missing(p)})"
    values = {
        "gpu": f"{p.gpu}" if p.mig_gi is None else f"{p.gpu}/{p.mig_gi}",
        "pid": fmt.pid(p),  # '-' for a host pid no process here could be told to be, as in ps
        "user": fit(p.user or "?", WIDTHS["user"]),  # by display width: a CJK name is 2 columns a character
        "memory": format_size(p.memory),
        "share": fmt.pct(share),
        "sm": fmt.pct(p.sm_utilization),
        "bw": fmt.pct(p.memory_utilization),
        "enc": fmt.pct(p.encoder_utilization),
        "dec": fmt.pct(p.decoder_utilization),
        "util": fmt.pct(dev.utilization if dev is not None else None),
        "cpu": "N/A" if p.cpu_percent is None else f"{p.cpu_percent:.0f}",
        "rss": format_size(p.rss),
        "elapsed": fmt.elapsed(p),
        "flags": ",".join(flag_words.get(f, f) if flag_words else f for f in fmt.flags(p)) or "-",
        "owner": fit(fmt.owner(p) or "-", WIDTHS["owner"]),
        "command": fit(row.prefix + command, command_width),
    }
    return [values[c] for c in columns]


# Widths of the fixed columns (the command takes what is left).
WIDTHS = {"gpu": 3, "pid": 7, "user": 8, "memory": 7, "share": 4, "sm": 4, "bw": 4, "enc": 4, "dec": 4,
          "util": 4, "cpu": 4, "rss": 7, "elapsed": 7, "flags": 13, "owner": 18}


def headers() -> tuple[dict[str, str], dict[str, int]]:
    """Each column's header in the reader's language, and each fixed column's width: WIDTHS, or
    the header's display width where a translated header is wider (a Chinese character takes two
    columns). Asked once by the view, not per refresh."""
    # the "column" words `vram ps` uses too, each spelled out so that the catalog has it
    words = {"GPU": pgettext("column", "GPU"), "PID": pgettext("column", "PID"), "USER": pgettext("column", "USER"),
             "MEMORY": pgettext("column", "MEMORY"), "%GPU": pgettext("column", "%GPU"),
             "SM%": pgettext("column", "SM%"), "BW%": pgettext("column", "BW%"), "ENC": pgettext("column", "ENC"),
             "DEC": pgettext("column", "DEC"), "UTIL": pgettext("column", "UTIL"), "CPU%": pgettext("column", "CPU%"),
             "RSS": pgettext("column", "RSS"), "ELAPSED": pgettext("column", "ELAPSED"),
             "FLAGS": pgettext("column", "FLAGS"), "OWNER": pgettext("column", "OWNER"),
             "COMMAND": pgettext("column", "COMMAND")}
    names = {key: words[header] for key, header in COLUMNS}
    return names, {key: max(width, text_cells(names[key])) for key, width in WIDTHS.items()}


def columns_for(width: int, wanted: tuple[str, ...] | None = None, owners: bool = False,
                widths: dict[str, int] | None = None) -> tuple[list[str], int]:
    """The columns that fit `width` cells with a readable command, and the command's width.
    `wanted`: the columns asked for, in their order (the config's top.columns; default all but
    OWNER); `owners`: OWNER is shown too (some process has one), before the command; `widths`:
    the fixed columns' widths (headers(); default WIDTHS)."""
    widths = widths or WIDTHS
    wanted = tuple(k for k in (wanted or (k for k, __ in COLUMNS)) if k != "owner")
    shown = [k for k in wanted if k != "command"] + (["owner"] if owners else [])
    min_command = 32

    def used(cols: list[str]) -> int:
        return sum(widths[c] + 2 for c in cols) + 2  # the table pads each cell by 1 on each side (cell_padding)

    for drop in DROP_ORDER:
        if used(shown) + min_command <= width:
            break
        if drop in shown:
            shown.remove(drop)
    command_width = max(min_command, width - used(shown) - 2)
    return [*shown, "command"] if "command" in wanted else shown, command_width
