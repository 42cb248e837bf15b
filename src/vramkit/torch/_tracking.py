"""Remember where each tensor was created: a TorchFunctionMode that records the user's line (and
the library line below it, e.g. in modeling_bert.py) for every tensor a torch function returns.
Used by LeakDetector and oom_guard(track=True).

The cost is a Python call and a short frame walk per torch op: for debugging runs, not for
production training. Tensors made inside autograd's C++ engine (.grad) are not seen.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._common import Site, require_torch, tensors_in, user_sites


@dataclass
class Entry:
    ref: Any  # weakref to the tensor
    site: Site  # the user's line
    step: int
    library: Site | None = None  # the library line below the user's, if the tensor was made in one


class Tracker:
    def __init__(self, model: Any = None) -> None:
        self.entries: dict[int, Entry] = {}
        self.step = 0
        self.model = model
        self.eval_grad_sites: Counter[Site] = Counter()
        # per user line, the library lines that made tensors for autograd in eval mode
        self.eval_grad_library: dict[Site, Counter[Site]] = {}
        self.paused = False  # set while LeakDetector inspects tensors, whose methods are torch functions too
        self._mode: Any = None

    def record(self, out: Any, args: tuple[Any, ...]) -> None:
        if self.paused:
            return
        torch = require_torch()
        inputs = {id(a) for a in args if isinstance(a, torch.Tensor)}
        for t in tensors_in(out):
            key = id(t)
            if key in inputs:  # in-place ops return their input: not a new tensor
                continue
            old = self.entries.get(key)
            if old is not None and old.ref() is t:
                continue
            site, library = user_sites(3)
            self.entries[key] = Entry(weakref.ref(t, self._forget(key)), site, self.step, library)
            if (self.model is not None and not getattr(self.model, "training", True)
                    and t.grad_fn is not None and torch.is_grad_enabled()):
                self.eval_grad_sites[site] += 1
                if library is not None:
                    self.eval_grad_library.setdefault(site, Counter())[library] += 1

    def _forget(self, key: int) -> Callable[[Any], None]:
        def callback(ref: Any) -> None:
            entry = self.entries.get(key)
            if entry is not None and entry.ref is ref:
                del self.entries[key]
        return callback

    def live(self) -> list[tuple[Any, Entry]]:
        out: list[tuple[Any, Entry]] = []
        for entry in list(self.entries.values()):
            t = entry.ref()
            if t is not None:
                out.append((t, entry))
        return out

    def site_of(self, t: Any) -> Site | None:
        entry = self.entries.get(id(t))
        return entry.site if entry is not None and entry.ref() is t else None

    def start(self) -> None:
        if self._mode is None:
            self._mode = _mode_class()(self)
            self._mode.__enter__()

    def stop(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)


_MODE: Any = None


def _mode_class() -> Any:
    global _MODE
    if _MODE is None:
        require_torch()
        from torch.overrides import TorchFunctionMode

        class _RecordCreation(TorchFunctionMode):
            def __init__(self, tracker: Tracker) -> None:
                super().__init__()
                self.tracker = tracker

            def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                                   kwargs: dict[str, Any] | None = None) -> Any:
                out = func(*args, **(kwargs or {}))
                try:
                    self.tracker.record(out, args)
                except Exception:  # tracking must never break the user's step
                    pass
                return out

        _MODE = _RecordCreation
    return _MODE
