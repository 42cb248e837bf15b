"""Each GPU's recorded memory and utilization over a recent window, aggregated in SQL to a bounded
number of points: what the live view (`vram top`) draws before its first live sample.

The window is cut into `points` slots of equal length, aligned to multiples of that length (so a
live view can merge its own samples into the same slots); each slot keeps the highest memory
used and the highest utilization of the rows that start in it. Raw samples and the rollup tiers
are read apart so that each uses its index (the view gpu_time would scan every rollup row).
A row stands for the time up to the next one (a raw sample for its span, a rollup for its
bucket), so a slot it covers without a row of its own holds its values: samples every 10 s do
not draw as a comb on a chart of 0.5 s slots, and time nobody recorded stays empty.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from .store import Store, StoreError, describe

Slot = tuple[int | None, float | None]  # (memory used at most, bytes; utilization at most, %)


@dataclass
class GpuSeries:
    """The recorded part of a window: per GPU, slot index -> (used, util). A slot starts at
    index * width seconds (unix time)."""

    since: float
    until: float
    width: float
    gpus: dict[int, dict[int, Slot]] = field(default_factory=dict)
    first: float | None = None  # the earliest recorded time in the window (None: nothing)
    last: float | None = None


def _higher(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def gpu_series(store: Store, until: float, span: float, points: int) -> GpuSeries:
    """The `span` seconds up to `until`, every GPU, in slots of span / points seconds."""
    if points < 1 or not span > 0:
        raise ValueError("gpu_series: needs points >= 1 and span > 0")
    width = span / points
    since = until - span
    out = GpuSeries(since, until, width)
    window = {"since": since, "until": until, "w": width}
    raw = """SELECT g.gpu, CAST(s.t / :w AS INTEGER) AS slot, MAX(g.used), MAX(g.util), MIN(s.t),
                    MAX(s.t + s.span) FROM samples s JOIN gpu_raw g ON g.sample = s.id
             WHERE s.t >= :since AND s.t <= :until GROUP BY g.gpu, slot"""
    rolled = """SELECT gpu, CAST(t / :w AS INTEGER) AS slot, MAX(used_max), MAX(util), MIN(t), MAX(t + tier)
                FROM gpu_rollup WHERE tier IN (60, 900) AND t >= :since AND t <= :until GROUP BY gpu, slot"""
    # The raw sample before the window stands for its start (its span reaches into it).
    before = """SELECT g.gpu, CAST(:since / :w AS INTEGER), g.used, g.util, :since, s.t + s.span
                FROM samples s JOIN gpu_raw g ON g.sample = s.id
                WHERE s.id = (SELECT id FROM samples WHERE t < :since ORDER BY t DESC LIMIT 1)
                  AND s.t + s.span > :since"""
    reaches: dict[tuple[int, int], float] = {}  # (gpu, slot) -> the time its rows stand for up to
    try:
        for query in (before, raw, rolled):
            for gpu, slot, used, util, first, reach in store.conn.execute(query, window):
                slots = out.gpus.setdefault(int(gpu), {})
                held = slots.get(slot, (None, None))
                top = _higher(held[0], used)
                slots[int(slot)] = (None if top is None else int(top), _higher(held[1], util))
                key = (int(gpu), int(slot))
                reaches[key] = max(reach, reaches.get(key, reach))
                out.first = first if out.first is None else min(out.first, first)
                out.last = reach if out.last is None else max(out.last, reach)
    except sqlite3.Error as e:  # corrupt pages show up only when read
        raise StoreError(describe(e, store.path), param="db") from None
    for gpu, slots in out.gpus.items():
        _fill_covered(slots, {s: r for (g, s), r in reaches.items() if g == gpu}, width, until)
    return out


def _fill_covered(slots: dict[int, Slot], reaches: dict[int, float], width: float, until: float) -> None:
    """Give each empty slot that a row before it stands for that row's values."""
    end = int(until // width)
    for slot in sorted(slots):
        value = slots[slot]
        last = min(end, int(-(-reaches[slot] // width)) - 1)  # the last slot starting before the reach
        for covered in range(slot + 1, last + 1):
            if covered in slots:
                break
            slots[covered] = value
