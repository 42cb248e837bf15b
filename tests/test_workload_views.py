"""One node shared three ways, answered where people look: a Docker container (named from the
runtime's state), a Kubernetes pod (named by a real pod-resources gRPC server) and a Slurm job step,
beside a bare process that shows nothing extra. `vram ps`, `vram status --json`, `/metrics` of a
real `vram serve`, the filters, kill's refusals; and the kubelet going wrong, in one line."""

from __future__ import annotations

import json
from pathlib import Path

import helpers
import pytest
from helpers import clean_env, run_vram
from test_workload_kubelet import Kubelet, hang, kubelet_server, pod_list  # noqa: F401 (the fixture)

SCENARIO = Path(__file__).parent.parent / "src/vramkit/nvml/scenarios/workloads.json"
DOCKER_ID = "3f9a1c2b4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
POD_UID = "7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


@pytest.fixture
def node(tmp_path, kubelet_server):  # noqa: F811
    """The bundled `workloads` scenario without its "pods" (the kubelet is a real server here) and
    without its "containers" (Docker's state is real files under a state root)."""
    data = json.loads(SCENARIO.read_text())
    pods = data.pop("pods")
    data.pop("containers")
    scenario = tmp_path / "node.json"
    scenario.write_text(json.dumps(data))
    state = tmp_path / "state" / "var/lib/docker/containers" / DOCKER_ID
    state.mkdir(parents=True)
    (state / "config.v2.json").write_text(json.dumps({"Name": "/alice-dev", "Config": {"Image": "pytorch:2.4"}}))
    server = kubelet_server(pod_list(pods))

    class Node:
        path = str(scenario)
        kubelet = server
        env = clean_env(VRAM_KUBELET_SOCKET=server.socket, VRAM_STATE_ROOT=str(tmp_path / "state"), COLUMNS="200")
    return Node


def _rows(out: str) -> dict[int, str]:
    return {int(line.split()[1]): line for line in out.splitlines() if line.split()[:2][-1:] and
            line.split()[1].isdigit()}


def test_ps_shows_each_owner_and_nothing_for_a_bare_process(node):
    result = run_vram("ps", "--simulate", node.path, env=node.env)
    assert result.rc == 0, result.err
    header = next(line for line in result.out.splitlines() if line.startswith("GPU"))
    assert "OWNER" in header
    rows = _rows(result.out)
    assert "pod nlp/train-7f9c" in rows[5230]
    assert "slurm 48211.0" in rows[6120]
    assert "docker alice-dev" in rows[4101]
    owner_at = header.index("OWNER")
    assert rows[7001][owner_at] == "-"  # dave's notebook: in none of them
    assert node.kubelet.calls == 1


def test_status_json_carries_each_owner(node):
    data = run_vram("status", "--json", "--simulate", node.path, env=node.env).json()
    owners = {p["pid"]: p["workload"] for g in data["gpus"] for p in g["processes"]}
    assert owners[7001] is None
    pod = owners[5230]
    assert (pod["pod_uid"], pod["namespace"], pod["pod"], pod["pod_container"], pod["runtime"]) == (
        POD_UID, "nlp", "train-7f9c", "trainer", "containerd")
    job = owners[6120]
    assert (job["slurm_job"], job["slurm_step"], job["slurm_task"], job["container_id"]) == (48211, "0", 0, None)
    docker = owners[4101]
    assert (docker["runtime"], docker["container_id"], docker["container_name"], docker["image"]) == (
        "docker", DOCKER_ID, "alice-dev", "pytorch:2.4")


@pytest.mark.parametrize("compat, job_label", [((), "slurm_job"), (("--compat", "dcgm"), "hpc_job")])
def test_metrics_label_each_owner(node, served, monkeypatch, compat, job_label):
    # helpers.Served starts `vram serve` in clean_env(): the kubelet and state root go with it
    monkeypatch.setattr(helpers, "clean_env", lambda **kw: {**node.env, **kw})
    s = served("--simulate", node.path, *compat)
    status, body, _ = s.get("/metrics")
    assert status == 200
    memory = [line for line in body.splitlines() if line.startswith("vram_process_memory_bytes{")]
    by_pid = {next(p for p in line.split(",") if p.startswith("pid=")): line for line in memory}
    assert 'container="trainer"' in by_pid['pid="5230"'] and 'namespace="nlp"' in by_pid['pid="5230"']
    assert 'pod="train-7f9c"' in by_pid['pid="5230"']
    assert f'{job_label}="48211"' in by_pid['pid="6120"']
    assert 'container="alice-dev"' in by_pid['pid="4101"']
    bare = by_pid['pid="7001"']
    assert not any(f'{name}="' in bare for name in ("pod", "namespace", "container", "slurm_job", "hpc_job"))


@pytest.mark.parametrize("flags, pids", [
    (("--pod", "nlp/train-7f9c"), {5230}), (("--pod", "train-7f9c"), {5230}), (("--pod", POD_UID), {5230}),
    (("--container", "alice-dev"), {4101}), (("--container", DOCKER_ID[:6]), {4101}),
    (("--container", "trainer"), {5230}), (("--slurm-job", "48211"), {6120}), (("--slurm-job", "48211.0"), {6120}),
    (("--slurm-job", "48211.1"), set()), (("--pod", "train-7f9c", "--slurm-job", "48211"), set()),
])
def test_filters_in_ps_and_status(node, flags, pids):
    ps = run_vram("ps", "--json", "--simulate", node.path, *flags, env=node.env).json()
    assert {p["pid"] for p in ps["processes"]} == pids
    status = run_vram("status", "--json", "--simulate", node.path, *flags, env=node.env).json()
    assert {p["pid"] for g in status["gpus"] for p in g["processes"]} == pids


def test_csv_has_the_owner_columns_empty_for_a_bare_process(node):
    import csv
    import io

    rows = {int(r["pid"]): r for r in csv.DictReader(io.StringIO(
        run_vram("ps", "--csv", "--simulate", node.path, env=node.env).out))}
    assert (rows[5230]["pod"], rows[5230]["namespace"], rows[5230]["pod_container"]) == ("train-7f9c", "nlp", "trainer")
    assert (rows[6120]["slurm_job"], rows[6120]["slurm_step"]) == ("48211", "0")
    assert rows[4101]["container_name"] == "alice-dev"
    assert all(rows[7001][c] == "" for c in ("container_name", "pod", "namespace", "slurm_job"))


def test_kill_says_whose_the_process_is(node):
    # As root, another user's process needs --all-users: the refusal names the Slurm job
    result = run_vram("kill", "6120", "--dry-run", "--simulate", node.path, env=node.env)
    assert "it belongs to Slurm job 48211 step 0, run by carol" in result.out.replace("\n        ", " ")
    # root's own pod process: refused as made-up, and shown as the pod's
    result = run_vram("kill", "5230", "--dry-run", "--simulate", node.path, env=node.env)
    assert "belongs to pod nlp/train-7f9c" in result.out
    data = json.loads(run_vram("kill", "5230", "--dry-run", "--json", "--simulate", node.path, env=node.env).out)
    assert [t["owner"] for t in data["targets"]] == ["pod nlp/train-7f9c"]


@pytest.mark.slow  # the kubelet's 2 s deadline
def test_a_kubelet_that_hangs_costs_one_line_and_loses_nothing(tmp_path, kubelet_server):  # noqa: F811
    data = json.loads(SCENARIO.read_text())
    del data["pods"]
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(data))
    k = kubelet_server(hang)
    result = run_vram("ps", "--simulate", str(scenario), env=clean_env(VRAM_KUBELET_SOCKET=k.socket, COLUMNS="200"))
    assert result.rc == 0, result.err
    assert set(_rows(result.out)) == {4101, 5230, 6120, 7001}  # nothing lost
    assert "pod 7c1e2d3f" in _rows(result.out)[5230]  # its UID, not a guessed name
    notes = [line for line in result.out.splitlines() if "pod names unknown" in line]
    assert notes == [f"pod names unknown: the kubelet at {k.socket} did not list pods: no answer within 2s"]


def test_garbage_from_the_kubelet_costs_one_line(tmp_path, kubelet_server):  # noqa: F811
    data = json.loads(SCENARIO.read_text())
    del data["pods"]
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(data))
    k = kubelet_server(b"\x0a\x05\x0a\x03\xff\xfe\xfd")
    result = run_vram("status", "--simulate", str(scenario), env=clean_env(VRAM_KUBELET_SOCKET=k.socket,
                                                                           COLUMNS="200"))
    assert result.rc == 0 and result.err == ""
    notes = [line for line in result.out.splitlines() if "pod names unknown" in line]
    assert len(notes) == 1 and "answered something that is not a pod list" in notes[0]


def test_owner_labels_are_capped_per_reading(monkeypatch):
    import dataclasses

    from vramkit.gpu_state import Workload
    from vramkit.machine import open_machine
    from vramkit.serve import metrics

    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    snap = open_machine("workloads").snapshot()
    gpu = snap.gpus[0]
    template = gpu.processes[0]
    for other in snap.gpus[1:]:
        other.processes = []
    # 12 processes, each its own pod, memory falling with the pid: under a cap of 5 the 5 largest carry one
    gpu.processes = [dataclasses.replace(template, pid=100 + i, memory=2**30 - i,
                                         workload=Workload(pod_uid=f"{i:032x}", pod=f"p{i}", namespace="ns"))
                     for i in range(12)]
    monkeypatch.setattr(metrics, "MAX_OWNERS", 5)
    text = metrics.render(snap, metrics.ExportState("gpu-a", "test")).decode()
    memory = [line for line in text.splitlines() if line.startswith("vram_process_memory_bytes{") and 'gpu="0"' in line]
    labelled = sorted(int(line.split('pid="')[1].split('"')[0]) for line in memory if 'pod="' in line)
    assert labelled == [100, 101, 102, 103, 104]
    assert len(memory) == 12  # the series stay; only their owner labels are left out


@pytest.mark.parametrize("options", [{}, {"dcgm_names": True}, {"compat": ("dcgm",), "commands": True}])
def test_both_metric_writers_write_the_owner_labels_alike(monkeypatch, options):
    # vram serve writes /metrics directly; prometheus_client's collector is the reference
    from prometheus_client import CollectorRegistry, generate_latest

    from vramkit.gpu_state import Workload
    from vramkit.machine import open_machine
    from vramkit.serve import metrics

    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    snap = open_machine("mig").snapshot()
    on_mig = next(p for g in snap.gpus for p in g.processes if p.mig_gi is not None)
    on_mig.workload = Workload(pod_uid="0" * 32, pod="small", namespace="ml", pod_container="c", slurm_job=7)
    owners = open_machine("workloads").snapshot()
    for snapshot in (snap, owners):
        text = metrics.render(snapshot, metrics.ExportState("gpu-a", "test"), **options)
        registry = CollectorRegistry()
        registry.register(metrics.SnapshotCollector(lambda s=snapshot: s, metrics.ExportState("gpu-a", "test"),
                                                    **options))
        assert text == generate_latest(registry)
    labelled = [line for line in metrics.render(snap, metrics.ExportState("gpu-a", "test"), **options).decode()
                .splitlines() if 'pod="small"' in line]
    assert labelled and all('GPU_I_ID="' in line and 'namespace="ml"' in line for line in labelled)
