"""The suite's own summary: without torch, the torch tests that did not run are counted, not
hidden in "4 skipped" (whole modules skip as one)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

TESTS = Path(__file__).parent
TORCH_MODULES = ("test_torch_helpers.py", "test_trace_memory.py", "test_trace_agreement.py")


def _pytest(*args: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
                           *(str(TESTS / m) for m in TORCH_MODULES)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=TESTS.parent)
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_summary_counts_the_torch_tests_that_did_not_run(tmp_path):
    hidden = tmp_path / "torch"  # an import of torch fails as if it were not installed
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    out = _pytest("-q", env=clean_env(PYTHONPATH=str(tmp_path)))
    last = out.strip().splitlines()[-1]
    match = re.search(r"(\d+) torch tests not run", last)
    assert match, out
    missing = int(match.group(1))
    assert f"{missing} torch tests did not run: torch is not installed" in out
    assert "pip install torch==2.13.0" in out
    if importlib.util.find_spec("torch") is None:
        assert missing >= 100
        return
    collected = re.search(r"(\d+) tests? collected", _pytest("--collect-only", "-q", env=clean_env()))
    assert collected and missing == int(collected.group(1))


def test_no_torch_line_when_nothing_is_missing():
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(TESTS / "test_units.py")], capture_output=True, text=True,
                         env=clean_env(), timeout=120, cwd=TESTS.parent).stdout
    assert "torch" not in out and " passed" in out
