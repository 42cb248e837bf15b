"""`vram top`'s screen draws only the widgets under a refresh's changes (tui/compositor.py), and
sends the terminal what Textual's own compositor would.

A refresh changes the banner's clock at the top and cells of the process table at the bottom;
Textual rendered every widget of the screen for it (the footer, the GPU panels, the users, alerts
and view lines), each second.
"""

from __future__ import annotations

import asyncio

import pytest
from textual._compositor import Compositor
from textual.geometry import Region
from textual.widget import Widget

from vramkit.machine import open_machine
from vramkit.tui.app import TopApp
from vramkit.tui.compositor import CullingCompositor, _shown


def _demo() -> tuple[TopApp, object]:
    machine = open_machine("demo")
    return TopApp(machine.snapshot, interval=3600), machine


def _changes(app: TopApp) -> list[list[Region]]:
    """Changes to draw, each a list of screen regions: what a refresh changes (the banner's first
    line and a line of the table), a GPU panel's line and a cell, and parts of lines that begin or
    end inside a widget (a stretch of the footer's keys) or meet the screen's own background (the
    padding beside the banner)."""
    compositor = app.screen._compositor
    banner, __ = compositor.visible_widgets[app.query_one("#banner")]
    table, __ = compositor.visible_widgets[app.query_one("#procs")]
    gpus, __ = compositor.visible_widgets[app.query_one("#gpus")]
    footer, __ = compositor.visible_widgets[app.query_one("KeysFooter")]
    refresh = [Region(banner.x, banner.y, banner.width, 1), Region(table.x, table.y + 2, table.width, 1)]
    return [refresh,
            [Region(gpus.x, gpus.y + 1, gpus.width, 1), Region(table.x + 30, table.y + 4, 7, 3)],
            [Region(footer.x + 5, footer.y, 17, 1), Region(0, banner.y, 3, 2)],
            [Region(0, 0, app.size.width, app.size.height)]]


@pytest.mark.slow
def test_a_refresh_draws_the_widgets_under_its_changes_and_no_other(sim_env, monkeypatch):
    app, machine = _demo()
    drawn: list[str] = []
    render_lines = Widget.render_lines

    def counted(self, crop):
        drawn.append(self.id or type(self).__name__)
        return render_lines(self, crop)

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            monkeypatch.setattr(Widget, "render_lines", counted)
            # The first frames settle on their own (the footer lays out its keys after mounting, a
            # full redraw): wait until a pause draws nothing, so what is counted is this refresh's.
            for __ in range(50):
                drawn.clear()
                await pilot.pause(0.1)
                if not drawn:
                    break
            assert not drawn, f"the view never settled: {sorted(set(drawn))}"
            app.query_one("#banner").refresh()  # the clock
            app.query_one("#procs").refresh(Region(0, 3, 40, 1))  # an ELAPSED cell
            for __ in range(50):
                await pilot.pause(0.02)
                if "banner" in drawn and "procs" in drawn:
                    break
            monkeypatch.undo()
    try:
        asyncio.run(main())
    finally:
        machine.close()
    assert "banner" in drawn and "procs" in drawn, drawn
    # nor the screen itself, under its children there: its 40 lines cost more than the clock's one
    assert not {"_default", "gpus", "users", "alerts", "viewline", "KeysFooter"} & set(drawn), sorted(set(drawn))


@pytest.mark.slow
def test_the_terminal_gets_what_textual_would_send(sim_env):
    app, machine = _demo()
    sent: dict[str, str] = {}

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            compositor = app.screen._compositor
            assert isinstance(compositor, CullingCompositor)
            for i, changes in enumerate(_changes(app)):
                for name in ("culled", "textual"):
                    if name == "textual":
                        compositor.__class__ = Compositor  # Textual's own, on the same widgets
                    try:
                        compositor._dirty_regions.update(changes)
                        update = compositor.render_update()
                    finally:
                        compositor.__class__ = CullingCompositor
                    assert update is not None
                    sent[f"{name} {i}"] = update.render_segments(app.console)
    try:
        asyncio.run(main())
    finally:
        machine.close()
    for i in range(4):
        assert sent[f"culled {i}"] == sent[f"textual {i}"], i
        assert len(sent[f"culled {i}"]) > 50
    assert "SIMULATED" in sent["culled 0"]  # the banner's line, and more than it


def test_a_widget_is_drawn_only_where_the_widgets_in_front_leave_a_cut_of_a_span_to_it():
    screen = Region(0, 0, 10, 3)
    left, right, behind = Region(0, 0, 5, 3), Region(5, 0, 5, 3), screen

    def shown(order, spans):
        return list(_shown({name: (region, screen) for name, region in order}, spans))

    # the screen under two children that tile it: never, whatever changed
    assert shown([("right", right), ("left", left), ("screen", behind)], [(1, 0, 10)]) == ["right", "left"]
    assert shown([("right", right), ("left", left), ("screen", behind)], [(0, 3, 7), (2, 8, 9)]) == [
        "right", "left"]
    # a column no child takes: the screen fills it
    narrow = Region(0, 0, 4, 3)
    assert shown([("right", right), ("left", narrow), ("screen", behind)], [(1, 0, 10)]) == [
        "right", "left", "screen"]
    # a span only in one child: the other is not drawn
    assert shown([("right", right), ("left", left), ("screen", behind)], [(1, 6, 8)]) == ["right"]
    # a widget's right edge is a cut it takes (Textual gives it an empty strip) unless one in front took it
    assert shown([("left", left), ("right", right)], [(0, 5, 10)]) == ["left", "right"]
    assert shown([("right", right), ("left", left)], [(0, 5, 10)]) == ["right"]
