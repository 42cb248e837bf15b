"""`vram life PID`: one process life from recorded history: its totals, whom it worked for (its
container, pod or Slurm job), its memory on each GPU over its life as a sparkline, and a short
table of how it went (text), or every point (JSON)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..gpu_state import Workload
from ..history.query import MAX_TIME, Point, ProcessLife
from ..history.store import WORKLOAD_COLUMNS
from ..i18n import _, pgettext
from ..procs import sanitize
from ..procs.workload import describe
from ..units import format_duration, format_size
from .sparkline import buckets, spark
from .style import Style
from .text_width import cells, fit, pad

SCHEMA_VERSION = 1
GIB = 1024**3

def _local(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _life_end(life: ProcessLife) -> float:
    """The end of the time its last sample stands for (the sample is taken at its start)."""
    return min(MAX_TIME, max([life.last_seen] + [p[0] + p[1] for p in life.points]))


NICE_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 604800)


def _step(seconds: float, rows: int) -> int:
    """The shortest round slice length that cuts `seconds` into at most `rows` slices."""
    longest = NICE_STEPS[-1]
    return next((s for s in NICE_STEPS if seconds / s <= rows), longest * (int(seconds // (longest * rows)) + 1))


@dataclass
class _Slice:
    start: float
    memory: dict[int, float | None]  # GPU -> the highest memory seen in the slice
    sm: float | None  # the highest own SM utilization
    idle: float  # share of the recorded time held idle


def _slices(points: list[Point], first: float, last: float, rows: int) -> list[_Slice]:
    """Round slices of the life (at most `rows`), each with what it held on each GPU; slices
    with nothing recorded are left out."""
    step = _step(max(1.0, last - first), rows)
    grouped: dict[float, list[Point]] = {}
    for p in points:
        grouped.setdefault(p[0] // step * step, []).append(p)
    out = []
    for start, members in sorted(grouped.items()):
        memory: dict[int, float | None] = {}
        for p in members:
            value = p[4] if p[4] is not None else p[3]
            held = memory.get(p[2])
            memory[p[2]] = value if held is None else held if value is None else max(held, value)
        sms = [p[5] for p in members if p[5] is not None]
        seconds = sum(p[1] for p in members)
        idle = sum(p[6] for p in members) / seconds if seconds > 0 else 0.0
        out.append(_Slice(max(start, first), memory, max(sms) if sms else None, idle))
    return out


def _table(life: ProcessLife, rows: int, style: Style) -> list[str]:
    table = _slices(life.points, life.first_seen, _life_end(life), rows)
    gpus = sorted({g for sl in table for g in sl.memory})
    if not table:
        return []
    # Translators: vram life's table: the start of each slice of time, the memory on each GPU, the
    # highest own SM use, the share of the slice the memory was held idle
    idle = pgettext("column", "IDLE")
    header = ("  " + pad(pgettext("column", "FROM"), 19) + "".join(f"{f'GPU {g}':>10}" for g in gpus)
              + "   " + pgettext("column", "SM") + "  " + idle)
    lines = ["", style.paint(header, "bold")]
    for sl in table:
        memory = "".join(f"{_size(sl.memory[g]) if g in sl.memory else '-':>10}" for g in gpus)
        sm = "N/A" if sl.sm is None else f"{sl.sm:.0f}%"
        lines.append(f"  {_local(sl.start)}{memory}  {sm:>4}  {sl.idle:>4.0%}")
    return lines


def _size(n: float | None) -> str:
    return format_size(None if n is None else round(n))


def _per_hour(value: float | None, unit: float = 1.0) -> str:
    """A total per hour (GPU-hours, GiB-hours), N/A where the recorder's total is not valid."""
    return "N/A" if value is None else f"{value / unit / 3600:.2f}"


def outside_words(nvml_pid: int) -> str:
    """A recorded holder outside this container's PID namespace, as people read it (never as a pid here)."""
    return _("host pid {pid} (outside this container's /proc)").format(pid=nvml_pid)


def render_life(lives: list[ProcessLife], pid: int, database: str, style: Style, width: int, rows: int = 12,
                outside: bool = False) -> str:
    """`outside`: `pid` is a host pid NVML listed for a holder outside this PID namespace."""
    lines: list[str] = []
    for n, life in enumerate(lives):
        if n:
            lines.append("")
        command = sanitize(life.command) if life.command else _("(command not recorded)")
        user = sanitize(life.user) if life.user else "?"
        gpus = life.gpus or "-"
        who = outside_words(pid) if outside else f"pid {pid}"
        lines.append(style.paint(fit(f"{who} · {user} · {command} · GPU {gpus}", width), "bold"))
        end = _life_end(life)
        lived = max(0.0, end - life.first_seen)
        owner = describe(life.workload, local=True)
        # Translators: the labels of vram life's lines (padded to one width)
        labels = [pgettext("life", "owner"), pgettext("life", "held"), pgettext("life", "used")]
        label_w = max(6, *map(cells, labels))
        if owner is not None:
            lines.append(f"  {pad(labels[0], label_w)}  {sanitize(owner)}")
        lines.append(f"  {pad(labels[1], label_w)}  {_local(life.first_seen)} → {_local(end)} "
                     f"({format_duration(lived)})")
        values = {"gpu_hours": _per_hour(life.gpu_seconds), "gib_hours": _per_hour(life.memory_byte_seconds, GIB),
                  "peak": format_size(life.peak_memory), "idle": format_duration(life.idle_seconds)}
        if life.gpu_seconds and life.idle_seconds is not None:
            used = _("{gpu_hours} GPU-hours · {gib_hours} GiB-hours · peak {peak} · idle {idle} "
                     "({share} of its GPU time)").format(share=f"{life.idle_seconds / life.gpu_seconds:.0%}", **values)
        else:
            used = _("{gpu_hours} GPU-hours · {gib_hours} GiB-hours · peak {peak} · idle {idle}").format(**values)
        lines.append(f"  {pad(labels[2], label_w)}  {used}")
        by_gpu: dict[int, list[tuple[float, float | None]]] = {}
        for p in life.points:
            by_gpu.setdefault(p[2], []).append((p[0], float(p[4] if p[4] is not None else p[3] or 0)))
        spark_w = max(10, min(80, width - 30))
        span = max(1.0, lived)
        top = max((v or 0.0 for series in by_gpu.values() for _, v in series), default=0.0) or 1.0
        for gpu, series in sorted(by_gpu.items()):
            line = spark(buckets(series, life.first_seen + span, span, spark_w, step=True), 0, top)
            peak = max((v or 0.0 for _, v in series), default=0.0)
            lines.append(f"  GPU {gpu:<3} " + style.paint(line, "green") + "  "
                         + _("peak {size}").format(size=format_size(int(peak))))
        lines.extend(_table(life, rows, style))
    if not lives:
        none = (_("no recorded life of host pid {pid} in {database}") if outside
                else _("no recorded life of pid {pid} in {database}"))
        lines.append(none.format(pid=pid, database=sanitize(database)))
    else:
        lines.append("")
        lines.append(style.paint(_("from {database}; sparklines share one scale (0 to the highest peak); each row is "
                                   "the highest memory and SM % in its slice, {idle} the share of its time held "
                                   "idle").format(database=sanitize(database), idle=pgettext("column", "IDLE")), "dim"))
    return "\n".join(lines)


def workload_dict(w: Workload | None) -> dict[str, Any] | None:
    """A recorded workload as JSON: the keys of `vram ps --json`'s `workload` (docs/json.md) that
    the history keeps, text sanitized; None for a life in none."""
    if w is None:
        return None
    return {column: sanitize(v) if isinstance(v, str) else v
            for column, v in ((c, getattr(w, c)) for c, _ in WORKLOAD_COLUMNS)}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def life_json(lives: list[ProcessLife], pid: int, database: str, outside: bool = False) -> str:
    """`outside`: `pid` is a host pid (`nvml_pid`), of a holder outside this PID namespace; `pid` is then null."""
    def life_dict(life: ProcessLife) -> dict[str, Any]:
        return {
            "pid": life.pid, "nvml_pid": life.nvml_pid, "user": sanitize(life.user) if life.user else None,
            "command": sanitize(life.command) if life.command else None,
            "gpus": [int(g) for g in (life.gpus or "").split(",") if g],
            "first_seen": _iso(life.first_seen), "first_seen_timestamp": life.first_seen,
            "last_seen": _iso(life.last_seen), "last_seen_timestamp": life.last_seen,
            "peak_memory": life.peak_memory, "gpu_seconds": life.gpu_seconds,
            "memory_byte_seconds": life.memory_byte_seconds, "idle_seconds": life.idle_seconds,
            "workload": workload_dict(life.workload),
            "points": [{"timestamp": p[0], "seconds": p[1], "gpu": p[2], "memory": p[3], "memory_max": p[4],
                        "sm_utilization": p[5], "idle_seconds": p[6]} for p in life.points],
        }
    return json.dumps({"schema": SCHEMA_VERSION, "database": database, "pid": None if outside else pid,
                       "nvml_pid": pid if outside else None, "lives": [life_dict(life) for life in lives]}, indent=2)
