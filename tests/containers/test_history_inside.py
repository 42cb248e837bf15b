"""The history recorded inside a container (`vram record`, `vram report`, `vram life`) keeps a
process life under the pid here, and a holder with no pid here only in its GPU's use (the
fixtures: conftest.py here)."""

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
    assert [(r["pid"], r["peak_memory"]) for r in rows] == [(here, 6 * GiB)]
    # that pid here never held GPU memory: the host's process of that number is not its life
    life = container.vram("life", "--db", db, str(scenario.outside), env=env)
    assert life.rc == 1 and f"no recorded life of pid {scenario.outside}" in life.out + life.err, life.out
    # the outside holder's memory is in its GPU's use
    gpus = container.vram("report", "--db", db, "--by", "gpu", "--json", env=env).json()["rows"]
    assert max(r["peak_memory"] for r in gpus if r["gpu"] == 1) == 3 * GiB
