"""`vram top` on 500 processes builds only the rows it draws, and keeps the rest as data: far down
the list it shows the right rows, and the cursor, the detail and the kill dialog stay on the
process the person chose through scrolling, sorting and refreshes.

Expected rows come from the scenario JSON (sorted by pid, then GPU, as the view's pid sort
does), never from vram's output.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from textual.geometry import Region

from vramkit.machine import open_machine
from vramkit.tui import rows as R
from vramkit.tui.actions import KillActions
from vramkit.tui.app import TopApp
from vramkit.tui.killscreen import KillScreen

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _machine import scenario  # noqa: E402


@pytest.fixture
def big(sim_env, tmp_path):
    """(machine, the scenario's rows as (pid, gpu) in pid order): 500 processes on 8 GPUs, every
    10th on two (550 rows)."""
    data = scenario(list(range(10_000, 10_500)), real=False)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data))
    machine = open_machine(str(path))
    expected = sorted((p["pid"], int(gpu)) for p in data["processes"] for gpu in p["gpus"])
    yield machine, expected
    machine.close()


def run(app: TopApp, body) -> None:
    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await body(pilot)
    asyncio.run(main())


def drawn(app: TopApp) -> list[tuple[int, int]]:
    """(pid, gpu) of each process row on screen, top to bottom, as a frame draws them."""
    table = app.query_one("#procs")
    out = []
    for strip in table.render_lines(Region(0, 0, table.size.width, table.size.height))[1:]:  # 0: the header
        words = strip.text.split()
        if len(words) > 1 and words[1].isdigit():
            out.append((int(words[1]), int(words[0])))
    return out


@pytest.mark.slow
def test_only_the_rows_drawn_are_built_on_each_refresh(big, monkeypatch):
    """A refresh of 550 rows with some 30 on screen builds the cells of those, not of all 550:
    at the top of the list and far down it."""
    machine, expected = big
    built = []
    cells = R.cells

    def counting(row, *args, **kwargs):
        built.append(row.key)
        return cells(row, *args, **kwargs)

    monkeypatch.setattr(R, "cells", counting)
    app = TopApp(machine.snapshot, interval=3600, view=R.View(sort="pid"))

    async def body(pilot):
        table = app.query_one("#procs")
        on_screen = table.size.height - 1
        for where in ("top", "end"):
            if where == "end":
                await pilot.press("end")
                await pilot.pause()
            built.clear()
            await app.refresh_data()
            await pilot.pause()
            assert drawn(app)  # the rows on screen were drawn from what was built
            assert 0 < len(built) <= on_screen, (where, len(built), on_screen)
            assert {f"{pid}/{gpu}/" for pid, gpu in drawn(app)} <= set(built)
        assert table.row_count == len(expected) == 550
    run(app, body)


def test_far_down_the_list_the_right_rows_are_drawn_and_clicked(big):
    machine, expected = big
    app = TopApp(machine.snapshot, interval=3600, view=R.View(sort="pid"))

    async def body(pilot):
        table = app.query_one("#procs")
        assert drawn(app) == expected[: len(drawn(app))]
        table.scroll_to(y=300, animate=False)
        await pilot.pause()
        top = round(table.scroll_offset.y)
        assert top == 300
        shown = drawn(app)
        assert len(shown) > 10 and shown == expected[top: top + len(shown)]
        await app.refresh_data()  # a refresh keeps the place and draws the same rows
        await pilot.pause()
        assert round(table.scroll_offset.y) == top and drawn(app) == shown
        # a click on a row far down selects the process drawn there
        await pilot.click("#procs", offset=(40, 5))
        assert (app.selected_row().proc.pid, app.selected_row().proc.gpu) == shown[4]
        await pilot.press("end")
        await pilot.pause()
        shown = drawn(app)
        assert shown == expected[-len(shown):]
        assert (app.selected_row().proc.pid, app.selected_row().proc.gpu) == expected[-1]
    run(app, body)


@pytest.mark.slow
def test_the_cursor_and_the_kill_target_stay_on_their_process_after_scrolling_and_sorting(big, tmp_path):
    machine, expected = big
    actions = KillActions(machine, audit_path=str(tmp_path / "audit.log"), timeout=5)
    app = TopApp(machine.snapshot, interval=3600, view=R.View(sort="pid"), readonly=False, actions=actions)

    async def body(pilot):
        table = app.query_one("#procs")
        table.move_cursor(row=400, animate=False)
        await pilot.pause()
        pid, gpu = expected[400]
        assert app.selected_key() == f"{pid}/{gpu}/"
        for keys in (("s",), ("r",), ("s", "s")):  # sort by user, reversed, then by elapsed and cpu
            await pilot.press(*keys)
            await app.refresh_data()
            await pilot.pause()
            assert app.selected_key() == f"{pid}/{gpu}/", keys
            assert (pid, gpu) in drawn(app), keys  # still on screen, wherever it went
            assert app.query_one("#procs").get_row_at(table.cursor_row)[1] == str(pid)
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen) and app.screen.pid == pid
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("enter")  # the detail of the same process
        await pilot.pause()
        assert getattr(app.screen, "pid", None) == pid
    run(app, body)


def test_the_cursor_goes_to_the_top_when_its_process_is_gone(big):
    machine, expected = big
    app = TopApp(machine.snapshot, interval=3600, view=R.View(sort="pid"))

    async def body(pilot):
        table = app.query_one("#procs")
        table.move_cursor(row=300, animate=False)
        await pilot.pause()
        pid, _ = expected[300]
        app.view.pids = {p for p, _ in expected} - {pid}  # as if it exited: the view no longer lists it
        await app.refresh_data()
        await pilot.pause()
        assert table.cursor_row == 0 and round(table.scroll_offset.y) == 0
        assert app.selected_key() == f"{expected[0][0]}/{expected[0][1]}/"
        assert table.row_count == len(expected) - sum(1 for p, _ in expected if p == pid)
    run(app, body)


@pytest.mark.parametrize("tree", [False, True])
def test_cells_drawn_directly_look_as_datatable_draws_them(sim_env, write_scenario, tree):
    """ProcTable draws a process cell's segments itself (rich's Padding and Styled cost most of
    a refresh's drawing): the same text, styles and mouse meta as DataTable's own path, for every
    cell on screen, under and off the cursor and the mouse, flags in colour, a user name in
    two-column characters, and in tree view the parent rows' empty cells. The mouse meta's column
    is 0 in every process cell (the row is what a click on a row cursor's table selects: one
    style a row, not one a cell, for rich's and Textual's caches to keep)."""
    import functools

    from helpers import scenario_data
    from rich.segment import Segment
    from rich.style import Style as RichStyle

    def as_clicked(lines):  # the segments, each process cell's meta naming column 0
        out = []
        for line in lines:
            segments = []
            for segment in line:
                style, meta = segment.style, segment.style.meta if segment.style else {}
                if meta.get("row", -1) >= 0 and "column" in meta:
                    style = style.clear_meta_and_links() + RichStyle.from_meta({**meta, "column": 0})
                segments.append(Segment(segment.text, style))
            out.append(list(Segment.simplify(segments)))
        return out
    from textual.coordinate import Coordinate
    from textual.widgets import DataTable

    data = scenario_data("demo")
    data["processes"] += [{"pid": 201 + i, "user": "张伟", "uid": 1500, "command": f"torchrun worker {i}",
                           "ppid": 200, "gpus": {"0": f"{1 + i}GiB"}} for i in range(2)]
    machine = open_machine(str(write_scenario(data)))
    app = TopApp(machine.snapshot, interval=3600, view=R.View(tree=tree))

    async def body(pilot):
        table = app.query_one("#procs")
        checked = directly = 0
        for show_hover in (False, True):
            table._show_hover_cursor = show_hover
            for row in range(table.row_count):
                for column, key in enumerate(table.ordered_columns):
                    width = key.get_render_width(table)
                    for cursor in (False, True):
                        for hover in (False, True):
                            theirs = DataTable._render_cell(table, row, column, table.rich_style, width, cursor, hover)
                            ours = table.draw_cell(row, column, table.get_row_at(row)[column], table.rich_style,
                                                   width, cursor, hover)
                            checked += 1
                            if ours is not None:
                                directly += 1
                                assert [list(Segment.simplify(line)) for line in ours] == as_clicked(theirs), \
                                    (row, column, cursor, hover)
        assert directly == checked > 500
        # and whole lines in a frame, as DataTable's own render_line draws them
        height = table.size.height
        for cursor_row, hover_row in ((0, 0), (2, 5), (table.row_count - 1, 1)):
            table.cursor_coordinate, table.hover_coordinate = Coordinate(cursor_row, 0), Coordinate(hover_row, 0)
            table._frame = table._new_frame()
            assert table._frame is not None
            ours = [table.render_line(y) for y in range(height)]
            table._frame = None
            table._render_cell = functools.partial(DataTable._render_cell, table)  # DataTable's, all through rich
            theirs = [DataTable.render_line(table, y) for y in range(height)]
            del table._render_cell
            assert [list(Segment.simplify(list(strip))) for strip in ours] == as_clicked(theirs), \
                (cursor_row, hover_row)
            clicked = {segment.style.meta["column"] for strip in ours for segment in strip
                       if segment.style and segment.style.meta.get("row", -1) >= 0}
            assert clicked == {0}, clicked  # one style a row (and cursor, mouse): not one a cell
        if tree:
            assert any(r.proc is None for r in app._rows)  # a parent row was among them
    try:
        run(app, body)
    finally:
        machine.close()


def test_a_refresh_redraws_the_cells_that_changed_and_the_screen_shows_them(sim_env):
    """After a new snapshot the table marks for drawing the cells on screen whose text changed
    (what the terminal is sent), each one of them, and the lines drawn then show the new texts."""
    machine = open_machine("demo")

    def at(t: float):
        machine.backend.sim._fixed_t = t
        return machine.snapshot()

    app = TopApp(lambda: at(20), interval=3600)

    async def body(pilot):
        table = app.query_one("#procs")
        await pilot.pause()
        old = [list(table.get_row_at(i)) for i in range(table.row_count)]
        marked = []
        refresh = table.refresh
        table.refresh = lambda *regions, **kw: (marked.append(regions), refresh(*regions, **kw))[1]
        app.apply(at(30))  # erin's evaluation job grew; utilization moved
        new = [list(table.get_row_at(i)) for i in range(table.row_count)]
        changed = [(r, c) for r in range(len(new)) for c in range(len(new[r])) if new[r][c] != old[r][c]]
        assert changed and len(changed) < sum(len(r) for r in new) // 2
        regions = [region for call in marked for region in call]
        assert regions and all(region.height == 1 for region in regions)  # never the whole table
        edges = [0]
        for column in table.ordered_columns:
            edges.append(edges[-1] + column.get_render_width(table))
        for r, c in changed:  # each changed cell is inside a marked region on its row
            assert any(region.y == 1 + r and region.x <= edges[c] and edges[c + 1] <= region.right
                       for region in regions), (r, c)
        await pilot.pause()
        lines = {tuple(strip.text.split()[:2]): strip.text
                 for strip in table.render_lines(Region(0, 0, table.size.width, table.size.height))[1:]
                 if strip.text.split()}
        widths = [column.width for column in table.ordered_columns]  # a wider text is cut to its column
        for row in new:  # (its GPU and pid are its first two cells)
            line = lines[row[0], row[1]]
            missing = [cell for cell, width in zip(row[:-1], widths) if cell[:width].strip() not in line]
            assert not missing, (missing, line)
    try:
        run(app, body)
    finally:
        machine.close()


def test_the_state_cpu_and_rss_read_are_those_of_the_rows_near_the_screen(big):
    """The view names the processes on screen and a page either side: the next reading reads their
    state, CPU and RSS, the others' not (N/A far down the list until it is scrolled to); sorted by
    CPU, every process's."""
    from vramkit.collector import Collector

    machine, expected = big
    collector = Collector(machine, interval=3600)
    app = TopApp(collector.snapshot, interval=3600, view=R.View(sort="pid"), usage=collector)

    async def body(pilot):
        table = app.query_one("#procs")
        page = table.size.height
        await app.refresh_data()
        await pilot.pause()
        named = collector.usage_pids
        assert named is not None and 0 < len(named) <= 2 * page  # the top of the list: the screen and a page
        cpu = {(p.pid, p.gpu): p.cpu_percent for p in app.snap.processes}
        assert all(cpu[row] is not None for row in drawn(app))
        assert cpu[expected[-1]] is None and app.snap.processes  # far down: not read
        await pilot.press("end")
        await pilot.pause()
        await app.refresh_data()
        await pilot.pause()
        cpu = {(p.pid, p.gpu): p.cpu_percent for p in app.snap.processes}
        assert all(cpu[row] is not None for row in drawn(app)) and cpu[expected[0]] is None
        app.view.sort = "cpu"
        await app.refresh_data()
        await pilot.pause()
        assert collector.usage_pids is None
        assert all(p.cpu_percent is not None for p in app.snap.processes)
    run(app, body)
