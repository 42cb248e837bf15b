"""Unbounded inputs (issue 13 item 7): a huge GPU range, an endless or huge log, deep or huge
numbers in a scenario, odd --watch intervals and environment values are each one line of
error and exit 2 (a huge log: a bounded read that says what it skipped), never a MemoryError,
a RecursionError, a traceback or a busy loop."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from helpers import clean_env, run_vram

from vramkit.cuda_env import devices_of
from vramkit.errors import RequestError
from vramkit.gpu_choice import resolve_selectors
from vramkit.units import parse_gpu_list


def one_line_error(result: tuple[int, str, str], *needles: str) -> str:
    rc, _out, err = result
    assert rc == 2, f"exit {rc}; stderr: {err!r}"
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


# ---------------------------------------------------------------- GPU lists and ranges

@pytest.mark.parametrize("command", [
    ["status"], ["ps"], ["kill", "--dry-run", "--idle", "1h"], ["doctor"],
])
def test_a_huge_gpu_range_is_refused_before_it_is_expanded(cli, command):
    line = one_line_error(cli(*command, "--simulate", "demo", "--gpu", "0-999999999999"), "--gpu")
    assert "0-999999999999" in line and len(line) < 200


def test_gpu_lists_stop_at_a_sane_index():
    assert parse_gpu_list("0-3,7") == [0, 1, 2, 3, 7]
    with pytest.raises(ValueError, match="too large"):
        parse_gpu_list("5-999999999999")
    with pytest.raises(ValueError, match="not a GPU list"):
        parse_gpu_list("9" * 5000)  # past int()'s digit limit: still a plain one-line error
    assert len(str(pytest.raises(ValueError, parse_gpu_list, "0-" + "9" * 4000).value)) < 200


def test_pick_exclude_with_a_huge_range_names_the_first_missing_gpu(cli):
    one_line_error(cli("pick", "--simulate", "demo", "--exclude", "0-999999999"),
                   "--exclude", "no GPU 8 (this machine has GPUs 0-7)")


def test_selectors_never_expand_a_huge_range():
    import vramkit
    devices = devices_of(vramkit.snapshot(simulate="demo"))
    for text in ("0-999999999999", "999999999-9999999999", "7-" + "9" * 150, "9" * 5000, "²"):
        with pytest.raises(RequestError):
            resolve_selectors(text, devices, "exclude")


# ---------------------------------------------------------------- vram doctor LOGFILE

OOM_FIXTURES = Path(__file__).parents[1] / "fixtures" / "oom"


class _Endless(io.RawIOBase):
    """A stream that never ends (as /dev/zero, or `yes |`)."""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        b[:] = b"y\n" * (len(b) // 2) + b"y" * (len(b) % 2)
        return len(b)


def test_a_huge_log_is_read_as_its_last_window_with_the_line_numbers_kept(cli, tmp_path, monkeypatch):
    from vramkit.cli import doctor
    monkeypatch.setattr(doctor, "LOG_WINDOW", 64 * 1024)
    oom = (OOM_FIXTURES / "cpu_cant_allocate_1_x.txt").read_text()
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 0.5 " * 4 + "\n" * 1 + ("x" * 63 + "\n") * 20000 + oom)  # 1.2 MiB
    rc, out, err = cli("doctor", str(log), "--no-live", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["line"] == 20002
    assert any("only its last" in n and "were searched" in n for n in data["notes"]), data["notes"]
    rc, out, err = cli("doctor", str(log), "--no-live")  # the text view says it too
    assert rc == 0 and "only its last" in out


def test_a_device_is_not_a_log(cli):
    one_line_error(cli("doctor", "/dev/zero", "--no-live"), "/dev/zero", "not a log file")


def test_a_stream_that_never_ends_is_read_up_to_a_limit(cli, monkeypatch):
    from vramkit.cli import doctor
    monkeypatch.setattr(doctor, "STREAM_LIMIT", 8 * 1024**2)
    monkeypatch.setattr(doctor, "LOG_WINDOW", 1024**2)
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": io.BufferedReader(_Endless())})())
    rc, out, err = cli("doctor", "-", "--no-live")
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "no out-of-memory error found in stdin" in err
    assert "stopped reading after 8MiB" in err


# ---------------------------------------------------------------- scenario files

def _tiny(**gpu_fields) -> dict:
    return {"name": "tiny", "gpus": [{"memory_total": "80GiB", **gpu_fields}],
            "processes": [{"pid": 4242, "gpus": {"0": "1GiB"}}]}


@pytest.mark.parametrize("text, needles", [
    ("[" * 100_000 + "]" * 100_000, ["nested too deeply"]),
    (json.dumps(_tiny(memory_total="9" * 400)), ["gpus[0].memory_total", "too large"]),
    (json.dumps(_tiny(memory_total="9" * 400 + "GiB")), ["gpus[0].memory_total", "too large"]),
    (json.dumps(_tiny()).replace('"80GiB"', "9" * 400), ["gpus[0].memory_total", "too large"]),
    (json.dumps(_tiny()).replace('"80GiB"', "1" + "0" * 5000), ["5001 digits", "too large"]),
    (json.dumps(_tiny()).replace('"80GiB"', "1.8e308"), ["gpus[0].memory_total"]),
    (json.dumps(_tiny(power_limit=1)).replace('"power_limit": 1', '"power_limit": 1e999'), ["gpus[0].power_limit"]),
    (json.dumps(_tiny(power_limit=1)).replace('"power_limit": 1', '"power_limit": NaN'), ["gpus[0].power_limit"]),
    (json.dumps(_tiny(power_limit=1)).replace('"power_limit": 1', '"power_limit": -Infinity'), ["gpus[0].power_limit"]),
    (json.dumps(_tiny(power_limit=1e300)), ["gpus[0].power_limit", "at most"]),
    (json.dumps({**_tiny(), "faults": {"slow_calls": {"nvmlDeviceGetCount": 1e300}}}),
     ["faults.slow_calls.nvmlDeviceGetCount", "at most"]),
    (json.dumps({**_tiny(), "processes": [{"pid": 10**300, "gpus": {"0": 1}}]}), ["processes[0].pid", "at most"]),
    (json.dumps({**_tiny(), "processes": [{"pid": 5, "age": "9" * 400 + "s", "gpus": {"0": 1}}]}),
     ["processes[0].age", "too long"]),
], ids=["deep", "size-400-digits", "size-400-digits-GiB", "int-400-digits", "int-5000-digits", "1.8e308",
        "1e999", "NaN", "-Infinity", "power-1e300", "slow_calls-1e300", "pid-1e300", "age-400-digits"])
def test_unbounded_scenario_values_are_one_line_errors(cli, tmp_path, text, needles):
    path = tmp_path / "s.json"
    path.write_text(text)
    for argv in (("sim", "validate", str(path)), ("status", "--simulate", str(path))):
        line = one_line_error(cli(*argv), *needles)
        assert len(line) < 300, line


# ---------------------------------------------------------------- --watch and the environment

@pytest.mark.parametrize("interval", ["inf", "nan", "1e-9", "1e400", "-inf"])
def test_watch_interval_must_be_sane(cli, interval):
    # One parser of durations for every flag (issue 27): it names the flag and the value it refused.
    result = cli("status", "--simulate", "demo", f"--watch={interval}")
    one_line_error(result, "--watch", f"not a duration: {interval!r}")


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "1e999"])
def test_vram_sim_time_must_be_a_number(cli, monkeypatch, value):
    monkeypatch.setenv("VRAM_SIM_TIME", value)
    one_line_error(cli("status", "--simulate", "demo"), "VRAM_SIM_TIME", repr(value))


@pytest.mark.parametrize("digits", [19, 400, 4301, 10_000])
def test_a_huge_cuda_visible_devices_index_is_a_finding_not_a_crash(cli, monkeypatch, digits):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "9" * digits)
    rc, out, err = cli("doctor", "--simulate", "demo", "--json")
    assert rc == 0, err
    finding = next(f for f in json.loads(out)["findings"] if f["code"] == "cvd_missing")
    assert "which does not exist" in finding["title"] and len(finding["title"]) < 200
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0," + "9" * digits)  # pick reads it with the same parser
    rc, out, err = cli("pick", "--simulate", "demo")
    assert rc in (0, 1, 2) and "internal error" not in err and "Traceback" not in err


def test_doctor_shows_a_huge_cuda_visible_devices_cut_short():
    """The checklist's header once printed a 4,300-digit CUDA_VISIBLE_DEVICES in full."""
    result = run_vram("doctor", "--simulate", "demo", "--no-color",
                      env=clean_env(CUDA_VISIBLE_DEVICES="9" * 4300))
    assert "Traceback" not in result.err
    assert "(4,300 characters)" in result.out
    assert max(len(line) for line in result.out.splitlines()) < 400
