"""The live view's screen: Textual's compositor, drawing apart the bands of lines that changed.

A refresh changes lines far apart: the banner's clock at the top, the ELAPSED cells of the process
table at the bottom. Textual draws a partial update by rendering every widget whose container
overlaps the rectangle around all the changed regions: for the screen's own children, all of
them, every second, the footer, the GPU panels, the users, alerts and view lines included (from
their caches, for nothing). BandedCompositor renders each band of changed lines (changed regions
whose lines overlap or touch) on its own, and of each band only the widgets whose visible part
overlaps it. What the terminal gets is the same: the same spans, filled from the same widgets'
lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


def bands(regions: Iterable[Region]) -> list[list[Region]]:
    """The regions grouped into bands of lines: sorted by their first line, a region joins the
    band before it when its lines overlap or touch that band's."""
    out: list[list[Region]] = []
    bottom = 0
    for region in sorted(regions, key=lambda r: r.y):
        if out and region.y <= bottom:
            out[-1].append(region)
            bottom = max(bottom, region.bottom)
        else:
            out.append([region])
            bottom = region.bottom
    return out


class BandedCompositor(Compositor):
    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        """Textual's, for the widgets whose visible part overlaps `crop`: Textual takes every widget
        whose container overlaps it, which for the screen's own children is all of them."""
        if crop is None:
            return super()._get_renders(crop)
        visible = self.visible_widgets
        overlaps = crop.overlaps
        self._visible_widgets = {widget: (region, clip) for widget, (region, clip) in visible.items()
                                 if overlaps(region.intersection(clip))}
        try:
            return list(super()._get_renders(crop))
        finally:
            self._visible_widgets = visible

    def render_partial_update(self) -> ChopsUpdate | None:
        screen = self.size.region
        groups = bands(self._dirty_regions)
        crops = [Region.from_union(group).intersection(screen) for group in groups]
        if len(crops) < 2 or not all(crops):  # one band, or one off the screen: Textual's own way
            return super().render_partial_update()
        spans = list(self._regions_to_spans(self._dirty_regions))
        self._dirty_regions.clear()
        is_rendered_line = {y for y, __, __ in spans}.__contains__
        chops: list[Mapping[int, Strip | None]] = []
        for crop in crops:
            drawn = self._render_chops(crop, is_rendered_line)
            if not chops:
                chops = list(drawn)
            else:  # the bands' lines do not overlap: each line comes from its band's rendering
                chops[crop.y:crop.bottom] = drawn[crop.y:crop.bottom]
        return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in self.cuts])


class TopScreen(Screen[None]):
    """The view's main screen: Textual's default screen, with BandedCompositor."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._compositor = BandedCompositor()
