"""The one tensor tracker (vramkit/torch/_tensors.py): births, growth and deaths of storages, the
optional event list and lines, tensors with their user's line, and its three clients counting alike."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from vramkit.torch._tensors import TensorTracker, round_block  # noqa: E402

SRC = Path(__file__).resolve().parent.parent / "src" / "vramkit"
MB = 1024 * 1024


def test_torch_never_imports_estimate_so_the_two_do_not_import_each_other():
    found = []
    for path in sorted((SRC / "torch").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                name = ("." * node.level) + (node.module or "")
                if "estimate" in name:
                    found.append(f"{path.name}:{node.lineno} {name}")
            elif isinstance(node, ast.Import):
                found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if "estimate" in a.name]
    assert found == []


def test_importing_the_tracker_and_the_trace_imports_no_torch():
    code = ("import sys, vramkit.torch._tensors, vramkit.estimator.trace, vramkit.torch.memcap, "
            "vramkit.torch.leak; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_storage_is_born_rounded_and_dies_with_events_and_its_line():
    tracker = TensorTracker(events=True, sites=True, keep=True)
    tracker.tag = "first"
    with_line = None
    tracker.start()
    try:
        a = torch.empty(1000, dtype=torch.uint8)
        with_line = sys._getframe().f_lineno - 1
        view = a[10:]  # a view: the same storage, nothing new
        a.add_(1)  # in place: nothing new
        b = torch.empty(10)
        del a, view
        gc.collect()
    finally:
        tracker.stop()
    assert [(e.kind, e.nbytes) for e in tracker.events] == [("alloc", 1024), ("alloc", 512), ("free", 1024)]
    assert [e.seq for e in tracker.events] == [1, 2, 3]
    first = tracker.history[0]
    assert first.born == 1 and first.died == 3 and first.tag == "first"
    assert first.site[0] == __file__ and first.site[1] == with_line
    assert tracker.current == 512 and tracker.peak == 1536 and tracker.peak_seq == 2
    assert tracker.storage_of(b) is tracker.history[1]
    del b


def test_events_and_lines_are_off_unless_asked():
    tracker = TensorTracker()
    with_tracker = tracker.start()
    try:
        x = torch.ones(4)
    finally:
        with_tracker.stop()
    assert tracker.events is None and tracker.history is None
    assert tracker.storage_of(x).site is None
    assert tracker.current == round_block(16)


def test_an_out_buffer_that_grows_is_counted_as_growth():
    src = torch.ones(MB // 4)  # made before: not counted
    tracker = TensorTracker(events=True)
    tracker.start()
    try:
        buf = torch.empty(0)
        torch.add(src, 1, out=buf)
    finally:
        tracker.stop()
    assert [(e.kind, e.nbytes) for e in tracker.events] == [("alloc", 0), ("grow", MB)]
    assert tracker.storage_of(buf).nbytes == MB == tracker.current


def test_a_refused_operation_counts_nothing_and_leaves_a_grown_buffer_as_it_was():
    def admit(asked: int) -> None:
        if asked > MB:
            raise MemoryError(asked)

    buf = torch.empty(10)
    tracker = TensorTracker(admit=admit)
    tracker.start()
    try:
        with pytest.raises(MemoryError):
            torch.ones(MB)  # 4 MiB
        with pytest.raises(MemoryError):
            torch.add(torch.ones(MB // 2), 1, out=buf)  # 2 MiB into a 40-byte buffer
    finally:
        tracker.stop()
    assert tracker.current == 0
    assert buf.untyped_storage().nbytes() == 40


def test_paused_records_nothing_new_but_frees_of_what_it_knows_still_count():
    tracker = TensorTracker()
    tracker.start()
    try:
        kept = torch.ones(256)
        tracker.paused += 1
        torch.ones(MB)
        del kept
        gc.collect()
        tracker.paused -= 1
    finally:
        tracker.stop()
    assert tracker.current == 0 and tracker.peak == 1024


def test_tensors_are_recorded_with_their_line_and_tag_in_place_ops_are_not_new():
    tracker = TensorTracker(storages=False, tensors=True)
    tracker.tag = 7
    tracker.start()
    try:
        x = torch.ones(3)
        line = sys._getframe().f_lineno - 1
        y = x.mul_(2)  # returns x
    finally:
        tracker.stop()
    record = tracker.record_of(x)
    assert record is not None and record.site[1] == line and record.tag == 7
    assert y is x and len(tracker.records) == 1
    assert tracker.current == 0  # storages not asked for


def test_the_trace_and_the_memory_cap_count_the_same_bytes_on_one_step():
    from vramkit.estimator.trace import trace_memory
    from vramkit.torch import simulated_memory_cap

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))

    def step(i: int = 0) -> None:
        model(torch.randn(32, 64)).square().mean().backward()

    traced = trace_memory(model, step, steps=1)
    model.zero_grad(set_to_none=True)
    with simulated_memory_cap(1024**3, held=model) as cap:
        step()
    assert cap.peak == traced.peak_bytes
    assert traced.breakdown["parameters"] == cap.held
