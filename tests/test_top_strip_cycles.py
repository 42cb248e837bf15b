"""tui/strips.py: no Strip keeps itself in its own caches, so the view's lines are freed when
dropped, not by the cyclic garbage collector minutes later (its oldest generation's collections
come minutes apart: the view's memory rose for minutes before it levelled)."""

from __future__ import annotations

import gc

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from vramkit.tui.strips import lazy_strip_caches


def _cyclic_garbage(make) -> int:
    """How many objects the cyclic collector finds after make() ran and its result was dropped."""
    gc.collect()
    gc.disable()
    try:
        make()
        return gc.collect()
    finally:
        gc.enable()


def test_a_line_divided_at_its_end_or_cropped_to_its_length_is_no_cycle():
    assert lazy_strip_caches()
    segments = [Segment("hello ", Style(bold=True)), Segment("world")]

    def whole_piece():
        strip = Strip(segments)
        assert strip.divide([11]) == [strip]  # one piece: the line itself, as Textual gives it
        assert strip.crop_extend(0, 11, None) is strip

    assert _cyclic_garbage(whole_piece) == 0

    def pieces():  # the answers that are new strips are still cached
        strip = Strip(segments)
        assert [s.text for s in strip.divide([3, 11])] == ["hel", "lo world"]
        assert strip.divide([3, 11]) is strip.divide([3, 11])
        assert strip.crop_extend(2, 14, None).text == "llo world   "
        assert strip.crop_extend(2, 14, None) is strip.crop_extend(2, 14, None)

    assert _cyclic_garbage(pieces) == 0
