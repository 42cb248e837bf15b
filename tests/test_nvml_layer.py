"""The NVML layer on the simulator: call economy, driver-version fallbacks, timelines, faults."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from vramkit.backends.simulated import SimulatedBackend
from vramkit.machine import Machine
from vramkit.nvml import scenario as scenarios
from vramkit.nvml.backend import Nvml, NvmlUnavailable
from vramkit.nvml.sim import SimulatedNvml
from vramkit.units import parse_size


class CountingLib:
    """Wraps a pynvml-like module and counts every nvml* call made through it."""

    def __init__(self, lib):
        self._lib = lib
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name):
        attr = getattr(self._lib, name)
        if not name.startswith("nvml") or not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return attr(*args, **kwargs)
        return counted


def _machine(data: dict, monkeypatch, t: float = 0.0) -> tuple[Machine, SimulatedNvml]:
    monkeypatch.setenv("VRAM_SIM_TIME", str(t))
    sim = SimulatedNvml(scenarios.validate(data, "test"))
    return Machine(SimulatedBackend(sim)), sim


def _bundled(name: str) -> dict:
    return json.loads(scenarios.resolve(name).read_text())


def test_static_facts_are_read_once_and_repeated_snapshots_make_few_calls(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    lib = CountingLib(SimulatedNvml(scenarios.load("demo")))
    nvml = Nvml(lib).open()
    nvml.read()
    first = Counter(lib.calls)
    lib.calls.clear()
    nvml.read()
    second = lib.calls
    for static in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo",
                   "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMigMode"):
        assert first[static] == 8, static
        assert second[static] == 0, static
    # Per GPU and snapshot: memory, utilization, temperature, power, limit, fan, the video encoder's
    # and decoder's use, 2 process lists, and the per-process utilization samples.
    assert sum(second.values()) == 8 * 11


def test_old_driver_falls_back_and_remembers(monkeypatch):
    data = _bundled("demo")
    data["nvml_api"] = {"process_info": "v1", "memory_info": "v1"}
    lib = CountingLib(SimulatedNvml(scenarios.validate(data, "old")))
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    nvml = Nvml(lib).open()
    gpus = nvml.read()
    lib.calls.clear()
    again = nvml.read()
    assert [p.pid for p in gpus[0].processes] == [41234]
    assert gpus[0].processes[0].mig_gi is None  # v1 structs have no gpuInstanceId
    # v1 memory info counts reserved memory as used, and cannot report it apart.
    assert gpus[0].memory_reserved is None and "memory_reserved" in gpus[0].na
    assert gpus[0].memory_used == parse_size("72318MiB") + parse_size("519MiB")
    # The failed newer calls are not repeated on later snapshots.
    assert lib.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 0
    assert lib.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 0
    assert lib.calls["nvmlDeviceGetMemoryInfo"] == 8
    assert [d.memory_used for d in again] == [d.memory_used for d in gpus]


@pytest.mark.parametrize("t, present, memory", [(0, False, None), (25, True, "7.5GiB"), (30, True, "14GiB"),
                                                 (79, True, "14GiB"), (80, False, None)])
def test_timeline_process_starts_grows_and_exits(monkeypatch, t, present, memory):
    machine, _ = _machine(_bundled("demo"), monkeypatch, t)
    gpu7 = machine.snapshot().gpus[7]
    eval_job = [p for p in gpu7.processes if p.pid == 61905]
    assert bool(eval_job) == present
    base = parse_size("2250MiB")
    if present:
        assert eval_job[0].memory == parse_size(memory)
        assert gpu7.memory_used == base + parse_size(memory)
    else:
        assert gpu7.memory_used == base


def test_timeline_values_interpolate_and_repeat(monkeypatch):
    for t, util in [(0, 97), (2, 94), (4, 91), (12, 97), (16, 91)]:
        machine, _ = _machine(_bundled("demo"), monkeypatch, t)
        assert machine.snapshot().gpus[0].utilization == util, t


def test_a_gpu_lost_mid_run_shows_lost_and_the_others_go_on(monkeypatch):
    machine, sim = _machine(_bundled("demo"), monkeypatch)
    assert not machine.snapshot().gpus[3].lost
    sim.scenario.gpus[3]["lost"] = True
    snap = machine.snapshot()
    assert snap.gpus[3].lost and snap.gpus[3].processes == []
    assert [g.lost for g in snap.gpus].count(True) == 1
    assert snap.gpus[4].memory_used == parse_size("18432MiB")
    sim.scenario.gpus[3]["lost"] = False  # back after a reset: read again from a fresh handle
    assert machine.snapshot().gpus[3].memory_used == parse_size("21504MiB")


def test_slow_calls_fault_delays_that_call(monkeypatch):
    data = _bundled("mig")
    data["faults"] = {"slow_calls": {"nvmlDeviceGetComputeRunningProcesses_v3": 50}}
    machine, _ = _machine(data, monkeypatch)
    started = time.perf_counter()
    machine.snapshot()
    # Two GPUs, one compute-list call each: at least 2 x 50 ms spent in the slowed call.
    assert time.perf_counter() - started >= 0.1


def test_a_slow_call_is_made_once_then_shown_as_skipped(monkeypatch):
    """A driver that takes long per call (a hung GPU, a busy driver) costs one slow call per
    field, not one per GPU and field: the other GPUs show the field N/A with the reason, until
    it is tried again."""
    data = _bundled("demo")
    data["faults"] = {"slow_calls": {"nvmlDeviceGetPowerUsage": 60}}
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    lib = CountingLib(SimulatedNvml(scenarios.validate(data, "test")))
    nvml = Nvml(lib).open()
    nvml.slow_call = 0.03  # the test's scale: 60 ms is slow here
    gpus = nvml.read()
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 1
    assert gpus[0].power_draw is not None and "power_draw" not in gpus[0].na
    for g in gpus[1:]:
        assert g.power_draw is None and g.na["power_draw"].startswith("skipped: reading it took 0.")
        assert g.temperature is not None  # other fields still read
    nvml.read()
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 1  # still skipped
    nvml.slow_retry = 0  # time to try again (at once: every GPU tries, and finds it slow again)
    assert all(g.power_draw is not None for g in nvml.read())
    assert lib.calls["nvmlDeviceGetPowerUsage"] == 1 + 8


@pytest.mark.parametrize("fault, words", [("missing", "no NVIDIA driver"), ("not_loaded", "not loaded")])
def test_driver_faults_are_one_clear_error(monkeypatch, fault, words):
    data = _bundled("mig")
    data["faults"] = {"driver": fault}
    with pytest.raises(NvmlUnavailable, match=words):
        _machine(data, monkeypatch)


def test_a_refused_process_list_is_na_with_the_reason(monkeypatch):
    data = _bundled("mig")
    data["gpus"][1]["no_permission"] = ["processes"]
    machine, _ = _machine(data, monkeypatch)
    gpu = machine.snapshot().gpus[1]
    assert gpu.processes == [] and gpu.na["processes"] == "no permission"


def _shared_gpu(**gpu_extra) -> dict:
    """One GPU at 60% shared by a busy job and a notebook that runs no kernels."""
    return {"gpus": [{"memory_total": "80GiB", "utilization": 60, **gpu_extra}],
            "processes": [{"pid": 501, "user": "ann", "command": "python train.py", "gpus": {"0": "30GiB"},
                           "sm_util": 60},
                          {"pid": 502, "user": "ben", "command": "jupyter kernel", "gpus": {"0": "20GiB"},
                           "sm_util": 0}]}


def test_an_idle_process_on_a_busy_shared_gpu_is_idle(monkeypatch):
    machine, _ = _machine(_shared_gpu(), monkeypatch)
    procs = {p.pid: p for p in machine.snapshot().processes}
    assert procs[501].sm_utilization == 60 and not procs[501].idle
    assert procs[502].sm_utilization == 0 and procs[502].idle


def test_without_process_samples_idle_falls_back_to_the_gpu(monkeypatch):
    machine, _ = _machine(_shared_gpu(unsupported=["process_utilization"]), monkeypatch)
    snap = machine.snapshot()
    assert [p.sm_utilization for p in snap.processes] == [None, None]
    assert not any(p.idle for p in snap.processes)  # the GPU is at 60%: nobody looks idle
    assert snap.gpus[0].na["process_utilization"] == "not supported"
