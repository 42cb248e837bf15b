"""Real processes on the simulated GPUs ("source": "real"): their host side comes from /proc,
and when they exit the simulated driver frees their memory, as the real one does."""

from __future__ import annotations

import os
import pwd
import sys
import time
import uuid

import pytest
from helpers import ESCAPE, clean_env, cmdline, proc_state, run_vram, sanitized, wait_for

GiB = 1024**3


def real_scenario(placements: dict[int, dict[str, str]]) -> dict:
    """Two GPUs; {pid: {"0": "1GiB"}} puts real pids on them."""
    return {
        "name": "real",
        "gpus": [{"uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}", "pci_bus_id": f"00000000:0{i}:00.0",
                  "memory_total": "40GiB", "utilization": 30} for i in range(2)],
        "processes": [{"pid": pid, "source": "real", "gpus": gpus} for pid, gpus in placements.items()],
    }


def ps_rows(path) -> list[dict]:
    return run_vram("ps", "--simulate", str(path), "--json").json()["processes"]


def status(path) -> dict:
    return run_vram("status", "--simulate", str(path), "--json").json()


def python_child(children, *argv: str, code: str = "import time; time.sleep(600)"):
    """A python child sleeping with a distinctive argv; returns (Popen, its argv as /proc shows it)."""
    full = [sys.executable, "-c", code, *argv]
    return children.start(full), full


def wait_exec(proc, argv: list[str]) -> None:
    want = ("\0".join(argv) + "\0").encode()
    assert wait_for(lambda: cmdline(proc.pid) == want), cmdline(proc.pid)


@pytest.mark.slow
def test_real_processes_show_their_host_side(children, write_scenario):
    marker = f"vramkit-test-{uuid.uuid4().hex[:8]}"
    sleeper = children.start(["sleep", "600"])
    started = time.time()
    py, py_argv = python_child(children, marker, "--epochs", "3")
    wait_exec(sleeper, ["sleep", "600"])
    wait_exec(py, py_argv)
    time.sleep(1.0)  # an age worth measuring
    path = write_scenario(real_scenario({sleeper.pid: {"0": "1GiB"}, py.pid: {"1": "2GiB"}}))

    rows = {r["pid"]: r for r in ps_rows(path)}
    age = time.time() - started
    assert sorted(rows) == sorted([sleeper.pid, py.pid])
    me = pwd.getpwuid(os.getuid()).pw_name
    for pid, argv, gpu, memory in [(sleeper.pid, ["sleep", "600"], 0, GiB), (py.pid, py_argv, 1, 2 * GiB)]:
        row = rows[pid]
        assert row["gpu"] == gpu and row["memory"] == memory
        assert row["user"] == me and row["uid"] == os.getuid()
        assert row["command"] == " ".join(argv)
        assert row["host_missing"] is None
        assert row["state"] == "sleeping"
        assert row["ppid"] == os.getpid()
        assert row["rss"] > 0
        assert row["zombie"] is False and row["orphaned"] is False
        # /proc/stat's boot time is whole seconds: allow for that and for the time vram took.
        assert abs(row["elapsed"] - age) < 2.5, (row["elapsed"], age)
        assert row["start_time"] == pytest.approx(started, abs=2.5)
    assert marker in rows[py.pid]["command"]
    assert rows[sleeper.pid]["name"] == "sleep"


def test_text_shows_the_real_user_and_command(children, write_scenario):
    marker = f"vramkit-test-{uuid.uuid4().hex[:8]}"
    py, py_argv = python_child(children, marker)
    wait_exec(py, py_argv)
    path = write_scenario(real_scenario({py.pid: {"0": "3GiB"}}))
    result = run_vram("status", "--simulate", str(path), env=clean_env(COLUMNS="300"))
    assert result.rc == 0
    line = next(line for line in result.out.splitlines() if f" {py.pid} " in line)
    assert pwd.getpwuid(os.getuid()).pw_name in line and marker in line and "3.0GiB" in line


def test_a_process_that_exits_frees_its_memory(children, write_scenario):
    stays = children.start(["sleep", "600"])
    leaves = children.start(["sleep", "600"])
    wait_exec(stays, ["sleep", "600"])
    wait_exec(leaves, ["sleep", "600"])
    path = write_scenario(real_scenario({stays.pid: {"0": "2GiB"}, leaves.pid: {"0": "5GiB", "1": "1GiB"}}))

    before = status(path)
    assert before["gpus"][0]["memory_used"] == 7 * GiB
    assert before["gpus"][1]["memory_used"] == 1 * GiB

    leaves.kill()
    leaves.wait()  # reaped: the pid is gone from /proc
    after = status(path)
    assert [p["pid"] for p in after["gpus"][0]["processes"]] == [stays.pid]
    assert after["gpus"][0]["memory_used"] == 2 * GiB
    assert after["gpus"][1]["processes"] == [] and after["gpus"][1]["memory_used"] == 0
    assert [r["pid"] for r in ps_rows(path)] == [stays.pid]


def test_a_zombie_child_is_dropped(children, write_scenario):
    """A process that exited but was not reaped yet: the driver freed its memory at exit (its
    files, /dev/nvidia* included, are closed before it becomes a zombie), so it is not listed,
    although /proc still shows it."""
    stays = children.start(["sleep", "600"])
    dead = children.start(["sleep", "600"])
    wait_exec(stays, ["sleep", "600"])
    wait_exec(dead, ["sleep", "600"])
    path = write_scenario(real_scenario({stays.pid: {"0": "2GiB"}, dead.pid: {"0": "6GiB"}}))
    assert status(path)["gpus"][0]["memory_used"] == 8 * GiB

    dead.kill()  # and do not wait: it stays a zombie until the fixture reaps it
    assert wait_for(lambda: proc_state(dead.pid) == "Z")
    snap = status(path)
    assert proc_state(dead.pid) == "Z"  # still there, unreaped
    assert [p["pid"] for p in snap["gpus"][0]["processes"]] == [stays.pid]
    assert snap["gpus"][0]["memory_used"] == 2 * GiB


def test_a_pid_that_does_not_exist_is_not_listed(children, write_scenario):
    gone = children.start(["true"])
    gone.wait()
    alive = children.start(["sleep", "600"])
    wait_exec(alive, ["sleep", "600"])
    path = write_scenario(real_scenario({gone.pid: {"0": "4GiB"}, alive.pid: {"1": "1GiB"}}))
    snap = status(path)
    assert snap["gpus"][0]["processes"] == [] and snap["gpus"][0]["memory_used"] == 0
    assert [p["pid"] for p in snap["gpus"][1]["processes"]] == [alive.pid]


HOSTILE_ARGS = ("--name", "\x1b[31mRED\x1b[0m", "line1\nline2", "bell\x07", "tab\there", "c1\x9bq")
RENAME = "import time; open('/proc/self/comm', 'w').write('ev\\x1b[2Jil'); time.sleep(600)"


@pytest.fixture
def hostile(children, write_scenario):
    """A real child whose argv and name carry terminal escapes, a newline, a bell, a C1 CSI."""
    proc, argv = python_child(children, *HOSTILE_ARGS, code=RENAME)
    wait_exec(proc, argv)
    assert wait_for(lambda: open(f"/proc/{proc.pid}/comm").read().startswith("ev"))
    return proc, argv, write_scenario(real_scenario({proc.pid: {"0": "1GiB"}}))


def test_hostile_command_line_is_stripped_in_json(hostile):
    proc, argv, path = hostile
    row = next(r for r in ps_rows(path) if r["pid"] == proc.pid)
    assert row["command"] == sanitized(" ".join(argv))
    assert "?[31mRED?[0m" in row["command"] and "line1?line2" in row["command"]
    for ch in ("\x1b", "\n", "\x07", "\t", "\x9b"):
        assert ch not in row["command"] and ch not in row["name"]
    assert row["name"] == "ev?[2Jil"


@pytest.mark.parametrize("view", [("status",), ("ps",), ("ps", "--csv")])
def test_hostile_command_line_is_stripped_in_text(hostile, view):
    proc, argv, path = hostile
    result = run_vram(*view, "--simulate", str(path), env=clean_env(COLUMNS="400"))
    assert result.rc == 0 and result.err == ""
    assert ESCAPE not in result.out and "\x07" not in result.out and "\x9b" not in result.out
    lines = [line for line in result.out.splitlines() if "line1" in line or "line2" in line]
    assert len(lines) == 1  # the newline in the argument did not split the row
    assert "line1?line2" in lines[0] and str(proc.pid) in lines[0]
