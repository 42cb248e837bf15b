"""vram estimate and vram plan in Chinese (issue 34): the header, the breakdown's term names, the
summary, the notes, --explain's formulas and moments, plan's verdict and ranked changes, the errors
and the help are zh_CN except what stays English on purpose (model, library and dtype names, code
identifiers, flags, units); the breakdown lines up by display width at 80 columns; --json stays
English."""

from __future__ import annotations

import json
import re

import pytest
from helpers import clean_env, run_vram

from vramkit.render.text_width import cells

ZH = clean_env(VRAM_LANG="zh_CN", COLUMNS="80")
# Names that stay English inside Chinese text: libraries, kernels, dtypes, hardware, code.
KEPT = {"GPU", "GPUs", "CUDA", "cuBLAS", "cuBLASLt", "Hopper", "PyTorch", "PEFT", "LoRA", "QLoRA", "SDPA", "AdamW",
        "adamw", "fp32", "bf16", "fp16", "bf16-pure", "dtype", "flash", "eager", "hf-trainer", "transformers",
        "torch", "LitGPT", "torchtune", "nvidia-smi", "GiB", "MiB", "kernel", "logits", "log-softmax", "norm", "max",
        "q/v", "q/k/v", "up", "gate_up", "relu", "gelu", "softmax", "dropout", "query", "DeepSpeed", "ZeRO-3",
        "ZeRO-Infinity", "ZeRO-Offload", "ZeRO", "FSDP", "CPU", "CPUOffload", "DDP", "DataParallel", "Mixtral",
        "HF", "kv", "k/v", "q", "k", "v", "B", "b", "s", "h", "i", "a", "r", "AdamW8bit", "bitsandbytes", "NF4",
        "torchao", "MatMul4Bit", "MatMul8bitLt", "attn_output", "MLP", "generate", "token", "tokens", "grouped-query",
        "multi-query", "no-grad", "top", "rtx-4090", "a100-40gb", "a100-80gb", "l40s", "l40", "a40", "rtx-6000-ada",
        "rtx-a6000", "radeon-pro-w7900", "mi250x", "h100-sxm", "h100-pcie", "h200", "bert-large-uncased",
        "bert-base-uncased", "llama-3-8b", "mistral-7b", "paged-adamw", "SGD", "double-quant", "4bit", "8bit",
        "uint8", "int8", "int4", "absmax", "exp_avg", "exp_avg_sq", "foreach", "Adam", "denom", "eps", "tp",
        "device_map", "overlap_comm", "KV", "down", "reduce", "int64", "NVML", "vram", "estimate", "plan", "MODEL",
        "config.json", "json", "list"}


def english_left(line: str) -> list[str]:
    """The English words of a sentence left in `line`, once what stays English is taken out: flags,
    quoted names, code (dotted, underscored or called names), sizes, formulas' symbols."""
    line = re.sub(r"'[^']*'|`[^`]*`", " ", line)  # quoted names
    # model and GPU names: llama-3-8b, rtx-4090, t5-base
    line = re.sub(r"\b[A-Za-z][\w.]*-[\w.-]*\d[\w.-]*|\b[A-Za-z]+\d[\w.]*-[\w.-]+", " ", line)
    line = re.sub(r"--[\w-]+|/[\w./-]+|\b[\w.]+=[\w.,']+", " ", line)  # flags, paths, VAR=value
    line = re.sub(r"\b[\w.]*[._][\w.]*\w\(?\)?", " ", line)  # code: torch._fused_adamw_, zero_grad(), a.b
    line = re.sub(r"\b\w+\(", " ", line)  # a function's name: max(, sqrt(
    line = re.sub(r"\b\d[\w.,-]*", " ", line)  # numbers, sizes, 16bit, 4bit
    words = re.findall(r"[A-Za-z][A-Za-z0-9_/-]*[A-Za-z0-9]|\b[A-Za-z]\b", line)
    return [w for w in words if w not in KEPT and not re.fullmatch(r"\d*[A-Za-z]?\d+[A-Za-z]*", w)]


def assert_chinese(text: str) -> None:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines
    left = {line: english_left(line) for line in lines}
    assert not {line: words for line, words in left.items() if words}, left
    assert any(re.search(r"[\u4e00-\u9fff]", line) for line in lines)


def test_estimate_explain_is_chinese_and_the_breakdown_lines_up_at_80_columns():
    result = run_vram("estimate", "llama-3-8b", "--batch", "4", "--seq", "2048", "--lora", "16", "--explain",
                      env=ZH)
    assert result.rc == 0, result.err
    out = result.out
    assert_chinese(out)
    for words in ("估算", "权重", "激活值", "优化器状态（adamw）", "峰值已分配", "已保留", "nvidia-smi 显示",
                  "注意：", "批大小 4", "序列长度 2048", "各项的计算方式", "反向开始", "每层保存的激活值"):
        assert words in out, words
    lines = out.splitlines()
    # the breakdown: within 80 columns, the sizes end where the memory heading ends, the shares where theirs
    # does, by display width
    start = next(i for i, line in enumerate(lines) if line.startswith("峰值时刻"))
    header, rows = lines[start], lines[start + 1:lines.index("", start)]
    assert len(rows) >= 6
    assert all(cells(line) <= 80 for line in (header, *rows)), [header, *rows]
    memory_end = cells(header[:header.index("显存") + 2])
    share_end = cells(header)
    for row in rows:
        size = re.search(r"\d+(\.\d+)?[KMGT]iB", row)
        assert size and cells(row[:size.end()]) == memory_end, (header, row)
        assert cells(row) >= share_end and row.endswith("%"), (header, row)
    # the moments' table: sizes end in one column
    moments = lines[next(i for i, line in enumerate(lines) if line.startswith("第二步各时刻")) + 1:][:4]
    assert len({cells(line[:re.search(r"GiB", line).end()]) for line in moments}) == 1, moments


@pytest.mark.parametrize("args", [
    ("mistral-7b", "--infer", "--batch", "4", "--seq", "8192", "--explain"),
    ("llama-2-13b", "--infer", "--seq", "512", "--new-tokens", "512", "--transformers", "4.32", "--explain"),
    ("llama-2-70b", "--gpus", "8", "--zero", "3", "--checkpointing", "--attention", "flash", "--explain"),
    ("bert-large-uncased", "--batch", "4", "--seq", "512", "--precision", "fp32", "--explain"),
    ("t5-base", "--infer", "--explain"),
    ("llama-2-13b", "--zero", "2", "--gpus", "4", "--offload", "optimizer", "--explain"),
], ids=["inference", "generation", "zero3", "bert-fp32", "t5-inference", "offload"])
def test_other_setups_are_chinese(args):
    result = run_vram("estimate", *args, env=ZH)
    assert result.rc == 0, result.err
    assert_chinese(result.out)


def test_plan_is_chinese_and_its_changes_line_up():
    result = run_vram("plan", "bert-large-uncased", "--card", "rtx-4090", "--batch", "32", "--seq", "512",
                      "--precision", "fp32", env=ZH)
    assert result.rc == 0, result.err
    assert_chinese(result.out)
    assert "放不下" in result.out and "代价小的在前" in result.out and "梯度检查点" in result.out
    changes = [line for line in result.out.splitlines() if line.startswith("  ")]
    assert len(changes) >= 5
    ends = {cells(line[:re.search(r"\d+(\.\d+)?[KMGT]iB", line).end()]) for line in changes}
    assert len(ends) == 1, changes


def test_json_stays_english_where_the_text_is_chinese():
    text = run_vram("estimate", "llama-3-8b", "--lora", "16", env=ZH)
    assert text.rc == 0 and "权重" in text.out and "注意：" in text.out, text.err
    result = run_vram("estimate", "llama-3-8b", "--lora", "16", "--json", env=ZH)
    data = result.json()
    assert "weights" in data["breakdown"] and "activations" in data["breakdown"]
    assert all(not re.search(r"[\u4e00-\u9fff]", note) for note in data["notes"])
    assert not re.search(r"[\u4e00-\u9fff]", json.dumps(data, ensure_ascii=False))
    plan = run_vram("plan", "bert-large-uncased", "--card", "rtx-4090", "--batch", "32", "--json", env=ZH).json()
    assert not re.search(r"[\u4e00-\u9fff]", json.dumps(plan, ensure_ascii=False))


@pytest.mark.slow  # seven commands
def test_help_and_errors_are_chinese():
    helped = run_vram("estimate", "--help", env=ZH)
    assert helped.rc == 0, helped.err
    for words in ("模型和输入", "训练步", "量化", "显示每一项代入数值后的公式", "每块 GPU 的微批（默认 1）", "示例："):
        assert words in helped.out, words
    assert "DeepSpeed 的 reduce_bucket_size，单位为元素" in helped.out
    assert "缓存分配器和 CUDA 上下文" in helped.out.replace("\n", "")  # a paragraph folded by display width
    assert helped.out.startswith("用法：vram estimate [选项] MODEL | --list")
    planned = run_vram("plan", "--help", env=ZH)
    assert "要规划的 GPU" in planned.out and "不做改动即可放下" in planned.out
    assert planned.out.startswith("用法：vram plan [选项] MODEL")
    for args, words in ((("estimate", "llama-9b"), "未知的模型 'llama-9b'"),
                        (("estimate", "llama-3-8b", "--tp", "3"), "必须能整除 GPU 数"),
                        (("estimate", "llama-3-8b", "--quant", "4bit"), "训练量化模型需要 LoRA"),
                        (("estimate", "llama-3-8b", "--precision", "fp9"), "请给出"),
                        (("plan", "llama-3-8b", "--card", "rtx-9999"), "未知的 GPU 'rtx-9999'")):
        result = run_vram(*args, env=ZH)
        assert result.rc == 2 and words in result.err and result.err.count("\n") == 1, (args, result.err)


def test_the_precision_table_is_chinese_and_lines_up():
    result = run_vram("estimate", "llama-3-8b", "--infer", "--precision", "bf16,int8,int4", env=ZH)
    assert result.rc == 0, result.err
    assert_chinese(result.out)
    lines = result.out.splitlines()
    header = lines[2]
    assert header.startswith("精度") and "nvidia-smi 显示" in header
    heads = ("权重", "峰值已分配", "已保留", "nvidia-smi 显示")
    ends = [cells(header[:header.index(head) + len(head)]) for head in heads]
    for row in lines[3:6]:
        sizes = list(re.finditer(r"\d+(\.\d+)?[KMGT]iB", row))
        assert [cells(row[:m.end()]) for m in sizes] == ends, (header, row)


def test_list_headings_are_chinese():
    result = run_vram("estimate", "--list", env=ZH)
    assert result.rc == 0 and result.out.splitlines()[0].split() == ["模型", "系列", "参数量"], result.out[:200]
