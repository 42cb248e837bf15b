"""find_batch_size(): the largest batch that fits, in few real trials; accumulation_plan(): keep the
effective batch when the micro-batch shrinks.

The search measures peak memory on two small batches, fits memory = fixed + per_sample x batch,
predicts the largest batch under the capacity, and confirms it (the prediction, then one more).
A prediction from an estimator (`predict=`) skips the measurements. Without a way to measure
memory it falls back to doubling then bisection, the usual method (find_batch_size_doubling).
Without a GPU, run it inside simulated_memory_cap(bytes) (memcap.py), which it measures as it
would CUDA.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import RequestError
from ..i18n import N_, _, join_words, ngettext
from ..units import format_size
from ._common import require_torch
from .memcap import active_cap


@dataclass
class Trial:
    batch: int
    ok: bool
    peak_bytes: int | None


@dataclass
class BatchSearch:
    largest: int  # the largest batch that ran (0: not even `low` fits)
    recommended: int  # with the safety margin, rounded down to `multiple_of`
    method: str  # "predicted", "measured", "doubling"
    trials: list[Trial] = field(default_factory=list)
    capacity: int | None = None  # the bytes the search aimed under (None: not known)
    margin: float = 0.1
    multiple_of: int = 1
    restored: list[str] = field(default_factory=list)  # what was put back after the trials (marked: _() to show)

    @property
    def trial_count(self) -> int:
        return len(self.trials)

    def __str__(self) -> str:
        if not self.largest:
            head = _("no batch fits: the smallest tried ({batch}) ran out of memory").format(
                batch=min(t.batch for t in self.trials))
        else:
            on_memory = self.capacity is not None and self.method != "doubling"
            if self.multiple_of > 1:
                margin = (_("{margin:.0%} margin on memory, a multiple of {multiple}") if on_memory
                          else _("{margin:.0%} margin on the batch, a multiple of {multiple}"))
            else:
                margin = _("{margin:.0%} margin on memory") if on_memory else _("{margin:.0%} margin on the batch")
            head = _("largest batch that ran: {largest}; recommended: {recommended} ({margin})").format(
                largest=self.largest, recommended=self.recommended,
                margin=margin.format(margin=self.margin, multiple=self.multiple_of))
        trials = join_words(
            f"{t.batch} " + ((format_size(t.peak_bytes) if t.peak_bytes is not None else "ok") if t.ok else "OOM")
            for t in self.trials)
        count = (ngettext("{n} trial ({method} of {capacity}): {trials}", "{n} trials ({method} of {capacity}): "
                          "{trials}", self.trial_count) if self.capacity is not None
                 else ngettext("{n} trial ({method}): {trials}", "{n} trials ({method}): {trials}", self.trial_count))
        lines = [head, count.format(n=self.trial_count, method=self.method, trials=trials,
                                    capacity=format_size(self.capacity))]
        if self.restored:
            lines.append(_("restored after the trials: {what}").format(
                what=join_words(_(what) for what in self.restored)))
        return "\n".join(lines)


@contextlib.contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """A trial's collections (_cleanup) walk only what the search made: a training process holds
    millions of objects (torch, the model's library, the data) that every full collection would
    walk again, about a second a trial in a large process. Frozen for the search only, and not
    when the caller froze the heap itself (unfreezing would undo theirs)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _cleanup() -> None:
    gc.collect()
    try:
        torch = require_torch()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def _default_memory() -> tuple[Callable[[], None] | None, Callable[[], int] | None, int | None]:
    """Under simulated_memory_cap: its counters. On CUDA: reset the peak before a trial, read it
    after; capacity = free + what we hold."""
    cap = active_cap()
    if cap is not None:
        return cap.reset_peak, cap.max_allocated, cap.capacity
    torch = require_torch()
    if not torch.cuda.is_available():
        return None, None, None
    free, __ = torch.cuda.mem_get_info()
    capacity = int(free + torch.cuda.memory_reserved())
    return torch.cuda.reset_peak_memory_stats, lambda: int(torch.cuda.max_memory_allocated()), capacity


class _Runner:
    def __init__(self, step_fn: Callable[[int], Any], before: Callable[[], None] | None,
                 memory_fn: Callable[[], int] | None, model: Any = None) -> None:
        self.step_fn, self.before, self.memory_fn, self.model = step_fn, before, memory_fn, model
        self.trials: list[Trial] = []
        self.lo: int = 0  # largest success
        self.hi: int | None = None  # smallest failure

    def __call__(self, batch: int) -> bool:
        from .guard import is_oom
        # every trial starts from an emptied cache, as a fresh job at that batch would: on an H200 a
        # batch that failed right after a smaller one's trial ran once the cache was emptied
        _cleanup()
        if self.before is not None:
            self.before()
        failed = False
        try:
            self.step_fn(batch)
        except Exception as e:
            if not is_oom(e):
                raise
            failed = True
        if failed:  # out of the except block: its traceback no longer holds the step's tensors
            if self.model is not None:  # an OOM mid-backward leaves some gradients allocated
                for p in self.model.parameters():
                    p.grad = None
            _cleanup()
            self.trials.append(Trial(batch, False, None))
            self.hi = batch if self.hi is None else min(self.hi, batch)
            return False
        peak = self.memory_fn() if self.memory_fn is not None else None
        self.trials.append(Trial(batch, True, peak))
        self.lo = max(self.lo, batch)
        return True


def _fit(trials: list[Trial], local: bool = False) -> tuple[float, float] | None:
    """Least squares peak = a + b x batch over the successful, measured trials; local: only the two
    largest (a secant near the limit, which follows curved memory use: attention is quadratic)."""
    pts = sorted({(t.batch, t.peak_bytes) for t in trials if t.ok and t.peak_bytes is not None})
    if local:
        pts = pts[-2:]
    if len({b for b, __ in pts}) < 2:
        return None
    n = len(pts)
    mx, my = sum(b for b, __ in pts) / n, sum(m for __, m in pts) / n
    sxx = sum((b - mx) ** 2 for b, __ in pts)
    slope = sum((b - mx) * (m - my) for b, m in pts) / sxx
    if slope <= 0:
        return None
    return my - slope * mx, slope


def _predict(trials: list[Trial], capacity: int, bracketed: bool = False) -> int | None:
    """The next batch to try under `capacity`. Peak memory is often flat at small batches: something
    other than the batch sets it (AdamW's step, with its moments and foreach temporaries, outweighs a
    small batch's activations), so a secant through a point on that flat part underestimates the
    per-sample slope and overshoots, and a flat pair has no slope at all. The secant through the two
    largest successes is used unless the lower one is on the flat part (a smaller batch peaked as
    high); otherwise the largest success is scaled by capacity / its peak, which cannot overshoot
    while memory = fixed + per-sample x batch with fixed >= 0 (nor from a flat part below such a
    line), and lands in the growing part from where the secant is exact. While every peak is flat
    and nothing has failed, batches 4x larger are probed."""
    pts = sorted({(t.batch, t.peak_bytes) for t in trials if t.ok and t.peak_bytes is not None})
    if not pts:
        return None
    floor = min(peak for __, peak in pts)
    top_batch, top_peak = pts[-1]

    def flat(peak: int) -> bool:
        return peak <= floor + _FLAT_TOLERANCE * floor

    # the lower point of the secant is on the flat part when a smaller batch peaked as high
    lower_flat = len(pts) >= 2 and flat(pts[-2][1]) and pts[0][0] < pts[-2][0]
    if len(pts) >= 2 and not flat(top_peak) and not lower_flat:
        fit = _fit(trials, local=True)
        if fit is not None:
            return math.floor((capacity - fit[0]) / fit[1])
    if top_peak <= 0:
        return None
    scaled = math.floor(top_batch * capacity / top_peak)
    if not bracketed and flat(top_peak):
        # still flat: nothing says how fast memory grows; probe 4x further (one failure at most,
        # after which the scaling, safe, finds the growing part inside the bracket)
        return max(scaled, 4 * top_batch)
    return scaled


_FLAT_TOLERANCE = 0.002  # a peak within this fraction of the least one is on the flat part (CUDA's jitter)


def _finish(run: _Runner, method: str, margin: float, multiple_of: int,
            capacity: int | None, restored: list[str] | None = None) -> BatchSearch:
    largest = run.lo
    recommended = int(largest * (1 - margin))
    fit = _fit(run.trials, local=True)
    if fit is not None and capacity is not None:
        # margin on memory: the largest batch predicted to stay under (1 - margin) x capacity
        recommended = min(largest, int(((1 - margin) * capacity - fit[0]) // fit[1]))
    recommended = max(0, recommended - recommended % max(1, multiple_of))
    if largest and not recommended:
        recommended = min(largest, max(1, multiple_of))
    return BatchSearch(largest=largest, recommended=recommended, method=method, trials=run.trials,
                       capacity=capacity, margin=margin, multiple_of=multiple_of, restored=restored or [])


def find_batch_size_doubling(step_fn: Callable[[int], Any], *, low: int = 1, high: int = 1 << 16,
                             margin: float = 0.1, multiple_of: int = 1, model: Any = None, optimizer: Any = None,
                             restore: bool = True) -> BatchSearch:
    """The usual search: double until it fails, then bisect. The baseline find_batch_size beats.
    model, optimizer, restore: as find_batch_size's (the trials' training undone)."""
    if low < 1 or high < low:
        raise ValueError("need 1 <= low <= high")
    saved = _Saved(model, optimizer) if restore and (model is not None or optimizer is not None) else None
    run = _Runner(step_fn, None, None, model)
    try:
        with _older_objects_frozen():
            _doubling(run, low, high)
    finally:
        restored = saved.restore() if saved is not None else []
    return _finish(run, "doubling", margin, multiple_of, None, restored)


def _doubling(run: _Runner, low: int, high: int) -> None:
    batch = max(low, run.lo + 1)
    while run.hi is None and batch <= high:
        if not run(batch):
            break
        if batch == high:
            return
        batch = min(high, batch * 2)
    if run.hi is None:
        return
    while run.hi - run.lo > 1:
        run((run.lo + run.hi) // 2)


def find_batch_size(step_fn: Callable[[int], Any], *, low: int = 1, high: int = 1 << 16,
                    predict: int | Callable[[], int] | None = None, memory_fn: Callable[[], int] | None = None,
                    capacity: int | None = None, before_trial: Callable[[], None] | None = None,
                    margin: float = 0.1, multiple_of: int = 1, probe: int | None = None,
                    model: Any = None, optimizer: Any = None, restore: bool = True) -> BatchSearch:
    """The largest batch in [low, high] for which step_fn(batch) does not run out of memory.

    step_fn(batch): one real training step at that batch size (forward, backward, optimizer).
    predict: a batch size from the estimator (or a callable returning one): tried first.
    memory_fn/capacity/before_trial: measure a trial's peak bytes and the bytes available;
    on CUDA they default to torch.cuda's peak counters and free memory, inside
    simulated_memory_cap() to its counters. Without them, and without predict, the search is
    doubling + bisection. Without CUDA, a simulated cap or `capacity` (the limit step_fn itself
    enforces) it refuses to start: nothing would stop the trials before host memory runs out.
    margin: the recommended batch stays this fraction below the largest (on memory when
    measured). probe: the second measured batch (default 4 x low).

    model, optimizer: the trials train them. With restore=True (the default) they are put back
    as they were: the model's parameters and buffers (its state_dict) and the optimizer's state
    and hyperparameters (its state_dict; a fresh optimizer is fresh again) are copied to host
    memory before the first trial and loaded after the last; gradients are dropped, and the
    torch (and CUDA) random generators restored. Not restored: anything else step_fn changes
    (an LR scheduler, a data iterator, counters). The model's gradients are also dropped after
    each trial that ran out of memory (one that failed in the backward leaves some allocated).
    """
    if low < 1 or high < low:
        raise ValueError("need 1 <= low <= high")
    if not 0 <= margin < 1:
        raise ValueError("margin must be in [0, 1)")
    if memory_fn is None and capacity is None and before_trial is None:
        before_trial, memory_fn, capacity = _default_memory()
    if capacity is None and not require_torch().cuda.is_available():
        raise RequestError(_("no GPU here and no memory cap: run the search inside "
                             "vramkit.torch.simulated_memory_cap(bytes), or pass capacity= (the limit step_fn "
                             "enforces); trials would otherwise grow until host memory runs out"), param="capacity")
    saved = _Saved(model, optimizer) if restore and (model is not None or optimizer is not None) else None
    run = _Runner(step_fn, before_trial, memory_fn, model)
    try:
        with _older_objects_frozen():
            method = _search(run, low, high, predict, memory_fn, capacity, probe)
    finally:
        restored = saved.restore() if saved is not None else []
    return _finish(run, method, margin, multiple_of, capacity, restored)


def _search(run: _Runner, low: int, high: int, predict: int | Callable[[], int] | None,
            memory_fn: Callable[[], int] | None, capacity: int | None, probe: int | None) -> str:
    """Run the trials; returns the method."""
    guess = predict() if callable(predict) else predict
    measured = memory_fn is not None and capacity is not None
    if guess is None and not measured:
        _doubling(run, low, high)
        return "doubling"
    if guess is not None and not measured:
        _gallop(run, min(max(int(guess), low), high), low, high)
        return "predicted"
    method = "measured"
    if guess is not None:
        method = "predicted"
        run(min(max(int(guess), low), high))
    else:
        if not run(low):
            return method
        second = min(high, probe or low * 4)
        if second > low:
            run(second)
    stalls = 0
    while run.lo < high and (run.hi is None or run.hi - run.lo > 1):
        if run.lo == 0:  # even the first trial failed: look below it
            assert run.hi is not None  # (that failure)
            _gallop(run, run.hi - 1, low, high)
            break
        ceiling = high if run.hi is None else run.hi - 1
        guess = _predict(run.trials, capacity, run.hi is not None) if capacity is not None else None
        if guess is not None and run.hi is not None and not run.lo < guess < run.hi:
            guess = None  # the secant left the bracket: bisect instead of creeping by one
        if guess is None or stalls >= 2:
            # the model is not converging: one plain doubling or bisection step
            guess = run.lo * 2 if run.hi is None else (run.lo + run.hi) // 2
            stalls = 0
        target = min(max(guess, run.lo + 1), ceiling)
        stalls = stalls + 1 if target != guess else 0  # the prediction fell outside the bracket
        run(target)
    return method


def _host_copy(value: Any) -> Any:
    """A deep copy with every tensor copied to host memory (not the GPU the search measures)."""
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _host_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_host_copy(v) for v in value)
    return copy.deepcopy(value)


class _Saved:
    """What the trials change, copied before the first: see find_batch_size's docstring."""

    def __init__(self, model: Any, optimizer: Any) -> None:
        torch = require_torch()
        self.model, self.optimizer = model, optimizer
        cap = active_cap()
        with cap.paused() if cap is not None else contextlib.nullcontext():  # host copies: not on the GPU
            self.model_state = _host_copy(model.state_dict()) if model is not None else None
            self.optimizer_state = _host_copy(optimizer.state_dict()) if optimizer is not None else None
        self.rng = torch.get_rng_state()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.cuda_rng = torch.cuda.get_rng_state_all() if cuda else None

    def restore(self) -> list[str]:
        torch = require_torch()
        done = []
        if self.model is not None:
            self.model.load_state_dict(self.model_state)
            for p in self.model.parameters():
                p.grad = None
            done.append(N_("model parameters and buffers"))
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self.optimizer_state)
            self.optimizer.zero_grad(set_to_none=True)
            done.append(N_("optimizer state"))
        done.append(N_("gradients dropped"))
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        done.append(N_("random generators"))
        return done


def _gallop(run: _Runner, start: int, low: int, high: int) -> None:
    """From a predicted batch: confirm it and its neighbour, widening the step until bracketed."""
    if run(start):
        step = 1
        while run.hi is None and run.lo < high:
            run(min(high, run.lo + step))
            step *= 2
    else:
        step = 1
        while run.lo == 0:
            assert run.hi is not None  # `start` failed
            batch = max(low, run.hi - step)
            if not run(batch) and batch == low:
                return  # nothing fits
            step *= 2
    while run.hi is not None and run.hi - run.lo > 1:
        run((run.lo + run.hi) // 2)


@dataclass
class AccumulationPlan:
    micro_batch: int
    steps: int  # gradient accumulation steps
    effective_batch: int  # micro_batch x steps
    exact: bool  # the effective batch equals the target


def accumulation_plan(target_batch: int, max_micro_batch: int) -> AccumulationPlan:
    """Micro-batch and accumulation steps that keep `target_batch` when only `max_micro_batch` fits.

    Prefers an exact split (the largest divisor of the target that fits); otherwise the largest
    micro-batch with enough steps, and says the effective batch differs.
    Scale the loss by 1/steps (or average) so the gradient matches the full batch.
    """
    if target_batch < 1 or max_micro_batch < 1:
        raise ValueError("batch sizes must be at least 1")
    if max_micro_batch >= target_batch:
        return AccumulationPlan(target_batch, 1, target_batch, True)
    best = max(d for d in range(1, max_micro_batch + 1) if target_batch % d == 0)
    if best * 2 > max_micro_batch or best >= max_micro_batch // 2:
        return AccumulationPlan(best, target_batch // best, target_batch, True)
    steps = math.ceil(target_batch / max_micro_batch)
    micro = math.ceil(target_batch / steps)
    return AccumulationPlan(micro, steps, micro * steps, micro * steps == target_batch)
