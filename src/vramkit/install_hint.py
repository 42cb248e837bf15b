"""How to install an optional part, said the way this vramkit was installed.

vramkit is not on a package index, so "pip install 'vramkit[serve]'" names nothing a user can
fetch. The hint follows the installation at hand: the system-wide one (scripts/install-system.sh
leaves INSTALLED in its virtual environment), an editable checkout (its own extra), or else the
packages themselves into the interpreter that runs vram. Only error paths import this module.
"""

from __future__ import annotations

import os
import sys

from .i18n import _, pgettext

# extra -> the packages it brings (pyproject.toml's [project.optional-dependencies])
EXTRAS = {"tui": ("textual",), "serve": ("prometheus-client", "pyyaml", "bcrypt"), "torch": ("torch",),
          "plot": ("matplotlib",), "nvml": ("nvidia-ml-py",),
          "trainers": ("transformers", "accelerate", "lightning", "peft")}


def _checkout() -> str | None:
    """The source checkout this vramkit runs from (an editable install), or None."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../src
    root = os.path.dirname(src)
    if os.path.basename(src) == "src" and os.path.isfile(os.path.join(root, "pyproject.toml")):
        return root
    return None


def install_hint(extra: str) -> str:
    """The command that installs `extra`'s packages for this vramkit, e.g.
    ".venv/bin/pip install -e '.[serve]'" from a checkout."""
    import shlex

    packages = " ".join(EXTRAS[extra])
    if os.path.isfile(os.path.join(sys.prefix, "INSTALLED")):  # scripts/install-system.sh's venv
        if extra == "nvml":  # a dependency of the core: the install itself is broken
            return f"sudo {shlex.quote(os.path.join(sys.prefix, 'bin', 'pip'))} install {packages}"
        return _("{command} (from the checkout it was installed from)").format(
            command=f"sudo scripts/install-system.sh --extras {extra}")
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    checkout = _checkout()
    if checkout is not None and extra != "nvml":
        here = os.path.abspath(os.getcwd()) == checkout
        target = f"'.[{extra}]'" if here else shlex.quote(f"{checkout}[{extra}]")
        return f"{pip} -e {target}"
    return f"{pip} {packages}"


def _findable(module: str) -> bool:
    """Whether the top-level `module` is loaded or can be: what importlib.util.find_spec asks of
    sys.meta_path's finders (an editable install's included), without importing importlib.util
    (~40 KiB of vram top's memory, for this one question)."""
    if module in sys.modules:
        return True
    return any(getattr(finder, "find_spec", None) is not None and finder.find_spec(module, None) is not None
               for finder in sys.meta_path)


def require(module: str, extra: str, what: str) -> None:
    """Raise a one-line RequestError naming how to install `extra` when `module` is missing: asked
    before the work starts (vram top draws a frame before Textual loads)."""
    # sys.modules[name] = None is how an import is blocked (and how a test takes a package away)
    if (module in sys.modules and sys.modules[module] is None) or not _findable(module):
        from .errors import RequestError

        raise RequestError(_("{what} needs {packages} (vramkit's '{extra}' extra): {command}").format(
            what=what, packages=pgettext("list", " and ").join(EXTRAS[extra]), extra=extra,
            command=install_hint(extra)))
