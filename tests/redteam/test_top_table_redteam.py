"""Red team of `vram top`'s own process table and keys line (tui/table.ProcTable,
tui/bindings.KeysFooter), which replaced Textual's DataTable and Footer: what a person does with
them that the widgets they replaced allowed. Each test failed on the widgets as first written."""

from __future__ import annotations

import asyncio

from rich.cells import cell_len
from textual import events

from vramkit import i18n
from vramkit.machine import open_machine
from vramkit.tui.app import TopApp
from vramkit.tui.bindings import KeysFooter


def test_in_chinese_at_80_columns_the_wheel_brings_the_range_key_into_reach(sim_env, monkeypatch):
    """zh_CN's keys are wider than English ones: at 80 columns "h 范围" is past the palette's
    edge. Footer scrolled it into view with the wheel (a click then changed the range); the
    keys line must too, or the mouse cannot reach it."""
    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()
    machine = open_machine("demo")
    app = TopApp(machine.snapshot, interval=3600)

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            footer = app.query_one(KeysFooter)
            assert "范围" not in footer.render_line(0).text
            for _ in range(5):
                await pilot._post_mouse_events([events.MouseScrollDown], offset=(10, 23))
            line = footer.render_line(0).text
            assert "范围" in line
            shown = app.charts.shown
            await pilot.click(offset=(cell_len(line[:line.index("范围")]), 23))
            await pilot.pause()
            assert app.charts.shown is not shown

    try:
        asyncio.run(main())
    finally:
        machine.close()
