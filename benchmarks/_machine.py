"""What the benchmarks share: a simulated 8-GPU machine whose processes can be real.

`Sleepers(n)` spawns n real processes (`sleep`) and kills them all on exit, on Ctrl-C and on
SIGTERM; each child also dies with its parent (PR_SET_PDEATHSIG), so none is left behind even
when the benchmark itself is killed. `scenario(pids, ...)` spreads processes over the GPUs.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

MiB = 2**20
GiB = 2**30
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Sleepers:
    """n real processes for the simulated GPUs to "hold memory" for."""

    def __init__(self, n: int):
        self.children: list[subprocess.Popen] = []
        self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        try:
            for _ in range(n):
                self.children.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL,
                                                      preexec_fn=_die_with_parent))
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def _on_term(self, signum, frame):
        raise SystemExit(128 + signum)  # unwinds through `with`/finally, which kill the children

    def close(self) -> None:
        for c in self.children:
            if c.poll() is None:
                c.kill()
        for c in self.children:
            c.wait()
        self.children = []
        signal.signal(signal.SIGTERM, self._old_term)

    def __enter__(self) -> Sleepers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def scenario(pids: list[int], real: bool, gpus: int = 8, name: str = "bench") -> dict:
    """`gpus` A100-80GB; process i on GPU i % gpus, every 10th also on the next GPU (DataParallel),
    every 25th both compute and graphics. Sizes vary and always fit; temperatures (40-84 C) and
    power draws (100-350 W) vary too, within what a working GPU shows on any number of GPUs."""
    per_gpu = -(-len(pids) // gpus) if pids else 1
    cap = 60 * GiB // (per_gpu + per_gpu // 10 + 1) // MiB  # MiB per process at most
    processes = []
    for i, pid in enumerate(pids):
        size = max(1, cap * (30 + (i * 37) % 70) // 100)
        held = {str(i % gpus): f"{size}MiB"}
        if i % 10 == 9 and gpus > 1:
            held[str((i + 1) % gpus)] = f"{size}MiB"
        p = {"pid": pid, "gpus": held, "type": "both" if i % 25 == 24 else "compute"}
        if real:
            p["source"] = "real"
        else:
            p.update(user=f"user{i % 7}", uid=1000 + i % 7, command=f"python train.py --run {i}",
                     age=f"{1 + i % 50}m", cpu_percent=float(i % 100), rss=f"{1 + i % 8}GiB")
        processes.append(p)
    return {
        "name": name,
        "description": f"benchmark: {gpus} GPUs, {len(pids)} {'real' if real else 'synthetic'} processes",
        "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_total": "81920MiB", "memory_reserved": "519MiB",
                  "utilization": (17 * g) % 100, "memory_utilization": (7 * g) % 100,
                  "temperature": 40 + (13 * g) % 45, "power": 100.0 + (10 * g) % 250, "power_limit": 400}
                 for g in range(gpus)],
        "processes": processes,
    }


def program_env(src: Path | None = None) -> dict[str, str]:
    """This environment for a measured program: bytecode cached, as after a normal install
    (PYTHONDONTWRITEBYTECODE would make vram compile its own modules on every run, ~35 ms, while
    the peers' .pyc came with pip); no scenario; vramkit from `src` (an older tree's src/) if given."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VRAM_SIMULATE", "PYTHONDONTWRITEBYTECODE")}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def write_scenario(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=1))
    return path


def wall_seconds(cmd: list[str], env: dict[str, str]) -> float:
    """Wall time of one whole run of cmd, stdout and stderr piped; a failed run ends the benchmark."""
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{Path(sys.argv[0]).stem}: {' '.join(cmd)[:200]} exited {result.returncode}: "
                         f"{result.stderr.decode(errors='replace').strip()[-500:]}")
    return elapsed


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole run of cmd, stdout and stderr pipes; a failed run ends the
    benchmark. CPU (user + system of the child) moves less than wall time on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{Path(sys.argv[0]).stem}: {' '.join(cmd)[:200]} exited {result.returncode}: "
                         f"{result.stderr.decode(errors='replace').strip()[-500:]}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def environment() -> str:
    """One line about where the numbers come from."""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        model = "?"
    return f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs ({model})"


# `vram record` with one knob the stepped-clock builds need: how often it rolls up (seconds of
# recorded time; the recorder's ROLLUP_EVERY). Everything else is the command as shipped.
_RECORD_WITH_ROLLUP_EVERY = """\
import sys
import time
import vramkit.history.recorder as recorder
recorder.ROLLUP_EVERY = float(sys.argv.pop(1))
from vramkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def record_stepped(db: Path, scenario_file: Path, *, epoch: float, start: float, interval: float,
                   duration: float, rollup_every: float | None = None) -> float:
    """Run the real `vram record` on the stepped scenario clock: samples every `interval` from
    scenario time `start` to `start + duration` (both included), stamped `epoch + t`, into `db`.
    `rollup_every` (seconds of recorded time) replaces the recorder's rollup cadence; None keeps
    it. Returns the wall seconds it took."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VRAM_SIMULATE")}
    env.update(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=repr(float(epoch)), VRAM_SIM_TIME=repr(float(start)))
    args = ["record", "--simulate", str(scenario_file), "--db", str(db), "--interval", f"{interval:g}s",
            "--duration", f"{duration:.0f}s", "--quiet"]
    if rollup_every is None:
        cmd = [sys.executable, "-m", "vramkit", *args]
    else:
        cmd = [sys.executable, "-c", _RECORD_WITH_ROLLUP_EVERY, repr(float(rollup_every)), *args]
    began = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise SystemExit(f"vram record exited {result.returncode}: {result.stderr.strip()[-500:]}")
    return time.perf_counter() - began


# ---------------------------------------------------------------- helpers for long-running programs
TICKS = os.sysconf("SC_CLK_TCK")

# vram on its real-driver path: `import pynvml` loads the shim (which reads $VRAM_SIMULATE once),
# then the variable goes, so vram opens NVML through pynvml as it does on a GPU server.
VRAM_VIA_DRIVER = """\
import os, sys
import pynvml
del os.environ["VRAM_SIMULATE"]
from vramkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of pid (and its waited-for children), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS  # utime, stime, cutime, cstime


def shim_env(shim_dir: Path, scenario_file: Path) -> dict[str, str]:
    """This environment with the pynvml shim first on the path, on `scenario_file`: what a peer
    (and vram on its driver path) runs under. Bytecode is cached for all, as after an install."""
    env = program_env()
    env.update(PYTHONPATH=str(shim_dir), VRAM_SIMULATE=str(scenario_file))
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for programs that cannot take port 0)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
