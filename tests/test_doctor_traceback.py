"""Where the allocation failed, read from the traceback: one log per phase (tests/fixtures/oom/phases/,
each with its origin and noise in index.json), the fix that must lead there, the fixes that cannot
help there; the noise of real logs; oom_guard on a live exception."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import run_vram

from vramkit.doctor import explain, find_oom
from vramkit.doctor.traceback import TRACEBACK_WINDOW, frames_before, phase_of

PHASES = Path(__file__).parent / "fixtures" / "oom" / "phases"
CASES = json.loads((PHASES / "index.json").read_text())["cases"]
MODEL_FIXES = {"halve_batch", "grad_accum", "bf16", "checkpointing", "no_grad", "offload_optimizer"}


def phase_in(text: str):
    report = find_oom(text)
    assert report is not None and report.offset is not None
    return report, phase_of(frames_before(text, report.offset))


def test_every_log_is_listed_with_its_origin_and_every_phase_has_one():
    assert {p.name for p in PHASES.glob("*.log")} == {c["file"] for c in CASES}
    assert all(len(c["origin"]) > 20 and c["made"] in ("run", "written") for c in CASES)
    assert {c["phase"] for c in CASES} == {"forward", "backward", "optimizer", "eval_gather", "dataparallel",
                                           "pin_memory", "checkpoint_load", "generate"}


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_the_phase_leads_the_fixes(case):
    data = run_vram("doctor", str(PHASES / case["file"]), "--no-live", "--json").json()
    assert data["phase"]["id"] == case["phase"]
    assert data["phase"]["user_frame"]["line"] == case["user_line"]
    ids = [f["id"] for f in data["fixes"]]
    assert ids[0] == case["top_fix"], ids
    assert not set(case["not_offered"]) & set(ids), ids


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_the_text_says_where_it_failed(case):
    result = run_vram("doctor", str(PHASES / case["file"]), "--no-live")
    assert result.rc == 0, result.err
    assert "Failed in the " in result.out and f":{case['user_line']})" in " ".join(result.out.split())
    assert "\x1b" not in result.out and "[0m" not in result.out


def test_backward_never_offers_evaluation_without_autograd():
    """The issue's case: an OOM inside loss.backward() ranked 'no autograd for evaluation' second."""
    text = (PHASES / "backward_torchrun_ranks.log").read_text()
    report, phase = phase_in(text)
    ids = [f.id for f in explain(report, phase=phase).fixes]
    assert ids[:2] == ["checkpointing", "halve_batch"] and "no_grad" not in ids
    # without the traceback, the same message gets the training fixes in their general order
    assert [f.id for f in explain(report).fixes][0] == "halve_batch"


def test_only_the_ranks_own_lines_count():
    text = (PHASES / "backward_torchrun_ranks.log").read_text()
    report, phase = phase_in(text)
    assert report.device == 1 and phase is not None and phase.id == "backward"
    # rank 0's message last: its own frames (the optimizer step) decide
    lines = text.splitlines()
    rank0 = next(i for i, line in enumerate(lines) if line.startswith("[rank0]: torch.OutOfMemoryError"))
    reordered = "\n".join(lines[:rank0] + lines[rank0 + 1:rank0 + 2] + [lines[rank0]] + lines[rank0 + 2:])
    report, phase = phase_in(reordered)
    assert report.device == 0 and phase is not None and phase.id == "optimizer"


def test_windows_paths_crlf_and_tqdm():
    report, phase = phase_in((PHASES / "forward_windows_tqdm.log").read_bytes().decode())
    assert phase is not None and phase.id == "forward"
    assert phase.evidence.in_library and phase.evidence.path.endswith("models/bert/modeling_bert.py")
    assert phase.evidence.func == "eager_attention_forward"
    assert phase.user_frame is not None and phase.user_frame.file == "C:\\Users\\alice\\bert\\train.py"


def test_colour_is_not_part_of_the_message_or_the_frames():
    report, phase = phase_in((PHASES / "optimizer_step_colour.log").read_text())
    assert report.exception == "torch.OutOfMemoryError" and "[0m" not in report.message
    assert report.requested_bytes == round(1.27 * 1024**3)
    assert phase is not None and phase.id == "optimizer" and phase.detail == "multi-tensor (foreach) update"
    assert phase.user_frame is not None and phase.user_frame.code == "optimizer.step()"


def test_a_chained_exception_reads_the_cause_above_it():
    text = (PHASES / "checkpoint_load_chained.log").read_text()
    report, phase = phase_in(text)
    assert report.message.startswith("CUDA out of memory") and report.line == 40  # the re-raised copy
    assert phase is not None and phase.id == "checkpoint_load"
    assert phase.evidence.path.endswith("torch/serialization.py")
    # without the chained traceback above it, the re-raise alone names no phase
    cut = text[text.index("The above exception"):]
    assert phase_in(cut)[1] is None


def test_the_replica_or_thread_traceback_and_the_outer_one_are_read_together():
    report, phase = phase_in((PHASES / "pin_memory_thread.log").read_text())
    assert report.form == "runtime" and phase is not None and phase.id == "pin_memory"
    assert phase.user_frame is not None and phase.user_frame.line == 142  # in the outer traceback


def test_no_traceback_no_phase_and_headerless_frames_count_only_right_above_the_message():
    message = (PHASES / "generate_kv_cache.log").read_text().splitlines()[-1]
    assert phase_in(message)[1] is None
    # frames pasted without their `Traceback` header (issue 28: people paste the end of a traceback)
    # are the message's own when they stand right above it
    frames = '  File "/x/site-packages/torch/_tensor.py", line 623, in backward\n    torch.autograd.backward(\n'
    assert phase_in(frames + message)[1].id == "backward"
    # but not when other output stands between them and the message (a warning's stack, then a log line)
    assert phase_in(frames + "INFO step 12 done\n" + message)[1] is None


def test_notebook_traceback_and_user_evaluation_function():
    """IPython's frames (`--->` arrows, `File path:line, in func`) are read; a user's validate()
    is an evaluation loop, and the sizeless CUDA error there is the job's own usage."""
    text = ("---------------------------------------------------------------------------\n"
            "RuntimeError                              Traceback (most recent call last)\n"
            "Cell In[7], line 3\n      1 for epoch in range(3):\n      2     train(model)\n"
            "----> 3     validate(model, val_loader)\n\n"
            "File ~/work/train.py:82, in validate(model, loader)\n     80 for x, y in loader:\n"
            "---> 82     out = model(x.cuda())\n\n"
            "File ~/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1553, in Module._call_impl(self)\n"
            "-> 1553 return forward_call(*args, **kwargs)\n\n"
            "RuntimeError: CUDA error: out of memory\n")
    report, phase = phase_in(text)
    assert phase is not None and phase.id == "forward" and phase.evaluating and not phase.grad_off
    assert phase.user_frame is not None and phase.user_frame.func == "validate" and phase.user_frame.line == 82
    ex = explain(report, None, phase=phase)
    assert ex.cause == "own_usage" and "no_grad" in [f.id for f in ex.fixes[:3]]


def test_a_message_without_its_own_traceback_does_not_take_an_earlier_one():
    """A caught OOM logged by the script, below an earlier (unrelated) traceback: no phase."""
    earlier = (PHASES / "dataparallel_gather.log").read_text().split("torch.OutOfMemoryError")[0]
    earlier += "ValueError: bad shape\n"
    logged = "epoch 5 step 12 OOM, retrying with a smaller batch: " + \
        (PHASES / "generate_kv_cache.log").read_text().splitlines()[-1].split(": ", 1)[1]
    assert phase_in(earlier + "epoch 5 step 11 loss 0.41\n" + logged + "\n")[1] is None
    assert phase_in(earlier + logged + "\n")[1] is None


def test_what_is_read_is_bounded():
    """Only the TRACEBACK_WINDOW characters above the message are read: a traceback further up is
    not this error's."""
    text = (PHASES / "dataparallel_gather.log").read_text()
    report, phase = phase_in(text)
    assert phase is not None and phase.id == "dataparallel"
    tb_end = text.index("torch.OutOfMemoryError")
    padded = text[:tb_end] + "x" * TRACEBACK_WINDOW + "\n" + text[tb_end:]
    assert phase_in(padded)[1] is None


def test_a_forward_inside_evaluation_leads_with_the_evaluation_batch():
    from vramkit.doctor.traceback import Frame

    site = "/venv/lib/python3.11/site-packages"
    frames = [Frame("/home/u/run.py", 12, "<module>", "trainer.evaluate()"),
              Frame(f"{site}/transformers/trainer.py", 2871, "evaluate", "output = self.evaluation_loop("),
              Frame(f"{site}/transformers/trainer.py", 2990, "evaluation_loop", "losses, logits, labels = "
                    "self.prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)"),
              Frame(f"{site}/transformers/trainer.py", 3260, "prediction_step", "outputs = model(**inputs)"),
              Frame(f"{site}/torch/nn/modules/module.py", 1789, "_call_impl", "return forward_call(*args, **kwargs)"),
              Frame(f"{site}/transformers/models/bert/modeling_bert.py", 126, "eager_attention_forward",
                    "attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling")]
    phase = phase_of(frames)
    assert phase is not None and phase.id == "forward" and phase.evaluating
    report = find_oom((PHASES / "generate_kv_cache.log").read_text().splitlines()[-1])
    ids = [f.id for f in explain(report, phase=phase).fixes]
    assert ids[0] == "eval_batch" and not {"grad_accum", "checkpointing", "offload_optimizer"} & set(ids)
    # HF's prediction_step runs the model under torch.no_grad(): "no autograd" would change nothing
    assert phase.grad_off and "no_grad" not in ids
    own_loop = [Frame("/home/u/run.py", 30, "evaluate", "out = model(batch)"), *frames[-2:]]
    own = phase_of(own_loop)
    assert own is not None and own.evaluating and not own.grad_off  # a user's own loop may well record
    assert "no_grad" in [f.id for f in explain(report, phase=own).fixes]


# ---------------------------------------------------------------- oom_guard on a live exception

torch = pytest.importorskip("torch")
MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which "
           "1.06 GiB is free. Including non-PyTorch memory, this process has 22.57 GiB memory in use. Of the "
           "allocated memory 21.90 GiB is allocated by PyTorch, and 180.11 MiB is reserved by PyTorch but unallocated.")


class _FailsInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise torch.OutOfMemoryError(MESSAGE)


def test_oom_guard_reads_where_a_real_backward_failed():
    from vramkit.torch import oom_guard

    out = io.StringIO()
    model = torch.nn.Linear(8, 2)
    with pytest.raises(torch.OutOfMemoryError):
        with oom_guard(file=out) as guard:
            loss = _FailsInBackward.apply(model(torch.randn(4, 8)).sum())
            loss.backward()
    ex = guard.diagnosis.explanation
    # the innermost library frame that names the phase: torch's autograd engine under loss.backward()
    assert ex.phase.id == "backward" and "/torch/autograd/" in ex.phase.evidence.path
    assert [f.id for f in ex.fixes][:2] == ["checkpointing", "halve_batch"]
    text = out.getvalue()
    assert "Failed in the backward pass" in text and "fix 1: activation checkpointing" in text
    assert "asked for 2.0GiB; free 1.1GiB of 23.6GiB" in text


def test_oom_guard_prints_only_what_the_runtime_form_knows():
    from vramkit.torch import oom_guard

    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with oom_guard(file=out):
            raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")
    text = out.getvalue()
    assert "N/A of" not in text and "asked for" not in text and "free" not in text.split("cause:")[0]
    assert "cause:" in text
