"""Remember where each tensor was created: the user's line (and the library line below it, e.g. in
modeling_bert.py) for every tensor a torch function returns, kept by the one tensor tracker
(_tensors.py, tensors=True). Used by LeakDetector and oom_guard(track=True); this module adds
LeakDetector's policy: which lines made tensors for autograd while the model was in eval mode.

The cost is a Python call and a short frame walk per torch op: for debugging runs, not for
production training. Tensors made inside autograd's C++ engine (.grad) are not seen.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ._common import Site, require_torch
from ._tensors import TensorRecord, TensorTracker

Entry = TensorRecord  # .ref, .site, .tag (the step it was made in), .library


class Tracker:
    def __init__(self, model: Any = None) -> None:
        self.model = model
        self.eval_grad_sites: Counter[Site] = Counter()
        # per user line, the library lines that made tensors for autograd in eval mode
        self.eval_grad_library: dict[Site, Counter[Site]] = {}
        self._torch = require_torch()
        self.tensors = TensorTracker(storages=False, tensors=True,
                                     on_tensor=self._in_eval if model is not None else None)
        self.tensors.tag = 0

    @property
    def entries(self) -> dict[int, Entry]:
        """id(tensor) -> its entry, while the tensor lives."""
        return self.tensors.records

    @property
    def step(self) -> int:
        tag: int = self.tensors.tag
        return tag

    @step.setter
    def step(self, value: int) -> None:
        self.tensors.tag = value

    @property
    def paused(self) -> bool:
        """Set while LeakDetector inspects tensors, whose methods are torch functions too."""
        return bool(self.tensors.paused)

    @paused.setter
    def paused(self, value: bool) -> None:
        self.tensors.paused = int(value)

    def _in_eval(self, t: Any, entry: Entry) -> None:
        if (not getattr(self.model, "training", True)
                and t.grad_fn is not None and self._torch.is_grad_enabled()):
            self.eval_grad_sites[entry.site] += 1
            if entry.library is not None:
                self.eval_grad_library.setdefault(entry.site, Counter())[entry.library] += 1

    def live(self) -> list[tuple[Any, Entry]]:
        return self.tensors.live_tensors()

    def site_of(self, t: Any) -> Site | None:
        entry = self.tensors.record_of(t)
        return entry.site if entry is not None else None

    def start(self) -> None:
        self.tensors.start()

    def stop(self) -> None:
        self.tensors.stop()
