"""A real Prometheus (the Debian package's /usr/bin/prometheus) scraping `vram serve` on the mixed
host: AMD GPUs have the same metric names, and vram_gpu_info's vendor label splits them."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request

import pytest
from helpers import PATIENCE, PROMETHEUS, start_prometheus

GiB = 2**30

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                                                   reason="needs the Prometheus server (Debian package 'prometheus')")]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _query(url: str, promql: str) -> list[dict]:
    answer = _get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_prometheus_scrapes_amd_gpus_under_the_same_names_with_a_vendor_label(served, groups, tmp_path):
    server = served("--simulate", "mixed")
    url = start_prometheus(groups, tmp_path, [f"127.0.0.1:{server.port}"])
    promql = 'vram_gpu_memory_used_bytes * on(gpu) group_left(vendor, name) vram_gpu_info{vendor="amd"}'
    deadline = time.monotonic() + PATIENCE
    while not (rows := _query(url, promql)) and time.monotonic() < deadline:
        time.sleep(0.25)
    got = {(r["metric"]["gpu"], r["metric"]["name"]): float(r["value"][1]) for r in rows}
    assert got == {("2", "AMD Instinct MI210"): 40 * GiB, ("3", "AMD Instinct MI210"): 0.0}
    vendors = {r["metric"]["gpu"]: r["metric"]["vendor"] for r in _query(url, "vram_gpu_info")}
    assert vendors == {"0": "nvidia", "1": "nvidia", "2": "amd", "3": "amd"}
    held = {(r["metric"]["gpu"], r["metric"]["pid"]) for r in _query(url, "vram_process_memory_bytes")}
    assert held == {("0", "81234"), ("2", "82345")}


def test_fleet_pick_on_a_mixed_host_names_the_picked_vendors_variable(served, tmp_path):
    """vram fleet reads vram serve directly (--hosts): vram_gpu_info's vendor label says which
    variable to set there."""
    from helpers import run_vram, scenario_data

    server = served("--simulate", "mixed", "--hostname", "gpu-m")
    hosts = ("--hosts", f"127.0.0.1:{server.port}")
    nvidia = run_vram("fleet", "pick", *hosts, "-n", "1")
    assert nvidia.rc == 0, nvidia.err
    assert nvidia.out.startswith("on gpu-m: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 (GPU 1:")
    both = run_vram("fleet", "pick", *hosts, "-n", "2")
    assert both.rc == 1 and "one vendor's GPUs" in both.err
    data = scenario_data("mixed")
    data["nvidia"]["gpus"][1]["utilization"] = 90  # the free A100 is busy now: the free MI210 is picked
    (tmp_path / "busy.json").write_text(json.dumps(data))
    busy = served("--simulate", str(tmp_path / "busy.json"), "--hostname", "gpu-b")
    amd = run_vram("fleet", "pick", "--hosts", f"127.0.0.1:{busy.port}", "-n", "1", "--json")
    assert amd.rc == 0, amd.err
    picked = amd.json()
    assert picked["env"] == {"HIP_VISIBLE_DEVICES": "1"} and picked["cuda_device_order"] is None
    assert [g["index"] for g in picked["gpus"]] == [3]
