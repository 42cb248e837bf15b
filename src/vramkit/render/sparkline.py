"""Sparklines: a series of values as one line of block characters, shared by the live view
and the history views (vram life)."""

from __future__ import annotations

TICKS = "▁▂▃▄▅▆▇█"


def spark(values: list[float | None], lo: float, hi: float) -> str:
    """One character per value, scaled between lo and hi; None is a blank."""
    out = []
    span = (hi - lo) or 1.0
    for v in values:
        if v is None:
            out.append(" ")
        else:
            level = int(round((min(hi, max(lo, v)) - lo) / span * (len(TICKS) - 1)))
            out.append(TICKS[level])
    return "".join(out)


def buckets(points: list[tuple[float, float | None]], now: float, span: float, cells: int,
            step: bool = False) -> list[float | None]:
    """Resample (time, value) points to `cells` slices of the last `span` seconds: the largest
    value in each slice (peaks are what matter for memory). With `step`, a slice with no point
    holds the last value before it (change-point series, as process traces are stored)."""
    if cells <= 0:
        return []
    width = span / cells
    out: list[float | None] = [None] * cells
    start = now - span
    for t, v in points:
        if v is None or t < start - width:
            continue
        i = min(cells - 1, max(0, int((t - start) / width)))
        held = out[i]
        if held is None or v > held:
            out[i] = v
    if step and points:
        first = points[0][0]
        last: float | None = None
        for i in range(cells):
            if out[i] is not None:
                last = out[i]
            elif last is not None and start + i * width >= first:
                out[i] = last
    return out
