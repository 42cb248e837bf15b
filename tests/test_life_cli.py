"""vram life PID (once vram job PID): one process life from recorded history (issue 11 item 4), checked against what
the scenario implies."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, run_vram, strip_ansi

FIXTURE = Path(__file__).parent / "fixtures" / "history_shared_day.json"
EPOCH = 1767225600  # 2026-01-01 00:00 UTC
GiB = 1024**3


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("job") / "history.db"
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=None)
    done = run_vram("record", "--simulate", str(FIXTURE), "--db", str(db), "--interval", "20s",
                    "--duration", "6h", "--quiet", env=env)
    assert done.rc == 0, done.err
    return db


def test_a_life_in_json_equals_the_scenario(recorded):
    # bob's torchrun, 01:00-05:00: 4 GiB on GPU 0 (busy at 80%), 30 GiB on GPU 1 that grows to
    # 40 GiB at 04:00; GPU 1 ran no kernels 02:00-03:00.
    life, = run_vram("life", "1002", "--db", str(recorded), "--json").json()["lives"]
    assert (life["user"], life["command"], life["gpus"]) == ("bob", "torchrun", [0, 1])
    assert life["first_seen_timestamp"] == EPOCH + 3600
    assert life["gpu_seconds"] == 2 * 4 * 3600
    assert life["memory_byte_seconds"] == (4 * 4 + 30 * 3 + 40 * 1) * 3600 * GiB
    assert life["idle_seconds"] == 3600
    assert life["peak_memory"] == 40 * GiB
    on_gpu1 = [p for p in life["points"] if p["gpu"] == 1]
    assert {p["memory"] for p in on_gpu1 if p["timestamp"] < EPOCH + 4 * 3600} == {30 * GiB}
    assert {p["memory"] for p in on_gpu1 if p["timestamp"] >= EPOCH + 4 * 3600} == {40 * GiB}
    assert sum(p["idle_seconds"] for p in on_gpu1) == 3600


def test_the_text_shows_totals_sparklines_and_round_slices(recorded):
    result = run_vram("life", "1002", "--db", str(recorded), env=clean_env(TZ="UTC"))
    assert result.rc == 0, result.err
    lines = strip_ansi(result.out).splitlines()
    assert lines[0] == "pid 1002 · bob · torchrun · GPU 0,1"
    assert lines[1] == "  held    2026-01-01 01:00:00 → 2026-01-01 05:00:00 (4h00m)"
    assert lines[2] == ("  used    8.00 GPU-hours · 146.00 GiB-hours · peak 40.0GiB · idle 1h00m "
                        "(12% of its GPU time)")
    assert lines[3].startswith("  GPU 0 ") and lines[3].endswith("peak 4.0GiB")
    assert lines[4].startswith("  GPU 1 ") and lines[4].endswith("peak 40.0GiB") and "█" in lines[4]
    rows = {line[2:21]: line.split()[2:] for line in lines if line.startswith("  2026-")}
    assert list(rows) == [f"2026-01-01 0{h}:{m}:00" for h in range(1, 5) for m in ("00", "30")]
    assert rows["2026-01-01 02:00:00"] == ["4.0GiB", "30.0GiB", "80%", "50%"]  # GPU 0 at 80%, GPU 1 idle
    assert rows["2026-01-01 04:30:00"] == ["4.0GiB", "40.0GiB", "90%", "0%"]


def test_unknown_pid_says_so_and_exits_1(recorded):
    result = run_vram("life", "4242", "--db", str(recorded))
    assert result.rc == 1 and f"no recorded life of pid 4242 in {recorded}" in result.out


@pytest.mark.parametrize("args, needle", [
    (("abc",), "PID: not a process id: 'abc'"),
    (("-5",), "PID"),
    (("99999999999999999999",), "not a process id"),
    (("1", "--rows", "0"), "--rows: must be 1 to 1000"),
    # A host pid names its flag (it said "PID: not a process id").
    (("--host-pid", "-1"), "--host-pid: not a host process id: '-1'"),
    (("--host-pid", "0"), "--host-pid: not a host process id: '0'"),
    (("abc", "--host-pid"), "--host-pid: not a host process id: 'abc'"),
])
def test_bad_input_is_one_line_and_exit_2(recorded, args, needle):
    assert_one_line_error(run_vram("life", *args, "--db", str(recorded)), 2, needle)


def test_a_missing_database_is_one_line_and_exit_2(tmp_path):
    assert_one_line_error(run_vram("life", "1", "--db", str(tmp_path / "none.db")), 2, "no history at")
