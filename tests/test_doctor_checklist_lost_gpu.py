"""`vram doctor` (the checklist) names a lost GPU, which status and top already show (issue 31, item 1)."""

from __future__ import annotations

from helpers import clean_env, run_vram

import vramkit
from vramkit.doctor import run_checklist


def test_doctor_names_the_lost_gpu_of_the_faulty_scenario():
    result = run_vram("doctor", "--simulate", "faulty", env=clean_env(CUDA_VISIBLE_DEVICES=None))
    assert result.rc == 0, result.err
    assert "GPU 1 is lost" in result.out and "No problems found" not in result.out
    data = run_vram("doctor", "--simulate", "faulty", "--json", env=clean_env(CUDA_VISIBLE_DEVICES=None)).json()
    lost = [f for f in data["findings"] if f["code"] == "gpu_lost"]
    assert [(f["severity"], f["gpus"]) for f in lost] == [("problem", [1])]


def test_a_shell_told_to_use_only_the_lost_gpu_is_told_it_is_lost():
    result = run_vram("doctor", "--simulate", "faulty", env=clean_env(CUDA_VISIBLE_DEVICES="1"))
    assert result.rc == 0, result.err
    assert "GPU 1 is lost" in result.out and "No problems found" not in result.out


def test_a_lost_gpu_outside_the_chosen_ones_is_not_reported():
    snap = vramkit.snapshot(simulate="faulty")
    assert "gpu_lost" not in {f.code for f in run_checklist(snap, env={"CUDA_VISIBLE_DEVICES": "0"}, me="zed").findings}
    assert "gpu_lost" not in {f.code for f in run_checklist(snap, env={}, me="zed", only=[2]).findings}
