"""The selection policy on the bundled machines: what fits, what is chosen, and what a refusal
says. Expected values come from the scenario files (at t=0), not from vram's output."""

from __future__ import annotations

import pytest
from helpers import scenario_data

import vramkit
from vramkit.allocate import build_policy
from vramkit.cuda_env import devices_of
from vramkit.errors import RequestError
from vramkit.gpu_choice import (
    Block,
    Policy,
    decide,
    queue_blocks,
    resolve_selectors,
    shortfall_text,
    units_of,
    verdict_text,
)
from vramkit.units import parse_size

GiB = 1024**3


@pytest.fixture(autouse=True)
def _pinned_clock(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)


def machine(name: str):
    snap = vramkit.snapshot(simulate=name)
    devices = devices_of(snap)
    return snap, devices, units_of(snap, devices)


def expected_free(name: str) -> dict[int, int]:
    """Free memory of each whole GPU of a simple scenario at t=0, from its JSON."""
    data = scenario_data(name)
    out = {}
    for i, g in enumerate(data["gpus"]):
        held = sum(parse_size(p["gpus"][str(i)]) for p in data["processes"]
                   if str(i) in p["gpus"] and not isinstance(p["gpus"][str(i)], dict) and p.get("start_at", 0) == 0)
        out[i] = parse_size(g["memory_total"]) - parse_size(g.get("memory_reserved", 0)) - held
    return out


def chosen(decision) -> list:
    return [u.dev.short_id for u in decision.chosen]


def test_default_policy_on_demo_takes_the_emptiest_fitting_gpu():
    _, _, units = machine("demo")
    free = expected_free("demo")
    # default: ≥50% free and ≤50% busy. At t=0 only GPUs 4 (0%) and 7 (3%) are ≤50% busy.
    d = decide(Policy(), units)
    assert [u.dev.index for u in d.fitting] == [4, 7]
    assert chosen(d) == ["7"] and max(free[4], free[7]) == free[7]
    assert chosen(decide(Policy(prefer="pack"), units)) == ["4"]  # the fullest that still fits
    assert chosen(decide(Policy(count=2), units)) == ["4", "7"]  # in PCI order: cuda:0 is GPU 4


def test_free_memory_and_utilization_limits():
    _, _, units = machine("demo")
    free = expected_free("demo")
    need = 60 * GiB
    d = decide(Policy(min_free=need, min_free_pct=None, max_util=None, count=8), units)
    assert sorted(u.dev.index for u in d.fitting) == sorted(i for i, f in free.items() if f >= need)
    d = decide(Policy(max_util=None, count=5), units)  # 50% free, any utilization
    assert chosen(d) == ["1", "2", "3", "4", "7"]
    d = decide(Policy(max_util=60, count=1), units)
    assert sorted(u.dev.index for u in d.fitting) == [1, 2, 3, 4, 7]


def test_exclusive_means_no_other_users_process():
    _, _, units = machine("demo")
    alice = 1001  # alice's notebook is the only process on GPU 4; erin serves on GPU 7
    d = decide(Policy(exclusive=True, uid=alice), units)
    assert chosen(d) == ["4"]
    v7 = next(v for v in d.verdicts if v.unit.dev.index == 7)
    assert verdict_text(v7, d.policy) == "in use by other users (erin)"
    assert not decide(Policy(exclusive=True, uid=0), units).ok


def test_only_exclude_and_the_allowed_set_can_never_be_waited_out():
    _, devices, units = machine("demo")
    d = decide(Policy(exclude=[devices[7].key]), units)
    assert chosen(d) == ["4"]
    d = decide(Policy(only=[devices[7].key, devices[6].key], count=2), units)
    assert d.impossible is None and not d.ok  # 6 is full now, not forever
    d = decide(Policy(allowed=[devices[0].key, devices[1].key], allowed_from="CUDA_VISIBLE_DEVICES=0,1", count=3),
               units)
    assert d.impossible and "outside CUDA_VISIBLE_DEVICES=0,1" in d.impossible


def test_impossible_requests_say_what_is_available():
    _, _, units = machine("demo")
    d = decide(Policy(count=9), units)
    assert d.impossible.startswith("cannot pick 9 GPUs: this machine has 8 GPUs (0-7)")
    assert "fitting now: GPU 4 (61.5GiB free), GPU 7 (77.3GiB free)" in d.impossible
    d = decide(Policy(min_free=200 * GiB, min_free_pct=None), units)
    assert "GPUs 0-7 are too small (79.5GiB usable)" in d.impossible
    assert "most free now: GPU 7 (77.3GiB free), GPU 4 (61.5GiB free)" in d.impossible


def test_a_refusal_groups_gpus_by_reason():
    _, _, units = machine("demo")
    text = shortfall_text(decide(Policy(count=3), units))
    assert text.startswith("too few GPUs fit now (wanted 3 GPUs, ≥50% free, ≤50% busy): only GPUs 4, 7 fit")
    assert "GPUs 0, 5, 6 are short of free memory (8.9GiB, 30.0GiB, 1.2GiB free; need 50% = 40.0GiB)" in text
    assert "GPUs 1-3 are busy (58%, 55%, 57% utilization; limit 50%)" in text


def test_leases_block_and_earlier_waiters_are_served_first():
    _, devices, units = machine("demo")
    k4, k7 = devices[4].key, devices[7].key
    lease = {k7: Block("lease", "reserved by a vram run of bob (pid 9, 1s ago)")}
    d = decide(Policy(), units, lease)
    assert chosen(d) == ["4"]
    assert "GPU 7 is reserved by a vram run of bob" in shortfall_text(decide(Policy(count=2), units, lease))
    # an earlier waiter that can be served now claims its choice first
    blocked = queue_blocks(units, {}, [(Policy(), "ann, pid 5")])
    assert blocked[k7].kind == "queue" and chosen(decide(Policy(), units, blocked)) == ["4"]
    # one that cannot be served yet (3 GPUs) holds every GPU that fits it: later requests wait
    blocked = queue_blocks(units, {}, [(Policy(count=3), "ann, pid 5")])
    assert set(blocked) == {k4, k7}
    assert not decide(Policy(), units, blocked).ok
    # ...but it holds nothing it could not use: a waiter for GPU 7 only leaves GPU 4 free
    blocked = queue_blocks(units, lease, [(Policy(only=[k7]), "ann, pid 5")])
    assert chosen(decide(Policy(), units, blocked)) == ["4"]


def test_mig_instances_are_units_for_one_gpu_requests():
    _, devices, units = machine("mig")
    assert [u.dev.short_id for u in units] == ["0/1", "0/5", "0/9", "0/10", "1"]
    d = decide(Policy(), units)  # 50% free: gi 9 (4 of 9.75 GiB used) and gi 10 (empty)
    assert [u.dev.short_id for u in d.fitting] == ["0/9", "0/10"]
    assert chosen(d) == ["0/10"] and chosen(decide(Policy(prefer="pack"), units)) == ["0/9"]
    v = next(v for v in d.verdicts if v.unit.dev.short_id == "0/10")
    assert v.notes and "not reported for MIG instances" in v.notes[0]
    d = decide(Policy(count=2, max_util=None, min_free_pct=None), units)
    assert d.impossible and "MIG instances" in d.impossible and "only 1 of 5" in d.impossible


def test_lost_and_na_gpus():
    _, _, units = machine("faulty")
    d = decide(Policy(max_util=None, min_free_pct=None, count=4), units)
    assert d.impossible and "GPU 1 is lost" in d.impossible
    d = decide(Policy(max_util=10, min_free_pct=None, count=1), units)
    v3 = next(v for v in d.verdicts if v.unit.dev.index == 3)
    assert v3.fits and "utilization not supported" in v3.notes[0]


@pytest.mark.parametrize("text,expected", [
    ("4", ["4"]), ("0-2", ["0", "1", "2"]), ("1,6", ["1", "6"]), ("GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e65", ["5"]),
])
def test_gpu_selectors(text, expected):
    _, devices, _ = machine("demo")
    keys = resolve_selectors(text, devices, "only")
    assert [next(d.short_id for d in devices if d.key == k) for k in keys] == expected


@pytest.mark.parametrize("text,message", [
    ("8", "only: no GPU 8 (this machine has GPUs 0-7)"),
    ("3-1", "is not a range"),
    ("GPU-9f1c", "matches 8 UUIDs"),
    ("GPU-0000", "matches no GPU"),
    ("0/1", "no MIG instance 0/1"),
    ("x", "is not a GPU"),
    ("1,", "empty item"),
])
def test_gpu_selector_mistakes(text, message):
    _, devices, _ = machine("demo")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        resolve_selectors(text, devices, "only")
    assert isinstance(info.value, RequestError) and info.value.param == "only"  # vram names it --only


def test_mig_selectors_name_instances():
    _, devices, _ = machine("mig")
    keys = resolve_selectors("0/9", devices, "only")
    assert [d.gi for d in devices if d.key in keys] == [9]
    assert len(resolve_selectors("0", devices, "only")) == 5  # the GPU and its four instances


def test_build_policy_reads_what_people_type(monkeypatch):
    _, devices, _ = machine("demo")
    policy, vis = build_policy(devices, min_free="30GiB", max_util="80%")
    assert policy.min_free == 30 * GiB and policy.min_free_pct is None and policy.max_util == 80
    assert build_policy(devices, min_free="60%")[0].min_free_pct == 60
    assert build_policy(devices, max_util="any")[0].max_util is None
    for kwargs, message in [({"min_free": "20"}, "needs a unit"), ({"count": 0}, "at least 1"),
                            ({"max_util": "150"}, "out of range"), ({"prefer": "fast"}, "spread or pack"),
                            ({"min_free": "lots"}, "not a size")]:
        with pytest.raises(ValueError, match=message):
            build_policy(devices, **kwargs)
    policy, vis = build_policy(devices, env={"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert policy.allowed == sorted([devices[2].key, devices[3].key])
    assert policy.allowed_from == "CUDA_VISIBLE_DEVICES=2,3"
    with pytest.raises(ValueError, match="twice"):
        build_policy(devices, env={"CUDA_VISIBLE_DEVICES": "2,2"})


def test_policy_survives_a_ticket_round_trip():
    p = Policy(count=2, min_free=5 * GiB, min_free_pct=None, exclude=["GPU-x"], exclusive=True, uid=1234)
    assert Policy.from_dict({**p.to_dict(), "future_field": 1}) == p


@pytest.mark.parametrize("bad", [{"count": "2"}, {"count": 0}, {"exclude": "GPU-x"}, {"prefer": "all"},
                                 {"only": [1, 2]}, {"max_util": True}, {"unknown_only": 1, "uid": "root"}])
def test_a_ticket_that_holds_no_policy_is_refused(bad):
    with pytest.raises((ValueError, TypeError)):
        Policy.from_dict({**Policy().to_dict(), **bad})
