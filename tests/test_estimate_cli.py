"""`vram estimate` and `vram plan` as a user runs them."""

from __future__ import annotations

import json
import os

import pytest
from helpers import assert_one_line_error, run_vram


def test_estimate_table_and_json():
    r = run_vram("estimate", "bert-large-uncased", "--batch", "4", "--seq", "512", "--precision", "fp32")
    assert r.rc == 0, r.err
    assert "ESTIMATE" in r.out and "activations" in r.out and "nvidia-smi shows" in r.out
    assert "\x1b[" not in r.out and "#" in r.out  # not a terminal: no colour, ASCII bars
    data = run_vram("estimate", "bert-large-uncased", "--batch", "4", "--seq", "512", "--json").json()
    for key in ("total_bytes", "context_bytes", "peak_bytes", "breakdown"):
        assert key in data
    assert data["total_bytes"] == sum(data["breakdown"].values())
    assert data["context_bytes"] == 768 * 1024**2  # measured on an H200 (docs/gpu-check.md)


def test_explain_shows_formulas_with_numbers():
    r = run_vram("estimate", "gpt2", "--explain", "--batch", "2")
    assert r.rc == 0, r.err
    assert "124,439,808 params × 4 B" in r.out
    assert "activations saved per layer" in r.out and "<- peak" in r.out


@pytest.mark.slow
def test_options_reach_the_estimate():
    base = run_vram("estimate", "llama-2-7b", "--json").json()
    qlora = run_vram("estimate", "llama-2-7b", "--json", "--lora", "16", "--quant", "4bit", "--checkpointing").json()
    assert qlora["total_bytes"] < base["total_bytes"] / 4
    zero = run_vram("estimate", "llama-2-70b", "--json", "--gpus", "8", "--zero", "3", "--offload").json()
    assert zero["setup"]["zero"] == 3 and zero["setup"]["offload"]
    infer = run_vram("estimate", "mistral-7b", "--infer", "--seq", "8192", "--json",
                     "--context-overhead", "1GiB").json()
    assert "KV cache" in infer["breakdown"] and infer["context_bytes"] == 1024**3
    bare = run_vram("estimate", "7b")
    assert bare.rc == 0 and "weights and model states only" in bare.out


def test_batch_size_and_seq_len_are_accepted_as_in_doctor():
    # doctor says --batch-size/--seq-len, estimate --batch/--seq: each accepts both.
    short = run_vram("estimate", "bert-base-uncased", "--batch", "8", "--seq", "256", "--json").json()
    long = run_vram("estimate", "bert-base-uncased", "--batch-size", "8", "--seq-len", "256", "--json").json()
    assert short == long and short != run_vram("estimate", "bert-base-uncased", "--json").json()
    plan = run_vram("plan", "bert-large-uncased", "--gpu", "rtx-4090", "--batch-size", "32", "--seq-len", "512")
    assert plan.out == run_vram("plan", "bert-large-uncased", "--gpu", "rtx-4090", "--batch", "32", "--seq", "512").out
    assert_one_line_error(run_vram("estimate", "gpt2", "--batch-size", "0"), 2, "--batch")
    assert "usage: vram estimate [options] MODEL | --list" in run_vram("estimate", "--help").out
    assert "\n  --batch N, --batch-size N" in run_vram("estimate", "--help").out


def test_list():
    r = run_vram("estimate", "--list")
    assert r.rc == 0 and "llama-3-70b" in r.out and "vit-large" in r.out


@pytest.mark.parametrize("args, needle", [
    (("estimate", "bert-lage"), "did you mean bert-large"),
    (("estimate", "gpt2", "--batch", "0"), "error: --batch: must be a whole number of at least 1, not 0"),
    (("estimate", "gpt2", "--seq", "-3"), "error: --seq: must be a whole number of at least 1, not -3"),
    (("estimate", "gpt2", "--batch", "two"), "not a whole number"),
    (("estimate", "gpt2", "--context-overhead=-1GiB"), "negative"),
    (("estimate", "gpt2", "--precision", "fp8"), "--precision: 'fp8': give fp32, fp16, bf16, bf16-pure, int8 or int4"),
    (("estimate", "bert-base", "--seq", "1024"), "positions"),
    (("estimate",), "give a MODEL"),
    (("plan", "gpt2", "--card", "a101"), "did you mean"),
    (("plan", "gpt2", "--batch", "0"), "--batch"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    assert_one_line_error(run_vram(*args), 2, needle)


def test_missing_config_keys(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64}))
    assert_one_line_error(run_vram("estimate", str(tmp_path)), 2, "missing 'n_head'")
    assert_one_line_error(run_vram("estimate", str(tmp_path / "none.json")), 2, "no such file")


def test_plan_ranks_changes_and_lists_gpus():
    r = run_vram("plan", "bert-large-uncased", "--gpu", "rtx-4090", "--batch", "32", "--seq", "512",
                 "--precision", "fp32")
    assert r.rc == 0, r.err
    assert "DOES NOT FIT" in r.out and "largest micro-batch that fits" in r.out
    assert "activation checkpointing" in r.out and "GPUs that fit it unchanged: " in r.out
    data = run_vram("plan", "bert-large-uncased", "--gpu", "rtx-4090", "--batch", "32", "--seq", "512",
                    "--precision", "fp32", "--json").json()
    assert not data["fits"] and 0 < data["max_batch"] < 32
    assert any(c["fits"] for c in data["changes"])
    assert all(g["memory_bytes"] >= data["total_bytes"] for g in data["gpus_that_fit"])
    accum = [c for c in data["changes"] if c["what"].startswith("micro-batch")]
    assert accum and accum[0]["fits"]


def test_plan_current_gpu_on_the_simulated_machine():
    data = run_vram("plan", "gpt2", "--gpu", "current", "--simulate", "demo", "--json").json()
    assert data["gpu"] == "the GPU here with the most free memory" and data["capacity_bytes"] > 0
    assert data["fits"]


def test_plan_fits():
    r = run_vram("plan", "bert-base-uncased", "--gpu", "h100", "--batch", "8")
    assert r.rc == 0 and "FITS" in r.out and "DOES NOT FIT" not in r.out


def test_estimate_without_trace_imports_no_torch():
    r = run_vram("estimate", "gpt2", "--json", python_flags=("-X", "importtime"))
    assert r.rc == 0
    names = {line.rsplit("|", 1)[1].strip() for line in r.err.splitlines() if line.startswith("import time:")}
    assert "vramkit.estimator.analytic" in names and not any(n.split(".")[0] == "torch" for n in names)


def test_status_does_not_load_the_estimator():
    r = run_vram("status", "--simulate", "demo", python_flags=("-X", "importtime"))
    assert r.rc == 0
    names = {line.rsplit("|", 1)[1].strip() for line in r.err.splitlines() if line.startswith("import time:")}
    assert not any(n.startswith("vramkit.estimator") for n in names)


@pytest.mark.slow
def test_trace_option(cli):
    pytest.importorskip("torch")
    data = run_vram("estimate", "tinybert", "--batch", "2", "--seq", "64", "--trace", "--json", timeout=120).json()
    traced, analytic = data["trace"]["peak_bytes"], data["peak_bytes"]
    assert abs(analytic / traced - 1) < 0.10
    # the text in this process: a second vram process would import torch again (seconds) to print it
    rc, out, err = cli("estimate", "tinybert", "--batch", "2", "--seq", "64", "--trace")
    assert rc == 0 and "traced (fake tensors" in out and "not seen" in out, err
    assert_one_line_error(run_vram("estimate", "7b", "--trace"), 2, "bare parameter count")


def test_the_default_eager_attention_says_what_sdpa_would_need_where_the_scores_dominate():
    """A 32k context with an old stack's default eager attention (transformers < 4.36) is mostly score
    matrices: the note gives the flash / SDPA figure; asked for explicitly, no note."""
    default = run_vram("estimate", "mistral-7b", "--infer", "--seq", "32768", "--transformers", "4.35")
    assert default.rc == 0, default.err
    note = next(line for line in default.out.splitlines() if line.startswith("note: eager attention"))
    flash = run_vram("estimate", "mistral-7b", "--infer", "--seq", "32768", "--transformers", "4.35", "--attention",
                     "flash", "--json").json()
    from vramkit.units import format_size

    assert f"it would be {format_size(flash['total_bytes'])} " in note
    explicit = run_vram("estimate", "mistral-7b", "--infer", "--seq", "32768", "--attention", "eager")
    assert "note: eager attention" not in explicit.out
    short = run_vram("estimate", "mistral-7b", "--infer", "--seq", "256", "--transformers", "4.35")
    assert "note: eager attention" not in short.out  # the scores are no large share there
    assert "note: eager attention" not in run_vram("estimate", "mistral-7b", "--infer", "--seq", "32768").out  # SDPA


@pytest.mark.parametrize("extra, needle", [
    ({"n_positions": "many"}, "n_positions must be a whole number, not 'many'"),  # an optional key of the wrong type
    ({"n_positions": 1e400}, "n_positions must be a whole number below 1e15, not inf"),  # JSON's 1e400 is inf
    ({"attn_pdrop": float("nan")}, "attn_pdrop must be a probability from 0 to 1, not nan"),
    ({"n_layer": 2_000_000}, "more than any model has"),  # every per-layer walk stays bounded
    ({"n_head": 0}, "n_head must be a whole number of at least 1, not 0"),  # formulas divide by it
    ({"n_embd": 2}, "head_dim must be at least 1"),  # narrower than its 4 heads
    ({"n_embd": 10**13}, "parameters is more than any model has"),
    ({"attn_pdrop": 2.0}, "attn_pdrop must be a probability from 0 to 1"),
    ({"n_positions": 10**400}, "n_positions must be a whole number below 1e15, not a 401-digit number"),  # short
])
def test_hostile_config_values_are_one_line_errors(tmp_path, extra, needle):
    cfg = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, **extra}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run_vram("estimate", str(tmp_path)), 2, needle)


def test_a_yes_or_no_of_a_config_is_true_or_false_not_a_word(tmp_path):
    """bool("false") is True: Llama's untied head (its 525 M parameters at 8B) would go uncounted."""
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "tie_word_embeddings": "false"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run_vram("estimate", str(tmp_path)), 2,
                          "tie_word_embeddings must be true or false, not 'false'")


def test_a_negative_t5_decoder_depth_is_refused(tmp_path):
    cfg = {"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 128, "d_kv": 16,
           "vocab_size": 100, "num_decoder_layers": -5}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run_vram("estimate", str(tmp_path)), 2,
                          "num_decoder_layers must be a whole number of at least 0")


@pytest.mark.parametrize("extra, needle", [
    ({"num_key_value_heads": 5}, "5 key/value heads do not divide 32"),
    ({"num_experts_per_tok": 0}, "num_experts_per_tok must be a whole number of at least 1, not 0"),
    ({"num_experts_per_tok": 9}, "9 experts per token of 8"),
    ({"num_local_experts": 100_000}, "at most 65,536 experts in all"),  # param_shapes lists every one
])
def test_hostile_moe_and_attention_shapes_are_one_line_errors(tmp_path, extra, needle):
    cfg = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2, **extra}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(run_vram("estimate", str(tmp_path)), 2, needle)


def test_a_config_file_is_read_bounded_and_never_waited_on(tmp_path):
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000)
    assert_one_line_error(run_vram("estimate", str(nested)), 2, "nested too deeply")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of zeros
    assert_one_line_error(run_vram("estimate", str(big)), 2, "not a config.json")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # nobody writes: reading it would wait forever
    assert_one_line_error(run_vram("estimate", str(fifo)), 2, "fifo.json is not a regular file")  # not "no such file"
    folder = tmp_path / "folder"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    assert_one_line_error(run_vram("estimate", str(folder)), 2, "config.json is not a regular file")
    # a key given twice: json keeps the last silently (Llama-3.1-8B with a second, smaller depth appended)
    twice = tmp_path / "twice.json"
    twice.write_text('{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_layer": 1}')
    assert_one_line_error(run_vram("estimate", str(twice)), 2, "the key 'n_layer' is given twice")
    # a link the user names is followed (Hugging Face's cache keeps config.json as a link into its blobs)
    real = tmp_path / "blob"
    real.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}))
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "config.json").symlink_to(real)
    assert run_vram("estimate", str(tmp_path / "snap")).rc == 0


def test_numbers_are_ascii_digits_and_options_their_own_type(tmp_path):
    # int() and float() take other scripts' digits and underscores; a JSON config's true or 1.5 is no size
    for flag, value in (("--batch", "\u0665"), ("--batch", "1_000"), ("--zero-reduce-bucket", "\u0665e8")):
        args = ("estimate", "gpt2", "--zero", "2", "--gpus", "2", flag, value)
        assert_one_line_error(run_vram(*args), 2, flag)
    for extra, needle in (({"sliding_window": True}, "sliding_window must be a whole number"),
                          ({"hidden_size": 4096.5}, "hidden_size must be a whole number")):
        cfg = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
               "intermediate_size": 14336, "vocab_size": 32000, **extra}
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        assert_one_line_error(run_vram("estimate", str(tmp_path)), 2, "config.json: " + needle)
    assert_one_line_error(run_vram("estimate", "7b", "--infer", "--new-tokens", "10"), 2, "--new-tokens",
                          "not a bare count")
    from vramkit.estimator.analytic import estimate
    from vramkit.estimator.specs import EstimateError

    for stage in (3.0, True):  # 3.0 == 3 and True == 1, yet neither is a stage
        with pytest.raises(EstimateError, match="ZeRO stage"):
            estimate("gpt2", zero=stage, gpus=2)


def test_a_quantized_checkpoint_is_priced_as_its_config_says(tmp_path):
    """A GPTQ, AWQ or bitsandbytes checkpoint's config says its weights are 4- or 8-bit
    (quantization_config): priced so where they stay frozen (inference, LoRA), not as 16-bit (~2.8x
    the weights); a full fine-tune is priced dequantized; a quantization the estimator does not model is
    said, not ignored."""
    base = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
            "intermediate_size": 1376, "vocab_size": 1000, "torch_dtype": "float16"}

    def weights(cfg: dict, *args: str) -> tuple[int, str]:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps(cfg))
        result = run_vram("estimate", str(path), "--seq", "256", "--json", *args)
        assert result.rc == 0, result.err
        doc = json.loads(result.out)
        setup = doc["setup"]
        return doc["breakdown"]["weights"], " ".join(doc["notes"]) + f" quant={setup['quant']} " \
            f"compute={setup['quant_compute_dtype']}"

    plain, _ = weights(base, "--infer")
    # the compute dtype: GPTQ's and AWQ's kernels run in the checkpoint's (float16 here); bitsandbytes' in its
    # bnb_4bit_compute_dtype (HF's default fp32 where the config names none)
    for quant, compute in (({"quant_method": "gptq", "bits": 4, "group_size": 128}, "fp16"),
                           ({"quant_method": "awq", "bits": 4}, "fp16"),
                           ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "fp32"),
                           ({"quant_method": "bitsandbytes", "load_in_4bit": True,
                             "bnb_4bit_compute_dtype": "bfloat16"}, "bf16")):
        four, said = weights({**base, "quantization_config": quant}, "--infer")
        assert four < plain / 2 and f"quantized ({quant['quant_method']}, 4-bit)" in said
        assert f"quant=4bit compute={compute}" in said, said
        assert weights({**base, "quantization_config": quant}, "--lora", "8")[0] == four  # frozen under LoRA
        assert weights({**base, "quantization_config": quant})[0] == weights(base)[0]  # a full fine-tune: dequantized
    assert weights(base, "--infer", "--quant", "4bit")[0] == four  # as --quant 4bit prices it
    eight, said = weights({**base, "quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True}},
                          "--infer")
    assert four < eight < plain
    fp8, said = weights({**base, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}, "--infer")
    assert fp8 == plain and "quantization_config (fp8) is not modelled" in said
