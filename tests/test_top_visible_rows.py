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


def golden_line(app: TopApp, row: int, cursor: bool, hover: bool):
    """Line `row` of the process table (-1: the header) built by rich, apart from the table's code:
    each cell's Text (the app's, by column) in Padding of 1 rendered at its column's width without
    wrapping (so justified and cut to fit), in the row's styles (the table's, or the header's; the
    mouse meta; the mouse's and the cursor's component styles over the cell's own, the cursor's
    colour on top); the rest of the line in the row's style, as Textual's DataTable drew it; through
    Textual's line filters, as every widget's lines."""
    from rich.padding import Padding
    from rich.segment import Segment
    from rich.style import Style
    from textual.renderables.styled import Styled
    from textual.strip import Strip

    table = app.query_one("#procs")
    get = table.get_component_rich_style
    header = row == -1
    row_style = table.get_component_styles("datatable--header").rich_style if header else table.rich_style
    component = Style()
    if hover:
        component += get("datatable--hover") + (get("datatable--header-hover") if header else Style())
    if cursor:
        component += get("datatable--cursor")
    post = Style.from_color(color=component.color)
    columns = table.ordered_columns
    cells = [c.label for c in columns] if header else [
        app._cell_text(c.key.value, value) for c, value in zip(columns, table.get_row_at(row))]
    segments: list[Segment] = []
    for index, (column, cell) in enumerate(zip(columns, cells)):
        width = column.width + 2
        pre = row_style + Style.from_meta({"row": row, "column": index if header else 0}) + component
        options = app.console_options.update_dimensions(width, 1).update(no_wrap=True)
        segments += app.console.render_lines(Styled(Padding(cell, (0, 1)), pre, post), options)[0]
    used = sum(c.width + 2 for c in columns)
    segments.append(Segment(" " * max(0, table.size.width - used),
                            row_style + component + Style.from_meta({"row": row, "column": 0, "out_of_bounds": True})))
    strip = Strip(segments).adjust_cell_length(table.size.width, table.rich_style)
    for line_filter in table.get_line_filters():  # as Textual's drawing of any widget's lines (ANSI colours)
        strip = strip.apply_filter(line_filter, table.background_colors[1])
    return list(Segment.simplify(strip))


@pytest.mark.parametrize(("tree", "look"), [(False, "dark"), (True, "light"), (False, "ascii")])
def test_each_line_is_drawn_as_rich_lays_out_its_cells(sim_env, write_scenario, tree, look):
    """The table draws its header and process lines itself: each is the line rich makes of its cells
    (golden_line), for every line on screen, under and off the cursor and the mouse (moved there),
    the header under the mouse, scrolled a page down and sorted by a click on a header; flags in
    colour, a user name in two-column characters, a command cut to its column, in tree view the
    parent rows' empty cells. The mouse meta's column is 0 in every process cell: one style a row."""
    from helpers import scenario_data
    from rich.segment import Segment
    from textual.geometry import Region

    from vramkit.tui.look import LIGHT, Look

    data = scenario_data("demo")
    data["processes"] += [{"pid": 201 + i, "user": "张伟", "uid": 1500, "command": f"torchrun worker {i} " + "x" * 200,
                           "ppid": 200, "gpus": {str(i % 4): f"{256 + i}MiB"}} for i in range(12)]
    machine = open_machine(str(write_scenario(data)))
    looks = {"dark": Look(), "light": Look(palette=LIGHT), "ascii": Look(ascii=True)}
    app = TopApp(machine.snapshot, interval=3600, view=R.View(tree=tree), look=looks[look], read_host=None)

    async def body(pilot):
        table = app.query_one("#procs")
        height = table.size.height

        def check(mouse_row):
            top = round(table.scroll_offset.y)
            lines = table.render_lines(Region(0, 0, table.size.width, height))
            assert len(lines) == height
            for y, strip in enumerate(lines):
                row = -1 if y == 0 else top + y - 1
                if row >= table.row_count:
                    continue
                expected = golden_line(app, row, row == table.cursor_row, row == mouse_row)
                assert list(Segment.simplify(list(strip))) == expected, (y, row, table.cursor_row, mouse_row)
            return len(lines)

        checked = check(None)
        for cursor, mouse_y in ((0, 3), (2, 2), (5, 0)):
            table.move_cursor(row=cursor)
            await pilot.hover("#procs", offset=(12, mouse_y))
            await pilot.pause()
            checked += check(-1 if mouse_y == 0 else round(table.scroll_offset.y) + mouse_y - 1)
        await pilot.press("pagedown")  # a key: the mouse's row is no longer shown
        await pilot.pause()
        assert table.scroll_offset.y > 0 and table.cursor_row > 5
        checked += check(None)
        before = app.view.sort
        await pilot.click("#procs", offset=(table.ordered_columns[0].width + 4, 0))  # PID's header
        await pilot.pause()
        assert (app.view.sort, before) == ("pid", "memory")
        checked += check(-1)
        assert checked >= 6 * height
        if tree:
            assert any(r.proc is None for r in app._rows)  # a parent row was among them
        assert any("张伟" in line.text for line in table.render_lines(Region(0, 0, table.size.width, height)))
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


def test_the_headers_mouse_highlight_goes_with_a_key_as_a_rows_does(sim_env):
    """A key hides the highlight of what is under the mouse, the header too (DataTable marked no
    line to draw again for it, so the header kept its highlight until something else drew it)."""
    machine = open_machine("demo")
    app = TopApp(machine.snapshot, interval=3600, read_host=None)

    async def body(pilot):
        table = app.query_one("#procs")

        def header():
            return list(table.render_lines(Region(0, 0, table.size.width, table.size.height))[0])

        await pilot.hover("#procs", offset=(12, 0))
        await pilot.pause()
        assert header() == golden_line(app, -1, False, True)
        await pilot.press("down")
        await pilot.pause()
        assert header() == golden_line(app, -1, False, False)
    try:
        run(app, body)
    finally:
        machine.close()


def test_the_view_runs_without_textuals_data_table(sim_env):
    """The process table is the view's own: a running `vram top` has not imported DataTable's
    module (~300 KiB) or the helpers it brings (two-way dict, coordinates)."""
    import subprocess

    code = ("import asyncio, sys\n"
            "from vramkit.machine import open_machine\n"
            "from vramkit.tui.app import TopApp\n"
            "async def main():\n"
            "    app = TopApp(open_machine('demo').snapshot, interval=3600)\n"
            "    async with app.run_test(size=(120, 40)) as pilot:\n"
            "        await pilot.press('down', 'enter')\n"
            "        await pilot.pause()\n"
            "        print(type(app.screen).__name__, sorted(m for m in sys.modules if 'data_table' in m\n"
            "              or m in ('textual._two_way_dict', 'textual.coordinate')))\n"
            "asyncio.run(main())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DetailScreen", "[]"], out.stdout
