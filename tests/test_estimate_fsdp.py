"""PyTorch FSDP (full shard, one unit per layer) as its own sharding mode: no DeepSpeed buffers,
the root unit and two layers gathered, CPUOffload putting parameters, gradients and the optimizer
step on the CPU (issue 16, round 2, item 1)."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator.analytic import estimate
from vramkit.estimator.formulas import params_of
from vramkit.estimator.specs import EstimateError, numel, resolve

MODEL = "distilbert-base-uncased"
SETUP = {"batch": 3, "seq": 512, "precision": "bf16-pure", "attention": "eager"}


def _layers_and_root() -> tuple[int, int, int]:
    p = params_of(resolve(MODEL))
    in_layers = sum(numel(s) for n, s, _ in p.shapes if n.startswith("layer"))
    return p.total, p.total - in_layers, p.largest_layer


def test_fsdp_shards_weights_gradients_and_states_and_has_no_deepspeed_buffer():
    total, root, layer = _layers_and_root()
    e = estimate(MODEL, fsdp=True, gpus=4, **SETUP)
    terms = {t.name: t.bytes for t in e.terms}
    assert "DeepSpeed communication buckets" not in terms and "DDP gradient buckets" not in terms
    assert terms["weights"] == total * 2 // 4
    assert terms["gradients"] == total * 2 // 4
    assert terms["optimizer states (adamw)"] == 2 * total * 2 // 4
    # the root unit (embeddings, head) stays gathered; the layer computed and the next one prefetched
    assert terms["FSDP gathered units"] == (root + 2 * layer) * 2
    assert "FSDP full shard" in e.setup.describe(e.seq, e.family)
    ddp = estimate(MODEL, gpus=4, **SETUP)
    assert e.peak_bytes < ddp.peak_bytes
    zero3 = estimate(MODEL, zero=3, gpus=4, **SETUP)
    assert e.peak_bytes < zero3.peak_bytes  # ZeRO-3's 5e8-element reduce buffer is DeepSpeed's, not FSDP's


def test_fsdp_cpu_offload_keeps_parameters_gradients_and_optimizer_on_the_cpu():
    e = estimate(MODEL, fsdp=True, gpus=4, offload_params=True, grad_accum=4, **SETUP)
    terms = {t.name: t.bytes for t in e.terms}
    assert terms["weights"] == terms["gradients"] == terms["optimizer states (adamw)"] == 0
    assert terms["optimizer-step temporaries"] == 0
    assert terms["FSDP gathered units"] > 0 and terms["FSDP unit gradient"] > 0
    assert "CPU offload" in e.setup.describe(e.seq, e.family)
    on_gpu = estimate(MODEL, fsdp=True, gpus=4, grad_accum=4, **SETUP)
    assert e.peak_bytes < on_gpu.peak_bytes
    one_gpu = estimate(MODEL, fsdp=True, gpus=1, offload_params=True, **SETUP)  # allowed: nothing sharded
    assert one_gpu.breakdown.get("weights", 0) == 0


@pytest.mark.parametrize("options, param", [
    ({"zero": 3, "gpus": 4}, "zero"),
    ({"gpus": 1}, "fsdp"),
    ({"gpus": 4, "offload": True}, "offload"),
    ({"gpus": 4, "quant": "8bit", "lora": 8}, "quant"),
    ({"gpus": 4, "mode": "infer"}, "fsdp"),
])
def test_fsdp_refuses_what_it_does_not_model(options, param):
    with pytest.raises(EstimateError) as err:
        estimate(MODEL, fsdp=True, **options)
    assert err.value.param == param


def test_cli_fsdp():
    r = run_vram("estimate", MODEL, "--fsdp", "--gpus", "4", "--offload", "params", "--precision", "bf16-pure")
    assert r.rc == 0, r.err
    assert "FSDP full shard + CPU offload" in r.out and "FSDP gathered units" in r.out
    r = run_vram("estimate", MODEL, "--fsdp", "--gpus", "4", "--zero", "3")
    assert_one_line_error(r, 2, "FSDP")
