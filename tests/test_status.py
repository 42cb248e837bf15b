"""`vram status` on the bundled demo server, as a user runs it: JSON, text, CSV, --gpu, --watch,
colours. Expected numbers come from demo.json itself."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import threading

import pytest
from helpers import (
    ESCAPE,
    assert_one_line_error,
    clean_env,
    expected_gpus,
    gib_pair,
    reap,
    run_vram,
    run_vram_tty,
    scenario_data,
    status_blocks,
    strip_ansi,
    timeline_at,
    vram_argv,
    wait_for,
)

from vramkit.render.text_width import cells
from vramkit.units import parse_size

DEMO = scenario_data("demo")
EXPECTED = expected_gpus(DEMO, t=0)
STATUS_CSV_HEADER = ("index,name,uuid,pci_bus_id,lost,memory_used,memory_total,memory_free,memory_reserved,"
                     "utilization,memory_utilization,temperature,power_draw,power_limit,fan,encoder_utilization,"
                     "decoder_utilization,process_count,simulated,time")


@pytest.fixture(scope="module")
def demo_json():
    return run_vram("status", "--simulate", "demo", "--json").json()


@pytest.fixture(scope="module")
def demo_text():
    result = run_vram("status", "--simulate", "demo", env=clean_env(COLUMNS="200"))
    assert result.rc == 0 and result.err == ""
    return result.out


def test_json_top_level(demo_json):
    assert demo_json["simulated"] is True
    assert demo_json["scenario"] == "demo"
    assert demo_json["driver_version"] == DEMO["driver_version"]
    assert demo_json["cuda_version"] == DEMO["cuda_version"]
    assert [g["index"] for g in demo_json["gpus"]] == list(range(len(DEMO["gpus"])))


@pytest.mark.parametrize("index", range(len(DEMO["gpus"])))
def test_json_gpu_matches_scenario(demo_json, index):
    got, want = demo_json["gpus"][index], EXPECTED[index]
    for key in ("index", "uuid", "name", "pci_bus_id", "memory_total", "memory_used", "memory_reserved",
                "memory_free", "utilization", "memory_utilization", "temperature"):
        assert got[key] == want[key], key
    # NVML reports power in milliwatts.
    assert got["power_draw"] == pytest.approx(want["power_draw"], abs=1e-3)
    assert got["power_limit"] == pytest.approx(want["power_limit"], abs=1e-3)
    assert got["lost"] is False and got["error"] is None
    assert got["mig_enabled"] is False and got["mig_devices"] == []


@pytest.mark.parametrize("index", range(len(DEMO["gpus"])))
def test_json_fan_is_na_with_a_reason(demo_json, index):
    gpu = demo_json["gpus"][index]
    assert gpu["fan"] is None  # passively cooled A100: N/A, not 0
    assert gpu["na"]["fan"]


@pytest.mark.parametrize("index", range(len(DEMO["gpus"])))
def test_json_processes_match_scenario(demo_json, index):
    got = {p["pid"]: {"memory": p["memory"], "user": p["user"], "command": p["command"]}
           for p in demo_json["gpus"][index]["processes"]}
    assert got == EXPECTED[index]["processes"]
    for p in demo_json["gpus"][index]["processes"]:
        assert p["types"] == ["compute"] and p["mig_gi"] is None and p["host_missing"] is None


def test_json_memory_used_is_what_the_processes_hold(demo_json):
    for gpu in demo_json["gpus"]:
        assert gpu["memory_used"] == sum(p["memory"] for p in gpu["processes"])
        assert gpu["memory_used"] + gpu["memory_free"] + gpu["memory_reserved"] == gpu["memory_total"]


def test_process_that_has_not_started_is_not_shown(demo_json):
    # erin's eval.py starts at t=20; the clock is pinned at t=0.
    late = [p for p in DEMO["processes"] if "start_at" in p]
    assert late
    shown = {p["pid"] for g in demo_json["gpus"] for p in g["processes"]}
    assert not shown & {p["pid"] for p in late}


def test_timelines_follow_the_simulated_clock(vram):
    """At t=25 erin's eval.py is running and halfway up its memory ramp; GPU 7 is busy."""
    t = 25.0
    snap = vram("status", "--simulate", "demo", "--json", env=clean_env(VRAM_SIM_TIME=str(t))).json()
    evaluator = next(p for p in DEMO["processes"] if "start_at" in p)
    gpu_key, = evaluator["gpus"]
    gpu = snap["gpus"][int(gpu_key)]
    ramp = int(timeline_at(evaluator["gpus"][gpu_key], t, parse_size))
    assert parse_size("1GiB") < ramp < parse_size("14GiB")
    shown = {p["pid"]: p["memory"] for p in gpu["processes"]}
    assert shown[evaluator["pid"]] == ramp
    assert gpu["memory_used"] == sum(shown.values())
    for g, spec in zip(snap["gpus"], DEMO["gpus"]):
        assert g["utilization"] == int(timeline_at(spec["utilization"], t)), g["index"]


def test_text_says_simulated(demo_text):
    banner = demo_text.splitlines()[0]
    assert "SIMULATED" in banner and "demo" in banner
    assert f"{len(DEMO['gpus'])} GPUs" in banner


def test_text_shows_used_and_total_per_gpu(demo_text):
    blocks = status_blocks(demo_text)
    assert sorted(blocks) == [g["index"] for g in EXPECTED]
    for want in EXPECTED:
        gpu_line = blocks[want["index"]][0]
        assert gib_pair(want["memory_used"], want["memory_total"]) in gpu_line
        assert f"{want['utilization']}%" in gpu_line  # memory and utilization side by side
        assert f"{want['temperature']}°C" in gpu_line


def test_text_shows_every_holder_under_its_gpu(demo_text):
    blocks = status_blocks(demo_text)
    for want in EXPECTED:
        holders = blocks[want["index"]][1:]
        assert len(holders) == len(want["processes"])
        for pid, proc in want["processes"].items():
            line = next((h for h in holders if f" {pid} " in h), None)
            assert line is not None, f"pid {pid} not under GPU {want['index']}"
            assert f" {proc['user']} " in line


def test_text_marks_idle_and_zombie_holders(demo_text):
    blocks = status_blocks(demo_text)
    flagged = {line.split()[2]: line for block in blocks.values() for line in block[1:]}
    assert "idle" in flagged["38817"]
    assert "zombie" in flagged["29044"]


def test_text_summary_counts_every_process_once(demo_text):
    """A process on four GPUs is one process (it used to count a row per GPU: 9 for demo's 6)."""
    summary = demo_text.splitlines()[-1]
    n = len({pid for g in EXPECTED for pid in g["processes"]})
    assert n < sum(len(g["processes"]) for g in EXPECTED)  # demo has a process on several GPUs
    assert f"used by {n} processes" in summary


def test_counts_are_singular_for_one(vram):
    result = vram("status", "--simulate", "h200")
    assert result.rc == 0
    assert "  ·  1 GPU  ·  " in result.out
    assert result.out.rstrip().endswith(" used by 1 process")
    assert " used by 6 processes" in vram("status", "--simulate", "demo").out


def test_csv(vram, demo_json):
    result = vram("status", "--simulate", "demo", "--csv")
    assert result.rc == 0
    lines = result.out.splitlines()
    assert lines[0] == STATUS_CSV_HEADER
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert len(rows) == len(DEMO["gpus"])
    for row, gpu in zip(rows, demo_json["gpus"]):
        assert int(row["index"]) == gpu["index"]
        assert row["uuid"] == gpu["uuid"]
        assert int(row["memory_used"]) == gpu["memory_used"]
        assert int(row["memory_total"]) == gpu["memory_total"]
        assert int(row["utilization"]) == gpu["utilization"]
        assert int(row["process_count"]) == len(gpu["processes"])
        assert row["fan"] == "N/A"
        assert row["lost"] == "false" and row["simulated"] == "true"


@pytest.mark.parametrize("spec, indices", [("2", [2]), ("0,2", [0, 2]), ("1-3", [1, 2, 3]), ("4,0-1", [0, 1, 4])])
def test_gpu_selection_json(vram, spec, indices):
    snap = vram("status", "--simulate", "demo", "--json", "--gpu", spec).json()
    assert [g["index"] for g in snap["gpus"]] == indices
    for g in snap["gpus"]:
        assert g["memory_used"] == EXPECTED[g["index"]]["memory_used"]


def test_gpu_selection_text(vram):
    result = vram("status", "--simulate", "demo", "--gpu", "2")
    assert result.rc == 0
    assert list(status_blocks(result.out)) == [2]
    assert "  ·  1 of 8 GPUs" in result.out.splitlines()[0]


def test_gpu_selection_banner_says_how_many_of_the_machines_gpus_are_shown(vram):
    assert "  ·  2 of 8 GPUs" in vram("status", "--simulate", "demo", "--gpu", "0,1").out
    assert "  ·  8 GPUs  ·  " in vram("status", "--simulate", "demo").out.splitlines()[0]
    assert "  ·  8 GPUs" in vram("status", "--simulate", "demo", "--gpu", "0-7").out  # all of them: no "of"


def test_wide_never_cuts_a_command(vram):
    bob = "python train_dp.py --model resnet152 --batch-size 1024 --data /data/imagenet"
    cut = vram("status", "--simulate", "demo", "--gpu", "0").out
    assert bob not in cut and "…" in cut  # piped at 120 columns: cut
    for env in ({}, {"COLUMNS": "60"}):
        out = run_vram("status", "--simulate", "demo", "--gpu", "0", "--wide", env=clean_env(**env)).out
        assert bob in out and "…" not in out.split("\n", 1)[1]


def test_help_says_what_width_piped_output_uses(vram):
    text = " ".join(vram("status", "--help").out.split())
    assert "--wide" in text and "$COLUMNS, or 120 columns" in text


def test_processes_the_driver_cannot_list_are_unknown_not_none(vram, write_scenario):
    path = write_scenario({"gpus": [
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB", "memory_used": "10GiB",
         "no_permission": ["processes"]},
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB", "unsupported": ["processes", "temperature"]},
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB"}]})
    out = vram("status", "--simulate", str(path)).out
    blocks = {i: "\n".join(lines) for i, lines in status_blocks(out).items()}
    assert "processes unknown (no permission)" in blocks[0] and "no processes" not in blocks[0]
    assert "processes unknown (not supported)" in blocks[1] and "no processes" not in blocks[1]
    assert "processes:" not in out  # said once, not again on the N/A line
    assert "N/A  temperature: not supported" in blocks[1]  # other fields still are
    assert "no processes" in blocks[2]
    assert "(processes unknown on 2 GPUs)" in out.splitlines()[-1]


def test_gpu_selection_csv(vram):
    result = vram("status", "--simulate", "demo", "--csv", "--gpu", "2")
    assert [line.split(",")[0] for line in result.out.splitlines()] == ["index", "2"]


def test_gpu_that_does_not_exist(vram):
    assert_one_line_error(vram("status", "--simulate", "demo", "--gpu", "9"), 2, "--gpu", "9", "0-7")


@pytest.mark.parametrize("spec", ["x", "3-1", "1,,2", "-"])
def test_gpu_list_that_does_not_parse(vram, spec):
    assert_one_line_error(vram("status", "--simulate", "demo", "--gpu", spec), 2, "--gpu")


def test_json_and_csv_are_exclusive(vram):
    assert_one_line_error(vram("status", "--simulate", "demo", "--json", "--csv"), 2, "--csv")


# ---------------------------------------------------------------- --watch

def _watch(*args: str, frames: int = 4, lines_per_frame: int | None = None):
    """Run `vram status --watch ...` until it has printed `frames` frames, then press Ctrl-C.
    Text frames are counted by the blank lines between them; data frames (NDJSON, CSV) by
    `lines_per_frame`."""
    proc = subprocess.Popen(vram_argv("status", "--simulate", "demo", *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=clean_env(),
                            # A test runner started in the background may ignore SIGINT; its
                            # children would inherit that.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # Frames are separated by a blank line: frames - 1 of them, and the last frame begun.
        if lines_per_frame is None:
            assert wait_for(lambda: lines.count("\n") >= frames - 1, timeout=30), lines[:3]
        else:
            assert wait_for(lambda: len(lines) >= frames * lines_per_frame, timeout=30), lines[:3]
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        reader.join(timeout=10)
        err = proc.stderr.read()
    finally:
        reap(proc)
    return proc.returncode, "".join(lines), err


@pytest.mark.slow
def test_watch_prints_frames_separated_by_a_blank_line():
    rc, out, err = _watch("--watch", "0.2")
    assert rc == 130 and "Traceback" not in err  # Ctrl-C: the shell's usual code, no traceback
    assert ESCAPE not in out  # not a terminal: no screen clearing, no colour
    frames = [f for f in out.split("\n\n") if f.strip()]
    assert len(frames) >= 3
    for frame in frames[:-1]:  # the last one may have been cut by Ctrl-C
        assert frame.splitlines()[0].startswith("SIMULATED")
        assert sorted(status_blocks(frame)) == list(range(len(DEMO["gpus"])))


@pytest.mark.slow
def test_watch_json_is_ndjson_one_compact_object_per_line():
    rc, out, _ = _watch("--watch", "0.2", "--json", lines_per_frame=1)
    assert rc == 130
    lines = out.splitlines(keepends=True)
    assert len(lines) >= 4 and "\n" not in [line for line in lines]  # no blank line between frames
    for line in lines[:-1]:  # the last one may have been cut by Ctrl-C
        frame = json.loads(line)
        assert [g["memory_used"] for g in frame["gpus"]] == [g["memory_used"] for g in EXPECTED]
        assert line.startswith('{"schema":1,')  # compact: no indentation, no spaces after separators


@pytest.mark.slow
def test_watch_csv_prints_the_header_once():
    rc, out, _ = _watch("--watch", "0.2", "--csv", lines_per_frame=len(DEMO["gpus"]), frames=3)
    assert rc == 130
    lines = out.splitlines()
    assert lines[0] == STATUS_CSV_HEADER and lines.count(STATUS_CSV_HEADER) == 1
    assert "" not in lines  # one table: no blank line between frames
    rows = list(csv.reader(io.StringIO("\n".join(lines[: 1 + 2 * len(DEMO["gpus"])]))))
    assert [int(r[0]) for r in rows[1:]] == 2 * list(range(len(DEMO["gpus"])))


def test_without_watch_json_and_csv_are_unchanged(demo_json):
    out = run_vram("status", "--simulate", "demo", "--json").out
    assert out.startswith('{\n  "schema": 1,')  # indented, as before
    assert run_vram("status", "--simulate", "demo", "--csv").out.splitlines()[0] == STATUS_CSV_HEADER


@pytest.mark.parametrize("interval", ["0", "-1"])
def test_watch_needs_a_positive_interval(vram, interval):
    assert_one_line_error(vram("status", "--simulate", "demo", f"--watch={interval}"), 2, "--watch")


def test_watch_stops_quietly_when_the_reader_goes_away():
    """`vram status --watch | head`: head exits, vram must stop without an error."""
    proc = subprocess.Popen(vram_argv("status", "--simulate", "demo", "--watch", "0.05"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=clean_env())
    try:
        proc.stdout.readline()
        proc.stdout.readline()
        proc.stdout.close()
        rc = proc.wait(timeout=15)
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert rc == 0 and err == ""


# ---------------------------------------------------------------- colour

def test_piped_output_has_no_escape_codes(demo_text):
    assert ESCAPE not in demo_text


def test_terminal_output_is_coloured():
    result = run_vram_tty("status", "--simulate", "demo")
    assert result.rc == 0, result.err
    assert ESCAPE + "[" in result.out
    plain = strip_ansi(result.out)
    assert "SIMULATED" in plain.splitlines()[0]
    assert sorted(status_blocks(plain)) == list(range(len(DEMO["gpus"])))


def test_holder_lines_fit_the_terminal():
    # (The GPU line itself is a fixed ~115 columns: it does not shrink for narrower terminals.)
    result = run_vram_tty("status", "--simulate", "demo", "--no-color", columns=100)
    holders = [line for block in status_blocks(result.out).values() for line in block[1:]]
    assert len(holders) == 9
    for line in holders:
        assert len(line) <= 100, line
    assert any(line.endswith("…") for line in holders)  # bob's long command was clipped


def test_a_holder_line_cuts_its_flags_where_the_command_has_no_room_left():
    """The command keeps 10 columns; the flags after it are cut to what is left, not run past the width."""
    def zombie(columns: str) -> str:
        out = run_vram("status", "--simulate", "demo", env=clean_env(COLUMNS=columns)).out
        holders = [line for block in status_blocks(out).values() for line in block[1:]]
        assert all(cells(line) <= int(columns) for line in holders), holders
        return next(line for line in holders if " 29044 " in line)

    assert zombie("80").endswith("  [python] … [zombie,orphan]")  # fits: whole
    assert zombie("70").endswith("  [python] … [zom…")


@pytest.mark.parametrize("columns", ["abc", "", "80x"])
def test_unusable_columns_variable_is_ignored(vram, columns):
    result = vram("status", "--simulate", "demo", env=clean_env(COLUMNS=columns))
    assert result.rc == 0 and result.err == ""
    assert sorted(status_blocks(result.out)) == list(range(len(DEMO["gpus"])))


@pytest.mark.parametrize("how", ["--no-color", "NO_COLOR=1", "NO_COLOR=0", "TERM=dumb"])
def test_no_color_on_a_terminal(how):
    args = ["status", "--simulate", "demo"]
    env = clean_env()
    if how.startswith("--"):
        args.append(how)
    else:
        key, value = how.split("=")
        env[key] = value
    result = run_vram_tty(*args, env=env)
    assert result.rc == 0, result.err
    assert ESCAPE not in result.out
    assert sorted(status_blocks(result.out)) == list(range(len(DEMO["gpus"])))


def test_empty_no_color_does_not_disable_colour():
    # no-color.org: NO_COLOR counts when "present and not an empty string".
    result = run_vram_tty("status", "--simulate", "demo", env=clean_env(NO_COLOR=""))
    assert result.rc == 0 and ESCAPE + "[" in result.out


def test_no_color_also_before_the_subcommand():
    result = run_vram_tty("--no-color", "status", "--simulate", "demo")
    assert result.rc == 0 and ESCAPE not in result.out


def test_simulate_from_the_environment(vram):
    snap = vram("status", "--json", env=clean_env(VRAM_SIMULATE="demo")).json()
    assert snap["simulated"] is True and snap["scenario"] == "demo"
    assert [g["memory_used"] for g in snap["gpus"]] == [g["memory_used"] for g in EXPECTED]
