"""Pod names from the kubelet's pod-resources API (kubelet.py), against a real gRPC server on a unix
socket speaking v1 PodResourcesLister. Its messages are built by the protobuf runtime from a
descriptor written below field by field (the field names and numbers of
k8s.io/kubelet/pkg/apis/podresources/v1/api.proto, the fields vram skips included), so vram's own
wire decoder is checked against protobuf's encoder, not against itself. And what goes wrong: a
kubelet that hangs, a socket that never speaks gRPC, garbage, an answer over the bound."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

grpc = pytest.importorskip("grpc", reason="grpcio is not installed (the k8s extra)")
descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2", reason="protobuf is not installed")
from google.protobuf import descriptor_pool, message_factory  # noqa: E402

from vramkit import kubelet  # noqa: E402
from vramkit.gpu_state import Device, GpuProcess, MigDevice, Workload  # noqa: E402
from vramkit.kubelet import KubeletError, PodContainer, PodNames, decode_list, list_pods  # noqa: E402

GPU0, GPU1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-00000000-0000-4000-8000-000000000001"

# ---------------------------------------------------------------- the proto, as descriptors

_F = descriptor_pb2.FieldDescriptorProto
_FIELDS: dict[str, list[tuple[str, int, int, int, str]]] = {  # message -> (name, number, type, label, type name)
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.PodResources")],
    "PodResources": [("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                     ("namespace", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                     ("containers", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.ContainerResources"),
                     ("cpu_ids", 4, _F.TYPE_INT64, _F.LABEL_REPEATED, ""),
                     ("memory", 5, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.ContainerMemory")],
    "ContainerResources": [("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                           ("devices", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.ContainerDevices"),
                           ("cpu_ids", 3, _F.TYPE_INT64, _F.LABEL_REPEATED, ""),
                           ("memory", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.ContainerMemory"),
                           ("dynamic_resources", 5, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.DynamicResource")],
    "ContainerMemory": [("memory_type", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                        ("size", 2, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, ""),
                        ("topology", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".v1.TopologyInfo")],
    "ContainerDevices": [("resource_name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                         ("device_ids", 2, _F.TYPE_STRING, _F.LABEL_REPEATED, ""),
                         ("topology", 3, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".v1.TopologyInfo")],
    "TopologyInfo": [("nodes", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.NUMANode")],
    "NUMANode": [("ID", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, "")],
    "DynamicResource": [("claim_name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                        ("claim_namespace", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                        ("claim_resources", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.ClaimResource")],
    "ClaimResource": [("cdi_devices", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".v1.CDIDevice"),
                      ("driver_name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                      ("pool_name", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
                      ("device_name", 4, _F.TYPE_STRING, _F.LABEL_OPTIONAL, "")],
    "CDIDevice": [("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, "")],
}


def _messages() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="vram_test_podresources_v1.proto", package="v1", syntax="proto3")
    for name, fields in _FIELDS.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, label, type_name in fields:
            message.field.add(name=field, number=number, type=kind, label=label, type_name=type_name or None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}")) for name in _FIELDS}


MESSAGES = _messages()


def pod_list(pods: list[dict[str, Any]]) -> bytes:
    """A ListPodResourcesResponse with every field a kubelet fills: CPUs, memory, NUMA topology,
    DRA claims beside the devices."""
    m = MESSAGES
    response = m["ListPodResourcesResponse"]()
    for pod in pods:
        resources = response.pod_resources.add(name=pod["name"], namespace=pod["namespace"], cpu_ids=[2, 3])
        for ctr in pod["containers"]:
            c = resources.containers.add(name=ctr["name"], cpu_ids=[4, 5, 6])
            if ctr.get("devices"):
                d = c.devices.add(resource_name=ctr.get("resource", "nvidia.com/gpu"), device_ids=ctr["devices"])
                d.topology.nodes.add(ID=1)
            c.devices.add(resource_name="example.com/nic", device_ids=["nic-7"])
            c.memory.add(memory_type="hugepages-2Mi", size=2 ** 31).topology.nodes.add(ID=0)
            c.dynamic_resources.add(claim_name="gpu-claim", claim_namespace=pod["namespace"]).claim_resources.add(
                driver_name="gpu.nvidia.com", pool_name="node-a", device_name="gpu-9").cdi_devices.add(
                name="nvidia.com/gpu=gpu-9")
    data: bytes = response.SerializeToString()
    return data


# ---------------------------------------------------------------- a kubelet on a unix socket

class Kubelet:
    """A real gRPC server on a unix socket: answers List with `answer()` (raw bytes)."""

    def __init__(self, answer: Any):
        self.dir = tempfile.mkdtemp(prefix="vk-")  # short: a unix socket's path is at most 107 bytes
        self.socket = os.path.join(self.dir, "kubelet.sock")
        self.release = threading.Event()
        self.calls = 0

        def list_(request: bytes, context: Any) -> bytes:
            assert MESSAGES["ListPodResourcesRequest"].FromString(request) is not None
            self.calls += 1
            return answer(self)

        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(list_, request_deserializer=lambda b: b,
                                                        response_serializer=lambda b: b)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix:{self.socket}")
        self.server.start()

    def close(self) -> None:
        self.release.set()
        self.server.stop(grace=None).wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def kubelet_server():
    started: list[Kubelet] = []

    def start(answer: Any) -> Kubelet:
        k = Kubelet(answer if callable(answer) else (lambda _k: answer))
        started.append(k)
        return k
    yield start
    for k in started:
        k.close()


def hang(k: Kubelet) -> bytes:
    k.release.wait(30)  # until the test ends: the client must give up first
    return b""


NLP_POD = {"namespace": "nlp", "name": "train-7f9c", "containers": [
    {"name": "trainer", "devices": [GPU1]}, {"name": "log-shipper"}]}


# ---------------------------------------------------------------- the decoder and the client

def test_the_decoder_reads_what_protobuf_encodes_and_skips_the_rest():
    data = pod_list([NLP_POD, {"namespace": "vision", "name": "infer-0", "containers": [
        {"name": "server", "devices": [f"{GPU0}::3"]},  # time-slicing: the GPU, shared
        {"name": "mig", "devices": ["MIG-11111111-2222-3333-4444-555555555555"],
         "resource": "nvidia.com/mig-1g.10gb"}]}])
    assert decode_list(data) == [
        PodContainer("nlp", "train-7f9c", "trainer", (GPU1, "nic-7")),
        PodContainer("nlp", "train-7f9c", "log-shipper", ("nic-7",)),
        PodContainer("vision", "infer-0", "server", (GPU0, "nic-7")),
        PodContainer("vision", "infer-0", "mig", ("MIG-11111111-2222-3333-4444-555555555555", "nic-7")),
    ]
    assert decode_list(b"") == []


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x0a\x03\x0a\x01\xff", b"\x0b\x00",
                                     b"\x0a\x02\x12\x00"])
def test_garbage_is_a_value_error(garbage):
    with pytest.raises(ValueError):
        decode_list(garbage)


def test_a_name_with_escapes_is_sanitized():
    data = pod_list([{"namespace": "n\x1b[2J", "name": "p\u202eevil", "containers": [{"name": "c\n"}]}])
    [c] = decode_list(data)
    assert "\x1b" not in c.namespace and "\u202e" not in c.pod and "\n" not in c.container


def test_list_over_a_real_socket(kubelet_server):
    k = kubelet_server(pod_list([NLP_POD]))
    assert [c.container for c in list_pods(k.socket)] == ["trainer", "log-shipper"]
    assert k.calls == 1


def test_a_kubelet_that_hangs_is_given_up_on(kubelet_server):
    k = kubelet_server(hang)
    with pytest.raises(KubeletError, match=r"did not list pods: no answer within 0.5s"):
        list_pods(k.socket, timeout=0.5)


def test_a_socket_that_never_speaks_grpc_is_given_up_on():
    directory = tempfile.mkdtemp(prefix="vk-")
    path = os.path.join(directory, "kubelet.sock")
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(path)
        listener.listen(4)  # accepted by the kernel, never answered
        with pytest.raises(KubeletError, match="did not list pods"):
            list_pods(path, timeout=0.5)
    finally:
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_garbage_from_the_kubelet_is_one_line(kubelet_server):
    k = kubelet_server(b"\xff" * 64)
    with pytest.raises(KubeletError, match="answered something that is not a pod list") as e:
        list_pods(k.socket)
    assert "\n" not in str(e.value)


def test_an_answer_over_the_bound_is_refused(kubelet_server, monkeypatch):
    monkeypatch.setattr(kubelet, "MAX_RESPONSE_BYTES", 1000)
    k = kubelet_server(pod_list([{**NLP_POD, "name": "x" * 200}] * 20))
    with pytest.raises(KubeletError, match="did not list pods"):
        list_pods(k.socket)


def test_no_socket_and_not_a_socket(tmp_path):
    with pytest.raises(KubeletError, match="no kubelet pod-resources socket"):
        list_pods(str(tmp_path / "missing.sock"))
    os.mkfifo(tmp_path / "fifo.sock")
    with pytest.raises(KubeletError, match="is not a socket"):
        list_pods(str(tmp_path / "fifo.sock"))


# ---------------------------------------------------------------- joining pod UIDs to pods

UID_A, UID_B = "7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f", "11111111-2222-4333-8444-555555555555"


def _gpus(*procs: tuple[int, str, Workload]) -> list[Device]:
    devices = {GPU0: Device(index=0, uuid=GPU0), GPU1: Device(index=1, uuid=GPU1)}
    for pid, uuid, w in procs:
        devices[uuid].processes.append(GpuProcess(pid=pid, gpu=devices[uuid].index, gpu_uuid=uuid, memory=1,
                                                  workload=w))
    return list(devices.values())


def test_a_pod_is_the_one_holding_its_gpus_and_its_container_the_one_with_the_gpu():
    w = Workload(runtime="containerd", container_id="c" * 64, pod_uid=UID_A)
    gpus = _gpus((10, GPU1, w))
    names = PodNames()
    names.name(gpus, 0.0, lambda: decode_list(pod_list([NLP_POD])))
    named = gpus[1].processes[0].workload
    assert named is not None and (named.namespace, named.pod, named.pod_container) == ("nlp", "train-7f9c", "trainer")
    # Named once: the next reading does not ask
    again = _gpus((10, GPU1, w))
    names.name(again, 1.0, lambda: pytest.fail("asked the kubelet again"))  # type: ignore[arg-type,return-value]
    assert again[1].processes[0].workload == named


def test_pods_sharing_a_gpu_are_not_guessed_and_asked_again_later():
    w = Workload(pod_uid=UID_A)
    shared = [{"namespace": "a", "name": "one", "containers": [{"name": "c", "devices": [f"{GPU0}::0"]}]},
              {"namespace": "b", "name": "two", "containers": [{"name": "c", "devices": [f"{GPU0}::1"]}]}]
    asked = []

    def lister() -> list[PodContainer]:
        asked.append(1)
        return decode_list(pod_list(shared))
    names = PodNames()
    gpus = _gpus((10, GPU0, w))
    names.name(gpus, 0.0, lister)
    got = gpus[0].processes[0].workload
    assert got is not None and got.pod is None and got.note is not None and "2 pods share" in got.note
    names.name(_gpus((10, GPU0, w)), 5.0, lister)
    assert len(asked) == 1  # not before RETRY_S
    names.name(_gpus((10, GPU0, w)), kubelet.RETRY_S + 1, lister)
    assert len(asked) == 2


def test_a_pod_on_a_mig_instance_is_found_by_the_instances_uuid():
    mig = "MIG-11111111-2222-3333-4444-555555555555"
    gpu = Device(index=0, uuid=GPU0, mig_devices=[MigDevice(gi=3, ci=0, uuid=mig, name=None, memory_total=None,
                                                             memory_used=None, memory_free=None)])
    gpu.processes.append(GpuProcess(pid=1, gpu=0, gpu_uuid=GPU0, memory=1, mig_gi=3,
                                    workload=Workload(pod_uid=UID_B)))
    PodNames().name([gpu], 0.0, lambda: decode_list(pod_list([
        {"namespace": "ml", "name": "small", "containers": [{"name": "c", "devices": [mig]}]}])))
    assert gpu.processes[0].workload is not None and gpu.processes[0].workload.pod == "small"


def test_a_kubelet_failure_is_a_note_and_the_uid_stays():
    def fails() -> list[PodContainer]:
        raise KubeletError("the kubelet at /x did not list pods: no answer within 2s")
    gpus = _gpus((10, GPU0, Workload(pod_uid=UID_A)))
    PodNames().name(gpus, 0.0, fails)
    w = gpus[0].processes[0].workload
    assert w is not None and w.pod_uid == UID_A and w.pod is None
    assert w.note == "pod names unknown: the kubelet at /x did not list pods: no answer within 2s"


# ---------------------------------------------------------------- what the command loads

def test_grpc_is_loaded_only_where_a_pod_needs_a_name(tmp_path):
    code = ("import sys; from vramkit.machine import open_machine; open_machine(sys.argv[1]).snapshot(); "
            "print('grpc' in sys.modules, 'vramkit.kubelet' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_") or k == "VRAM_LANG"}
    env.update(VRAM_SIM_TIME="0", VRAM_KUBELET_SOCKET=str(tmp_path / "none.sock"))
    out = subprocess.run([sys.executable, "-c", code, "demo"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]  # no pod: neither
    data = Path(__file__).parent.parent / "src/vramkit/nvml/scenarios/workloads.json"
    scenario = tmp_path / "no-pods.json"
    scenario.write_text(_without_pods(data.read_text()))
    out = subprocess.run([sys.executable, "-c", code, str(scenario)], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.split() == ["False", "True"]  # a pod, no socket: the join, not grpc


def _without_pods(text: str) -> str:
    import json

    data = json.loads(text)
    del data["pods"]
    return json.dumps(data)
