"""The benchmarks' simulated machine (benchmarks/_machine.py) is a machine vram accepts at every
size the benchmarks use: `bench_status.py --machines 256x200` was refused from GPU 111 on, whose
made-up temperature (40 + g) the scenario's checks rightly call impossible."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "bench_machine", Path(__file__).resolve().parent.parent / "benchmarks" / "_machine.py")
assert _SPEC is not None and _SPEC.loader is not None
bench_machine = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench_machine)


def test_a_256_gpu_benchmark_machine_is_shown_by_vram_status(vram, write_scenario):
    data = bench_machine.scenario(list(range(50_000, 50_200)), real=False, gpus=256)
    path = write_scenario(data)
    result = vram("status", "--simulate", str(path), "--json")
    assert result.rc == 0, result.err
    gpus = result.json()["gpus"]
    assert [g["index"] for g in gpus] == list(range(256))
    assert sum(len(g["processes"]) for g in gpus) == 220  # 200 processes, every 10th on two GPUs
    assert all(30 <= g["temperature"] <= 90 for g in gpus), json.dumps([g["temperature"] for g in gpus])
