"""The views fit the terminal: no line wider than the window, on a real terminal of each size; and
their memory colours follow the config file's thresholds, read only when there is colour."""

from __future__ import annotations

import pytest
from helpers import clean_env, run_vram, run_vram_tty, strip_ansi

from vramkit.fleet import Fleet, FleetGpu, FleetHost
from vramkit.render.fleet_view import render_fleet
from vramkit.render.style import Style


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 100, 120, 200])
@pytest.mark.parametrize("command", [["status"], ["status", "--all"], ["ps"], ["info"]])
@pytest.mark.parametrize("scenario", ["demo", "mig", "faulty", "unhealthy"])
def test_no_line_is_wider_than_the_terminal(columns, command, scenario):
    result = run_vram_tty(*command, "--simulate", scenario, columns=columns)
    assert result.rc == 0, result.err
    lines = strip_ansi(result.out).splitlines()
    assert lines and "SIMULATED" in lines[0]
    too_wide = [line for line in lines if len(line) > columns]
    assert not too_wide, too_wide


def test_the_full_width_view_keeps_the_utilization_bar_and_a_narrow_one_drops_it():
    wide = strip_ansi(run_vram_tty("status", "--simulate", "demo", "--gpu", "0", columns=160).out)
    narrow = strip_ansi(run_vram_tty("status", "--simulate", "demo", "--gpu", "0", columns=80).out)
    assert "util █████████" in wide
    assert "util █" not in narrow and " 97%" in narrow and "70.6/80.0GiB" in narrow


def test_a_narrow_ps_gives_up_host_columns_before_the_command():
    narrow = strip_ansi(run_vram_tty("ps", "--simulate", "demo", columns=80).out).splitlines()
    header = narrow[2]
    assert "RSS" not in header and "CPU%" not in header and "COMMAND" in header
    row = next(line for line in narrow if "60112" in line)
    assert "torchrun --nproc_per_node" in row


YELLOW, GREEN, RED = "\x1b[33m", "\x1b[32m", "\x1b[31m"


def _config(tmp_path, text: str) -> dict[str, str]:
    (tmp_path / "vramkit").mkdir(exist_ok=True)
    (tmp_path / "vramkit" / "config.toml").write_text(text)
    return clean_env(XDG_CONFIG_HOME=str(tmp_path))


def test_status_colours_follow_the_config_thresholds(tmp_path):
    # GPU 4 holds 22 % of its memory: green at the defaults, yellow from 20 %, red from 21 %
    line = next(line for line in run_vram_tty("status", "--simulate", "demo", "--gpu", "4", env=clean_env(
        XDG_CONFIG_HOME=str(tmp_path))).out.splitlines() if "18.0/80.0GiB" in line)
    assert GREEN + "  18.0/80.0GiB" in line
    for text, colour in (("memory_warn = 20\n", YELLOW), ("memory_warn = 20\nmemory_critical = 21\n", RED)):
        env = _config(tmp_path, "[thresholds]\n" + text)
        out = run_vram_tty("status", "--simulate", "demo", "--gpu", "4", env=env).out
        assert colour + "  18.0/80.0GiB" in out, out


def test_piped_status_never_reads_the_config_and_a_terminal_is_told_what_is_wrong(tmp_path):
    env = _config(tmp_path, "[thresholds]\nmemory_warn = 200\n")
    piped = run_vram("status", "--simulate", "demo", "--gpu", "4", env=env)
    assert piped.rc == 0 and "18.0/80.0GiB" in piped.out, piped.err
    assert run_vram("status", "--simulate", "demo", "--gpu", "4", "--no-color", env=env).rc == 0
    on_terminal = run_vram_tty("status", "--simulate", "demo", "--gpu", "4", env=env)
    assert on_terminal.rc == 2
    assert on_terminal.err == (f"vram: error: {tmp_path}/vramkit/config.toml: thresholds.memory_warn: "
                               "must be a number from 0 to 100\n")


def test_fleet_colours_follow_the_config_thresholds(tmp_path, monkeypatch):
    gib = 1024 ** 3
    fleet = Fleet("http://prometheus:9090", [FleetHost("gpu-a", "gpu-a:9400", "vram", True, gpus=[
        FleetGpu(0, name="NVIDIA A100", memory_used=30 * gib, memory_total=100 * gib, utilization=5, processes=1)])],
        [])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert GREEN + " 30.0/100.0GiB" in render_fleet(fleet, Style(color=True, unicode=True), 120)
    _config(tmp_path, "[thresholds]\nmemory_warn = 25\nmemory_critical = 30\n")
    assert RED + " 30.0/100.0GiB" in render_fleet(fleet, Style(color=True, unicode=True), 120)
    # no colour: nothing painted, and a bad file is not read
    _config(tmp_path, "[thresholds]\nmemory_warn = nope\n")
    assert "\x1b" not in render_fleet(fleet, Style(color=False, unicode=False), 120)
