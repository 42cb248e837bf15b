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

from textual import screen as textual_screen
from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import key_to_character
from textual.screen import Screen
from textual.widgets import Footer

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


class KeysFooter(Footer):
    """Textual's Footer, made again only when the bindings it shows changed. Textual makes it
    again (a widget per key) whenever its screen's bindings may have changed: four times while the
    view starts (mount, focus...), the same ten keys each time, and the thirty widgets dropped
    cost ~1.2 MiB of the view's RSS (bench_top)."""

    def __init__(self) -> None:
        super().__init__()
        self._made_from: tuple[object, ...] | None = None  # the bindings it was last made from

    def bindings_changed(self, screen: Screen[object]) -> None:
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            active = screen.active_bindings  # what compose() shows: the shown ones and the palette's
            palette = active.get(self.app.COMMAND_PALETTE_BINDING)
            now = (tuple((key, binding, enabled, tooltip) for key, (__, binding, enabled, tooltip) in active.items()
                         if binding.show), palette and palette[1:])
            if now == self._made_from:
                return
            self._made_from = now
        super().bindings_changed(screen)
