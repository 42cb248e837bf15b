"""The Python API (vramkit/__init__.py): snapshot(), open_machine(), the dataclasses, the two errors."""

from __future__ import annotations

import json

import pytest
from helpers import expected_gpus, has_nvidia_driver, minimal_scenario, scenario_data

import vramkit
from vramkit import Device, GpuProcess, MigDevice, NvmlUnavailable, ScenarioError, Snapshot

DEMO = scenario_data("demo")


@pytest.fixture(autouse=True)
def _pinned_clock(monkeypatch):
    for key in ("VRAM_SIMULATE", "VRAM_SIM_EPOCH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")


def test_public_names():
    for name in ("snapshot", "open_machine", "Machine", "Snapshot", "Device", "GpuProcess", "MigDevice",
                 "NvmlUnavailable", "ScenarioError", "__version__"):
        assert name in vramkit.__all__ and hasattr(vramkit, name)


def test_snapshot_of_demo():
    snap = vramkit.snapshot(simulate="demo")
    assert isinstance(snap, Snapshot)
    assert snap.simulated is True and snap.scenario == "demo"
    assert snap.driver_version == DEMO["driver_version"] and snap.cuda_version == DEMO["cuda_version"]
    expected = expected_gpus(DEMO, t=0)
    assert len(snap.gpus) == len(expected)
    for dev, want in zip(snap.gpus, expected):
        assert isinstance(dev, Device)
        for key in ("index", "uuid", "name", "pci_bus_id", "memory_total", "memory_used", "memory_reserved",
                    "memory_free", "utilization", "memory_utilization", "temperature"):
            assert getattr(dev, key) == want[key], (dev.index, key)
        assert dev.power_draw == pytest.approx(want["power_draw"], abs=1e-3)
        assert dev.power_limit == pytest.approx(want["power_limit"], abs=1e-3)
        assert dev.fan is None and dev.na["fan"]
        assert {p.pid: {"memory": p.memory, "user": p.user, "command": p.command}
                for p in dev.processes} == want["processes"]
        for p in dev.processes:
            assert isinstance(p, GpuProcess) and p.gpu == dev.index and p.gpu_uuid == dev.uuid


def test_snapshot_processes_property():
    snap = vramkit.snapshot(simulate="demo")
    assert [(p.gpu, p.pid) for p in snap.processes] == [(g.index, p.pid) for g in snap.gpus for p in g.processes]
    assert len(snap.processes) == 9


def test_snapshot_matches_the_command(vram):
    api = vramkit.snapshot(simulate="demo")
    cli = vram("status", "--simulate", "demo", "--json").json()
    assert [(g.memory_used, g.utilization, [p.pid for p in g.processes]) for g in api.gpus] == [
        (g["memory_used"], g["utilization"], [p["pid"] for p in g["processes"]]) for g in cli["gpus"]]


def test_snapshot_of_mig():
    snap = vramkit.snapshot(simulate="mig")
    split = snap.gpus[0]
    assert split.mig_enabled is True
    assert all(isinstance(m, MigDevice) for m in split.mig_devices)
    assert [m.gi for m in split.mig_devices] == [1, 5, 9, 10]
    assert split.utilization is None and "utilization" in split.na


def test_snapshot_from_the_environment(monkeypatch):
    monkeypatch.setenv("VRAM_SIMULATE", "faulty")
    snap = vramkit.snapshot()
    assert snap.scenario == "faulty" and snap.gpus[1].lost is True


def test_snapshot_from_a_file(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(minimal_scenario()))
    snap = vramkit.snapshot(simulate=str(path))
    assert snap.scenario == "tiny"
    assert [g.memory_used for g in snap.gpus] == [10 * 1024**3, 5 * 1024**3]


def test_open_machine_for_repeated_snapshots(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_TIME", "25")  # erin's eval.py is running at t=25
    machine = vramkit.open_machine(simulate="demo")
    try:
        assert machine.simulated is True
        first, second = machine.snapshot(), machine.snapshot()
    finally:
        machine.close()
    assert [g.memory_used for g in first.gpus] == [g.memory_used for g in second.gpus]
    assert 61905 in {p.pid for p in first.processes}


@pytest.mark.parametrize("name, needle", [("nosuch", "no scenario 'nosuch'"), ("/nonexistent/x.json", "not a file")])
def test_scenario_error_for_a_missing_scenario(name, needle):
    with pytest.raises(ScenarioError, match=needle) as info:
        vramkit.snapshot(simulate=name)
    assert "\n" not in str(info.value)


def test_scenario_error_names_the_field(tmp_path):
    data = minimal_scenario()
    data["gpus"][1]["memory_used"] = "100GiB"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScenarioError) as info:
        vramkit.snapshot(simulate=str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: gpus[1].memory_used: ") and "\n" not in message
    assert isinstance(info.value, ValueError)  # documented: a ScenarioError is a ValueError


def test_nvml_unavailable_for_a_scenario_without_a_driver(tmp_path):
    data = minimal_scenario()
    data["faults"] = {"driver": "not_loaded"}
    path = tmp_path / "nodriver.json"
    path.write_text(json.dumps(data))
    with pytest.raises(NvmlUnavailable, match="not loaded") as info:
        vramkit.snapshot(simulate=str(path))
    assert "\n" not in str(info.value)


@pytest.mark.skipif(has_nvidia_driver(), reason="this machine has an NVIDIA driver")
def test_nvml_unavailable_on_this_machine():
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver"):
        vramkit.snapshot()
