"""`vram status` stays fast by not importing heavy or optional packages it does not need."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import BANNED_IMPORTS, clean_env, run_vram


def _top_level(names) -> set[str]:
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("module", ["vramkit", "vramkit.cli.main", "vramkit.snapshot"])
def test_importing_the_package_imports_nothing_heavy(module):
    code = f"import {module}, sys; print('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert proc.returncode == 0, proc.stderr
    loaded = _top_level(proc.stdout.split())
    assert module in proc.stdout.split()
    assert not loaded & set(BANNED_IMPORTS)


def _imported_by(*args: str) -> set[str]:
    """Every module `vram ARGS` imports, from `python -X importtime` (one line per import)."""
    result = run_vram(*args, python_flags=("-X", "importtime"))
    assert result.rc == 0, result.err
    names = set()
    for line in result.err.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                names.add(name)
    assert "vramkit.cli.main" in names  # the parse worked
    return names


@pytest.mark.parametrize("args", [
    ("status", "--simulate", "demo"),
    ("status", "--simulate", "demo", "--json"),
    ("ps", "--simulate", "faulty"),
    ("status", "--simulate", "mig", "--csv"),
])
def test_simulated_commands_import_nothing_heavy(args):
    names = _imported_by(*args)
    assert not _top_level(names) & set(BANNED_IMPORTS), sorted(n for n in names if n.split(".")[0] in BANNED_IMPORTS)


def test_simulation_does_not_need_pynvml():
    # The simulator mirrors pynvml's constants and errors (nvml/compat.py) instead of importing it.
    names = _imported_by("status", "--simulate", "demo")
    assert "vramkit.nvml.compat" in names and "pynvml" not in names
