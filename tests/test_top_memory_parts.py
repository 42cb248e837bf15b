"""What `vram top` keeps per GPU, process and row costs little where most of it is idle (issue 36:
RSS above an empty Textual app). Sizes are traced with tracemalloc, in process; the RSS itself is
measured by benchmarks/bench_top.py."""

from __future__ import annotations

import tracemalloc

import pytest
from helpers import in_demo_view

from vramkit.alerts import POINTS_KEPT, History, ProcessTrace
from vramkit.gpu_state import Device, GpuProcess, Snapshot
from vramkit.tui.timeline import RANGES, Charts

GIB = 1024**3


def traced(build):
    """(what build() returned, the bytes it left allocated)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        return kept, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()



def snapshot(t: float, processes: int, gpus: int = 8, grow: int = 0) -> Snapshot:
    devices = [Device(index=g, name="sim", uuid=f"GPU-{g}", memory_total=80 * GIB, memory_used=40 * GIB,
                      memory_free=40 * GIB, utilization=50) for g in range(gpus)]
    for i in range(processes):
        memory = GIB + (grow * int(t) if i == 0 else 0)  # the first process grows, the others are flat
        devices[i % gpus].processes.append(GpuProcess(pid=1000 + i, gpu=i % gpus, gpu_uuid=None, memory=memory,
                                                     start_ticks=7))
    return Snapshot(time=t, gpus=devices)


def test_a_flat_process_costs_one_point_not_a_deque():
    history = History()
    snaps = [snapshot(float(t), 1000) for t in range(5)]
    __, size = traced(lambda: [history.add(s) for s in snaps])
    assert len(history.procs) == 1000
    assert size / 1000 < 300, size  # ~1,000 bytes a process with a deque made for its first point
    key = next(iter(history.procs))
    assert history.process(*key) == [(0.0, GIB), (4.0, GIB)]


def test_a_trace_keeps_its_change_points_the_newest_at_most():
    trace = ProcessTrace(start_ticks=1)
    assert trace.points == [] and trace.series() == []
    trace.add(1.0, 5)
    trace.add(2.0, 5)
    assert trace.points == [(1.0, 5)] and trace.series() == [(1.0, 5), (2.0, 5)]
    trace.add(3.0, None)
    trace.add(4.0, 6)
    assert trace.series() == [(1.0, 5), (3.0, None), (4.0, 6)]
    for t in range(5, 5 + POINTS_KEPT):
        trace.add(float(t), t)
    assert len(trace.points) == POINTS_KEPT and trace.points[-1] == (4.0 + POINTS_KEPT, 4 + POINTS_KEPT)


def test_the_charts_of_8_gpus_cost_under_120_kib_and_keep_values_to_the_mib():
    charts, size = traced(lambda: (c := Charts(300.0), c.add(snapshot(1000.0, 0)))[0])
    assert len(charts.ranges) == len(RANGES)
    assert size < 120 * 1024, size  # 197 KiB with memory in bytes, 495 with an index and two floats a place
    mib = 2**20
    for used, kept in ((100 * 1024**4 + 3, 100 * 1024**4 + mib), (80 * 1024**3, 80 * 1024**3), (1, mib),
                       (2**70, (2**31 - 1) * mib)):  # rounded up to the MiB; 2 PiB at most
        charts.shown.add(1001.0, 0, used, 99)
        assert [(s.memory_used, s.utilization) for s in charts.shown.samples(0, None)][-1] == (kept, 99)
        charts.shown.gpus.clear()
        charts.shown._held.clear()


def test_the_tables_rows_cost_nothing_each(sim_env):
    """The process table's rows are places whose cells are built when drawn: it keeps no object a
    row (DataTable kept a key, a Row, two index entries and a dict of cells each, ~480 bytes with
    the dict shared by every row, ~1,110 without)."""

    async def check(app, pilot):
        table = app.query_one("#procs")
        columns = len(table.columns)
        table.show(0, lambda i: [])
        __, size = traced(lambda: table.show(2000, lambda i: [str(i)] * columns))
        assert table.row_count == 2000
        assert size / 2000 < 8, (size / 2000, columns)
        assert table.get_row_at(1999)[0] == "1999"

    in_demo_view(check)


def test_a_strip_makes_its_caches_when_first_used(sim_env):
    """Textual's Strip made seven FIFO caches each (~900 bytes), and the view's ~600 strips on
    screen use ~400 of their ~4,200: the view makes each when first used. What a cache holds, and
    so what is drawn, is the same."""
    from rich.segment import Segment
    from rich.style import Style
    from textual.strip import Strip

    from vramkit.machine import open_machine
    from vramkit.tui.app import TopApp

    machine = open_machine("demo")
    try:
        TopApp(machine.snapshot, interval=3600)  # the view makes Strip's caches lazy
    finally:
        machine.close()
    segments = [Segment("hello ", Style(bold=True)), Segment("world", None)]
    strips, size = traced(lambda: [Strip(segments, 11) for _ in range(1000)])
    assert size / 1000 < 300, size / 1000  # ~1,100 bytes a strip with its seven caches made at once
    strip = strips[0]
    assert strip.crop(2, 8) is strip.crop(2, 8)  # cached, as Textual's own
    assert [s.text for s in strip.divide([3, 11])] == ["hel", "lo world"]
    assert strip.divide([3, 11]) is strip.divide([3, 11])
    assert strip.crop(2, 8).text == "llo wo" and strip.cell_length == 11
    assert strip.apply_style(Style(italic=True)) is strip.apply_style(Style(italic=True))
    assert Strip(segments).simplify().text == "hello world"


@pytest.mark.parametrize("size", [(120, 40), (60, 15)])
def test_the_screen_and_the_gpu_area_below_the_panels_are_one_blank_line(sim_env, size):
    """The screen's own lines and the GPU area's lie under their children: drawn BLANK (one shared
    blank line), they keep no line per row, filtered copy and pieces (~150 KiB at 120x40); what
    the terminal gets is the same as drawn line by line."""

    async def check(app, pilot):
        compositor = app.screen._compositor
        widgets = (app.screen, app.query_one("#gpu-area"))

        def drawn():
            update = compositor.render_full_update()
            return ["".join(strip.render(app.console) for strip in line) for line in update.strips]

        def lines_kept():  # what drawing their lines anew leaves allocated
            for widget in widgets:
                widget._set_dirty()
            return traced(lambda: [w.render_lines(w.size.region) for w in widgets])[1]

        blank = drawn(), lines_kept()
        for widget in widgets:  # drawn line by line, as Textual draws a widget that is not BLANK
            widget.BLANK = False
            widget._set_dirty()
        line_by_line = drawn(), lines_kept()
        assert blank[0] == line_by_line[0]
        # 544 vs 41,880 bytes at 120x40, 216 vs 17,528 at 60x15 (their lines alone, no copies or pieces)
        assert blank[1] < 2048 < 10 * 1024 < line_by_line[1], (blank[1], line_by_line[1])

    in_demo_view(check, size, read_host=None)


def test_process_lines_drawn_leave_their_texts_out_of_richs_cell_length_cache(sim_env):
    """A process line is measured by the view, not through rich's cell-length cache (4,096 texts,
    shared with Textual): each row's text changes every second (ELAPSED), and each new one stayed
    there, ~400 of ~120 characters in the first 30 s at 8 x 200."""

    from rich.cells import cached_cell_len

    async def check(app, pilot):
        table = app.query_one("#procs")
        frame = table._new_frame()
        widths = [width for __, width in frame.columns]
        wide = widths.index(max(widths))  # the command: a text of its own a row, as ELAPSED's

        def cells(i):
            return [f"row {i}" if c == wide else str(i % 10) for c in range(len(widths))]

        table.show(300, cells)
        cached_cell_len.cache_clear()
        for row in range(300):
            table._process_line(row, False, False, frame)
        # 331 before: each line's text (~120 characters, kept alive by the cache after its line)
        assert cached_cell_len.cache_info().currsize < 10, cached_cell_len.cache_info()
        line = table._process_line(7, False, False, frame)
        assert line.text.split() == " ".join(cells(7)).split() and line.cell_length == frame.width

    in_demo_view(check, read_host=None)


def test_a_refresh_of_the_table_leaves_no_garbage_in_reference_cycles(sim_env):
    """Each show() drops the lines drawn before (but those still on screen): dropped as a dict, they
    are freed at once; an LRUCache is a ring of lists, so each one dropped was garbage in reference
    cycles, its ~20 lines and their texts with it, until the next full collection."""
    import gc

    async def check(app, pilot):
        table = app.query_one("#procs")
        columns = len(table.columns)

        def second(n):  # a refresh: each second a new ELAPSED on every row, and the lines drawn
            table.show(30, lambda i: [f"{i} {n}"] * columns)
            table._frame = table._new_frame()  # the table's own lines: Textual's drawing of them
            for y in range(table.size.height):  # leaves cycles of its own (Strip.divide keeps
                table.render_line(y)  # a list of the strip itself in the strip)
            table._frame = None

        second(0)  # drops the lines Textual drew
        gc.collect()
        gc.disable()
        try:
            for n in range(1, 6):
                second(n)
            found = gc.collect()
        finally:
            gc.enable()
        assert found == 0, found  # 1,888 objects with an LRUCache (dropped on each show())

    in_demo_view(check, read_host=None)


def test_the_lines_above_the_table_hold_no_offset_styles(sim_env):
    """The banner, GPU panels, users, alerts and view line are drawn as rich draws their Text: a
    Static gives each segment of each line a style of its own with its offset (Textual's text
    selection), ~0.3 MiB at 8 x 500. The same Text in a Static does, so the check can tell."""
    from textual.widgets import Static

    def offsets(widget) -> int:
        strips = widget.render_lines(widget.region.reset_offset)
        return sum(1 for strip in strips for seg in strip if seg.style is not None and "offset" in seg.style.meta)

    async def check(app, pilot):
        gpus = app.query_one("#gpus")
        assert gpus.region.height >= 8 and "A100" in gpus.content.plain
        for selector in ("#banner", "#gpus", "#users", "#alerts", "#viewline"):
            widget = app.query_one(selector)
            assert not widget.allow_select and offsets(widget) == 0, selector
        static = Static(gpus.content, id="as-static")
        await app.mount(static)
        await pilot.pause()
        assert offsets(static) > 100  # a Static of the same lines

    in_demo_view(check)
