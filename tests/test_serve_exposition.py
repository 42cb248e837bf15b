"""vram serve's /metrics text, written directly (serve/metrics.render), is what prometheus_client's
generate_latest writes for the same snapshot through SnapshotCollector: the same families, help,
types, samples, labels and values, byte for byte, on every bundled kind of machine, with hostile
names, --process-commands, --dcgm-names and the per-process series cap; and promtool accepts it."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from vramkit.gpu_state import Snapshot
from vramkit.machine import open_machine
from vramkit.serve.metrics import ExportState, SnapshotCollector, go_float, render

OPTIONS = {
    "defaults": {},
    "commands": {"commands": True},
    "dcgm": {"dcgm_names": True},
    "all": {"commands": True, "dcgm_names": True},
    "cap": {"max_process_series": 3, "commands": True},
    "cap0": {"max_process_series": 0},
    "compat": {"compat": ("dcgm", "nvitop", "nvidia-smi-exporter"), "commands": True},
    "compat-cap": {"compat": ("nvitop", "nvidia-smi-exporter"), "max_process_series": 2},
}
# Quotes, backslashes, newlines, terminal escapes, lone surrogates, bidi overrides, a long name.
HOSTILE_USERS = ["ev\u001b[31mil\"q\\b\nx", "{}=,\"\\", "\u202eeman", "lone\ud800sur", "ok-user", "u" * 300]
HOSTILE_COMMANDS = ["python -c \"print('x')\" --token=T \\ \n next", "a} b{c=\"d\" # \r\n", "bad \udcff byte",
                    "quote\" back\\slash", "plain", "c" * 500]
HOSTNAME = 'gpu-"a"\\b\nc'


def hostile_scenario(tmp_path: Path) -> Path:
    data = {"name": 'hostile "scenario" \\ x', "driver_version": '550"\\1',
            "gpus": [{"memory_total": "80GiB", "name": 'A100 "big" \\ GPU', "uuid": 'GPU-"q"\\z'},
                     {"memory_total": "80GiB", "name": "x" * 300}],
            "processes": [{"pid": 100 + i, "gpus": {str(i % 2): f"{i + 1}GiB"}, "user": user, "command": command}
                          for i, (user, command) in enumerate(zip(HOSTILE_USERS, HOSTILE_COMMANDS))]}
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    return path


def read(simulate: str, health: bool = False) -> Snapshot:
    machine = open_machine(simulate)
    try:
        snap = machine.snapshot()
        if health:  # what vram serve attaches at its slower cadence
            machine.read_health(snap, settle=0)
        return snap
    finally:
        machine.close()


def reference(snap: Snapshot | None, state: ExportState, **options) -> bytes:
    """What prometheus_client writes for the same families."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap, state, **options))
    body: bytes = generate_latest(registry)
    return body


def families(text: bytes) -> list[tuple]:
    """Every family as parsed: name, type, help, and its samples (name, labels, value) in order."""
    return [(f.name, f.type, f.documentation,
             [(s.name, sorted(s.labels.items()), "NaN" if math.isnan(s.value) else s.value) for s in f.samples])
            for f in text_string_to_metric_families(text.decode())]


def assert_same(snap: Snapshot | None, options: dict, *, read_seconds: float | None = 0.0123,
                hostname: str = "gpu-a") -> tuple[bytes, ExportState]:
    ours_state = ExportState(hostname=hostname, version="1.2.3", read_seconds=read_seconds, read_errors=7)
    theirs_state = replace(ours_state)
    ours = render(snap, ours_state, **options)
    xids = options.get("xids")
    theirs = reference(snap, theirs_state, **{k: v for k, v in options.items() if k != "xids"}, xids=lambda: xids)
    assert families(ours) == families(theirs)
    assert ours == theirs  # byte for byte, as a check that nothing else (order, spacing) drifted
    assert ours_state.process_series_dropped == theirs_state.process_series_dropped
    return ours, ours_state


@pytest.mark.parametrize("simulate", ["demo", "faulty", "mig", "lab-day"])
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_render_equals_prometheus_client_on_bundled_machines(simulate, option):
    body, _ = assert_same(read(simulate), OPTIONS[option])
    assert b"vram_gpu_memory_used_bytes{" in body


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_render_equals_prometheus_client_with_hostile_names(tmp_path, option):
    snap = read(str(hostile_scenario(tmp_path)))
    body, _ = assert_same(snap, OPTIONS[option], hostname=HOSTNAME)
    assert b'\\"' in body and b"\\\\" in body  # there was something to escape
    exported = OPTIONS[option].get("commands", False) and OPTIONS[option].get("max_process_series") != 0
    assert (b'command="' in body) == exported  # command lines only when asked for


@pytest.mark.parametrize("simulate", ["unhealthy", "mig", "faulty"])
@pytest.mark.parametrize("option", ["defaults", "all", "compat", "compat-cap"])
def test_render_equals_prometheus_client_with_health_xids_and_mig(simulate, option):
    from vramkit.serve.metrics import Xids

    snap = read(simulate, health=True)
    xids = Xids({0: {}, 2: {48: 2, 63: 1}}, {2: (63, 1_700_000_000.5)})
    body, _ = assert_same(snap, {**OPTIONS[option], "xids": xids})
    assert (b'xid="48"' in body) == (len(snap.gpus) > 2 and not snap.gpus[2].lost)
    if simulate == "mig":
        assert b'GPU_I_ID="1",GPU_I_PROFILE="3g.40gb"' in body  # MIG series and MIG processes


def test_the_cap_drops_the_smallest_holders_and_says_how_many():
    snap = read("demo")
    pairs = sum(len(g.processes) for g in snap.gpus)
    body, state = assert_same(snap, {"max_process_series": 2})
    assert state.process_series_dropped == pairs - 2
    memory = next(f for f in text_string_to_metric_families(body.decode()) if f.name == "vram_process_memory_bytes")
    largest = sorted((p.memory or 0 for g in snap.gpus for p in g.processes), reverse=True)[:2]
    assert sorted((s.value for s in memory.samples), reverse=True) == [float(m) for m in largest]


def test_render_before_the_first_reading_and_without_a_read_time():
    assert_same(None, {})
    assert_same(None, {"dcgm_names": True}, read_seconds=None)
    assert_same(read("demo"), {}, read_seconds=None)


def test_odd_values_are_written_as_go_writes_floats():
    snap = read("demo")
    g = snap.gpus[0]
    odd = replace(g, temperature=float("nan"), power_draw=float("inf"), power_limit=-float("inf"),
                  memory_used=10**20, memory_free=1234567.5, utilization=33, memory_utilization=None)
    assert_same(replace(snap, gpus=[odd, *snap.gpus[1:]]), {"dcgm_names": True})
    for value in [0, 1, -1, 0.1, 1e-9, 123456, 1234567, 12345678.9, 1e21, -1e21, 80 * 2**30, 2**53 + 1,
                  1 / 3, float("nan"), float("inf"), -float("inf"), -0.0, 5e-324]:
        assert go_float(value) == floatToGoString(value), value


@pytest.mark.skipif(not shutil.which("promtool"), reason="needs promtool (Debian package 'prometheus')")
def test_promtool_accepts_every_vram_family(tmp_path):
    for snap in (read("demo"), read(str(hostile_scenario(tmp_path)))):
        body = render(snap, ExportState(hostname=HOSTNAME, version="t", read_seconds=0.01), commands=True,
                      dcgm_names=True)
        lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True)
        problems = [line for line in (lint.stdout + lint.stderr).decode().splitlines() if line.strip()]
        # dcgm-exporter's own camelCase labels (modelName, Hostname) are kept on purpose.
        assert problems and all(p.startswith("DCGM_FI_") and "camelCase" in p for p in problems), problems
