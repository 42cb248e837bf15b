"""The planner as a library: largest batch, ranked changes, GPUs that fit."""

from __future__ import annotations

import pytest

from vramkit.estimator import plan
from vramkit.estimator.analytic import estimate
from vramkit.estimator.planner import gpu_memory, largest_batch
from vramkit.estimator.specs import EstimateError, resolve

GIB = 1024**3


def test_largest_batch_is_the_boundary():
    spec = resolve("bert-base-uncased")
    from vramkit.estimator.analytic import Setup
    setup = Setup(seq=512, precision="fp32")
    n = largest_batch(spec, setup, 24 * GIB)
    assert estimate(spec, setup, batch=n).total_bytes <= 24 * GIB < estimate(spec, setup, batch=n + 1).total_bytes


def test_changes_that_fit_and_gpus():
    p = plan("bert-large-uncased", "rtx-4090", batch=32, seq=512, precision="fp32")
    assert not p.fits
    fitting = [c for c in p.changes if c.fits]
    assert any(c.what == "activation checkpointing" for c in fitting)
    assert all(c.total_bytes <= p.capacity_bytes for c in fitting)
    assert [n for n, _ in p.gpus_that_fit][:1] and all(m >= p.estimate.total_bytes for _, m in p.gpus_that_fit)


def test_stacked_changes_when_no_single_one_fits():
    p = plan("llama-3-8b", "a100-80gb", seq=4096)
    assert not any(c.fits and "+" not in c.what for c in p.changes)
    assert any(c.fits and "+" in c.what for c in p.changes)


def test_capacity_in_bytes_and_bad_gpus():
    assert plan("gpt2", 80 * GIB, batch=1).fits
    assert gpu_memory("A100") == ("a100-80gb", 80 * GIB)
    with pytest.raises(EstimateError, match="did you mean"):
        gpu_memory("h10")
    with pytest.raises(EstimateError):
        plan("gpt2", 0)


@pytest.mark.parametrize("model, gpu, batch", [("bert-large-uncased", "rtx-4090", 32), ("bert-large-uncased", "t4", 32),
                                               ("gpt2-medium", "t4", 24), ("bert-base-uncased", "t4", 96)])
def test_a_same_effective_batch_split_multiplies_back_to_the_batch(model, gpu, batch):
    """'micro-batch 10 x grad-accum 4 (same effective batch)' for a batch of 32 was false: the
    planner splits as accumulation_plan does, and says so when the product differs."""
    import re

    p = plan(model, gpu, batch=batch, seq=512, precision="fp32")
    splits = [c for c in p.changes if c.what.startswith("micro-batch")]
    for c in splits:
        m = re.match(r"micro-batch (\d+) × grad-accum (\d+) \((.*)\)", c.what)
        assert m, c.what
        micro, accum, said = int(m.group(1)), int(m.group(2)), m.group(3)
        if said == "same effective batch":
            assert micro * accum == batch, c.what
        else:
            assert said == f"effective batch {micro * accum} instead of {batch}", c.what


def test_inference_that_does_not_fit_can_split_its_layers():
    p = plan("llama-2-70b", "a100-80gb", mode="infer", seq=4096)
    assert not p.fits
    split = {c.what: c for c in p.changes if c.what.startswith("layers split over")}
    assert split["layers split over 2 GPUs (device_map)"].fits
    assert split["layers split over 2 GPUs (device_map)"].total_bytes == \
        estimate("llama-2-70b", mode="infer", seq=4096, gpus=2).total_bytes


def test_plan_under_fsdp_offers_more_gpus_and_cpu_offload_not_zero():
    p = plan("llama-2-13b", "rtx-4090", fsdp=True, gpus=2, seq=512)
    whats = {c.what: c for c in p.changes}
    assert {"4 GPUs (FSDP)", "8 GPUs (FSDP)", "FSDP + CPU offload"} <= set(whats)
    assert whats["8 GPUs (FSDP)"].total_bytes < whats["4 GPUs (FSDP)"].total_bytes < p.estimate.total_bytes
    assert whats["FSDP + CPU offload"].setup == {"offload_params": True}
    assert not any(c.what.startswith("ZeRO-3 on") for c in p.changes)  # FSDP and ZeRO do not combine


def test_a_plan_and_an_estimate_print_a_few_readable_lines():
    """str() of vramkit.plan() and vramkit.estimate(): the verdict, the setup, the peak, the largest
    batch, and when nothing fits at batch 1 the change or GPU that would; not a dataclass repr."""
    import vramkit

    est = vramkit.estimate("gpt2", batch=4)
    text = str(est)
    assert "gpt2" in text and "batch 4" in text and "Estimate(" not in text and len(text.splitlines()) <= 8
    fits = str(vramkit.plan("gpt2", gpu="RTX 4090"))
    assert ": fits," in fits and "largest batch that fits: " in fits and "Plan(" not in fits
    crowded = str(vramkit.plan("llama-3-8b", gpu="RTX 4090")).splitlines()
    assert "does not fit" in crowded[0]
    assert "  largest batch that fits: none, not even 1" in crowded
    assert any(line.startswith("  cheapest change that fits: ") for line in crowded)
    assert any(line.startswith("  GPUs that fit it unchanged: ") for line in crowded)
    hopeless = str(vramkit.plan("llama-2-70b", gpu="RTX 4090", seq=4096))
    assert "no change fits alone; closest: " in hopeless


GENERATION = ("llama-2-70b", "--infer", "--seq", "4096", "--new-tokens", "4096", "--transformers", "4.32",
              "--batch", "8", "--attention", "flash")


def _plan_json(*args: str) -> dict[str, dict]:
    """`vram --simulate demo plan ARGS --json` as a user runs it: its changes by label."""
    from helpers import run_vram

    r = run_vram("--simulate", "demo", "plan", *args, "--json")
    assert r.rc == 0, r.err
    return {c["what"]: c for c in r.json()["changes"]}


def _estimate_total(*args: str) -> int:
    from helpers import run_vram

    r = run_vram("--simulate", "demo", "estimate", *args, "--json")
    assert r.rc == 0, r.err
    return int(r.json()["total_bytes"])


def test_plan_for_generation_offers_a_newer_transformers_fewer_tokens_and_a_shorter_prompt():
    """Generation with transformers 4.32's generate() (two caches a step, every prompt position's logits):
    each change names the flag to type, and typing it into `vram estimate` gives the change's number."""
    import re

    changes = _plan_json(*GENERATION, "--gpu", "rtx-4090")
    offered = ["transformers 4.54 or later (--transformers 4.54)", "2048 new tokens (--new-tokens 2048)",
               "shorter prompt: 2048 tokens (--seq 2048)"]
    assert set(offered) <= set(changes)
    before = _estimate_total(*GENERATION)
    for what in offered:
        flag, value = re.search(r"\((--[a-z-]+) (\S+)\)$", what).groups()  # type: ignore[union-attr]
        args = list(GENERATION)
        args[args.index(flag) + 1] = value
        assert changes[what]["total_bytes"] == _estimate_total(*args) < before, what
    # the rows of stack.BEHAVIOURS that matter to llama's generation (cache_views is GPT-2's alone)
    assert changes[offered[0]]["setup"] == {"legacy_cache": False, "all_logits": False}


def test_plan_for_generation_leaves_out_what_does_not_lower_the_peak():
    """transformers 4.54 on is the default: no upgrade to offer. With eager attention the prefill's scores
    are the peak, which neither a newer generate() nor fewer new tokens lowers: neither is listed."""
    assert not any(w.startswith("transformers") for w in _plan_json(*GENERATION[:6], "--gpu", "rtx-4090"))
    eager = ("llama-2-70b", "--infer", "--seq", "4096", "--new-tokens", "4096", "--attention", "eager",
             "--transformers", "4.32")
    changes = _plan_json(*eager, "--gpu", "rtx-4090")
    assert _estimate_total(*eager) == _estimate_total(*eager[:-1], "4.54")
    assert not any(w.startswith("transformers") or "new token" in w for w in changes)
    assert "shorter prompt: 2048 tokens (--seq 2048)" in changes


def test_plan_over_qlora_keeps_it_when_sharding_and_lists_each_setup_once():
    """QLoRA on 2 GPUs under FSDP: the stack does not repeat QLoRA (already so), shards with FSDP over 8 GPUs
    keeping the 4-bit base, and the stacked "flash attention" (the single flash change again) is not listed;
    without FSDP it shards with ZeRO-3, still QLoRA (it went back to full fine-tuning: 138 GiB)."""
    qlora = ("llama-2-70b", "--lora", "16", "--quant", "4bit", "--seq", "2048", "--attention", "eager")
    changes = _plan_json(*qlora, "--fsdp", "--gpus", "2", "--gpu", "rtx-4090")
    assert not any("QLoRA" in w for w in changes)
    diffs = [sorted(c["setup"].items()) for w, c in changes.items() if not w.startswith("smaller model")]
    assert all(diffs) and len(diffs) == len({repr(d) for d in diffs})  # none empty, none twice
    sharded = changes["flash attention + checkpointing + FSDP on 8 GPUs"]
    assert sharded["setup"] == {"attention": "flash", "checkpointing": True, "gpus": 8}
    assert sharded["total_bytes"] == _estimate_total(*qlora, "--fsdp", "--gpus", "8", "--attention", "flash",
                                                     "--checkpointing")
    # already flash, no FSDP: no step of the stack repeats the setup, and ZeRO-3 keeps QLoRA
    changes = _plan_json(*qlora, "--attention", "flash", "--gpu", "t4")
    assert not any("flash" in w or "QLoRA" in w for w in changes), list(changes)
    assert changes["checkpointing + ZeRO-3 on 8 GPUs"]["setup"] == {"checkpointing": True, "zero": 3, "gpus": 8}


def test_each_change_plan_offers_is_what_estimate_gives_for_its_flags():
    """A change's figure is what `vram estimate` says for the same flags: the stack's defaults filled in
    for the changed setup (a 4-bit base does not get the checkpoint's pure bf16, which estimate gives it
    only without --quant), and a QLoRA that keeps the user's optimizer is not labelled 8-bit AdamW."""
    import json

    from helpers import run_vram

    flags = {"checkpointing": ["--checkpointing"], "lora": lambda v: ["--lora", str(v)],
             "quant": lambda v: ["--quant", v], "optimizer": lambda v: ["--optimizer", v]}
    result = run_vram("plan", "llama-3-8b", "--card", "rtx-4090", "--batch", "4", "--seq", "2048", "--json")
    assert result.rc == 0, result.err
    changes = [c for c in json.loads(result.out)["changes"] if "quant" in c["setup"]]
    assert changes
    for change in changes:
        assert "8-bit AdamW" not in change["what"] or change["setup"].get("optimizer") == "adamw-8bit", change
        args = []
        for key, value in change["setup"].items():
            flag = flags[key]
            args += flag if isinstance(flag, list) else flag(value)
        estimated = run_vram("estimate", "llama-3-8b", "--batch", "4", "--seq", "2048", *args, "--json")
        assert estimated.rc == 0, estimated.err
        assert json.loads(estimated.out)["total_bytes"] == change["total_bytes"], change


def test_a_family_only_the_tracer_knows_is_sent_to_estimate_not_told_it_is_unsupported(tmp_path):
    """phi3, gemma2, falcon...: `vram estimate` traces them; the planner weighs tens of setups by the
    formulas, so it says where the estimate is (not that the model cannot be estimated at all)."""
    import json

    from helpers import assert_one_line_error, run_vram

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "phi3", "hidden_size": 256, "num_hidden_layers": 2,
                                  "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 2000}))
    result = run_vram("plan", str(config), "--card", "h200")
    assert_one_line_error(result, 2, f"`vram estimate {config}` traces it")
    assert "is not supported" not in result.err
