"""vramkit.torch on the CPU: real torch.cuda.OutOfMemoryError objects with real message texts, real
CPU training loops with a planted leak, and a simulated memory cap for the batch-size finder."""

from __future__ import annotations

import gc
import io
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env, line_of

torch = pytest.importorskip("torch")

from vramkit.torch import (  # noqa: E402
    oom_guard,
    simulated_memory_cap,
)

FIXTURES = Path(__file__).parent / "fixtures" / "oom"
MESSAGE = (FIXTURES / "cuda_2_1_capacty_two_processes.txt").read_text().split(": ", 1)[1].strip()
MiB = 1024**2


def test_importing_vramkit_torch_does_not_import_torch():
    code = "import sys, vramkit.torch; from vramkit.torch import oom_guard; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- oom_guard

def test_oom_guard_diagnoses_and_reraises():
    out = io.StringIO()
    seen = []
    with pytest.raises(torch.cuda.OutOfMemoryError):
        with oom_guard(file=out, on_oom=seen.append):
            activations = torch.zeros(512, 1024)  # 2 MiB, the largest tensor alive here
            raise torch.cuda.OutOfMemoryError(MESSAGE)
    del activations
    text = out.getvalue()
    assert "fragmentation" in text and "expandable_segments:True" in text
    assert "allocator stats: N/A (CUDA not available)" in text
    assert "activations (" in text and "[512, 1024]" in text
    assert "CUDA: not available" in text
    diag = seen[0]
    assert diag.report.requested_bytes == 448 * MiB and diag.explanation.cause == "fragmentation"


@pytest.mark.slow
def test_oom_guard_as_decorator_with_creation_sites():
    out = io.StringIO()
    guard = oom_guard(file=out, track=True)

    @guard
    def step():
        hidden = torch.ones(1024, 1024)  # created-here marker
        raise torch.OutOfMemoryError(MESSAGE + f" ({hidden.numel()} elements alive)")

    gc.collect()  # an earlier test's cyclic garbage (a larger tensor held by its traceback) would come first
    with pytest.raises(torch.OutOfMemoryError):
        step()
    top = guard.diagnosis.tensors[0]
    assert top.nbytes == 4 * MiB and top.names[0].startswith("hidden (")
    assert top.created_at.endswith(f"test_torch_helpers.py:{line_of(__file__, 'created-here marker')} in step")


def test_oom_guard_lists_no_fake_or_meta_tensor():
    # an estimate traced in the same process keeps fake tensors (a 490 MiB bf16 embedding in CI's worker),
    # a model built on meta has shapes only: neither holds memory, so neither is "alive" in the diagnosis
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(4096, 4096)  # 64 MiB if it were real
    meta = torch.empty(4096, 4096, device="meta")
    out = io.StringIO()
    guard = oom_guard(file=out)
    with pytest.raises(torch.OutOfMemoryError):
        with guard:
            real = torch.ones(256, 1024)  # 1 MiB
            raise torch.OutOfMemoryError(MESSAGE)
    listed = guard.diagnosis.tensors
    assert not any(t.nbytes == 64 * MiB or t.device == "meta" for t in listed), listed
    assert any(t.names and t.names[0].startswith("real (") for t in listed), listed
    del fake, meta, real


def test_oom_guard_ignores_other_errors():
    out = io.StringIO()
    with pytest.raises(ValueError):
        with oom_guard(file=out):
            raise ValueError("not memory")
    assert out.getvalue() == ""


@pytest.mark.slow
def test_oom_guard_on_a_real_cpu_allocation_failure():
    guard = oom_guard(file=None)
    with pytest.raises(RuntimeError):
        with guard:
            torch.empty(2**62, dtype=torch.uint8)
    assert guard.diagnosis.report.kind == "cpu" and guard.diagnosis.explanation.cause == "host_ram"


# LeakDetector: tests/test_torch_leaks.py


# ---------------------------------------------------------------- trace_memory: what it prints, what it asks

def _fake_mlp():
    from vramkit.estimator.trace import fake_mode
    fm = fake_mode()
    with fm:
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    return fm, model


def test_trace_result_prints_a_summary_and_forgetting_fake_mode_says_so():
    from vramkit.errors import RequestError
    from vramkit.estimator.trace import trace_memory
    fm, model = _fake_mlp()
    opt = torch.optim.AdamW(model.parameters())

    def step(i):
        model(torch.randn(32, 64)).sum().backward()
        opt.step()
        opt.zero_grad()

    result = trace_memory(model, step, optimizer=opt, fake_mode=fm)
    lines = str(result).splitlines()
    assert lines[0] == (f"traced peak {result.peak_bytes / 1024:.1f} KiB at step 1 (backward/step), "
                        "steady state the peak")
    assert [line.split()[0] for line in lines[1:]] == ["optimizer", "temporaries", "parameters", "gradients"]
    with pytest.raises(RequestError, match="pass that mode too") as caught:
        trace_memory(model, step, optimizer=opt)  # fake_mode= forgotten
    assert caught.value.param == "fake_mode"
    batch = torch.randn(32, 64)  # a real tensor, made before the trace
    with pytest.raises(RequestError, match="make the batch inside step_fn") as caught:
        trace_memory(model, lambda i: model(batch).sum().backward(), fake_mode=fm)
    assert caught.value.param == "step_fn"


# ---------------------------------------------------------------- oom_guard's failing frame

class _CallsTheDispatcher(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.mm(a, b)  # dispatcher marker


class _RightSubtract(torch.nn.Module):
    @torch.no_grad()
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return 1 - a  # rsub marker: Tensor.__rsub__, through torch/_tensor.py's wrapper


@pytest.mark.parametrize("module,marker", [(_CallsTheDispatcher, "dispatcher marker"),
                                           (_RightSubtract, "rsub marker")])
def test_oom_guard_names_the_users_frame_not_torchs_dispatcher(module, marker):
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    seen = []
    with pytest.raises(torch.OutOfMemoryError):
        with simulated_memory_cap(MiB // 2), oom_guard(file=None, on_oom=seen.append):
            module()(a, b)
    [diagnosis] = seen
    phase = diagnosis.explanation.phase
    assert phase is not None and phase.id == "forward"
    assert phase.evidence.file == __file__ and phase.evidence.line == line_of(__file__, marker), phase.sentence()
