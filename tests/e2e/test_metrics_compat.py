"""vram serve --compat: the dashboards people already run, filled (issue 32 item 2).

A real Prometheus scrapes four `vram serve --compat dcgm,nvitop,nvidia-smi-exporter` hosts:
the bundled `unhealthy` (health problems, XIDs, NVLink), `mig` (MIG instances) and `faulty` (a lost
GPU, refused fields) scenarios, and a workstation card with a fan. Every query of every panel of
dcgm-exporter's dashboard (grafana.com 12239), nvitop-exporter's and nvidia_gpu_exporter's (14574), kept unchanged in
tests/fixtures/dashboards/ (SOURCE.md), is run with its template variables substituted, and must
return data, except the panels listed in NOT_READ, each with the reason vram cannot fill it.
The counts per dashboard are printed (pytest -s shows them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from itertools import product
from pathlib import Path

import pytest
from helpers import PROMETHEUS, Groups, clean_env, start_prometheus, vram_argv
from test_serve_prometheus import query, wait_until

DASHBOARDS = Path(__file__).resolve().parents[1] / "fixtures" / "dashboards"
SCENARIOS = {"gpu-u": "unhealthy", "gpu-m": "mig", "gpu-f": "faulty", "gpu-w": "workstation.json"}
# The bundled scenarios' GPUs are passively cooled (SXM boards): a fan needs an actively cooled card.
WORKSTATION = {"name": "workstation",
               "gpus": [{"name": "NVIDIA RTX A6000", "memory_total": "48GiB", "fan": 38, "utilization": 40,
                         "temperature": 66, "power": 210, "power_limit": 300}],
               "processes": [{"pid": 4100, "user": "erin", "command": "python render.py", "gpus": {"0": "9GiB"}}]}
SCHEMES = "dcgm,nvitop,nvidia-smi-exporter"

# (dashboard, a piece of the query): why no scenario can give it data.
NOT_READ = {
    ("dcgm", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"): "tensor-core activity is a DCGM profiling counter: NVML does not "
                                                 "report it",
    ("nvitop", "host_"): "host CPU, memory, swap, load, network and disk: not the GPU's, vram does not read them "
                         "(node_exporter does)",
    ("nvitop", 'hostname!~".*"'): "the dashboard's own query excludes every selected host (a hidden table column): "
                                  "empty with nvitop-exporter too",
    ("nvidia-smi", "nvidia_smi_gpu_recovery_action"): "the driver's recommended recovery action: vram does not read "
                                                      "it (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, drivers 570+)",
    ("nvidia-smi", "nvidia_smi_clocks_current_video_clock_hz"): "the video clock: vram does not read it",
    ("nvidia-smi", "nvidia_smi_fabric_state"): "the NVLink fabric state (NVSwitch systems): vram does not read it",
    ("nvidia-smi", "nvidia_smi_mig_sm_activity_ratio"): "MIG activity comes from NVML's GPM interface, which vram "
                                                        "does not read",
    ("nvidia-smi", "nvidia_smi_mig_tensor_activity_ratio"): "MIG activity comes from NVML's GPM interface, which "
                                                            "vram does not read",
}


def targets(dashboard: dict) -> list[tuple[str, str]]:
    out = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for t in panel.get("targets", []):
                if t.get("expr"):
                    out.append((panel.get("title", ""), t["expr"]))
    walk(dashboard["panels"])
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", "1m")
    for name, value in values.items():
        expr = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, expr)
    assert not re.search(r"\$\{?[A-Za-z_]", expr), expr
    return expr


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("needs the Prometheus server (Debian package 'prometheus')")
    tmp = tmp_path_factory.mktemp("compat")
    (tmp / "workstation.json").write_text(json.dumps(WORKSTATION))
    group = Groups()
    found = []
    try:
        for host, scenario in SCENARIOS.items():
            scenario = str(tmp / scenario) if scenario.endswith(".json") else scenario
            proc = group.start(vram_argv("serve", "--simulate", scenario, "--compat", SCHEMES, "--listen",
                                         "127.0.0.1:0", "--interval", "0.5s", "--hostname", host),
                               env=clean_env(VRAM_SIM_TIME=None), stderr=subprocess.PIPE, text=True)
            port = re.search(r"http://127\.0\.0\.1:(\d+)/", proc.stderr.readline())
            assert port
            found.append(f"127.0.0.1:{port.group(1)}")
        url = start_prometheus(group, tmp, found)
        wait_until(lambda: sum(float(r["value"][1]) for r in query(url, 'up{job="vram"}')) == len(found),
                   lambda: query(url, "up"))
        yield url, found
    finally:
        group.cleanup()


def check(url: str, name: str, filename: str, combos: list[dict[str, str]]) -> None:
    """Every target of the dashboard returns data for some value of its variables, but NOT_READ's."""
    dashboard = json.loads((DASHBOARDS / filename).read_text())
    skipped, wanted = [], []
    for title, expr in targets(dashboard):
        reason = next((why for (d, piece), why in NOT_READ.items()
                       if d == name and piece in substitute(expr, combos[0])), None)
        (skipped if reason else wanted).append((title, expr, reason))

    def empty() -> list[str]:
        return [f"{title}: {expr}" for title, expr, _ in wanted
                if not any(query(url, substitute(expr, c)) for c in combos)]
    wait_until(lambda: not empty(), lambda: f"{name}: panels without data: {empty()}")
    total = len(wanted) + len(skipped)
    print(f"\n{name} ({filename}): {len(wanted)} of {total} queries return data; not read by vram:")
    for title, _, reason in skipped:
        print(f"  {title}: {reason}")
    assert len(wanted) >= total - len(NOT_READ) * 3


def test_dcgm_exporter_dashboard_fills(lab):
    url, _ = lab
    check(url, "dcgm", "dcgm-exporter-dashboard.json", [{"instance": ".*", "gpu": ".*"}])


def test_nvitop_exporter_dashboard_fills(lab):
    url, _ = lab
    check(url, "nvitop", "nvitop-exporter-dashboard.json", [{"hostname": ".*", "username": ".*"}])


def test_nvidia_gpu_exporter_dashboard_fills(lab):
    url, found = lab
    uuids = wait_until(lambda: sorted({r["metric"]["uuid"] for r in query(url, "nvidia_smi_gpu_info")}),
                       lambda: "nvidia_smi_gpu_info")
    combos = [{"job": "vram", "node": node, "gpu": uuid} for node, uuid in product(found, uuids)]
    check(url, "nvidia-smi", "nvidia-gpu-exporter-14574.json", combos)


def test_mig_series_carry_dcgm_exporter_s_instance_labels(lab):
    url, _ = lab
    fb = wait_until(lambda: query(url, 'DCGM_FI_DEV_FB_USED{GPU_I_ID!=""}'), lambda: "MIG framebuffer series")
    assert {(r["metric"]["GPU_I_ID"], r["metric"]["GPU_I_PROFILE"]) for r in fb} == {
        ("1", "3g.40gb"), ("5", "2g.20gb"), ("9", "1g.10gb"), ("10", "1g.10gb")}
    procs = query(url, 'vram_process_memory_bytes{GPU_I_ID!=""}')
    assert {(r["metric"]["user"], r["metric"]["GPU_I_ID"], r["metric"]["GPU_I_PROFILE"]) for r in procs} == {
        ("alice", "1", "3g.40gb"), ("bob", "5", "2g.20gb"), ("carol", "9", "1g.10gb")}


def test_xid_errors_are_counted_from_nvml_events(lab):
    url, _ = lab
    xids = wait_until(lambda: {r["metric"]["xid"]: float(r["value"][1]) for r in query(url, "vram_gpu_xid_errors_total")
                               if r["metric"]["gpu"] == "2"} == {"48": 2.0, "63": 1.0} or None,
                      lambda: query(url, "vram_gpu_xid_errors_total"))
    assert xids
    assert [float(r["value"][1]) for r in query(url, 'DCGM_FI_DEV_XID_ERRORS{gpu="2",Hostname="gpu-u"}')] == [48.0]
    # a watched GPU without events is 0; a lost one (faulty's GPU 1) has no series
    events = {(r["metric"]["instance"], r["metric"]["gpu"]) for r in query(url, "vram_gpu_xid_events_total")}
    assert not any(gpu == "1" for inst, gpu in events if inst == lab[1][2])
