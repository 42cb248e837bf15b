"""The history recorded inside a container (`vram record`, `vram report`, `vram life`) keeps a
process life under the pid here, and a holder with no pid here as a life of its host pid, kept
apart from this container's pids (the fixtures: conftest.py here)."""

from __future__ import annotations

import pytest

GiB = 1024**3


@pytest.mark.slow
def test_history_keeps_a_host_pid_apart_from_the_same_number_here(container, scenario, dev, env, tmp_path):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    container.start(at=scenario.outside)  # the outside host pid's number here: holds no GPU
    path = scenario({(host, here): {"0": "6GiB"}})
    db = str(tmp_path / "history.db")

    recorded = container.vram("record", "--simulate", str(path), "--db", db, "--interval", "1s", "--samples", "2",
                              "--quiet", env=env)
    assert recorded.rc == 0, recorded.err
    lives = container.vram("report", "--db", db, "--by", "life", "--json", env=env)
    assert lives.rc == 0, lives.err
    rows = lives.json()["rows"]
    # the process here under its pid; the holder outside under its host pid, with no pid here
    assert sorted(((r["pid"], r["nvml_pid"], r["gpus"], r["peak_memory"]) for r in rows), key=repr) == [
        (here, None, [0], 6 * GiB), (None, scenario.outside, [1], 3 * GiB)]
    # that pid here never held GPU memory: the host's process of that number is not its life
    life = container.vram("life", "--db", db, str(scenario.outside), env=env)
    assert life.rc == 1 and f"no recorded life of pid {scenario.outside}" in life.out + life.err, life.out
    outside = container.vram("life", "--db", db, "--host-pid", str(scenario.outside), "--json", env=env)
    assert outside.rc == 0, outside.err
    doc = outside.json()
    assert (doc["pid"], doc["nvml_pid"]) == (None, scenario.outside)
    assert [(lv["pid"], lv["nvml_pid"], lv["peak_memory"]) for lv in doc["lives"]] == [
        (None, scenario.outside, 3 * GiB)]
    said = container.vram("life", "--db", db, "--host-pid", str(scenario.outside), env=env)
    assert said.out.startswith(f"host pid {scenario.outside} (outside this container's /proc) · ?"), said.out
    zh = container.vram("life", "--db", db, "--host-pid", str(scenario.outside), env=dict(env, VRAM_LANG="zh_CN"))
    assert zh.out.startswith(f"宿主机 pid {scenario.outside}（不在本容器的 /proc 中） · ?"), zh.out
    assert container.vram("life", "--db", db, "--host-pid", str(here), env=env).rc == 1
    # the report says it in words, never as a pid here
    text = container.vram("report", "--db", db, "--by", "life", env=env).out
    row = next(line for line in text.splitlines() if "host pid" in line)
    assert row.split()[0] == "-" and f"host pid {scenario.outside} (outside this container's /proc)" in row, text
    # and its memory is in its GPU's use
    gpus = container.vram("report", "--db", db, "--by", "gpu", "--json", env=env).json()["rows"]
    assert max(r["peak_memory"] for r in gpus if r["gpu"] == 1) == 3 * GiB


@pytest.mark.slow
def test_a_holder_outside_is_one_life_across_a_restart_of_the_recorder(container, scenario, dev, env, tmp_path):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    path = scenario({(host, here): {"0": "6GiB"}})
    db = str(tmp_path / "history.db")
    for _ in range(2):
        recorded = container.vram("record", "--simulate", str(path), "--db", db, "--interval", "1s", "--samples", "2",
                                  "--quiet", env=env)
        assert recorded.rc == 0, recorded.err
    rows = container.vram("report", "--db", db, "--by", "life", "--json", env=env).json()["rows"]
    assert sorted((r["pid"], r["nvml_pid"], r["lives"]) for r in rows if r["nvml_pid"]) == [(None, scenario.outside, 1)]
    every = container.vram("life", "--db", db, "--host-pid", str(scenario.outside), "--every-life", "--json", env=env)
    assert len(every.json()["lives"]) == 1
