"""The small ones of issue 29 item 6: inference over several GPUs is not called DDP; the host (CPU)
memory an offloaded run needs, in the text and in --json; several precisions in one table."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_vram

LLAMA_2_13B = 13_015_864_320  # its parameters, as vram counts them


def test_inference_over_several_gpus_splits_layers_and_is_not_ddp():
    out = run_vram("estimate", "llama-2-13b", "--gpus", "2", "--infer").out
    assert "DDP" not in out and "2 GPUs, layers split over them (device_map='auto')" in out
    tp = run_vram("estimate", "llama-2-13b", "--gpus", "4", "--tp", "4", "--infer").out
    assert "DDP" not in tp and "4 GPUs, tp 4" in tp
    assert "2 GPUs, DDP" in run_vram("estimate", "gpt2", "--gpus", "2").out  # training is data parallel


@pytest.mark.parametrize("args, per_param", [
    # DeepSpeed's estimate_zero2_model_states_mem_needs: P * max(4 * gpus, 16) * 1.5
    (("--zero", "2", "--gpus", "4", "--offload"), 16),
    (("--zero", "2", "--gpus", "8", "--offload"), 32),
    # estimate_zero3_model_states_mem_needs (zero_init): P * 16 * 1.5; with the parameters too, P * 18 * 1.5
    (("--zero", "3", "--gpus", "8", "--offload", "optimizer"), 16),
    (("--zero", "3", "--gpus", "8", "--offload", "optimizer,params"), 18),
])
def test_deepspeed_offload_needs_host_memory_as_deepspeed_estimates_it(args, per_param):
    data = run_vram("estimate", "llama-2-13b", *args, "--checkpointing", "--json").json()
    assert data["host_bytes"] == int(LLAMA_2_13B * per_param * 1.5)
    assert "additional_buffer_factor" in data["host_formula"]
    text = run_vram("estimate", "llama-2-13b", *args, "--checkpointing").out
    host = next(line for line in text.splitlines() if line.startswith("host memory"))
    assert "CPU RAM" in host and "DeepSpeed offload" in host
    kept = [a for a in args if a not in ("--offload", "optimizer", "optimizer,params")]  # all on the GPUs
    assert "host_bytes" not in run_vram("estimate", "llama-2-13b", *kept, "--checkpointing", "--json").json()


def test_fsdp_cpu_offload_keeps_parameters_gradients_and_states_on_the_host():
    data = run_vram("estimate", "llama-2-13b", "--fsdp", "--gpus", "8", "--offload", "params", "--precision", "fp32",
                    "--checkpointing", "--json").json()
    assert data["host_bytes"] == LLAMA_2_13B * (4 + 4 + 8)


def test_several_precisions_are_one_table_of_the_same_estimates():
    result = run_vram("estimate", "llama-3-8b", "--infer", "--precision", "bf16,int8,int4")
    assert result.rc == 0, result.err
    lines = result.out.splitlines()
    assert "ESTIMATE by precision" in lines[0]
    header = next(i for i, line in enumerate(lines) if line.startswith("precision"))
    rows = {line.split()[0]: line for line in lines[header + 1:header + 4]}
    assert set(rows) == {"bf16", "int8", "int4"}
    alone_flags = {"bf16": ("--precision", "bf16"), "int8": ("--quant", "8bit"), "int4": ("--quant", "4bit")}
    for name, alone in alone_flags.items():
        single = run_vram("estimate", "llama-3-8b", "--infer", *alone).out
        shown = next(line for line in single.splitlines() if line.startswith("nvidia-smi shows")).split()[2]
        assert rows[name].split()[-1] == shown
    data = run_vram("estimate", "llama-3-8b", "--infer", "--precision", "bf16,int8,int4", "--json").json()
    totals = [row["total_bytes"] for row in data["by_precision"]]
    assert [row["precision"] for row in data["by_precision"]] == ["bf16", "int8 (bitsandbytes)", "int4 (bitsandbytes)"]
    assert totals[0] > totals[1] > totals[2]


@pytest.mark.parametrize("args, needle", [
    (("llama-2-7b", "--precision", "bf16,fp8"), "'fp8': give fp32, fp16, bf16, bf16-pure, int8 or int4"),
    (("llama-2-7b", "--precision", "bf16,int4"), "int4: training a quantized model needs LoRA"),
    (("llama-2-7b", "--precision", "bf16,int8", "--quant", "4bit", "--lora", "8"), "give one or the other"),
    (("llama-2-7b", "--precision", "bf16,fp32", "--trace"), "--trace shows one estimate"),
])
def test_a_comparison_it_cannot_make_is_one_line(args, needle):
    assert_one_line_error(run_vram("estimate", *args), 2, needle)


def test_plan_takes_one_precision():
    assert_one_line_error(run_vram("plan", "llama-2-7b", "--precision", "bf16,int8"), 2,
                          "give one of fp32, fp16, bf16, bf16-pure")
