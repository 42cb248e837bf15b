"""vram serve's /metrics inside a container: a row NVML lists under a host pid that no process
here could be told to be has pid="" (the JSON's pid null) and the host pid as nvml_pid (the
JSON's nvml_pid), in vram's own series and in the other exporters' names; a row matched to its
process here has its pid here and nvml_pid. A host pid is never a pid label (the fixtures:
conftest.py here). Its memory stays in its GPU's series."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from helpers import wait_for
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vramkit.machine import open_machine
from vramkit.serve.metrics import ExportState, SnapshotCollector, render

GiB = 1024**3
COMPAT = ("nvitop", "nvidia-smi-exporter")
# each scheme's per-process memory series
MEMORY = ("vram_process_memory_bytes", "process_gpu_memory_MiB", "nvidia_smi_compute_app_used_memory_bytes")


def samples(body: str, name: str) -> Iterator[dict[str, str]]:
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name:
                yield {**sample.labels, "value": str(sample.value)}


@pytest.mark.slow
def test_a_host_pid_is_never_a_pid_label(container, scenario, dev, env, children):
    mine, mine_host = container.start(dev / "nvidia0", dev / "nvidiactl")  # the only holder of GPU 0: matched
    first, first_host = container.start(dev / "nvidia1")  # two holders of GPU 1 here, and NVML lists a third
    second, second_host = container.start(dev / "nvidia1")  # pid outside: which is which cannot be told
    decoy, _ = container.start(at=first_host)  # a process here numbered as a host pid NVML lists
    path = scenario({(mine_host, mine): {"0": "6GiB"}, (first_host, first): {"1": "2GiB"},
                     (second_host, second): {"1": "4GiB"}})

    base = container.serve("--simulate", str(path), "--compat", ",".join(COMPAT), env=env, children=children)

    def get(path: str) -> str:
        try:
            with urllib.request.urlopen(base + path, timeout=10) as r:
                return r.read().decode()
        except OSError:
            return ""

    assert wait_for(lambda: "vram_process_memory_bytes{" in get("/metrics"), timeout=30)
    body = get("/metrics")
    host_pids = {str(first_host), str(second_host), str(scenario.outside)}
    for name in MEMORY:
        rows = list(samples(body, name))
        assert {(r["pid"], r.get("nvml_pid")) for r in rows} == {
            (str(mine), str(mine_host)), ("", str(first_host)), ("", str(second_host)),
            ("", str(scenario.outside))}, (name, rows)
        assert not host_pids & {r["pid"] for r in rows} and str(decoy) not in {r["pid"] for r in rows}
    used = {r["gpu"]: float(r["value"]) for r in samples(body, "vram_gpu_memory_used_bytes")}
    held = {r["nvml_pid"]: float(r["value"]) for r in samples(body, "vram_process_memory_bytes")}
    assert held[str(first_host)] + held[str(second_host)] + held[str(scenario.outside)] == 9 * GiB
    assert used["1"] >= 9 * GiB  # what no pid here is named for stays in its GPU's use


def test_render_and_prometheus_client_agree_on_rows_without_a_pid_here():
    """Both ways to /metrics (serve/metrics.py writes the text itself) label such rows the same."""
    machine = open_machine("demo")
    try:
        snap = machine.snapshot()
    finally:
        machine.close()
    shared = max((g.processes for g in snap.gpus), key=len)  # two rows of one GPU, which without a
    mapped = next(p for g in snap.gpus for p in g.processes if p not in shared)  # pid are told apart
    assert len(shared) == 2
    for p in shared:  # as pidmap leaves rows no process here could be told to be
        p.nvml_pid, p.host_missing, p.user, p.command, p.name = p.pid, "host pid, of another PID namespace", \
            None, None, None
    mapped.nvml_pid = 999_999  # as pidmap leaves a row matched to its pid here
    for options in ({}, {"commands": True}, {"compat": ("dcgm", *COMPAT), "commands": True}):
        ours = render(snap, ExportState(hostname="gpu-a", version="1"), **options)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(lambda: snap, ExportState(hostname="gpu-a", version="1"), **options))
        assert ours == generate_latest(registry)
        rows = list(samples(ours.decode(), "vram_process_memory_bytes"))
        unmapped = [r for r in rows if r["pid"] == ""]
        assert sorted(r["nvml_pid"] for r in unmapped) == sorted(str(p.pid) for p in shared)
        assert [r["nvml_pid"] for r in rows if (r["pid"], r["gpu"]) == (str(mapped.pid), str(mapped.gpu))] == ["999999"]
        assert not any(r["pid"] == str(p.pid) for r in rows for p in shared)

