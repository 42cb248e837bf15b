"""vram inside a container: NVML reports host pids, the container's /proc has its own. Run in a
real PID namespace (`unshare --pid --fork --mount-proc`, entered with nsenter), on a scenario whose
pids are the host's (`pid_namespace`: the test's own namespace) and whose GPU processes are real
processes of that namespace holding fake device nodes. A process of the namespace is given the
number of a host pid NVML lists (ns_last_pid), so a mix-up would show."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Result, clean_env, real_gpu_scenario, vram_argv, wait_for

GiB = 1024**3

# pid 1 of the namespace: reads lines from stdin; "at N" makes the next process pid N here
# (/proc/sys/kernel/ns_last_pid), "run [PATH...]" starts a process holding PATHs open and prints
# its pid here. It reaps its children, as an init does.
INIT = r"""
import os, signal, sys
def reap(*_):
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
signal.signal(signal.SIGCHLD, reap)
HOLD = "import os, sys, time; f = [open(p) for p in sys.argv[1:]]; os.write(1, b'ready\\n'); time.sleep(600)"
for line in sys.stdin:
    word, *args = line.split()
    if word == "at":
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(int(args[0]) - 1))
        continue
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.execv(sys.executable, [sys.executable, "-c", HOLD, *args])
    os.close(w)
    while (chunk := os.read(r, 16)) and not chunk.endswith(b'\n'):  # 'ready\n': its files are open
        pass
    os.close(r)
    print(pid, flush=True)
"""


def _can_unshare() -> str | None:
    """Why a PID namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root for a new PID namespace (unshare --pid)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool}(1) (util-linux)"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True,
                           timeout=30)
    if probe.returncode != 0:
        return f"unshare --pid --fork --mount-proc failed here: {probe.stderr.strip()[:200]}"
    return None


class Container:
    """A real PID namespace with its own /proc: processes started in it, vram run in it."""

    def __init__(self, children) -> None:
        self.unshare = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                                         sys.executable, "-c", INIT], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        children.procs.append(self.unshare)  # killed at teardown: --kill-child takes the namespace with it
        assert wait_for(lambda: self._kids(self.unshare.pid))
        self.init = self._kids(self.unshare.pid)[0]

    @staticmethod
    def _kids(pid: int) -> list[int]:
        try:
            return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def start(self, *paths: Path, at: int | None = None) -> tuple[int, int]:
        """A process of the container holding `paths` open: (its pid here, its host pid)."""
        assert self.unshare.stdin is not None and self.unshare.stdout is not None
        if at is not None:
            self.unshare.stdin.write(f"at {at}\n")
        self.unshare.stdin.write(" ".join(["run", *map(str, paths)]) + "\n")
        self.unshare.stdin.flush()
        inner = int(self.unshare.stdout.readline())
        assert at is None or inner == at
        for host in self._kids(self.init):
            nspid = next(line for line in Path(f"/proc/{host}/status").read_text().splitlines()
                         if line.startswith("NSpid:")).split()[1:]
            if int(nspid[-1]) == inner:
                return inner, host
        raise AssertionError(f"no host pid for pid {inner} of the namespace")

    def vram(self, *args: str, env: dict[str, str]) -> Result:
        proc = subprocess.run(["nsenter", "--target", str(self.init), "--pid", "--mount", "--", *vram_argv(*args)],
                              capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
        return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def container(children):
    why = _can_unshare()
    if why:
        pytest.skip(why)
    return Container(children)


@pytest.fixture
def dev(tmp_path):
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (d / name).write_text("")
    return d


@pytest.fixture
def env(tmp_path):
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     COLUMNS="200")


OUTSIDE = 4242  # a host pid NVML lists on GPU 1: a process of another container, held by none here


def scenario(write_scenario, dev, placements: dict[tuple[int, int], dict[str, str]]):
    """{(host pid, pid here): {"0": "6GiB"}} as real processes, numbered as the host numbers them,
    plus the synthetic process OUTSIDE on GPU 1."""
    data = real_gpu_scenario({host: gpus for (host, _), gpus in placements.items()}, device_nodes=f"{dev}/nvidia*",
                             pid_namespace=os.readlink("/proc/self/ns/pid"))
    for entry, (_, here) in zip(data["processes"], placements):
        entry["ns_pid"] = here
    data["processes"].append({"pid": OUTSIDE, "gpus": {"1": "3GiB"}, "user": "bob", "command": "python other.py"})
    return write_scenario(data)


def rows(data: dict) -> list[dict]:
    return [p for g in data["gpus"] for p in g["processes"]]


def test_one_holder_is_its_host_pid(container, write_scenario, dev, env):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    # Processes here numbered as the host pids NVML lists: neither is what NVML means.
    decoy_host, _ = container.start(at=host)
    decoy_outside, _ = container.start(at=OUTSIDE)
    path = scenario(write_scenario, dev, {(host, here): {"0": "6GiB"}})

    data = container.vram("status", "--simulate", str(path), "--json", env=env).json()
    by_gpu = {g["index"]: g["processes"] for g in data["gpus"]}
    [mine] = by_gpu[0]
    assert mine["pid"] == here and mine["nvml_pid"] == host and mine["memory"] == 6 * GiB
    assert mine["host_missing"] is None and mine["command"].startswith(sys.executable)
    assert mine["start_ticks"] is not None and mine["holders_here"] == []
    [other] = by_gpu[1]
    assert other["pid"] is None and other["nvml_pid"] == OUTSIDE and other["command"] is None
    assert "runs outside" in other["host_missing"]
    assert {decoy_host, decoy_outside}.isdisjoint(p["pid"] for p in rows(data))

    text = container.vram("ps", "--simulate", str(path), env=env)
    assert text.rc == 0, text.err
    lines = text.out.splitlines()
    assert any(line.split()[:2] == ["0", str(here)] for line in lines)
    assert f"GPU 1: 3.0GiB held by 1 process outside this container (host pid {OUTSIDE})" in text.out
    assert not any(line.split()[1:2] == [str(OUTSIDE)] for line in lines)

    # The same scenario from the host: the pids are its own, read as before.
    outside = json.loads(subprocess.run(vram_argv("status", "--simulate", str(path), "--json"), capture_output=True,
                                        text=True, env=env, timeout=60).stdout)
    assert [p["pid"] for p in rows(outside) if p["memory"] == 6 * GiB] == [host]
    assert all(p["nvml_pid"] is None for p in rows(outside))


def test_two_holders_are_said_plainly(container, write_scenario, dev, env):
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0", dev / "nvidia1")
    container.start(at=first_host)
    path = scenario(write_scenario, dev, {(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"}})

    data = container.vram("ps", "--simulate", str(path), "--json", env=env).json()
    on0 = [p for p in data["processes"] if p["gpu"] == 0]
    assert sorted(p["nvml_pid"] for p in on0) == sorted([first_host, second_host])
    assert all(p["pid"] is None and p["holders_here"] == [first, second] and p["command"] is None for p in on0)
    text = container.vram("ps", "--simulate", str(path), env=env).out
    assert f"2 processes of this container hold GPU 0: 14.0GiB between pids {first} and {second}" in text
    # GPU 1: only the second holds it here, but OUTSIDE's GPU 1 memory may be another container's too
    on1 = [p for p in data["processes"] if p["gpu"] == 1]
    assert [(p["pid"], p["holders_here"]) for p in on1] == [(None, [second])]
    assert "1 process of this container holds GPU 1" in text and "cannot be told" in text


def test_a_row_with_no_pid_here_is_said_in_the_readers_language(container, write_scenario, dev, env):
    """Why a host pid has no process here is kept in English for the JSON and said in the reader's
    words in ps and status (it used to be shown as the English the row keeps)."""
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    path = scenario(write_scenario, dev, {(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"}})
    zh = {**env, "VRAM_LANG": "zh_CN"}
    data = container.vram("ps", "--simulate", str(path), "--json", env=zh).json()
    missing = {p["nvml_pid"]: p["host_missing"] for p in data["processes"]}
    assert "of another PID namespace" in missing[OUTSIDE] and "runs outside" in missing[OUTSIDE]
    assert "which cannot be told apart" in missing[first_host]
    for command in ("ps", "status"):
        out = container.vram(command, "--simulate", str(path), env=zh)
        assert out.rc == 0, out.err
        assert "属于另一个 PID 命名空间" in out.out and "无法区分" in out.out, out.out
        assert "of another PID namespace" not in out.out and "cannot be told" not in out.out, out.out


def test_kill_frees_the_containers_own_process(container, write_scenario, dev, env):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    decoy, decoy_host = container.start(at=host)
    path = scenario(write_scenario, dev, {(host, here): {"0": "6GiB"}})

    refused = container.vram("kill", "--simulate", str(path), str(decoy), "--yes", "--json", env=env)
    assert refused.rc == 1 and json.loads(refused.out)["targets"][0]["rule"] == "not-gpu"
    done = container.vram("kill", "--simulate", str(path), str(here), "--yes", "--timeout", "5", "--json", env=env)
    assert done.rc == 0, done.err
    report = done.json()
    assert report["targets"][0]["status"] == "exited" and report["targets"][0]["pid"] == here
    assert report["gpus"][0]["freed"] == 6 * GiB
    assert wait_for(lambda: not Path(f"/proc/{host}").exists())
    assert Path(f"/proc/{decoy_host}").exists()  # the process here numbered as NVML's pid lives on


def test_kill_one_of_two_frees_what_it_held(container, write_scenario, dev, env):
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    path = scenario(write_scenario, dev, {(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"}})

    plan = container.vram("kill", "--simulate", str(path), "--gpu", "0", "--dry-run", "--json", env=env).json()
    assert sorted(t["pid"] for t in plan["targets"]) == [first, second]
    assert all(any("cannot be told apart here" in n for n in t["notes"]) for t in plan["targets"])
    done = container.vram("kill", "--simulate", str(path), str(second), "--yes", "--timeout", "5", "--json", env=env)
    assert done.rc == 0, done.err
    assert done.json()["gpus"][0]["freed"] == 8 * GiB
    assert wait_for(lambda: not Path(f"/proc/{second_host}").exists()) and Path(f"/proc/{first_host}").exists()


def test_what_a_kill_leaves_is_never_shown_under_a_host_pid(container, write_scenario, dev, env):
    """Three holders of GPU 0 here: after one is ended, the two left still cannot be told apart,
    and the report's 'still held' lines must not print their host pids as pids of this container."""
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    third, third_host = container.start(dev / "nvidia0")
    path = scenario(write_scenario, dev, {(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"},
                                          (third_host, third): {"0": "2GiB"}})
    done = container.vram("kill", "--simulate", str(path), str(second), "--yes", "--timeout", "5", env=env)
    assert done.rc == 0, done.err
    held = [line for line in done.out.splitlines() if "still held" in line]
    assert len(held) == 2, done.out
    assert not any(str(pid) in line.split() for line in held for pid in (first_host, third_host)), done.out
    assert all(line.split()[4] == "-" for line in held), done.out  # "still held: 6.0GiB  ?  -  (host pid ...)"


@pytest.mark.parametrize("field, value, needle", [
    ("pid_namespace", "net:[4026531840]", "pid_namespace: must name the PID namespace"),
    ("pid_namespace", -3, "pid_namespace: must name the PID namespace"),
    ("ns_pid", 0, "processes[0].ns_pid"),
])
def test_namespace_fields_are_checked(write_scenario, field, value, needle):
    data = real_gpu_scenario({os.getpid(): {"0": "1GiB"}})
    if field == "ns_pid":
        data["processes"][0]["ns_pid"] = value
    else:
        data[field] = value
    result = subprocess.run(vram_argv("sim", "validate", str(write_scenario(data))), capture_output=True, text=True,
                            env=clean_env(), timeout=60)
    assert result.returncode == 2 and needle in result.stderr and len(result.stderr.splitlines()) == 1


def test_only_a_real_process_has_a_pid_here(write_scenario):
    data = {"gpus": [{"memory_total": "1GiB"}], "processes": [{"pid": 7, "gpus": {"0": "1MiB"}, "ns_pid": 2}]}
    result = subprocess.run(vram_argv("sim", "validate", str(write_scenario(data))), capture_output=True, text=True,
                            env=clean_env(), timeout=60)
    assert result.returncode == 2 and "processes[0].ns_pid: only a real process" in result.stderr
