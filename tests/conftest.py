"""Fixtures for the whole suite, and the suite's pytest set-up (the `slow` marker).

The plain helpers the fixtures use (and test modules import) are in helpers.py:
`from helpers import run_vram, ...`.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import Children, Groups, Leasing, Strays, run_vram


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
