"""tui/bindings.KeysFooter: the view's keys line, one widget drawing what Textual's Footer (a
container of a widget per key) draws, and doing what it does on a click and under the mouse."""

from __future__ import annotations

import asyncio

import pytest
from helpers import click_after_the_wheel
from rich.segment import Segment
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from vramkit.tui.bindings import KeysFooter

# Textual's Footer without the block character at the palette's edge: what TopApp's --ascii asked of it
FOOTER_ASCII = "Keys.ascii Footer FooterKey.-command-palette { border-left: none; }"
KEYS_ASCII = "Keys.ascii KeysFooter .keys-footer--edge { display: none; }"


class Keys(App[None]):
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "帮助"),  # two cells a character
        Binding("slash", "search", "Search"),
        Binding("x", "off", "Disabled"),  # check_action says no: drawn dim, a click rings the bell
        Binding("r", "reverse", "Reverse", show=False),
        Binding("h", "help", "Range"),  # a second key of one action: only the first is shown
        Binding("k", "kill", ""),  # no description: the key alone
        Binding("s", "sort", "Sort"),
    ]

    def __init__(self, footer: type, ascii: bool = False, theme: str = "textual-dark") -> None:
        self.CSS = FOOTER_ASCII if footer is Footer else KEYS_ASCII
        super().__init__()
        self.footer_class = footer
        self.theme = theme
        self.done: list[str] = []
        self.bells = 0
        if ascii:
            self.add_class("ascii")

    def compose(self) -> ComposeResult:
        yield Static("body")
        yield self.footer_class()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "off" else True

    def action_help(self) -> None:
        self.done.append("help")

    def action_search(self) -> None:
        self.done.append("search")

    def bell(self) -> None:
        self.bells += 1


def _bottom_line(app: App[None]) -> list[tuple[str, str]]:
    """The screen's last line as the terminal gets it: its characters in their styles, in full
    colour (runs of one style joined: where Textual cuts a line into pieces is not what the
    terminal shows)."""
    strips = app.screen._compositor.render_full_update().strips[-1]
    return [(s.text, str(s.style)) for s in Segment.simplify(segment for strip in strips for segment in strip)]


def _last_line(footer: type, size: tuple[int, int], hover_x: int | None = None,
               **kwargs) -> list[tuple[str, str]]:
    """The keys line as the terminal gets it (its segments rendered), optionally with the mouse
    over column hover_x."""
    app = Keys(footer, **kwargs)

    async def main() -> list[tuple[str, str]]:
        async with app.run_test(size=size) as pilot:
            for _ in range(3):  # Footer makes its keys after a refresh, once its bindings are known
                await pilot.pause()
            if hover_x is not None:
                await pilot.hover(offset=(hover_x, size[1] - 1))
                await pilot.pause()
                await pilot.pause()
            return _bottom_line(app)

    return asyncio.run(main())


@pytest.mark.parametrize("size", [(120, 8), (44, 8), (20, 8)])
@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("ascii", [False, True])
def test_the_keys_line_is_what_textuals_footer_draws(size, theme, ascii):
    """The same characters in the same colours and attributes, cut at the palette's key where the
    keys do not fit, in both of vram's themes, with and without the palette's edge (--ascii)."""
    ours = _last_line(KeysFooter, size, theme=theme, ascii=ascii)
    assert ours == _last_line(Footer, size, theme=theme, ascii=ascii)
    text = "".join(t for t, __ in ours)
    assert "Quit" in text and "palette" in text


@pytest.mark.parametrize("x", [1, 9, 33, 40, 60, 117])
def test_the_key_under_the_mouse_is_highlighted_as_footer_does(x):
    """Over a key (the first, the wide one, a disabled one, the last, the palette's) and past the keys."""
    ours = _last_line(KeysFooter, (120, 8), hover_x=x)
    assert ours == _last_line(Footer, (120, 8), hover_x=x)
    assert (ours != _last_line(KeysFooter, (120, 8))) == (x != 60)  # 60: past the last key


def test_a_click_presses_the_key_and_a_disabled_key_rings_the_bell():
    app = Keys(KeysFooter)

    async def main() -> None:
        async with app.run_test(size=(120, 8)) as pilot:
            await pilot.pause()
            footer = app.query_one(KeysFooter)
            assert not footer.children  # one widget: Footer had a widget per key
            line = footer.render_line(0).text
            await pilot.click(offset=(line.index("帮助"), 7))  # "? 帮助": help
            await pilot.click(offset=(line.index("Search"), 7))
            await pilot.pause()
            assert app.done == ["help", "search"]
            await pilot.click(offset=(line.index("Disabled"), 7))
            await pilot.pause()
            assert app.bells == 1 and app.done == ["help", "search"]
            await pilot.hover(offset=(line.index("palette"), 7))
            await pilot.pause()
            assert footer.tooltip == "Open the command palette"
            await pilot.hover(offset=(line.index("Quit"), 7))
            await pilot.pause()
            assert footer.tooltip is None  # the key has none

    asyncio.run(main())


def _lines_before_and_after_an_input(footer: type) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    app = Keys(footer)

    async def main() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        async with app.run_test(size=(120, 8)) as pilot:
            for _ in range(3):
                await pilot.pause()
            before = _bottom_line(app)
            from textual.widgets import Input

            await app.mount(Input(), before=app.query_one(footer))
            app.query_one(Input).focus()
            for _ in range(3):
                await pilot.pause()
            after = _bottom_line(app)
            return before, after

    return asyncio.run(main())


def test_the_line_follows_the_bindings_shown():
    """When the focus moves to an Input, the keys it takes (printable ones) are no longer shown."""
    ours = _lines_before_and_after_an_input(KeysFooter)
    assert ours[0] != ours[1]
    assert ours == _lines_before_and_after_an_input(Footer)


def _after_the_wheel(footer: type, notches: list[int], hover_x: int | None = None) -> list[list[tuple[str, str]]]:
    """The keys line at 44 columns (the keys do not fit) after each turn of the wheel over it
    (+n: n notches down, -n: up), with the mouse at hover_x (default 10) throughout."""
    app = Keys(footer)

    async def main() -> list[list[tuple[str, str]]]:
        async with app.run_test(size=(44, 8)) as pilot:
            for _ in range(3):
                await pilot.pause()
            x = 10 if hover_x is None else hover_x
            await pilot.hover(offset=(x, 7))
            lines = []
            for turn in notches:
                wheel = events.MouseScrollDown if turn > 0 else events.MouseScrollUp
                for _ in range(abs(turn)):
                    await pilot._post_mouse_events([wheel], offset=(x, 7))
                await pilot.wait_for_scheduled_animations()
                await pilot.pause()
                lines.append(_bottom_line(app))
            return lines

    return asyncio.run(main())


@pytest.mark.slow
def test_the_wheel_scrolls_the_keys_that_do_not_fit_into_view_as_footer_does():
    """On a narrow terminal (or a long translation) the last keys are cut at the palette's key:
    Footer scrolled them into view with the wheel, a step a notch, up to its last key at the
    palette's edge; the mouse's highlight follows the key under it."""
    notches = [1, 1, 5, -1, -5]
    ours = _after_the_wheel(KeysFooter, notches)
    assert ours == _after_the_wheel(Footer, notches)
    texts = ["".join(t for t, __ in line) for line in ours]
    assert "Sort" in texts[2] and "Sort" not in texts[4]


def test_a_click_after_the_wheel_presses_the_key_shown_there():
    """"s Sort" is past the palette's edge at 44 columns: scrolled into view, a click presses it."""
    app = Keys(KeysFooter)
    app.action_sort = lambda: app.done.append("sort")  # type: ignore[attr-defined]

    async def main() -> None:
        async with app.run_test(size=(44, 8)) as pilot:
            await pilot.pause()
            footer = app.query_one(KeysFooter)
            assert "Sort" not in footer.render_line(0).text
            await click_after_the_wheel(pilot, footer, 6, "Sort", 5, 7)
            assert app.done == ["sort"]

    asyncio.run(main())


def _hovered_before_and_after_an_input(footer: type) -> list[tuple[str, str]]:
    """The keys line with the mouse resting over its first key when the keys shown change."""
    app = Keys(footer)

    async def main() -> list[tuple[str, str]]:
        async with app.run_test(size=(120, 8)) as pilot:
            for _ in range(3):
                await pilot.pause()
            await pilot.hover(offset=(3, 7))
            await pilot.pause()
            from textual.widgets import Input

            await app.mount(Input(), before=app.query_one(footer))
            app.query_one(Input).focus()
            for _ in range(3):
                await pilot.pause()
            return _bottom_line(app)

    return asyncio.run(main())


def test_the_key_that_comes_under_the_resting_mouse_is_highlighted():
    """When the keys shown change (an Input takes the printable ones), the key now under the
    mouse is highlighted, as Footer's new key widget under it is."""
    ours = _hovered_before_and_after_an_input(KeysFooter)
    assert ours == _hovered_before_and_after_an_input(Footer)


def _scrolled_then_fewer_keys_then_back(footer: type) -> list[list[tuple[str, str]]]:
    """The keys line at 44 columns: scrolled to its end, then an Input takes the printable keys
    (they fit), then it goes: and the same with the terminal made wide and narrow again."""
    app = Keys(footer)

    async def main() -> list[list[tuple[str, str]]]:
        async with app.run_test(size=(44, 8)) as pilot:
            from textual.widgets import Input

            lines = []
            for step in ("input", "wide"):
                for _ in range(3):
                    await pilot.pause()
                for _ in range(6):
                    await pilot._post_mouse_events([events.MouseScrollDown], offset=(5, 7))
                await pilot.wait_for_scheduled_animations()
                if step == "input":
                    await app.mount(Input(), before=app.query_one(footer))
                    app.query_one(Input).focus()
                    for _ in range(3):
                        await pilot.pause()
                    await app.query_one(Input).remove()
                else:
                    await pilot.resize_terminal(120, 8)
                    for _ in range(3):
                        await pilot.pause()
                    await pilot.resize_terminal(44, 8)
                for _ in range(3):
                    await pilot.pause()
                lines.append(_bottom_line(app))
            return lines

    return asyncio.run(main())


@pytest.mark.slow
def test_the_keys_scroll_back_when_they_fit_as_footers_do():
    """Footer's scroll is clamped while the keys fit (fewer keys, a wider terminal): when the
    keys come back, they start from the first again."""
    ours = _scrolled_then_fewer_keys_then_back(KeysFooter)
    assert ours == _scrolled_then_fewer_keys_then_back(Footer)
    assert all("Quit" in "".join(t for t, __ in line) for line in ours)
