"""vram kill inside a container: it frees what the container's own processes hold, by their pids
here, and never signals or shows a host pid as one of them (the fixtures: conftest.py here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import wait_for

GiB = 1024**3


@pytest.mark.slow
def test_kill_frees_the_containers_own_process(container, scenario, dev, env):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    decoy, decoy_host = container.start(at=host)
    path = scenario({(host, here): {"0": "6GiB"}})

    refused = container.vram("kill", "--simulate", str(path), str(decoy), "--yes", "--json", env=env)
    assert refused.rc == 1 and json.loads(refused.out)["targets"][0]["rule"] == "not-gpu"
    done = container.vram("kill", "--simulate", str(path), str(here), "--yes", "--timeout", "5", "--json", env=env)
    assert done.rc == 0, done.err
    report = done.json()
    assert report["targets"][0]["status"] == "exited" and report["targets"][0]["pid"] == here
    assert report["gpus"][0]["freed"] == 6 * GiB
    assert wait_for(lambda: not Path(f"/proc/{host}").exists())
    assert Path(f"/proc/{decoy_host}").exists()  # the process here numbered as NVML's pid lives on


@pytest.mark.slow
def test_kill_one_of_two_frees_what_it_held(container, scenario, dev, env):
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    path = scenario({(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"}})

    plan = container.vram("kill", "--simulate", str(path), "--gpu", "0", "--dry-run", "--json", env=env).json()
    assert sorted(t["pid"] for t in plan["targets"]) == [first, second]
    assert all(any("cannot be told apart here" in n for n in t["notes"]) for t in plan["targets"])
    done = container.vram("kill", "--simulate", str(path), str(second), "--yes", "--timeout", "5", "--json", env=env)
    assert done.rc == 0, done.err
    assert done.json()["gpus"][0]["freed"] == 8 * GiB
    assert wait_for(lambda: not Path(f"/proc/{second_host}").exists()) and Path(f"/proc/{first_host}").exists()


def test_what_a_kill_leaves_is_never_shown_under_a_host_pid(container, scenario, dev, env):
    """Three holders of GPU 0 here: after one is ended, the two left still cannot be told apart,
    and the report's 'still held' lines must not print their host pids as pids of this container."""
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    third, third_host = container.start(dev / "nvidia0")
    path = scenario({(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"},
                     (third_host, third): {"0": "2GiB"}})
    done = container.vram("kill", "--simulate", str(path), str(second), "--yes", "--timeout", "5", env=env)
    assert done.rc == 0, done.err
    held = [line for line in done.out.splitlines() if "still held" in line]
    assert len(held) == 2, done.out
    assert not any(str(pid) in line.split() for line in held for pid in (first_host, third_host)), done.out
    assert all(line.split()[4] == "-" for line in held), done.out  # "still held: 6.0GiB  ?  -  (host pid ...)"


def test_what_a_kill_leaves_is_never_listed_under_a_host_pid_in_json(container, scenario, dev, env):
    """The same in kill's JSON: `still_holding` gives such a row as ps --json does, pid null and its
    host pid as nvml_pid (it gave the host pid as `pid`, a number that names another process here
    or none)."""
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    third, third_host = container.start(dev / "nvidia0")
    path = scenario({(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"},
                     (third_host, third): {"0": "2GiB"}})
    done = container.vram("kill", "--simulate", str(path), str(second), "--yes", "--timeout", "5", "--json", env=env)
    assert done.rc == 0, done.err
    [gpu] = done.json()["gpus"]
    assert sorted((p["pid"], p["nvml_pid"], p["target"]) for p in gpu["still_holding"]) == [
        (None, first_host, False), (None, third_host, False)], gpu
