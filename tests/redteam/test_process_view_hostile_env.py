"""Red team: another user's process environment read by `vram ps --env PID` (process_view,
render/env_view): control and bidi characters, huge values, an environment with no NUL left in it,
and a pid that exits or is reused while it is read."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata

from helpers import cmdline, minimal_scenario, run_vram, wait_for

import vramkit
from vramkit import procs
from vramkit.process_view import PID_REUSED, PIDS_UNMAPPED, mismatches, process_gpus
from vramkit.render.env_view import NOTE_CELLS, VALUE_CELLS

HOSTILE_VALUE = "0\u202e,1\u2028\x85\x1b]0;title\x07\x1b[2J\u200b" + "7" * 5000


def _raw_controls(text: str) -> list[str]:
    """Characters a terminal acts on or that hide text, found independently of procs.sanitize."""
    return [hex(ord(c)) for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


def _sleeper(children, **env: str):
    proc = children.start(["sleep", "600"], env={"PATH": "/usr/bin:/bin", **env})
    assert wait_for(lambda: cmdline(proc.pid) == b"sleep\x00600\x00")
    return proc


def _scenario(write_scenario, pid: int) -> str:
    data = minimal_scenario()
    data["processes"].append({"pid": pid, "source": "real", "gpus": {"0": "1GiB"}})
    return str(write_scenario(data))


def _check_printed(result, longest: int) -> None:
    assert result.rc in (0, 1) and "Traceback" not in result.err, result.err
    assert not _raw_controls(result.out) and not _raw_controls(result.err)
    assert max(len(line) for line in result.out.splitlines()) <= longest


def test_control_bidi_and_huge_values_are_replaced_and_bounded(children, write_scenario):
    proc = _sleeper(children, CUDA_VISIBLE_DEVICES=HOSTILE_VALUE, CUDA_DEVICE_ORDER="PCI\x1b]0;x\x07\u202e")
    scenario = _scenario(write_scenario, proc.pid)
    result = run_vram("--simulate", scenario, "ps", "--env", str(proc.pid))
    _check_printed(result, longest=len("note     ") + NOTE_CELLS)
    assert "CUDA_VISIBLE_DEVICES=0?,1??" in result.out and "title" in result.out  # shown, made harmless
    shown = next(x for x in result.out.splitlines() if "CUDA_VISIBLE_DEVICES=" in x)
    assert "7" * (VALUE_CELLS - 30) in shown and "7" * (VALUE_CELLS + 1) not in shown
    result = run_vram("--simulate", scenario, "ps", "--env", str(proc.pid), "--json")
    data = json.loads(result.out)
    assert not _raw_controls(json.dumps(data, ensure_ascii=False))  # the JSON carries the replaced text too
    assert data["environment"]["CUDA_VISIBLE_DEVICES"].startswith("0?,1??")


# A process may overwrite its own environment block (setproctitle does; so can a hostile one):
# here every NUL becomes ESC, leaving one entry of megabytes with no NUL in it.
_OVERWRITE_OWN_ENVIRON = r"""
import sys, time
stat = open("/proc/self/stat", "rb").read()
fields = stat[stat.rindex(b")") + 2:].split()
start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50 and 51 of proc(5)
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(start)
    block = mem.read(end - start)
    mem.seek(start)
    mem.write(block.replace(b"\0", b"\x1b"))
print("ready", flush=True)
time.sleep(600)
"""


def test_an_environment_without_nul_is_read_bounded(children, write_scenario):
    env = {"CUDA_VISIBLE_DEVICES": "1", **{f"FILL{i}": "x" * 100_000 for i in range(12)}}
    proc = subprocess.Popen([sys.executable, "-c", _OVERWRITE_OWN_ENVIRON], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE)
    children.procs.append(proc)  # killed and reaped at teardown
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    with open(f"/proc/{proc.pid}/environ", "rb") as f:
        assert b"\0" not in f.read()[:-1]  # the attack took: one entry, 1.2 MB long
    env_read = procs.read_environ(proc.pid, ("CUDA_VISIBLE_DEVICES",))
    assert env_read.problem is None
    value = env_read.values["CUDA_VISIBLE_DEVICES"]
    assert value.startswith("1?FILL") and len(value) <= 4096
    result = run_vram("--simulate", _scenario(write_scenario, proc.pid), "ps", "--env", str(proc.pid))
    _check_printed(result, longest=len("note     ") + NOTE_CELLS)
    proc.stdout.close()


def _snapshot(write_scenario, pid: int):
    machine = vramkit.open_machine(_scenario(write_scenario, pid))
    try:
        return machine.snapshot()
    finally:
        machine.close()


def test_a_reused_pid_is_not_read_as_the_listed_process(children, write_scenario):
    """NVML listed a process that exited; its pid now belongs to a newcomer with another environment.
    The newcomer's CUDA_VISIBLE_DEVICES must not be reported as the listed process's (nor a mismatch)."""
    newcomer = _sleeper(children, CUDA_VISIBLE_DEVICES="1")
    snap = _snapshot(write_scenario, newcomer.pid)
    row = next(p for p in snap.processes if p.pid == newcomer.pid)
    assert row.start_ticks is not None
    assert process_gpus(snap, newcomer.pid).mismatch == "told GPU 1, holds memory on GPU 0"  # itself: read
    row.start_ticks -= 1  # the process listed started earlier than the one the pid has now
    view = process_gpus(snap, newcomer.pid)
    assert view.env_problem == PID_REUSED and view.env == {} and view.mismatch is None


def test_a_process_exiting_while_read_is_not_visible(children, write_scenario):
    proc = _sleeper(children, CUDA_VISIBLE_DEVICES="1")
    snap = _snapshot(write_scenario, proc.pid)

    def read_then_exit(pid: int, names: tuple[str, ...]) -> procs.Environ:
        read = procs.read_environ(pid, names)
        assert read.values == {"CUDA_VISIBLE_DEVICES": "1"}
        proc.kill()
        proc.wait()  # reaped: /proc no longer has it
        return read

    view = process_gpus(snap, proc.pid, read=read_then_exit)
    assert view.env_problem == procs.NOT_VISIBLE and view.mismatch is None


def test_in_a_pid_namespace_of_its_own_no_environment_is_read(children, write_scenario):
    """vram in a container without the host's PID namespace: NVML's pid N is not this /proc's pid N,
    so the environment found there is another process's (the backend says so: pids_visible)."""
    stranger = _sleeper(children, CUDA_VISIBLE_DEVICES="1")
    snap = _snapshot(write_scenario, stranger.pid)
    view = process_gpus(snap, stranger.pid, pids_visible=False)
    assert view.env_problem == PIDS_UNMAPPED and view.env == {} and view.mismatch is None
    assert mismatches(snap, pids_visible=False) == []
    assert [v.pid for v in mismatches(snap)] == [stranger.pid]  # where the pids are this /proc's: read
