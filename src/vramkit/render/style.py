"""Colours and bars, and when to use them.

Colour only on a terminal, never when NO_COLOR is set or --no-color is given. Block-character
bars on a terminal; plain ASCII bars when the output goes to a file or a pipe.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TextIO

from .text_width import fit

_CODES = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35", "cyan": "36",
          "dim": "2", "bold": "1", "reverse": "7"}
_EIGHTHS = " ▏▎▍▌▋▊▉█"


@dataclass
class Style:
    color: bool
    unicode: bool

    def paint(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        return "\x1b[" + ";".join(_CODES[s] for s in styles) + "m" + text + "\x1b[0m"

    def bar(self, fraction: float | None, width: int, *styles: str) -> str:
        """A horizontal bar `width` cells wide; None (N/A) gives an empty, dotted bar."""
        if fraction is None:
            return self.paint(("·" if self.unicode else ".") * width, "dim")
        fraction = min(1.0, max(0.0, fraction))
        if not self.unicode:
            filled = round(fraction * width)
            return "#" * filled + "." * (width - filled)
        eighths = round(fraction * width * 8)
        full, part = divmod(eighths, 8)
        text = "█" * full + (_EIGHTHS[part] if part else "")
        empty = width - len(text)
        return self.paint(text, *styles) + self.paint("░" * empty, "dim")


def level_color(fraction: float | None) -> str:
    """Memory fullness colour: green below 70 %, yellow below 90 %, red above."""
    if fraction is None:
        return "dim"
    return "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "red"


def style_for(stream: TextIO | None = None, no_color: bool = False) -> Style:
    stream = stream or sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    # no-color.org: NO_COLOR counts when present and not empty.
    color = tty and not no_color and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    return Style(color=color, unicode=tty)


def terminal_width(default: int = 120) -> int:
    try:
        return max(60, os.get_terminal_size(sys.stdout.fileno()).columns)
    except (OSError, ValueError):
        pass
    try:
        return int(os.environ.get("COLUMNS", default))
    except ValueError:  # COLUMNS set to something that is not a number: not worth failing for
        return default


def clip(text: str, width: int) -> str:
    """`text` cut to at most `width` terminal columns (display width: CJK and emoji take two), with …"""
    return fit(text, width)
