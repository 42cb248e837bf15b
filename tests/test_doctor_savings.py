"""`vram doctor LOG --model M --batch-size N`: the model-dependent fixes carry the estimator's savings."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_one_line_error, run_vram

import vramkit

FIXTURES = Path(__file__).parent / "fixtures" / "oom"
CUDA_OOM = str(FIXTURES / "cuda_1_0_cached.txt")
CPU_OOM = str(FIXTURES / "cpu_cant_allocate_torch_2_13.txt")


def _fixes(*args: str) -> dict[str, dict]:
    result = run_vram("doctor", *args, "--json")
    assert result.rc == 0, result.err
    return {f["id"]: f for f in result.json()["fixes"]}


@pytest.mark.parametrize("fix_id, change", [
    ("checkpointing", {"checkpointing": True}),
    ("bf16", {"precision": "bf16"}),
    ("halve_batch", {"batch": 8}),
    ("no_grad", {"mode": "infer"}),
])
def test_savings_are_the_estimators_difference(fix_id, change):
    fixes = _fixes(CUDA_OOM, "--model", "bert-large-uncased", "--batch-size", "16", "--seq-len", "512")
    base = {"batch": 16, "seq": 512, "precision": "fp32", "optimizer": "adamw", "attention": "eager"}
    before = vramkit.estimate("bert-large-uncased", **base).total_bytes
    after = vramkit.estimate("bert-large-uncased", **{**base, **change}).total_bytes
    assert fixes[fix_id]["saves_bytes"] == before - after > 0
    assert fixes[fix_id]["basis"] == "estimate"


def test_without_a_model_there_are_no_model_savings():
    fixes = _fixes(CUDA_OOM)
    assert fixes["checkpointing"]["saves_bytes"] is None


def test_a_host_ram_oom_gets_no_gpu_estimates():
    fixes = _fixes(CPU_OOM, "--model", "bert-large-uncased", "--batch-size", "16")
    assert all(f["saves_bytes"] is None for f in fixes.values() if f["id"] == "halve_batch")


def test_an_unknown_model_is_one_line_and_exit_2():
    result = run_vram("doctor", CUDA_OOM, "--model", "bert-gigantic", "--batch-size", "4")
    assert_one_line_error(result, 2, "--model")
