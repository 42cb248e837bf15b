"""Container ids from /proc/PID/cgroup, in the forms Docker, containerd, CRI-O, Podman and
Kubernetes write them."""

from __future__ import annotations

import pytest

from vramkit.procs.workload import read_in, short_id

ID = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"


@pytest.mark.parametrize("cgroup", [
    f"0::/system.slice/docker-{ID}.scope\n",
    f"12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n",
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-{ID}.scope\n",
    f"0::/kubepods/besteffort/pod0a1b/{ID}\n",
    f"0::/machine.slice/libpod-{ID}.scope/container\n",
    f"0::/system.slice/crio-{ID}.scope\n",
])
def test_container_id_is_found(tmp_path, cgroup):
    (tmp_path / "cgroup").write_text(cgroup)
    found = read_in(str(tmp_path / "cgroup"))
    assert not isinstance(found, str) and found is not None and found.container_id == ID
    assert short_id(found) == ID[:12]


@pytest.mark.parametrize("cgroup", ["0::/user.slice/user-1000.slice/session-3.scope\n", "0::/\n", ""])
def test_a_host_process_has_no_container(tmp_path, cgroup):
    (tmp_path / "cgroup").write_text(cgroup)
    assert read_in(str(tmp_path / "cgroup")) is None


def test_an_unreadable_cgroup_file_means_unknown(tmp_path):
    assert read_in(str(tmp_path / "missing")) is None
