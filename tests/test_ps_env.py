"""A process's own view (vram ps --env PID): the GPUs its environment tells it to use beside the GPUs
it holds memory on, read from real child processes started with an environment."""

from __future__ import annotations

import json
import os

import pytest
from helpers import AS_NOBODY, assert_one_line_error, cmdline, minimal_scenario, needs_root, run_vram_as, wait_for

import vramkit
from vramkit import procs
from vramkit.process_view import SIMULATED_ENV, mismatches, process_gpus


def _sleeper(children, **env: str):
    proc = children.start(["sleep", "600"], env={"PATH": os.environ["PATH"], **env})
    assert wait_for(lambda: cmdline(proc.pid) == b"sleep\x00600\x00")
    return proc


def _scenario(write_scenario, placements: dict[int, str], names=("A100", "A100")):
    data = minimal_scenario()
    for gpu, name in zip(data["gpus"], names):
        gpu["name"] = name
    data["processes"] += [{"pid": pid, "source": "real", "gpus": {gpu: "1GiB"}} for pid, gpu in placements.items()]
    return str(write_scenario(data))


def test_read_environ_finds_names_across_chunks_and_bounds_the_read(children):
    filler = "x" * 100_000  # longer than one read: CUDA_VISIBLE_DEVICES comes after a chunk boundary
    proc = _sleeper(children, FILLER=filler, CUDA_VISIBLE_DEVICES="1", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    env = procs.read_environ(proc.pid, ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "UNSET"))
    assert env.problem is None and not env.truncated
    assert env.values == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    cut = procs.read_environ(proc.pid, ("CUDA_VISIBLE_DEVICES",), limit=50_000)
    assert cut.truncated and cut.values == {}  # the bound holds; what comes after it is not guessed


def test_read_environ_strips_control_characters(children):
    proc = _sleeper(children, CUDA_VISIBLE_DEVICES="1\x1b[2J")
    assert procs.read_environ(proc.pid, ("CUDA_VISIBLE_DEVICES",)).values == {"CUDA_VISIBLE_DEVICES": "1?[2J"}


def test_a_gone_process_is_not_visible(children):
    proc = _sleeper(children)
    proc.kill()
    proc.wait()
    assert procs.read_environ(proc.pid, ("CUDA_VISIBLE_DEVICES",)).problem == procs.NOT_VISIBLE


def test_told_one_gpu_holding_another_is_a_mismatch(children, write_scenario, cli):
    wrong = _sleeper(children, CUDA_VISIBLE_DEVICES="1")
    right = _sleeper(children, CUDA_VISIBLE_DEVICES="0", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    scenario = _scenario(write_scenario, {wrong.pid: "0", right.pid: "0"})
    rc, out, err = cli("ps", "--simulate", scenario, "--env", str(wrong.pid))
    assert rc == 1, err
    assert "told     GPU 1 as cuda:0" in out and "holds    GPU 0" in out
    assert "MISMATCH told GPU 1, holds memory on GPU 0" in out
    assert "as it started" in out  # says a value set later in the process is not seen
    rc, out, err = cli("ps", "--simulate", scenario, "--env", str(right.pid), "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["mismatch"] is None
    assert data["environment"] == {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert data["told"]["order"] == "PCI_BUS_ID" and [g["gpu"] for g in data["told"]["gpus"]] == [0]
    assert [g["gpu"] for g in data["holds"]] == [0]


def test_uuids_unset_and_empty_values(children, write_scenario):
    uuid1 = minimal_scenario()["gpus"][1]["uuid"]
    by_uuid = _sleeper(children, CUDA_VISIBLE_DEVICES=uuid1)
    unset = _sleeper(children)
    empty = _sleeper(children, CUDA_VISIBLE_DEVICES="")
    machine = vramkit.open_machine(_scenario(write_scenario, {by_uuid.pid: "1", unset.pid: "0", empty.pid: "1"}))
    try:
        snap = machine.snapshot()
    finally:
        machine.close()
    assert process_gpus(snap, by_uuid.pid).mismatch is None
    assert process_gpus(snap, unset.pid).told_text.startswith("every GPU")
    assert process_gpus(snap, empty.pid).mismatch == "told no GPU, holds memory on GPU 1"
    assert [v.pid for v in mismatches(snap)] == [empty.pid]  # doctor's question: only the wrong ones


def test_indices_on_mixed_models_cannot_be_known_without_pci_bus_id(children, write_scenario):
    told = _sleeper(children, CUDA_VISIBLE_DEVICES="1")
    machine = vramkit.open_machine(_scenario(write_scenario, {told.pid: "0"}, names=("A100", "L40S")))
    try:
        view = process_gpus(machine.snapshot(), told.pid)
    finally:
        machine.close()
    assert view.mismatch is None  # not a verdict it cannot make
    assert any("cannot be known" in note for note in view.notes)


def test_a_simulated_process_has_no_environment(cli):
    rc, out, _ = cli("ps", "--simulate", "demo", "--env", "41234")
    assert rc == 0 and SIMULATED_ENV in out and "holds    GPU 0, GPU 1, GPU 2, GPU 3" in out


@pytest.mark.parametrize("bad", ["abc", "0", "-3", "99999999999"])
def test_a_bad_pid_is_one_line_and_exit_2(vram, bad):
    assert_one_line_error(vram("ps", "--simulate", "demo", f"--env={bad}"), 2, "--env")


@needs_root("to read a process's environment as another user")
def test_another_users_process_is_not_visible(children, shared_dir):
    proc = _sleeper(children, CUDA_VISIBLE_DEVICES="1")
    data = minimal_scenario()
    data["processes"].append({"pid": proc.pid, "source": "real", "gpus": {"0": "1GiB"}})
    path = shared_dir / "s.json"
    path.write_text(json.dumps(data))
    path.chmod(0o644)
    result = run_vram_as(AS_NOBODY, "ps", "--simulate", str(path), "--env", str(proc.pid))
    assert result.rc == 0, result.err
    assert f"told     {procs.ENV_NOT_VISIBLE}" in result.out and "holds    GPU 0" in result.out


def test_in_its_own_pid_namespace_vram_does_not_read_another_processes_environment(children, write_scenario, cli,
                                                                                      monkeypatch):
    """Where the backend says NVML's pids are not this /proc's (a container without --pid=host), the
    pid's environment would be another process's: not read, and said why."""
    from vramkit.backends.simulated import SimulatedBackend
    from vramkit.process_view import PIDS_UNMAPPED

    wrong = _sleeper(children, CUDA_VISIBLE_DEVICES="1")
    scenario = _scenario(write_scenario, {wrong.pid: "0"})
    monkeypatch.setattr(SimulatedBackend, "pids_visible", lambda self: False)
    rc, out, err = cli("ps", "--simulate", scenario, "--env", str(wrong.pid), "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["mismatch"] is None and data["environment"] == {}
    assert data["environment_problem"] == PIDS_UNMAPPED


def test_as_root_a_refused_environment_is_not_called_another_users():
    """root reads every user's environment; where the kernel still refuses (ptrace rules, a process
    that cleared its dumpable flag) the reason says so instead of blaming another user."""
    if os.geteuid() != 0:
        pytest.skip("root only: an ordinary user is refused for another user's process")
    try:
        with open("/proc/1/environ", "rb") as f:
            f.read(1)
        pytest.skip("this kernel lets root read pid 1's environment")
    except PermissionError:
        pass
    assert procs.read_environ(1, ("PATH",)).problem == procs.ENV_REFUSED_TO_ROOT
