"""The live view's history charts (tui/timeline.py): the memory they hold is the same after the
first minute as after an hour, and each slot keeps the highest value seen in it."""

from __future__ import annotations

import gc
import tracemalloc

from vramkit.tui.timeline import SLOTS, Charts

GIB = 2**30
MIB = 2**20


def feed(charts: Charts, start: int, end: int, gpus: int = 2) -> None:
    """One sample a second from `start` to `end` (seconds), on every range, as Charts.add does."""
    for t in range(start, end):
        for chart in charts.ranges:
            for gpu in range(gpus):
                chart.add(float(t), gpu, float(40 * GIB + t), float(t % 100))


def test_the_charts_hold_as_much_after_an_hour_as_after_a_minute():
    charts = Charts(300.0)
    tracemalloc.start()
    try:
        feed(charts, 0, 60)
        gc.collect()
        after_a_minute = tracemalloc.get_traced_memory()[0]
        feed(charts, 60, 3600)
        gc.collect()
        after_an_hour = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after_an_hour - after_a_minute < 4096, (after_a_minute, after_an_hour)
    from vramkit.tui.timeline import PLACES  # a range of slots and a tenth more
    five_minutes = charts.ranges[0]
    assert five_minutes.span == 300.0
    samples = five_minutes.samples(0, 80 * GIB)
    assert len(samples) == PLACES // 2  # a sample a second in slots of half a second: every other one
    # memory in MiB, rounded up: 40 GiB and 3,599 bytes is drawn as 40 GiB and a MiB
    assert samples[-1].memory_used == 40 * GIB + MIB and 3600 - 1.1 * 300 < samples[0].time < 3600 - 300


def test_a_slot_keeps_its_highest_values_and_an_older_slot_does_not_push_out_a_newer_one():
    charts = Charts(300.0)
    from vramkit.tui.timeline import PLACES

    chart = charts.ranges[0]  # 5m: slots of half a second
    assert chart.width * SLOTS == chart.span
    chart.put(0, 1000, 5.0 * MIB, 10.0)
    chart.put(0, 1000, 3.0 * MIB, None)  # lower memory, utilization unknown: the slot keeps its highs
    chart.put(0, 1000, None, 30.0)
    chart.put(0, 1000 - PLACES, 99.0 * MIB, 99.0)  # a recorded slot older than the places hold, at the same place
    assert [(s.memory_used, s.utilization) for s in chart.samples(0, 100)] == [(5 * MIB, 30)]
    chart.put(0, 1000 + PLACES, None, 1.0)  # as much later: the place is the new slot's
    assert [(s.memory_used, s.utilization) for s in chart.samples(0, 100)] == [(None, 1)]


def test_peaks_are_the_sparkline_cells_of_the_samples():
    """RangeChart.peaks (the panels' sparklines, in one pass over the places) gives what
    sparkline.buckets makes of samples(): memory as a share of the total, utilization of 100,
    gaps and unknown values included, at any width and moment."""
    import random

    from vramkit.render.sparkline import buckets

    rng = random.Random(7)
    charts = Charts(300.0)
    total = 80 * GIB
    for chart in charts.ranges:
        for t in range(0, 900, 1):
            if rng.random() < 0.2:
                continue  # a gap
            used = None if rng.random() < 0.1 else rng.randrange(total)
            util = None if rng.random() < 0.1 else rng.randrange(101)
            chart.add(1_000_000.0 + t + rng.random(), 0, used, util)
    for chart in charts.ranges:
        samples = chart.samples(0, total)
        for now in (1_000_000.0 + 900, 1_000_000.0 + 1000.5):
            for cells in (2, 17, 50):
                mem = buckets([(s.time, None if s.memory_used is None else s.memory_used / total) for s in samples],
                              now, chart.span, cells)
                util = buckets([(s.time, None if s.utilization is None else s.utilization / 100) for s in samples],
                               now, chart.span, cells)
                assert chart.peaks(0, now, cells, total) == (mem, util), (chart.span, now, cells)
                assert any(v is not None for v in mem)


def test_a_chart_holds_only_its_newest_places_worth_of_slots():
    """A slot no sample fell in leaves its place empty, not to an older slot's values: so the
    highest of a run of slots is the max of their places (what peaks takes)."""
    from vramkit.tui.timeline import PLACES, RangeChart

    chart = RangeChart(300.0)
    chart.put(0, 10, 7.0 * MIB, 70.0)
    chart.put(0, 11, 6.0 * MIB, 60.0)
    chart.put(0, 10 + PLACES + 1, 1.0 * MIB, 10.0)  # slot 10's place was slot 10 + PLACES's, which had no sample
    assert [(s.memory_used, s.utilization) for s in chart.samples(0, 100)] == [(MIB, 10)]
    chart.put(0, 9, 9.0 * MIB, 90.0)  # a recorded slot older than the places hold: not taken
    chart.put(0, 5 + PLACES, 2.0 * MIB, 20.0)  # recorded, older than the newest but within the places: taken
    assert [(s.time, s.memory_used) for s in chart.samples(0, 100)] == [
        ((5 + PLACES + 0.5) * chart.width, 2 * MIB), ((11 + PLACES + 0.5) * chart.width, MIB)]


def test_peaks_match_the_samples_when_recorded_slots_come_after_live_ones():
    """The view reads the database's other ranges after its first frame: recorded slots are put
    after live ones, in any order, and the sparklines still show the highest of each cell."""
    import random

    from vramkit.render.sparkline import buckets

    rng = random.Random(11)
    charts = Charts(300.0)
    total = 80 * GIB
    base = 1_000_000.0
    for chart in charts.ranges:
        for t in range(600, 900):  # live, a sample a second
            chart.add(base + t + rng.random() / 2, 0, rng.randrange(total), rng.randrange(101))
        recorded = [int((base + t) // chart.width) for t in range(0, 700, 3)]
        rng.shuffle(recorded)
        for slot in recorded:
            chart.put(0, slot, None if rng.random() < 0.1 else rng.randrange(total), rng.randrange(101))
    for chart in charts.ranges:
        samples = chart.samples(0, total)
        for now in (base + 899.5, base + 905.25):
            for cells in (2, 7, 17, 52):
                mem = buckets([(s.time, None if s.memory_used is None else s.memory_used / total) for s in samples],
                              now, chart.span, cells)
                util = buckets([(s.time, None if s.utilization is None else s.utilization / 100) for s in samples],
                               now, chart.span, cells)
                assert chart.peaks(0, now, cells, total) == (mem, util), (chart.span, now, cells)
