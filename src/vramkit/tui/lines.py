"""The live view's lines above the table (the banner, the GPU panels, users, alerts, the view line),
drawn as rich renders their Text, not as Statics (issue 36: the live view's memory).

Textual turns a Static's Text into its own Content, which gives every segment of every line a style
of its own holding its offset on the screen, for Textual's mouse text selection: ~440 styles on a
120x40 screen at 8 GPUs, each kept with its combinations in rich's and Textual's style caches, and
~0.25-0.3 MiB of RSS at 8 x 500 (benchmarks/README.md, tenth pass). Drawn as rich draws the Text (Textual's RichVisual,
what it does for any other rich renderable), the lines look the same and hold no offsets. So they
are not selectable by Textual, as the process table and the keys are not: the terminal's own
selection (shift+drag in most terminals) copies any of them."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.visual import RichVisual
from textual.widget import Widget


class Lines(Widget):
    """Text, as rich draws it. `content` is the Text given (as a Static's is); `resized` is called
    when a layout gives it another size (its lines wrap anew, or it has more or fewer)."""

    DEFAULT_CSS = "Lines { height: auto; }"
    ALLOW_SELECT = False

    def __init__(self, *, id: str, resized: Callable[[], None] | None = None) -> None:
        super().__init__(id=id)
        self.content = Text()
        self._resized = resized

    def on_resize(self) -> None:
        if self._resized is not None:
            self._resized()

    def update(self, text: Text, *, layout: bool = True) -> None:
        self.content = text
        self.refresh(layout=layout)

    def render(self) -> RichVisual:
        return RichVisual(self, self.content)  # made once a layout: Widget._render keeps it until a refresh
