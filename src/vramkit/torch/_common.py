"""What the helpers share: importing torch with a clear message, and where user code made a tensor."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ImportError("vramkit.torch needs PyTorch: pip install torch (from a checkout of vramkit: "
                          ".venv/bin/pip install -e '.[torch]', the 'torch' extra; vramkit is not on PyPI)") from None
    return torch


_SKIP: tuple[str, ...] | None = None


def _skip_dirs() -> tuple[str, ...]:
    global _SKIP
    if _SKIP is None:
        torch = require_torch()
        _SKIP = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _HERE + os.sep)
    return _SKIP


def user_site(depth: int = 2) -> tuple[str, int, str]:
    """(file, line, function) of the innermost frame outside torch and vramkit.torch: the user's line."""
    skip = _skip_dirs()
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(skip) and not name.startswith("<frozen"):
            return name, frame.f_lineno, frame.f_code.co_name
        frame = frame.f_back
    return "?", 0, "?"


def tensors_in(value: Any) -> Iterator[Any]:
    """The tensors an op returned: one, or several in a tuple/list."""
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v


def storage_key(t: Any) -> tuple[int, int]:
    """Tensors that share memory (views) count once."""
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except Exception:  # sparse, meta or other tensors without a plain storage
        return id(t), t.numel() * t.element_size()


def format_site(site: tuple[str, int, str]) -> str:
    file, line, func = site
    return f"{file}:{line} in {func}"
