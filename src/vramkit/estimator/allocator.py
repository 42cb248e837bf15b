"""A model of PyTorch's CUDA caching allocator, to replay a sequence of allocations and frees and
see what it leaves reserved: segments the allocator took from CUDA and never gives back (nothing
does, short of `torch.cuda.empty_cache()`), so `max_memory_reserved` counts them even after
`reset_peak_memory_stats`.

What is modelled (c10/cuda/CUDACachingAllocator.cpp with its default settings, one stream):
- requests rounded up to 512 bytes;
- two pools: blocks of at most 1 MiB come from 2 MiB segments; larger ones from 20 MiB segments
  (requests under 10 MiB) or from a segment of their own size rounded up to 2 MiB;
- best fit: the smallest free block of the pool that holds the request, split when what is left
  is at least 512 bytes (small pool) or more than 1 MiB (large pool);
- a freed block merges with free neighbours of its segment; segments are never released.
Not modelled: several streams (each has its own blocks), `max_split_size_mb`,
`expandable_segments`, and the release of cached segments when cudaMalloc fails.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20  # largest request of the small pool
SMALL_SEGMENT = 2 << 20
LARGE_SEGMENT = 20 << 20  # for large requests under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20

# an allocation (key, bytes) or a free (key, None), in program order
Event = tuple[int, "int | None"]


def round_request(nbytes: int) -> int:
    return MIN_BLOCK if nbytes < MIN_BLOCK else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(size: int) -> int:
    """The cudaMalloc the allocator makes when no cached block holds a request of `size` bytes."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(eq=False)
class _Block:
    size: int
    address: int
    small: bool
    prev: _Block | None = None
    next: _Block | None = None
    free: bool = True


class CachingAllocator:
    def __init__(self) -> None:
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # (size, address), sorted
        self._at: dict[int, _Block] = {}  # address -> free block
        self._live: dict[int, _Block] = {}  # key -> allocated block
        self._next_address = 0
        self.reserved = 0
        self.allocated = 0
        self.peak_allocated = 0

    def malloc(self, key: int, nbytes: int) -> None:
        size = round_request(nbytes)
        small = size <= SMALL_SIZE
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):  # best fit: the smallest cached block that holds it (lowest address on a tie)
            block = self._at.pop(pool.pop(i)[1])
        else:
            block = _Block(segment_size(size), self._next_address, small)
            self._next_address += block.size + SMALL_SEGMENT  # segments are never adjacent
            self.reserved += block.size
        rest = block.size - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            tail = _Block(rest, block.address + size, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._cache(tail)
        block.free = False
        self._live[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: int) -> None:
        block = self._live.pop(key)
        self.allocated -= block.size
        block.free = True
        prev, nxt = block.prev, block.next
        if prev is not None and prev.free:
            self._uncache(prev)
            prev.size += block.size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        if nxt is not None and nxt.free:
            self._uncache(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        self._cache(block)

    def _cache(self, block: _Block) -> None:
        bisect.insort(self._free[block.small], (block.size, block.address))
        self._at[block.address] = block

    def _uncache(self, block: _Block) -> None:
        pool = self._free[block.small]
        del pool[bisect.bisect_left(pool, (block.size, block.address))]
        del self._at[block.address]


def replay(events: Iterable[Event]) -> CachingAllocator:
    allocator = CachingAllocator()
    for key, nbytes in events:
        if nbytes is None:
            allocator.free(key)
        else:
            allocator.malloc(key, nbytes)
    return allocator


__all__ = ["CachingAllocator", "Event", "replay", "round_request", "segment_size"]
