"""Key bindings shown in the reader's language.

Textual reads a class's BINDINGS when the class is defined (at import), before the language is
known: the descriptions there are only marked (N_), and each node translates its own copy of them
when it is created (`translate(self)` after its __init__), so the footer and the key panel speak
the reader's language. Textual's own command-palette binding is among them (its words below).

Textual works out a named key's character and how the footer shows it (textual.keys:
key_to_character, format_key) by looking the key's Unicode name up in unicodedata, which reads
its name tables to do it: ~0.8 MiB of them resident for the view's dozen keys. The keys vram top
and the widgets it uses bind are answered from KEYS instead (the same answers:
tests/test_top_bindings.py); any other key still goes to Textual.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual import events
from textual import screen as textual_screen
from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import key_to_character
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget

from ..i18n import N_, _

# Textual's own words for the binding it adds to the app (App.__init__): marked here to be translated
TEXTUAL = (N_("palette"), N_("Open the command palette"))


def translate(node: DOMNode) -> None:
    """Replace the node's bindings with copies whose description and tooltip are translated."""
    table = node._bindings.key_to_bindings
    for key, bindings in table.items():
        table[key] = [dataclasses.replace(b, description=_(b.description) if b.description else b.description,
                                          tooltip=_(b.tooltip) if b.tooltip else b.tooltip) for b in bindings]


# key -> (its character, as key_to_character gives it; how the footer shows it, as format_key)
KEYS: dict[str, tuple[str | None, str]] = {
    "tab": ("\t", "tab"), "escape": ("\x1b", "esc"), "enter": (None, "\u23ce"),
    "question_mark": ("?", "?"), "slash": (None, "/"), "backspace": ("\x08", "\u232b"), "delete": ("\x7f", "del"),
    "home": (None, "home"), "end": (None, "end"), "pageup": (None, "pgup"), "pagedown": (None, "pgdn"),
    "up": (None, "\u2191"), "down": (None, "\u2193"), "left": (None, "\u2190"), "right": (None, "\u2192"),
}


def _key_character(key: str) -> str | None:
    """key_to_character, without unicodedata for a key in KEYS or a single character."""
    known = KEYS.get(key)
    if known is not None:
        return known[0]
    return key if len(key) == 1 else key_to_character(key)


def key_display(binding: Binding, textual: Callable[[Binding], str]) -> str:
    """How the footer shows the binding's key, as App.get_key_display (`textual`) would: worked
    out here for a key in KEYS or a single character (after any modifiers), else by `textual`."""
    if binding.key_display:
        return textual(binding)
    modifiers, key = binding.parse_key()
    known = KEYS.get(key)
    if known is None and len(key) != 1:
        return textual(binding)
    shown = key if known is None else known[1]
    if "ctrl" in modifiers:
        modifiers.remove("ctrl")
        shown = f"^{shown}"
    return "+".join([*modifiers, shown])


def quiet_key_names() -> None:
    """Screens look up their keys' characters through _key_character (see the module's docstring)."""
    textual_screen.key_to_character = _key_character  # type: ignore[assignment]


class KeysFooter(Widget, can_focus=False):
    """The keys line at the bottom of the view: what Textual's Footer shows (each shown binding's
    key and description, the command palette's key on the right after a thin edge), drawn as one
    line of one widget. Textual's Footer is a container with a widget per key (with its message
    queue, styles and DOM node each): its dozen keys were ~0.6 MiB of `vram top`'s RSS (8 x 200 on
    the shim, the two views side by side). A click on a key presses it, the key under
    the mouse is highlighted and its tooltip shown, and the wheel scrolls keys that do not fit
    into view, as Footer does; the line is made again only when the bindings it shows change."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"keys-footer--item", "keys-footer--key", "keys-footer--description",
                         "keys-footer--hover", "keys-footer--disabled", "keys-footer--edge"}
    # Footer's and FooterKey's looks (Textual 8.2), as component classes of this one widget
    DEFAULT_CSS = """
    KeysFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        .keys-footer--item { background: $footer-item-background; }
        .keys-footer--key { color: $footer-key-foreground; background: $footer-key-background; text-style: bold; }
        .keys-footer--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        .keys-footer--hover { color: $footer-key-foreground; background: $block-hover-background; }
        .keys-footer--disabled { text-style: dim; }
        .keys-footer--edge { color: $foreground 20%; }  /* display: none: no edge (--ascii) */
    }
    """
    EDGE = "\u258f"  # the left edge of the palette's key, as Footer draws it (a "vkey" border)

    def __init__(self) -> None:
        super().__init__()
        self._keys: tuple[_FooterKey, ...] = ()  # the keys on the left, in order
        self._palette: _FooterKey | None = None  # the command palette's, on the right
        self._hover: _FooterKey | None = None  # the key under the mouse
        self._mouse_x: int | None = None  # where the mouse is over the line (None: not over it)
        self._scroll = 0  # cells of the keys on the left scrolled out of view (the wheel, as Footer)
        self._spans: list[tuple[int, int, _FooterKey]] = []  # where each key was drawn: [start, end) cells

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen[object]) -> None:
        """The shown bindings, as Footer.compose lists them (the first key of each action, the
        palette's apart); drawn again only if they changed."""
        if not screen.app.app_focus or screen is not self.screen:
            return
        active = screen.active_bindings
        first: dict[str, _FooterKey] = {}
        for __, binding, enabled, tooltip in active.values():
            if binding.show and binding.action not in first:
                first[binding.action] = _FooterKey(binding.key, self.app.get_key_display(binding),
                                                   binding.description, enabled, tooltip)
        palette = None
        if self.app.ENABLE_COMMAND_PALETTE and self.app.COMMAND_PALETTE_BINDING in active:
            __, binding, enabled, tooltip = active[self.app.COMMAND_PALETTE_BINDING]
            palette = _FooterKey(binding.key, self.app.get_key_display(binding), binding.description, enabled,
                                 binding.tooltip or binding.description)
        keys = tuple(first.values())
        if (keys, palette) != (self._keys, self._palette):
            self._keys, self._palette = keys, palette
            if self._mouse_x is not None:  # another key may be under the mouse now, as Footer's would be
                self._spans = self._layout(self.size.width)[0]
                self._set_hover(self._key_at(self._mouse_x))
            self.refresh()

    def _key_segments(self, key: _FooterKey, compact: bool) -> list[Segment]:
        """One key as FooterKey renders it: the key padded by a cell each side and its description
        followed by one (compact, as the palette's key: the key bare, a cell before the description)."""
        base = self.get_component_rich_style("keys-footer--hover" if key is self._hover else "keys-footer--item")
        if not key.enabled:
            base += self.get_component_rich_style("keys-footer--disabled", partial=True)
        key_style = base + self.get_component_rich_style("keys-footer--key")
        words_style = base + self.get_component_rich_style("keys-footer--description")
        if key is self._hover:  # its own backgrounds are transparent in Textual's themes: the hover's shows
            key_style += RichStyle(bgcolor=base.bgcolor)
            words_style += RichStyle(bgcolor=base.bgcolor)
        if not key.description:
            return [Segment(key.display, key_style)]
        if compact:
            return [Segment(key.display, key_style), Segment(" " + key.description, words_style)]
        return [Segment(f" {key.display} ", key_style), Segment(key.description + " ", words_style)]

    def _right_segments(self) -> list[Segment]:
        """The palette's key on the right, with its edge (none in --ascii) and padding, which are
        the key's: under the mouse, highlighted too."""
        if self._palette is None:
            return []
        right = []
        under = RichStyle(bgcolor=self.get_component_rich_style(
            "keys-footer--hover" if self._palette is self._hover else "keys-footer--item").bgcolor)
        if self.get_component_styles("keys-footer--edge").display != "none":
            edge = self.get_component_rich_style("keys-footer--edge").color  # over the footer's background
            right.append(Segment(self.EDGE, under + RichStyle(color=edge)))
        right += self._key_segments(self._palette, compact=True)
        right.append(Segment(" ", under))  # FooterKey's padding-right
        return right

    def _layout(self, width: int) -> tuple[list[tuple[int, int, _FooterKey]], int, int]:
        """Where each key is on a line `width` cells wide ([start, end) cells, the keys on the left
        as scrolled), the room the keys on the left have and how far they scroll (at most)."""
        right_width = Segment.get_line_length(self._right_segments())
        room = max(0, width - right_width)
        widths = [Segment.get_line_length(self._key_segments(key, compact=False)) for key in self._keys]
        most = max(0, sum(widths) - room)  # as far as Footer scrolls: its last key at the palette's edge
        scroll = min(self._scroll, most)
        spans, start = [], -scroll
        for key, key_width in zip(self._keys, widths):
            end = start + key_width
            if end > 0 and start < room:
                spans.append((max(0, start), min(end, room), key))
            start = end
        if self._palette is not None and right_width <= width:
            spans.append((room, width, self._palette))
        return spans, room, most

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        blank = RichStyle(bgcolor=self.rich_style.bgcolor)  # where Footer draws no text: its background alone
        spans, room, most = self._layout(width)
        line: list[Segment] = []
        for key in self._keys:
            line += self._key_segments(key, compact=False)
        # kept as drawn: keys fewer or a line wider brought it back, as Footer's scroll_x is clamped
        scroll = self._scroll = min(self._scroll, most)
        left = Strip(line).crop(scroll, scroll + room) if scroll else Strip(line)
        line = Segment.adjust_line_length(list(left), room, blank)
        right = self._right_segments()
        if self._palette is not None and Segment.get_line_length(right) <= width:
            line += right
        self._spans = spans
        return Strip(line, max(room, Segment.get_line_length(line)))

    def _key_at(self, x: int) -> _FooterKey | None:
        return next((key for start, end, key in self._spans if start <= x < end), None)

    def _set_hover(self, key: _FooterKey | None) -> None:
        if key is not self._hover:
            self._hover = key
            self.tooltip = key.tooltip if key is not None and key.tooltip else None
            self.refresh()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._mouse_x = event.x
        self._set_hover(self._key_at(event.x))

    def on_leave(self, event: events.Leave) -> None:
        self._mouse_x = None
        self._set_hover(None)

    def _scroll_by(self, cells: int, event: events.MouseEvent) -> None:
        """The wheel scrolls the keys on the left that do not fit into view, as Footer's does (by
        the app's scroll_sensitivity_x a notch): else a narrow terminal (or a long translation)
        left the last keys out of the mouse's reach."""
        most = self._layout(self.size.width)[2]
        scroll = max(0, min(min(self._scroll, most) + cells, most))
        if scroll != self._scroll:
            self._scroll = scroll
            self._spans = self._layout(self.size.width)[0]
            if self._mouse_x is not None:
                self._set_hover(self._key_at(self._mouse_x))
            self.refresh()
            event.stop()
            event.prevent_default()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._scroll_by(int(self.app.scroll_sensitivity_x), event)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._scroll_by(-int(self.app.scroll_sensitivity_x), event)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        key = self._key_at(event.x)
        if key is None:
            return
        if key.enabled:
            self.app.simulate_key(key.key)
        else:
            self.app.bell()


class _FooterKey(NamedTuple):
    key: str
    display: str
    description: str
    enabled: bool
    tooltip: str
