"""One contract for every backend (as psutil's test_contracts): the same behavioural checks of what
a snapshot holds, run on the NVIDIA simulator, the recorded H200 (the h200 scenario: NVML's readings
on a real H200, tests/fixtures/gpu/h200-run2), AMD through amdsmi (the fake amdsmi module) and AMD
through the driver's files (the fake sysfs/procfs tree). Each check derives its machine from the
backend's own scenario, so a backend cannot pass by being given an easier one."""

from __future__ import annotations

import copy
import json
import os

import pytest
from helpers import scenario_data

from vramkit.machine import open_machine

# name -> (bundled scenario, VRAM_SIM_AMD)
BACKENDS = {
    "nvidia-sim": ("demo", None),
    "h200-recorded": ("h200", None),
    "amd-amdsmi": ("mi300x", "amdsmi"),
    "amd-sysfs": ("mi300x", "sysfs"),
}
CORE = ("name", "uuid", "pci_bus_id", "memory_total", "memory_used", "memory_free", "memory_reserved",
        "utilization", "memory_utilization", "temperature", "power_draw", "power_limit", "fan")


@pytest.fixture(params=sorted(BACKENDS))
def backend(request, monkeypatch, tmp_path):
    name, path = BACKENDS[request.param]
    if path:
        monkeypatch.setenv("VRAM_SIM_AMD", path)
    monkeypatch.setenv("VRAM_SIM_TIME", "30")
    data = scenario_data(name)
    data.pop("name", None)

    def read(change=None, twice: bool = False):
        if twice:  # the clock must move between the two readings: the real one
            monkeypatch.delenv("VRAM_SIM_TIME")
        d = copy.deepcopy(data)
        if change:
            change(d)
        f = tmp_path / f"{request.param}-{len(list(tmp_path.iterdir()))}.json"
        f.write_text(json.dumps(d))
        machine = open_machine(str(f))
        try:
            snap = machine.snapshot()
            return machine.snapshot() if twice else snap
        finally:
            machine.close()

    read.vendor = "amd" if path else "nvidia"  # type: ignore[attr-defined]
    read.param = request.param  # type: ignore[attr-defined]
    return read


def _plain(d):
    """The scenario's first GPU as a plain one: no partitions or MIG, no processes on it."""
    g = d["gpus"][0]
    for key in ("mig", "partitions", "compute_partition", "memory_partition"):
        g.pop(key, None)
    d["processes"] = [p for p in d.get("processes", []) if not any(k.split("/")[0] == "0" for k in p["gpus"])]
    return g


def test_a_snapshot_has_every_gpu_with_a_value_or_a_reason(backend):
    snap = backend()
    assert snap.gpus and [g.index for g in snap.gpus] == list(range(len(snap.gpus)))
    for g in snap.gpus:
        assert g.vendor == backend.vendor
        if g.lost:
            continue
        for field in CORE:
            value = getattr(g, field)
            assert value is not None or g.na.get(field) or g.na.get(field.split("_")[0]), (g.index, field)
        assert 0 < g.memory_total and 0 <= g.memory_used <= g.memory_total
        for p in g.processes:
            assert p.gpu == g.index and p.pid > 0 and (p.memory is None or p.memory >= 0)
            assert p.sm_utilization is not None or p.utilization_na
            assert p.user or p.host_missing  # joined with its host side, or why not


def test_na_is_none_with_a_reason_never_zero(backend):
    def change(d):
        d["gpus"][0]["unsupported"] = ["temperature", "utilization", "fan"]

    g = backend(change).gpus[0]
    for field in ("temperature", "utilization", "fan"):
        assert getattr(g, field) is None and g.na[field], field
    assert g.memory_total is not None  # the rest is still read


def test_a_lost_gpu_is_marked_and_the_others_still_read(backend):
    def change(d):
        g = copy.deepcopy(_plain(d))
        g.update(lost=True, uuid="GPU-00000000000000aa" if backend.vendor == "amd" else
                 "GPU-aaaaaaaa-0000-4000-8000-0000000000aa", pci_bus_id="0000:fe:00.0")
        d["gpus"].append(g)

    snap = backend(change)
    lost = snap.gpus[-1]
    assert lost.lost and lost.error and lost.processes == []
    assert not snap.gpus[0].lost and snap.gpus[0].memory_total


def test_a_vanished_pid_is_listed_with_why_its_host_side_is_missing(backend):
    def change(d):
        p = d["processes"][0]
        for key in ("user", "uid", "command", "age", "state", "cpu_percent", "rss", "ppid", "container"):
            p.pop(key, None)
        p["source"] = "missing"

    snap = backend(change)
    gone = [p for p in snap.processes if p.host_missing]
    assert gone and all(p.user is None and p.command is None for p in gone)
    assert all(p.memory is not None for p in gone)  # the driver's side stands


def test_a_refused_process_list_is_na_not_empty(backend):
    if backend.param == "amd-sysfs" and os.geteuid() == 0:
        pytest.skip("root lists a directory whatever its mode: the refusal needs an ordinary user")

    def change(d):
        for g in d["gpus"]:
            g["no_permission"] = ["processes"]

    snap = backend(change)
    for g in snap.gpus:
        if not g.lost:
            assert g.processes == [] and "permission" in g.na["processes"], g.na


def test_per_process_engine_use_is_a_share_after_two_readings(backend):
    snap = backend(twice=True)
    busy = [p for p in snap.processes if p.sm_utilization is not None]
    assert busy and all(0 <= p.sm_utilization <= 100 for p in busy)
