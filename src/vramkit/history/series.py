"""Each GPU's recorded memory and utilization over a recent window, aggregated in SQL to a bounded
number of points: what the live view (`vram top`) draws before its first live sample.

The window is cut into `points` slots of equal length, aligned to multiples of that length (so a
live view can merge its own samples into the same slots); each slot keeps the highest memory
used and the highest utilization of the rows that start in it. Raw samples and the rollup tiers
are read apart so that each uses its index (the view gpu_time would scan every rollup row).
A row stands for the time up to the next one (a raw sample for its span, a rollup for its
bucket), so a slot it covers without a row of its own holds its values: samples every 10 s do
not draw as a comb on a chart of 0.5 s slots, and time nobody recorded stays empty.
Every value is read through query.py's typed reads: a row without a valid time, length or GPU is
left out, a memory or utilization out of its range is unknown.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from .query import checked, read_transaction, typed, typed_int
from .store import Store, StoreError, describe, not_utf8

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
    span_ok = checked("s.span", "seconds")
    raw = f"""SELECT g.gpu, CAST(s.t / :w AS INTEGER) AS slot, MAX({checked('g.used', 'bytes')}),
                     MAX({checked('g.util', 'percent')}), MIN(s.t), MAX(s.t + {span_ok})
              FROM samples s JOIN gpu_raw g ON g.sample = s.id
              WHERE s.t >= :since AND s.t <= :until AND {checked('g.gpu', 'gpu')} IS NOT NULL
                AND {span_ok} IS NOT NULL GROUP BY g.gpu, slot"""
    rolled = f"""SELECT gpu, CAST(t / :w AS INTEGER) AS slot, MAX({checked('used_max', 'bytes')}),
                        MAX({checked('util', 'percent')}), MIN(t), MAX(t + tier)
                 FROM gpu_rollup WHERE tier IN (60, 900) AND t >= :since AND t <= :until
                   AND {checked('gpu', 'gpu')} IS NOT NULL GROUP BY gpu, slot"""
    # The raw sample before the window stands for its start (its span reaches into it).
    before = f"""SELECT g.gpu, CAST(:since / :w AS INTEGER), {checked('g.used', 'bytes')},
                        {checked('g.util', 'percent')}, :since, s.t + {span_ok}
                 FROM samples s JOIN gpu_raw g ON g.sample = s.id
                 WHERE s.id = (SELECT id FROM samples WHERE t < :since AND t >= 0 ORDER BY t DESC LIMIT 1)
                   AND {checked('g.gpu', 'gpu')} IS NOT NULL AND s.t + {span_ok} > :since"""
    reaches: dict[tuple[int, int], float] = {}  # (gpu, slot) -> the time its rows stand for up to
    try:
        # One read transaction, the schema checked as its first read (query.read_transaction): the
        # owner of another user's file could swap a table for a view after Store.open.
        with read_transaction(store):
            for query in (before, raw, rolled):
                for row in store.conn.execute(query, window):
                    gpu, slot = typed_int(row[0], "gpu"), row[1]
                    first, reach = typed(row[4], "time"), typed(row[5], "time")
                    if gpu is None or not isinstance(slot, int) or first is None or reach is None:
                        continue
                    slots = out.gpus.setdefault(gpu, {})
                    held = slots.get(slot, (None, None))
                    top = _higher(held[0], typed(row[2], "bytes"))
                    slots[slot] = (None if top is None else int(top), _higher(held[1], typed(row[3], "percent")))
                    key = (gpu, slot)
                    reaches[key] = max(reach, reaches.get(key, reach))
                    out.first = first if out.first is None else min(out.first, first)
                    out.last = reach if out.last is None else max(out.last, reach)
    except sqlite3.Error as e:  # corrupt pages show up only when read
        raise StoreError(describe(e, store.path), param="db") from None
    except UnicodeDecodeError:  # a damaged schema quoted in SQLite's error
        raise StoreError(not_utf8(store.path), param="db") from None
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
