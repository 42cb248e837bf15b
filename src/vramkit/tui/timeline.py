"""The live view's history charts: each GPU's memory and utilization over a choice of ranges
(5m, 1h, 24h, 7d), from the recorded history (when a database exists) and the live samples.

Each range keeps a fixed number of slots per GPU (SLOTS, aligned to multiples of its length:
the same slots history.series reads), holding the highest memory and utilization seen in each, in
arrays allocated at once, so a week costs what five minutes do, from the first sample on, and
recorded and live samples merge in any order. Five bytes a place (memory in MiB, rounded up: a
ten-thousandth of a small GPU's height, far below a chart's eighth of a cell; the utilization in
whole percent, what the panels draw): 103 KiB for 8 GPUs' four ranges, 186 KiB with memory in
whole bytes, 495 KiB at 24 bytes a place (an index and two floats).
No SQLite here: the database is read by history.series, imported only when a database exists.
"""

from __future__ import annotations

from array import array

from ..alerts import GpuSample
from ..gpu_state import Snapshot
from ..units import format_duration

RANGES = (300.0, 3600.0, 86400.0, 7 * 86400.0)
SLOTS = 600  # points per range and GPU: finer than any chart is wide
PLACES = SLOTS + SLOTS // 10  # places kept per range and GPU: a range, and a little of the time before it
NONE = -1  # a place's value where none is known (below every value: the highest of a run of places is max())
MIB = 2**20  # a place's unit of memory
MEMORY_MAX = 2**31 - 1  # the most a place's memory ("i": MiB) holds, 2 PiB
UTIL_MAX = 127  # the most a place's utilization ("b") holds: a percent is at most 100


def _value(value: float | None, most: int) -> int:
    """A place's value: whole units (the panels draw int(value): the highest of whole values is the
    whole of the highest), NONE for not known."""
    return NONE if value is None else min(most, max(0, int(value)))


def _mib(used: float | None) -> int:
    """A place's memory: MiB, rounded up (a peak is never drawn lower than it was)."""
    return NONE if used is None else _value(-(-int(used) // MIB), MEMORY_MAX)


def range_label(span: float) -> str:
    """5m, 1h, 24h, 7d: the shortest exact name of a range."""
    if span >= 2 * 86400 and span % 86400 == 0:
        return f"{span / 86400:g}d"
    if span >= 3600 and span % 3600 == 0:
        return f"{span / 3600:g}h"
    if span >= 60 and span % 60 == 0:
        return f"{span / 60:g}m"
    return format_duration(span)


def _top(values: array[int], first: int, end: int) -> int:
    """The highest of the values of slots first..end-1 (at most PLACES of them), in their places."""
    i, n = first % PLACES, end - first
    if i + n <= PLACES:
        return max(values[i:i + n])
    return max(max(values[i:]), max(values[:i + n - PLACES]))


class RangeChart:
    """One range: per GPU, PLACES places, each holding one slot (the highest memory used and
    utilization seen in it): slot s lives at place s % PLACES until a newer slot takes it. The
    places are allocated at once, in flat arrays, so a chart's memory is the same after a minute
    and after a week (a dict of lists grew with every slot until the range was full: an hour
    for 1h, a day for 24h).

    Of the newest PLACES slots (up to the highest put), each place holds its own slot or nothing
    (NONE): a newer slot clears the places of the slots it skips (no sample fell in them), and a
    slot older than the places hold is not taken. So a place's slot is known from the highest
    (no index kept), and the highest value of a run of slots is the max() of their places, which
    peaks() takes cell by cell instead of looking at each slot."""

    def __init__(self, span: float) -> None:
        self.span = span
        self.recorded_first: float | None = None  # earliest recorded time in the range, once read
        self.loaded = False  # the database was read for this range
        # GPU -> (memory used, utilization) at each place, NONE for none or N/A
        self.gpus: dict[int, tuple[array[int], array[int]]] = {}
        self._held: dict[int, list[int]] = {}  # GPU -> [lowest, highest] slot ever put: where to look

    @property
    def width(self) -> float:
        return self.span / SLOTS

    def put(self, gpu: int, slot: int, used: float | None, util: float | None) -> None:
        places = self.gpus.get(gpu)
        if places is None:
            places = self.gpus[gpu] = (array("i", [NONE]) * PLACES, array("b", [NONE]) * PLACES)
            self._held[gpu] = [slot, slot]
        held = self._held[gpu]
        memory, utilization = places
        if slot <= held[1] - PLACES:  # older than the places hold
            return
        i = slot % PLACES
        if slot > held[1]:  # a newer slot: it takes its place; the slots it skips had no sample
            for skipped in range(max(held[1] + 1, slot - PLACES + 1), slot + 1):
                memory[skipped % PLACES] = utilization[skipped % PLACES] = NONE
            held[1] = slot
        held[0] = min(held[0], slot)
        # the place holds this slot or nothing (NONE, below every value)
        memory[i] = max(memory[i], _mib(used))
        utilization[i] = max(utilization[i], _value(util, UTIL_MAX))

    def add(self, t: float, gpu: int, used: float | None, util: float | None) -> None:
        self.put(gpu, int(t // self.width), used, util)

    def samples(self, gpu: int, total: int | None) -> list[GpuSample]:
        """The GPU's slots as samples (at the middle of each slot), oldest first."""
        places = self.gpus.get(gpu)
        if places is None:
            return []
        memory, utilization = places
        half, highest = self.width / 2, self._held[gpu][1]
        held = sorted((highest - (highest - i) % PLACES, i) for i in range(PLACES)
                      if memory[i] != NONE or utilization[i] != NONE)
        return [GpuSample(slot * self.width + half, None if memory[i] == NONE else memory[i] * MIB, total, None,
                          None if utilization[i] == NONE else utilization[i])
                for slot, i in held]


    def peaks(self, gpu: int, now: float, cells: int,
              total: int | None) -> tuple[list[float | None], list[float | None]]:
        """What sparkline.buckets makes of samples(gpu, total) over the range at `cells` cells, for
        memory (a share of `total`) and utilization (a share of 100): the highest of each cell's
        slots, a run of places each, taken by max() (a loop over the slots was ~1 ms a GPU each
        refresh once the range had filled, five minutes into the view)."""
        memory_out: list[float | None] = [None] * cells
        util_out: list[float | None] = [None] * cells
        places = self.gpus.get(gpu)
        if places is None or cells <= 0:
            return memory_out, util_out
        memory, utilization = places
        cell = self.span / cells
        start, half, width = now - self.span, self.width / 2, self.width
        earliest, last, whole = start - cell, cells - 1, total or 1
        lowest, highest = self._held[gpu]

        def cell_of(slot: int) -> int:  # the cell whose time holds the slot's middle (the first or last: beyond)
            return min(last, max(0, int((slot * width + half - start) / cell)))

        # the slots that can be drawn and were put (a view that just started has few), no older
        # than the places hold
        slot = max(lowest, int((earliest - half) // width), highest - PLACES + 1)
        while slot <= highest and slot * width + half < earliest:
            slot += 1
        if slot > highest:
            return memory_out, util_out
        for k in range(cell_of(slot), cell_of(highest) + 1):
            end = highest + 1
            if k < last:  # the first slot of the next cell: about where its time begins, then exactly
                end = int(((k + 1) * cell + start - half) / width)
                while int((end * width + half - start) / cell) <= k:
                    end += 1
                while int(((end - 1) * width + half - start) / cell) > k:
                    end -= 1
                end = min(end, highest + 1)
            if end > slot:
                used, util = _top(memory, slot, end), _top(utilization, slot, end)
                if used != NONE:
                    memory_out[k] = used * MIB / whole
                if util != NONE:
                    util_out[k] = util / 100
                slot = end
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
