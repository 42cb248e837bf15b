"""doctor's DataParallel warning on mixed hardware compares like with like and never names a GPU
that holds as much as the first (issue 31, item 5)."""

from __future__ import annotations

import copy

from helpers import minimal_scenario

import vramkit
from vramkit.doctor import run_checklist

GiB = 1024**3


def _mixed(memory: dict[str, str]) -> dict:
    """GPUs 0 and 1: 80 GB cards; GPUs 2 and 3: 48 GB cards; one process on all four."""
    data = minimal_scenario()
    for i, bus in ((2, "00000000:41:00.0"), (3, "00000000:42:00.0")):
        gpu = copy.deepcopy(data["gpus"][1])
        gpu.update(uuid=f"GPU-00000000-0000-4000-8000-00000000000{i}", pci_bus_id=bus,
                   name="NVIDIA RTX 6000 Ada Generation", memory_total="48GiB", utilization=60)
        data["gpus"].append(gpu)
    for gpu in data["gpus"][:2]:
        gpu.update(name="NVIDIA A100-SXM4-80GB", utilization=60)
    data["processes"] = [{"pid": 301, "user": "dora", "command": "python train.py", "gpus": memory}]
    return data


def _dp(write_scenario, monkeypatch, memory: dict[str, str]):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    snap = vramkit.snapshot(simulate=str(write_scenario(_mixed(memory))))
    return [f for f in run_checklist(snap, env={}, me="zed").findings if f.code == "dataparallel_imbalance"]


def test_a_job_that_fills_big_and_small_cards_alike_is_not_dataparallel(write_scenario, monkeypatch):
    # 72 GiB on each 80 GB card, 40 GiB on each 48 GB card: GPU 1 holds as much as GPU 0.
    assert _dp(write_scenario, monkeypatch, {"0": "72GiB", "1": "72GiB", "2": "40GiB", "3": "40GiB"}) == []


def test_the_imbalance_is_measured_against_the_same_kind_and_names_only_lighter_gpus(write_scenario, monkeypatch):
    found = _dp(write_scenario, monkeypatch, {"0": "72GiB", "1": "20GiB", "2": "40GiB", "3": "40GiB"})
    assert len(found) == 1
    f = found[0]
    assert f.gpus == [0, 1]
    assert "3.6x more on GPU 0 than on GPU 1" in f.title
    assert "GPUs" not in f.title and "2" not in f.title.split("than on")[1]
    assert "of the same model" in f.detail


def test_without_a_card_of_the_same_kind_every_lighter_gpu_is_compared(write_scenario, monkeypatch):
    found = _dp(write_scenario, monkeypatch, {"0": "70GiB", "2": "20GiB", "3": "20GiB"})
    assert len(found) == 1 and found[0].gpus == [0, 2, 3] and "than on GPUs 2,3" in found[0].title
