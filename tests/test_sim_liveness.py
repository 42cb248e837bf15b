"""The simulator's liveness of real processes, in one simulator across readings: each NVML call
asks again whether the process runs (a driver frees a process's memory when it exits), through
pidfds where the kernel has them and /proc/PID/stat where it does not; both say the same."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import clean_env, minimal_scenario, proc_state, vram_argv, wait_for
from test_sim_threads import MAIN_THREAD_EXITS

from vramkit.nvml import scenario as scenarios
from vramkit.nvml.sim import SimulatedNvml

GiB = 1024**3


def _sim(pids: list[int], use_pidfd: bool) -> SimulatedNvml:
    data = minimal_scenario()
    data["processes"] += [{"pid": pid, "source": "real", "gpus": {"1": "2GiB"}} for pid in pids]
    sim = SimulatedNvml(scenarios.validate(data, "liveness"))
    sim._real._use_pidfd = use_pidfd
    sim.nvmlInit()
    return sim


def _listed(sim: SimulatedNvml) -> tuple[set[int], int]:
    """(pids NVML lists on GPU 1, its used memory)."""
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    pids = {p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(handle)}
    return pids, sim.nvmlDeviceGetMemoryInfo(handle).used


@pytest.fixture(params=[True, False], ids=["pidfd", "proc"])
def use_pidfd(request):
    return request.param


def test_an_exit_is_seen_by_the_next_call(children, use_pidfd):
    stays, leaves = children.start(["sleep", "600"]), children.start(["sleep", "600"])
    sim = _sim([stays.pid, leaves.pid], use_pidfd)
    assert _listed(sim) == ({102, stays.pid, leaves.pid}, 9 * GiB)
    leaves.kill()
    assert wait_for(lambda: proc_state(leaves.pid) == "Z")  # a zombie, not reaped: gone for the driver
    assert _listed(sim) == ({102, stays.pid}, 7 * GiB)
    leaves.wait()  # reaped: the pid is free for another process, which is not the one listed
    assert _listed(sim) == ({102, stays.pid}, 7 * GiB)
    assert bool(sim._real._pidfds) == use_pidfd  # the path the parameter names was taken


def test_a_process_whose_main_thread_exited_is_listed_until_all_threads_end(children, use_pidfd):
    child = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_EXITS], stdout=subprocess.PIPE)
    children.procs.append(child)
    assert child.stdout.readline().strip() == b"ready"
    assert wait_for(lambda: proc_state(child.pid) == "Z")
    sim = _sim([child.pid], use_pidfd)
    assert child.pid in _listed(sim)[0]
    child.kill()
    child.wait()
    assert child.pid not in _listed(sim)[0]


def test_a_pid_not_running_yet_is_listed_once_it_runs(children, use_pidfd):
    # A scenario may name a pid before its process exists; nothing about the pid is kept meanwhile.
    gone = children.start(["true"])
    gone.wait()
    sim = _sim([gone.pid], use_pidfd)
    assert gone.pid not in _listed(sim)[0]
    assert gone.pid not in sim._real._pidfds and gone.pid not in sim._real._real_start


def test_every_process_is_read_under_a_low_open_files_limit(children, write_scenario):
    # A server's default soft limit is often 1024 descriptors; the caches of open /proc files
    # and pidfds (two per process here) must stay under it, or processes vanish from the view.
    import resource

    sleepers = [children.start(["sleep", "600"]) for _ in range(200)]
    data = minimal_scenario()
    data["processes"] += [{"pid": s.pid, "source": "real", "gpus": {str(i % 2): "64MiB"}}
                          for i, s in enumerate(sleepers)]

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc = subprocess.run(vram_argv("status", "--json", "--simulate", str(write_scenario(data))), env=clean_env(),
                          capture_output=True, text=True, timeout=60, preexec_fn=low_limit)
    assert proc.returncode == 0, proc.stderr
    listed = [p for g in json.loads(proc.stdout)["gpus"] for p in g["processes"] if p["pid"] > 102]
    assert sorted(p["pid"] for p in listed) == sorted(s.pid for s in sleepers)
    assert all(p["command"] == "sleep 600" for p in listed)
