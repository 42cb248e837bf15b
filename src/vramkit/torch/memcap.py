"""simulated_memory_cap(bytes): a GPU's memory limit on any machine, for trying code that must
adapt to it (find_batch_size, an OOM handler) without a GPU.

    with simulated_memory_cap(2 * 1024**3, held=model) as cap:
        result = find_batch_size(train_step)      # measures and searches as it would on CUDA
    cap.peak                                      # the most bytes allocated while it was active

While active, every tensor storage a torch operation creates is counted, from its creation until
it is freed (views share their storage; tensors saved for backward count while the graph keeps
them; an out= buffer or resize_ that grows a storage counts the growth), rounded up to the CUDA
caching allocator's 512-byte blocks. An operation whose new storages would take the total past
the capacity raises torch.OutOfMemoryError, with the message CUDA would give (parsed by oom_guard
and `vram doctor` like a real one); its outputs are dropped.

What it counts: allocations made while it is active, plus `held` (bytes, or a module whose
parameters and buffers count as already there, as a model's weights on the GPU). What it does not
model: the caching allocator's reserved-but-free memory and fragmentation, kernel workspaces, the
CUDA context; a real GPU therefore fails somewhat earlier than the same number here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from ..errors import RequestError
from ..i18n import _
from ._common import require_torch, storage_key
from ._tensors import TensorTracker, round_block

_ACTIVE: list[SimulatedMemoryCap] = []


def active_cap() -> SimulatedMemoryCap | None:
    """The innermost simulated_memory_cap in force, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def _torch_size(n: int) -> str:
    """Sizes as CUDA's own OOM message writes them (c10's format_size)."""
    if n <= 1024:
        return f"{n} bytes"
    for unit, scale in (("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3)):
        if n < scale * 1024 or unit == "GiB":
            return f"{n / scale:.2f} {unit}"
    raise AssertionError("unreachable")


def _held_bytes(held: Any) -> int:
    if isinstance(held, int) and not isinstance(held, bool):
        if held < 0:
            raise RequestError(_("must be 0 or more bytes"), param="held")
        return held
    if hasattr(held, "parameters") and hasattr(held, "buffers"):
        storages = {storage_key(t) for t in (*held.parameters(), *held.buffers())}
        return sum(round_block(nbytes) for __, nbytes in storages if nbytes)
    raise RequestError(_("a number of bytes or an nn.Module, not {type}").format(type=type(held).__name__),
                       param="held")


class SimulatedMemoryCap:
    """A context manager; `capacity`, `current` (bytes counted now), `peak` (since the last reset).
    memcap's policy on the one tensor tracker (_tensors.py): `admit` refuses what does not fit."""

    def __init__(self, capacity: int, held: Any = 0, device: int = 0) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise RequestError(_("a positive number of bytes, not {value}").format(value=repr(capacity)),
                               param="capacity")
        if isinstance(device, bool) or not isinstance(device, int) or device < 0:  # printed in the OOM message
            raise RequestError(_("a CUDA device number (0, 1, ...), not {value}").format(value=repr(device)),
                               param="device")
        self.capacity, self.device = capacity, device
        self.held = _held_bytes(held)
        if self.held > capacity:
            raise RequestError(_("{held} held is more than the {capacity} capacity").format(
                held=_torch_size(self.held), capacity=_torch_size(capacity)), param="held")
        self.ooms = 0  # out-of-memory errors raised
        self._tracker = TensorTracker(held=self.held, admit=self._admit)

    @property
    def current(self) -> int:
        return self._tracker.current

    @property
    def peak(self) -> int:
        return self._tracker.high

    # ---- the peak counters find_batch_size reads (as torch.cuda's reset_peak / max_memory_allocated)
    def reset_peak(self) -> None:
        self._tracker.reset_high()

    def max_allocated(self) -> int:
        return self.peak

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Storages made meanwhile are not counted, nor their frees: host copies, for instance."""
        self._tracker.paused += 1
        try:
            yield
        finally:
            self._tracker.paused -= 1

    def __enter__(self) -> SimulatedMemoryCap:
        if self._tracker.active:
            raise RuntimeError("simulated_memory_cap is already active")
        self._tracker.start()
        _ACTIVE.append(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self._tracker.stop((exc_type, exc, tb))

    def _admit(self, asked: int) -> None:
        """Raise as CUDA would when an operation's new memory does not fit (its outputs are dropped)."""
        current = self._tracker.current
        if current + asked > self.capacity:
            self.ooms += 1
            torch = require_torch()
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {_torch_size(asked)}. GPU {self.device} has a total "
                f"capacity of {_torch_size(self.capacity)} of which {_torch_size(self.capacity - current)} "
                f"is free. Of the allocated memory {_torch_size(current)} is allocated by PyTorch, and "
                "0 bytes is reserved by PyTorch but unallocated. (simulated: vramkit.torch.simulated_memory_cap)")


def simulated_memory_cap(capacity: int, *, held: Any = 0, device: int = 0) -> SimulatedMemoryCap:
    """A memory limit of `capacity` bytes on the tensors torch creates while it is active; see the
    module docstring. `held`: bytes (or an nn.Module's parameters and buffers) already taken."""
    require_torch()
    return SimulatedMemoryCap(capacity, held, device)
