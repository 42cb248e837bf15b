"""A family the formulas do not know (falcon, phi3, gemma2, ...) is estimated by tracing the
transformers class its config names, on fake tensors, and the output says so (issue 29, item 5).
Checked against the same class traced here with transformers' own Auto API and a plain training
step (within 10 %), and, on families the formulas do know, against the analytic estimate.

    python tests/test_estimate_unknown_family.py      prints the table docs/estimation.md keeps
"""

from __future__ import annotations

import functools
import json
import warnings

import pytest
from helpers import assert_one_line_error, causal_lm_step, run_vram

from vramkit.estimator import EstimateError
from vramkit.estimator.analytic import CUBLAS_WORKSPACES, Setup, estimate

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

from vramkit.estimator.trace import fake_mode, make_optimizer, trace_memory  # noqa: E402
from vramkit.estimator.traced_family import estimate_by_tracing  # noqa: E402

pytestmark = pytest.mark.slow  # traces real transformers models

UNKNOWN = {  # families outside the formulas, narrow and shallow, with their own config keys
    "falcon": {"model_type": "falcon", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
               "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True, "bias": False,
               "vocab_size": 2000},
    "phi3": {"model_type": "phi3", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 4, "intermediate_size": 1024, "vocab_size": 2000,
             "max_position_embeddings": 4096, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
    "gemma2": {"model_type": "gemma2", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "vocab_size": 2000,
               "sliding_window": 64},
}
_LAYERS = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 1024,
           "vocab_size": 2000}
KNOWN = {  # families the formulas model: the traced class against them
    "llama": {"model_type": "llama", **_LAYERS, "num_key_value_heads": 2},
    "qwen2": {"model_type": "qwen2", **_LAYERS, "num_key_value_heads": 2},
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 2000},
}
BATCH, SEQ = 4, 128


def _setup(precision: str, mode: str = "train") -> Setup:
    return Setup(mode=mode, batch=BATCH, seq=SEQ, precision=precision, attention="eager", optimizer="adamw")


@functools.cache  # the command's test compares with the same trace as a parametrized case: done once
def traced_by_hand(family: str, precision: str, mode: str = "train") -> int:
    """The class transformers' Auto API builds for UNKNOWN[family], traced with a plain step: AdamW,
    forward with labels, backward, step, zero_grad; inference: one prefill with the cache."""
    cfg = UNKNOWN[family]
    dtype = torch.bfloat16 if precision == "bf16-pure" else torch.float32
    config = tf.AutoConfig.for_model(**cfg)
    fm = fake_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with fm:
                net = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        finally:
            torch.set_default_dtype(default)
        net.train(mode == "train")
        optimizer = make_optimizer("adamw", net.parameters()) if mode == "train" else None

        step = causal_lm_step(net, optimizer, cfg["vocab_size"], BATCH, SEQ)
        return trace_memory(net, step, steps=2, optimizer=optimizer, fake_mode=fm).peak_bytes


@pytest.mark.parametrize("family", sorted(UNKNOWN))
@pytest.mark.parametrize("precision, mode", [("fp32", "train"), ("bf16-pure", "train"), ("bf16-pure", "infer")])
def test_an_unknown_family_is_within_ten_percent_of_its_class_traced_by_hand(family, precision, mode):
    estimated, _ = estimate_by_tracing(UNKNOWN[family], _setup(precision, mode), name=family)
    by_hand = traced_by_hand(family, precision, mode)
    assert estimated.family == family
    assert abs(estimated.peak_bytes - CUBLAS_WORKSPACES - by_hand) <= 0.10 * by_hand


@pytest.mark.parametrize("family", sorted(KNOWN))
@pytest.mark.parametrize("precision", ["fp32", "bf16-pure"])
def test_tracing_the_class_agrees_with_the_formulas_where_they_know_the_family(family, precision):
    traced, _ = estimate_by_tracing(KNOWN[family], _setup(precision), name=family)
    analytic = estimate(KNOWN[family], _setup(precision))
    assert abs(traced.peak_bytes - analytic.peak_bytes) <= 0.10 * analytic.peak_bytes


def test_the_command_traces_an_unknown_family_and_says_so(tmp_path, cli):
    (tmp_path / "config.json").write_text(json.dumps(UNKNOWN["falcon"]))
    text = run_vram("estimate", str(tmp_path), "--batch", "4", "--seq", "128", timeout=300)
    assert text.rc == 0, text.err
    assert "model_type 'falcon' is not in the formulas: estimated by tracing transformers' FalconForCausalLM" \
        in " ".join(text.out.split())
    # --json in this process (the command's process is the run above: a vram importing transformers costs seconds)
    rc, out, err = cli("estimate", str(tmp_path), "--batch", "4", "--seq", "128", "--precision", "fp32", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["estimated_by"] == "trace" and data["family"] == "falcon"
    by_hand = traced_by_hand("falcon", "fp32")
    assert abs(data["peak_bytes"] - CUBLAS_WORKSPACES - by_hand) <= 0.10 * by_hand
    assert data["total_bytes"] > data["reserved_bytes"] >= data["peak_bytes"]


def test_what_the_traced_class_cannot_run_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(UNKNOWN["phi3"]))
    assert_one_line_error(run_vram("estimate", str(tmp_path), "--lora", "8", timeout=300), 2,
                          "phi3", "estimated by tracing its transformers class", "not with --lora")
    assert_one_line_error(run_vram("estimate", str(tmp_path), "--gpus", "2", "--zero", "2", timeout=300), 2,
                          "not with --gpus, --zero")


# Each is refused in process with its own words; the command line turns every EstimateError into one line and
# exit 2 the same way, so it runs (a vram that imports transformers: seconds each) for the two that fail furthest
# apart: the class a config names as code (auto_map, never imported), and a step that fails inside the trace.
@pytest.mark.parametrize("cfg, needle, cli", [
    ({"model_type": "my_own_arch", "auto_map": {"AutoModelForCausalLM": "modeling.MyModel"}, "hidden_size": 64},
     "neither in the formulas nor in transformers", True),
    ({"model_type": "deberta-v2", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1,
      "intermediate_size": 64, "vocab_size": 100}, "no causal-LM class", False),
    ({**UNKNOWN["falcon"], "num_hidden_layers": 10**6}, "more than any model has", False),
    # within what the formulas take, but minutes of tracing (every layer built and run): refused at once
    ({**UNKNOWN["phi3"], "num_hidden_layers": 2048}, "2,048 layers would take minutes to trace", False),
    ({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 200, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 256,
      "num_experts_per_tok": 2, "vocab_size": 100}, "256 experts in each of 200 layers would take minutes", False),
    ({**UNKNOWN["falcon"], "hidden_size": "wide"}, "refused this config", False),
    ({**UNKNOWN["phi3"], "num_attention_heads": 3}, "Phi3ForCausalLM failed on a traced step", True),
])
def test_an_untrusted_config_is_refused_in_one_line_never_run_as_code(tmp_path, cfg, needle, cli):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(EstimateError, match=needle):
        estimate_by_tracing(cfg, _setup("fp32"), name=str(cfg["model_type"]))
    if cli:
        assert_one_line_error(run_vram("estimate", str(tmp_path), timeout=300), 2, needle)


def main() -> None:
    print(f"{'family':<10}{'precision':<11}{'mode':<7}{'traced class':>14}{'by hand':>10}{'diff':>8}")
    for family, cfg in UNKNOWN.items():
        for precision, mode in (("fp32", "train"), ("bf16-pure", "train"), ("bf16-pure", "infer")):
            e, _ = estimate_by_tracing(cfg, _setup(precision, mode), name=family)
            mine, hand = e.peak_bytes - CUBLAS_WORKSPACES, traced_by_hand(family, precision, mode)
            print(f"{family:<10}{precision:<11}{mode:<7}{mine / 2**20:>12.1f}Mi{hand / 2**20:>8.1f}Mi"
                  f"{(mine - hand) / hand:>+8.1%}")
    print(f"\n{'family':<10}{'precision':<11}{'traced class':>14}{'formulas':>10}{'diff':>8}")
    for family, cfg in KNOWN.items():
        for precision in ("fp32", "bf16-pure"):
            traced, _ = estimate_by_tracing(cfg, _setup(precision), name=family)
            analytic = estimate(cfg, _setup(precision))
            diff = (traced.peak_bytes - analytic.peak_bytes) / analytic.peak_bytes
            print(f"{family:<10}{precision:<11}{traced.peak_bytes / 2**20:>12.1f}Mi"
                  f"{analytic.peak_bytes / 2**20:>8.1f}Mi{diff:>+8.1%}")


if __name__ == "__main__":
    main()
