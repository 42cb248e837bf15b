"""The live view's history charts: each GPU's memory and utilization over a choice of ranges
(5m, 1h, 24h, 7d), from the recorded history (when a database exists) and the live samples.

Each range keeps a bounded number of slots per GPU (SLOTS, aligned to multiples of its length:
the same slots history.series reads), holding the highest memory and utilization seen in it, so a
week costs what five minutes do, and recorded and live samples merge in any order.
No SQLite here: the database is read by history.series, imported only when a database exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..alerts import GpuSample
from ..gpu_state import Snapshot
from ..units import format_duration

RANGES = (300.0, 3600.0, 86400.0, 7 * 86400.0)
SLOTS = 600  # points kept per range and GPU: finer than any chart is wide


def range_label(span: float) -> str:
    """5m, 1h, 24h, 7d: the shortest exact name of a range."""
    if span >= 2 * 86400 and span % 86400 == 0:
        return f"{span / 86400:g}d"
    if span >= 3600 and span % 3600 == 0:
        return f"{span / 3600:g}h"
    if span >= 60 and span % 60 == 0:
        return f"{span / 60:g}m"
    return format_duration(span)


def _higher(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class RangeChart:
    """One range: per GPU, slot index -> [memory used, utilization], the highest in the slot."""

    span: float
    gpus: dict[int, dict[int, list[float | None]]] = field(default_factory=dict)
    recorded_first: float | None = None  # earliest recorded time in the range, once read
    loaded: bool = False  # the database was read for this range

    @property
    def width(self) -> float:
        return self.span / SLOTS

    def put(self, gpu: int, slot: int, used: float | None, util: float | None) -> None:
        cell = self.gpus.setdefault(gpu, {}).get(slot)
        if cell is None:
            self.gpus[gpu][slot] = [used, util]
        else:
            cell[0], cell[1] = _higher(cell[0], used), _higher(cell[1], util)

    def add(self, t: float, gpu: int, used: float | None, util: float | None) -> None:
        self.put(gpu, int(t // self.width), used, util)
        slots = self.gpus[gpu]
        if len(slots) > SLOTS + SLOTS // 10:  # trim now and then, not on every sample
            oldest = int((t - self.span) // self.width)
            for slot in [s for s in slots if s < oldest]:
                del slots[slot]

    def samples(self, gpu: int, total: int | None) -> list[GpuSample]:
        """The GPU's slots as samples (at the middle of each slot), oldest first."""
        half = self.width / 2
        return [GpuSample(slot * self.width + half, None if used is None else int(used), total, None,
                          None if util is None else int(util))
                for slot, (used, util) in sorted(self.gpus.get(gpu, {}).items())]


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
