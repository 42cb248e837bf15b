"""`vram top` inside a real PID namespace (the fixtures: conftest.py here) where a process outside
the container holds memory on the container's GPU under a host pid that is the number of the
container's own process there: the live view keeps the two apart (GpuProcess.pid_key) in its rows,
its tree and the memory history of the detail view."""

from __future__ import annotations

import os

import pytest
from helpers import real_gpu_scenario, wait_for

OUTSIDE = 4242


def _scenario(dev, host: int, here: int, write_scenario) -> object:
    """The container's process (host pid `host`, pid `here` = OUTSIDE here) holds 6 GiB on GPU 0;
    a process outside with host pid OUTSIDE holds 1 GiB on GPU 0 too, listed after it, and 2 GiB on
    GPU 1, which no process here holds: so it cannot be the one here, which is mapped for certain."""
    data = real_gpu_scenario({host: {"0": "6GiB"}}, (30, 0), device_nodes=f"{dev}/nvidia*",
                             pid_namespace=os.readlink("/proc/self/ns/pid"))
    data["processes"][0]["ns_pid"] = here
    data["processes"].append({"pid": OUTSIDE, "gpus": {"0": "1GiB", "1": "2GiB"}, "user": "bob",
                              "command": "python other.py"})
    return write_scenario(data)


@pytest.mark.slow
def test_top_draws_the_memory_history_of_the_process_here_not_of_an_outside_host_pid_of_its_number(
        container, dev, write_scenario, top_in_tmux):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl", at=OUTSIDE)
    path = _scenario(dev, host, here, write_scenario)
    view = top_in_tmux.start(container, path)
    screen = view.screen
    assert wait_for(lambda: "GPU processes" in screen() and "host pid" in screen(), timeout=30), screen()
    lines = screen().splitlines()
    [mine] = [line for line in lines if line.split()[:2] == ["0", str(OUTSIDE)]]
    assert "6.0GiB" in mine, mine
    theirs = [line for line in lines if f"host pid {OUTSIDE}," in line]
    assert sorted(line.split()[:2] for line in theirs) == [["0", "-"], ["1", "-"]], theirs
    # the detail view of pid OUTSIDE here (first: the most memory): its own 6 GiB over time, not the 1 GiB
    # host pid OUTSIDE holds on the same GPU (the old code kept one trace for both, the last row's)
    view.send("Home", "Enter")
    assert wait_for(lambda: "GPU memory, last" in screen(), timeout=20), screen()
    detail = screen().splitlines()
    start = next(i for i, line in enumerate(detail) if "GPU memory, last" in line)
    history = "\n".join(detail[start:start + 4])
    assert "min 6.0GiB max 6.0GiB" in history and "1.0GiB" not in history, history
    view.send("Escape")
    assert wait_for(lambda: "GPU memory, last" not in screen(), timeout=20), screen()
    assert view.finish() == "rc=0"
