"""`vram report`: usage over a window of recorded history, as a table for people, JSON or CSV.

Text shows hours and GiB; JSON and CSV keep base units (seconds, bytes, byte-seconds) so that
sums stay exact. Everything read from the database that another user could have chosen (user
names, commands) is sanitized before it is printed.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..history.query import WORKLOADS, Coverage, Usage
from ..i18n import _, pgettext
from ..procs import sanitize
from ..procs.workload import describe
from ..units import format_duration, format_size
from . import fmt
from .data import csv_cell
from .life_view import outside_words, workload_dict
from .style import Style
from .text_width import cells, fit, pad, wrap

SCHEMA_VERSION = 1
GIB = 1024**3


@dataclass
class Report:
    """What `vram report` shows: the window [since, until), how rows are grouped, the rows
    (already cut to --top), the top idle holders, and what the database holds."""

    database: str
    since: float
    until: float
    by: str
    rows: list[Usage]
    idle_holders: list[Usage]
    coverage: Coverage
    total_rows: int = 0  # rows before --top
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ text
def _local(t: float | None) -> str:
    return fmt.NA if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _hours(seconds: float) -> str:
    """Seconds as hours, with the decimals that keep small values readable."""
    h = seconds / 3600
    return f"{h:.0f}" if h >= 1000 else f"{h:.1f}" if h >= 10 else f"{h:.2f}"


MIN_COMMAND = 24  # a narrower command column is not worth reading: drop other columns first


def _table(header: list[str], rows: list[list[str]], right: set[str], style: Style, width: int,
           drop: tuple[str, ...] = ()) -> list[str]:
    """Columns as wide as their widest cell; a last column not in `right` (a command) takes what
    is left of `width` and is cut to it. The columns in `drop` are given up, in order, while the
    command would get fewer than MIN_COMMAND columns."""
    free = header[-1] not in right
    keep = list(range(len(header) - 1 if free else len(header)))
    words = headings()
    shown = [words[h] for h in header]
    widths = {i: max([cells(shown[i])] + [cells(r[i]) for r in rows]) for i in keep}
    for name in drop:
        if not free or sum(widths[i] + 2 for i in keep) + MIN_COMMAND <= width:
            break
        keep.remove(header.index(name))
    # what the kept columns may take: all of `width` but the command's least (10) and its gap
    room = width - 10 if free else width + 2
    widths = {i: widths[i] for i in keep}
    _fold_headings(shown, widths, {i: max([0] + [cells(r[i]) for r in rows]) for i in keep}, room)
    last = max(10, width - sum(widths[i] + 2 for i in keep))

    def line(values: list[str]) -> str:
        parts = [pad(values[i], widths[i], header[i] in right) for i in keep]
        return "  ".join([*parts, fit(values[-1], last)] if free else parts).rstrip()

    # a folded heading's lines stand above its column's values, the last one next to them
    folded = {i: wrap(shown[i], widths[i]) if cells(shown[i]) > widths[i] else [shown[i]] for i in keep}
    depth = max(map(len, folded.values()))
    heading = [shown[:] for _line in range(depth)]
    for i, parts in folded.items():
        for n in range(depth):
            heading[n][i] = ([""] * (depth - len(parts)) + parts)[n]
    if free:
        heading = [[*values[:-1], ""] for values in heading[:-1]] + heading[-1:]
    return [style.paint(line(values), "bold") for values in heading] + [line(r) for r in rows]


def _fold_headings(shown: list[str], widths: dict[int, int], needs: dict[int, int], room: int) -> None:
    """Narrow the columns of `widths` (each two columns apart) to `room` where their headings made
    them wider than their values (`needs`) make them: a heading folds onto two lines, then more,
    the columns it saves most in first. Nothing changes where the table fits already."""
    def total() -> int:
        return sum(w + 2 for w in widths.values())

    def narrowest(text: str, depth: int) -> int:
        """The fewest columns `text` folds into on at most `depth` lines."""
        return next(w for w in range(max(1, -(-cells(text) // depth)), cells(text) + 1)
                    if len(lines := wrap(text, w)) <= depth and max(map(cells, lines)) <= w)

    depth = 1
    while total() > room and depth < max(cells(shown[i]) for i in widths):
        depth += 1
        narrower = {i: max(needs[i], narrowest(shown[i], depth)) for i in widths}
        for i in sorted(widths, key=lambda i: narrower[i] - widths[i]):  # the most saved first
            if total() <= room:
                break
            widths[i] = min(widths[i], narrower[i])


def headings() -> dict[str, str]:
    """The report's column headings in the reader's words, by their English names (the keys the
    table's alignment and dropping go by)."""
    # Translators: vram report's column headings. GPU-HOURS: hours a GPU was held; GiB-HOURS: memory
    # held times hours; IDLE HOURS: hours memory was held with no kernel running
    return {"USER": pgettext("column", "USER"), "GPU": pgettext("column", "GPU"), "PID": pgettext("column", "PID"),
            "DAY": pgettext("column", "DAY"), "CONTAINER": pgettext("column", "CONTAINER"),
            "POD": pgettext("column", "POD"), "NAMESPACE": pgettext("column", "NAMESPACE"),
            "SLURM JOB": pgettext("column", "SLURM JOB"), "GPUS": pgettext("column", "GPUS"),
            "GPU-HOURS": pgettext("column", "GPU-HOURS"), "GiB-HOURS": pgettext("column", "GiB-HOURS"),
            "PEAK MEM": pgettext("column", "PEAK MEM"), "IDLE HOURS": pgettext("column", "IDLE HOURS"),
            "AVG UTIL": pgettext("column", "AVG UTIL"), "FIRST SEEN": pgettext("column", "FIRST SEEN"),
            "LAST SEEN": pgettext("column", "LAST SEEN"), "OWNER": pgettext("column", "OWNER"),
            "COMMAND": pgettext("column", "COMMAND"), "PROCESSES": pgettext("column", "PROCESSES"),
            "HELD (AVG)": pgettext("column", "HELD (AVG)")}


_KEY_HEADER = {"user": "USER", "gpu": "GPU", "life": "PID", "day": "DAY", "container": "CONTAINER", "pod": "POD",
               "namespace": "NAMESPACE", "slurm-job": "SLURM JOB"}


def _key(u: Usage, by: str) -> str:
    if by == "life" and u.pid is None:  # a holder outside this container: no pid here (its COMMAND says)
        return "-"
    return sanitize(u.key)


def _command(u: Usage) -> str:
    """A process life's COMMAND cell: for a holder outside this container, what it is instead."""
    return outside_words(u.nvml_pid) if u.nvml_pid is not None else sanitize(u.command or "-")


def _usage_rows(report: Report) -> tuple[list[str], list[list[str]], set[str]]:
    by = report.by
    header = [_KEY_HEADER[by]]
    if by == "life":
        header += ["USER", "GPUS"]
    header += ["GPU-HOURS", "GiB-HOURS", "PEAK MEM", "IDLE HOURS"]
    if by == "gpu":
        header += ["AVG UTIL"]
    if by == "life":
        header += ["FIRST SEEN", "LAST SEEN", "OWNER", "COMMAND"]
    else:
        header += ["PROCESSES"]
    rows = []
    for u in report.rows:
        row = [_key(u, by)]
        if by == "life":
            row += [sanitize(u.user or "?"), u.gpus or "-"]
        row += [_hours(u.gpu_seconds), _hours(u.memory_byte_seconds / GIB), format_size(u.peak_memory),
                _hours(u.idle_seconds)]
        if by == "gpu":
            row += [fmt.pct(u.utilization)]
        if by == "life":
            row += [_local(u.first_seen), _local(u.last_seen), sanitize(describe(u.workload, local=True) or "-"),
                    _command(u)]
        else:
            row += [str(u.lives)]
        rows.append(row)
    right = {"GPU", "PID", "SLURM JOB", "GPU-HOURS", "GiB-HOURS", "PEAK MEM", "IDLE HOURS", "AVG UTIL", "PROCESSES"}
    return header, rows, right


def _headline(report: Report) -> list[str]:
    """The window, then how much of it was recorded, and where."""
    span = report.until - report.since
    cov = report.coverage
    # A sample counts in the window it starts in: the last one's span may reach past the window's
    # end, so the sum can exceed the window by up to a sample. Said as what it is: all of it.
    recorded = min(cov.recorded_seconds, max(span, 0.0))
    share = 100 * recorded / span if span > 0 else 0.0
    titles = {"user": _("usage by user, {since} to {until} ({span})"),
              "gpu": _("usage by gpu, {since} to {until} ({span})"),
              "life": _("usage by process, {since} to {until} ({span})"),
              "day": _("usage by day, {since} to {until} ({span})"),
              "container": _("usage by container, {since} to {until} ({span})"),
              "pod": _("usage by pod, {since} to {until} ({span})"),
              "namespace": _("usage by namespace, {since} to {until} ({span})"),
              "slurm-job": _("usage by Slurm job, {since} to {until} ({span})")}
    return [titles[report.by].format(since=_local(report.since), until=_local(report.until),
                                     span=format_duration(span)),
            _("recorded: {recorded} of it ({share}%), in {database}").format(
                recorded=format_duration(recorded), share=f"{share:.0f}",
                database=sanitize(report.database))]


def render_report(report: Report, style: Style, width: int) -> str:
    title, recorded = _headline(report)
    lines = [style.paint(title, "bold"), recorded]
    lines.extend(style.paint(n, "dim") for n in report.notes)
    cov = report.coverage
    if cov.recorded_seconds <= 0 and not report.rows:
        held = (_("no data recorded in this window (the database is empty)") if cov.first is None else
                _("no data recorded in this window (the database holds {first} to {last})").format(
                    first=_local(cov.first), last=_local(cov.last)))
        lines.append(style.paint(held, "yellow"))
        return "\n".join(lines)
    lines.append("")
    if report.rows:
        header, rows, right = _usage_rows(report)
        lines.extend(_table(header, rows, right, style, width, drop=("FIRST SEEN", "OWNER", "LAST SEEN", "GPUS")))
        if report.total_rows > len(report.rows):
            lines.append(style.paint(_("... {n} more (--top N shows more)").format(
                n=report.total_rows - len(report.rows)), "dim"))
    else:
        lines.append(style.paint(_("no process held GPU memory in this window"), "dim"))
    if report.by == "gpu":
        lines.append(style.paint(_("GPU-hours of a GPU: the time any process held memory on it; peak memory: "
                                   "the GPU's own reading"), "dim"))
    lines.append("")
    lines.append(style.paint(_("top idle holders (memory held while running no kernels of its own)"), "bold"))
    if not report.idle_holders:
        lines.append(style.paint(_("none: no process held memory idle in this window"), "dim"))
    else:
        rows = [[_key(u, "life"), sanitize(u.user or "?"), u.gpus or "-", _hours(u.idle_seconds),
                 format_size(round(u.memory_byte_seconds / u.idle_seconds) if u.idle_seconds else None),
                 _local(u.last_seen), _command(u)] for u in report.idle_holders]
        header = ["PID", "USER", "GPUS", "IDLE HOURS", "HELD (AVG)", "LAST SEEN", "COMMAND"]
        table = _table(header, rows, {"PID", "IDLE HOURS", "HELD (AVG)"}, style, width, drop=("LAST SEEN", "GPUS"))
        lines.append(table[0])
        lines.extend(style.paint(r, "yellow") for r in table[1:])
    return "\n".join(lines)


# ------------------------------------------------------------------ data
def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _clean(text: str | None) -> str | None:
    return None if text is None else sanitize(text)


def usage_dict(u: Usage, by: str) -> dict[str, Any]:
    """One row of --json (and --csv): base units."""
    out: dict[str, Any] = {}
    if by == "user":
        out["user"] = sanitize(u.key)
    elif by == "gpu":
        out["gpu"] = int(u.key.split()[-1])
    elif by == "day":
        out["day"] = u.key
    elif by in WORKLOADS:
        out.update(_workload_keys(u, by))
    # "jobs" is the old name of "lives" (process lives), kept for a release
    out.update({"gpu_seconds": u.gpu_seconds, "memory_byte_seconds": u.memory_byte_seconds,
                "peak_memory": u.peak_memory, "idle_seconds": u.idle_seconds, "lives": u.lives, "jobs": u.lives})
    if by == "gpu":
        out["utilization"] = None if u.utilization is None else round(u.utilization, 2)
    if by == "life":
        out.update({"pid": u.pid, "nvml_pid": u.nvml_pid, "user": _clean(u.user), "command": _clean(u.command),
                    "gpus": [int(g) for g in (u.gpus or "").split(",") if g.strip().isdigit()],
                    "first_seen": u.first_seen, "last_seen": u.last_seen, "workload": workload_dict(u.workload)})
    return out


def _workload_keys(u: Usage, by: str) -> dict[str, Any]:
    """A workload row's own keys (null in the group of the lives in none, which has no workload:
    told by that, not by its name, which a container could also have)."""
    w = u.workload
    if by == "container":
        return {"container": _clean(u.key) if w else None, "container_id": _clean(w.container_id) if w else None,
                "runtime": _clean(w.runtime) if w else None}
    if by == "pod":
        return {"pod": _clean(w.pod) if w else None, "namespace": _clean(w.namespace) if w else None,
                "pod_uid": _clean(w.pod_uid) if w else None}
    if by == "namespace":
        return {"namespace": _clean(w.namespace) if w else None}
    return {"slurm_job": w.slurm_job if w else None}


def _idle_dict(u: Usage) -> dict[str, Any]:
    return {"pid": u.pid, "nvml_pid": u.nvml_pid, "user": _clean(u.user), "command": _clean(u.command),
            "gpus": [int(g) for g in (u.gpus or "").split(",") if g.strip().isdigit()],
            "idle_seconds": u.idle_seconds, "idle_memory_byte_seconds": u.memory_byte_seconds,
            "peak_memory": u.peak_memory, "first_seen": u.first_seen, "last_seen": u.last_seen}


def report_json(report: Report) -> str:
    """The --json document (docs/history.md, "Reports"): schema, database, window, coverage, by,
    rows, idle_holders; times are unix seconds (and ISO 8601 UTC beside the window's)."""
    cov = report.coverage
    doc = {
        "schema": SCHEMA_VERSION,
        "database": sanitize(report.database),
        "window": {"since": report.since, "until": report.until, "seconds": report.until - report.since,
                   "since_time": _iso(report.since), "until_time": _iso(report.until)},
        "coverage": {"recorded_seconds": cov.recorded_seconds, "first_sample": cov.first,
                     "last_sample": cov.last},
        "by": report.by,
        "total_rows": report.total_rows,
        "rows": [usage_dict(u, report.by) for u in report.rows],
        "idle_holders": [_idle_dict(u) for u in report.idle_holders],
    }
    return json.dumps(doc, indent=2)


CSV_COLUMNS = {
    "user": ("user", "gpu_seconds", "memory_byte_seconds", "peak_memory", "idle_seconds", "jobs", "lives"),
    "gpu": ("gpu", "gpu_seconds", "memory_byte_seconds", "peak_memory", "idle_seconds", "jobs", "utilization",
            "lives"),
    "day": ("day", "gpu_seconds", "memory_byte_seconds", "peak_memory", "idle_seconds", "jobs", "lives"),
    "life": ("pid", "user", "gpus", "gpu_seconds", "memory_byte_seconds", "peak_memory", "idle_seconds",
             "first_seen", "last_seen", "command", "nvml_pid"),
    "container": ("container", "container_id", "runtime", "gpu_seconds", "memory_byte_seconds", "peak_memory",
                  "idle_seconds", "lives"),
    "pod": ("pod", "namespace", "pod_uid", "gpu_seconds", "memory_byte_seconds", "peak_memory", "idle_seconds",
            "lives"),
    "namespace": ("namespace", "gpu_seconds", "memory_byte_seconds", "peak_memory", "idle_seconds", "lives"),
    "slurm-job": ("slurm_job", "gpu_seconds", "memory_byte_seconds", "peak_memory", "idle_seconds", "lives"),
}


def report_csv(report: Report) -> str:
    """A header, then one row per group (base units; N/A for unknown)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    columns = CSV_COLUMNS[report.by]
    writer.writerow(columns)
    for u in report.rows:
        row = usage_dict(u, report.by)
        if "gpus" in row:
            row["gpus"] = ",".join(map(str, row["gpus"]))
        writer.writerow([csv_cell(row[c]) for c in columns])
    return buf.getvalue()
