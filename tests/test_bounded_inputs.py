"""Unbounded inputs (issue 13 item 7): a huge GPU range, an endless or huge log, deep or huge
numbers in a scenario, odd --watch intervals and environment values are each one line of
error and exit 2 (a huge log: a bounded read that says what it skipped), never a MemoryError,
a RecursionError, a traceback or a busy loop."""

from __future__ import annotations

import os

import pytest

from vramkit.cli.main import main
from vramkit.cuda_env import devices_of
from vramkit.errors import RequestError
from vramkit.select import resolve_selectors
from vramkit.units import parse_gpu_list


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

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err
    return run


def one_line_error(result: tuple[int, str, str], *needles: str) -> str:
    rc, _out, err = result
    assert rc == 2, f"exit {rc}; stderr: {err!r}"
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


# ---------------------------------------------------------------- GPU lists and ranges

@pytest.mark.parametrize("command", [
    ["status"], ["ps"], ["kill", "--dry-run", "--idle", "1h"], ["doctor"],
])
def test_a_huge_gpu_range_is_refused_before_it_is_expanded(cli, command):
    line = one_line_error(cli(*command, "--simulate", "demo", "--gpu", "0-999999999999"), "--gpu")
    assert "0-999999999999" in line and len(line) < 200


def test_gpu_lists_stop_at_a_sane_index():
    assert parse_gpu_list("0-3,7") == [0, 1, 2, 3, 7]
    with pytest.raises(ValueError, match="too large"):
        parse_gpu_list("5-999999999999")
    with pytest.raises(ValueError, match="not a GPU list"):
        parse_gpu_list("9" * 5000)  # past int()'s digit limit: still a plain one-line error
    assert len(str(pytest.raises(ValueError, parse_gpu_list, "0-" + "9" * 4000).value)) < 200


def test_pick_exclude_with_a_huge_range_names_the_first_missing_gpu(cli):
    one_line_error(cli("pick", "--simulate", "demo", "--exclude", "0-999999999"),
                   "--exclude", "no GPU 8 (this machine has GPUs 0-7)")


def test_selectors_never_expand_a_huge_range():
    import vramkit
    devices = devices_of(vramkit.snapshot(simulate="demo"))
    for text in ("0-999999999999", "999999999-9999999999", "7-" + "9" * 150, "9" * 5000, "²"):
        with pytest.raises(RequestError):
            resolve_selectors(text, devices, "exclude")
