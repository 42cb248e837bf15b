"""`vram serve --compat dcgm` labels a GPU's DCGM_FI_* series with the pod the kubelet's
pod-resources List says the GPU (or MIG instance) is allocated to, under dcgm-exporter's names
(pod, namespace, container), as dcgm-exporter does: a real `vram serve` against a real gRPC
pod-resources server; a GPU shared by several pods labelled with none; a kubelet that hangs costs
the labels, not the series; the cap; and both writers (render, prometheus_client) agreeing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import helpers
import pytest
from test_serve_exposition import families, read, reference
from test_workload_kubelet import hang, kubelet_server, pod_list  # noqa: F401 (the fixture)

from vramkit import kubelet
from vramkit.kubelet import GpuPods, decode_list, gpu_pods, list_pods
from vramkit.serve import metrics
from vramkit.serve.metrics import ExportState, dcgm_pod_labels, render

SCENARIO = Path(__file__).parent.parent / "src/vramkit/nvml/scenarios/workloads.json"
DOCS = Path(__file__).parent.parent / "docs/metrics.md"
GPU = "GPU-5b0e3f2a-1c4d-4e8f-9a7b-2c3d4e5f6a7{}".format  # the workloads scenario's GPUs 0-3
MIG_GPU, WHOLE_GPU = "GPU-4d1e7c2b-7a3e-4f10-9c21-5b6a7c8d9e00", "GPU-4d1e7c2b-7a3e-4f10-9c21-5b6a7c8d9e01"
MIG_1 = "MIG-1a2b3c4d-0001-5e6f-8a9b-0c1d2e3f4a51"  # the mig scenario's instance GI 1 (3g.40gb)


def _dcgm_lines(body: str, name: str = "DCGM_FI_DEV_FB_USED") -> dict[str, str]:
    """UUID -> its whole-GPU line of `name`."""
    out = {}
    for line in body.splitlines():
        if line.startswith(name + "{") and "GPU_I_ID" not in line:
            out[line.split('UUID="')[1].split('"')[0]] = line
    return out


def test_a_real_serve_labels_each_gpu_with_the_pod_the_kubelet_allocated_it_to(tmp_path, kubelet_server,  # noqa: F811
                                                                                served, monkeypatch):
    data = json.loads(SCENARIO.read_text())
    pods = data.pop("pods")  # the kubelet is a real server here
    scenario = tmp_path / "node.json"
    scenario.write_text(json.dumps(data))
    k = kubelet_server(pod_list(pods))
    env = _clean_env_with(VRAM_KUBELET_SOCKET=k.socket)
    monkeypatch.setattr(helpers, "clean_env", lambda **kw: {**env, **kw})
    s = served("--simulate", str(scenario), "--compat", "dcgm", "--hostname", "gpu-a")
    status, body, _ = s.get("/metrics")
    assert status == 200
    fb = _dcgm_lines(body)
    trainer = 'container="trainer",device="nvidia1",gpu="1",modelName="NVIDIA A100-SXM4-80GB",namespace="nlp"'
    assert trainer in fb[GPU(1)] and 'pod="train-7f9c"' in fb[GPU(1)]
    # GPU 3 is allocated to vision/infer-0 while dave's notebook, in no pod, holds memory there: the
    # allocation is what dcgm-exporter labels, not the processes
    assert 'namespace="vision"' in fb[GPU(3)] and 'pod="infer-0"' in fb[GPU(3)] and 'container="server"' in fb[GPU(3)]
    for bare in (GPU(0), GPU(2)):
        assert not any(f'{name}="' in fb[bare] for name in ("pod", "namespace", "container"))
    # every DCGM series of the GPU, not only memory
    assert 'pod="train-7f9c"' in _dcgm_lines(body, "DCGM_FI_DEV_GPU_TEMP")[GPU(1)]
    # the docs' example is this line
    example = next(line for line in DOCS.read_text().splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{"))
    assert example == fb[GPU(1)]
    assert k.calls >= 1


def _clean_env_with(**extra: str) -> dict[str, str]:
    return helpers.clean_env(**extra)


def test_without_compat_dcgm_the_kubelet_is_not_asked_for_gpus(tmp_path, kubelet_server, served,  # noqa: F811
                                                                monkeypatch):
    data = json.loads(SCENARIO.read_text())
    pods = data.pop("pods")
    for p in data["processes"]:  # no process in a pod: nothing else asks the kubelet either
        p.pop("cgroup", None)
    scenario = tmp_path / "node.json"
    scenario.write_text(json.dumps(data))
    k = kubelet_server(pod_list(pods))
    env = _clean_env_with(VRAM_KUBELET_SOCKET=k.socket)
    monkeypatch.setattr(helpers, "clean_env", lambda **kw: {**env, **kw})
    s = served("--simulate", str(scenario), "--compat", "nvitop")
    assert s.get("/metrics")[0] == 200
    assert k.calls == 0
    with_dcgm = served("--simulate", str(scenario), "--compat", "dcgm")
    assert 'pod="train-7f9c"' in _dcgm_lines(with_dcgm.get("/metrics")[1])[GPU(1)]
    assert k.calls >= 1


def _listed(pods: list[dict]) -> dict[str, tuple[str, str, str | None]]:
    return gpu_pods(decode_list(pod_list(pods)))


def test_a_gpu_shared_by_pods_is_labelled_with_none_and_two_containers_with_no_container():
    shared = [{"namespace": "a", "name": "one", "containers": [{"name": "c", "devices": [f"{GPU(0)}::0"]}]},
              {"namespace": "b", "name": "two", "containers": [{"name": "c", "devices": [f"{GPU(0)}::1"]}]},
              {"namespace": "c", "name": "pair", "containers": [{"name": "x", "devices": [f"{GPU(1)}::0"]},
                                                               {"name": "y", "devices": [f"{GPU(1)}::1"]}]},
              {"namespace": "d", "name": "solo", "containers": [{"name": "z", "devices": [GPU(2)]}]}]
    got = _listed(shared)
    assert GPU(0) not in got
    assert got[GPU(1)] == ("c", "pair", None) and got[GPU(2)] == ("d", "solo", "z")
    snap = read(str(SCENARIO))
    state = ExportState(hostname="h", version="v", gpu_pods=got)
    fb = _dcgm_lines(render(snap, state, compat=("dcgm",)).decode())
    assert 'namespace="c",pci_bus_id="00000000:0F:00.0",pod="pair"' in fb[GPU(1)] and "container=" not in fb[GPU(1)]
    assert "pod=" not in fb[GPU(0)]


def test_a_mig_instance_is_labelled_with_its_own_pod_and_both_writers_agree():
    snap = read("mig", health=True)
    pods = _listed([{"namespace": "ml", "name": "small", "containers": [
                        {"name": "c", "devices": [MIG_1], "resource": "nvidia.com/mig-3g.40gb"}]},
                    {"namespace": "ml", "name": "big", "containers": [{"name": "w", "devices": [WHOLE_GPU]}]}])
    state = ExportState(hostname="gpu-a", version="1.2.3", read_seconds=0.01, gpu_pods=pods)
    ours = render(snap, state, compat=("dcgm",))
    theirs = reference(snap, replace(state), compat=("dcgm",))
    assert families(ours) == families(theirs) and ours == theirs
    text = ours.decode()
    instance = [line for line in text.splitlines()
                if line.startswith("DCGM_FI_DEV_FB_USED{") and 'GPU_I_ID="1"' in line]
    assert len(instance) == 1 and 'container="c"' in instance[0] and 'pod="small"' in instance[0]
    fb = _dcgm_lines(text)
    assert "pod=" not in fb[MIG_GPU]  # the MIG GPU itself is no one pod's
    assert 'pod="big"' in fb[WHOLE_GPU]
    assert 'pod="big"' in _dcgm_lines(text, "DCGM_FI_DEV_SM_CLOCK")[WHOLE_GPU]  # the health reading's too


def test_at_most_max_owners_pods_are_labelled(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_OWNERS", 1)
    pods = _listed([{"namespace": "a", "name": f"p{i}", "containers": [{"name": "c", "devices": [GPU(i)]}]}
                    for i in range(4)])
    labels = dcgm_pod_labels(read(str(SCENARIO)), pods)
    assert list(labels) == [GPU(0)] and dict(labels[GPU(0)])["pod"] == "p0"


def test_a_kubelet_that_hangs_leaves_the_gpus_unlabelled_and_is_not_asked_again_at_once(kubelet_server):  # noqa: F811
    k = kubelet_server(hang)
    pods = GpuPods(lambda: list_pods(k.socket, timeout=0.3))
    assert pods.read(0.0) == {}
    assert pods.problem is not None and "no answer within 0.3s" in pods.problem
    assert pods.read(1.0) == {} and k.calls == 1  # not asked again before RETRY_S
    pods.read(kubelet.RETRY_S + 1)
    assert k.calls == 2


def test_no_socket_is_no_labels_and_no_grpc(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from vramkit.kubelet import GpuPods; print(GpuPods().read(0.0), 'grpc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=helpers.clean_env(VRAM_KUBELET_SOCKET=str(tmp_path / "none.sock")))
    assert out.stdout.split() == ["{}", "False"]


@pytest.mark.parametrize("answer", [b"\xff" * 32])
def test_garbage_from_the_kubelet_is_no_labels(kubelet_server, answer):  # noqa: F811
    k = kubelet_server(answer)
    pods = GpuPods(lambda: list_pods(k.socket))
    assert pods.read(0.0) == {} and "not a pod list" in (pods.problem or "")
