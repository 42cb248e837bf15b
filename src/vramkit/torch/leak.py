"""LeakDetector: find tensors that outlive the training step that made them, and the line that made them.

    det = LeakDetector(model)
    with det:
        for batch in det.wrap(loader):        # or call det.step() at the end of each step
            loss = loss_fn(model(batch.x), batch.y)
            loss.backward(); opt.step(); opt.zero_grad()
            losses.append(loss)               # leak: keeps every loss and its autograd graph
    print(det.report())

A tensor created during step k and still alive at the end of step k+1 survived its step.
Survivors are normal once (optimizer state, caches made in step 1); a line whose survivors
grow at every step for `window` steps is a leak. Tensors with a grad_fn keep their autograd
graph alive: the usual fix is `loss.item()` (a float) or `loss.detach()`.

Given the model, it also warns when the model is in eval mode while autograd records
(evaluation without torch.no_grad(): every activation is kept for a backward that never comes).
"""

from __future__ import annotations

import gc
import linecache
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..units import format_size
from ._common import format_site, require_torch, storage_key
from ._tracking import Tracker


@dataclass
class Leak:
    site: tuple[str, int, str]  # (file, line, function) that created the surviving tensors
    code: str  # that line's source
    survivors: int  # tensors from this line alive beyond their step
    bytes: int
    keeps_graph: int  # how many of them hold an autograd graph
    grad_fn: str | None  # e.g. MseLossBackward0
    held_by: str | None  # a variable holding them, e.g. "losses (list of 12) in train"
    first_step: int  # the step at which it was flagged

    @property
    def line(self) -> int:
        return self.site[1]

    def __str__(self) -> str:
        text = (f"{format_site(self.site)}: {self.survivors} tensors ({format_size(self.bytes)}) created here "
                f"outlive their step, more every step\n    {self.code}")
        if self.held_by:
            text += f"\n    held by {self.held_by}"
        if self.keeps_graph:
            text += (f"\n    {self.keeps_graph} keep an autograd graph alive ({self.grad_fn}): store "
                     "loss.item() (or .detach()) instead of the tensor")
        return text


@dataclass
class LeakReport:
    leaks: list[Leak]
    live_bytes: list[int]  # tracked live tensor memory at the end of each step
    growing: bool  # live memory grew at every one of the last `window` steps
    eval_with_grad: list[tuple[tuple[str, int, str], int]] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.leaks and not self.eval_with_grad:
            return f"no leak found over {len(self.live_bytes)} steps"
        parts = [str(leak) for leak in self.leaks]
        for site, n in self.eval_with_grad:
            parts.append(f"{format_site(site)}: {n} tensors recorded for autograd while the model is in eval mode: "
                         "wrap evaluation in torch.no_grad() or torch.inference_mode()")
        if self.growing:
            parts.append("live tensor memory grew at every step: " +
                         " -> ".join(format_size(b) for b in self.live_bytes[-4:]))
        return "\n".join(parts)


def _holder(t: Any) -> str | None:
    """The name of a list/dict/set that holds `t`, found in the calling frames."""
    containers = [r for r in gc.get_referrers(t) if isinstance(r, (list, dict, set, tuple))]
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and containers:
        for scope in (frame.f_locals, frame.f_globals if frame.f_back is None else {}):
            for name, value in scope.items():
                for c in containers:
                    if value is c:
                        return f"{name} ({type(c).__name__} of {len(c)}) in {frame.f_code.co_name}"
        frame = frame.f_back
    return None


class LeakDetector:
    """Step hook or context manager; see the module docstring."""

    def __init__(self, model: Any = None, *, window: int = 3, warn: bool = True, min_bytes: int = 0) -> None:
        if window < 2:
            raise ValueError("window must be at least 2 steps")
        require_torch()
        self.model, self.window, self.warn, self.min_bytes = model, window, warn, min_bytes
        self._tracker = Tracker(model)
        self._history: dict[tuple[str, int, str], list[int]] = {}
        self._live: list[int] = []
        self._leaks: dict[tuple[str, int, str], Leak] = {}
        self._eval_warned: set[tuple[str, int, str]] = set()

    # ---- context manager / explicit start-stop
    def start(self) -> LeakDetector:
        self._tracker.start()
        return self

    def stop(self) -> None:
        self._tracker.stop()

    def __enter__(self) -> LeakDetector:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def wrap(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield each item; the end of each loop body is the end of a step."""
        for item in iterable:
            yield item
            self.step()

    # ---- the step hook
    def step(self) -> list[Leak]:
        """Call at the end of each step. Returns the leaks first flagged at this step."""
        current = self._tracker.step
        counts: dict[tuple[str, int, str], list[Any]] = {}
        seen: set[tuple[int, int]] = set()
        live = 0
        for t, entry in self._tracker.live():
            key = storage_key(t)
            if key not in seen:
                seen.add(key)
                live += key[1]
            if entry.step < current:
                counts.setdefault(entry.site, []).append(t)
        self._live.append(live)
        for site in set(self._history) | set(counts):
            self._history.setdefault(site, []).append(len(counts.get(site, ())))
        new = []
        for site, history in self._history.items():
            recent = history[-(self.window + 1):]
            if site in self._leaks or len(recent) <= self.window:
                continue
            if all(b > a for a, b in zip(recent, recent[1:])):
                alive = counts[site]
                nbytes = sum(storage_key(t)[1] for t in alive)
                if nbytes < self.min_bytes:
                    continue
                graph = [t for t in alive if t.grad_fn is not None]
                leak = Leak(site=site, code=linecache.getline(site[0], site[1]).strip(), survivors=len(alive),
                            bytes=nbytes, keeps_graph=len(graph),
                            grad_fn=type(graph[-1].grad_fn).__name__ if graph else None,
                            held_by=_holder(alive[-1]), first_step=current)
                self._leaks[site] = leak
                new.append(leak)
                if self.warn:
                    warnings.warn(f"vramkit: possible memory leak: {leak}", ResourceWarning, stacklevel=2)
        for site, n in self._tracker.eval_grad_sites.items():
            if site not in self._eval_warned:
                self._eval_warned.add(site)
                if self.warn:
                    warnings.warn(f"vramkit: {format_site(site)}: the model is in eval mode but autograd is "
                                  f"recording ({n} tensors): use torch.no_grad() or torch.inference_mode()",
                                  ResourceWarning, stacklevel=2)
        self._tracker.step = current + 1
        return new

    def report(self) -> LeakReport:
        recent = self._live[-(self.window + 1):]
        growing = len(recent) > self.window and all(b > a for a, b in zip(recent, recent[1:]))
        return LeakReport(leaks=list(self._leaks.values()), live_bytes=list(self._live), growing=growing,
                          eval_with_grad=sorted(self._tracker.eval_grad_sites.items()))
