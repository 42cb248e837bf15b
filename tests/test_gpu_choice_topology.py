"""Topology-aware choice (issue 17 item 3): the scenario's `nvidia-smi topo -m` matrix served
through pynvml's topology calls, read by the NVML layer, and `vram pick -n N` preferring GPUs
joined by NVLink, then one PCIe switch, then one NUMA node; `--explain` says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import run_vram

from vramkit.gpu_choice import Policy, decide, units_of
from vramkit.machine import open_machine
from vramkit.nvml import scenario as scenarios
from vramkit.nvml.shim import write_shim

MATRIX = ["X    PIX  NODE SYS  SYS  SYS",
          "PIX  X    NODE SYS  SYS  SYS",
          "NODE NODE X    SYS  SYS  SYS",
          "SYS  SYS  SYS  X    NV4  PXB",
          "SYS  SYS  SYS  NV4  X    PXB",
          "SYS  SYS  SYS  PXB  PXB  X"]


def _data(topology: bool = True) -> dict:
    data = {"name": "topo", "gpus": [{"memory_total": "80GiB", "numa_node": i // 3} for i in range(6)],
            # the NVLink pair is the busier one: free memory alone would choose elsewhere
            "processes": [{"pid": 9100 + i, "gpus": {str(i): "20GiB"}, "sm_util": 0} for i in (3, 4)]}
    if topology:
        data["topology"] = MATRIX
    return data


@pytest.fixture
def topo_file(tmp_path):
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(_data()))
    return str(path)


def _decision(path: str, count: int, **policy):
    machine = open_machine(path)
    machine.want_topology = True
    try:
        snap = machine.snapshot()
    finally:
        machine.close()
    from vramkit.cuda_env import devices_of

    return decide(Policy(count=count, max_util=None, **policy), units_of(snap, devices_of(snap)))


def test_the_nvlink_pair_wins_over_emptier_gpus(topo_file):
    d = _decision(topo_file, 2)
    assert [u.dev.index for u in d.chosen] == [3, 4]
    assert d.connection == "GPUs 3, 4: NVLink, 4 links (NV4)"


def test_without_nvlink_the_closest_pcie_path(topo_file):
    machine = open_machine(topo_file)
    try:
        keys = {g.index: g.uuid for g in machine.snapshot().gpus}
    finally:
        machine.close()
    # Left 0, 2, 4, 5: 4 and 5 share PCIe switches (PXB), 0 and 2 only a NUMA node (NODE).
    d = _decision(topo_file, 2, exclude=[keys[1], keys[3]])
    assert [u.dev.index for u in d.chosen] == [4, 5]
    three = _decision(topo_file, 3)
    assert [u.dev.index for u in three.chosen] == [3, 4, 5]  # NV4 + PXB beats PIX + NODE
    assert three.connection == "GPUs 3-5: PCIe switches, no host bridge between them (PXB) between the farthest two"


def test_a_scenario_without_topology_chooses_by_free_memory(tmp_path):
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(_data(topology=False)))
    d = _decision(str(path), 2)
    assert [u.dev.index for u in d.chosen] == [0, 1] and d.connection is None


def test_plain_snapshots_read_no_topology(topo_file):
    machine = open_machine(topo_file)
    try:
        assert machine.snapshot().topology is None
        machine.want_topology = True
        topo = machine.snapshot().topology
    finally:
        machine.close()
    assert topo.between(4, 3) == "NV4" and topo.between(0, 1) == "PIX" and topo.between(2, 5) == "SYS"
    assert topo.numa_node == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1}


def test_pick_explains_the_connection(topo_file):
    result = run_vram("pick", "-n", "2", "--max-util", "100", "--simulate", topo_file, "--explain",
                      env={"VRAM_LEASE_DIR": os.path.join(os.path.dirname(topo_file), "leases")})
    assert result.rc == 0, result.err
    assert result.out.strip() == "3,4"
    assert "connected GPUs first: GPUs 3, 4: NVLink, 4 links (NV4)" in result.err
    as_json = run_vram("pick", "-n", "2", "--max-util", "100", "--simulate", topo_file, "--json",
                       env={"VRAM_LEASE_DIR": os.path.join(os.path.dirname(topo_file), "leases")})
    assert json.loads(as_json.out)["connection"] == "GPUs 3, 4: NVLink, 4 links (NV4)"


TOPOLOGY_CALLS = textwrap.dedent("""
    import json, pynvml as N
    N.nvmlInit()
    h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
    out = {"ancestor": [[N.nvmlDeviceGetTopologyCommonAncestor(a, b) for b in h] for a in h],
           "remote": [N.nvmlDeviceGetNvLinkRemotePciInfo(h[3], link).busId for link in range(4)],
           "numa": [N.nvmlDeviceGetNumaNodeId(x) for x in h]}
    try:
        N.nvmlDeviceGetNvLinkRemotePciInfo(h[0], 0)
    except N.NVMLError as e:
        out["no_link"] = type(e).__name__
    print(json.dumps(out))
""")


def test_pynvml_topology_calls_through_the_shim(tmp_path, topo_file):
    pytest.importorskip("pynvml")
    shim = write_shim(tmp_path / "shim").parent
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(shim),
           "VRAM_SIMULATE": topo_file}
    out = json.loads(subprocess.run([sys.executable, "-c", TOPOLOGY_CALLS], env=env, capture_output=True,
                                    text=True, check=True, timeout=60).stdout)
    levels = {"X": 0, "PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
    want = [[40 if cell.startswith("NV") else levels[cell] for cell in row.split()] for row in MATRIX]
    assert out["ancestor"] == want  # an NVLink pair on one NUMA node: NODE
    gpu4 = scenarios.default_pci_bus_id(4)
    assert out["remote"] == [gpu4] * 4
    assert out["numa"] == [0, 0, 0, 1, 1, 1]
    assert out["no_link"] == "NVMLError_NotSupported"  # GPU 0 has no NVLink


@pytest.mark.parametrize(("topology", "where"), [
    (MATRIX[:5], "topology"),
    ([*MATRIX[:5], "SYS SYS SYS PXB PXB"], r"topology\[5\]"),
    ([*MATRIX[:2], MATRIX[2].replace("X", "PIX"), *MATRIX[3:]], r"topology\[2\]\[2\]"),
    ([MATRIX[0].replace("PIX", "NV0"), *MATRIX[1:]], r"topology\[0\]\[1\]"),
    ([MATRIX[0].replace("PIX", "PXB"), *MATRIX[1:]], r"topology\[1\]\[0\]"),
])
def test_topology_errors_name_the_entry(topology, where):
    data = _data()
    data["topology"] = topology
    with pytest.raises(scenarios.ScenarioError, match=where):
        scenarios.validate(data, "test")


def test_topology_sets_nvlink_links_and_checks_given_ones():
    data = _data()
    gpus = scenarios.validate(data, "test").gpus
    assert [g["health"]["nvlink_links"] for g in gpus] == [0, 0, 0, 4, 4, 0]
    data["gpus"][3]["health"] = {"nvlink_links": 2}
    with pytest.raises(scenarios.ScenarioError, match=r"gpus\[3\]\.health\.nvlink_links"):
        scenarios.validate(data, "test")


def test_a_refused_topology_is_said_and_free_memory_chooses(tmp_path):
    data = _data()
    for gpu in data["gpus"]:
        gpu["no_permission"] = ["topology"]
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(data))
    result = run_vram("pick", "-n", "2", "--max-util", "100", "--simulate", str(path), "--explain",
                      env={"VRAM_LEASE_DIR": str(tmp_path / "leases")})
    assert result.rc == 0, result.err
    assert result.out.strip() == "0,1"  # the emptiest, as without a topology
    assert "topology N/A (nvlink: no permission; pcie: no permission): chosen by free memory alone" in result.err


def test_one_side_of_a_link_is_enough(tmp_path):
    data = _data()
    data["gpus"][3]["no_permission"] = ["topology"]  # GPU 4 still reports its links to GPU 3
    path = tmp_path / "half.json"
    path.write_text(json.dumps(data))
    assert [u.dev.index for u in _decision(str(path), 2).chosen] == [3, 4]


def test_links_up_of_a_pcie_named_gpu_are_checked_against_its_topology_links():
    """A GPU whose name gives it no NVLink by default gets its links from the matrix: links_up 2 of
    NV4 is fine, 5 is refused, and without a topology any links_up is more than its 0 links."""
    data = _data()
    data["gpus"][3]["name"] = "NVIDIA A100-PCIE-40GB"
    data["gpus"][3]["health"] = {"nvlink_links_up": 2}
    gpus = scenarios.validate(data, "test").gpus
    assert (gpus[3]["health"]["nvlink_links"], gpus[3]["health"]["nvlink_links_up"]) == (4, 2)
    data["gpus"][3]["health"] = {"nvlink_links_up": 5}
    with pytest.raises(scenarios.ScenarioError, match=r"gpus\[3\]\.health\.nvlink_links_up"):
        scenarios.validate(data, "test")
    data = _data(topology=False)
    data["gpus"][3]["name"] = "NVIDIA A100-PCIE-40GB"
    data["gpus"][3]["health"] = {"nvlink_links_up": 2}
    with pytest.raises(scenarios.ScenarioError, match=r"gpus\[3\]\.health\.nvlink_links_up"):
        scenarios.validate(data, "test")


def test_a_gpu_has_at_most_18_nvlinks_and_a_scenario_at_most_1024_gpus():
    data = _data()
    data["topology"] = [row.replace("NV4", "NV19") for row in MATRIX]
    with pytest.raises(scenarios.ScenarioError, match=r"topology\[3\].*at most 18"):
        scenarios.validate(data, "test")
    with pytest.raises(scenarios.ScenarioError, match="at most 1024"):
        scenarios.validate({"name": "big", "gpus": [{"memory_total": "1GiB"}] * 1025}, "test")
