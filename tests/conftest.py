"""Fixtures for the whole suite, and the suite's pytest set-up (the `slow` marker, and a summary
line counting the torch tests that did not run because torch is not installed).

The plain helpers the fixtures use (and test modules import) are in helpers.py:
`from helpers import run_vram, ...`.
"""

from __future__ import annotations

import ast
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import Children, Groups, Leasing, Served, Strays, run_vram


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: takes a second or more (real waiting, many processes); "
                   "`make test-fast` leaves these out (-m 'not slow'), `make test` runs them")
    # Started in the background by a shell without job control (`make test &`, nohup, CI
    # wrappers), pytest inherits SIGINT ignored, and every `vram` it starts would ignore Ctrl-C
    # too; the tests that interrupt `vram run` need the ordinary disposition. A Python-level
    # handler here is reset to the default in every child at exec.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# ---------------------------------------------------------------- torch tests that did not run

TORCH_MISSING = "could not import 'torch'"  # pytest.importorskip's reason


def _count_tests(path: Path, config: pytest.Config) -> int:
    """How many tests a module skipped whole (pytest.importorskip at import) would have run,
    read from its source: each test function times its parametrize cases, where the values are
    literals or module-level literals (a case list it cannot read counts as one)."""
    tree = ast.parse(path.read_text())
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    fast = "not slow" in (config.option.markexpr or "")  # make test-fast deselects these anyway
    if fast and "pytestmark = pytest.mark.slow" in path.read_text():
        return 0

    def cases(values: ast.expr) -> int:
        if isinstance(values, ast.Call) and isinstance(values.func, ast.Name) and values.args \
                and values.func.id in ("list", "tuple", "sorted"):
            values = values.args[0]
        if isinstance(values, ast.Name) and isinstance(constants.get(values.id), (list, tuple, dict, set)):
            return len(constants[values.id])
        try:
            return len(ast.literal_eval(values))
        except (ValueError, TypeError):
            return 1

    def count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
        n = 1
        for deco in fn.decorator_list:
            if fast and isinstance(deco, ast.Attribute) and deco.attr == "slow":
                return 0
            if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) \
                    and deco.func.attr == "parametrize" and len(deco.args) >= 2:
                n *= cases(deco.args[1])
        return n

    total = 0
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            total += count(node)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            total += sum(count(f) for f in node.body
                         if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test"))
    return total


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Without torch, "N passed, 4 skipped" hid ~100 torch tests (whole modules skip as one):
    say how many did not run, and how CI installs torch."""
    missing = 0
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if not (isinstance(longrepr, tuple) and TORCH_MISSING in str(longrepr[-1])):
            continue
        if isinstance(report, pytest.CollectReport):  # a whole module
            missing += _count_tests(Path(str(config.rootpath)) / report.nodeid, config)
        else:
            missing += 1
    if missing:
        # Counted in pytest's last line too: "912 passed, 4 skipped, 107 torch tests not run".
        terminalreporter.stats.setdefault("torch tests not run", []).extend([None] * missing)
        terminalreporter.write_line(
            f"{missing} torch test{'s' if missing != 1 else ''} did not run: torch is not installed "
            "(.venv/bin/pip install torch==2.13.0, as .ci/run does)", yellow=True, bold=True)


# ---------------------------------------------------------------- running the command

@pytest.fixture
def vram():
    """`vram("status", "--json")` -> Result; the environment is clean unless `env=` is given."""
    return run_vram


# ---------------------------------------------------------------- scenarios

@pytest.fixture
def write_scenario(tmp_path):
    """write_scenario(data or text, name="s.json") -> path of a scenario file under tmp_path."""
    def write(data: Any, name: str = "scenario.json") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path
    return write


# ---------------------------------------------------------------- real processes

@pytest.fixture
def kill_sandbox(monkeypatch, tmp_path):
    """For the kill library's tests: no user protection list, the audit log in tmp_path, the
    simulated clock pinned."""
    for key in ("VRAM_SIMULATE", "VRAM_SIM_EPOCH", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VRAM_AUDIT_LOG", str(tmp_path / "audit.log"))


@pytest.fixture
def cli(monkeypatch, tmp_path, capsys):
    """cli(*argv) -> (exit code, stdout, stderr) of `vram ARGV` run in this process, in a clean,
    private environment (simulated clock at t=0, leases, audit log and config under tmp_path)."""
    for key in list(os.environ):
        if key.startswith("VRAM_") or key in ("NO_COLOR", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    monkeypatch.setenv("VRAM_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("VRAM_AUDIT_LOG", str(tmp_path / "audit.log"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    from vramkit.cli.main import main

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err
    return run


@pytest.fixture
def children():
    kids = Children()
    try:
        yield kids
    finally:
        kids.cleanup()


@pytest.fixture
def shared_dir():
    """A directory every user may read and write (pytest's tmp_path is root-only): scenario
    files and audit logs for vram run as another user. Removed at teardown."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="vramkit-test-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def strays():
    kept = Strays()
    try:
        yield kept
    finally:
        kept.cleanup()


# ---------------------------------------------------------------- vram pick / vram run: leases, launchers

@pytest.fixture
def leasing(tmp_path) -> Leasing:
    return Leasing(tmp_path / "leases")


@pytest.fixture
def groups():
    kept = Groups()
    try:
        yield kept
    finally:
        kept.cleanup()


# ---------------------------------------------------------------- vram serve

@pytest.fixture
def served():
    started: list[Served] = []

    def start(*args: str, **kw: Any) -> Served:
        """A `vram serve ARGS` process on a free port (helpers.Served); killed at teardown."""
        s = Served(*args, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


@pytest.fixture
def sim_env(monkeypatch):
    """The simulator in-process at a pinned scenario time, untouched by the runner's environment."""
    for key in ("VRAM_SIMULATE", "VRAM_SIM_EPOCH", "NO_COLOR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
