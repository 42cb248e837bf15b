"""`vram top` inside a real PID namespace (the fixtures: conftest.py here): the container's own
GPU process is numbered as a host pid NVML lists for a process outside, and the view never mixes
the two."""

from __future__ import annotations

import subprocess

import pytest
from helpers import wait_for


@pytest.mark.slow
def test_top_inside_a_container_keeps_a_host_pid_apart_from_the_same_number_here(
        container, scenario, dev, top_in_tmux):
    outside = scenario.outside
    # the container's GPU process is pid `outside` here: the number NVML gives a process outside it
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl", at=outside)
    path = scenario({(host, here): {"0": "6GiB"}})
    view = top_in_tmux.start(container, path)
    screen = view.screen
    assert wait_for(lambda: "GPU processes" in screen() and "host pid" in screen(), timeout=30), screen()
    lines = screen().splitlines()
    [mine] = [line for line in lines if line.split()[:2] == ["0", str(outside)]]
    [theirs] = [line for line in lines if line.split()[:1] == ["1"] and f"host pid {outside}," in line]
    assert theirs.split()[1] == "-", theirs  # never the host pid in the PID column
    # the detail view of that pid here is the container's process: GPU 0 only
    view.send("Home", "Enter")
    assert wait_for(lambda: "its own utilization" in screen(), timeout=20), screen()
    detail = screen().splitlines()
    start = next(i for i, line in enumerate(detail) if "its own utilization" in line)
    section = detail[start + 1: next(i for i, line in enumerate(detail) if "GPU memory, last" in line)]
    assert any("GPU 0 " in line for line in section) and not any("GPU 1 " in line for line in section), detail
    # the row of the host pid: k refuses it; nothing signalled, nothing audited
    view.send("Escape", "Down", "k")
    assert wait_for(lambda: "not signalled" in screen(), timeout=20), screen()
    assert not view.audit.exists()
    assert wait_for(lambda: subprocess.run(["kill", "-0", str(host)]).returncode == 0)
    assert view.finish() == "rc=0"
