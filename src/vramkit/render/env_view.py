"""A process's own view of the GPUs (process_view.ProcessGpus) as lines: `vram ps --env PID`
prints them, the live view's detail screen shows the same lines."""

from __future__ import annotations

from ..i18n import pgettext
from ..process_view import ProcessGpus
from .style import Style
from .text_width import cells, fit, pad

# The kinds of line, each painted by its reader: "" plain, "warn" (the mismatch), "dim" (notes).
WARN, DIM = "warn", "dim"
# Cells shown of a variable's value, and of a note (which may quote the value): another user's
# process may set CUDA_VISIBLE_DEVICES to 4096 characters; the real ones fit easily.
VALUE_CELLS, NOTE_CELLS = 200, 400


def env_lines(view: ProcessGpus) -> list[tuple[str, str]]:
    """(text, kind) for each line: what it was told, what it holds, the mismatch and notes."""
    labels = {"told": pgettext("process environment", "told"), "holds": pgettext("process environment", "holds"),
              "mismatch": pgettext("process environment", "MISMATCH"),
              "note": pgettext("process environment", "note")}
    # the labels' column, by display width (a translated label may be wider than the English ones)
    width = max(8, *(cells(label) for label in labels.values())) + 1

    def line(label: str, text: str) -> str:
        return pad(labels[label], width) + text

    told = view.env_problem if view.env_problem is not None else view.told_text
    lines = [(line("told", told), "")]
    if view.env:
        lines.append((" " * width + "  ".join(f"{k}={fit(v, VALUE_CELLS)}" for k, v in view.env.items()), DIM))
    lines.append((line("holds", view.holds_text), ""))
    if view.mismatch is not None:
        lines.append((line("mismatch", fit(view.mismatch, NOTE_CELLS)), WARN))
    lines.extend((line("note", fit(note, NOTE_CELLS)), DIM) for note in view.notes)
    return lines


def render_env(view: ProcessGpus, style: Style, width: int, wide: bool = False) -> str:
    """The text view: a heading line for the process, then env_lines."""
    head = f"pid {view.pid}" + (f"  {view.user}" if view.user else "") + (f"  {view.command}" if view.command else "")
    out = [style.paint(head if wide else fit(head, width), "bold")]
    paint = {WARN: ("bold", "yellow"), DIM: ("dim",), "": ()}
    for text, kind in env_lines(view):
        out.append(style.paint(text, *paint[kind]))
    return "\n".join(out)
