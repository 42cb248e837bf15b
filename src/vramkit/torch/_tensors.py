"""The one tensor tracker: every tensor storage torch creates while it is active, from its birth to
its death, and (when asked) the user's line of every tensor a torch function returns.

Its clients keep their own policies on top of it:
- estimator/trace.py: the peak and what it is made of, on fake tensors (`label`, `tag` = the phase);
- memcap.py: a capacity; `admit` raises torch.OutOfMemoryError before an operation's memory counts;
- _tracking.py (LeakDetector, oom_guard(track=True)): the user's and the library's line of each tensor.

Storages are seen at torch's dispatch (a TorchDispatchMode): every allocation, the backward pass's
too. A storage is born when an operation returns it and it is none of the operation's inputs; it
grows when an operation resizes one of its inputs (out= of another shape, resize_); it dies when
torch frees it (weakref.finalize). Sizes are rounded up to the CUDA caching allocator's 512-byte
blocks. `events=True` keeps a list of (seq, kind, serial, bytes, device, ns) for a timeline.
Tensors (`tensors=True`) are seen at torch's function level (a TorchFunctionMode): there a tensor
is the object the user's code holds, with the grad_fn autograd gave it; tensors made inside
autograd's C++ engine (.grad) are not seen.

Importing this module does not import torch; starting a tracker does.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ._common import Site, require_torch, user_sites

BLOCK = 512


def round_block(n: int) -> int:
    """The caching allocator hands out multiples of 512 bytes (at least 512)."""
    return max(BLOCK, -(-n // BLOCK) * BLOCK)


class Storage:
    """One storage's life: `born` and `died` are the tracker's sequence numbers (died None: alive)."""

    __slots__ = ("born", "device", "died", "label", "library", "nbytes", "serial", "site", "tag")

    def __init__(self, serial: int, nbytes: int, device: Any, born: int, tag: Any, label: str | None) -> None:
        self.serial, self.nbytes, self.device, self.born, self.tag, self.label = \
            serial, nbytes, device, born, tag, label
        self.died: int | None = None
        self.site: Site | None = None  # the user's line (sites=True)
        self.library: Site | None = None  # the library line below it


class Event(NamedTuple):
    seq: int
    kind: str  # "alloc", "grow" (nbytes: the growth), "free"
    serial: int
    nbytes: int
    device: Any
    ns: int  # time.perf_counter_ns()


@dataclass
class TensorRecord:
    ref: Any  # weakref to the tensor
    site: Site  # the user's line
    tag: Any  # the tracker's tag when it was made (LeakDetector: the step)
    library: Site | None = None  # the library line below the user's, if the tensor was made in one


def _leaves(value: Any, tensor: type, found: list[Any]) -> list[Any]:
    """The tensors in an operation's arguments or results: aten's schemas nest them in lists and
    tuples only (cheaper than pytree, which the dispatch of every operation would pay for)."""
    if isinstance(value, tensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, tensor):
                found.append(v)
            elif isinstance(v, (list, tuple)):
                _leaves(v, tensor, found)
    return found


def dense_storage(value: Any, torch: Any) -> Any:
    """The storage of a dense tensor with memory (None: not a tensor, meta, sparse, ...)."""
    if not isinstance(value, torch.Tensor) or value.device.type == "meta":
        return None
    try:
        return value.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


class TensorTracker:
    """See the module docstring. `held`: bytes counted as there from the start. `admit(asked)`: called
    before an operation's new bytes count (raise to refuse; grown storages are put back). `label(func,
    args)`: a label for an operation's new storages. `keep`: every Storage in `history`, dead ones too.
    `on_tensor(tensor, record)`: each tensor recorded (tensors=True)."""

    def __init__(self, *, storages: bool = True, tensors: bool = False, held: int = 0, keep: bool = False,
                 sites: bool = False, events: bool = False,
                 admit: Callable[[int], None] | None = None,
                 label: Callable[[Any, tuple[Any, ...]], str | None] | None = None,
                 on_tensor: Callable[[Any, TensorRecord], None] | None = None) -> None:
        self.storages, self.tensors, self.sites = storages, tensors, sites
        self.admit, self.label, self.on_tensor = admit, label, on_tensor
        self.live: dict[int, Storage] = {}  # id(storage) -> its record, while alive
        self.history: list[Storage] | None = [] if keep else None
        self.events: list[Event] | None = [] if events else None
        self.records: dict[int, TensorRecord] = {}  # id(tensor) -> its record, while alive
        self.current = held
        self.peak = held  # the most ever, at `peak_seq`, while `peak_tag` was the tag
        self.peak_seq = 0
        self.peak_tag: Any = None
        self.high = held  # the most since reset_high()
        self.seq = 0
        self.tag: Any = None  # stamped on what is born (trace: the phase; LeakDetector: the step)
        self.paused = 0  # while > 0 nothing new is recorded (frees of what was still count)
        self._serial = 0
        self._modes: list[Any] = []

    # ---- reading
    def reset_high(self) -> None:
        self.high = self.current

    def storage_of(self, tensor: Any) -> Storage | None:
        try:
            return self.live.get(id(tensor.untyped_storage()))
        except (RuntimeError, NotImplementedError):
            return None

    def record_of(self, tensor: Any) -> TensorRecord | None:
        record = self.records.get(id(tensor))
        return record if record is not None and record.ref() is tensor else None

    def live_tensors(self) -> list[tuple[Any, TensorRecord]]:
        out: list[tuple[Any, TensorRecord]] = []
        for record in list(self.records.values()):
            t = record.ref()
            if t is not None:
                out.append((t, record))
        return out

    # ---- starting and stopping
    @property
    def active(self) -> bool:
        return bool(self._modes)

    def start(self) -> TensorTracker:
        if not self._modes:
            classes = _mode_classes()
            self._modes = ([classes[1](self)] if self.tensors else []) + ([classes[0](self)] if self.storages else [])
            for mode in self._modes:
                mode.__enter__()
        return self

    def stop(self, exc_info: tuple[Any, Any, Any] = (None, None, None)) -> None:
        modes, self._modes = self._modes, []
        for mode in reversed(modes):
            mode.__exit__(*exc_info)

    # ---- storages
    def adopt(self, tensor: Any, label: str | None = None) -> Storage | None:
        """Count a tensor made before the tracker started (a model's parameters) as born now; a storage
        already known keeps its record (and takes `label` if it has none)."""
        storage = dense_storage(tensor, require_torch())
        if storage is None:
            return None
        record = self.live.get(id(storage))
        if record is None:
            record = self._born(storage, tensor.device, label)
        elif label and record.label is None:
            record.label = label
        return record

    def _operation(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], torch: Any) -> Any:
        """Run one operation at the dispatch level and account for the memory it made."""
        tensor = torch.Tensor
        found = _leaves(args, tensor, [])
        if kwargs:
            _leaves(tuple(kwargs.values()), tensor, found)
        inputs = {}
        for value in found:
            try:  # (a meta input's storage is no output's that counts: outputs are checked below)
                storage = value.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            inputs[id(storage)] = storage.nbytes()
        out = func(*args, **kwargs)
        if self.paused:
            return out
        new: list[tuple[Any, Any]] = []
        grown: list[tuple[Any, int]] = []
        seen: set[int] = set()
        for t in _leaves(out, tensor, []):
            storage = dense_storage(t, torch)
            if storage is None:
                continue
            key = id(storage)
            if key in seen:
                continue
            seen.add(key)
            before = inputs.get(key)
            if before is not None:
                if storage.nbytes() > before:
                    grown.append((storage, before))
            elif key not in self.live:
                new.append((storage, t.device))
        if new or grown:
            self._account(func, args, new, grown)
        return out

    def _account(self, func: Any, args: tuple[Any, ...], new: list[tuple[Any, Any]],
                 grown: list[tuple[Any, int]]) -> None:
        growth = []
        for storage, before in grown:
            more = round_block(storage.nbytes()) - (round_block(before) if before else 0)
            if more > 0:
                growth.append((storage, more))
        if self.admit is not None:
            asked = sum(round_block(s.nbytes()) for s, _ in new if s.nbytes()) + sum(n for _, n in growth)
            if asked:
                try:
                    self.admit(asked)
                except BaseException:
                    for storage, before in grown:  # the allocation failed: the storage keeps its old size
                        try:
                            storage.resize_(before)
                        except RuntimeError:
                            pass
                    raise
        label = self.label(func, args) if self.label is not None and new else None
        for storage, device in new:
            self._born(storage, device, label)
        for storage, more in growth:
            record = self.live.get(id(storage))
            if record is None:  # an input made before the tracker started: its growth is new memory
                record = self._born(storage, None, label, more)
                continue
            record.nbytes += more
            self._add(record, more, "grow")

    def _born(self, storage: Any, device: Any, label: str | None, nbytes: int | None = None) -> Storage:
        if nbytes is None:
            size = storage.nbytes()
            nbytes = round_block(size) if size else 0
        self._serial += 1
        record = Storage(self._serial, nbytes, device, self.seq + 1, self.tag, label)
        if self.sites:
            record.site, record.library = user_sites(2)
        key = id(storage)
        self.live[key] = record
        if self.history is not None:
            self.history.append(record)
        weakref.finalize(storage, self._died, key, record)
        self._add(record, nbytes, "alloc")
        return record

    def _add(self, record: Storage, nbytes: int, kind: str) -> None:
        self.seq += 1
        self.current += nbytes
        if self.current > self.high:
            self.high = self.current
        if self.current > self.peak:
            self.peak, self.peak_seq, self.peak_tag = self.current, self.seq, self.tag
        if self.events is not None:
            self.events.append(Event(self.seq, kind, record.serial, nbytes, record.device, time.perf_counter_ns()))

    def _died(self, key: int, record: Storage) -> None:
        if self.live.get(key) is record:
            del self.live[key]
        self.seq += 1
        record.died = self.seq
        self.current -= record.nbytes
        if self.events is not None:
            self.events.append(Event(self.seq, "free", record.serial, record.nbytes, record.device,
                                     time.perf_counter_ns()))

    # ---- tensors
    def _made(self, out: Any, args: tuple[Any, ...], torch: Any) -> None:
        """The tensors a torch function returned: each new one with the user's line."""
        if self.paused:
            return
        # the common cases first, without building anything: one tensor out, often an in-place op's
        # input (an optimizer's step is mostly param.mul_, exp_avg.lerp_, ...), every op pays this
        tensor = torch.Tensor
        if isinstance(out, tensor):
            outs: Any = (out,)
        elif isinstance(out, (tuple, list)):
            outs = [v for v in out if isinstance(v, tensor)]
        else:
            return
        records = self.records
        for t in outs:
            key = id(t)
            old = records.get(key)
            if old is not None and old.ref() is t:  # already recorded (an in-place op on a new tensor)
                continue
            if any(a is t for a in args):  # in-place ops return their input: not a new tensor
                continue
            site, library = user_sites(3)
            record = TensorRecord(weakref.ref(t, self._forget(key)), site, self.tag, library)
            self.records[key] = record
            if self.on_tensor is not None:
                self.on_tensor(t, record)

    def _forget(self, key: int) -> Callable[[Any], None]:
        def callback(ref: Any) -> None:
            record = self.records.get(key)
            if record is not None and record.ref is ref:
                del self.records[key]
        return callback


_CLASSES: tuple[Any, Any] | None = None


def _mode_classes() -> tuple[Any, Any]:
    """(the dispatch mode that sees storages, the function mode that sees tensors), made once."""
    global _CLASSES
    if _CLASSES is None:
        torch = require_torch()
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        class _Storages(TorchDispatchMode):  # type: ignore[misc]  # torch is Any to mypy here
            def __init__(self, tracker: TensorTracker) -> None:
                super().__init__()
                self.tracker = tracker

            def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                                   kwargs: dict[str, Any] | None = None) -> Any:
                return self.tracker._operation(func, args, kwargs or {}, torch)

        _OUTPUTS = (torch.Tensor, tuple, list)  # what can hold a new tensor (not .item()'s float, is_complex's bool)

        class _Tensors(TorchFunctionMode):  # type: ignore[misc]
            def __init__(self, tracker: TensorTracker) -> None:
                super().__init__()
                self.tracker = tracker

            def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                                   kwargs: dict[str, Any] | None = None) -> Any:
                out = func(*args, **kwargs) if kwargs else func(*args)
                tracker = self.tracker
                # every op pays for what runs here: an in-place op returning its first argument (most
                # of an optimizer's step) and a paused tracker return at once
                if tracker.paused or (args and out is args[0]) or not isinstance(out, _OUTPUTS):
                    return out
                try:
                    tracker._made(out, args, torch)
                except Exception:  # tracking must never break the user's step
                    pass
                return out

        _CLASSES = _Storages, _Tensors
    return _CLASSES
