"""`vram status` stays fast by not importing heavy or optional packages it does not need."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import BANNED_IMPORTS, clean_env, run_vram


def _top_level(names) -> set[str]:
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("module", ["vramkit", "vramkit.cli.main", "vramkit.machine"])
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


# What `vram status` imports may cost at most this many times a bare interpreter's start (CPU
# time, best of 5 each, measured in this test). Today ~4x; an eager import of rich, psutil or the
# estimator adds 2x or more. Generous, so that a busy machine does not fail it.
IMPORT_BUDGET = 7.0


def _cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """User + system CPU seconds of one run of argv."""
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, argv
    return usage.ru_utime + usage.ru_stime


def test_status_imports_cost_a_few_bare_interpreter_starts(tmp_path):
    modules = sorted(n for n in _imported_by("status", "--simulate", "demo") if n.split(".")[0] == "vramkit")
    # Bytecode cached (in tmp_path) for both, as after an install: compiling is not importing.
    env = clean_env(PYTHONDONTWRITEBYTECODE=None, PYTHONPYCACHEPREFIX=str(tmp_path))
    bare = [sys.executable, "-c", "pass"]
    status = [sys.executable, "-c", "import " + ", ".join(modules)]
    for argv in (bare, status):  # warm-up: bytecode, page cache
        _cpu_seconds(argv, env)
    bare_best = status_best = float("inf")
    for _ in range(5):
        bare_best = min(bare_best, _cpu_seconds(bare, env))
        status_best = min(status_best, _cpu_seconds(status, env))
    ratio = status_best / max(bare_best, 1e-3)
    assert ratio <= IMPORT_BUDGET, (f"importing what `vram status` imports took {status_best * 1000:.1f} ms of CPU, "
                                    f"{ratio:.1f}x a bare python ({bare_best * 1000:.1f} ms); budget "
                                    f"{IMPORT_BUDGET}x: python -X importtime -m vramkit status --simulate demo")


def test_plain_status_leaves_the_data_output_modules_alone():
    # JSON and CSV output (render.data, with csv and datetime) load only when asked for: the
    # table is what `vram status` prints most of the time.
    data_modules = {"vramkit.render.data", "csv", "datetime", "pathlib"}
    assert not _imported_by("status", "--simulate", "demo") & data_modules
    assert "vramkit.render.data" in _imported_by("status", "--simulate", "demo", "--json")
    assert "vramkit.render.data" in _imported_by("status", "--simulate", "demo", "--csv")


def test_plain_status_leaves_the_health_view_and_glob_alone():
    # The health lines (render.info_view) are drawn only under --all, and glob is for the holders
    # scan's device minors: neither loads for a plain `vram status`.
    plain = _imported_by("status", "--simulate", "demo")
    assert not plain & {"vramkit.render.info_view", "glob"}
    # typing is for mypy only on this path (TYPE_CHECKING blocks): ~2.5 ms of every run
    assert "typing" not in plain
    assert "vramkit.render.info_view" in _imported_by("status", "--simulate", "demo", "--all")


def test_the_shim_imports_no_pathlib_and_no_typing(tmp_path):
    # Every program that loads the shim imports vramkit.nvml.shim: pathlib (and with it urllib
    # and ipaddress) is for writing the shim, not for running under it; typing is for mypy only
    # (TYPE_CHECKING blocks in nvml/ and procs), ~2.5 ms of every program on the shim.
    pytest.importorskip("pynvml")
    from vramkit.nvml.shim import write_shim

    shim = write_shim(tmp_path / "shim").parent
    src = os.path.dirname(os.path.dirname(os.path.abspath(__import__("vramkit").__file__)))
    env = clean_env(PYTHONPATH=f"{shim}{os.pathsep}{src}", VRAM_SIMULATE="demo")
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pynvml; print(pynvml.nvmlInit)"],
                            capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    names = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    assert "vramkit.nvml.shim" in names  # the shim, not another pynvml, was loaded
    assert "pathlib" not in names
    assert "typing" not in names


def test_the_collector_is_frozen_at_exit_only():
    # Interpreter shutdown would collect every object of the run twice; vram freezes them at exit
    # (an atexit handler), never while a command runs: main() called in a process leaves the
    # collector as it was until that process exits.
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('at exit', gc.get_freeze_count() > 0))\n"  # runs last: LIFO
            "from vramkit.cli.main import main\n"
            "main(['status', '--simulate', 'demo'])\n"
            "main(['status', '--simulate', 'demo'])\n"
            "print('after main', gc.get_freeze_count() > 0, gc.isenabled())\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(),
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-2:] == ["after main False True", "at exit True"]
