"""Leases inside a container: NVML lists every holder under its host pid, and a row no process here
could be told to be (pid null, nvml_pid: pidmap.py) is never looked up in this /proc, where its
number may be an unrelated process's. Memory held outside the container is not the lease's job:
it never ends a `vram run` lease nor a `vram pick --hold` (its memory still counts as used). A
process here told apart from NVML's rows does, by its pid here. (The fixtures: conftest.py here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import real_gpu_scenario, start_sleeper, vram_argv, wait_for

# The job of a `vram run`: its child takes the pid here that is the number NVML lists a process
# outside the container under (ns_last_pid, as the namespace's init does for `at N`).
JOB = r"""
import os, sys, time
want, ready = int(sys.argv[1]), sys.argv[2]
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(want - 1))
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
with open(ready + ".tmp", "w") as f:
    f.write(str(child))
os.rename(ready + ".tmp", ready)
time.sleep(600)
"""


def machine(write_scenario, dev: Path, name: str, placements: dict[int, dict[str, str]],
            ns_pids: dict[int, int] | None = None) -> Path:
    """Two idle 40 GiB GPUs with real processes on them by host pid ({host pid: {"0": "6GiB"}}),
    numbered in this test's PID namespace (the host's, seen from the container); `ns_pids` gives
    a process of the container its pid there."""
    data = real_gpu_scenario(placements, (0, 0), device_nodes=f"{dev}/nvidia*",
                             pid_namespace=os.readlink("/proc/self/ns/pid"))
    for entry in data["processes"]:
        if entry["pid"] in (ns_pids or {}):
            entry["ns_pid"] = ns_pids[entry["pid"]]  # type: ignore[index]
    return write_scenario(data, name)


def leases(lease_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(lease_dir.glob("lease-*.json"))]


def test_a_run_lease_is_not_ended_by_a_host_pid_numbered_as_its_jobs_child(container, write_scenario, dev, env,
                                                                          children, tmp_path):
    """A process outside the container holds GPU 0; the job's child has, here, the number NVML lists
    it under. The job is not on the GPU: its lease stands (it ended at once: the launcher and
    every other vram read the host pid as the child here)."""
    outside = start_sleeper(children).pid
    path = machine(write_scenario, dev, "s.json", {outside: {"0": "6GiB"}})
    env = {**env, "VRAM_LEASE_DIR": str(tmp_path / "leases")}
    ready = tmp_path / "ready"
    run = subprocess.Popen(container.argv("run", "--simulate", str(path), "--only", "0", "-q", "--",
                                          sys.executable, "-c", JOB, str(outside), str(ready)),
                           env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    children.procs.append(run)
    assert wait_for(lambda: ready.exists() or run.poll() is not None), "the job never started"
    assert ready.exists(), run.stderr.read() if run.stderr else ""
    assert int(ready.read_text()) == outside  # the job's child is numbered here as NVML's outside pid

    listed = container.vram("ps", "--simulate", str(path), "--json", env=env).json()["processes"]
    assert [(p["pid"], p["nvml_pid"], p["holders_here"]) for p in listed] == [(None, outside, [])]
    picked = container.vram("pick", "--simulate", str(path), "--only", "0", env=env)
    assert picked.rc == 1, picked.out
    assert "GPU 0 is reserved by a vram run of root" in picked.err, picked.err
    exclusive = container.vram("pick", "--simulate", str(path), "--only", "0", "--exclusive", env=env)
    assert (f"GPU 0 is in use by other users (a process of another PID namespace (host pid {outside}))"
            in exclusive.err), exclusive.err  # not ours, whoever it is
    [lease] = leases(tmp_path / "leases")
    assert lease["kind"] == "run" and lease["units"] == ["GPU-00000000-0000-4000-8000-000000000000"]


def test_a_hold_is_not_ended_by_a_process_outside_the_container(container, write_scenario, dev, env, children,
                                                                tmp_path):
    """`vram pick --hold` ends when a process that was not on the GPU shows up on it: a process of
    this container, told apart by its pid here; never one NVML lists outside it (it did)."""
    env = {**env, "VRAM_LEASE_DIR": str(tmp_path / "leases")}
    empty = machine(write_scenario, dev, "empty.json", {})
    held = container.vram("pick", "--simulate", str(empty), "--only", "0", "--hold", "10m", env=env)
    assert held.rc == 0 and held.out.strip() == "0", held.err

    outside = start_sleeper(children).pid
    others = machine(write_scenario, dev, "outside.json", {outside: {"0": "6GiB"}})
    picked = container.vram("pick", "--simulate", str(others), "--only", "0", env=env)
    assert picked.rc == 1, picked.out
    assert "GPU 0 is reserved by vram pick --hold of root" in picked.err, picked.err

    # The job started by hand here shows up on GPU 0 (the process outside moved to GPU 1): held no more.
    here, host = container.start(dev / "nvidia0")
    mine = machine(write_scenario, dev, "mine.json", {host: {"0": "6GiB"}, outside: {"1": "3GiB"}}, {host: here})
    rows = container.vram("ps", "--simulate", str(mine), "--json", env=env).json()["processes"]
    assert sorted((p["gpu"], p["pid"]) for p in rows) == [(0, here), (1, None)]
    picked = container.vram("pick", "--simulate", str(mine), "--only", "0", env=env)
    assert picked.rc == 0 and picked.out.strip() == "0", picked.err


def test_a_hold_does_not_record_a_host_pid_as_a_process_here(container, write_scenario, dev, env, children,
                                                              tmp_path):
    """A hold records what is on the GPU by pids here. A host pid it recorded for a process outside
    kept the hold when the job started here got that number: the job was taken for what was there."""
    env = {**env, "VRAM_LEASE_DIR": str(tmp_path / "leases")}
    outside = start_sleeper(children).pid
    before = machine(write_scenario, dev, "before.json", {outside: {"0": "6GiB"}})
    held = container.vram("pick", "--simulate", str(before), "--only", "0", "--hold", "10m", env=env)
    assert held.rc == 0 and held.out.strip() == "0", held.err

    # The process outside is gone from GPU 0; the job started here, numbered as it was, holds it.
    here, host = container.start(dev / "nvidia0", at=outside)
    after = machine(write_scenario, dev, "after.json", {host: {"0": "6GiB"}}, {host: here})
    [row] = container.vram("ps", "--simulate", str(after), "--json", env=env).json()["processes"]
    assert (row["pid"], row["nvml_pid"]) == (outside, host)
    picked = container.vram("pick", "--simulate", str(after), "--only", "0", env=env)
    assert picked.rc == 0 and picked.out.strip() == "0", picked.err
    [lease] = leases(tmp_path / "leases")
    assert lease["baseline"] == {"GPU-00000000-0000-4000-8000-000000000000": []}  # not the host pid


def test_a_hold_taken_in_a_container_is_not_ended_by_the_hosts_pids(container, write_scenario, dev, env, children,
                                                                     tmp_path):
    """A hold written in a container records pids of its namespace: on the host (the lease directory
    shared), a host process on the GPU is not compared with them; the hold lasts its time there."""
    env = {**env, "VRAM_LEASE_DIR": str(tmp_path / "leases")}
    empty = machine(write_scenario, dev, "empty.json", {})
    held = container.vram("pick", "--simulate", str(empty), "--only", "0", "--hold", "10m", env=env)
    assert held.rc == 0 and held.out.strip() == "0", held.err

    host_job = start_sleeper(children).pid
    on_host = machine(write_scenario, dev, "host.json", {host_job: {"0": "6GiB"}})
    picked = subprocess.run(vram_argv("pick", "--simulate", str(on_host), "--only", "0"), env=env,
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert picked.returncode == 1, picked.stdout
    assert "GPU 0 is reserved by vram pick --hold of root" in picked.stderr, picked.stderr


# The launcher's own look (allocate.LeaseWatcher), in the namespace: this process is the job, its
# child has here the number NVML lists the process outside under.
WATCH = r"""
import json, os, sys, time
from pathlib import Path
from vramkit import leases as L
from vramkit.allocate import LeaseWatcher
from vramkit.machine import open_machine
lease_dir, scenario, want, unit = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(want - 1))
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
try:
    d = L.LeaseDir(lease_dir, shared=True)
    with d.locked():
        held = L.create_lease(d, [(unit, "GPU 0")], "run", 600)
    held.set_job(os.getpid())
    watching = LeaseWatcher(open_machine(scenario), held, os.getpid()).tick()
    print(json.dumps({"child": child, "watching": watching, "pending": held.pending}))
    held.release()
finally:
    os.kill(child, 9)
"""


def test_the_launcher_does_not_take_a_host_pid_for_its_jobs_child(container, write_scenario, dev, env, children,
                                                                  tmp_path):
    outside = start_sleeper(children).pid
    path = machine(write_scenario, dev, "s.json", {outside: {"0": "6GiB"}})
    (tmp_path / "leases").mkdir()
    unit = "GPU-00000000-0000-4000-8000-000000000000"
    argv = ["nsenter", "--target", str(container.init), "--pid", "--mount", "--", sys.executable, "-c", WATCH,
            str(tmp_path / "leases"), str(path), str(outside), unit]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"child": outside, "watching": True, "pending": [unit]}


# vram run started so that its job gets pid `want` in the namespace: the next pid is set, then
# this process becomes vram (exec keeps its pid; vram spawns nothing before the job).
NEXT_IS = r"""
import os, sys
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(int(sys.argv[1]) - 1))
os.execv(sys.executable, [sys.executable, "-m", "vramkit", *sys.argv[2:]])
"""

READY = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"


def test_a_run_lease_under_an_outer_namespaces_proc_does_not_compare_its_pids(new_container, write_scenario, dev, env,
                                                                              children, tmp_path):
    """In a PID namespace that keeps the host's /proc, the rows carry that /proc's pids and vram's
    own (the launcher's, its job's) are the namespace's: the job, pid N here, was compared with the
    row whose parent is pid N of the host, and the lease ended at once."""
    container = new_container(own_proc=False)
    outside = start_sleeper(children).pid  # its parent: this test's process, os.getpid() on the host
    path = machine(write_scenario, dev, "s.json", {outside: {"0": "6GiB"}})
    env = {**env, "VRAM_LEASE_DIR": str(tmp_path / "leases")}
    ready = tmp_path / "ready"
    argv = ["nsenter", "--target", str(container.init), "--pid", "--mount", "--", sys.executable, "-c", NEXT_IS,
            str(os.getpid()), "run", "--simulate", str(path), "--only", "0", "-q", "--", sys.executable, "-c", READY,
            str(ready)]
    run = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    children.procs.append(run)
    assert wait_for(lambda: ready.exists() and ready.read_text() or run.poll() is not None), "the job never started"
    assert ready.exists(), run.stderr.read() if run.stderr else ""
    assert int(ready.read_text()) == os.getpid()  # the job is numbered here as the listed process's parent there

    picked = container.vram("pick", "--simulate", str(path), "--only", "0", env=env)
    assert picked.rc == 1, picked.out
    assert "GPU 0 is reserved by a vram run of root" in picked.err, picked.err
    [lease] = leases(tmp_path / "leases")
    assert lease["units"] == ["GPU-00000000-0000-4000-8000-000000000000"] and lease["job_pid"] == os.getpid()
    # Nor are the launcher and the job looked up in that /proc, whose process of their number is another
    # (one that started at boot made the lease a day old on a machine up for one).
    assert lease["start_ticks"] is None and lease["job_start_ticks"] is None
