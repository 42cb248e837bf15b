"""A process's own view (`vram ps --env PID`) inside a container is of the process with that pid
here, never of a host pid of the same number (the fixtures: conftest.py here)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def told_gpu_1(new_container, monkeypatch):
    """A container whose processes were told GPU 1 (its init inherits this environment)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return new_container()


@pytest.mark.slow
def test_a_process_view_is_of_the_process_here(told_gpu_1, scenario, dev, env):
    container = told_gpu_1
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    decoy, _host = container.start(at=scenario.outside)
    path = scenario({(host, here): {"0": "6GiB"}})

    # The decoy holds nothing: the 3 GiB NVML lists under the outside host pid are another's.
    other = container.vram("ps", "--simulate", str(path), "--env", str(decoy), "--json", env=env)
    assert other.rc == 0, other.err
    assert other.json()["holds"] == []
    # The process pidmap matched is read as any process here: its environment, told beside held.
    mine = container.vram("ps", "--simulate", str(path), "--env", str(here), "--json", env=env)
    assert mine.rc == 1, mine.err  # a mismatch, as for a process on the host
    view = json.loads(mine.out)
    assert view["environment_problem"] is None and view["environment"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert [h["gpu"] for h in view["holds"]] == [0] and view["mismatch"] == "told GPU 1, holds memory on GPU 0"
