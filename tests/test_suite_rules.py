"""Rules of the test suite itself."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent


def test_test_modules_import_helpers_not_conftest():
    # conftest.py is pytest's (fixtures, set-up); plain helpers are shared through helpers.py.
    pattern = re.compile(r"^\s*(from\s+\.?conftest\s+import|import\s+conftest)", re.MULTILINE)
    offenders = [p.name for p in sorted(TESTS.glob("*.py")) if pattern.search(p.read_text())]
    assert offenders == [], f"use `from helpers import ...` in {offenders}"


# ---------------------------------------------------------------- the uid mark (CI's second run, as a user)

# Asking who runs the test: the helpers for root and for another user, the ids, and the tools that
# run a command as someone else or give a file away.
ASKS_WHO_RUNS = re.compile(r"\b(needs_root|IS_ROOT|run_vram_as|AS_NOBODY|setpriv|chown)\b"
                           r"|\bos\.gete?uid\b|[\"']su[\"' ]")


def test_files_that_ask_who_runs_them_are_marked_uid():
    # CI runs the whole suite as root and then only the `uid` tests as an ordinary user: a test whose
    # result depends on who runs it and is not marked would never run as a user.
    from helpers import UID_FILES

    asking = {p.name for p in TESTS.glob("test_*.py")
              if p.name != Path(__file__).name and ASKS_WHO_RUNS.search(p.read_text())}
    assert sorted(asking - UID_FILES) == [], "add these to helpers.UID_FILES"
    assert sorted(n for n in UID_FILES if not (TESTS / n).is_file()) == [], "gone: remove from helpers.UID_FILES"


def test_the_uid_mark_goes_on_the_listed_files_and_on_tests_that_skip_for_root(tmp_path):
    import shutil
    import subprocess
    import sys

    from helpers import UID_FILES, clean_env

    for name in ("conftest.py", "helpers.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    listed = sorted(UID_FILES)[0]
    (tmp_path / listed).write_text("def test_listed():\n    pass\n")
    (tmp_path / "test_scratch.py").write_text(
        "import pytest\n"
        "from helpers import needs_root\n\n"
        "@needs_root('to run vram as another user')\n"
        "def test_needs_root():\n    pass\n\n"
        "@pytest.mark.skipif(False, reason='root may write anywhere')\n"
        "def test_not_as_root():\n    pass\n\n"
        "def test_shared(shared_dir):\n    pass\n\n"
        "def test_anyone():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--collect-only", "-q", "-m", "uid", "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, env=clean_env(), timeout=120, cwd=tmp_path)
    chosen = {line for line in proc.stdout.splitlines() if "::" in line}
    assert chosen == {f"{listed}::test_listed", "test_scratch.py::test_needs_root",
                      "test_scratch.py::test_not_as_root", "test_scratch.py::test_shared"}, proc.stdout + proc.stderr
