"""A PID namespace that keeps the host's /proc (`unshare --pid --fork` without --mount-proc): the
driver's pids are that /proc's, so vram reads them there, even where that /proc's pid 1 is not
vram's to inspect (another user's init; here, the machine's own): it used to take them for
another namespace's pids then. The fixtures: conftest.py here."""

from __future__ import annotations

import json
import sys

import pytest


@pytest.mark.slow
def test_the_hosts_proc_in_a_child_namespace_is_the_drivers(new_container, scenario, dev, env):
    container = new_container(own_proc=False)
    here, host = container.start(dev / "nvidia0")
    path = scenario({(host, here): {"0": "6GiB"}})

    data = container.vram("status", "--simulate", str(path), "--json", env=env).json()
    [row] = [p for g in data["gpus"] for p in g["processes"] if p["memory"] == 6 * 1024**3]
    assert (row["pid"], row["nvml_pid"], row["host_missing"]) == (host, None, None), row
    assert row["command"].startswith(sys.executable)
    [outside] = [p for g in data["gpus"] for p in g["processes"] if p["memory"] == 3 * 1024**3]
    assert outside["pid"] == scenario.outside and outside["nvml_pid"] is None  # the scenario's own
    # signals go by this process's pid numbers, not that /proc's: refused, as docs/containers.md says
    kill = container.vram("kill", "--simulate", str(path), str(host), "--yes", "--json", env=env)
    [target] = json.loads(kill.out)["targets"]
    assert kill.rc == 1 and target["rule"] == "unmapped", kill.out
    assert "a signal goes by the pids of vram's own namespace" in target["reason"], target  # not "cannot be mapped"
    said = container.vram("kill", "--simulate", str(path), str(host), "--yes", env={**env, "VRAM_LANG": "zh_CN"})
    assert "宿主机" in said.out + said.err and "signal goes by" not in said.out + said.err, said.out + said.err
