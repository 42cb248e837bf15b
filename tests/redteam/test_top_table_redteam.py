"""Red team of `vram top`'s own process table and keys line (tui/table.ProcTable,
tui/bindings.KeysFooter), which replaced Textual's DataTable and Footer: what a person does with
them that the widgets they replaced allowed. Each test failed on the widgets as first written."""

from __future__ import annotations

from helpers import click_after_the_wheel, in_demo_view

from vramkit import i18n
from vramkit.tui.bindings import KeysFooter


def test_in_chinese_at_80_columns_the_wheel_brings_the_range_key_into_reach(sim_env, monkeypatch):
    """zh_CN's keys are wider than English ones: at 80 columns "h 范围" is past the palette's
    edge. Footer scrolled it into view with the wheel (a click then changed the range); the
    keys line must too, or the mouse cannot reach it."""
    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()

    async def check(app, pilot) -> None:
        footer = app.query_one(KeysFooter)
        assert "范围" not in footer.render_line(0).text
        shown = app.charts.shown
        await click_after_the_wheel(pilot, footer, 5, "范围", 10, 23)
        assert app.charts.shown is not shown

    in_demo_view(check, (80, 24))
