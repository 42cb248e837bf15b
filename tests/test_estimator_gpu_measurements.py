"""What a real GPU showed, kept so the tests hold the estimator to it (issue 18; docs/gpu-check.md).

The fixtures under tests/fixtures/gpu/ are the outputs of scripts/gpu_suite.sh on an NVIDIA H200
(driver 580.159.04, CUDA 13.0, PyTorch 2.11): torch's and NVML's numbers for each estimator case.
The estimator must stay within the targets against those numbers. (The readings of `vram status
--json` there, which the bundled `h200` scenario must match: test_scenario_h200.py.)
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from vramkit.estimator.analytic import estimate

RUNS = Path(__file__).parent / "fixtures" / "gpu"
ROWS = json.loads((RUNS / "h200-run2" / "estimate.json").read_text())["rows"]
SCRIPTS = Path(__file__).parent.parent / "scripts"

# Where the analytic total misses what nvidia-smi showed by more than 10 %, and why: the caching
# allocator held far more than the peak (max_memory_reserved / max_memory_allocated on the H200),
# which a fixed 5 % overhead does not model. A row that starts to pass fails this test, so the list
# stays true.
ALLOCATOR_HELD_MORE = {
    "GPT-2 medium b4 s1024 bf16 ckpt": "reserved 28 % over the peak (recomputed layers beside the logits' blocks)",
    "LLaMA 1.1B infer b16 s1024 bf16": "reserved 37 % over the peak (1 and 2 GiB attention-score blocks)",
}


@functools.cache
def _estimate_check():
    """scripts/estimate_check.py, loaded once: its case list names what each row measured."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("estimate_check", SCRIPTS / "estimate_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _case(label: str) -> tuple[str, dict]:
    return _estimate_check().case_of(label)


def _model(model: str) -> str:
    return str(SCRIPTS / "configs" / Path(model).name) if model.endswith(".json") else model


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['label']} ({'HF' if r['hf'] else 'ref'})" for r in ROWS])
def test_the_analytic_estimate_against_torch_and_nvml_on_an_h200(row):
    model, opts = _case(row["label"])
    est = estimate(_model(model), **opts)
    allocated, used = max(row["step_alloc"]), row["nvml_used"]
    # the peak against torch.cuda.max_memory_allocated: within 2 % in every case
    assert abs(est.peak_bytes / allocated - 1) <= 0.02, (est.peak_bytes, allocated)
    # what nvidia-smi shows (NVML's used memory of the process) within 10 %, but where noted
    off = est.total_bytes / used - 1
    if row["label"] in ALLOCATOR_HELD_MORE:
        assert off < -0.10, f"now within 10 % ({off:+.1%}): take it off ALLOCATOR_HELD_MORE"
    else:
        assert abs(off) <= 0.10, (est.total_bytes, used, off)


def test_the_cuda_context_default_is_what_the_h200_showed():
    # NVML's used memory minus torch's reserved, per case: 742-762 MiB
    contexts = {row["nvml_used"] - row["reserved_now"] for row in ROWS}
    assert min(contexts) >= 740 * 2**20 and max(contexts) <= 770 * 2**20
    assert estimate("gpt2").context_bytes == 768 * 2**20


@pytest.mark.slow
@pytest.mark.parametrize("label", ["GPT-2 medium b4 s1024 bf16", "BERT-Large b4 bf16 ckpt"])
def test_the_traced_estimate_within_3_percent_of_max_memory_allocated(label):
    pytest.importorskip("torch")
    from vramkit.estimator.trace import trace_estimate

    model, opts = _case(label)
    row = next(r for r in ROWS if r["label"] == label)
    traced = trace_estimate(_model(model), **opts).peak_bytes
    assert abs(traced / max(row["step_alloc"]) - 1) <= 0.03
