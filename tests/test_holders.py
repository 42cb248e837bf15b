"""Processes holding the GPU device files open (`fuser -v /dev/nvidia*`): found by `vram ps
--holders`, targeted by `vram kill --holders`. The scenario's `device_nodes` names fake device
files; real children open them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import (
    AS_NOBODY,
    assert_one_line_error,
    clean_env,
    proc_state,
    real_gpu_scenario,
    run_vram,
    run_vram_as,
    start_sleeper,
    wait_for,
)

from vramkit.nvml.scenario import ScenarioError, validate

GiB = 1024**3
HOLD = "import sys, time; files = [open(p) for p in sys.argv[1:]]; print('ready', flush=True); time.sleep(600)"


@pytest.fixture
def dev(tmp_path):
    """A fake /dev with the nodes of a two-GPU machine."""
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (d / name).write_text("")
    return d


def holder(children, *paths) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, *map(str, paths)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    children.procs.append(proc)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


@pytest.fixture
def env(tmp_path):
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     COLUMNS="200")


def test_ps_holders_lists_a_process_nvml_does_not(children, write_scenario, dev, env):
    hidden = holder(children, dev / "nvidia1", dev / "nvidiactl")
    listed = holder(children, dev / "nvidia0", dev / "nvidiactl", dev / "nvidia-uvm")
    bystander = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({listed.pid: {"0": "5GiB"}, bystander.pid: {"0": "1GiB"}},
                                   device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--json", env=env).json()
    assert sorted(p["pid"] for p in data["processes"]) == sorted([listed.pid, bystander.pid])
    assert data["device_nodes"] == f"{dev}/nvidia*"
    holders = {h["pid"]: h for h in data["holders"]}
    assert set(holders) == {hidden.pid, listed.pid}
    h = holders[hidden.pid]
    assert h["devices"] == [str(dev / "nvidia1"), str(dev / "nvidiactl")] and h["gpus"] == [1]
    assert h["nvml_listed"] is False and h["nvml_memory"] == []
    assert h["user"] and h["command"].startswith(sys.executable) and h["namespace_pids"] == [hidden.pid]
    assert holders[listed.pid]["nvml_listed"] is True
    assert holders[listed.pid]["nvml_memory"] == [{"gpu": 0, "memory": 5 * GiB}]


# A main thread that exits (the SYS_exit system call, not exit_group) while another thread runs: the
# process is a zombie whose /proc/PID/fd reads empty, while the live thread keeps the files open.
ZOMBIE_LEADER = (HOLD.split("; print")[0] + "; import ctypes, threading, platform; "
                 "threading.Thread(target=time.sleep, args=(600,)).start(); print('ready', flush=True); "
                 "ctypes.CDLL(None).syscall({'x86_64': 60, 'aarch64': 93}[platform.machine()], 0)")


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="the exit system call's number")
def test_a_zombie_leader_whose_thread_holds_the_gpu_is_a_holder(children, write_scenario, dev, env):
    proc = subprocess.Popen([sys.executable, "-c", ZOMBIE_LEADER, str(dev / "nvidia1"), str(dev / "nvidiactl")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    children.procs.append(proc)
    assert proc.stdout.readline().strip() == b"ready"
    assert wait_for(lambda: proc_state(proc.pid) == "Z")  # its own fd table reads empty (refused, as a user)
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--json", env=env).json()
    holders = {h["pid"]: h for h in data["holders"]}
    assert holders[proc.pid]["devices"] == [str(dev / "nvidia1"), str(dev / "nvidiactl")], data["holders"]
    assert holders[proc.pid]["gpus"] == [1]


def test_ps_holders_text(children, write_scenario, dev, env):
    hidden = holder(children, dev / "nvidia1", dev / "nvidiactl")
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))
    result = run_vram("ps", "--simulate", str(path), "--holders", env=env)
    assert result.rc == 0, result.err
    assert f"processes holding {dev}/nvidia* open" in result.out and ": 1" in result.out
    row = next(line for line in result.out.splitlines() if line.lstrip().startswith(str(hidden.pid)))
    assert "nvidia1,nvidiactl" in row and "not listed" in row
    assert "\x1b" not in result.out


def test_ps_holders_filters_by_gpu_and_user(children, write_scenario, dev, env):
    on0 = holder(children, dev / "nvidia0")
    on1 = holder(children, dev / "nvidia1")
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--gpu", "1", "--json", env=env).json()
    assert [h["pid"] for h in data["holders"]] == [on1.pid]
    data = run_vram("ps", "--simulate", str(path), "--holders", "--user", "nobody-here", "--json", env=env).json()
    assert data["holders"] == []
    assert alive(on0.pid)


def test_kill_holders_targets_a_holder_nvml_does_not_list(children, write_scenario, dev, env):
    hidden = holder(children, dev / "nvidia1", dev / "nvidiactl")
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))

    without = run_vram("kill", "--simulate", str(path), str(hidden.pid), "--yes", "--json", env=env)
    assert without.rc == 1
    target = json.loads(without.out)["targets"][0]
    assert target["rule"] == "not-gpu" and "--holders" in target["reason"] and "nvidia1" in target["reason"]
    assert alive(hidden.pid)

    plan = run_vram("kill", "--simulate", str(path), "--holders", "--gpu", "1", "--dry-run", env=env)
    assert plan.rc == 0, plan.err
    assert "NVML lists no memory for it; it holds nvidia1, nvidiactl open" in plan.out

    done = run_vram("kill", "--simulate", str(path), "--holders", str(hidden.pid), "--yes", "--timeout", "5",
                    "--json", env=env)
    assert done.rc == 0, done.err
    target = done.json()["targets"][0]
    assert target["status"] == "exited" and target["devices"] == [str(dev / "nvidia1"), str(dev / "nvidiactl")]
    assert target["nvml_listed"] is False and target["holder_gpus"] == [1]
    assert hidden.wait(5) < 0


def test_kill_holders_alone_selects_your_gpu_processes_and_holders(children, write_scenario, dev, env):
    hidden = holder(children, dev / "nvidia0")
    listed = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({listed.pid: {"1": "1GiB"}}, device_nodes=f"{dev}/nvidia*"))
    result = run_vram("kill", "--simulate", str(path), "--holders", "--dry-run", "--json", env=env)
    assert result.rc == 0, result.err
    assert sorted(t["pid"] for t in result.json()["targets"]) == sorted([hidden.pid, listed.pid])


def test_a_scenario_without_device_nodes_has_no_holders(env):
    data = run_vram("ps", "--simulate", "demo", "--holders", "--json", env=env).json()
    assert data["holders"] == [] and data["device_nodes"] is None
    assert "no device nodes" in data["holders_notes"][0]


@pytest.mark.slow
def test_holders_in_another_pid_namespace_show_both_pids(children, strays, write_scenario, dev, env):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a new PID namespace")
    # unshare forks; its child is pid 1 of the new namespace and holds the node open.
    outer = children.start(["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", HOLD,
                            str(dev / "nvidia0")])

    def inner_pid():
        try:
            kids = open(f"/proc/{outer.pid}/task/{outer.pid}/children").read().split()
        except OSError:
            return None
        return int(kids[0]) if kids else None

    assert wait_for(lambda: inner_pid() is not None)
    inner = strays.add(inner_pid())  # not our child: killed at teardown too
    def holds_device():  # its descriptors come and go while it starts: one gone between list and read
        for fd in os.listdir(f"/proc/{inner}/fd"):
            try:
                if os.readlink(f"/proc/{inner}/fd/{fd}") == str(dev / "nvidia0"):
                    return True
            except FileNotFoundError:
                continue
        return False

    assert wait_for(holds_device)
    path = write_scenario(real_gpu_scenario({inner: {"0": "2GiB"}}, device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--json", env=env).json()
    h = next(h for h in data["holders"] if h["pid"] == inner)
    assert h["namespace_pids"] == [inner, 1]
    text = run_vram("ps", "--simulate", str(path), "--holders", env=env).out
    assert "another PID namespace as pid 1" in text
    plan = run_vram("kill", "--simulate", str(path), str(inner), "--dry-run", "--json", env=env).json()
    target = plan["targets"][0]
    assert target["container_pid"] == 1 and any("whole container" in n for n in target["notes"])
    # A namespace's init ignores SIGTERM without a handler: still running, then --force ends it.
    first = run_vram("kill", "--simulate", str(path), str(inner), "--yes", "--timeout", "0.3", "--json", env=env)
    assert first.rc == 1 and json.loads(first.out)["targets"][0]["status"] == "still running"
    forced = run_vram("kill", "--simulate", str(path), str(inner), "--yes", "--timeout", "0.3", "--force", "--json",
                      env=env)
    assert forced.rc == 0, forced.err
    assert forced.json()["gpus"][0]["freed"] == 2 * GiB


def test_holders_scan_as_a_normal_user_says_what_it_could_not_see(children, shared_dir, dev):
    if os.geteuid() != 0:
        pytest.skip("needs root to run vram as another user")
    nodes = shared_dir / "dev"
    nodes.mkdir()
    (nodes / "nvidia0").write_text("")
    os.chmod(nodes, 0o755)
    os.chmod(nodes / "nvidia0", 0o644)
    holder(children, nodes / "nvidia0")  # root's: nobody may not read its open files
    path = shared_dir / "s.json"
    path.write_text(json.dumps(real_gpu_scenario({}, device_nodes=f"{nodes}/nvidia*")))
    path.chmod(0o644)
    result = run_vram_as(AS_NOBODY, "ps", "--simulate", str(path), "--holders", "--json",
                         env=clean_env(HOME=str(shared_dir)))
    data = result.json()
    assert data["holders"] == [] and data["holders_unreadable"] > 0
    assert "run as root" in data["holders_notes"][0]


def test_holders_and_csv_do_not_mix(env):
    assert_one_line_error(run_vram("ps", "--simulate", "demo", "--holders", "--csv", env=env), 2, "--holders", "CSV")


@pytest.mark.parametrize("value, needle", [
    ("relative/nvidia*", "absolute"), ("", "non-empty"), (42, "non-empty"), ("/tmp/dev/", "not a directory"),
    ("/tmp/\x1b[2J", "control characters"),
])
def test_device_nodes_is_checked(value, needle):
    data = {"gpus": [{"memory_total": "1GiB"}], "device_nodes": value}
    with pytest.raises(ScenarioError, match=needle) as info:
        validate(data, "s.json")
    assert "s.json: device_nodes:" in str(info.value)


def test_device_nodes_validates(write_scenario):
    path = write_scenario({"gpus": [{"memory_total": "1GiB"}], "device_nodes": "/tmp/x/nvidia*"})
    result = run_vram("sim", "validate", str(path))
    assert result.rc == 0, result.err


FORKS = ("import os, sys, time; f = open(sys.argv[1]); pid = os.fork()\n"
         "if pid == 0:\n    time.sleep(600)\n    os._exit(0)\n"
         "print(pid, flush=True); time.sleep(600)")


def test_kill_reports_a_forked_worker_that_still_holds_the_gpu(children, strays, write_scenario, dev, env):
    # A job whose worker inherited its device file: the job exits, the worker keeps the GPU open.
    job = subprocess.Popen([sys.executable, "-c", FORKS, str(dev / "nvidia0")], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    children.procs.append(job)
    worker = strays.add(int(job.stdout.readline()))
    path = write_scenario(real_gpu_scenario({job.pid: {"0": "6GiB"}}, device_nodes=f"{dev}/nvidia*"))
    result = run_vram("kill", "--simulate", str(path), str(job.pid), "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc == 0, result.err
    data = result.json()
    assert data["gpus"][0]["freed"] == 6 * GiB
    assert [h["pid"] for h in data["holders_after"]] == [worker]
    assert data["holders_after"][0]["devices"] == [str(dev / "nvidia0")]
    text = run_vram("kill", "--simulate", str(path), "--holders", "--gpu", "0", "--dry-run", env=env).out
    assert str(worker) in text and "NVML lists no memory for it" in text
    assert alive(worker)
