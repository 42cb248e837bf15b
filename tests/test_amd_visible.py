"""AMD's visible-devices rule (hip_env.py) read as ROCm reads it, and vram pick/run setting
HIP_VISIBLE_DEVICES: ROCR-Runtime's amd_filter_device.cpp (its own examples below) and CLR's
rocdevice.cpp are the references."""

from __future__ import annotations

import json

import pytest
from helpers import clean_env, run_vram

from vramkit import hip_env, visible
from vramkit.cuda_env import CudaDevice, devices_of
from vramkit.errors import RequestError
from vramkit.machine import snapshot

# the four GPUs of amd_filter_device.h's examples
UUIDS = ["GPU-BABABABABABABABA", "GPU-ABBAABBAABBAABBA", "GPU-BABAABBAABBABABA", "GPU-ABBABABABABAABBA"]
FOUR = [CudaDevice(key=u, index=i, uuid="GPU-" + u[4:].lower(), name="AMD Instinct MI210",  # as HSA writes it
                   pci_bus_id=f"0000:{i + 1:02x}:00.0", vendor="amd") for i, u in enumerate(UUIDS)]


def seen(env: dict[str, str], devices: list[CudaDevice] = FOUR) -> list[int]:
    return [d.index for d in hip_env.parse_env(env, devices).devices]


@pytest.mark.parametrize("value, expected", [
    ("", []), ("-1", []), ("GPU-XX", []),                      # A1-A3: none
    ("3,GPU-BABABABABABABABA,4", [3, 0]),                        # B
    ("1,GPU-ABBAABBAABBAABBA,GPU-XX", [1]),                      # C: GPU 1 twice ends the list
    ("3,GPU-BABAABBA,GPU-XX", [3, 2]),                           # D: a unique prefix
    ("gpu-abbaabba", [1]),                                       # upper-cased before matching
    (" 2 , 0x1", [2, 1]),                                        # trimmed; strtol base 0: hex
    ("010", []),                                                 # octal 8: out of range, ends the list
    ("0,,1", [0]),                                               # an empty entry is strtol's 0: GPU 0 again
    ("0,1,2,3,0", [0, 1, 2, 3]),                                 # more entries than GPUs are not read
    ("GPU-BABA", []),                                            # a prefix of two GPUs ends the list
])
def test_rocr_visible_devices_as_the_runtime_reads_it(value, expected):
    assert seen({"ROCR_VISIBLE_DEVICES": value}) == expected


@pytest.mark.parametrize("env, expected", [
    ({"HIP_VISIBLE_DEVICES": "2,0"}, [2, 0]),
    ({"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "3"}, [3]),  # empty HIP: HIP reads CUDA's
    ({"CUDA_VISIBLE_DEVICES": "1"}, [1]),
    ({"HIP_VISIBLE_DEVICES": "01"}, []),                              # not to_string's form: invalid
    ({"HIP_VISIBLE_DEVICES": "1,1,2"}, [1, 2]),                       # a repeat is listed once
    ({"HIP_VISIBLE_DEVICES": "0,7,1"}, [0]),                          # out of range ends the list
    ({"HIP_VISIBLE_DEVICES": "GPU-abbaabbaabbaabba"}, [1]),           # a UUID, found inside the agent's
    ({"HIP_VISIBLE_DEVICES": "GPU-ABBAABBAABBAABBA"}, []),            # ... which is lower case
    ({"ROCR_VISIBLE_DEVICES": "3,1", "HIP_VISIBLE_DEVICES": "1"}, [1]),  # HIP counts what ROCr left
    ({"ROCR_VISIBLE_DEVICES": "3,1", "HIP_VISIBLE_DEVICES": "2"}, []),
])
def test_hip_visible_devices_on_what_rocr_left(env, expected):
    assert seen(env) == expected


def test_gpu_device_ordinal_is_for_opencl_only():
    vis = hip_env.parse_env({"GPU_DEVICE_ORDINAL": "1"}, FOUR)
    assert [d.index for d in vis.devices] == [0, 1, 2, 3]
    assert any("GPU_DEVICE_ORDINAL" in p and "ignore" in p for p in vis.pitfalls)


def test_partitions_are_devices_of_their_own():
    devices = devices_of(snapshot(simulate="mi300x"))
    agents = hip_env.agents(devices)
    assert len(agents) == 16 and [(d.index, d.gi) for d in agents[5:9]] == [(5, None), (6, 0), (6, 1), (7, 0)]
    assert [(d.index, d.gi) for d in hip_env.parse_env({"HIP_VISIBLE_DEVICES": "7,15"}, devices).devices] == \
        [(6, 1), (7, 7)]


def test_child_env_counts_among_the_agents_the_inherited_rocr_leaves():
    assert hip_env.child_env([FOUR[3]], FOUR, {}) == {"HIP_VISIBLE_DEVICES": "3"}
    rocr = {"ROCR_VISIBLE_DEVICES": "3,1"}
    assert hip_env.child_env([FOUR[3], FOUR[1]], FOUR, rocr) == {"HIP_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(RequestError, match="hidden by ROCR_VISIBLE_DEVICES"):
        hip_env.child_env([FOUR[2]], FOUR, {"ROCR_VISIBLE_DEVICES": "3,1"})


def test_child_env_by_uuid_names_the_same_gpus_whatever_rocr_renumbered():
    """--format uuid on an AMD pick: HIP_VISIBLE_DEVICES gets each agent's UUID (HIP matches it among the
    agents ROCR_VISIBLE_DEVICES left), never the indices it was given before."""
    rocr = {"ROCR_VISIBLE_DEVICES": "3,1"}
    env = hip_env.child_env([FOUR[1]], FOUR, rocr, ids="uuid")
    assert env == {"HIP_VISIBLE_DEVICES": "GPU-abbaabbaabbaabba"}
    assert seen({**rocr, **env}) == [1]
    devices = devices_of(snapshot(simulate="mi300x"))
    parts = [d for d in hip_env.agents(devices) if d.index == 7][2:4]  # two of GPU 7's CPX partitions
    env = visible.child_env(parts, devices, {}, ids="uuid")
    assert env == {"HIP_VISIBLE_DEVICES": "GPU-c0de7e5777770002,GPU-c0de7e5777770003"}
    assert hip_env.parse_env(env, devices).devices == parts
    nameless = CudaDevice(key="x", index=0, uuid=None, name="AMD Instinct MI210", pci_bus_id="0000:01:00.0",
                          vendor="amd")
    with pytest.raises(RequestError, match="no UUID in ROCm's form"):
        hip_env.child_env([nameless], [nameless], {}, ids="uuid")


def test_vram_run_format_uuid_on_an_amd_pick(tmp_path):
    script = tmp_path / "x.py"
    script.write_text(X)
    result = run_vram("run", "--simulate", "mi300x", "-n", "2", "--format", "uuid", "--", "python3", str(script),
                      env=clean_env(VRAM_LEASE_DIR=str(tmp_path / "leases")))
    assert result.rc == 0, result.err
    assert json.loads(result.out.strip().splitlines()[-1]) == {
        "HIP_VISIBLE_DEVICES": "GPU-4ba1c0de7e574444,GPU-4ba1c0de7e575555"}


def test_one_vendors_variables_for_one_vendors_pick():
    devices = devices_of(snapshot(simulate="mixed"))
    nvidia, amd = [d for d in devices if d.vendor == "nvidia"], [d for d in devices if d.vendor == "amd"]
    assert visible.child_env(amd[1:], devices, {}) == {"HIP_VISIBLE_DEVICES": "1"}
    cuda = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}
    assert visible.child_env(nvidia[1:], devices, {}) == cuda
    with pytest.raises(RequestError, match="two vendors"):
        visible.child_env([nvidia[0], amd[0]], devices, {})


def test_on_a_mixed_host_each_rule_reads_its_own_gpus():
    devices = devices_of(snapshot(simulate="mixed"))
    vis = visible.read({"HIP_VISIBLE_DEVICES": "1"}, devices)
    assert [d.index for d in vis.devices] == [0, 1, 3]  # NVIDIA's unset: both; AMD's device 1 is GPU 3
    vis = visible.read({"CUDA_VISIBLE_DEVICES": "1"}, devices)  # HIP reads it too, as its own index 1
    assert [d.index for d in vis.devices] == [1, 3]


X = "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if 'VISIBLE' in k or 'DEVICE_ORD' in k}))"


@pytest.mark.parametrize("only, expected", [
    ("1", {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}),
    ("3", {"HIP_VISIBLE_DEVICES": "1"}),
    (None, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}),  # the emptiest GPU: NVIDIA's 1
])
def test_vram_run_on_a_mixed_host_sets_the_picked_vendors_variable_and_never_both(tmp_path, only, expected):
    script = tmp_path / "x.py"
    script.write_text(X)
    args = ["run", "--simulate", "mixed", "-n", "1", *(["--only", only] if only else []), "--", "python3", str(script)]
    result = run_vram(*args, env={"VRAM_LEASE_DIR": str(tmp_path / "leases")})
    assert result.rc == 0, result.err
    assert json.loads(result.out.strip().splitlines()[-1]) == expected


def test_vram_pick_two_on_mi300x_names_hip_devices():
    result = run_vram("pick", "--simulate", "mi300x", "-n", "2", "--json")
    assert result.rc == 0, result.err
    data = result.json()
    assert data["variable"] == "HIP_VISIBLE_DEVICES" and data["env"] == {"HIP_VISIBLE_DEVICES": "4,5"}
    assert [g["index"] for g in data["gpus"]] == [4, 5]


def test_doctor_names_rocms_visible_device_mistakes():
    """Partitions count as GPUs to ROCm: index 9 is GPU 7's partition 1, and 19 names none."""
    result = run_vram("doctor", "--simulate", "mi300x", "--json", env={"HIP_VISIBLE_DEVICES": "4,9,19,5"})
    assert result.rc == 0, result.err
    data = result.json()
    assert data["gpus_checked"] == [4, 7] and data["visible_devices"] == "HIP_VISIBLE_DEVICES=4,9,19,5"
    assert data["cuda_visible_devices"] is None
    missing = [f for f in data["findings"] if f["code"] == "cvd_missing"]
    assert [f["title"] for f in missing] == ["HIP_VISIBLE_DEVICES has '19', which names no GPU"]
    empty = run_vram("doctor", "--simulate", "mi300x", "--json", env={"ROCR_VISIBLE_DEVICES": ""}).json()
    assert empty["gpus_checked"] == []
    titles = [f["title"] for f in empty["findings"] if f["code"] == "cvd_missing"]
    assert titles == ["ROCR_VISIBLE_DEVICES is set but empty"]
