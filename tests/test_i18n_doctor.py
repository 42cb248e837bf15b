"""vram doctor in Chinese (issue 34): an OOM from a real log explained (with this machine's live
data and with --no-live) and the machine checklist read in zh_CN, except what stays English on
purpose: the PyTorch/CUDA text quoted from the log, commands, flags, environment variables, units,
names. Columns still line up by display width."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import clean_env, run_vram, zh_env

from vramkit import i18n
from vramkit.render.text_width import cells

FIXTURES = Path(__file__).parent / "fixtures"
REAL_LOGS = sorted((FIXTURES / "oom_real").glob("*.log"))
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
# Names and words that stay as they are in Chinese text (products, libraries, commands, units).
KEPT = {"vram", "pick", "status", "kill", "ps", "run", "GPU", "GPUs", "CUDA", "PyTorch", "NVML", "NCCL", "HF",
        "DeepSpeed", "ROCm", "HIP", "MIG", "FSDP", "JAX", "XLA", "vLLM", "Paddle", "PaddlePaddle", "TensorFlow",
        "Keras", "Adam", "AdamW", "python", "pid", "SM", "MHz", "KV", "MPS", "DataParallel", "DataLoader",
        "DistributedDataParallel", "RuntimeError", "OutOfMemoryError", "Ctrl", "D", "N", "init", "nvme", "cpu",
        "cuBLAS", "cuDNN", "bf16", "fp32", "notebook", "worker", "token", "logits", "id", "bit", "view", "bug",
        "root", "dmesg", "Xid", "UUID"}
PLAIN = re.compile(r"^[A-Za-z]+[,;:.]?$")


def _plain_run(segment: str) -> int:
    """The longest run of plain English words in `segment` (code, flags, paths, numbers and the
    names in KEPT are not plain words)."""
    longest = run = 0
    for token in segment.split():
        word = token.rstrip(",;:.")
        if PLAIN.match(token) and word not in KEPT:
            run += 1
            longest = max(longest, run)
        else:
            run = 0
    return longest


def english_left(text: str) -> list[str]:
    """The lines of `text` that still read as English: three plain English words in a row anywhere,
    or two in a line with no Chinese in it (a label, a heading). Text between Chinese characters is
    judged on its own: an ASCII word next to Chinese punctuation is not part of a sentence."""
    found = []
    for line in text.splitlines():
        segments = CJK.split(line)
        worst = max((_plain_run(s) for s in segments), default=0)
        if worst >= 3 or (worst >= 2 and not CJK.search(line)):
            found.append(line)
    return found


def _value_columns(lines: list[str]) -> set[int]:
    """Where the value of each `  KEY  VALUE` row starts, in display columns."""
    out = set()
    for line in lines:
        m = re.match(r"^(  \S.*?\S? {2,})(\S.*)$", line)
        assert m, line
        out.add(cells(m.group(1)))
    return out


def test_english_left_finds_english() -> None:
    # the check itself: it finds the English-only output and passes the kept parts
    assert english_left("Fixes, most useful first:") and english_left("  asked for        274MiB")
    assert not english_left("  申请          274MiB")
    assert not english_left("     python train_dp.py --model resnet152 --batch-size 1024 --data /data/imagenet")
    assert not english_left("     当前：GPU 7（空闲 77.3GiB）；例如 CUDA_VISIBLE_DEVICES=7（或用 vram pick）")


def test_oom_log_with_live_data_is_chinese() -> None:
    log = FIXTURES / "oom_real" / "deepspeed_zero3_allgather_c10d.log"
    r = run_vram("doctor", str(log), "--simulate", "demo", env=zh_env(COLUMNS="120"))
    assert r.rc == 0, r.err
    assert english_left(r.out) == [], r.out
    assert "CUDA 显存不足（GPU 1）" in r.out and "原因：" in r.out and "修复办法" in r.out
    # kept English: the PyTorch setting, the frame quoted from the log, flags and commands
    assert "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128" in r.out
    assert "_default_pg.allgather([tensor_list], [tensor])" in r.out
    assert "python train_dp.py --model resnet152" in r.out
    # the rows line up by display width: Chinese labels take two columns a character
    rows = r.out.splitlines()[1:5]
    assert rows[0].startswith("  申请") and len(_value_columns(rows)) == 1, rows
    # --json stays English whatever the language
    j = run_vram("doctor", str(log), "--simulate", "demo", "--json", env=zh_env())
    assert j.rc == 0 and not CJK.search(j.out), j.out


def test_oom_log_without_live_data_is_chinese() -> None:
    log = FIXTURES / "oom_real" / "pt_mgfn_fragmentation.log"
    r = run_vram("doctor", str(log), "--no-live", env=zh_env(COLUMNS="100"))
    assert r.rc == 0, r.err
    assert english_left(r.out) == [], r.out
    assert "碎片" in r.out and "注意：未读取实时数据（--no-live）" in r.out
    rows = [line for line in r.out.splitlines()[1:] if line.startswith("  ") and not line.startswith("  [")]
    rows = rows[:next(i for i, line in enumerate(rows) if line.startswith("   "))]
    assert len(rows) >= 3 and len(_value_columns(rows)) == 1, rows


def test_locale_variable_alone_chooses_chinese() -> None:
    # a shell with LANG=zh_CN.UTF-8 and no VRAM_LANG: the locale variables decide
    log = FIXTURES / "oom_real" / "pt_mgfn_fragmentation.log"
    env = clean_env(VRAM_LANG=None, LANGUAGE=None, LC_ALL=None, LC_MESSAGES=None, LANG="zh_CN.UTF-8",
                    COLUMNS="100")
    r = run_vram("doctor", str(log), "--no-live", env=env)
    assert r.rc == 0, r.err
    assert english_left(r.out) == [] and "原因：" in r.out, r.out


@pytest.mark.parametrize("scenario", ["demo", "unhealthy"])
def test_checklist_is_chinese(scenario: str) -> None:
    r = run_vram("doctor", "--simulate", scenario, env=zh_env(COLUMNS="100"))
    assert r.rc == 0, r.err
    body = [line for line in r.out.splitlines() if not line.startswith(("模拟服务器", "SIMULATED", "20"))]
    assert english_left("\n".join(body)) == [], r.out
    assert "发现" in body[-1]
    # each finding's title starts at the column its detail and fix lines are indented to
    tags = [line for line in body if line.startswith(" ") and not line.startswith("  ")]
    assert tags and all(re.match(r"^ (问题|警告|提示) +\S", line) for line in tags), tags
    indent = {len(line) - len(line.lstrip(" ")) for line in body if line.startswith("   ")}
    starts = {cells(re.match(r"^ \S+ +", line).group(0)) for line in tags}  # type: ignore[union-attr]
    assert starts == indent, (starts, indent)


@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.stem)
def test_every_real_log_reads_in_chinese(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kind of message the real logs hold (HIP, JAX, Paddle, vLLM, llama.cpp, each phase):
    the diagnosis, built and drawn in-process, is Chinese but for the kept parts."""
    from vramkit.doctor.explain import explain
    from vramkit.doctor.oom import find_oom
    from vramkit.doctor.traceback import place_of
    from vramkit.render.doctor_view import _wrap, render_diagnosis
    from vramkit.render.style import Style

    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
        report = find_oom(text)
        if report is None:
            pytest.skip("a log whose job did not run out of memory")
        phase = place_of(text, report.offset, report.kind) if report.offset is not None else None
        ex = explain(report, None, me="nobody", phase=phase)
        out = render_diagnosis(ex, log.name, Style(color=False, unicode=False), 120)
        quoted = _wrap(phase.sentence(), 0, 120) if phase is not None else []
        where = phase.sentence().split("：", 1)[0] if phase is not None else ""
    finally:
        i18n.reset()
    # where it failed, then the frame's code as the log has it (kept): the lines that quote it aside
    assert phase is None or (where.startswith("失败于") and not english_left(where)), where
    lines = out.splitlines()
    at = next((i for i in range(len(lines)) if lines[i:i + len(quoted)] == quoted), None) if quoted else None
    assert quoted == [] or at is not None, out
    if at is not None:
        del lines[at:at + len(quoted)]
    assert english_left("\n".join(lines)) == [], out


def test_checklist_of_a_bad_cuda_visible_devices_is_chinese() -> None:
    # the variable's reading (cuda_env) is said in Chinese too; the variable and its value stay
    r = run_vram("doctor", "--simulate", "demo", env=zh_env(COLUMNS="100", CUDA_VISIBLE_DEVICES="0,9,1"))
    assert r.rc == 0, r.err
    assert english_left("\n".join(r.out.splitlines()[1:])) == [], r.out
    assert "CUDA_VISIBLE_DEVICES 指定了 GPU 9，但它不存在" in r.out and "CUDA_VISIBLE_DEVICES='0,9,1'" in r.out


def test_snapshot_peak_is_chinese() -> None:
    snapshot = FIXTURES / "snapshots" / "train_step_recorded.pickle"
    r = run_vram("doctor", str(snapshot), env=zh_env())
    assert r.rc == 0, r.err
    assert english_left(r.out) == [], r.out
    assert "峰值时存活的最大块：" in r.out and "train_step.py:16 (train_step)" in r.out


TORCH_SCRIPT = """
import io, sys
import torch
from vramkit.torch import LeakDetector, oom_guard
message = open(sys.argv[1]).read().split(": ", 1)[1].strip()
out = io.StringIO()
try:
    with oom_guard(file=out):
        activations = torch.zeros(512, 1024)
        raise torch.cuda.OutOfMemoryError(message)
except torch.cuda.OutOfMemoryError:
    pass
print(out.getvalue())
model = torch.nn.Linear(8, 8)
det = LeakDetector(model, window=3, warn=False).start()
losses = []
for step in range(6):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    losses.append(loss)
    det.step()
det.stop()
print(det.report())
"""


@pytest.mark.slow
def test_torch_helpers_speak_chinese(tmp_path: Path) -> None:
    """What oom_guard prints in a training job, and the leak detector's report, follow the job's language."""
    pytest.importorskip("torch")
    script = tmp_path / "job.py"
    script.write_text(TORCH_SCRIPT)
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(script), str(FIXTURES / "oom" / "cuda_2_1_capacty_two_processes.txt")],
                          capture_output=True, text=True, env=zh_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "vramkit oom_guard：显存不足" in out and "原因：碎片" in out and "expandable_segments:True" in out
    assert "在所属步骤结束后仍存活" in out and "loss.item()" in out
    # the kept parts: code quoted from the job, PyTorch's names, the variables that hold the tensors
    lines = [line for line in out.splitlines() if not line.startswith("    ") or CJK.search(line)]
    assert english_left("\n".join(lines)) == [], out


def test_wrap_takes_text_that_starts_with_closing_punctuation() -> None:
    # a fix's text can start with "（" or "，" (a translated sentence after a quoted name): it folds
    from vramkit.render.text_width import wrap

    assert wrap("，中文", 10) == ["，中文"] and wrap("）" + "中" * 12, 10) == ["）中中中中", "中中中中中", "中中中"]


def test_checklist_sentences_built_from_values_are_chinese() -> None:
    # a lost GPU's error (the backend's message, translated where shown), a process /proc cannot see,
    # a holder with its memory, both vendors' variables: whole messages, no English left inside
    r = run_vram("doctor", "--simulate", "faulty", env=zh_env(COLUMNS="200"))
    assert "GPU 已丢失（从总线上掉线或需要重置）：" in r.out and "fell off the bus" not in r.out, r.out
    assert "4.0GiB；在 /proc 中不可见：" in r.out and "not visible in /proc" not in r.out, r.out
    r = run_vram("doctor", "--simulate", "demo", env=zh_env(COLUMNS="200"))
    assert "占用者：dave（pid 60112，78.2GiB）" in r.out, r.out
    r = run_vram("doctor", "--simulate", "mixed", env=zh_env(COLUMNS="200"))
    assert "未设置 CUDA_VISIBLE_DEVICES 或 HIP_VISIBLE_DEVICES" in r.out, r.out
    r = run_vram("doctor", "--simulate", "mixed", env=clean_env(COLUMNS="200"))
    assert "CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES not set" in r.out, r.out


def test_memory_bar_names_the_framework_that_allocated() -> None:
    log = FIXTURES / "oom_real" / "tf_asr_tile_bfc.log"
    english = run_vram("doctor", str(log), "--no-live", env=clean_env(COLUMNS="200")).out
    (legend,) = [line for line in english.splitlines() if "allocated by" in line]
    assert "allocated by TensorFlow" in legend and "PyTorch" not in legend, english
    chinese = run_vram("doctor", str(log), "--no-live", env=zh_env(COLUMNS="200")).out
    assert "TensorFlow 已分配" in chinese and "PyTorch 已分配" not in chinese, chinese


def test_snapshot_block_counts_use_chinese_brackets() -> None:
    snapshot = FIXTURES / "snapshots" / "train_step_recorded.pickle"
    r = run_vram("doctor", str(snapshot), env=zh_env())
    assert re.search(r"（\d+ 个块）", r.out) and not re.search(r"\(\d+ 个块\)", r.out), r.out
