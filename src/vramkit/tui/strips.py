"""Textual's Strips, each with its caches made when first used (issue 36: the live view's memory).

Every Strip (a line of segments) makes seven small FIFO caches as it is made (crops, divisions,
filters, styles...), ~900 bytes of objects, and most strips never use more than one of them: of
the ~600 strips the view held on a 120x40 screen at 8 x 200 (the widgets' lines, their filtered
and divided copies), ~380 caches had been used, of ~4,200. `lazy_strip_caches()` makes each cache
on its first use instead, of the size Textual gives it. A cache holds what it would have held, so
the lines drawn are the same.

No cache holds its own strip either. `divide` at the strip's own end (a line the compositor does
not cut: most of them) and `crop_extend` to the strip's own length cached the strip in itself: a
reference cycle, so each such line, its segments and caches waited for the cyclic garbage
collector, ~30 lines a second in the view, and the oldest generation's collections come minutes
apart (~3,600 objects of garbage in 10 s at 8 x 200, all of them lines and their parts): the
view's memory rose for minutes before it levelled. Those two answers are not cached now (they
cost nothing to make again), so such lines are freed as soon as they are dropped.

It applies to the Strip it was written for (textual 8.2's slots, seven caches set by __init__ and
nothing else) and leaves any other as it is.
"""

from __future__ import annotations

from typing import Any

from textual.cache import FIFOCache
from textual.strip import Strip

# Strip's slots as textual 8.2 has them: the caches among them are told by a Strip made by Textual
_SLOTS = ("_segments", "_cell_length", "_divide_cache", "_crop_cache", "_style_cache", "_filter_cache",
          "_render_cache", "_line_length_cache", "_crop_extend_cache", "_offsets_cache", "_link_ids",
          "_cell_count")


class _LazyCache:
    """A Strip cache's slot, read as a FIFOCache made on the first read."""

    __slots__ = ("slot", "size")

    def __init__(self, slot: Any, size: int) -> None:
        self.slot, self.size = slot, size

    def __get__(self, strip: Strip | None, owner: type | None = None) -> Any:
        if strip is None:
            return self
        try:
            return self.slot.__get__(strip, owner)
        except AttributeError:  # not used yet
            cache: FIFOCache[Any, Any] = FIFOCache(self.size)
            self.slot.__set__(strip, cache)
            return cache

    def __set__(self, strip: Strip, value: Any) -> None:
        self.slot.__set__(strip, value)


def _init(self: Strip, segments: Any, cell_length: int | None = None) -> None:
    """Strip.__init__ less the caches (made by _LazyCache when first used)."""
    self._segments = list(segments)
    self._cell_length = cell_length
    self._render_cache = None
    self._link_ids = None
    self._cell_count = None


def _divide(self: Strip, cuts: Any) -> Any:
    """Strip.divide, without caching the strip in itself (one cut, at its end: the strip whole)."""
    cuts = list(cuts)
    if [cut for cut in cuts if cut <= self.cell_length] == [self.cell_length]:
        return [self]
    return _TEXTUAL["divide"](self, cuts)


def _crop_extend(self: Strip, start: int, end: int, style: Any) -> Strip:
    """Strip.crop_extend, without caching the strip in itself (cropped to its own length)."""
    if start == 0 and end == self.cell_length:
        return self
    return _TEXTUAL["crop_extend"](self, start, end, style)  # type: ignore[no-any-return]


_TEXTUAL: dict[str, Any] = {}  # Strip's own methods, where _divide and _crop_extend replace them


def lazy_strip_caches() -> bool:
    """Make Strip's caches when first used, none holding its own strip (once per process). False
    where Strip is not the one this was written for (then it is left as it is)."""
    if Strip.__init__ is _init:
        return True
    if tuple(getattr(Strip, "__slots__", ())) != _SLOTS:
        return False
    made = Strip([], 0)  # what Textual's own __init__ sets: the caches, and None in the rest
    caches = {n: getattr(made, n)._maxsize for n in _SLOTS if isinstance(getattr(made, n, None), FIFOCache)}
    if len(caches) != 7 or any(getattr(made, n) is not None for n in ("_render_cache", "_link_ids", "_cell_count")):
        return False
    for name, size in caches.items():
        setattr(Strip, name, _LazyCache(Strip.__dict__[name], size))
    Strip.__init__ = _init  # type: ignore[method-assign]
    _TEXTUAL.update(divide=Strip.divide, crop_extend=Strip.crop_extend)
    Strip.divide = _divide  # type: ignore[method-assign]
    Strip.crop_extend = _crop_extend  # type: ignore[method-assign]
    return True
