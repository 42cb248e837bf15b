"""The OOM parser over real messages of every form PyTorch has printed (tests/fixtures/oom/, each
with its origin in index.json), and the cause each one is explained by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_vram

from vramkit.doctor import explain, find_oom, parse_oom

FIXTURES = Path(__file__).parent / "fixtures" / "oom"
CASES = json.loads((FIXTURES / "index.json").read_text())["cases"]
_UNIT = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def printed(size: str) -> int:
    """'22.78 GiB' -> bytes, as the message printed it (written apart from vramkit's parser)."""
    number, unit = size.split()
    return int(round(float(number) * _UNIT[unit]))


def test_every_fixture_is_listed_with_its_origin():
    files = {p.name for p in FIXTURES.glob("*.txt")} - {"no_oom.txt"}
    assert files == {c["file"] for c in CASES}
    assert all(len(c["origin"]) > 20 for c in CASES)
    forms = {c["expect"]["form"] for c in CASES}
    assert {"2.2+", "2.1", "1.4-2.0", "1.0-1.3", "runtime", "cublas", "cudnn", "cpu", "mps"} <= forms


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_fixture_parses_as_printed(case):
    text = (FIXTURES / case["file"]).read_text()
    report = find_oom(text)
    assert report is not None
    want = case["expect"]
    assert report.kind == want["kind"]
    assert report.form == want["form"]
    assert report.exception == want.get("exception")
    if "device" in want:
        assert report.device == want["device"]
    for key, attr in [("requested", "requested_bytes"), ("total", "total_bytes"), ("free", "free_bytes"),
                      ("allowed", "allowed_bytes"), ("allocated", "allocated_bytes"), ("reserved", "reserved_bytes"),
                      ("reserved_unallocated", "reserved_unallocated_bytes"), ("process", "process_bytes"),
                      ("private_pool", "private_pool_bytes")]:
        if key in want:
            assert getattr(report, attr) == printed(want[key]), key
    if "reserved" not in want and "allocated" in want and "reserved_unallocated" in want:
        assert report.reserved_bytes == printed(want["allocated"]) + printed(want["reserved_unallocated"])
    assert [(p.pid, p.bytes) for p in report.processes] == [(pid, printed(s)) for pid, s in want["processes"]]
    if "hint" in want:
        assert report.hint == want["hint"]
    if "line" in want:
        assert report.line == want["line"]
    assert "\n" not in report.message and "\x1b" not in report.message


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_fixture_cause(case):
    ex = explain(find_oom((FIXTURES / case["file"]).read_text()))
    assert ex.cause == case["expect"]["cause"]
    assert ex.fixes, "every diagnosis has at least one fix"
    if "job_pid" in case["expect"]:
        assert ex.job_pid == case["expect"]["job_pid"]


def test_the_last_oom_in_a_log_is_the_one_reported():
    text = (FIXTURES / "training_log_two_ooms.txt").read_text()
    first = parse_oom(text)
    last = find_oom(text)
    assert first.requested_bytes == printed("2.00 GiB")
    assert last.requested_bytes == printed("1.50 GiB") and last.line == 10


def test_no_oom_in_a_log():
    assert find_oom((FIXTURES / "no_oom.txt").read_text()) is None
    assert find_oom("") is None


@pytest.mark.parametrize("size,unit,expected", [
    ("0", "bytes", 0), ("512", "bytes", 512), ("1024", "bytes", 1024), ("2.00", "KiB", 2048),
    ("20.00", "MiB", 20 * 1024**2), ("1.50", "GiB", 1536 * 1024**2), ("958.50", "KiB", 981504),
])
def test_sizes_exactly_as_c10_format_size_prints_them(size, unit, expected):
    # c10's format_size: "N bytes" up to 1024, else two decimals of KiB / MiB / GiB.
    text = (f"CUDA out of memory. Tried to allocate {size} {unit}. GPU 0 has a total capacity of 8.00 GiB "
            "of which 1.00 GiB is free.")
    assert parse_oom(text).requested_bytes == expected


def test_fragmentation_fix_leads_and_saves_what_the_message_says():
    ex = explain(find_oom((FIXTURES / "cuda_2_1_capacty_two_processes.txt").read_text()))
    assert ex.fixes[0].id == "alloc_conf"
    assert ex.fixes[0].saves_bytes == printed("3.78 GiB") and ex.fixes[0].enough is True
    # 2.1 and later read expandable_segments; the message's own hint was the older max_split_size_mb
    assert "expandable_segments:True" in ex.fixes[0].how


def test_too_large_request_says_freeing_will_not_help():
    # 27 GiB asked of a 12 GiB card: more than the job could ever have free, not a bug's size.
    ex = explain(find_oom((FIXTURES / "cuda_2_1_capacty_too_large.txt").read_text()))
    assert ex.cause == "request_too_large"
    assert ex.fixes[0].id == "split_op" and "will not help" in ex.fixes[0].how
    assert not any(f.id.startswith("free_pid") for f in ex.fixes)


def test_a_request_many_times_the_card_is_a_bug_to_look_for():
    # 243 GiB asked of a 16 GiB card (issue 28): shapes and sizes first, never memory fixes.
    ex = explain(find_oom((FIXTURES / "cuda_2_0_too_large.txt").read_text()))
    assert ex.cause == "not_memory" and [f.id for f in ex.fixes][:2] == ["check_shape", "debug_sync"]
    assert not any(f.id in ("split_op", "halve_batch", "checkpointing") or f.id.startswith("free_pid")
                   for f in ex.fixes)


def test_savings_hook_fills_model_dependent_fixes():
    calls = []

    def hook(fix_id, context):
        calls.append((fix_id, context["batch_size"]))
        return 3 * 1024**3 if fix_id == "halve_batch" else None

    ex = explain(find_oom((FIXTURES / "cuda_1_x_runtimeerror.txt").read_text()), savings=hook,
                 context={"batch_size": 64})
    halve = next(f for f in ex.fixes if f.id == "halve_batch")
    assert halve.saves_bytes == 3 * 1024**3 and halve.basis == "estimate" and halve.enough is True
    assert ("bf16", 64) in calls
    assert all(f.saves_bytes is None for f in ex.fixes if f.id in ("bf16", "checkpointing"))


def test_a_broken_savings_hook_does_not_hide_the_diagnosis():
    def hook(fix_id, context):
        raise RuntimeError("estimator bug")

    ex = explain(find_oom((FIXTURES / "cuda_1_x_runtimeerror.txt").read_text()), savings=hook)
    assert ex.cause == "own_usage"
    assert all(f.saves_bytes is None for f in ex.fixes if f.id in ("halve_batch", "bf16", "checkpointing"))


def test_control_characters_in_a_log_are_stripped():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.\x1b[31m GPU 0 has a "
            "total capacity of 8.00 GiB of which 1.00 MiB is free.")
    report = find_oom(text)
    assert "\x1b" not in report.message and report.total_bytes == 8 * 1024**3


def test_live_data_names_the_processes_in_the_message():
    import vramkit

    snap = vramkit.snapshot(simulate="demo")
    ex = explain(find_oom((FIXTURES / "training_log_two_ooms.txt").read_text()), snap)
    bob = next(h for h in ex.holders if h.pid == 41234)
    assert bob.user == "bob" and bob.source == "message" and "train_dp.py" in bob.command
    assert ex.live_gpu == 0
    room = next(f for f in ex.fixes if f.id == "other_gpu")
    # The GPUs vram pick would choose, in its order: GPU 7 (the emptiest, 3% busy) first, GPU 4
    # next; not the busy ones in index order (GPU 1 is 57% busy).
    assert room.how.startswith("now: GPU 7 (77.3GiB free, 3% busy), GPU 4 (61.5GiB free, 0% busy);"), room.how
    assert "CUDA_VISIBLE_DEVICES=7" in room.how and "GPU 1 " not in room.how
    pick = run_vram("pick", "--simulate", "demo", "--min-free", "1GiB")
    assert pick.out.strip() == "7"


# Pieces that start a message, overlap, or look like one and are not; glued together at random.
_PIECES = [
    "CUDA out of memory.", "HIP out of memory.", "MPS backend out of memory", "CUDA error: out of memory",
    "cuda runtime error (2) : out of memory", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
    "Unable to find a valid cuDNN algorithm to run convolution", "DefaultCPUAllocator: not enough memory",
    "DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: ", "CUDA out of memory",
    "out of memory", "ran out of memory.", "cuda runtime error (2) : ", "CUDA error: ", "Unable to find",
    "CUDA ", "HIP ", "x", " ", "\n", "CUDA error: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
]


@pytest.mark.parametrize("seed", range(40))
def test_the_marker_scan_finds_what_the_pattern_finds_everywhere(seed):
    # find_oom looks for literal markers and tries the pattern only around them (a 10 MB log in
    # milliseconds); it must find exactly the matches the pattern finds tried at every character.
    import random

    from vramkit.doctor import oom

    rng = random.Random(seed)
    fixtures = [(FIXTURES / c["file"]).read_text() for c in CASES[seed % len(CASES):][:3]]
    parts = [rng.choice(_PIECES) for _ in range(rng.randint(1, 60))] + fixtures
    rng.shuffle(parts)
    text = "".join(parts)
    found = [(m.start(), m.end()) for m in oom._starts(text)]
    assert found == [(m.start(), m.end()) for m in oom._START.finditer(text)]
    assert found  # every text here holds a message
