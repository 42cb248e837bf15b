"""GPU health (issue 17 item 2): the scenario's health fields through the simulator and the NVML
layer into `vram status --all` (text and JSON) and doctor's checklist; N/A with the reason for each
refused or unsupported call family; plain `vram status` makes none of these calls."""

from __future__ import annotations

import json

import pytest
from helpers import minimal_scenario, run_vram

from vramkit.backends.simulated import SimulatedBackend
from vramkit.doctor.checklist import run_checklist
from vramkit.machine import Machine
from vramkit.nvml import scenario as scenarios
from vramkit.nvml.backend import Nvml
from vramkit.nvml.sim import SimulatedNvml

HEALTH_CALLS = {"nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPages",
                "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows",
                "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo",
                "nvmlDeviceGetPerformanceState", "nvmlDeviceGetCurrPcieLinkGeneration",
                "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetComputeMode",
                "nvmlDeviceGetNvLinkState", "nvmlDeviceGetFieldValues"}


class LookupRecorder:
    """A pynvml-like module that records the nvml* functions looked up on it (every call looks one up)."""

    def __init__(self, lib):
        self._lib, self.names = lib, set()

    def __getattr__(self, name):
        if name.startswith("nvml"):
            self.names.add(name)
        return getattr(self._lib, name)


def _machine(name_or_data, monkeypatch, clock: str | None = None) -> tuple[Machine, SimulatedNvml]:
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    if clock:
        monkeypatch.setenv("VRAM_SIM_CLOCK", clock)
    scenario = (scenarios.load(name_or_data) if isinstance(name_or_data, str)
                else scenarios.validate(name_or_data, "test"))
    sim = SimulatedNvml(scenario)
    return Machine(SimulatedBackend(sim)), sim


def test_plain_status_makes_no_health_call_and_all_does(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    lib = LookupRecorder(SimulatedNvml(scenarios.load("unhealthy")))
    nvml = Nvml(lib).open()
    gpus = nvml.read()
    assert not HEALTH_CALLS & lib.names
    assert all(g.health is None for g in gpus)
    nvml.read_health(gpus)
    assert HEALTH_CALLS <= lib.names
    assert all(g.health is not None for g in gpus)


def test_unhealthy_scenario_reads_as_written(monkeypatch):
    machine, _ = _machine("unhealthy", monkeypatch)
    snap = machine.snapshot()
    machine.read_health(snap, settle=0)
    h = [g.health for g in snap.gpus]
    assert h[1].throttle_reasons == ("sw power cap",) and h[1].sm_clock == 1095 and h[1].sm_clock_max == 1410
    assert (h[2].ecc_uncorrected_volatile, h[2].ecc_corrected_volatile, h[2].ecc_uncorrected_aggregate,
            h[2].ecc_corrected_aggregate) == (2, 1520, 3, 4810)
    assert (h[2].remapped_rows_uncorrectable, h[2].remap_pending, h[2].remap_failed) == (3, True, False)
    assert h[2].nvlink_links_up == 10 and h[2].nvlink_links == 12
    assert h[2].retired_pages_double_bit is None and h[2].na["retired_pages_double_bit"] == "not supported"
    assert (h[3].performance_state, h[3].pcie_gen, h[3].pcie_gen_max, h[3].pcie_width) == (8, 1, 4, 8)
    assert h[3].persistence_mode is False and h[3].compute_mode == "exclusive process"
    assert h[0].pcie_tx == 1200 * 2**20 and h[0].throttle_reasons == ()
    machine.close()


def test_nvlink_rate_comes_from_two_readings_of_the_counters(monkeypatch):
    machine, sim = _machine("unhealthy", monkeypatch, clock="stepped")
    snap = machine.snapshot()
    machine.read_health(snap, settle=0)
    first = snap.gpus[0].health
    assert first.nvlink_tx is None and "two readings" in first.na["nvlink_tx"]
    sim.advance(10)
    snap = machine.snapshot()
    machine.read_health(snap, settle=0)
    assert snap.gpus[0].health.nvlink_tx == pytest.approx(42 * 2**30, rel=1e-6)
    assert snap.gpus[0].health.nvlink_rx == pytest.approx(40 * 2**30, rel=1e-6)
    machine.close()


def test_nvlink_rate_follows_a_timeline(monkeypatch):
    data = minimal_scenario()
    data["gpus"][0]["name"] = "NVIDIA H100 80GB HBM3"
    data["gpus"][1]["name"] = "NVIDIA RTX A6000"
    data["gpus"][0]["health"] = {"nvlink_tx": {"timeline": [[0, "1GiB"], [10, "3GiB"]]}, "nvlink_links_up": 4}
    machine, sim = _machine(data, monkeypatch, clock="stepped")
    machine.read_health(machine.snapshot(), settle=0)
    sim.advance(10)
    snap = machine.snapshot()
    machine.read_health(snap, settle=0)
    assert snap.gpus[0].health.nvlink_tx == pytest.approx(2 * 2**30, rel=1e-6)  # the mean over 0-10 s
    assert snap.gpus[1].health.nvlink_links == 0  # not an SXM board: no NVLink by default
    assert "no NVLink" in snap.gpus[1].health.na["nvlink_tx"]
    machine.close()


def test_status_all_text_shows_health_and_reasons():
    out = run_vram("status", "--simulate", "unhealthy", "--all", env={"COLUMNS": "120"}).out
    assert "throttled by  sw power cap" in out
    assert "rows remapped 3 uncorrectable, 1 correctable; PENDING (reset the GPU)" in out
    assert "sm 705/1410 MHz  mem 405/1593 MHz  P8" in out
    assert "gen 1/4  x8/16" in out
    faulty = run_vram("status", "--simulate", "faulty", "--all", env={"COLUMNS": "120"}).out
    assert "ecc           N/A (no permission)" in faulty
    assert "throttled by  N/A (not supported)" in faulty
    assert "P-state N/A  (N/A: no permission, not supported)" in faulty


def test_status_reads_health_only_with_all():
    plain = json.loads(run_vram("status", "--simulate", "unhealthy", "--json").out)
    assert all(g["health"] is None for g in plain["gpus"])
    full = json.loads(run_vram("status", "--simulate", "unhealthy", "--json", "--all").out)
    assert full["gpus"][1]["health"]["throttle_reasons"] == ["sw power cap"]
    faulty = json.loads(run_vram("status", "--simulate", "faulty", "--json", "--all").out)
    assert faulty["gpus"][1]["health"] is None  # lost
    assert faulty["gpus"][2]["health"]["ecc_enabled"] is None
    assert faulty["gpus"][2]["health"]["na"]["ecc_enabled"] == "no permission"


def test_doctor_checklist_flags_the_health_problems(monkeypatch):
    machine, _ = _machine("unhealthy", monkeypatch)
    snap = machine.snapshot()
    assert not [f for f in run_checklist(snap, env={}, me="nobody").findings if f.gpus[:1] != [0]]
    machine.read_health(snap, settle=0)
    found = {(f.code, f.gpus[0], f.severity) for f in run_checklist(snap, env={}, me="nobody").findings}
    assert found == {("throttled", 1, "warning"), ("ecc_errors", 2, "problem"),
                     ("memory_repair_pending", 2, "problem"), ("low_pstate", 3, "warning")}
    machine.close()


def test_doctor_checklist_finds_nothing_on_healthy_gpus(monkeypatch):
    machine, _ = _machine("demo", monkeypatch)
    snap = machine.snapshot()
    before = {f.code for f in run_checklist(snap, env={}, me="nobody").findings}
    machine.read_health(snap, settle=0)
    assert {f.code for f in run_checklist(snap, env={}, me="nobody").findings} == before
    machine.close()


@pytest.mark.parametrize(("health", "where"), [
    ({"throttle_reasons": ["too hot"]}, "health.throttle_reasons"),
    ({"compute_mode": "exclusive"}, "health.compute_mode"),
    ({"nvlink_links": 4, "nvlink_links_up": 6}, "health.nvlink_links_up"),
    ({"sm_clock": 2000}, "health.sm_clock"),
    ({"performance_state": 16}, "health.performance_state"),
    ({"remap_pending": "yes"}, "health.remap_pending"),
    ({"ecc_errors": 3}, "health.ecc_errors"),
    ({"pcie_tx": "fast"}, "health.pcie_tx"),
])
def test_scenario_health_errors_name_the_field(health, where):
    data = minimal_scenario()
    data["gpus"][0]["health"] = health
    with pytest.raises(scenarios.ScenarioError, match=rf"gpus\[0\]\.{where}"):
        scenarios.validate(data, "test")
