"""The live view's history charts: each GPU's memory and utilization over a choice of ranges
(5m, 1h, 24h, 7d), from the recorded history (when a database exists) and the live samples.

Each range keeps a fixed number of slots per GPU (SLOTS, aligned to multiples of its length:
the same slots history.series reads), holding the highest memory and utilization seen in each, in
arrays allocated at once, so a week costs what five minutes do, from the first sample on, and
recorded and live samples merge in any order.
No SQLite here: the database is read by history.series, imported only when a database exists.
"""

from __future__ import annotations

from array import array
from math import isnan, nan

from ..alerts import GpuSample
from ..gpu_state import Snapshot
from ..units import format_duration

RANGES = (300.0, 3600.0, 86400.0, 7 * 86400.0)
SLOTS = 600  # points per range and GPU: finer than any chart is wide
PLACES = SLOTS + SLOTS // 10  # places kept per range and GPU: a range, and a little of the time before it


def range_label(span: float) -> str:
    """5m, 1h, 24h, 7d: the shortest exact name of a range."""
    if span >= 2 * 86400 and span % 86400 == 0:
        return f"{span / 86400:g}d"
    if span >= 3600 and span % 3600 == 0:
        return f"{span / 3600:g}h"
    if span >= 60 and span % 60 == 0:
        return f"{span / 60:g}m"
    return format_duration(span)


def _higher(held: float, new: float | None) -> float:
    """The higher of a slot's value (NaN: none yet) and a new one (None: not known)."""
    if new is None:
        return held
    return new if isnan(held) or new > held else held


class RangeChart:
    """One range: per GPU, PLACES places, each holding one slot (its index, the highest memory used
    and utilization seen in it): slot s lives at place s % PLACES until a newer slot takes it. The
    places are allocated at once, in flat arrays, so a chart's memory is the same after a minute
    and after a week (a dict of lists grew with every slot until the range was full: an hour
    for 1h, a day for 24h)."""

    def __init__(self, span: float) -> None:
        self.span = span
        self.recorded_first: float | None = None  # earliest recorded time in the range, once read
        self.loaded = False  # the database was read for this range
        # GPU -> (slot held at each place, -1 for none; memory used; utilization), NaN for N/A
        self.gpus: dict[int, tuple[array[int], array[float], array[float]]] = {}
        self._held: dict[int, list[int]] = {}  # GPU -> [lowest, highest] slot ever put: where to look

    @property
    def width(self) -> float:
        return self.span / SLOTS

    def put(self, gpu: int, slot: int, used: float | None, util: float | None) -> None:
        places = self.gpus.get(gpu)
        if places is None:
            places = self.gpus[gpu] = (array("q", [-1]) * PLACES, array("d", [nan]) * PLACES,
                                       array("d", [nan]) * PLACES)
            self._held[gpu] = [slot, slot]
        held = self._held[gpu]
        held[0], held[1] = min(held[0], slot), max(held[1], slot)
        slots, memory, utilization = places
        i = slot % PLACES
        if slots[i] == slot:
            memory[i], utilization[i] = _higher(memory[i], used), _higher(utilization[i], util)
        elif slots[i] < slot:  # a newer slot takes the place (one older than the place's is out of range)
            slots[i] = slot
            memory[i] = nan if used is None else used
            utilization[i] = nan if util is None else util

    def add(self, t: float, gpu: int, used: float | None, util: float | None) -> None:
        self.put(gpu, int(t // self.width), used, util)

    def samples(self, gpu: int, total: int | None) -> list[GpuSample]:
        """The GPU's slots as samples (at the middle of each slot), oldest first."""
        places = self.gpus.get(gpu)
        if places is None:
            return []
        slots, memory, utilization = places
        half = self.width / 2
        held = sorted((slot, i) for i, slot in enumerate(slots) if slot >= 0)
        return [GpuSample(slot * self.width + half, None if isnan(memory[i]) else int(memory[i]), total, None,
                          None if isnan(utilization[i]) else int(utilization[i]))
                for slot, i in held]


    def peaks(self, gpu: int, now: float, cells: int,
              total: int | None) -> tuple[list[float | None], list[float | None]]:
        """What sparkline.buckets makes of samples(gpu, total) over the range at `cells` cells, for
        memory (a share of `total`) and utilization (a share of 100), in one pass over the places:
        a sample object per slot was most of a refresh's panels once the range had filled."""
        memory_out: list[float | None] = [None] * cells
        util_out: list[float | None] = [None] * cells
        places = self.gpus.get(gpu)
        if places is None or cells <= 0:
            return memory_out, util_out
        slots, memory, utilization = places
        cell = self.span / cells
        start, half, width = now - self.span, self.width / 2, self.width
        earliest, last, whole = start - cell, cells - 1, total or 1
        lowest, highest = self._held[gpu]
        # only the slots that can be drawn and were put: a view that just started has few
        for slot in range(max(lowest, int((earliest - half) // width)), highest + 1):
            i = slot % PLACES
            if slots[i] != slot:
                continue
            t = slot * width + half
            if t < earliest:
                continue
            k = min(last, max(0, int((t - start) / cell)))
            used, util = memory[i], utilization[i]
            if not isnan(used):
                share, held = int(used) / whole, memory_out[k]
                if held is None or share > held:
                    memory_out[k] = share
            if not isnan(util):
                share, held = int(util) / 100, util_out[k]
                if held is None or share > held:
                    util_out[k] = share
        return memory_out, util_out


class Charts:
    """Every range, the one shown, and where its history comes from."""

    def __init__(self, first_span: float):
        spans = sorted(set(RANGES) | {first_span})
        self.ranges = [RangeChart(s) for s in spans]
        self.current = spans.index(first_span)

    @property
    def shown(self) -> RangeChart:
        return self.ranges[self.current]

    def cycle(self) -> RangeChart:
        self.current = (self.current + 1) % len(self.ranges)
        return self.shown

    def add(self, snap: Snapshot) -> None:
        for dev in snap.gpus:
            if dev.lost:
                continue
            for chart in self.ranges:
                chart.add(snap.time, dev.index, dev.memory_used, dev.utilization)

    def samples(self, gpu: int, total: int | None) -> list[GpuSample]:
        return self.shown.samples(gpu, total)
