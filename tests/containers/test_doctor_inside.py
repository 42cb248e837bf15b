"""vram doctor inside a container explains, in one finding, why nvidia-smi shows no processes
there and what vram matched the host pids to; it never names a host pid as a pid here, nor warns
that /proc cannot see a process outside, nor calls a child of the container's pid 1 orphaned
(the fixtures: conftest.py here)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_doctor_says_it_in_one_finding(container, scenario, dev, env):
    mine, mine_host = container.start(dev / "nvidia0", dev / "nvidiactl")
    container.start(at=scenario.outside)  # the outside host pid's number here: holds no GPU
    path = scenario({(mine_host, mine): {"0": "6GiB"}}, utilization=(0, 0))  # where a stale orphan would sit

    done = container.vram("doctor", "--simulate", str(path), "--json", env=env)
    findings = done.json()["findings"]
    [finding] = [f for f in findings if f["code"] == "container_pids"]
    assert f"pid {mine} holds 6.0GiB on GPU 0 (host pid {mine_host}" in finding["detail"], finding
    assert f"GPU 1: 3.0GiB held by 1 process outside this container (host pid {scenario.outside})" \
        in finding["detail"], finding
    assert not [f for f in findings if f["code"] in ("not_visible", "stale_orphan")], findings
    assert not any(f.get("pid") in (mine_host, scenario.outside) for f in findings), findings
    text = container.vram("doctor", "--simulate", str(path), env=env)
    assert "vram runs in a container: NVML lists the host's pids" in text.out, text.out


@pytest.mark.slow
def test_a_nearly_full_gpu_names_its_holders_by_their_host_pids(container, scenario, dev, env):
    """Who holds a nearly full GPU: a holder no process here could be told to be is named by its
    host pid, said to be one (it was 'unknown user (pid 31671)', a number that names another
    process here or none), in the reader's language too."""
    first, first_host = container.start(dev / "nvidia0")
    second, second_host = container.start(dev / "nvidia0")
    path = scenario({(first_host, first): {"0": "19GiB"}, (second_host, second): {"0": "20GiB"}})

    done = container.vram("doctor", "--simulate", str(path), "--json", env=env)
    [full] = [f for f in done.json()["findings"] if f["code"] == "near_full"]
    for host in (first_host, second_host):
        assert f"a process of another PID namespace (host pid {host})" in full["detail"], full
        assert f"(pid {host})" not in full["detail"], full
    zh = container.vram("doctor", "--simulate", str(path), env={**env, "VRAM_LANG": "zh_CN"})
    assert f"另一个 PID 命名空间的进程（宿主机 PID {first_host}，19.0GiB）" in zh.out, zh.out
    assert "of another PID namespace" not in zh.out, zh.out
