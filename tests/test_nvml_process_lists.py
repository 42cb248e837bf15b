"""Process lists through NVML's C functions (issue 36): on nvidia-ml-py's pynvml, vram calls
nvmlDevice*RunningProcesses_v3 itself, once per list with an array sized from the last one, where
pynvml's wrapper calls it twice (the first only asks how many) and converts every entry field by
field. What vram shows must not change: the rows read that way are the rows pynvml's own functions
give, on every driver version, however many processes a list has."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from collections import Counter
from unittest import mock

import pytest

from vramkit.nvml import scenario as scenarios
from vramkit.nvml.backend import Nvml
from vramkit.nvml.shim import install
from vramkit.nvml.sim import SimulatedNvml

KINDS = {"compute": "nvmlDeviceGetComputeRunningProcesses", "graphics": "nvmlDeviceGetGraphicsRunningProcesses"}


def crowded(process_info: str) -> dict:
    """GPU 0 with 45 processes (past the first array's room, so the list outgrows it) of every type,
    GPU 1 with none, GPU 2 with one; on a driver whose newest process struct is `process_info`."""
    types_ = ["compute", "graphics", "both"]
    processes = [{"pid": 5000 + i, "user": "ann", "command": f"job {i}", "type": types_[i % 3],
                  "gpus": {"0": f"{100 + i}MiB"}} for i in range(45)]
    processes.append({"pid": 7000, "user": "ben", "command": "one", "gpus": {"2": "1GiB"}})
    gpus = [{"memory_total": "80GiB", "utilization": 10} for _ in range(3)]
    return {"name": "crowded", "gpus": gpus, "processes": processes, "nvml_api": {"process_info": process_info}}


def shimmed_pynvml(path: os.PathLike[str], monkeypatch) -> tuple[types.ModuleType, Counter[str]]:
    """nvidia-ml-py's pynvml on the scenario at `path`, as the shim builds it (in this process,
    under a name of its own), with every C function call counted by name."""
    spec = importlib.util.find_spec("pynvml")
    assert spec is not None and spec.loader is not None and str(spec.origin).endswith(".py")
    module = types.ModuleType("pynvml_on_the_simulator")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # pynvml looks itself up there
    exec(spec.loader.get_code("pynvml"), module.__dict__)  # type: ignore[attr-defined]
    with mock.patch.dict(os.environ, {"VRAM_SIMULATE": str(path), "VRAM_SIM_TIME": "0"}):
        install(module.__dict__)
    calls: Counter[str] = Counter()
    lookup = module._nvmlGetFunctionPointer

    def counting(name: str):
        fn = lookup(name)

        def call(*args):
            calls[name] += 1
            return fn(*args)
        return call
    module._nvmlGetFunctionPointer = counting
    return module, calls


def withhold_memory(sim: SimulatedNvml, pid: int) -> None:
    """The driver will not say what `pid` uses (NVML_VALUE_NOT_AVAILABLE, as without permission)."""
    listed = sim._processes

    def processes(*args):
        out = listed(*args)
        for info in out:
            if info.pid == pid:
                info.usedGpuMemory = None
        return out
    sim._processes = processes  # type: ignore[method-assign]


def rows(gpus) -> list[dict]:
    return [{(p.pid, p.mig_gi): (p.memory, p.types) for p in g.processes} for g in gpus]


def pynvml_rows(module, count: int, suffix: str) -> list[dict]:
    """The same rows from pynvml's own functions, merged as vram merges the two lists."""
    out: list[dict] = []
    for index in range(count):
        handle = module.nvmlDeviceGetHandleByIndex(index)
        merged: dict = {}
        for kind, name in KINDS.items():
            for info in getattr(module, name + suffix)(handle):
                gi = getattr(info, "gpuInstanceId", None)
                key = (info.pid, None if gi == 0xFFFFFFFF else gi)
                memory, kinds = merged.get(key, (None, ()))
                used = info.usedGpuMemory
                merged[key] = (used if memory is None or used is None else max(memory, used), (*kinds, kind))
        out.append(merged)
    return out


@pytest.mark.parametrize("process_info, suffix", [("v3", "_v3"), ("v2", "_v2")])
def test_one_call_a_list_and_the_rows_pynvml_gives(tmp_path, monkeypatch, process_info, suffix):
    path = tmp_path / "crowded.json"
    path.write_text(json.dumps(crowded(process_info)))
    module, calls = shimmed_pynvml(path, monkeypatch)
    withhold_memory(module.vram_simulator, 5001)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    nvml = Nvml(module).open()
    try:
        first = nvml.read(frozenset())
        calls.clear()
        again = nvml.read(frozenset())
        made = Counter(calls)
        assert len(first[0].processes) == 45 and not first[1].processes and len(first[2].processes) == 1
        assert rows(again) == rows(first) == pynvml_rows(module, 3, suffix)
        assert rows(first)[0][(5001, None)] == (None, ("graphics",))  # not 2**64 - 1
        # and what the simulator says without pynvml in between (the --simulate path)
        sim = SimulatedNvml(scenarios.load(str(path)))
        withhold_memory(sim, 5001)
        direct = Nvml(sim).open()
        assert rows(direct.read(frozenset())) == rows(first)
        # One call a list and GPU, the list's own version (an older driver: the newer one is not retried).
        for name in KINDS.values():
            assert made[name + suffix] == 3, name
        assert set(made) <= {name + suffix for name in KINDS.values()}
    finally:
        nvml.close()


def test_mig_instances_read_the_same_way_one_call_a_list(monkeypatch):
    module, calls = shimmed_pynvml(scenarios.resolve("mig"), monkeypatch)
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    nvml = Nvml(module).open()
    try:
        nvml.read()
        calls.clear()
        gpus = nvml.read()
        made = Counter(calls)
        assert any(p.mig_gi is not None for g in gpus for p in g.processes)
        assert rows(gpus) == pynvml_rows(module, len(gpus), "_v3")
        assert made == {name + "_v3": len(gpus) for name in KINDS.values()}
    finally:
        nvml.close()


def test_the_processes_of_one_list_share_one_types_tuple(tmp_path, monkeypatch):
    # Hundreds of rows a reading, kept in the recent snapshots: ("compute",) once, not once a row;
    # a process in both lists has its own ("compute", "graphics").
    path = tmp_path / "crowded.json"
    path.write_text(json.dumps(crowded("v3")))
    module, _calls = shimmed_pynvml(path, monkeypatch)
    nvml = Nvml(module).open()
    try:
        procs = nvml.read(frozenset())[0].processes
        for kind in (("compute",), ("graphics",)):
            same = [p.types for p in procs if p.types == kind]
            assert len(same) == 15 and len({id(t) for t in same}) == 1, kind
        assert sum(p.types == ("compute", "graphics") for p in procs) == 15
    finally:
        nvml.close()
