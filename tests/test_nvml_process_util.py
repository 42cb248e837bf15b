"""Per-process utilization (issue 17 item 1): SM, memory bandwidth, encoder, decoder % from NVML's
process samples, through the NVML layer, `vram ps` (text, JSON, CSV) and `vram status`; N/A with
the reason where the driver keeps no samples or refuses them, never 0."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import minimal_scenario, run_vram

from vramkit.backends.simulated import SimulatedBackend
from vramkit.machine import Machine
from vramkit.nvml import scenario as scenarios
from vramkit.nvml.sim import SimulatedNvml


def _scenario(**gpu: object) -> dict:
    data = minimal_scenario()
    data["gpus"] = [{"memory_total": "80GiB", "utilization": 70, "memory_utilization": 40, **gpu},
                    {"memory_total": "80GiB", "utilization": 50}]
    data["processes"] = [
        {"pid": 7001, "gpus": {"0": "10GiB"}, "sm_util": 55, "mem_util": 31, "enc_util": 12, "dec_util": 7,
         "command": "python encode.py"},
        {"pid": 7002, "gpus": {"0": "5GiB"}, "sm_util": 0, "command": "python idle.py"},
        {"pid": 7003, "gpus": {"0": "5GiB"}, "command": "python default.py"},
        {"pid": 7004, "gpus": {"1": "5GiB"}, "sm_util": 20, "mem_util": {"timeline": [[0, 10], [10, 30]]},
         "command": "python timeline.py"},
    ]
    return data


def _processes(data: dict, monkeypatch, t: float = 0) -> dict[int, object]:
    monkeypatch.setenv("VRAM_SIM_TIME", str(t))
    machine = Machine(SimulatedBackend(SimulatedNvml(scenarios.validate(data, "test"))))
    try:
        return {p.pid: p for p in machine.snapshot().processes}
    finally:
        machine.close()


def _four(p) -> tuple:
    return (p.sm_utilization, p.memory_utilization, p.encoder_utilization, p.decoder_utilization)


def test_each_process_gets_its_own_four_percentages(monkeypatch):
    procs = _processes(_scenario(), monkeypatch, t=5)
    assert _four(procs[7001]) == (55, 31, 12, 7)
    # No sample (it did no work): the driver's documented 0, not N/A.
    assert _four(procs[7002]) == (0, 0, 0, 0) and procs[7002].utilization_na is None
    # Absent fields follow the GPU: SM and memory bandwidth as busy as the GPU, no video work.
    assert _four(procs[7003]) == (70, 40, 0, 0)
    assert _four(procs[7004]) == (20, 20, 0, 0)  # halfway along the timeline
    assert all(p.utilization_na is None for p in procs.values())


@pytest.mark.parametrize(("fault", "reason"), [("unsupported", "not supported"),
                                              ("no_permission", "no permission")])
def test_refused_or_unsupported_samples_are_na_with_the_reason(monkeypatch, fault, reason):
    procs = _processes(_scenario(**{fault: ["process_utilization"]}), monkeypatch)
    for pid in (7001, 7002, 7003):
        assert _four(procs[pid]) == (None, None, None, None)
        assert procs[pid].utilization_na == reason
    assert _four(procs[7004]) == (20, 10, 0, 0)  # the other GPU still samples


def test_mig_instances_have_no_samples_and_say_so():
    result = run_vram("ps", "--simulate", "mig", "--json")
    rows = json.loads(result.out)["processes"]
    on_mig = [r for r in rows if r["mig_gi"] is not None]
    assert on_mig
    for row in on_mig:
        assert row["sm_utilization"] is None and row["memory_utilization"] is None
        assert "MIG" in row["utilization_na"]


def _write(tmp_path, data: dict) -> str:
    path = tmp_path / "util.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_ps_text_json_and_csv_show_the_same_values(tmp_path):
    data = _scenario()
    data["gpus"].append({"memory_total": "80GiB", "no_permission": ["process_utilization"]})
    data["processes"].append({"pid": 7005, "gpus": {"2": "1GiB"}, "command": "python hidden.py"})
    path = _write(tmp_path, data)
    env_t = {"VRAM_SIM_TIME": "5", "COLUMNS": "200"}
    text = run_vram("ps", "--simulate", path, env=env_t).out.splitlines()
    header = text[1].split()
    rows = {int(line.split()[1]): dict(zip(header, line.split())) for line in text[2:] if line[:3].strip().isdigit()}
    assert [rows[7001][h] for h in ("SM%", "MBW%", "ENC%", "DEC%")] == ["55%", "31%", "12%", "7%"]
    assert [rows[7005][h] for h in ("SM%", "MBW%", "ENC%", "DEC%")] == ["N/A"] * 4
    assert "GPU 2: per-process utilization N/A (no permission)" in text

    doc = {r["pid"]: r for r in json.loads(run_vram("ps", "--simulate", path, "--json", env=env_t).out)["processes"]}
    assert (doc[7001]["memory_utilization"], doc[7001]["encoder_utilization"],
            doc[7001]["decoder_utilization"]) == (31, 12, 7)
    assert doc[7001]["gpu_utilization"] == 70  # the GPU's own stays separate
    assert doc[7005]["sm_utilization"] is None and doc[7005]["utilization_na"] == "no permission"

    table = {int(r["pid"]): r for r in csv.DictReader(io.StringIO(
        run_vram("ps", "--simulate", path, "--csv", env=env_t).out))}
    assert table[7001]["encoder_utilization"] == "12" and table[7005]["decoder_utilization"] == "N/A"


def test_status_process_lines_show_the_process_own_sm(tmp_path):
    path = _write(tmp_path, _scenario(no_permission=[]))
    out = run_vram("status", "--simulate", path, env={"VRAM_SIM_TIME": "5", "COLUMNS": "120"}).out
    line = next(x for x in out.splitlines() if "7002" in x)
    assert "sm   0%" in line  # its GPU is at 70%: the process's own is shown
    assert "sm  55%" in next(x for x in out.splitlines() if "7001" in x)


def test_scenario_rejects_a_bad_percentage():
    data = _scenario()
    data["processes"][0]["enc_util"] = 101
    with pytest.raises(scenarios.ScenarioError, match=r"processes\[0\]\.enc_util"):
        scenarios.validate(data, "test")
