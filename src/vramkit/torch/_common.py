"""What the helpers share: importing torch with a clear message, where user code made a tensor,
and sizes small enough to need bytes and KiB."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator
from types import FrameType
from typing import Any

from ..units import format_size

_HERE = os.path.dirname(os.path.abspath(__file__))


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        from ..i18n import _
        from ..install_hint import install_hint

        raise ImportError(_("vramkit.torch needs PyTorch: {command}").format(command=install_hint("torch"))) from None
    return torch


# Where a frame's code lives: torch and vramkit.torch are never named; libraries (site-packages,
# the standard library) are named as "the library line"; everything else is the user's own code.
_SKIP, _LIBRARY, _USER = 0, 1, 2
_KINDS: dict[str, int] = {}
_PREFIXES: tuple[tuple[str, ...], tuple[str, ...]] | None = None
_LIBRARY_PARTS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def _prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    global _PREFIXES
    if _PREFIXES is None:
        torch = require_torch()
        skip = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _HERE + os.sep)
        paths = sysconfig.get_paths()
        library = {os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")
                   if paths.get(k)}
        _PREFIXES = skip, tuple(sorted(library, key=len, reverse=True))  # the most specific first
    return _PREFIXES


def _kind(filename: str) -> int:
    kind = _KINDS.get(filename)
    if kind is None:
        skip, library = _prefixes()
        if filename.startswith(skip) or filename.startswith("<frozen"):
            kind = _SKIP
        elif filename.startswith(library) or any(part in filename for part in _LIBRARY_PARTS):
            kind = _LIBRARY
        else:
            kind = _USER
        _KINDS[filename] = kind
    return kind


Site = tuple[str, int, str]  # (file, line, function)


def frame_is_ours(frame: FrameType) -> bool:
    """A frame of torch or of vramkit.torch: never the user's line, never the user's variables."""
    return _kind(frame.f_code.co_filename) == _SKIP


def in_vramkit_torch(filename: str) -> bool:
    """A file of vramkit.torch itself (simulated_memory_cap raising, a callback's wrapper): never
    where the user's job failed."""
    return filename.startswith(_HERE + os.sep)


def user_sites(depth: int = 2) -> tuple[Site, Site | None]:
    """The innermost frame of the user's own code (outside torch, vramkit.torch and installed
    libraries), and the innermost library frame below it (e.g. modeling_bert.py), if any.
    Without a user frame, the innermost library frame stands in for it."""
    frame: FrameType | None = sys._getframe(depth)
    library: Site | None = None
    while frame is not None:
        code = frame.f_code
        kind = _kind(code.co_filename)
        if kind == _USER:
            return (code.co_filename, frame.f_lineno, code.co_name), library
        if kind == _LIBRARY and library is None:
            library = (code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return (library or ("?", 0, "?")), None


def user_site(depth: int = 2) -> Site:
    """(file, line, function) of the innermost frame of the user's own code."""
    return user_sites(depth + 1)[0]


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


def format_site(site: Site) -> str:
    """'train.py:42 in main'; a library's file from its package on ('transformers/models/bert/...')."""
    file, line, func = site
    if _KINDS.get(file) == _LIBRARY:
        for prefix in _prefixes()[1]:
            if file.startswith(prefix):
                file = file[len(prefix):]
                break
        else:
            for part in _LIBRARY_PARTS:
                if part in file:
                    file = file.split(part, 1)[1]
                    break
    return f"{file}:{line} in {func}"


def format_bytes(n: int) -> str:
    """Sizes of single tensors: '48 B', '3.5 KiB', then units.format_size ('12MiB', '1.5GiB'),
    so that a few small tensors never read as 0MiB."""
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KiB"
    return format_size(n)
