"""The live view's screen: Textual's compositor, drawing for a refresh only the widgets under its
changes.

A refresh changes lines far apart: the banner's clock at the top, the ELAPSED cells of the process
table at the bottom. Textual draws a partial update by rendering every widget whose container
overlaps the rectangle around all the changed regions: for the screen's own children, all of
them, every second, the footer, the GPU panels, the users, alerts and view lines included (from
their caches, for nothing). CullingCompositor renders, of those, only the widgets that show in one
of the changed spans, each once: under a change, and not hidden there by the widgets in front of
them (the screen itself, under all its children, never is: rendering its 40 lines cost more than
the banner's clock they sit under). What the terminal gets is the same: the same spans, each
filled from the widgets in front.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget


class CullingCompositor(Compositor):
    _spans: list[tuple[int, int, int]] | None = None  # while a partial update is drawn: its (y, x1, x2) spans

    def render_partial_update(self) -> ChopsUpdate | None:
        self._spans = list(self._regions_to_spans(self._dirty_regions))
        try:
            return super().render_partial_update()
        finally:
            self._spans = None

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        """Textual's, for the widgets that show in a span of the partial update being drawn
        (Textual takes every widget whose container overlaps `crop`, the rectangle around them)."""
        spans = self._spans
        if crop is None or not spans:
            return super()._get_renders(crop)
        visible = self.visible_widgets
        self._visible_widgets = _shown(visible, spans)
        try:
            return list(super()._get_renders(crop))
        finally:
            self._visible_widgets = visible


def _shown(visible: dict[Widget, tuple[Region, Region]],
           spans: list[tuple[int, int, int]]) -> dict[Widget, tuple[Region, Region]]:
    """Of the widgets, front to back (the compositor's order), those that would fill a part of a
    span: Textual fills each chop of a line (from one cut to the next) from the first widget
    whose columns take its cut, x to x + width, the right edge's cut included (an empty strip), so
    a widget shows in a span unless the widgets before it take every cut it would there."""
    wanted: dict[int, list[tuple[int, int]]] = {}
    for y, x1, x2 in spans:
        wanted.setdefault(y, []).append((x1, x2))
    lines = sorted(wanted)
    taken: dict[int, list[tuple[int, int]]] = {y: [] for y in lines}  # columns of the widgets before
    out = {}
    for widget, (region, clip) in visible.items():
        x, top, width, height = region.intersection(clip)
        if not (width and height):
            continue
        right = x + width
        shows = False
        for y in lines[bisect_left(lines, top):bisect_left(lines, top + height)]:
            if not shows:
                shows = any(a < b and not _covered(taken[y], a, b)
                            for a, b in ((max(x1, x), min(x2, right + 1)) for x1, x2 in wanted[y]))
            taken[y].append((x, right))
        if shows:
            out[widget] = (region, clip)
    return out


def _covered(intervals: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether the intervals (x1, x2), together, cover start..end-1."""
    for x1, x2 in sorted(intervals):
        if x1 > start:
            return False
        start = max(start, x2)
        if start >= end:
            return True
    return start >= end


class TopScreen(Screen[None]):
    """The view's main screen: Textual's default screen, with CullingCompositor, and BLANK: a solid
    background (drawn the same) made of one shared blank line, not of a line per row of the screen
    kept with its filtered copy and its pieces (~130 strips, ~150 KiB at 120x40), which its
    children cover."""

    BLANK = True

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = CullingCompositor()
