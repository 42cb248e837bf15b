"""Inside a container NVML's rows for processes outside it keep their host pid, and a host pid can
be the number of a process here: status, doctor and kill must not take the two for one process
(GpuProcess.pid_key: the pid here, or the host pid for a row no process here could be told to be).
The fixtures: conftest.py here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import real_gpu_scenario

# Run in the namespace: a plan to end the process here (pid argv[2]), the process ended, then kill's
# re-sampling: it waits only while the driver still lists that process, not a host pid of its number.
SETTLE = """
import importlib, os, signal, sys, time
from vramkit.killing import Criteria, make_plan
ex = importlib.import_module("vramkit.killing.execute")  # (the package's `execute` is the function)
from vramkit.machine import open_machine
machine = open_machine(sys.argv[1])
plan = make_plan(machine, Criteria(pids=(int(sys.argv[2]),)))
[target] = plan.targets
os.kill(target.pid, signal.SIGKILL)  # ended (the namespace's init reaps it), as a kill that worked
while os.path.exists(f"/proc/{target.pid}"):
    time.sleep(0.01)
target.status = ex.EXITED
taken = []
snapshot = machine.snapshot
machine.snapshot = lambda: taken.append(1) or snapshot()
ex._settle(machine, plan)
print(len(taken))
"""


def _namesake_outside(dev, host: int, here: int, path_for) -> object:
    """A scenario: the container's process (host pid `host`, pid `here` here) holds 6 GiB on GPU 0
    and 1 GiB on GPU 1, as NVML lists it; on GPU 1 also two processes outside, one of them with host
    pid `here`, holding 1 GiB there as well (the lone outside row on GPU 1 had that pid's number)."""
    data = real_gpu_scenario({host: {"0": "6GiB"}}, (30, 0), device_nodes=f"{dev}/nvidia*",
                             pid_namespace=os.readlink("/proc/self/ns/pid"))
    data["processes"][0]["ns_pid"] = here
    data["processes"] += [{"pid": 4243, "gpus": {"1": "5GiB"}, "user": "eve", "command": "python x.py"},
                          {"pid": here, "gpus": {"1": "1GiB"}, "user": "mallory", "command": "python y.py"}]
    return path_for(data)


def test_status_counts_an_outside_process_numbered_as_one_here_apart(container, dev, env, write_scenario):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    path = _namesake_outside(dev, host, here, write_scenario)
    out = container.vram("status", "--simulate", str(path), env=env)
    assert out.rc == 0, out.err
    assert "used by 3 processes" in out.out, out.out  # pid 2 here, and host pids 4243 and 2 outside


def test_doctor_groups_rows_by_the_pid_here(container, dev, env, write_scenario):
    """6 GiB on GPU 0 here and 1 GiB under host pid `here` outside on GPU 1 were one process that
    holds 6x more on its first GPU: the DataParallel warning about pid `here`."""
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    path = _namesake_outside(dev, host, here, write_scenario)
    report = container.vram("doctor", "--simulate", str(path), "--json", env=env).json()
    codes = [f["code"] for f in report["findings"]]
    assert "container_pids" in codes and "dataparallel_imbalance" not in codes, report["findings"]


@pytest.mark.slow
def test_kill_waits_only_for_the_process_it_ended_not_a_host_pid_of_its_number(container, dev, env, write_scenario):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    path = _namesake_outside(dev, host, here, write_scenario)
    inside = subprocess.run(["nsenter", "--target", str(container.init), "--pid", "--mount", "--", sys.executable,
                             "-c", SETTLE, str(path), str(here)], capture_output=True, text=True, env=env, timeout=60)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["1"], inside.stdout  # the old code re-sampled for SETTLE (2 s)


def test_kill_says_a_gpu_held_only_from_outside_is_the_hosts_to_free(container, scenario, dev, env):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    path = scenario({(host, here): {"0": "6GiB"}})  # GPU 1: scenario.outside, 3 GiB, held by no process here
    args = ("kill", "--simulate", str(path), "--gpu", "1", "--dry-run", "--all-users")
    said = container.vram(*args, env=env)
    assert said.rc == 0 and "nothing to signal" in said.out, said.out + said.err
    assert f"GPU 1: 3.0GiB held by 1 process outside this container (host pid {scenario.outside})" in said.out
    assert "only the host can free that memory" in said.out, said.out
    notes = json.loads(container.vram(*args, "--json", env=env).out)["notes"]
    assert any("only the host can free" in n for n in notes), notes
    chinese = container.vram(*args, env={**env, "VRAM_LANG": "zh_CN"})
    assert "宿主机" in chinese.out and "only the host" not in chinese.out, chinese.out
    # GPU 0, held by the process here: no such note
    mine = container.vram("kill", "--simulate", str(path), "--gpu", "0", "--dry-run", env=env)
    assert "outside this container" not in mine.out, mine.out


def test_doctor_does_not_count_processes_outside_as_jobs_crowding_gpu_0(container, dev, env, write_scenario):
    """Two rows on GPU 0 under host pids no process here holds the GPU for, GPU 1 empty: not 'jobs
    share GPU 0' for the reader to start with CUDA_VISIBLE_DEVICES (their host pids may be the
    numbers of processes here; they are other containers' jobs)."""
    here, host = container.start(dev / "nvidiactl")  # a process here, holding no GPU
    data = real_gpu_scenario({}, (30, 0), device_nodes=f"{dev}/nvidia*", pid_namespace=os.readlink("/proc/self/ns/pid"))
    data["processes"] = [{"pid": pid, "gpus": {"0": "5GiB"}, "user": "eve", "command": "python x.py"}
                         for pid in (4243, here)]
    report = container.vram("doctor", "--simulate", str(write_scenario(data)), "--json", env=env).json()
    codes = [f["code"] for f in report["findings"]]
    assert "container_pids" in codes and "crowded_gpu0" not in codes, report["findings"]
