"""What `vram record` asks the driver (issue 36): only the fields the history keeps. Power limit,
fan, encoder and decoder use (backends.EXTRAS) are shown by the views and served, never recorded:
the recorder's readings make none of those calls, while `vram status` still makes them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import clean_env

from vramkit.backends import EXTRAS
from vramkit.collector import Collector
from vramkit.history.recorder import Recorder
from vramkit.machine import open_machine
from vramkit.nvml.backend import NOT_READ

EXTRA_CALLS = ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetFanSpeed", "nvmlDeviceGetEncoderUtilization",
               "nvmlDeviceGetDecoderUtilization")
COUNTED = (*EXTRA_CALLS, "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature")

# `vram` itself in a real process, with the simulator's NVML calls counted (the counts on stderr at exit).
COUNTING_VRAM = f"""
import atexit, json, sys
from vramkit.nvml.sim import SimulatedNvml
counts = {{}}
for name in {COUNTED!r}:
    def counted(self, *args, _name=name, _call=getattr(SimulatedNvml, name), **kwargs):
        counts[_name] = counts.get(_name, 0) + 1
        return _call(self, *args, **kwargs)
    setattr(SimulatedNvml, name, counted)
atexit.register(lambda: print("COUNTS " + json.dumps(counts), file=sys.stderr))
from vramkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def counting_vram(*args: str) -> dict[str, int]:
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH="1767225600")
    done = subprocess.run([sys.executable, "-c", COUNTING_VRAM, *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stderr.splitlines() if x.startswith("COUNTS ")][-1]
    counts: dict[str, int] = json.loads(line[len("COUNTS "):])
    return counts


def test_vram_record_never_asks_for_what_it_does_not_keep(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    counts = counting_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "1s", "--samples", "3",
                           "--quiet")
    gpus = len(open_machine("demo").snapshot().gpus)
    assert counts.get("nvmlDeviceGetMemoryInfo", 0) >= 3 * gpus  # it did read every GPU three times
    assert counts.get("nvmlDeviceGetTemperature", 0) >= 3 * gpus  # and what it keeps
    assert {name: counts.get(name, 0) for name in EXTRA_CALLS} == dict.fromkeys(EXTRA_CALLS, 0)


def test_vram_status_still_reads_them_all() -> None:
    counts = counting_vram("status", "--simulate", "demo", "--json")
    gpus = len(open_machine("demo").snapshot().gpus)
    for name in EXTRA_CALLS:
        assert counts.get(name, 0) >= gpus, name


def test_a_reading_without_extras_says_they_were_not_read() -> None:
    collector = Collector(open_machine("demo"), interval=1, extras=Recorder.EXTRAS)
    try:
        lean = collector.sample()
        collector.extras = EXTRAS
        full = collector.sample()
    finally:
        collector.close()
    assert Recorder.EXTRAS == frozenset()
    for before, after in zip(lean.gpus, full.gpus, strict=True):
        for field in EXTRAS:
            assert getattr(before, field) is None and before.na[field] == NOT_READ, field
            assert after.na.get(field) != NOT_READ, field
        # everything the history keeps is there in both
        for field in ("memory_used", "memory_total", "utilization", "temperature", "power_draw"):
            assert (getattr(before, field) is None) == (getattr(after, field) is None), field
    assert any(g.fan is not None or g.power_limit is not None for g in full.gpus)
