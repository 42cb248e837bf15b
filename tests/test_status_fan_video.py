"""Fan speed and the GPU's video encoder/decoder use (issue 31 item 15): read on every snapshot
through nvmlDeviceGetFanSpeed / nvmlDeviceGetEncoderUtilization / ...DecoderUtilization, shown
after the power in `vram status` where the GPU has them and the line has room, in --json and
--csv always (null / N/A with the reason), in `vram info`, and in /metrics on every reading."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import GPU_LINE, assert_one_line_error, clean_env, run_vram, strip_ansi
from prometheus_client.parser import text_string_to_metric_families

import vramkit
from vramkit.render.text_width import cells
from vramkit.serve.metrics import ExportState, render

# Two workstation cards with fans (one encoding a video), a passively cooled one with no video engines.
WORKSTATION = {
    "name": "workstation",
    "gpus": [
        {"name": "NVIDIA RTX A6000", "memory_total": "48GiB", "utilization": 40, "fan": 55,
         "encoder_utilization": 35, "decoder_utilization": 12},
        {"name": "NVIDIA RTX A6000", "memory_total": "48GiB", "fan": 30, "encoder_utilization": 0,
         "decoder_utilization": 0},
        {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "80GiB", "utilization": 10},
    ],
    "processes": [{"pid": 4242, "user": "ann", "command": "ffmpeg -hwaccel cuda -i in.mp4 out.mp4",
                   "gpus": {"0": "2GiB"}}],
}


@pytest.fixture
def workstation(tmp_path):
    path = tmp_path / "workstation.json"
    path.write_text(json.dumps(WORKSTATION))
    return str(path)


def gpu_lines(scenario: str, columns: int, *args: str) -> dict[int, str]:
    result = run_vram("status", "--simulate", scenario, *args, env=clean_env(COLUMNS=str(columns)))
    assert result.rc == 0, result.err
    return {int(m.group(1)): line for line in strip_ansi(result.out).splitlines() if (m := GPU_LINE.match(line))}


def test_the_fan_and_a_busy_video_engine_follow_the_power(workstation):
    lines = gpu_lines(workstation, 160)
    assert lines[0].endswith("60/400W fan  55%  enc  35% dec  12%"), lines[0]
    assert lines[1].endswith("60/400W fan  30%"), lines[1]  # its video engines are idle: not shown
    assert lines[2].endswith("60/400W"), lines[2]  # no fan, no video engine: nothing, and no N/A line
    text = run_vram("status", "--simulate", workstation, env=clean_env(COLUMNS="160")).out
    assert "N/A" not in text and "encoder_utilization" not in text
    # the recorded H200 has no fan (and no video engine the simulator knows of): nothing either
    line = gpu_lines("h200", 160)[0]
    assert "fan" not in line and "enc" not in line and line.endswith("/700W"), line


@pytest.mark.parametrize("columns, shown", [(80, ()), (100, ("fan",)), (120, ("fan", "enc")), (200, ("fan", "enc"))])
def test_they_show_where_the_line_has_room(workstation, columns, shown):
    lines = gpu_lines(workstation, columns)
    assert all(cells(line) <= columns for line in lines.values()), lines
    assert ("fan" in lines[0], "enc" in lines[0]) == ("fan" in shown, "enc" in shown), lines[0]
    # the bars shrink for them, alike on every GPU: the columns line up down the page
    assert len({line.index(" util ") for line in lines.values()}) == 1, lines


def test_json_and_csv_carry_them_with_the_reason_when_na(workstation):
    gpus = run_vram("status", "--simulate", workstation, "--json").json()["gpus"]
    assert [(g["fan"], g["encoder_utilization"], g["decoder_utilization"]) for g in gpus] == \
        [(55, 35, 12), (30, 0, 0), (None, None, None)]
    assert {k: gpus[2]["na"][k] for k in ("encoder_utilization", "decoder_utilization")} == \
        {"encoder_utilization": "not supported", "decoder_utilization": "not supported"}
    rows = list(csv.DictReader(io.StringIO(run_vram("status", "--simulate", workstation, "--csv").out)))
    assert [(r["fan"], r["encoder_utilization"], r["decoder_utilization"]) for r in rows] == \
        [("55", "35", "12"), ("30", "0", "0"), ("N/A", "N/A", "N/A")]


def test_info_lists_them(workstation):
    out = run_vram("info", "--simulate", workstation).out
    video = [line.split(None, 1)[1] for line in out.splitlines() if line.strip().startswith("video ")]
    assert video == ["encoder 35%  decoder 12%", "encoder 0%  decoder 0%", "N/A (not supported)"]


def test_a_refused_video_engine_says_so(tmp_path):
    data = json.loads(json.dumps(WORKSTATION))
    data["gpus"][0]["no_permission"] = ["encoder_decoder"]
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(data))
    gpu = run_vram("status", "--simulate", str(path), "--json").json()["gpus"][0]
    assert (gpu["encoder_utilization"], gpu["na"]["encoder_utilization"]) == (None, "no permission")
    assert gpu["fan"] == 55


def test_metrics_export_them_on_every_reading_without_health(workstation):
    snap = vramkit.snapshot(simulate=workstation)
    assert all(g.health is None for g in snap.gpus)  # the exporter reads health every 10 s only
    text = render(snap, ExportState(hostname="ws", version="1"), compat=("dcgm", "nvitop")).decode()
    values = {(s.name, s.labels.get("gpu") or s.labels.get("index")): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    assert values[("vram_gpu_encoder_utilization_ratio", "0")] == 0.35
    assert values[("vram_gpu_decoder_utilization_ratio", "0")] == 0.12
    assert values[("DCGM_FI_DEV_ENC_UTIL", "0")] == 35
    assert values[("gpu_decoder_utilization_Percentage", "0")] == 12
    assert ("vram_gpu_encoder_utilization_ratio", "2") not in values  # N/A: no series, never 0


def test_the_scenario_fields_are_checked(tmp_path):
    data = json.loads(json.dumps(WORKSTATION))
    data["gpus"][0]["encoder_utilization"] = 150
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert_one_line_error(run_vram("status", "--simulate", str(path)), 2, "gpus[0].encoder_utilization")


def test_amd_gpus_say_why_they_have_none():
    gpus = run_vram("status", "--simulate", "mi300x", "--json").json()["gpus"]
    assert gpus and all(g["encoder_utilization"] is None and "video engines" in g["na"]["encoder_utilization"]
                        and g["decoder_utilization"] is None and g["na"]["decoder_utilization"] for g in gpus)
