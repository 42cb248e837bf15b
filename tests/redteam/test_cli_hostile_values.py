"""Hostile values a red team gave the command line that ended in "internal error", were taken for
"everything", or reached the terminal raw: each is now one line and exit 2 (or is left out)."""

from __future__ import annotations

import os

import pytest
from helpers import assert_one_line_error, clean_env, run_vram

LONG_DB = "/tmp/" + "a" * 300 + "/history.db"  # a name longer than any file system allows


@pytest.mark.parametrize("args", [
    ("estimate", "gpt2", "--batch", "9" * 5000),  # past int()'s own 4,300 digits
    ("plan", "gpt2", "--seq", "9" * 5000),
    ("doctor", "--db", LONG_DB),
    ("kill", "--idle", "1h", "--dry-run", "--db", LONG_DB),
    ("report", "--db", LONG_DB),
    ("record", "--db", "/tmp/" + "b/" * 2100 + "x.db", "--duration", "1s"),
])
def test_values_no_setting_or_file_can_have_are_one_line(args):
    result = run_vram("--simulate", "demo", *args)
    assert_one_line_error(result, 2)


@pytest.mark.parametrize("args, flag", [
    (("--simulate", "", "status"), "--simulate"),  # not "no simulation": the real driver is not tried
    (("--simulate", "demo", "ps", "--gpu", ""), "--gpu"),
    (("--simulate", "demo", "ps", "--gpu", "\u0661"), "--gpu"),  # an Arabic-Indic one: int() takes it
    (("--simulate", "demo", "ps", "--user", ""), "--user"),
    (("--simulate", "demo", "ps", "--container", ""), "--container"),
    (("--simulate", "demo", "status", "--pod", " "), "--pod"),
    (("--simulate", "demo", "ps", "--slurm-job", "nan"), "--slurm-job"),
    (("--simulate", "demo", "ps", "--slurm-job", "0x10"), "--slurm-job"),
    (("--simulate", "demo", "kill", "--gpu", "", "--dry-run"), "--gpu"),
])
def test_an_empty_or_foreign_filter_is_refused_not_taken_for_everything(args, flag):
    assert_one_line_error(run_vram(*args), 2, flag)


def test_slurm_job_forms_are_still_taken():
    for job in ("4242", "4242.0", "4242.batch", "4242_7"):
        result = run_vram("--simulate", "demo", "ps", "--slurm-job", job)
        assert result.rc == 0, (job, result.err)


@pytest.mark.parametrize("name", ["scenario", "gpu"])
@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u2028", "\u2066"])
def test_characters_that_reorder_or_hide_text_are_refused_in_driver_side_names(write_scenario, name, char):
    data = {"name": "lab", "gpus": [{"name": "A100", "memory_total": "80GiB"}], "processes": []}
    if name == "scenario":
        data["name"] = f"lab{char}evil"
    else:
        data["gpus"][0]["name"] = f"A100{char}x"
    result = run_vram("--simulate", str(write_scenario(data)), "status")
    assert_one_line_error(result, 2, "must not contain control characters")
    assert char not in result.err


def test_an_error_line_never_carries_a_terminal_escape(tmp_path):
    db = tmp_path / "\x1b[31mX" / "h.db"
    result = run_vram("life", "1001", "--db", str(db))
    line = assert_one_line_error(result, 2, "--db")
    assert "\x1b" not in line and "?[31mX" in line


def test_nested_yaml_and_toml_are_one_line(tmp_path):
    deep_yaml = tmp_path / "web.yml"
    deep_yaml.write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    result = run_vram("--simulate", "demo", "serve", "--web-config", str(deep_yaml), "--listen", "127.0.0.1:0")
    assert_one_line_error(result, 2, "--web-config", "nested too deeply")
    deep_toml = tmp_path / "policy.toml"
    deep_toml.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    result = run_vram("--simulate", "demo", "record", "--policy", str(deep_toml), "--db", str(tmp_path / "h.db"),
                      "--duration", "1s")
    assert_one_line_error(result, 2, "--policy", "nested too deeply")


def test_a_relative_lease_directory_is_refused(tmp_path):
    """Relative to each process's working directory, it would be another lease set in each: two jobs, one GPU."""
    result = run_vram("--simulate", "demo", "pick", env=clean_env(VRAM_LEASE_DIR="leases"))
    assert result.rc != 0 and "absolute path" in result.err
    assert not os.path.exists("leases")


def test_a_lease_from_before_1970_is_read_as_from_1970(tmp_path):
    """Another user's lease file may say created -1e308 (finite, so valid JSON and a number): it reads
    as 1970, not as 300 digits of seconds ago in pick --explain."""
    from vramkit.leases.state import _lease_from

    lease = tmp_path / "lease-x.json"
    lease.write_text("{}")
    data = {"id": "x", "units": ["gpu-0"], "labels": {}, "kind": "run", "pid": os.getpid(), "created": -1e308,
            "expires": 2e9}
    assert _lease_from(data, lease.stat(), "x").created == 0.0


def test_a_scenario_path_that_is_a_fifo_is_not_waited_on(tmp_path):
    fifo = tmp_path / "lab.json"
    os.mkfifo(fifo)
    result = run_vram("--simulate", str(fifo), "status", timeout=30)
    assert_one_line_error(result, 2, "not a file")


@pytest.mark.parametrize("directory", ["", "  "])
def test_an_empty_shim_directory_is_refused_not_taken_for_the_current_one(tmp_path, directory):
    """`vram sim shim ""` wrote pynvml.py into whatever directory it was run from (a home or a
    project, where every later `python` there imports it)."""
    import subprocess

    from helpers import Result, vram_argv

    proc = subprocess.run(vram_argv("sim", "shim", directory), capture_output=True, text=True, cwd=tmp_path,
                          env=clean_env(), stdin=subprocess.DEVNULL, timeout=30)
    assert_one_line_error(Result(proc.returncode, proc.stdout, proc.stderr), 2, "DIR")
    assert list(tmp_path.iterdir()) == []


def test_a_key_given_twice_in_a_scenario_is_refused(write_scenario):
    """json keeps the last of two equal keys silently: the scenario would say other than it reads."""
    path = write_scenario('{"gpus": [{"name": "A100", "memory_total": "80GiB"}], '
                          '"processes": [{"pid": 41, "pid": 42, "gpus": {"0": "1GiB"}}]}')
    for args in (("status",), ("sim", "validate", str(path))):
        assert_one_line_error(run_vram("--simulate", str(path), *args), 2, 'the key "pid" appears twice')


@pytest.mark.parametrize("text, size", [("1EiB", 1024**6), ("1.5 PiB", 3 * 1024**5 // 2), ("2PB", 2 * 1000**5),
                                        ("1e", 1024**6)])
def test_sizes_up_to_the_most_a_refusal_names_are_read(text, size):
    """A refusal says "at most 1EiB", so 1EiB itself (and PiB, PB) must read."""
    from vramkit.units import parse_size

    assert parse_size(text) == size
    with pytest.raises(ValueError, match="at most 1EiB"):
        parse_size("1.1EiB")


@pytest.mark.parametrize("text", ["1h1h1h", "30m1h", "2m2m", "5s5"])
def test_a_duration_that_repeats_or_reverses_its_units_is_refused(text):
    """1h1h1h was read as 3 hours: a typo, not a sum. Each part a smaller unit than the one before."""
    from vramkit.units import parse_duration

    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)
    assert [parse_duration(t) for t in ("1h30m", "1d2h3m4s", "1h30", "1m30sec")] == [5400, 93784, 3630, 90]
    assert_one_line_error(run_vram("--simulate", "demo", "kill", "--idle", text, "--dry-run"), 2, "not a duration")
