"""vram info inside a container: a GPU's process list shows a host pid that no process here could
be told to be as `-` in the PID column, as vram ps does, never as a pid here (the fixtures:
conftest.py here)."""

from __future__ import annotations


def test_info_never_shows_a_host_pid_as_a_pid_here(container, scenario, dev, env):
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    path = scenario({(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"}})

    info = container.vram("info", "--simulate", str(path), env=env)
    assert info.rc == 0, info.err
    rows = [line.split() for line in info.out.splitlines() if "of another PID namespace" in line]
    host_pids = [first_host, second_host, scenario.outside]
    assert sorted(int(row[row.index("(host") + 2].rstrip(",")) for row in rows) == sorted(host_pids), info.out
    assert all(row[0] == "-" for row in rows), info.out  # the PID column
