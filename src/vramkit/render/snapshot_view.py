"""`vram doctor SNAPSHOT`: a PyTorch memory snapshot's peak for people (text), programs (JSON), and
its timeline as a picture (SVG written here, no library; HTML embeds the same SVG).

Every name in a snapshot (file names, functions) is another user's text: sanitized before it is
printed and escaped in the SVG.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape

from ..doctor.snapshot import (
    BEFORE_RECORDING,
    CATEGORY_LABELS,
    FREE_IN_SEGMENTS,
    FREE_LABEL,
    NO_FRAMES,
    NO_USER_FRAME,
    PeakReport,
    Snapshot,
    Timeline,
)
from ..i18n import _, ngettext
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


def _blocks(n: int) -> str:
    return ngettext("{n} block", "{n} blocks", n).format(n=n)


def render_peak(snap: Snapshot, reports: list[PeakReport], source: str, style: Style) -> str:
    lines = [style.paint(_("PyTorch memory snapshot: {source}").format(source=sanitize(source)), "bold")
             + "  " + _("(form: {form})").format(form=snap.form)]
    for note in snap.notes:
        lines.append("  " + _("note: {note}").format(note=note))
    for r in reports:
        when = (_("entry {step} of {entries}").format(step=r.step, entries=r.entries) if r.entries
                else _("the snapshot (no trace)"))
        head = (_("Device {device}: peak {size} allocated, reserved {reserved}").format(
                    device=r.device, size=size(r.allocated), reserved=size(r.reserved)) if r.reserved is not None
                else _("Device {device}: peak {size} allocated").format(device=r.device, size=size(r.allocated)))
        lines.append("")
        lines.append(style.paint(head, "bold") + "  " + _("(at {when})").format(when=when))
        lines.append("  " + (_("by category (the profiler's categories):") if r.categories_from == "profiler"
                             else _("by category (categories inferred from each allocation's frames and lifetime; "
                                    "unknown where they say nothing):")))
        whole = r.reserved if r.reserved is not None else r.allocated
        for c in r.by_category:
            count = f"  {_blocks(c.count)}" if c.count else ""
            lines.append(f"    {size(c.bytes):>9} {_pct(c.bytes, whole)}  {_(c.label)}{count}")
        lines.append("  " + _("by your source line (the innermost frame outside libraries):"))
        for s in r.by_source:
            label = _(s.label) if s.label in _NO_LINE else sanitize(s.label)
            # Translators: how many allocations a source line made, in brackets after it
            blocks = ngettext("({n} block)", "({n} blocks)", s.count).format(n=s.count)
            lines.append(f"    {size(s.bytes):>9} {_pct(s.bytes, r.allocated)}  {label}  {blocks}")
        if r.source_lines > len(r.by_source):
            lines.append("    " + _("... {n} more lines").format(n=r.source_lines - len(r.by_source)))
        lines.append("  " + _("largest blocks live at the peak:"))
        for a in r.largest:
            where = sanitize(a.source) if a.source else _(BEFORE_RECORDING if a.born is None else NO_USER_FRAME)
            category = _(CATEGORY_LABELS.get(a.category, a.category))
            if a.op and a.source and not a.source.endswith(f"({a.op})"):
                text = _("{category}: {where} in {op}").format(category=category, where=where, op=sanitize(a.op))
            else:
                text = _("{category}: {where}").format(category=category, where=where)
            lines.append(f"    {size(a.size):>9}  {text}")
        if r.before_recording:
            lines.append("  " + _("{size} at the peak was allocated before _record_memory_history() began: no "
                                  "frames, so no category or line").format(size=size(r.before_recording)))
        for o in r.ooms:
            text = (_("out of memory at entry {index}: asked for {size}, {free} free on the device; {allocated} "
                      "allocated then") if o.device_free is not None
                    else _("out of memory at entry {index}: asked for {size}; {allocated} allocated then")).format(
                        index=o.index, size=size(o.size), free=size(o.device_free), allocated=size(o.allocated))
            lines.append(style.paint("  " + text, "red"))
    return "\n".join(lines)


# The labels of the lines no frame of the user's code names (the rest are file:line, not translated).
_NO_LINE = (BEFORE_RECORDING, NO_USER_FRAME, NO_FRAMES)


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
        return _(CATEGORY_LABELS.get(name, name))
    return _("other") if name == "other" else name


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
        label = _(FREE_LABEL) if name == FREE_IN_SEGMENTS else band_label(tl, name)
        pts = []
        for c in range(cols):
            pts += [f"{left + c * dx:.2f},{y(upper[c]):.2f}", f"{left + (c + 1) * dx:.2f},{y(upper[c]):.2f}"]
        for c in range(cols - 1, -1, -1):
            pts += [f"{left + (c + 1) * dx:.2f},{y(base[c]):.2f}", f"{left + c * dx:.2f},{y(base[c]):.2f}"]
        peak = vals[tl.peak_column] if vals else 0
        tip = _("{band}: {size} at the peak").format(band=sanitize(label), size=size(peak))
        out.append(f'<g class="band" data-name="{_attr(name)}" data-peak-bytes="{peak}">'
                   f'<polygon points="{" ".join(pts)}" fill="{colour}"/>'
                   f'<title>{escape(tip)}</title></g>')
        legend.append((colour, label, peak))
        base = upper
    px = left + (tl.peak_column + 0.5) * dx
    peak_word = escape(_("peak"))
    out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{top + height}" stroke="#333" '
               'stroke-dasharray="3,3"/>')
    out.append(f'<text x="{px:.1f}" y="{top - 4}" text-anchor="middle" fill="#333">{peak_word}</text>')
    first, last = tl.steps[0] if tl.steps else 0, tl.steps[-1] if tl.steps else 0
    times = [t for t in tl.times_us if t is not None]
    if len(times) == len(tl.times_us) and times and times[-1] > times[0]:
        span = (times[-1] - times[0]) / 1000
        axis = _("time (ms since the first entry; {span:g} ms shown)").format(span=span)
        ends = ("0", f"{span:.1f}")
    else:
        axis = _("trace entries (the allocator's actions, in order)")
        ends = (str(first), str(last))
    out.append(f'<text x="{left}" y="{top + height + 16}" fill="#555">{ends[0]}</text>')
    out.append(f'<text x="{left + plot_w}" y="{top + height + 16}" text-anchor="end" fill="#555">{ends[1]}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + height + 34}" text-anchor="middle" fill="#333">'
               f'{escape(axis)}</text>')
    memory_axis = _("memory ({unit})").format(unit=unit)
    out.append(f'<text x="16" y="{top + height / 2}" transform="rotate(-90 16 {top + height / 2})" '
               f'text-anchor="middle" fill="#333">{escape(memory_axis)}</text>')
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
