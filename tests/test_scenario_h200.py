"""The bundled `h200` scenario reads as the real machine did (issue 18; docs/gpu-check.md): the
readings of `vram status --json` on an NVIDIA H200 (driver 580.159.04, CUDA 13.0), an output of
scripts/gpu_suite.sh kept under tests/fixtures/gpu/. (The estimator against that run's numbers:
test_estimator_gpu_measurements.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_vram

RUNS = Path(__file__).parent / "fixtures" / "gpu"


def test_the_h200_scenario_reads_as_the_real_machine_did():
    text = (RUNS / "h200-run2" / "cli.txt").read_text()
    start = text.index("$ python3 -m vramkit status --json")
    real = json.loads(text[text.index("\n", start) + 1:text.index("[exit", start)])
    sim = run_vram("status", "--simulate", "h200", "--json").json()
    assert (sim["driver_version"], sim["cuda_version"]) == (real["driver_version"], real["cuda_version"])
    (r,), (s,) = real["gpus"], sim["gpus"]
    for key in ("name", "uuid", "pci_bus_id", "memory_total", "memory_used", "memory_free", "memory_reserved",
                "power_limit", "fan", "mig_enabled"):
        assert s[key] == r[key], key
    # The video engines' use is read since this run was recorded (it has no word on them, and the
    # scenario says N/A): the next run on a GPU compares them with nvidia-smi (scripts/gpu_check.py).
    unread_then = ("encoder_utilization", "decoder_utilization")
    assert {k: v for k, v in s["na"].items() if k not in unread_then} == r["na"]
    # memory info v2 on driver 580: reserved is reported apart from used
    assert r["memory_total"] == r["memory_used"] + r["memory_free"] + r["memory_reserved"]
    assert [p["memory"] for p in s["processes"]] == [p["memory"] for p in r["processes"]]
