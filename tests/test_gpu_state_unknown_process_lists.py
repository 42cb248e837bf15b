"""A GPU whose process list the driver will not give (NOT_SUPPORTED, NO_PERMISSION) has no process
count: every view says "unknown" with the reason, or leaves the number out, never 0 (issue 31,
item 3). On a lab-scale machine: /metrics has no vram_gpu_processes series for it, `vram fleet`
reads N/A from that, `status --csv` writes N/A, and the live view's panel carries a note. The page
is checked in a real browser by tests/e2e/test_serve_web.py."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from helpers import clean_env, run_vram
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import vramkit
from vramkit.fleet import Q_GPU, Q_SEEN, Q_UP, Q_USERS, Prometheus, read_fleet
from vramkit.render.fleet_view import render_fleet
from vramkit.render.style import Style
from vramkit.serve.metrics import ExportState, SnapshotCollector, render
from vramkit.tui.panels import gpu_panel

UNSUPPORTED, REFUSED = 3, 5  # the GPUs whose lists the driver will not give, and why
WHY = {UNSUPPORTED: "not supported", REFUSED: "no permission"}
INSTANCE = "10.0.0.9:9787"


def lab_scenario() -> dict:
    """Eight A100s, most with holders, one empty (a true 0), and two whose lists are unknown
    although their memory is in use."""
    gpus = []
    for i in range(8):
        gpu: dict = {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB", "utilization": 10 * i}
        if i == UNSUPPORTED:
            gpu.update(memory_used="30GiB", unsupported=["processes"])
        if i == REFUSED:
            gpu.update(memory_used="12GiB", no_permission=["processes"])
        gpus.append(gpu)
    users = ["alice", "bob", "carol", "dave", "erin", "frank", "gina", "henry"]
    processes = [{"pid": 2000 + i, "user": users[i], "command": "python train.py", "gpus": {str(i): f"{i + 2}GiB"}}
                 for i in range(8) if i not in (2, UNSUPPORTED, REFUSED)]
    return {"name": "lab-unknown-lists", "description": "a lab server whose driver hides two GPUs' processes",
            "gpus": gpus, "processes": processes}


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(lab_scenario()))
    return path


def counts(text: str) -> dict[str, float]:
    """gpu -> vram_gpu_processes, from Prometheus' text."""
    return {s.labels["gpu"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "vram_gpu_processes"}


def test_the_snapshot_says_which_lists_are_unknown(lab):
    snap = vramkit.snapshot(simulate=str(lab))
    assert {g.index: g.na.get("processes") for g in snap.gpus if "processes" in g.na} == WHY


def test_metrics_leave_the_count_out_never_zero(lab):
    snap = vramkit.snapshot(simulate=str(lab))
    state = ExportState(hostname="lab-01", version="1")
    ours = render(snap, state).decode()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap, state))
    theirs = generate_latest(registry).decode()
    expected = {"0": 1.0, "1": 1.0, "2": 0.0, "4": 1.0, "6": 1.0, "7": 1.0}  # GPU 2 is empty: a true 0
    assert counts(ours) == expected
    assert counts(theirs) == expected
    assert 'vram_gpu_processes{gpu="3"' not in ours and 'vram_gpu_processes{gpu="5"' not in ours
    # The GPU itself is still exported: its memory is known.
    assert f'vram_gpu_memory_used_bytes{{gpu="{UNSUPPORTED}"' in ours
    # nvidia_gpu_exporter's names: no count either, and the collection said to have failed.
    compat = render(snap, state, compat=frozenset({"nvidia-smi-exporter"})).decode()
    apps = {s.labels["uuid"] for f in text_string_to_metric_families(compat) for s in f.samples
            if s.name == "nvidia_smi_compute_apps"}
    assert len(apps) == 6
    assert "nvidia_smi_compute_apps_last_collect_success 0.0" in compat


def test_status_csv_writes_na_not_zero(lab):
    result = run_vram("status", "--simulate", str(lab), "--csv", env=clean_env())
    assert result.rc == 0, result.err
    rows = {r["index"]: r["process_count"] for r in csv.DictReader(io.StringIO(result.out))}
    assert rows == {"0": "1", "1": "1", "2": "0", "3": "N/A", "4": "1", "5": "N/A", "6": "1", "7": "1"}


def test_a_lost_gpu_has_no_process_count_in_the_csv():
    result = run_vram("status", "--simulate", "faulty", "--csv", env=clean_env())
    assert result.rc == 0, result.err
    rows = {r["index"]: r for r in csv.DictReader(io.StringIO(result.out))}
    assert rows["1"]["lost"] == "true" and rows["1"]["process_count"] == "N/A"


def test_the_live_views_panel_says_the_list_is_unknown(lab):
    snap = vramkit.snapshot(simulate=str(lab))
    for two_lines in (False, True):
        for g in snap.gpus:
            text = gpu_panel(g, [], snap.time, 120, two_lines).plain
            if g.index in WHY:
                assert f"processes unknown ({WHY[g.index]})" in text.splitlines()[-1], text
            else:
                assert "unknown" not in text, text
            assert all(len(line) <= 120 for line in text.splitlines())


def test_fleet_shows_na_for_an_unknown_list(lab, monkeypatch):
    """The lab's real /metrics text, served by a fake Prometheus as its instant queries would
    answer: `vram fleet` reads no count for GPUs 3 and 5 and prints N/A, not 0."""
    from test_fleet import FakePrometheus

    snap = vramkit.snapshot(simulate=str(lab))
    text = render(snap, ExportState(hostname="lab-01", version="1")).decode()
    target = {"job": "vram", "instance": INSTANCE}
    gpu_samples, user_memory = [], {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("vram_gpu_") or s.name == "vram_host_info":
                gpu_samples.append({"metric": {"__name__": s.name, **target, **s.labels}, "value": [0, str(s.value)]})
            if s.name == "vram_process_memory_bytes":
                key = (s.labels["gpu"], s.labels["user"])
                user_memory[key] = user_memory.get(key, 0.0) + s.value

    def vector(result: list[dict]) -> dict:
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    prometheus = FakePrometheus({
        Q_UP: vector([{"metric": target, "value": [0, "1"]}]),
        Q_SEEN: vector([{"metric": {**target, "hostname": "lab-01", "version": "1"}, "value": [0, "1"]}]),
        Q_GPU: vector(gpu_samples),
        Q_USERS: vector([{"metric": {**target, "gpu": gpu, "user": user}, "value": [0, str(v)]}
                         for (gpu, user), v in user_memory.items()]),
    })
    try:
        fleet = read_fleet(Prometheus(prometheus.url))
    finally:
        prometheus.close()
    [host] = fleet.hosts
    assert {g.index: g.processes for g in host.gpus} == {0: 1, 1: 1, 2: 0, 3: None, 4: 1, 5: None, 6: 1, 7: 1}
    lines = render_fleet(fleet, Style(color=False, unicode=False), 120).splitlines()
    end = lines[1].index("PROCS") + len("PROCS")  # the column is right-aligned under its header
    procs = {int(line.split()[1]): line[end - 5:end].strip() for line in lines[2:] if line.startswith("lab-01")}
    assert procs[UNSUPPORTED] == "N/A" and procs[REFUSED] == "N/A", lines
    assert procs[2] == "0", lines
