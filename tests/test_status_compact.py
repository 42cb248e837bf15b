"""Small things users of gpustat and nvitop expect (issue 31, item 15): the host's name in the
banner and in --json; a time column in `status --csv` (each --watch frame's own) and `ps --csv`;
`status --compact` (one line per GPU) and `--no-processes`; a MIG process's share of its instance."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import subprocess
import sys

import pytest
from helpers import assert_one_line_error, clean_env, run_vram, scenario_data, vram_argv

import vramkit
from vramkit.render.banner import banner
from vramkit.render.data import ps_json, status_doc
from vramkit.render.style import style_for

DEMO = scenario_data("demo")


def test_a_real_machine_is_named_in_the_banner_and_the_json():
    snap = dataclasses.replace(vramkit.snapshot(simulate="demo"), simulated=False, scenario=None)
    host = os.uname().nodename
    assert banner(snap, style_for(sys.stdout, no_color=True), 200).startswith(host + "  ·  ")
    assert status_doc(snap)["hostname"] == host
    assert '"hostname": "' + host in ps_json(snap, snap.processes)


def test_a_simulated_machine_is_not_given_this_hosts_name():
    result = run_vram("status", "--simulate", "demo", "--json")
    assert result.json()["hostname"] is None
    assert run_vram("status", "--simulate", "demo").out.startswith("SIMULATED machine")


def test_every_csv_row_carries_its_readings_time():
    for command in ("status", "ps"):
        result = run_vram(command, "--simulate", "demo", "--csv")
        assert result.rc == 0, result.err
        rows = list(csv.DictReader(io.StringIO(result.out)))
        assert rows and all(r["time"].endswith("+00:00") and "T" in r["time"] for r in rows), command


def test_watch_csv_stamps_each_frame():
    """--watch runs until Ctrl-C: two frames are read (the header once, then a row per frame) and
    the command is stopped."""
    proc = subprocess.Popen(vram_argv("status", "--simulate", "demo", "--csv", "--watch", "0.2", "--gpu", "0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=clean_env(), text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    assert len(rows) == 2 and all(r["index"] == "0" and r["time"].endswith("+00:00") for r in rows)


def test_compact_is_one_line_per_gpu_with_its_holders_per_user():
    result = run_vram("status", "--simulate", "demo", "--compact", env=clean_env(COLUMNS="120"))
    assert result.rc == 0, result.err
    lines = result.out.splitlines()
    gpu_lines = [line for line in lines if line[:2].strip().isdigit()]
    assert len(gpu_lines) == len(DEMO["gpus"]) and all(len(line) <= 120 for line in lines)
    assert "bob 70.6GiB" in gpu_lines[0] and "70.6/80.0GiB" in gpu_lines[0]
    assert "alice 18.0GiB" in gpu_lines[4]
    assert lines[-1].startswith("total ")


def test_compact_names_a_lost_gpu_and_unknown_processes():
    out = run_vram("status", "--simulate", "faulty", "--compact").out
    assert any(line.startswith(" 1  LOST") for line in out.splitlines())


def test_no_processes_leaves_out_the_holder_lines():
    full = run_vram("status", "--simulate", "demo").out
    bare = run_vram("status", "--simulate", "demo", "--no-processes").out
    assert "41234" in full and "41234" not in bare and "bob" not in bare
    assert sum(1 for line in bare.splitlines() if "mem " in line) == len(DEMO["gpus"])


@pytest.mark.parametrize("args, needle", [(("--compact", "--json"), "--compact"),
                                          (("--no-processes", "--csv"), "--no-processes"),
                                          (("--compact", "--no-processes"), "not allowed with")])
def test_shapes_of_the_text_view_are_refused_with_data(args, needle):
    assert_one_line_error(run_vram("status", "--simulate", "demo", *args), 2, needle)


def test_a_mig_process_share_is_of_its_instance():
    snap = vramkit.snapshot(simulate="mig")
    data = run_vram("ps", "--simulate", "mig", "--json").json()
    for row in data["processes"]:
        dev = next(g for g in snap.gpus if g.index == row["gpu"])
        if row["mig_gi"] is None:
            total = dev.memory_total
        else:
            total = next(m.memory_total for m in dev.mig_devices if m.gi == row["mig_gi"])
            assert total < dev.memory_total
        assert row["memory_percent"] == round(100 * row["memory"] / total, 1)
    text = run_vram("ps", "--simulate", "mig", env=clean_env(COLUMNS="160")).out
    row = next(line for line in text.splitlines() if line.lstrip().startswith("0/1 "))
    share = round(100 * data["processes"][[r["pid"] for r in data["processes"]].index(70001)]["memory"]
                  / next(m.memory_total for m in snap.gpus[0].mig_devices if m.gi == 1))
    assert f" {share}%" in row
