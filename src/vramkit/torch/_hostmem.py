"""This process's host memory: resident pages and the C heap's bytes in use.

A leaked autograd graph (`total_loss += loss`) keeps only its nodes once backward has freed the
tensors they saved: C++ objects on the heap, a few hundred bytes each, which Python cannot size
one by one. The heap's bytes in use (glibc's mallinfo2) is where they show; the resident size
grows far more, because long-lived nodes left among a step's freed activations keep those heap
pages from going back to the OS (measured on a tiny BERT: heap +87 KiB a step, RSS +2.2 MiB a
step at batch 16 and +9.6 MiB at batch 64). Both are the whole process's, not one variable's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache
from typing import Any


def rss_bytes() -> int | None:
    """This process's resident memory now (Linux /proc/self/statm: pages)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read(200).split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


@cache
def _mallinfo2() -> Any:
    """glibc's mallinfo2 (2.33 on), or None (musl, macOS, older glibc)."""
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name).mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    function.restype, function.argtypes = _MallInfo2, []
    return function


def heap_bytes() -> int | None:
    """The C heap's bytes in use now (small blocks in the arenas plus mmap'd large ones), or None
    where the C library does not say."""
    function = _mallinfo2()
    if function is None:
        return None
    info = function()
    return int(info.uordblks + info.hblkhd)
