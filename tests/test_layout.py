"""The views fit the terminal: no line wider than the window, on a real terminal of each size."""

from __future__ import annotations

import pytest
from helpers import run_vram_tty, strip_ansi


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 100, 120, 200])
@pytest.mark.parametrize("command", [["status"], ["ps"]])
@pytest.mark.parametrize("scenario", ["demo", "mig", "faulty"])
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
