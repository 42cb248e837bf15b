"""docs/json.md names every key the JSON outputs print: a key added to the output without a line
in the schema page fails here."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import clean_env, run_vram

DOC = (Path(__file__).resolve().parents[2] / "docs" / "json.md").read_text()
# `key` or `parent.key` (a nested key)
DOCUMENTED = {name.rsplit(".", 1)[-1] for name in re.findall(r"`([a-z_][a-z0-9_.]*)`", DOC)}


def _undocumented(obj: dict) -> set[str]:
    return {key for key in obj if key not in DOCUMENTED}


def test_status_all_json_gpu_process_and_health_keys_are_documented():
    data = run_vram("status", "--simulate", "unhealthy", "--all", "--json", env=clean_env()).json()
    gpu = data["gpus"][0]
    assert gpu["health"] is not None
    assert _undocumented(gpu) == set()
    assert _undocumented(gpu["health"]) == set()
    assert _undocumented(gpu["processes"][0]) == set()


def test_ps_and_pick_json_keys_are_documented():
    ps = run_vram("ps", "--simulate", "demo", "--json", env=clean_env()).json()
    assert _undocumented(ps["processes"][0]) == set()
    pick = run_vram("pick", "--simulate", "demo", "--json", "--min-free", "1GiB", env=clean_env()).json()
    assert _undocumented(pick) == set()


def test_info_json_topology_keys_are_documented():
    data = run_vram("info", "--simulate", "unhealthy", "--json", env=clean_env()).json()
    assert _undocumented(data) == set()
    assert _undocumented(data["topology"]) == set()
