"""No NVIDIA driver (this test machine, or a scenario that says so), no subcommand, bad usage."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    ESCAPE,
    assert_one_line_error,
    clean_env,
    has_nvidia_driver,
    minimal_scenario,
    run_vram,
    status_blocks,
    strip_ansi,
    vram_argv,
)

needs_no_driver = pytest.mark.skipif(has_nvidia_driver(), reason="this machine has an NVIDIA driver")
NO_DRIVER = "vram: no NVIDIA driver found"


def assert_no_driver(result, command: str = "status") -> None:
    assert result.rc == 1, result.err
    assert result.out == ""
    assert "Traceback" not in result.err
    lines = result.err_lines
    assert len(lines) == 2, lines
    assert lines[0].startswith(NO_DRIVER)
    assert f"vram {command} --simulate demo" in lines[1]


@needs_no_driver
def test_status_without_a_driver():
    assert_no_driver(run_vram("status"))


@needs_no_driver
def test_bare_vram_without_a_driver():
    assert_no_driver(run_vram())


@needs_no_driver
@pytest.mark.parametrize("args", [("--json",), ("--csv",), ("--gpu", "0")])
def test_status_options_without_a_driver(args):
    assert_no_driver(run_vram("status", *args))


@needs_no_driver
def test_ps_without_a_driver():
    # This used to exit 1 without a word.
    assert_no_driver(run_vram("ps"), "ps")


@needs_no_driver
def test_run_without_a_driver_names_the_command_not_its_argv():
    # `run`'s command line once shared the attribute the CLI keeps the subcommand in, and the
    # hint printed a Python list: "vram ['--', 'python', 'train.py'] --simulate demo".
    result = run_vram("run", "-n", "2", "--", "python", "train.py")
    assert_no_driver(result, "run")
    assert "[" not in result.err


@needs_no_driver
def test_empty_vram_simulate_means_the_real_driver():
    assert_no_driver(run_vram("status", env=clean_env(VRAM_SIMULATE="")))


@needs_no_driver
def test_debug_adds_the_traceback_for_a_missing_driver():
    result = run_vram("status", "--debug")
    assert result.rc == 1 and result.err.startswith("Traceback") and "NvmlUnavailable" in result.err
    assert result.err_lines[-2].startswith(NO_DRIVER) and "vram status --simulate demo" in result.err_lines[-1]


def _answer_prompt(answer: bytes, timeout: float = 20) -> tuple[int, str]:
    """Run `vram status` on a terminal (stdin and stdout) with no driver; answer its question."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(vram_argv("status"), stdin=slave, stdout=slave, stderr=slave, env=clean_env())
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    answered = False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                out += data
            if not answered and b"[Y/n]" in out:
                os.write(master, answer)
                answered = True
            if proc.poll() is not None and not ready:
                break
        rc = proc.wait(timeout=5)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert answered, out
    return rc, out.decode(errors="replace").replace("\r\n", "\n")


@needs_no_driver
def test_terminal_user_may_decline_the_simulation():
    rc, out = _answer_prompt(b"n\n")
    assert rc == 1
    assert NO_DRIVER in out and "SIMULATED" not in out and "Traceback" not in out
    # Declined: still told how to try it later (this hint was missing after "n").
    after = out[out.index("[Y/n]"):]
    assert "vram status --simulate demo" in after, out


@needs_no_driver
def test_terminal_user_may_accept_the_simulation():
    rc, out = _answer_prompt(b"\n")  # Enter: the default is yes
    assert rc == 0
    assert "SIMULATED" in out and "demo" in out
    shown = strip_ansi(out)
    assert sorted(status_blocks(shown[shown.index("SIMULATED"):])) == list(range(8))


# ---------------------------------------------------------------- a simulated machine without a driver

@pytest.mark.slow
@pytest.mark.parametrize("fault, words", [("missing", "no NVIDIA driver found"), ("not_loaded", "not loaded")])
def test_scenario_without_a_driver(write_scenario, fault, words):
    data = minimal_scenario()
    data["faults"] = {"driver": fault}
    path = str(write_scenario(data))
    for command in ("status", "ps"):
        line = assert_one_line_error(run_vram(command, "--simulate", path), 1, words)
        # Already simulating: no advice to simulate.
        assert "--simulate" not in line


@needs_no_driver
def test_scenario_without_a_driver_says_what_the_real_machine_says(write_scenario):
    data = minimal_scenario()
    data["faults"] = {"driver": "missing"}
    simulated = run_vram("status", "--simulate", str(write_scenario(data)))
    real = run_vram("status")
    assert simulated.err_lines[0] == real.err_lines[0]
    assert simulated.rc == real.rc == 1


# ---------------------------------------------------------------- no subcommand, bad usage

def test_bare_vram_runs_status():
    env = clean_env(COLUMNS="200")
    bare = run_vram("--simulate", "demo", env=env)
    status = run_vram("status", "--simulate", "demo", env=env)
    assert bare.rc == status.rc == 0
    # The banner has the time of day; everything under it must be the same.
    assert bare.out.splitlines()[1:] == status.out.splitlines()[1:]
    assert "SIMULATED" in bare.out.splitlines()[0]


def test_bare_vram_with_simulate_from_the_environment():
    result = run_vram(env=clean_env(VRAM_SIMULATE="demo"))
    assert result.rc == 0 and "SIMULATED" in result.out


def test_global_options_before_the_subcommand():
    rows = run_vram("--simulate", "demo", "ps", "--json").json()["processes"]
    assert len(rows) == 9


@pytest.mark.parametrize("args, needles", [
    (("status", "--bogus"), ["--bogus"]),
    (("--bogus",), ["--bogus"]),
    (("nosuchcommand",), ["nosuchcommand"]),
    (("status", "--watch", "soon"), ["--watch"]),
    (("ps", "--sort"), ["--sort"]),
    (("status", "--simulate"), ["--simulate"]),
])
def test_bad_usage(args, needles):
    line = assert_one_line_error(run_vram(*args, "--simulate", "demo")
                                 if "--simulate" not in args else run_vram(*args), 2, *needles)
    assert "--help" in line  # where to look next


@pytest.mark.parametrize("args", [(), ("status",), ("ps",), ("sim",)])
def test_help_has_examples(args):
    result = run_vram(*args, "--help")
    assert result.rc == 0 and result.err == ""
    assert "example" in result.out
    assert ESCAPE not in result.out


def test_version():
    result = run_vram("--version")
    assert result.rc == 0
    assert result.out.strip().startswith("vram ")


def test_json_on_no_driver_is_not_printed(write_scenario):
    # A script reading --json must not get half a document when the driver is missing.
    data = minimal_scenario()
    data["faults"] = {"driver": "missing"}
    result = run_vram("status", "--json", "--simulate", str(write_scenario(data)))
    assert result.rc == 1 and result.out == ""


# ---------------------------------------------------------------- make run, as the README says

REPO = Path(__file__).resolve().parent.parent


def _make_run(tmp_path: Path, *make_args: str) -> subprocess.CompletedProcess[str]:
    """`make run` in this checkout with its .venv replaced by an installed-looking one whose
    `vram` is this interpreter's vramkit (so nothing is installed)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    vram = venv / "bin" / "vram"
    vram.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vramkit "$@"\n')
    vram.chmod(0o755)
    (venv / ".installed").touch()  # newer than pyproject.toml: nothing to install
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "run",
                           f"VENV={venv}", f"BIN={venv / 'bin'}", *make_args],
                          capture_output=True, text=True, env=clean_env(), timeout=60,
                          stdin=subprocess.DEVNULL)


needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


@needs_no_driver
@needs_make
def test_make_run_without_a_driver_ends_with_vrams_words_not_makes(tmp_path):
    # It used to end with "make: *** [Makefile:23: run] Error 1" after vram's own two lines.
    result = _make_run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "make:" not in result.stderr and "Error" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(NO_DRIVER) and lines[-1].endswith("vram status --simulate demo"), lines


@needs_make
def test_make_run_still_fails_on_bad_args(tmp_path):
    result = _make_run(tmp_path, "ARGS=--no-such-flag")
    assert result.returncode != 0
    assert "unrecognized arguments: --no-such-flag" in result.stderr
    assert "Error 2" in result.stderr


@needs_make
def test_make_run_shows_the_simulated_server(tmp_path):
    result = _make_run(tmp_path, "ARGS=--simulate demo --gpu 0")
    assert result.returncode == 0, result.stderr
    assert "SIMULATED" in result.stdout and result.stderr == ""
