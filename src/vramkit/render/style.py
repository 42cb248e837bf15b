"""Colours and bars, and when to use them.

Colour only on a terminal, never when NO_COLOR is set or --no-color is given. Block-character
bars on a terminal; plain ASCII bars when the output goes to a file or a pipe.

How full a GPU's memory is colours it green, yellow or red at the config file's
[thresholds] memory_warn / memory_critical (70 % and 90 % by default). The file is read only
when a view asks for a level with colour on: piped output never reads it, and a bad file stops
the command with one line (as in every command that reads it: docs/config.md).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from .text_width import fit

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path (~2.5 ms)
if TYPE_CHECKING:
    from typing import TextIO

_CODES = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35", "cyan": "36",
          "dim": "2", "bold": "1", "reverse": "7"}
_EIGHTHS = " ▏▎▍▌▋▊▉█"


MEMORY_WARN, MEMORY_CRITICAL = 70.0, 90.0  # config.py's defaults for [thresholds]


def memory_level(fraction: float, warn: float = MEMORY_WARN, critical: float = MEMORY_CRITICAL) -> str:
    """'ok', 'warn' or 'critical' for a memory fill (0-1) against thresholds in %."""
    pct = 100 * fraction
    return "critical" if pct >= critical else "warn" if pct >= warn else "ok"


_LEVEL_COLOURS = {"ok": "green", "warn": "yellow", "critical": "red"}


@dataclass
class Style:
    color: bool
    unicode: bool
    # (memory_warn, memory_critical) in %; None: read from the config file when first needed
    thresholds: tuple[float, float] | None = field(default=None, repr=False)

    def level(self, fraction: float | None) -> str:
        """The colour of a memory fill at this style's thresholds ('dim' for N/A)."""
        if fraction is None:
            return "dim"
        if not self.color:  # nothing is painted: the config file is not worth reading
            return _LEVEL_COLOURS[memory_level(fraction)]
        if self.thresholds is None:
            self.thresholds = configured_thresholds()
        return _LEVEL_COLOURS[memory_level(fraction, *self.thresholds)]

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


def configured_thresholds() -> tuple[float, float]:
    """(memory_warn, memory_critical) from the config files and environment (a RequestError, one
    line, for a bad file)."""
    from .. import config  # here: a piped `vram status` never loads it

    loaded = config.load()
    return loaded["thresholds.memory_warn"], loaded["thresholds.memory_critical"]


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
