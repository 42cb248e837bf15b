"""`vram doctor` without a log: it lists exactly the problems planted in a scenario."""

from __future__ import annotations

import copy
import json
import os

import pytest
from helpers import clean_env, cmdline, minimal_scenario, run_vram, scenario_data, wait_for

import vramkit
from vramkit.doctor import run_checklist


def _found(findings) -> set[tuple]:
    return {(f["code"], f["pid"], tuple(f["gpus"])) for f in findings}


def test_demo_lists_exactly_its_planted_problems():
    result = run_vram("doctor", "--simulate", "demo", "--json", env=clean_env(CUDA_VISIBLE_DEVICES=None))
    data = result.json()
    assert data["simulated"] is True and data["gpus_checked"] == list(range(8))
    # The scenario's description plants: a DataParallel job heavy on GPU 0, an idle Jupyter kernel,
    # a defunct process still holding memory, one GPU nearly full. Nothing else is a problem.
    assert _found(data["findings"]) == {
        ("idle_holder", 38817, (4,)),
        ("defunct_holder", 29044, (5,)),
        ("dataparallel_imbalance", 41234, (0, 1, 2, 3)),
        ("near_full", None, (6,)),
    }
    users = {f["code"]: f["user"] for f in data["findings"]}
    assert users["idle_holder"] == "alice" and users["defunct_holder"] == "carol"
    assert users["dataparallel_imbalance"] == "bob"
    dp = next(f for f in data["findings"] if f["code"] == "dataparallel_imbalance")
    assert "DistributedDataParallel" in dp["fix"]


def test_demo_text_names_each_problem():
    result = run_vram("doctor", "--simulate", "demo", env=clean_env(CUDA_VISIBLE_DEVICES=None))
    assert result.rc == 0, result.err
    out = result.out
    assert out.startswith("SIMULATED machine")
    assert "defunct process 29044" in out and "idle GPU 4" in out and "GPU 6 is nearly full" in out
    assert "pid 41234" in out and "DistributedDataParallel" in out
    assert "4 findings: 1 problem, 3 warnings" in out
    assert "\x1b" not in out  # not a terminal: no colour


def _snap(write_scenario, data, monkeypatch):
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    return vramkit.snapshot(simulate=str(write_scenario(data)))


def _clean() -> dict:
    data = minimal_scenario()
    data["gpus"][1]["utilization"] = 30
    return data


def test_a_clean_machine_has_no_findings(write_scenario, monkeypatch):
    snap = _snap(write_scenario, _clean(), monkeypatch)
    assert run_checklist(snap, env={}, me="ann").findings == []
    result = run_vram("doctor", "--simulate", str(write_scenario(_clean(), "clean.json")),
                      env=clean_env(CUDA_VISIBLE_DEVICES=None))
    assert result.rc == 0 and "No problems found." in result.out


def test_cuda_visible_devices_narrows_the_check_and_names_other_users():
    env = clean_env(CUDA_VISIBLE_DEVICES="0")
    data = run_vram("doctor", "--simulate", "demo", "--json", env=env).json()
    assert data["gpus_checked"] == [0] and data["cuda_visible_devices"] == "0"
    assert _found(data["findings"]) == {("dataparallel_imbalance", 41234, (0, 1, 2, 3)),
                                        ("other_users", None, (0,))}


def test_cuda_visible_devices_by_uuid():
    uuid = scenario_data("demo")["gpus"][4]["uuid"]
    data = run_vram("doctor", "--simulate", "demo", "--json", env=clean_env(CUDA_VISIBLE_DEVICES=uuid)).json()
    assert data["gpus_checked"] == [4]
    assert {f["code"] for f in data["findings"]} == {"idle_holder", "other_users"}


@pytest.mark.parametrize("cvd,code", [("", "cvd_empty"), ("9", "cvd_missing"), ("0,banana", "cvd_missing")])
def test_cuda_visible_devices_mistakes(cvd, code):
    snap = vramkit.snapshot(simulate="demo")
    result = run_checklist(snap, env={"CUDA_VISIBLE_DEVICES": cvd}, me="zed")
    assert code in {f.code for f in result.findings}


def test_index_order_pitfall_on_mixed_gpus(write_scenario, monkeypatch):
    data = _clean()
    data["gpus"][1]["name"] = "NVIDIA GeForce RTX 4090"
    data["gpus"][1]["memory_total"] = "24GiB"
    snap = _snap(write_scenario, data, monkeypatch)
    codes = lambda env: {f.code for f in run_checklist(snap, env=env, me="ann").findings}  # noqa: E731
    assert "cvd_order" in codes({"CUDA_VISIBLE_DEVICES": "1"})
    assert "cvd_order" not in codes({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert "cvd_order" not in codes({})


def test_every_job_on_gpu0(write_scenario, monkeypatch):
    data = _clean()
    data["gpus"].append(copy.deepcopy(data["gpus"][1]))
    data["gpus"][2]["uuid"] = "GPU-00000000-0000-4000-8000-000000000002"
    data["gpus"][2]["pci_bus_id"] = "00000000:10:00.0"
    data["processes"][1]["gpus"] = {"0": "5GiB"}
    data["processes"].append({"pid": 103, "user": "cy", "command": "python c.py", "gpus": {"0": "3GiB"}})
    snap = _snap(write_scenario, data, monkeypatch)
    found = [f for f in run_checklist(snap, env={}, me="ann").findings if f.code == "crowded_gpu0"]
    assert len(found) == 1 and "3 jobs share GPU 0" in found[0].title and "GPUs 1,2" in found[0].title


def test_my_orphan_on_an_idle_gpu_is_stale(write_scenario, monkeypatch):
    data = _clean()
    data["gpus"][1]["utilization"] = 0
    data["processes"][1].update({"ppid": 1, "age": "2m"})
    snap = _snap(write_scenario, data, monkeypatch)
    mine = run_checklist(snap, env={}, me="ben").findings
    assert [(f.code, f.pid) for f in mine] == [("stale_orphan", 102)]
    assert "vram kill 102" in mine[0].fix
    assert run_checklist(snap, env={}, me="ann").findings == []  # someone else's young orphan: not flagged


def test_gpu_option_narrows_and_checks_the_index():
    data = run_vram("doctor", "--simulate", "demo", "--json", "--gpu", "4-5",
                    env=clean_env(CUDA_VISIBLE_DEVICES=None)).json()
    assert {f["code"] for f in data["findings"]} == {"idle_holder", "defunct_holder"}
    bad = run_vram("doctor", "--simulate", "demo", "--gpu", "12", env=clean_env(CUDA_VISIBLE_DEVICES=None))
    assert bad.rc == 2 and "no GPU 12" in bad.err


def test_doctor_flags_a_process_on_a_gpu_its_environment_did_not_name(children, write_scenario, cli):
    """A real process told GPU 1 that holds memory on GPU 0: doctor names it, with the pid and the
    caveat that /proc shows the environment it started with; one told GPU 0 is not flagged."""
    def sleeper(cvd: str):
        proc = children.start(["sleep", "600"], env={"PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": cvd})
        assert wait_for(lambda: cmdline(proc.pid) == b"sleep\x00600\x00")
        return proc

    wrong, right = sleeper("1"), sleeper("0")
    data = minimal_scenario()
    data["processes"] += [{"pid": p.pid, "source": "real", "gpus": {"0": "1GiB"}} for p in (wrong, right)]
    rc, out, err = cli("doctor", "--simulate", str(write_scenario(data)), "--json")
    data = json.loads(out)
    told = [f for f in data["findings"] if f["code"] == "told_other_gpu"]
    assert [f["pid"] for f in told] == [wrong.pid], out
    assert "told GPU 1, holds memory on GPU 0" in told[0]["detail"] and "as it started" in told[0]["detail"]


def test_doctor_reads_gpu_health_and_flags_what_the_unhealthy_scenario_plants():
    result = run_vram("doctor", "--simulate", "unhealthy", "--json", env=clean_env(CUDA_VISIBLE_DEVICES=None))
    assert {(f["code"], tuple(f["gpus"])) for f in result.json()["findings"]} == {
        ("ecc_errors", (2,)), ("memory_repair_pending", (2,)), ("throttled", (1,)), ("low_pstate", (3,))}
