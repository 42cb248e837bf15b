"""`vram kill --zombie` selects defunct processes and orphans left holding memory; a daemon is
re-parented to init (pid 1) on purpose, so an orphan at work (running kernels by the driver's
per-process samples, or using the CPU) is not a stale holder and is left out, with a note."""

from __future__ import annotations

import json
import os
import pwd
import subprocess

import pytest
from helpers import clean_env, cmdline, proc_state, real_gpu_scenario, run_vram, wait_for

from vramkit.procs.namespaces import proc_is_hosts


@pytest.fixture
def env(tmp_path):
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     XDG_STATE_HOME=None)


def orphan_sleeper(strays) -> int:
    """A `sleep 600` whose parent exited: re-parented to init (skips where a subreaper takes it)."""
    out = subprocess.run(["bash", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    pid = strays.add(int(out.stdout))
    assert wait_for(lambda: cmdline(pid) == b"sleep\x00600\x00")
    with open(f"/proc/{pid}/status") as f:
        ppid = int(next(line for line in f if line.startswith("PPid:")).split()[1])
    if ppid != 1:
        pytest.skip(f"orphans are re-parented to a subreaper (pid {ppid}) here, not to init")
    if not proc_is_hosts():
        pytest.skip("this runs in a container: its pid 1 is the container's own init, whose children are no orphans")
    return pid


def zombie_kill(path, env) -> dict:
    result = run_vram("kill", "--simulate", str(path), "--zombie", "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc in (0, 1), result.err
    return json.loads(result.out)


def test_an_orphan_running_kernels_95_percent_is_not_a_zombie(write_scenario, env, strays):
    daemon, stale = orphan_sleeper(strays), orphan_sleeper(strays)
    data = real_gpu_scenario({daemon: {"0": "20GiB"}, stale: {"1": "2GiB"}}, utilization=(95, 0))
    data["processes"][0]["sm_util"] = 95  # the driver's own samples for it: at work
    out = zombie_kill(write_scenario(data), env)
    assert [t["pid"] for t in out["targets"]] == [stale]  # the idle orphan only
    assert any(f"pid {daemon} is orphaned" in n and "95%" in n and "not selected" in n for n in out["notes"])
    assert proc_state(daemon) not in (None, "Z"), "the busy daemon was signalled"
    assert wait_for(lambda: proc_state(stale) in (None, "Z"))


def test_an_orphan_idle_on_a_busy_gpu_is_still_selected(write_scenario, env, strays):
    # Its own samples say 0 although its GPU is busy with someone else's work: left holding memory.
    stale = orphan_sleeper(strays)
    data = real_gpu_scenario({stale: {"0": "2GiB"}}, utilization=(95, 0))
    data["processes"][0]["sm_util"] = 0
    out = zombie_kill(write_scenario(data), env)
    assert [(t["pid"], t["status"]) for t in out["targets"]] == [(stale, "exited")]


def _synthetic(pid: int, **fields) -> dict:
    me = pwd.getpwuid(os.getuid()).pw_name
    return {"pid": pid, "user": me, "uid": os.getuid(), "command": "python serve.py", "gpus": {"1": "9GiB"},
            "ppid": 1, "sm_util": 0, **fields}


def test_an_orphan_busy_on_the_cpu_is_not_a_zombie(write_scenario, env):
    # Scenario processes (made up, never signalled): the selection alone is what is checked.
    data = real_gpu_scenario({})
    data["processes"] = [_synthetic(41001, cpu_percent=95), _synthetic(41002, cpu_percent=0),
                         _synthetic(41003, state="zombie", cpu_percent=0)]
    out = zombie_kill(write_scenario(data), env)
    assert sorted(t["pid"] for t in out["targets"]) == [41002, 41003]
    assert any("pid 41001 is orphaned" in n and "95% of a CPU" in n for n in out["notes"])


def test_a_gpu_whose_utilization_cannot_be_read_leaves_an_orphan_out(write_scenario, env):
    # Neither its own samples nor its GPU's utilization (N/A): whether it is at work cannot be told.
    data = real_gpu_scenario({})
    data["processes"] = [_synthetic(41001)]
    del data["processes"][0]["sm_util"]
    data["gpus"][1]["unsupported"] = ["utilization", "process_utilization"]
    out = zombie_kill(write_scenario(data), env)
    assert out["targets"] == []
    assert any("pid 41001 is orphaned" in n and "cannot be read" in n for n in out["notes"])
