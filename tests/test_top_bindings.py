"""tui/bindings.py's keys: the view's named keys answered as Textual answers them, without
unicodedata's name tables (reading them kept ~0.8 MiB resident in `vram top`)."""

from __future__ import annotations

import asyncio
import unicodedata

from textual.app import App
from textual.binding import Binding
from textual.keys import key_to_character
from textual.screen import Screen
from textual.widgets import Input

from vramkit.machine import open_machine
from vramkit.tui import bindings
from vramkit.tui.app import TopApp
from vramkit.tui.killscreen import KillScreen
from vramkit.tui.screens import AlertsScreen, DetailScreen, HelpScreen
from vramkit.tui.table import ProcTable

VIEWS = (TopApp, ProcTable, KillScreen, AlertsScreen, DetailScreen, HelpScreen, App, Screen, Input)


def _bound_keys() -> set[str]:
    keys = set()
    for view in VIEWS:
        for binding in view.BINDINGS:
            if isinstance(binding, Binding):
                keys.update(k.strip() for k in binding.key.split(","))
    return keys


def test_the_keys_answer_as_textual_does():
    textual = App()
    keys = _bound_keys() | set(bindings.KEYS) | {"ctrl+p", "shift+tab", "ctrl+home", "super+c"}
    named = {k.rpartition("+")[2] for k in keys if len(k.rpartition("+")[2]) > 1}
    assert named <= set(bindings.KEYS), named - set(bindings.KEYS)  # every named key the view binds
    for key in keys:
        binding = Binding(key, "x")
        assert bindings._key_character(key) == key_to_character(key), key
        assert bindings.key_display(binding, lambda b: "textual") == App.get_key_display(textual, binding), key
    # a key of its own display, or one not known here, is Textual's to show
    assert bindings.key_display(Binding("q", "x", key_display="Q!"), lambda b: "textual") == "textual"
    assert bindings.key_display(Binding("f5", "x"), lambda b: "textual") == "textual"


def test_the_footer_draws_its_keys_without_key_names_looked_up_and_again_when_its_keys_change(sim_env, monkeypatch):
    from vramkit.tui.bindings import KeysFooter

    looked_up, drawn = [], []

    def lookup(name: str) -> str:
        looked_up.append(name)
        raise KeyError(name)

    monkeypatch.setattr(unicodedata, "lookup", lookup)
    monkeypatch.setattr(unicodedata, "name", lookup)
    machine = open_machine("demo")
    app = TopApp(machine.snapshot, interval=3600, readonly=True)

    def shown() -> list[str]:
        return [key.key for key in app.query_one(KeysFooter)._keys]

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            footer = app.query_one(KeysFooter)
            await pilot.pause()
            refresh = footer.refresh
            monkeypatch.setattr(footer, "refresh", lambda *a, **k: (drawn.append(1), refresh(*a, **k))[1])
            for _ in range(3):
                await app.refresh_data()
                await pilot.pause()
            keys = shown()
            assert {"q", "question_mark", "slash"} <= set(keys) and footer._palette.key == "ctrl+p"
            line = footer.render_line(0).text
            assert all(f" {shown} " in line for shown in ("q", "?", "/")) and "^p" in line
            assert drawn == []  # the same keys: not drawn again (Textual made its Footer's anew four times)
            await app.run_action("prompt('search')")  # the prompt takes the printable keys: fewer shown
            await pilot.pause()
            assert "q" not in shown() and drawn
            await app.run_action("clear")
            await pilot.pause()
            await pilot.pause()
            assert shown() == keys
            await app.run_action("help")
            await pilot.pause()

    asyncio.run(main())
    assert looked_up == []
