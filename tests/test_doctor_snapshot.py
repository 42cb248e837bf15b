"""vram doctor SNAPSHOT: PyTorch memory snapshots read safely, the peak by category checked against
what a real training step allocated, and the timeline SVG checked (issue 28, item 4).

The fixtures (tests/fixtures/snapshots/, made by make_snapshots.py) are one real CPU training
step recorded by torch's profiler and written in the forms torch writes; train_step_expected.json
says what the step really allocated, from its live tensors and the CPU allocator's own total.
"""

from __future__ import annotations

import json
import os
import pickle
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import run_vram

from vramkit.doctor import snapshot as S
from vramkit.render.snapshot_view import peak_dict, render_html, render_svg

HERE = Path(__file__).resolve().parent / "fixtures" / "snapshots"
EXPECTED = json.loads((HERE / "train_step_expected.json").read_text())
FORMS = ["recorded", "legacy", "profiled"]
SVG = "{http://www.w3.org/2000/svg}"


def _read(form: str) -> S.Snapshot:
    return S.parse(S.read_file(str(HERE / f"train_step_{form}.pickle")))


@pytest.mark.parametrize("form", FORMS)
def test_the_peak_of_a_real_training_step_has_the_categories_it_allocated(form):
    snap = _read(form)
    assert len(snap.devices) == 1
    report = S.peak_report(snap.devices[0])
    totals = {line.key: line.bytes for line in report.by_category}
    # the CPU allocator's own running total peaked here
    assert report.allocated == EXPECTED["peak_allocated"]
    # the step peaks in the optimizer step: every parameter, gradient and state tensor is live
    assert totals["parameter"] == EXPECTED["parameters"]
    assert totals["gradient"] == EXPECTED["gradients"]
    assert totals["optimizer_state"] == EXPECTED["optimizer_state"]
    assert sum(v for k, v in totals.items() if k != S.FREE_IN_SEGMENTS) == report.allocated


def test_the_forms_say_where_their_categories_come_from():
    assert _read("profiled").devices[0].categories_from == "profiler"
    assert _read("recorded").devices[0].categories_from == "frames"
    assert "2.0" in _read("legacy").form
    # the profiler's converter has no allocator segments: no free space is claimed
    assert _read("profiled").devices[0].reserved_steps is None


def test_free_in_segments_is_what_the_segments_hold_beyond_the_allocations():
    d = _read("recorded").devices[0]
    report = S.peak_report(d)
    free = next(line.bytes for line in report.by_category if line.key == S.FREE_IN_SEGMENTS)
    assert report.reserved is not None and free == report.reserved - report.allocated > 0
    # reserved at the end is the segments' total
    data = S.read_file(str(HERE / "train_step_recorded.pickle"))
    assert d.reserved_steps is not None and d.reserved_steps[-1] == sum(s["total_size"] for s in data["segments"])


def test_the_users_lines_and_the_largest_blocks():
    report = S.peak_report(_read("recorded").devices[0])
    lines = {line.key: line.bytes for line in report.by_source}
    assert lines["train_step.py:7 (build)"] == EXPECTED["parameters"]  # the model built there
    assert lines["train_step.py:15 (train_step)"] == EXPECTED["gradients"]  # loss.backward()
    assert all("site-packages" not in k for k in lines)
    assert report.largest[0].size == max(a.size for a in _read("recorded").devices[0].live_at(report.step))


def test_a_snapshot_recorded_after_the_model_was_built_says_unknown_not_parameters():
    # blocks live at the snapshot that the trace never saw allocated have no frames: unknown
    data = S.read_file(str(HERE / "train_step_recorded.pickle"))
    trace = data["device_traces"][0]
    first_step = next(i for i, e in enumerate(trace) if any(f["name"] == "train_step" for f in e["frames"]))
    data["device_traces"][0] = trace[first_step:]
    report = S.peak_report(S.parse(data).devices[0])
    totals = {line.key: line.bytes for line in report.by_category}
    assert "parameter" not in totals
    assert totals["unknown"] >= EXPECTED["parameters"]
    assert report.before_recording == EXPECTED["parameters"]


def test_torch_1_13s_segment_list_is_the_state_now():
    data = S.read_file(str(HERE / "train_step_recorded.pickle"))
    snap = S.parse(data["segments"])
    assert snap.devices[0].entries == 0 and any("no trace" in n for n in snap.notes)
    assert S.peak_report(snap.devices[0]).allocated == EXPECTED["live_at_end"]


def test_an_oom_entry_is_reported_with_what_was_allocated_then():
    data = S.read_file(str(HERE / "train_step_recorded.pickle"))
    data["device_traces"][0].append({"action": "oom", "size": 3 << 30, "device_free": 1 << 20, "stream": 0,
                                     "frames": []})
    d = S.parse(data).devices[0]
    assert len(d.ooms) == 1 and d.ooms[0].size == 3 << 30 and d.ooms[0].allocated == EXPECTED["live_at_end"]


# ---------------------------------------------------------------- untrusted pickles

class Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/vramkit-pwned",))


@pytest.mark.parametrize("payload", [
    pickle.dumps(Boom()),
    pickle.dumps({"segments": [], "x": Path("/etc")}),
    pickle.dumps({"segments": [], "x": {1, 2}.__class__}),
])
def test_a_pickle_that_asks_for_any_global_is_refused_without_running_it(payload):
    with pytest.raises(S.SnapshotError, match="refused"):
        S.loads(payload)
    assert not os.path.exists("/tmp/vramkit-pwned")


def test_deep_shared_and_foreign_data_are_refused():
    deep: list = []
    for _ in range(S.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(S.SnapshotError, match="nested"):
        S.loads(pickle.dumps({"segments": deep}))
    loop: list = []
    loop.append(loop)
    with pytest.raises(S.SnapshotError, match="nested"):
        S.loads(pickle.dumps({"segments": loop}))
    with pytest.raises(S.SnapshotError, match="not a readable pickle"):
        S.loads(b"\x80\x04garbage")
    with pytest.raises(S.SnapshotError, match="not a PyTorch memory snapshot"):
        S.parse(S.loads(pickle.dumps({"hello": 1})))


def test_vram_doctor_refuses_a_hostile_pickle_in_one_line(tmp_path):
    evil = tmp_path / "oom.pickle"
    evil.write_bytes(pickle.dumps(Boom()))
    result = run_vram("doctor", str(evil))
    assert result.rc == 2
    assert len(result.err.strip().splitlines()) == 1 and "refused" in result.err
    assert not os.path.exists("/tmp/vramkit-pwned")


# ---------------------------------------------------------------- the timeline

def _bands(svg: str) -> tuple[ET.Element, list[ET.Element]]:
    root = ET.fromstring(svg)
    return root, [g for g in root.iter(f"{SVG}g") if g.get("class") == "band"]


@pytest.mark.parametrize("form", ["recorded", "profiled"])
def test_the_timeline_svg_has_one_band_per_category_with_the_peaks_totals(form):
    d = _read(form).devices[0]
    report = S.peak_report(d)
    tl = S.timeline(d)
    assert tl.steps[tl.peak_column] == d.peak_step
    root, bands = _bands(render_svg(tl, "t"))
    names = [g.get("data-name") for g in bands]
    present = {a.category for a in d.allocations}
    assert names == [c for c in S.CATEGORIES if c in present] + ([S.FREE_IN_SEGMENTS] if tl.free else [])
    expected = {line.key: line.bytes for line in report.by_category}
    ymax = int(root.get("data-ymax-bytes"))
    plot_h = float(root.get("data-plot-height"))
    cols = len(tl.steps)
    for g in bands:
        name = g.get("data-name")
        assert int(g.get("data-peak-bytes")) == expected.get(name, 0)
        # and the drawing itself: the band's height at the peak column, in bytes
        pts = [tuple(map(float, p.split(","))) for p in g.find(f"{SVG}polygon").get("points").split()]
        top_y = pts[2 * tl.peak_column][1]
        bottom_y = pts[2 * cols + 2 * (cols - 1 - tl.peak_column)][1]
        drawn = (bottom_y - top_y) / plot_h * ymax
        assert abs(drawn - expected.get(name, 0)) <= ymax / plot_h * 0.05


def test_the_timeline_by_source_line_and_as_html():
    d = _read("recorded").devices[0]
    tl = S.timeline(d, by="source")
    names = [name for name, _ in tl.bands]
    assert "train_step.py:7 (build)" in names
    peak_sum = sum(vals[tl.peak_column] for _, vals in tl.bands)
    assert peak_sum == d.peak_allocated
    html = render_html(tl, "t")
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    ET.fromstring(html[html.index("<svg"):html.index("</svg>") + 6])


def test_names_from_the_snapshot_are_escaped_in_the_svg():
    data = S.read_file(str(HERE / "train_step_recorded.pickle"))
    for e in data["device_traces"][0]:
        for f in e["frames"]:
            if f["filename"].endswith("train_step.py"):
                f["filename"] = '/home/ana/<script>"&\x1b[31m.py'
    tl = S.timeline(S.parse(data).devices[0], by="source")
    svg = render_svg(tl, "t")
    ET.fromstring(svg)
    assert "<script>" not in svg and "\x1b" not in svg


# ---------------------------------------------------------------- the command

def test_vram_doctor_reads_a_snapshot_and_writes_the_timeline(tmp_path):
    out = tmp_path / "mem.svg"
    result = run_vram("doctor", str(HERE / "train_step_recorded.pickle"), "--timeline", str(out))
    assert result.rc == 0, result.err
    assert "optimizer state" in result.out and "train_step.py:7 (build)" in result.out
    ET.fromstring(out.read_text())
    result = run_vram("doctor", str(HERE / "train_step_legacy.pickle"), "--json")
    assert result.rc == 0, result.err
    data = json.loads(result.out)
    dev = data["devices"][0]
    assert dev["allocated_bytes"] == EXPECTED["peak_allocated"]
    assert dev["by_category"]["optimizer_state"] == EXPECTED["optimizer_state"]
    assert data == peak_dict(_read("legacy"), [S.peak_report(_read("legacy").devices[0])], data["source"])


def test_timeline_needs_a_snapshot_and_a_known_extension(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert run_vram("doctor", str(log), "--no-live", "--timeline", str(tmp_path / "x.svg")).rc == 2
    assert run_vram("doctor", str(HERE / "train_step_recorded.pickle"), "--timeline", str(tmp_path / "x.png")).rc == 2


def test_a_log_does_not_import_pickle(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    result = run_vram("doctor", str(log), "--no-live", python_flags=("-X", "importtime"))
    assert result.rc == 0, result.err
    names = {line.rsplit("|", 1)[1].strip() for line in result.err.splitlines() if line.startswith("import time:")}
    assert "vramkit.cli.main" in names
    assert "pickle" not in names and "vramkit.doctor.snapshot" not in names


# ---------------------------------------------------------------- oom_guard(snapshot=...)

def test_oom_guard_records_history_and_dumps_a_snapshot_on_oom(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from vramkit.torch import oom_guard

    calls: list = []
    # CUDA "available" when recording starts (a CPU build cannot record); the diagnosis then reads it as absent
    answers = iter([True])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: next(answers, False))
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda enabled="all", **kw: calls.append(("record", enabled, kw.get("max_entries"))))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot",
                        lambda path: (calls.append(("dump", path)),
                                      Path(path).write_bytes((HERE / "train_step_recorded.pickle").read_bytes())))
    target = tmp_path / "oom.pickle"
    guard = oom_guard(snapshot=target, file=None)
    with pytest.raises(torch.OutOfMemoryError), guard:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                     "capacity of 8.00 GiB of which 1.00 GiB is free.")
    assert calls == [("record", "all", 100_000), ("dump", str(target)), ("record", None, None)]
    assert guard.diagnosis is not None and guard.diagnosis.snapshot == str(target)
    assert f"vram doctor {target}" in guard.diagnosis.format()
    assert S.peak_report(S.parse(S.read_file(str(target))).devices[0]).allocated == EXPECTED["peak_allocated"]


def test_oom_guard_without_cuda_says_why_no_snapshot(tmp_path):
    torch = pytest.importorskip("torch")
    from vramkit.torch import oom_guard

    guard = oom_guard(snapshot=tmp_path / "oom.pickle", file=None)
    with pytest.raises(torch.OutOfMemoryError), guard:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert guard.diagnosis is not None and guard.diagnosis.snapshot is None
    assert "CUDA not available" in guard.diagnosis.format()
    assert not (tmp_path / "oom.pickle").exists()


def test_the_trainer_callbacks_dump_a_snapshot_on_oom(tmp_path, monkeypatch, caplog):
    torch = pytest.importorskip("torch")
    from vramkit.torch.callbacks import _Reporter

    calls: list = []
    # CUDA "available" when recording starts (a CPU build cannot record); the diagnosis then reads it as absent
    answers = iter([True])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: next(answers, False))
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda enabled="all", **kw: calls.append(("record", enabled)))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: calls.append(("dump", path)))
    reporter = _Reporter(3, leaks=False, snapshot=tmp_path / "oom.pickle")
    reporter.start(None)
    with caplog.at_level("ERROR", logger="vramkit.torch"):
        reporter.failed(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), None)
    assert calls == [("record", "all"), ("dump", str(tmp_path / "oom.pickle")), ("record", None)]
    assert "vram doctor" in caplog.text


def test_a_negative_size_or_address_in_a_snapshot_is_no_number(tmp_path):
    """A hand-made or damaged pickle's -1 block size was added to the totals and shown as -1B."""
    data = S.read_file(str(HERE / "train_step_recorded.pickle"))
    honest = S.peak_report(S.parse(data).devices[0])
    for seg in data["segments"]:
        seg["blocks"].append({"address": -1, "size": -1, "requested_size": -5, "state": "active_allocated",
                              "frames": []})
    data["device_traces"][0].append({"action": "alloc", "addr": -8, "size": -(1 << 40), "stream": 0, "frames": []})
    report = S.peak_report(S.parse(data).devices[0])
    assert report.allocated == honest.allocated and all(line.bytes >= 0 for line in report.by_category)
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(data))
    result = run_vram("doctor", str(path))
    assert result.rc == 0 and "-1B" not in result.out and "-1.0" not in result.out, result.out
