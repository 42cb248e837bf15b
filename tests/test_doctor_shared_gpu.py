"""`vram doctor` on a busy shared GPU: the process that runs no kernels of its own is the idle
holder, and the busy one is not."""

from __future__ import annotations

from helpers import run_vram

SHARED = {
    "gpus": [{"memory_total": "80GiB", "utilization": 60}],
    "processes": [
        {"pid": 501, "user": "ann", "command": "python train.py", "gpus": {"0": "30GiB"}, "sm_util": 60, "age": "2h"},
        {"pid": 502, "user": "ben", "command": "jupyter kernel", "gpus": {"0": "20GiB"}, "sm_util": 0, "age": "3h"},
    ],
}


def test_the_idle_process_on_a_busy_gpu_is_found(write_scenario):
    result = run_vram("doctor", "--simulate", str(write_scenario(SHARED)), "--json")
    assert result.rc == 0, result.err
    assert [(f["code"], f["pid"]) for f in result.json()["findings"]] == [("idle_holder", 502)]
    text = run_vram("doctor", "--simulate", str(write_scenario(SHARED))).out
    assert "without running kernels" in text and "60% with other work" in text
