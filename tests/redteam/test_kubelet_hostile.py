"""Red team, third wave: the kubelet's pod-resources socket and the join of pod UIDs to pods
(kubelet.py), against a pod that sees GPUs it was not given and a socket another user planted.
Real gRPC servers on real unix sockets (test_workload_kubelet.py's)."""

from __future__ import annotations

import os

import pytest
from helpers import needs_root

pytest.importorskip("grpc", reason="grpcio is not installed (the k8s extra)")
from test_workload_kubelet import GPU0, GPU1, NLP_POD, UID_A, UID_B, _gpus, kubelet_server, pod_list  # noqa: E402, F401

from vramkit import kubelet  # noqa: E402
from vramkit.gpu_state import Workload  # noqa: E402
from vramkit.kubelet import KubeletError, PodNames, list_pods  # noqa: E402

VICTIM = {"namespace": "prod", "name": "infer-0", "containers": [{"name": "server", "devices": [GPU0]}]}
# The attacker's UID sorts first, so a join that names pods in turn names it first.
ATTACKER = "00000000-0000-4000-8000-000000000000"


def _owner(gpus, pid: int) -> Workload:
    [w] = [p.workload for g in gpus for p in g.processes if p.pid == pid]
    assert w is not None
    return w


def test_a_pod_on_another_pods_gpu_is_not_given_that_pods_name(kubelet_server):  # noqa: F811
    # A pod that requested no GPU but sees them all (NVIDIA_VISIBLE_DEVICES=all) runs on GPU 0,
    # which the kubelet lists for prod/infer-0 alone, beside infer-0's own process.
    k = kubelet_server(pod_list([VICTIM]))
    gpus = _gpus((10, GPU0, Workload(pod_uid=ATTACKER)), (20, GPU0, Workload(pod_uid=UID_B)))
    PodNames().name(gpus, 0.0, lambda: list_pods(k.socket))
    for pid in (10, 20):
        w = _owner(gpus, pid)
        assert w.pod is None and w.note is not None and "which is that pod cannot be told" in w.note


def test_a_pod_named_before_the_real_one_ran_loses_the_name_when_it_does(kubelet_server):  # noqa: F811
    k = kubelet_server(pod_list([VICTIM]))
    names = PodNames()
    early = _gpus((10, GPU0, Workload(pod_uid=ATTACKER)))  # alone on GPU 0: nothing tells it is not infer-0
    names.name(early, 0.0, lambda: list_pods(k.socket))
    assert _owner(early, 10).pod == "infer-0"
    both = _gpus((10, GPU0, Workload(pod_uid=ATTACKER)), (20, GPU0, Workload(pod_uid=UID_B)))
    names.name(both, 1.0, lambda: list_pods(k.socket))
    assert _owner(both, 10).pod is None and _owner(both, 20).pod is None
    assert "the processes of pod" in (_owner(both, 10).note or "")


def test_a_pod_recreated_under_its_old_name_is_named_again(kubelet_server):  # noqa: F811
    # A StatefulSet's pod comes back as train-7f9c with a new UID, in a long-running vram serve.
    k = kubelet_server(pod_list([NLP_POD]))
    names = PodNames()
    first = _gpus((10, GPU1, Workload(pod_uid=UID_A)))
    names.name(first, 0.0, lambda: list_pods(k.socket))
    assert _owner(first, 10).pod == "train-7f9c"
    again = _gpus((11, GPU1, Workload(pod_uid=UID_B)))
    names.name(again, 60.0, lambda: list_pods(k.socket))
    assert _owner(again, 11).pod == "train-7f9c"


# ---------------------------------------------------------------- a socket someone else made

@needs_root("to give a socket to another user")
def test_a_socket_another_user_bound_is_not_asked(kubelet_server):  # noqa: F811
    k = kubelet_server(pod_list([VICTIM]))
    os.chown(k.socket, 65534, 65534)  # as if nobody had bound it where the kubelet's was missing
    with pytest.raises(KubeletError, match="belongs to uid 65534, not to root or you: not asked"):
        list_pods(k.socket)
    assert k.calls == 0


def test_a_socket_in_a_directory_others_may_write_is_not_asked(kubelet_server):  # noqa: F811
    k = kubelet_server(pod_list([VICTIM]))
    os.chmod(k.dir, 0o777)  # anyone could have put it there, or swap it for theirs
    with pytest.raises(KubeletError, match="in a directory another user may change: not asked"):
        list_pods(k.socket)
    assert k.calls == 0
    os.chmod(k.dir, 0o1777)  # sticky, as /tmp: the socket is still its owner's
    assert [c.pod for c in list_pods(k.socket)] == ["infer-0"]


def test_a_planted_socket_costs_the_pods_their_names_not_a_wrong_name(kubelet_server, monkeypatch):  # noqa: F811
    k = kubelet_server(pod_list([VICTIM]))
    os.chmod(k.dir, 0o777)
    monkeypatch.setenv(kubelet.SOCKET_ENV, k.socket)
    gpus = _gpus((10, GPU0, Workload(pod_uid=ATTACKER)))
    PodNames().name(gpus, 0.0)
    w = _owner(gpus, 10)
    assert w.pod is None and w.note is not None and w.note.startswith("pod names unknown:")
