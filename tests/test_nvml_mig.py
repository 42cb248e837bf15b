"""The `mig` scenario: an H100 split into MIG instances next to a whole H100."""

from __future__ import annotations

import pytest
from helpers import clean_env, run_vram, scenario_data, status_blocks

from vramkit.units import parse_size

MIG = scenario_data("mig")
SPLIT = next(i for i, g in enumerate(MIG["gpus"]) if g.get("mig"))
WHOLE = next(i for i, g in enumerate(MIG["gpus"]) if not g.get("mig"))
INSTANCES = MIG["gpus"][SPLIT]["mig"]


def held(index: int, gi: int | None) -> dict[int, int]:
    """pid -> bytes the scenario puts on GPU `index`, MIG instance `gi`."""
    key = str(index) if gi is None else f"{index}/{gi}"
    return {p["pid"]: parse_size(p["gpus"][key]) for p in MIG["processes"] if key in p["gpus"]}


@pytest.fixture(scope="module")
def snap():
    return run_vram("status", "--simulate", "mig", "--json").json()


@pytest.fixture(scope="module")
def ps_rows():
    return run_vram("ps", "--simulate", "mig", "--json").json()["processes"]


def test_mig_mode(snap):
    assert snap["gpus"][SPLIT]["mig_enabled"] is True
    assert snap["gpus"][WHOLE]["mig_enabled"] is False


def test_mig_devices(snap):
    devices = snap["gpus"][SPLIT]["mig_devices"]
    assert [d["gi"] for d in devices] == [m["gi"] for m in INSTANCES]
    for d, m in zip(devices, INSTANCES):
        assert d["ci"] == m["ci"]
        assert d["uuid"] == m["uuid"]
        assert d["name"].endswith(m["profile"])
        assert d["memory_total"] == parse_size(m["memory_total"])
        assert d["memory_used"] == sum(held(SPLIT, m["gi"]).values())
        assert d["memory_used"] + d["memory_free"] == d["memory_total"]
    assert snap["gpus"][WHOLE]["mig_devices"] == []


def test_gpu_memory_is_the_sum_of_its_instances(snap):
    g = snap["gpus"][SPLIT]
    assert g["memory_used"] == sum(d["memory_used"] for d in g["mig_devices"])
    assert g["memory_total"] == parse_size(MIG["gpus"][SPLIT]["memory_total"])
    assert g["memory_reserved"] == parse_size(MIG["gpus"][SPLIT]["memory_reserved"])


def test_processes_carry_their_instance(snap):
    procs = snap["gpus"][SPLIT]["processes"]
    got = {p["pid"]: (p["mig_gi"], p["memory"]) for p in procs}
    want = {pid: (m["gi"], size) for m in INSTANCES for pid, size in held(SPLIT, m["gi"]).items()}
    assert got == want
    whole = snap["gpus"][WHOLE]["processes"]
    assert {p["pid"]: (p["mig_gi"], p["memory"]) for p in whole} == {
        pid: (None, size) for pid, size in held(WHOLE, None).items()}


def test_ps_rows_name_the_instance(ps_rows):
    got = {r["pid"]: (r["gpu"], r["mig_gi"]) for r in ps_rows}
    for p in MIG["processes"]:
        (key, _), = p["gpus"].items()
        index, _, gi = key.partition("/")
        assert got[p["pid"]] == (int(index), int(gi) if gi else None)


def test_utilization_is_na_on_a_mig_gpu(snap):
    g = snap["gpus"][SPLIT]
    assert g["utilization"] is None and g["memory_utilization"] is None
    assert g["na"]["utilization"] == "not supported"
    assert snap["gpus"][WHOLE]["utilization"] == MIG["gpus"][WHOLE]["utilization"]


def test_holders_on_a_mig_gpu_are_not_called_idle(ps_rows):
    assert not any(r["idle"] for r in ps_rows)


def test_text_shows_instances_and_holders():
    result = run_vram("status", "--simulate", "mig", env=clean_env(COLUMNS="200"))
    assert result.rc == 0 and result.err == ""
    blocks = status_blocks(result.out)
    split = "\n".join(blocks[SPLIT])
    for m in INSTANCES:
        assert f"MIG gi {m['gi']} " in split and m["profile"] in split
        for pid in held(SPLIT, m["gi"]):
            assert f"{pid} gi{m['gi']}" in split
    assert "N/A" in blocks[SPLIT][0]  # utilization
    assert "MIG" not in "\n".join(blocks[WHOLE])


def test_ps_text_gpu_column_shows_gpu_slash_instance():
    result = run_vram("ps", "--simulate", "mig", env=clean_env(COLUMNS="200"))
    cells = {line.split()[1]: line.split()[0] for line in result.out.splitlines()[2:]}
    for p in MIG["processes"]:
        (key, _), = p["gpus"].items()
        assert cells[str(p["pid"])] == key


def test_gpu_filter_keeps_instances():
    got = run_vram("ps", "--simulate", "mig", "--json", "--gpu", str(SPLIT)).json()["processes"]
    assert sorted(r["pid"] for r in got) == sorted(pid for m in INSTANCES for pid in held(SPLIT, m["gi"]))
