"""vram serve as users run it: a real server process on a free port, read over HTTP."""

from __future__ import annotations

import json
import re

import pytest
from helpers import assert_one_line_error, run_vram, scenario_data


def samples(text: str, name: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^{name}(\{{.*\}}) (\S+)$", text, re.M)}


def test_metrics_are_the_scenario_s_numbers_in_base_units(served):
    s = served("--simulate", "demo")
    code, text, headers = s.get("/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    data = scenario_data("demo")
    used = samples(text, "vram_gpu_memory_total_bytes")
    assert len(used) == len(data["gpus"])
    util = samples(text, "vram_gpu_utilization_ratio")
    assert all(0 <= v <= 1 for v in util.values())
    procs = samples(text, "vram_process_memory_bytes")
    assert procs and all('pid="' in k and 'user="' in k for k in procs)
    assert "command=" not in text  # never the command line by default
    assert s.stop() == 0


def test_process_commands_are_exported_only_when_asked(served):
    s = served("--simulate", "demo", "--process-commands")
    text = s.get("/metrics")[1]
    assert 'command="' in text


def test_the_snapshot_api_is_status_json(served):
    s = served("--simulate", "demo")
    code, body, _ = s.get("/api/v1/snapshot")
    assert code == 200
    assert set(json.loads(body)) >= {"gpus", "simulated", "scenario"}
    status = run_vram("status", "--simulate", "demo", "--json").json()
    assert [g["memory_total"] for g in json.loads(body)["gpus"]] == [g["memory_total"] for g in status["gpus"]]


def test_read_only_and_unknown_paths(served):
    s = served("--simulate", "demo")
    assert s.get("/metrics", method="POST")[0] == 405
    assert s.get("/nope")[0] == 404
    assert s.get("/static/../../etc/passwd")[0] == 404
    assert s.get("/api/v1/history?range=1h")[0] == 404  # no store named, none recorded


def test_the_port_in_use_is_one_line_and_exit_2(served):
    s = served("--simulate", "demo")
    port = s.base.rsplit(":", 1)[1]
    result = run_vram("serve", "--simulate", "demo", "--listen", f"127.0.0.1:{port}", timeout=30)
    assert_one_line_error(result, 2, f"--listen: 127.0.0.1:{port} is in use")


@pytest.mark.parametrize("listen", ["nowhere", "127.0.0.1:99999", "127.0.0.1:", "[::1]9787"])
def test_a_bad_listen_address_is_one_line_and_exit_2(listen):
    assert_one_line_error(run_vram("serve", "--simulate", "demo", "--listen", listen), 2, "--listen")
