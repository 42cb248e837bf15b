"""CUDA_VISIBLE_DEVICES read as CUDA reads it (the rules are in docs/gpu-numbering.md): a table
of values and what a CUDA program would see, on machines described here, not by vram."""

from __future__ import annotations

import pytest

import vramkit
from vramkit.cuda_env import (
    ASSUMED,
    CERTAIN,
    UNKNOWN,
    CudaDevice,
    allowed_keys,
    child_env,
    devices_of,
    numbering,
    parse_visible,
    short_pci,
    visible_value,
)

# Four GPUs. Two UUIDs share the prefix GPU-aaaa (so "GPU-aaaa" is ambiguous). NVML's index order
# is not PCI order here on purpose: index 0 sits on bus 0x81, so with PCI_BUS_ID, cuda index 0 is
# NVML GPU 1 (bus 0x01).
U = ["GPU-aaaa1111-0000-4000-8000-000000000000", "GPU-aaaa2222-0000-4000-8000-000000000001",
     "GPU-bbbb3333-0000-4000-8000-000000000002", "GPU-cccc4444-0000-4000-8000-000000000003"]
BUS = ["00000000:81:00.0", "00000000:01:00.0", "00000000:02:00.0", "00000000:C1:00.0"]


def machine(names=("NVIDIA A100-SXM4-80GB",) * 4) -> list[CudaDevice]:
    return [CudaDevice(key=U[i], index=i, uuid=U[i], name=names[i], pci_bus_id=BUS[i]) for i in range(4)]


# PCI order of the machine above, as NVML indices: bus 01 (GPU 1), 02 (GPU 2), 81 (GPU 0), C1 (GPU 3).
PCI = [1, 2, 0, 3]

# (CUDA_VISIBLE_DEVICES, NVML indices CUDA sees as cuda:0, cuda:1, ...), with CUDA_DEVICE_ORDER=PCI_BUS_ID.
TABLE = [
    (None, PCI),                       # unset: every GPU, in CUDA's order
    ("", []),                          # set but empty: none
    ("   ", []),                       # blank is empty too
    ("0", [PCI[0]]),                   # an index is a position in CUDA's order, not NVML's
    ("2,1", [PCI[2], PCI[1]]),         # the guide's example: listed order, 0 invisible
    ("0,2,-1,1", [PCI[0], PCI[2]]),    # the guide's example: -1 ends the list
    (" 1 , 3 ", [PCI[1], PCI[3]]),     # spaces around entries are ignored
    ("1,7,2", [PCI[1]]),               # out of range ends the list
    ("1,,2", [PCI[1]]),                # an empty entry ends the list
    ("1,abc,2", [PCI[1]]),             # garbage ends the list
    # libcuda reads an entry's leading number (seen on an H200, driver 580: "0abc" and "+0" are
    # GPU 0, "1abc" on a one-GPU machine is out of range): tests/fixtures/gpu/h200-run2
    ("1,2x,3", [PCI[1], PCI[2], PCI[3]]),
    ("+1", [PCI[1]]),
    ("1,7x,2", [PCI[1]]),              # 7x is index 7: out of range, ends the list
    ("-1,0", []),                      # a negative index is invalid
    ("GPU-", []),                      # "GPU-" alone is no prefix (CUDA: no device)
    ("1,GPU-,2", [PCI[1]]),
    ("GPU-BBBB3333", [2]),             # the hex digits in either case (CUDA took the upper-case UUID)
    ("GPU-b", [2]),                    # a one-digit prefix is enough when unique
    ("4", []),                         # index == count: out of range
    (U[2], [2]),                       # a full UUID
    ("GPU-bbbb", [2]),                 # a unique prefix of a UUID
    ("GPU-aaaa2", [1]),                # long enough to be unique
    ("GPU-aaaa", []),                  # ambiguous prefix: names no device, ends the list
    ("GPU-aaaa,3", []),
    ("GPU-ffff", []),                  # matches nothing
    ("gpu-bbbb", []),                  # not the form nvidia-smi prints
    ("bbbb3333", []),                  # a UUID without its GPU- prefix is not an index either
    (f"3,{U[0]}", [PCI[3], 0]),        # indices and UUIDs mix
    (f"{U[3]},0", [3, PCI[0]]),
]


@pytest.mark.parametrize("value,expected", TABLE)
def test_cuda_visible_devices_table(value, expected):
    devices = machine()
    vis = parse_visible(value, devices, "PCI_BUS_ID")
    assert vis.error is None
    assert [d.index for d in vis.devices] == expected


@pytest.mark.parametrize("value,twice", [
    ("1,1", "GPU 2"),                  # cuda index 1 is NVML GPU 2
    ("GPU-bbbb,2,GPU-bbbb3", "GPU 2"),  # a UUID prefix, then the full UUID: twice by UUID
    (f"{U[1]},{U[1]}", "GPU 1"),
])
def test_a_device_named_twice_makes_cuda_refuse_the_whole_value(value, twice):
    vis = parse_visible(value, machine(), "PCI_BUS_ID")
    assert vis.devices == []
    assert vis.error and twice in vis.error and "twice" in vis.error
    with pytest.raises(ValueError, match="twice"):
        allowed_keys(vis, machine())


def test_a_duplicate_after_the_end_of_the_list_does_not_count():
    vis = parse_visible("1,9,1", machine(), "PCI_BUS_ID")
    assert vis.error is None and [d.index for d in vis.devices] == [PCI[1]]
    assert [e.status for e in vis.entries] == ["ok", "invalid", "ignored"]


def test_the_entry_that_ends_the_list_is_explained():
    vis = parse_visible("0,GPU-aaaa,1", machine(), "PCI_BUS_ID")
    assert [e.status for e in vis.entries] == ["ok", "invalid", "ignored"]
    assert "ambiguous" in vis.entries[1].why and "GPU 0" in vis.entries[1].why and "GPU 1" in vis.entries[1].why
    assert any("'GPU-aaaa' ends the list" in p for p in vis.pitfalls)


def test_pci_bus_id_order_is_numeric_not_nvml_index_order():
    order = numbering(machine(), "PCI_BUS_ID")
    assert [d.index for d in order.gpus] == PCI and order.confidence == CERTAIN


def test_without_pci_bus_id_order_same_model_gpus_are_assumed_in_pci_order_with_a_warning():
    for order in (None, "FASTEST_FIRST", "bogus"):
        vis = parse_visible("0", machine(), order)
        assert vis.order.confidence == ASSUMED
        assert [d.index for d in vis.devices] == [PCI[0]]
        assert any("fastest first" in p for p in vis.pitfalls)
    assert any("not a value CUDA knows" in p for p in parse_visible("0", machine(), "bogus").pitfalls)


def test_mixed_models_make_indices_unknowable_without_pci_bus_id_order():
    devices = machine(names=("NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA A100-SXM4-80GB", "Tesla T4"))
    vis = parse_visible("0,1", devices, None)
    assert vis.order.confidence == UNKNOWN
    with pytest.raises(ValueError, match="CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs"):
        allowed_keys(vis, devices)
    # UUIDs do not depend on the order, and PCI_BUS_ID makes indices certain again.
    assert allowed_keys(parse_visible(U[1], devices, None), devices) == {U[1]}
    assert allowed_keys(parse_visible("0", devices, "PCI_BUS_ID"), devices) == {U[PCI[0]]}


def test_unset_allows_everything_and_empty_allows_nothing():
    devices = machine()
    assert allowed_keys(parse_visible(None, devices), devices) is None
    assert allowed_keys(parse_visible("", devices), devices) == set()


# ---------------------------------------------------------------- MIG

@pytest.fixture
def mig(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    return devices_of(vramkit.snapshot(simulate="mig"))


MIG_A = "MIG-1a2b3c4d-000a-5e6f-8a9b-0c1d2e3f4a5a"  # GPU 0, gi 10 (scenario mig)
MIG_9 = "MIG-1a2b3c4d-0009-5e6f-8a9b-0c1d2e3f4a59"
H100_0 = "GPU-4d1e7c2b-7a3e-4f10-9c21-5b6a7c8d9e00"


@pytest.mark.parametrize("value,expected", [
    (MIG_A, [(0, 10)]),
    ("MIG-1a2b3c4d-000a", [(0, 10)]),            # a unique prefix
    ("MIG-1a2b3c4d-000", []),                    # ambiguous: 0001, 0005, 0009, 000a
    (f"MIG-{H100_0}/10/0", [(0, 10)]),           # the R450/R460 form
    (f"MIG-{H100_0}/3/0", []),                   # no such instance
    (f"{MIG_A},1", [(0, 10), (1, None)]),
])
def test_mig_ids(mig, value, expected):
    vis = parse_visible(value, mig, "PCI_BUS_ID")
    assert [(d.index, d.gi) for d in vis.devices] == expected


def test_a_gpu_in_mig_mode_stands_for_its_instances_and_is_flagged(mig):
    vis = parse_visible("0", mig, "PCI_BUS_ID")
    assert any("MIG mode" in p for p in vis.pitfalls)
    allowed = allowed_keys(vis, mig)
    assert allowed == {d.key for d in mig if d.is_mig}


def test_more_than_one_visible_mig_instance_is_a_pitfall(mig):
    vis = parse_visible(f"{MIG_A},{MIG_9}", mig, "PCI_BUS_ID")
    assert [d.gi for d in vis.devices] == [10, 9]
    assert any("only one MIG" in p and "gi 10" in p for p in vis.pitfalls)


# ---------------------------------------------------------------- what a launched job gets

def test_the_value_for_a_job_uses_pci_order_indices_and_names_them_back():
    devices = machine()
    chosen = [devices[0], devices[3]]  # NVML GPUs 0 and 3 = cuda indices 2 and 3 under PCI_BUS_ID
    assert visible_value(chosen, devices, "index") == "2,3"
    assert visible_value(chosen, devices, "uuid") == f"{U[0]},{U[3]}"
    env = child_env(chosen, devices)
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "2,3"}
    # read back as CUDA will: exactly the chosen devices, in order
    back = parse_visible(env["CUDA_VISIBLE_DEVICES"], devices, env["CUDA_DEVICE_ORDER"])
    assert back.devices == chosen


def test_on_a_machine_with_mig_the_job_gets_uuids(mig):
    whole = next(d for d in mig if d.index == 1)
    inst = next(d for d in mig if d.gi == 10)
    assert visible_value([whole], mig) == whole.uuid  # auto: UUIDs where MIG makes indices unclear
    assert visible_value([whole], mig, "index") == "1"
    assert visible_value([inst], mig, "index") == MIG_A  # a MIG instance has no index


def test_pci_ids_are_written_as_lspci_does():
    assert short_pci("00000000:41:00.0") == "0000:41:00.0"
    assert short_pci("00000000:BD:00.0") == "0000:bd:00.0"
    assert short_pci("0001:41:00.0") == "0001:41:00.0"
    assert short_pci(None) == "N/A"


def test_demo_devices_follow_the_scenario(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    devices = devices_of(vramkit.snapshot(simulate="demo"))
    assert [d.index for d in devices] == list(range(8)) and not any(d.is_mig for d in devices)
    vis = parse_visible("GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e62,4", devices, "PCI_BUS_ID")
    assert [d.label for d in vis.devices] == ["GPU 2", "GPU 4"]


def test_an_index_with_trailing_garbage_is_read_as_cuda_reads_it_and_flagged():
    # libcuda took "0abc" and "+0" as GPU 0 on an H200 (driver 580; tests/fixtures/gpu/h200-run2):
    # vram predicts the same devices and says the entry is a typo
    vis = parse_visible("1abc,2", machine(), "PCI_BUS_ID")
    assert vis.error is None and [d.index for d in vis.devices] == [PCI[1], PCI[2]]
    assert [e.status for e in vis.entries] == ["ok", "ok"]
    (pitfall,) = [p for p in vis.pitfalls if "'1abc'" in p]
    assert "as index 1" in pitfall and "write 1" in pitfall


@pytest.mark.parametrize("value", [f"0,{U[1]}", f"{U[1]},0", f"GPU-aaaa2,0,{U[3]}"])
def test_a_gpu_named_by_index_and_by_uuid_is_listed_once(value):
    # seen on an H200, driver 580: "0,GPU-<its uuid>" and "GPU-<uuid>,0" start, and CUDA lists the
    # GPU once; two indices or two UUIDs for one GPU make it refuse (the test above)
    vis = parse_visible(value, machine(), "PCI_BUS_ID")
    assert vis.error is None
    assert [d.label for d in vis.devices].count("GPU 1") == 1
    assert [e.status for e in vis.entries].count("duplicate") == 1
    assert any("CUDA lists it once" in p for p in vis.pitfalls)
