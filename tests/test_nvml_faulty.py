"""The `faulty` scenario: what goes wrong on real servers must still give truthful output."""

from __future__ import annotations

import pytest
from helpers import ESCAPE, clean_env, run_vram, sanitized, scenario_data, status_blocks

from vramkit.units import parse_size

FAULTY = scenario_data("faulty")
LOST = next(i for i, g in enumerate(FAULTY["gpus"]) if g.get("lost"))
MISSING = {p["pid"]: p for p in FAULTY["processes"] if p.get("source") == "missing"}
BOTH = next(p for p in FAULTY["processes"] if p.get("type") == "both")
GINA = next(p for p in FAULTY["processes"] if p.get("user") == "gina")
CONTROL = ("\x1b", "\x07", "\n", "\r")


def _status(*args: str):
    result = run_vram("status", "--simulate", "faulty", *args, env=clean_env(COLUMNS="250"))
    assert result.rc == 0
    assert "Traceback" not in result.err and result.err == ""
    return result


@pytest.fixture(scope="module")
def snap():
    return _status("--json").json()


@pytest.fixture(scope="module")
def text():
    return _status().out


@pytest.fixture(scope="module")
def ps_rows():
    result = run_vram("ps", "--simulate", "faulty", "--json")
    assert result.err == ""
    return result.json()["processes"]


@pytest.fixture(scope="module")
def ps_text():
    result = run_vram("ps", "--simulate", "faulty", env=clean_env(COLUMNS="250"))
    assert result.rc == 0 and result.err == ""
    return result.out


def gpu(snap, index):
    return snap["gpus"][index]


# ---------------------------------------------------------------- a lost GPU

def test_lost_gpu_is_reported_as_lost(snap):
    lost = gpu(snap, LOST)
    assert lost["lost"] is True
    assert "lost" in lost["error"]
    assert lost["processes"] == []
    for key in ("memory_used", "memory_total", "utilization", "temperature"):
        assert lost[key] is None  # unknown, not 0


def test_other_gpus_still_read(snap):
    assert len(snap["gpus"]) == len(FAULTY["gpus"])
    for index, spec in enumerate(FAULTY["gpus"]):
        if index == LOST:
            continue
        g = gpu(snap, index)
        assert g["lost"] is False
        assert g["uuid"] == spec["uuid"] and g["name"] == spec["name"]
        assert g["memory_total"] == parse_size(spec["memory_total"])


def test_text_says_lost(text):
    blocks = status_blocks(text)
    assert "LOST" in blocks[LOST][0]
    assert sorted(blocks) == list(range(len(FAULTY["gpus"])))
    assert "1 GPU lost" in text.splitlines()[-1]


def test_csv_marks_the_lost_gpu():
    lines = _status("--csv").out.splitlines()
    rows = [line.split(",") for line in lines[1:]]
    lost_col = lines[0].split(",").index("lost")
    assert [r[lost_col] for r in rows] == ["true" if i == LOST else "false" for i in range(len(rows))]


# ---------------------------------------------------------------- unsupported and refused fields

@pytest.mark.parametrize("index, field, reason", [
    (2, "temperature", "not supported"),
    (2, "power_draw", "not supported"),
    (2, "fan", "not supported"),
    (2, "power_limit", "no permission"),
    (3, "utilization", "not supported"),
    (3, "memory_utilization", "not supported"),
])
def test_na_fields_are_null_with_a_reason(snap, index, field, reason):
    g = gpu(snap, index)
    assert g[field] is None
    assert g["na"][field] == reason


def test_supported_fields_are_still_read(snap):
    assert gpu(snap, 2)["utilization"] == FAULTY["gpus"][2]["utilization"]
    assert gpu(snap, 3)["temperature"] == FAULTY["gpus"][3]["temperature"]
    assert gpu(snap, 3)["power_limit"] == FAULTY["gpus"][3]["power_limit"]


def test_text_shows_na(text):
    blocks = status_blocks(text)
    gpu2 = "\n".join(blocks[2])
    assert gpu2.count("N/A") >= 2  # temperature and power
    assert "no permission" in gpu2 and "not supported" in gpu2
    assert "N/A" in blocks[3][0]  # utilization


def test_unknown_utilization_is_not_called_idle(ps_rows):
    # GPU 3 cannot report utilization: its holder must not be flagged idle on a guess.
    henry = next(r for r in ps_rows if r["user"] == "henry")
    assert henry["gpu_utilization"] is None and henry["idle"] is False


# ---------------------------------------------------------------- memory info v1 (old driver)

@pytest.mark.parametrize("index", [0, 2, 3])
def test_memory_info_v1_has_no_reserved(snap, index):
    g = gpu(snap, index)
    assert g["memory_reserved"] is None
    assert "v1" in g["na"]["memory_reserved"]
    assert g["memory_used"] + g["memory_free"] == g["memory_total"]


def test_memory_used_counts_every_listed_pid(snap):
    # GPU 0: frank's 10GiB plus 4GiB of a pid /proc cannot see: NVML still counts it.
    assert gpu(snap, 0)["memory_used"] == parse_size("10240MiB") + parse_size("4096MiB")
    assert gpu(snap, 0)["memory_used"] == sum(p["memory"] for p in gpu(snap, 0)["processes"])


def test_memory_used_figure_from_the_scenario(snap):
    # GPU 3 reports more in use than its one process holds (e.g. a process in another container).
    assert gpu(snap, 3)["memory_used"] == parse_size(FAULTY["gpus"][3]["memory_used"])


# ---------------------------------------------------------------- pids /proc cannot see

def test_missing_pids_are_listed_with_a_reason(ps_rows):
    rows = {r["pid"]: r for r in ps_rows if r["pid"] in MISSING}
    assert sorted(rows) == sorted(MISSING)
    for pid, row in rows.items():
        assert row["user"] is None and row["command"] is None and row["elapsed"] is None
        assert "not visible" in row["host_missing"]
        (key, size), = MISSING[pid]["gpus"].items()
        assert row["gpu"] == int(key) and row["memory"] == parse_size(size)


def test_missing_pids_in_text(ps_text, text):
    for pid in MISSING:
        line = next(line for line in ps_text.splitlines() if f" {pid} " in line)
        assert "no-host" in line and "not visible" in line and " ? " in line
        assert any(f" {pid} " in line and "no-host" in line for line in text.splitlines())


# ---------------------------------------------------------------- compute and graphics

def test_pid_in_both_lists_appears_once(snap, ps_rows):
    rows = [r for r in ps_rows if r["pid"] == BOTH["pid"]]
    assert len(rows) == 1
    assert rows[0]["types"] == ["compute", "graphics"]
    (key, size), = BOTH["gpus"].items()
    assert rows[0]["memory"] == parse_size(size)  # one allocation, not counted twice
    assert [p["pid"] for p in gpu(snap, int(key))["processes"]].count(BOTH["pid"]) == 1


def test_graphics_flag_in_text(ps_text):
    line = next(line for line in ps_text.splitlines() if f" {BOTH['pid']} " in line)
    assert "graphics" in line


# ---------------------------------------------------------------- hostile command lines

def test_control_characters_are_stripped_from_json(ps_rows, snap):
    row = next(r for r in ps_rows if r["pid"] == GINA["pid"])
    assert row["command"] == sanitized(GINA["command"])
    for ch in CONTROL:
        assert ch not in row["command"]
    status_row = next(p for g in snap["gpus"] for p in g["processes"] if p["pid"] == GINA["pid"])
    assert status_row["command"] == row["command"]


@pytest.mark.parametrize("view", ["status", "ps"])
def test_control_characters_are_stripped_from_text(view, text, ps_text):
    out = text if view == "status" else ps_text
    assert ESCAPE not in out and "\x07" not in out and "\r" not in out
    line = next(line for line in out.splitlines() if f" {GINA['pid']} " in line)
    # The newline inside the quoted argument did not start a new line.
    assert sanitized(GINA["command"]) in line


def test_control_characters_are_stripped_from_csv():
    result = run_vram("ps", "--simulate", "faulty", "--csv")
    assert ESCAPE not in result.out and "\x07" not in result.out
    assert len(result.out.splitlines()) == 1 + sum(len(p["gpus"]) for p in FAULTY["processes"])


def test_old_driver_versions_are_shown(snap):
    assert snap["driver_version"] == FAULTY["driver_version"]
    assert snap["cuda_version"] == FAULTY["cuda_version"]
