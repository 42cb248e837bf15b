"""vram pick and run --exclusive inside a container: a GPU held by a process outside it (NVML
lists it under a host pid that no process here could be told to be; its user cannot be read
here) is refused by saying what holds it, a process of another PID namespace and its host pid,
as doctor says it, not "unknown user" (the fixtures: conftest.py here)."""

from __future__ import annotations

import pytest

OUTSIDE = "a process of another PID namespace (host pid {pid})"


@pytest.mark.slow
def test_exclusive_names_an_outside_holder_by_its_host_pid(container, scenario, dev, env):
    mine, mine_host = container.start(dev / "nvidia0", dev / "nvidiactl")
    container.start(at=scenario.outside)  # a process here numbered as the outside host pid: not it
    path = scenario({(mine_host, mine): {"0": "1GiB"}}, utilization=(0, 0))  # GPU 1: the outside 3 GiB

    picked = container.vram("pick", "--simulate", str(path), "--exclusive", "-n", "2", "--min-free", "1GiB",
                            env=env)
    assert picked.rc == 1, picked
    said = OUTSIDE.format(pid=scenario.outside)
    assert f"GPU 1 is in use by other users ({said})" in picked.err, picked.err
    assert "unknown user" not in picked.err, picked.err

    ran = container.vram("run", "--simulate", str(path), "--exclusive", "--only", "1", "--min-free", "1GiB",
                         "--", "true", env=env)
    assert ran.rc == 1, ran
    assert said in ran.err and "unknown user" not in ran.err, ran.err
