"""Modules you can call: `vramkit.kill(...)` and `vramkit.estimate(...)` run a function while
`vramkit.kill` and `vramkit.estimate` stay modules. Importing a submodule rebinds the package
attribute to the module, so a plain function there would not last; a callable module keeps
both, and lets `vramkit` load the module only when it is used."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

TYPE_CHECKING = False  # typing stays off the status path (issue 19); mypy reads the import below
if TYPE_CHECKING:
    from typing import Any


def make_callable(module_name: str, target: Callable[[], Callable[..., Any]]) -> None:
    """Calling the module `module_name` calls target()(...); target is looked up at call time,
    so it may import what it needs lazily."""

    class CallableModule(ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return target()(*args, **kwargs)

    CallableModule.__name__ = CallableModule.__qualname__ = f"CallableModule[{module_name}]"
    sys.modules[module_name].__class__ = CallableModule
