"""The live view's screen: Textual's compositor, drawing for a refresh only the widgets under its
changes.

A refresh changes lines far apart: the banner's clock at the top, the ELAPSED cells of the process
table at the bottom. Textual draws a partial update by rendering every widget whose container
overlaps the rectangle around all the changed regions: for the screen's own children, all of
them, every second, the footer, the GPU panels, the users, alerts and view lines included (from
their caches, for nothing). CullingCompositor renders, of those, only the widgets whose visible
part overlaps one of the changed regions, each once. What the terminal gets is the same: the same
spans, each filled from the widgets under it.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class CullingCompositor(Compositor):
    _changed: list[Region] | None = None  # while a partial update is drawn: the regions it redraws

    def render_partial_update(self) -> ChopsUpdate | None:
        self._changed = list(self._dirty_regions)
        try:
            return super().render_partial_update()
        finally:
            self._changed = None

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        """Textual's, for the widgets under a change of the partial update being drawn (Textual
        takes every widget whose container overlaps `crop`, the rectangle around all of them)."""
        changed = self._changed
        if crop is None or not changed:
            return super()._get_renders(crop)
        visible = self.visible_widgets
        self._visible_widgets = {widget: (region, clip) for widget, (region, clip) in visible.items()
                                 if _under(region.intersection(clip), changed)}
        try:
            return list(super()._get_renders(crop))
        finally:
            self._visible_widgets = visible


def _under(part: Region, changed: list[Region]) -> bool:
    overlaps = part.overlaps
    return any(overlaps(region) for region in changed)


class TopScreen(Screen[None]):
    """The view's main screen: Textual's default screen, with CullingCompositor."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = CullingCompositor()
