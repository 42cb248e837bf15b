"""pidmap inside a container: NVML's host pids matched to the container's own processes where
that is certain, said plainly where it is not, and never shown as pids of the container (the
fixtures: conftest.py here); and the scenario fields such a test is made of."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import clean_env, real_gpu_scenario, vram_argv

GiB = 1024**3


def rows(data: dict) -> list[dict]:
    return [p for g in data["gpus"] for p in g["processes"]]


@pytest.mark.slow
def test_one_holder_is_its_host_pid(container, scenario, dev, env):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    # Processes here numbered as the host pids NVML lists: neither is what NVML means.
    decoy_host, _ = container.start(at=host)
    decoy_outside, _ = container.start(at=scenario.outside)
    path = scenario({(host, here): {"0": "6GiB"}})

    data = container.vram("status", "--simulate", str(path), "--json", env=env).json()
    by_gpu = {g["index"]: g["processes"] for g in data["gpus"]}
    [mine] = by_gpu[0]
    assert mine["pid"] == here and mine["nvml_pid"] == host and mine["memory"] == 6 * GiB
    assert mine["host_missing"] is None and mine["command"].startswith(sys.executable)
    assert mine["start_ticks"] is not None and mine["holders_here"] == []
    [other] = by_gpu[1]
    assert other["pid"] is None and other["nvml_pid"] == scenario.outside and other["command"] is None
    assert "runs outside" in other["host_missing"]
    assert {decoy_host, decoy_outside}.isdisjoint(p["pid"] for p in rows(data))

    text = container.vram("ps", "--simulate", str(path), env=env)
    assert text.rc == 0, text.err
    lines = text.out.splitlines()
    assert any(line.split()[:2] == ["0", str(here)] for line in lines)
    assert f"GPU 1: 3.0GiB held by 1 process outside this container (host pid {scenario.outside})" in text.out
    assert not any(line.split()[1:2] == [str(scenario.outside)] for line in lines)

    # The same scenario from the host: the pids are its own, read as before.
    outside = json.loads(subprocess.run(vram_argv("status", "--simulate", str(path), "--json"), capture_output=True,
                                        text=True, env=env, timeout=60).stdout)
    assert [p["pid"] for p in rows(outside) if p["memory"] == 6 * GiB] == [host]
    assert all(p["nvml_pid"] is None for p in rows(outside))


@pytest.mark.slow
def test_two_holders_are_said_plainly(container, scenario, dev, env):
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0", dev / "nvidia1")
    container.start(at=first_host)
    path = scenario({(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"}})

    data = container.vram("ps", "--simulate", str(path), "--json", env=env).json()
    on0 = [p for p in data["processes"] if p["gpu"] == 0]
    assert sorted(p["nvml_pid"] for p in on0) == sorted([first_host, second_host])
    assert all(p["pid"] is None and p["holders_here"] == [first, second] and p["command"] is None for p in on0)
    text = container.vram("ps", "--simulate", str(path), env=env).out
    assert f"2 processes of this container hold GPU 0: 14.0GiB between pids {first} and {second}" in text
    # GPU 1: only the second holds it here, but the outside process's GPU 1 memory may be another container's too
    on1 = [p for p in data["processes"] if p["gpu"] == 1]
    assert [(p["pid"], p["holders_here"]) for p in on1] == [(None, [second])]
    assert "1 process of this container holds GPU 1" in text and "cannot be told" in text


@pytest.mark.slow
def test_a_row_with_no_pid_here_is_said_in_the_readers_language(container, scenario, dev, env):
    """Why a host pid has no process here is kept in English for the JSON and said in the reader's
    words in ps and status (it used to be shown as the English the row keeps)."""
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    path = scenario({(first_host, first): {"0": "6GiB"}, (second_host, second): {"0": "8GiB"}})
    zh = {**env, "VRAM_LANG": "zh_CN"}
    data = container.vram("ps", "--simulate", str(path), "--json", env=zh).json()
    missing = {p["nvml_pid"]: p["host_missing"] for p in data["processes"]}
    assert "of another PID namespace" in missing[scenario.outside] and "runs outside" in missing[scenario.outside]
    assert "which cannot be told apart" in missing[first_host]
    for command in ("ps", "status"):
        out = container.vram(command, "--simulate", str(path), env=zh)
        assert out.rc == 0, out.err
        assert "属于另一个 PID 命名空间" in out.out and "无法区分" in out.out, out.out
        assert "of another PID namespace" not in out.out and "cannot be told" not in out.out, out.out


@pytest.mark.slow
def test_every_reason_a_host_pid_has_no_process_here_is_true(container, dev, env, write_scenario):
    """Each case of why a row NVML lists under a host pid has no process here, in one scenario of
    five GPUs, each row's reason as it is: GPU 0 and 1 held here by other processes than the host
    pid listed on both (it said 'no process of this container holds GPU 0 open'); GPU 1 held by
    two, listed for two; GPU 2 held by one, listed for two; GPU 3 held by none; GPU 4 held by two,
    listed for three (it said all three were one of the two here). In the reader's words too."""
    (dev / "nvidia2").write_text("")
    (dev / "nvidia3").write_text("")
    (dev / "nvidia4").write_text("")
    started = {name: container.start(*(dev / f"nvidia{i}" for i in gpus))
               for name, gpus in {"a": [0], "b": [1], "c": [1], "d": [2], "e": [4], "f": [4]}.items()}
    here = {name: pids[0] for name, pids in started.items()}
    on = {"a": "0", "b": "1", "c": "1", "d": "2", "e": "4", "f": "4"}
    outside = {5353: ("0", "1"), 6161: ("2",), 4242: ("3",), 7171: ("4",)}
    data = {"name": "reasons", "device_nodes": f"{dev}/nvidia*", "pid_namespace": os.readlink("/proc/self/ns/pid"),
            "gpus": [{"uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}", "pci_bus_id": f"00000000:0{i}:00.0",
                      "memory_total": "40GiB", "utilization": 0} for i in range(5)],
            "processes": [{"pid": host, "ns_pid": pid, "source": "real", "gpus": {on[name]: "1GiB"}}
                          for name, (pid, host) in started.items()]
            + [{"pid": pid, "user": "bob", "gpus": dict.fromkeys(gpus, "1GiB")} for pid, gpus in outside.items()]}
    path = write_scenario(data)

    listed = container.vram("ps", "--simulate", str(path), "--json", env=env).json()["processes"]
    missing = {(p["gpu"], p["nvml_pid"]): p["host_missing"] for p in listed}
    host = {name: pids[1] for name, pids in started.items()}
    ns = "of another PID namespace: "
    assert missing == {
        (0, host["a"]): None,  # the one process here that may be it: mapped
        (0, 5353): f"host pid 5353, {ns}NVML lists it on other GPUs besides GPU 0, and no process of this "
                   "container holds all of them open, so it runs outside it",
        (1, 5353): f"host pid 5353, {ns}NVML lists it on other GPUs besides GPU 1, and no process of this "
                   "container holds all of them open, so it runs outside it",
        **{(1, host[n]): f"host pid {host[n]}, {ns}held by one of pids {here['b']}, {here['c']} here, which "
                         "cannot be told apart" for n in "bc"},
        **{(2, pid): f"host pid {pid}, {ns}pid {here['d']} here holds GPU 2, but so may a process outside this "
                     "container: which holds this memory cannot be told" for pid in (host["d"], 6161)},
        (3, 4242): f"host pid 4242, {ns}no process of this container holds GPU 3 open, so it runs outside it",
        **{(4, pid): f"host pid {pid}, {ns}held by one of pids {here['e']}, {here['f']} here or by a process "
                     "outside this container (NVML lists more processes than these), which cannot be told"
           for pid in (host["e"], host["f"], 7171)},
    }, missing

    zh = container.vram("status", "--simulate", str(path), env={**env, "VRAM_LANG": "zh_CN"})
    assert zh.rc == 0, zh.err
    assert "还在其他 GPU 上列出它" in zh.out and "或者由本容器之外的进程占用" in zh.out, zh.out
    assert "of another PID namespace" not in zh.out and "cannot be told" not in zh.out, zh.out


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
