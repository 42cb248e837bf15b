"""How the live view looks: colours for a dark or a light terminal, the memory thresholds its
colours follow, and `--ascii` (no Unicode blocks, box or tree characters).

ASCII is one translation of every text the view draws, character for character, so the spans
(colours) of a rich Text stay where they were. People's own text (a CJK user name) is left alone:
only the characters the view itself draws are in the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..render.style import MEMORY_CRITICAL, MEMORY_WARN, memory_level

if TYPE_CHECKING:  # not imported: `vram top` draws its early frame through this module before rich loads
    from rich.text import Text

# Each drawing character -> one ASCII character (one for one: spans keep their offsets).
_ASCII = str.maketrans({
    "█": "#", "▉": "#", "▊": "#", "▋": "#", "▌": "+", "▍": "+", "▎": "+", "▏": "+", "░": ".", "·": ".",
    "▁": "_", "▂": ".", "▃": ",", "▄": "-", "▅": "=", "▆": "+", "▇": "*",
    "├": "|", "└": "`", "│": "|", "─": "-", "┌": "+", "┐": "+", "┘": "+", "┤": "|", "┬": "-", "┴": "-",
    "…": "~", "▲": "!", "●": "*", "↑": "^", "↓": "v", "°": "'", "×": "x", "→": ">", "←": "<",
})


@dataclass(frozen=True)
class Palette:
    """The colours the view's own text uses; Textual's theme colours the rest."""

    ok: str
    warn: str
    critical: str
    util: str
    flag: str
    banner_mark: str  # the SIMULATED label in the banner
    textual_theme: str


DARK = Palette(ok="green", warn="yellow", critical="red", util="cyan", flag="yellow", banner_mark="bold magenta",
               textual_theme="textual-dark")
# Yellow and cyan on white are unreadable: deeper shades of the same meanings.
LIGHT = Palette(ok="green4", warn="dark_orange3", critical="red3", util="dodger_blue3", flag="dark_orange3",
                banner_mark="bold dark_magenta", textual_theme="textual-light")
THEMES = {"dark": DARK, "light": LIGHT}


@dataclass(frozen=True)
class Look:
    palette: Palette = DARK
    ascii: bool = False
    memory_warn: float = MEMORY_WARN  # % of a GPU's memory in use from which it is drawn as a warning
    memory_critical: float = MEMORY_CRITICAL

    def level(self, fraction: float | None) -> str:
        """The colour of a memory fill: '' for N/A (drawn dim by the caller)."""
        if fraction is None:
            return ""
        colours = {"ok": self.palette.ok, "warn": self.palette.warn, "critical": self.palette.critical}
        return colours[memory_level(fraction, self.memory_warn, self.memory_critical)]

    def text(self, text: Text) -> Text:
        """text as this look draws it: ASCII drawing characters with --ascii, else as it is."""
        if not self.ascii:
            return text
        plain = text.plain
        translated = plain.translate(_ASCII)
        if translated == plain:
            return text
        out = text.copy()
        out.plain = translated  # same length: the spans stay valid
        return out

    def plain(self, text: str) -> str:
        return text.translate(_ASCII) if self.ascii else text


PLAIN = Look()  # the default: dark, Unicode, 70 % / 90 %
