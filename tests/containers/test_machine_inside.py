"""Machine.snapshot inside a container: pid 1 there is the container's own first process (its
entrypoint, tini, a shell), the parent of what it starts, not the host's init: a child of it is
no orphan (the fixtures: conftest.py here)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_a_child_of_the_containers_pid_1_is_no_orphan(container, scenario, dev, env):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")  # started by the container's pid 1
    path = scenario({(host, here): {"0": "6GiB"}})

    data = container.vram("status", "--simulate", str(path), "--json", env=env).json()
    [mine] = [p for g in data["gpus"] for p in g["processes"] if p["pid"] == here]
    assert mine["ppid"] == 1 and mine["orphaned"] is False
    ps = container.vram("ps", "--simulate", str(path), env=env)
    [row] = [line for line in ps.out.splitlines() if line.split()[:2] == ["0", str(here)]]
    assert "orphan" not in row, ps.out
    holders = container.vram("ps", "--simulate", str(path), "--holders", env=env)
    assert holders.rc == 0, holders.err
    table = holders.out.split("as fuser -v shows them")[1]
    [row] = [line for line in table.splitlines() if line.split()[:1] == [str(here)]]
    assert "orphan" not in row, holders.out
    zombies = container.vram("kill", "--simulate", str(path), "--zombie", "--dry-run", "--json", env=env)
    plan = zombies.json()  # not left behind by a launcher: nothing to reclaim, nor to say
    assert plan["targets"] == [] and not any("orphaned" in note for note in plan["notes"]), zombies.out
