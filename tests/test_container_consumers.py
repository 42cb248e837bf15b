"""What reads the mapped rows inside a container besides ps and status: a process's own view
(`vram ps --env PID`) and the history (`vram record`, `vram report`, `vram life`). Run as
test_container_inside.py runs vram: in a real PID namespace, on a scenario whose pids are the
host's, with a process of the namespace numbered as a host pid NVML lists for a process outside
it, so that a host pid taken for a pid here would show."""

from __future__ import annotations

import json

import pytest
from helpers import clean_env
from test_container_inside import OUTSIDE, Container, _can_unshare, scenario

GiB = 1024**3


@pytest.fixture
def container(children):
    why = _can_unshare()
    if why:
        pytest.skip(why)
    return Container(children)


@pytest.fixture
def dev(tmp_path):
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (d / name).write_text("")
    return d


@pytest.fixture
def env(tmp_path):
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     COLUMNS="200")


@pytest.fixture
def told_gpu_1(children, monkeypatch):
    """A container whose processes were told GPU 1 (its init inherits this environment)."""
    why = _can_unshare()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return Container(children)


def test_a_process_view_is_of_the_process_here(told_gpu_1, write_scenario, dev, env):
    container = told_gpu_1
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    decoy, _host = container.start(at=OUTSIDE)
    path = scenario(write_scenario, dev, {(host, here): {"0": "6GiB"}})

    # The decoy holds nothing: the 3 GiB NVML lists under host pid OUTSIDE are another's.
    other = container.vram("ps", "--simulate", str(path), "--env", str(decoy), "--json", env=env)
    assert other.rc == 0, other.err
    assert other.json()["holds"] == []
    # The process pidmap matched is read as any process here: its environment, told beside held.
    mine = container.vram("ps", "--simulate", str(path), "--env", str(here), "--json", env=env)
    assert mine.rc == 1, mine.err  # a mismatch, as for a process on the host
    view = json.loads(mine.out)
    assert view["environment_problem"] is None and view["environment"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert [h["gpu"] for h in view["holds"]] == [0] and view["mismatch"] == "told GPU 1, holds memory on GPU 0"


def test_history_keeps_a_host_pid_apart_from_the_same_number_here(container, write_scenario, dev, env, tmp_path):
    here, host = container.start(dev / "nvidia0", dev / "nvidiactl")
    container.start(at=OUTSIDE)  # pid OUTSIDE here: holds no GPU
    path = scenario(write_scenario, dev, {(host, here): {"0": "6GiB"}})
    db = str(tmp_path / "history.db")

    recorded = container.vram("record", "--simulate", str(path), "--db", db, "--interval", "1s", "--samples", "2",
                              "--quiet", env=env)
    assert recorded.rc == 0, recorded.err
    lives = container.vram("report", "--db", db, "--by", "life", "--json", env=env)
    assert lives.rc == 0, lives.err
    rows = lives.json()["rows"]
    assert [(r["pid"], r["peak_memory"]) for r in rows] == [(here, 6 * GiB)]
    # pid OUTSIDE here never held GPU memory: the host's process of that number is not its life
    life = container.vram("life", "--db", db, str(OUTSIDE), env=env)
    assert life.rc == 1 and f"no recorded life of pid {OUTSIDE}" in life.out + life.err, life.out
    # the outside holder's memory is in its GPU's use
    gpus = container.vram("report", "--db", db, "--by", "gpu", "--json", env=env).json()["rows"]
    assert max(r["peak_memory"] for r in gpus if r["gpu"] == 1) == 3 * GiB
