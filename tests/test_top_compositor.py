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
from vramkit.tui.compositor import CullingCompositor


def _demo() -> tuple[TopApp, object]:
    machine = open_machine("demo")
    return TopApp(machine.snapshot, interval=3600), machine


def _changes(app: TopApp) -> list[Region]:
    """What a refresh changes, on the screen: the banner's first line and a line of the table."""
    compositor = app.screen._compositor
    banner, __ = compositor.visible_widgets[app.query_one("#banner")]
    table, __ = compositor.visible_widgets[app.query_one("#procs")]
    return [Region(banner.x, banner.y, banner.width, 1), Region(table.x, table.y + 2, table.width, 1)]


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
    assert not {"gpus", "users", "alerts", "viewline", "Footer"} & set(drawn), sorted(set(drawn))


@pytest.mark.slow
def test_the_terminal_gets_what_textual_would_send(sim_env):
    app, machine = _demo()
    sent: dict[str, str] = {}

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            compositor = app.screen._compositor
            assert isinstance(compositor, CullingCompositor)
            for name in ("culled", "textual"):
                if name == "textual":
                    compositor.__class__ = Compositor  # Textual's own, on the same widgets
                try:
                    compositor._dirty_regions.update(_changes(app))
                    update = compositor.render_update()
                finally:
                    compositor.__class__ = CullingCompositor
                assert update is not None
                sent[name] = update.render_segments(app.console)
    try:
        asyncio.run(main())
    finally:
        machine.close()
    assert sent["culled"] == sent["textual"]
    assert "SIMULATED" in sent["culled"]  # the banner's line, and more than it
    assert len(sent["culled"]) > 200
