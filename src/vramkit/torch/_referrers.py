"""Who holds an object, named as the user's code names it: `total_loss`, `losses (list of 12)`,
`metric.preds (list of 20)`, `cache (dict of 20)`.

Goes up through gc.get_referrers (one scan of the heap per level, a few levels) from the object
to a container or an object attribute that a variable of a calling frame names.
"""

from __future__ import annotations

import gc
from collections import deque
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ..i18n import _
from ._common import frame_is_ours

_CONTAINERS = (list, tuple, set, frozenset, deque, dict)
DEPTH = 4  # levels of containers and attributes between a variable and the object
WIDTH = 64  # objects followed per level


class _Way:
    """How an object up the chain reaches the held one: through `attrs` to `shown` (what is
    described: the held object, or the outermost container on the way). For a dict, `key` and
    `inner` say how it would continue if that dict turns out to be an object's __dict__."""

    __slots__ = ("obj", "attrs", "shown", "key", "inner")

    def __init__(self, obj: Any, attrs: tuple[str, ...], shown: Any,
                 key: str | None = None, inner: _Way | None = None) -> None:
        self.obj, self.attrs, self.shown, self.key, self.inner = obj, attrs, shown, key, inner


def _frame_names(frame: FrameType | None) -> dict[int, tuple[str, str]]:
    """id(value) -> (variable, function) for the variables of every frame from `frame` outwards;
    the innermost frame's name wins."""
    names: dict[int, tuple[str, str]] = {}
    while frame is not None:
        if not frame_is_ours(frame):
            for name, value in list(frame.f_locals.items()):
                if name.isidentifier() and not name.startswith("__"):  # not pytest's @py_assert temporaries
                    names.setdefault(id(value), (name, frame.f_code.co_name))
        frame = frame.f_back
    return names


@dataclass
class Holder:
    """A variable of function `func`, through attributes `attrs`, reaching a container (its type
    and length) or the held object itself."""
    name: str
    func: str
    attrs: tuple[str, ...] = ()
    container: str | None = None  # e.g. "list"
    length: int = 0
    bound: int | None = None  # a deque's maxlen: it never holds more
    shown_id: int = 0  # id() of what is described (the container, or the held object itself)

    @property
    def label(self) -> str:
        text = self.name + "".join("." + a for a in self.attrs)
        if not self.container:
            return text
        if self.bound is not None:
            return _("{name} ({container} of {length}, maxlen {bound})").format(
                name=text, container=self.container, length=self.length, bound=self.bound)
        return _("{name} ({container} of {length})").format(name=text, container=self.container, length=self.length)

    def __str__(self) -> str:
        return _("{holder} in {function}").format(holder=self.label, function=self.func)

    def refresh(self, frame: FrameType | None) -> bool:
        """Read the container's length again through the same variable and attributes, without a
        search of the heap; False when the variable is no longer there."""
        while frame is not None and (frame.f_code.co_name != self.func or self.name not in frame.f_locals):
            frame = frame.f_back
        if frame is None:
            return False
        value = frame.f_locals[self.name]
        for attr in self.attrs:
            value = getattr(value, attr, None)
        if self.container is None or type(value).__name__ != self.container:
            return self.container is None
        self.length = len(value)
        return True


def _describe(name: str, func: str, way: _Way) -> Holder:
    shown = way.shown
    if isinstance(shown, _CONTAINERS):
        bound = shown.maxlen if isinstance(shown, deque) else None
        return Holder(name, func, way.attrs, type(shown).__name__, len(shown), bound, id(shown))
    return Holder(name, func, way.attrs, shown_id=id(shown))


def _holds(container: Any, obj: Any) -> str | None | bool:
    """Whether container holds obj: the key (str) for a dict value, True otherwise, False if not."""
    if isinstance(container, dict):
        for key, value in list(container.items()):
            if value is obj:
                return key if isinstance(key, str) else True
        return any(key is obj for key in container)
    return any(item is obj for item in container)


def find_holder(obj: Any, frame: FrameType | None, ignore: set[int] | None = None) -> Holder | None:
    """The variable (of `frame` or a frame outside it) that holds obj, directly or through up to
    DEPTH containers and attributes (str(): "metric.preds (list of 20) in train"); None when none does."""
    names = _frame_names(frame)
    skip = set(ignore or ())
    level = [_Way(obj, (), obj)]
    seen = {id(obj)}
    for __ in range(DEPTH + 1):
        for way in level:
            hit = names.get(id(way.obj))
            if hit is not None:
                return _describe(hit[0], hit[1], way)
        objs = [way.obj for way in level]
        by_id = {id(way.obj): way for way in level}
        skip.update((id(level), id(objs), id(by_id)))
        upper: list[_Way] = []
        for ref in gc.get_referrers(*objs):
            if id(ref) in skip or id(ref) in seen or len(upper) >= WIDTH:
                continue
            if isinstance(ref, tuple) and len(ref) == len(objs) and all(a is b for a, b in zip(ref, objs)):
                continue  # get_referrers' own argument tuple
            up = _step_up(ref, by_id)
            if up is not None:
                seen.add(id(ref))
                upper.append(up)
        if not upper:
            return None
        level = upper
    return None


def _step_up(ref: Any, below: dict[int, _Way]) -> _Way | None:
    """The way from ref to the held object through one of the objects of the level below."""
    if isinstance(ref, _CONTAINERS):
        for way in below.values():
            held = _holds(ref, way.obj)
            if held is not False:
                key = held if isinstance(held, str) else None
                return _Way(ref, (), ref, key, way)
        return None
    if isinstance(ref, type):  # a class attribute (`history = []` in the class body): its __dict__ is a proxy
        for way in below.values():
            inner = way.inner
            if isinstance(way.obj, dict) and way.key is not None and inner is not None \
                    and vars(ref).get(way.key) is inner.obj:
                return _Way(ref, (way.key,) + inner.attrs, inner.shown)
        return None
    kind = below.get(id(type(ref)))  # an instance reaches its class's attributes: self.history
    if kind is not None:
        return _Way(ref, kind.attrs, kind.shown)
    owned = getattr(ref, "__dict__", None)
    if isinstance(owned, dict):
        for key, value in list(owned.items()):  # an attribute (Python keeps small objects' attributes inline)
            attribute = below.get(id(value))
            if attribute is not None and isinstance(key, str):
                return _Way(ref, (key,) + attribute.attrs, attribute.shown)
        through = below.get(id(owned))  # an attribute, through a __dict__ the heap scan met first
        inner = through.inner if through is not None else None  # ref.<key> is the object below the dict
        if through is not None and through.key is not None and inner is not None:
            return _Way(ref, (through.key,) + inner.attrs, inner.shown)
    return None
