"""The live view's one-line GPU panel keeps a space between 'util' and the value, at 100 % too
(issue 31, item 11)."""

from __future__ import annotations

import pytest
from helpers import minimal_scenario

import vramkit
from vramkit.tui.panels import gpu_panel


@pytest.mark.parametrize("util", [0, 7, 42, 100])
@pytest.mark.parametrize("width", [80, 120, 200])
def test_util_and_its_value_are_apart(write_scenario, monkeypatch, util, width):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    data = minimal_scenario()
    data["gpus"][0]["utilization"] = util
    snap = vramkit.snapshot(simulate=str(write_scenario(data)))
    line = gpu_panel(snap.gpus[0], [], snap.time, width, two_lines=False).plain
    assert f"util {util:>3}%" in line and "util1" not in line, line
    assert len(line) <= width
