"""`vram doctor SNAPSHOT`: a PyTorch memory snapshot's peak for people (text), programs (JSON), and
its timeline as a picture (SVG written here, no library; HTML embeds the same SVG).

Every name in a snapshot (file names, functions) is another user's text: sanitized before it is
printed and escaped in the SVG.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape

from ..doctor.snapshot import CATEGORY_LABELS, FREE_IN_SEGMENTS, FREE_LABEL, PeakReport, Snapshot, Timeline
from ..procs import sanitize
from .style import Style

SCHEMA_VERSION = 1
# Tableau 10, as the report's plot (render/report_plot.py) and memory_viz use
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")
CATEGORY_COLOURS = {"parameter": "#4e79a7", "gradient": "#f28e2b", "optimizer_state": "#59a14f",
                    "activation": "#e15759", "autograd_detail": "#ff9da7", "temporary": "#edc948",
                    "input": "#76b7b2", "unknown": "#9c755f", "other": "#bab0ac"}
FREE_COLOUR = "#d9d9d9"


def size(n: int | None) -> str:
    """Bytes for a snapshot's scale: 4B, 2.0KiB, 514.5KiB, 1.0MiB, 3.2GiB."""
    if n is None:
        return "N/A"
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n}B"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:4.0f}%" if whole else "   -"


def render_peak(snap: Snapshot, reports: list[PeakReport], source: str, style: Style) -> str:
    lines = [style.paint(f"PyTorch memory snapshot: {sanitize(source)}", "bold") + f"  (form: {snap.form})"]
    for note in snap.notes:
        lines.append(f"  note: {note}")
    for r in reports:
        when = f"entry {r.step} of {r.entries}" if r.entries else "the snapshot (no trace)"
        reserved = f", reserved {size(r.reserved)}" if r.reserved is not None else ""
        lines.append("")
        lines.append(style.paint(f"Device {r.device}: peak {size(r.allocated)} allocated{reserved}", "bold")
                     + f"  (at {when})")
        how = ("the profiler's categories" if r.categories_from == "profiler"
               else "categories inferred from each allocation's frames and lifetime; unknown where they say nothing")
        lines.append(f"  by category ({how}):")
        whole = r.reserved if r.reserved is not None else r.allocated
        for c in r.by_category:
            count = f"  {c.count} block{'' if c.count == 1 else 's'}" if c.count else ""
            lines.append(f"    {size(c.bytes):>9} {_pct(c.bytes, whole)}  {c.label}{count}")
        lines.append("  by your source line (the innermost frame outside libraries):")
        for s in r.by_source:
            blocks = f"{s.count} block{'' if s.count == 1 else 's'}"
            lines.append(f"    {size(s.bytes):>9} {_pct(s.bytes, r.allocated)}  {sanitize(s.label)}  ({blocks})")
        if r.source_lines > len(r.by_source):
            lines.append(f"    ... {r.source_lines - len(r.by_source)} more lines")
        lines.append("  largest blocks live at the peak:")
        for a in r.largest:
            where = sanitize(a.source) if a.source else ("allocated before recording began" if a.born is None
                                                          else "no frame of your code")
            op = f" in {sanitize(a.op)}" if a.op and a.source and not a.source.endswith(f"({a.op})") else ""
            lines.append(f"    {size(a.size):>9}  {CATEGORY_LABELS.get(a.category, a.category)}: {where}{op}")
        if r.before_recording:
            lines.append(f"  {size(r.before_recording)} at the peak was allocated before _record_memory_history() "
                         "began: no frames, so no category or line")
        for o in r.ooms:
            free = f", {size(o.device_free)} free on the device" if o.device_free is not None else ""
            lines.append(style.paint(f"  out of memory at entry {o.index}: asked for {size(o.size)}{free}; "
                                     f"{size(o.allocated)} allocated then", "red"))
    return "\n".join(lines)


def peak_dict(snap: Snapshot, reports: list[PeakReport], source: str) -> dict[str, object]:
    return {
        "schema": SCHEMA_VERSION,
        "source": source,
        "form": snap.form,
        "notes": snap.notes,
        "devices": [{
            "device": r.device,
            "peak_entry": r.step,
            "entries": r.entries,
            "time_us": r.time_us,
            "allocated_bytes": r.allocated,
            "reserved_bytes": r.reserved,
            "categories_from": r.categories_from,
            "by_category": {c.key: c.bytes for c in r.by_category},
            "by_source": [{"line": s.key, "bytes": s.bytes, "blocks": s.count} for s in r.by_source],
            "largest": [{"bytes": a.size, "category": a.category, "line": a.source, "op": a.op,
                         "address": a.addr, "recorded": a.born is not None} for a in r.largest],
            "before_recording_bytes": r.before_recording,
            "ooms": [{"entry": o.index, "requested_bytes": o.size, "device_free_bytes": o.device_free,
                      "allocated_bytes": o.allocated} for o in r.ooms],
        } for r in reports],
    }


def peak_json(snap: Snapshot, reports: list[PeakReport], source: str) -> str:
    return json.dumps(peak_dict(snap, reports, source), indent=2)


# ---------------------------------------------------------------- the timeline picture

def _nice_step(top: float) -> tuple[int, str]:
    """A round tick step in bytes and the unit the axis is labelled in (KiB, MiB or GiB)."""
    unit, scale = ("GiB", 1024**3) if top >= 1024**3 else ("MiB", 1024**2) if top >= 1024**2 else ("KiB", 1024)
    for m in (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500):
        if top / (m * scale) <= 6:
            return max(1, int(m * scale)), unit
    return scale * 1000, unit


def _attr(text: str) -> str:
    """Other users' text inside a double-quoted attribute."""
    return escape(sanitize(text), {'"': "&quot;"})


def band_label(tl: Timeline, name: str) -> str:
    if tl.by == "category":
        return CATEGORY_LABELS.get(name, name)
    return name


def _colour(tl: Timeline, i: int, name: str) -> str:
    if tl.by == "category":
        return CATEGORY_COLOURS.get(name, PALETTE[i % len(PALETTE)])
    return CATEGORY_COLOURS["other"] if name == "other" else PALETTE[i % (len(PALETTE) - 1)]


def render_svg(tl: Timeline, title: str) -> str:
    """Stacked bands, bottom first, then free in segments on top; one <g class="band"> per band with
    data-name and data-peak-bytes (what a test reads), one column per step shown."""
    left, right, top, height, bottom = 78, 300, 44, 300, 46
    cols = max(1, len(tl.steps))
    width = 1000
    plot_w = width - left - right
    totals = [sum(vals[i] for _, vals in tl.bands) + (tl.free[i] if tl.free is not None else 0) for i in range(cols)]
    ymax = max(max(totals, default=0), 1)
    step, unit = _nice_step(ymax)
    ymax = -(-ymax // step) * step
    scale = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]
    dx = plot_w / cols

    def y(v: float) -> float:
        return top + height - height * v / ymax

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + bottom}" '
           f'viewBox="0 0 {width} {top + height + bottom}" font-family="sans-serif" font-size="11" '
           f'data-ymax-bytes="{ymax}" data-plot-top="{top}" data-plot-height="{height}">',
           f'<rect width="{width}" height="{top + height + bottom}" fill="white"/>',
           f'<text x="{left}" y="24" font-size="14" font-weight="bold">{escape(sanitize(title))}</text>',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{height}" fill="#fafafa" stroke="#ccc"/>']
    tick = 0
    while tick <= ymax:
        ty = y(tick)
        label = f"{tick / scale:g} {unit}" if tick else "0"
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end" fill="#555">{label}</text>')
        tick += step
    layers = [(name, vals) for name, vals in tl.bands]
    if tl.free is not None:
        layers.append((FREE_IN_SEGMENTS, tl.free))
    base = [0] * cols
    legend = []
    for i, (name, vals) in enumerate(layers):
        upper = [b + v for b, v in zip(base, vals)]
        colour = FREE_COLOUR if name == FREE_IN_SEGMENTS else _colour(tl, i, name)
        label = FREE_LABEL if name == FREE_IN_SEGMENTS else band_label(tl, name)
        pts = []
        for c in range(cols):
            pts += [f"{left + c * dx:.2f},{y(upper[c]):.2f}", f"{left + (c + 1) * dx:.2f},{y(upper[c]):.2f}"]
        for c in range(cols - 1, -1, -1):
            pts += [f"{left + (c + 1) * dx:.2f},{y(base[c]):.2f}", f"{left + c * dx:.2f},{y(base[c]):.2f}"]
        peak = vals[tl.peak_column] if vals else 0
        out.append(f'<g class="band" data-name="{_attr(name)}" data-peak-bytes="{peak}">'
                   f'<polygon points="{" ".join(pts)}" fill="{colour}"/>'
                   f'<title>{escape(sanitize(label))}: {size(peak)} at the peak</title></g>')
        legend.append((colour, label, peak))
        base = upper
    px = left + (tl.peak_column + 0.5) * dx
    out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{top + height}" stroke="#333" '
               'stroke-dasharray="3,3"/>')
    out.append(f'<text x="{px:.1f}" y="{top - 4}" text-anchor="middle" fill="#333">peak</text>')
    first, last = tl.steps[0] if tl.steps else 0, tl.steps[-1] if tl.steps else 0
    times = [t for t in tl.times_us if t is not None]
    if len(times) == len(tl.times_us) and times and times[-1] > times[0]:
        span = (times[-1] - times[0]) / 1000
        axis = f"time (ms since the first entry; {span:g} ms shown)"
        ends = ("0", f"{span:.1f}")
    else:
        axis = "trace entries (the allocator's actions, in order)"
        ends = (str(first), str(last))
    out.append(f'<text x="{left}" y="{top + height + 16}" fill="#555">{ends[0]}</text>')
    out.append(f'<text x="{left + plot_w}" y="{top + height + 16}" text-anchor="end" fill="#555">{ends[1]}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + height + 34}" text-anchor="middle" fill="#333">'
               f'{escape(axis)}</text>')
    out.append(f'<text x="16" y="{top + height / 2}" transform="rotate(-90 16 {top + height / 2})" '
               f'text-anchor="middle" fill="#333">memory ({unit})</text>')
    for i, (colour, label, peak) in enumerate(reversed(legend)):
        ly = top + i * 18
        name = sanitize(label)
        name = name if len(name) <= 36 else name[:35] + "…"
        out.append(f'<rect x="{width - right + 14}" y="{ly}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{width - right + 32}" y="{ly + 10}">{escape(name)} {size(peak)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_html(tl: Timeline, title: str) -> str:
    """A page with the SVG inline: opens in any browser, offline (no script, nothing fetched)."""
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{escape(sanitize(title))}</title></head>\n<body style=\"margin:16px\">\n"
            + render_svg(tl, title) + "</body></html>\n")
