"""The live view's cost: `vram top` vs `nvitop`, both refreshing every second in a real terminal
(tmux), on one simulated machine of 8 GPUs and 500 processes: CPU, memory and the first frame.

The processes are real (spawned `sleep`s), so nvitop's psutil finds each one in /proc as vram
does. nvitop runs on the pynvml shim (`vram sim shim`); vram on `--simulate FILE`. Each program
runs alone in its own tmux session (120x40) for a warm-up, then its CPU seconds (user + system,
from /proc/PID/stat, children included) are measured over --seconds of wall time. Rounds alternate
the order. The ratio vram / nvitop is what counts; lower is better.

Also per program and round: the first frame (from starting the tmux session to the first screen
capture showing memory in GiB, polled every 10 ms: the same start-up cost of tmux for both), and
its resident memory (VmRSS at the end of the measured time, and the peak, VmHWM).

A third program is the floor the live view stands on: an empty Textual app (one Static line, no
data), run the same way in the same rounds. vram top keeps Textual (DESIGN.md), so its distance to
this floor is what it could still save.

    .venv/bin/python benchmarks/bench_top.py [--seconds 60] [--processes 500] [--gpus 8] [--rounds 1]
        [--vramkit-src DIR]     (vramkit from an older tree's src/: before/after)
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import BIN, Sleepers, cpu_seconds, environment, scenario, write_scenario  # noqa: E402

from vramkit.nvml.shim import write_shim  # noqa: E402

MiB = 2**20

# The floor: an empty Textual app, one line of text (so its first frame can be seen), no data.
FLOOR_APP = """
from textual.app import App
from textual.widgets import Static

class Floor(App):
    def compose(self):
        yield Static("empty Textual app: 0 GiB")

Floor().run()
"""


def _command(script: str, module: str, *args: str) -> list[str]:
    path = BIN / script
    return [str(path), *args] if path.exists() else [sys.executable, "-m", module, *args]


def memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of pid, in bytes: resident now and at its peak."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


class TmuxRun:
    """One program alone in a detached tmux session of its own server."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], tmpdir: Path):
        self.started = time.perf_counter()
        self.name = name
        self.env = {**env, "TMUX_TMPDIR": str(tmpdir)}
        self.env.pop("TMUX", None)
        command = "exec " + " ".join(shlex.quote(a) for a in argv)  # exec: the pane's pid is the program
        self._tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh", "-c", command)
        self.pid = int(self._tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", *args], env=self.env, capture_output=True, text=True, check=True,
                              timeout=30).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-server"], env=self.env, capture_output=True, timeout=30)


class Result:
    def __init__(self, cpu: float, first_frame: float, rss: int, peak_rss: int):
        self.cpu, self.first_frame, self.rss, self.peak_rss = cpu, first_frame, rss, peak_rss


def _wait_for(run: TmuxRun, text: str, poll: float) -> float:
    """Seconds from the session's start until the screen shows text."""
    deadline = time.monotonic() + 30
    while text not in run.screen():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_top: {run.name} did not show {text!r}:\n{run.screen()}")
        time.sleep(poll)
    return time.perf_counter() - run.started


def measure(name: str, argv: list[str], env: dict[str, str], tmpdir: Path, seconds: float, warmup: float,
            ready: str) -> Result:
    """`ready`: text only the running view shows (the first frame may come before it)."""
    run = TmuxRun(name, argv, env, tmpdir)
    try:
        first_frame = _wait_for(run, "GiB", 0.01)
        _wait_for(run, ready, 0.2)
        time.sleep(warmup)
        start = cpu_seconds(run.pid)
        time.sleep(seconds)
        used = cpu_seconds(run.pid) - start
        rss, peak = memory(run.pid)
        if ready not in run.screen():
            raise SystemExit(f"bench_top: {name} stopped showing {ready!r}:\n{run.screen()}")
        return Result(used, first_frame, rss, peak)
    finally:
        run.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured wall time per program and round (60)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds after the first frame before measuring (3)")
    ap.add_argument("--processes", type=int, default=500, help="real processes holding GPU memory (500)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds; the order alternates (1)")
    ap.add_argument("--vramkit-src", type=Path, metavar="DIR",
                    help="run vram top from this source tree (the src/ of an older checkout: before/after)")
    args = ap.parse_args(argv)
    if shutil.which("tmux") is None:
        raise SystemExit("bench_top: needs tmux")
    src = args.vramkit_src.resolve() if args.vramkit_src else None
    if src is not None and not (src / "vramkit" / "__init__.py").is_file():
        raise SystemExit(f"bench_top: --vramkit-src {src} has no vramkit/__init__.py")

    with tempfile.TemporaryDirectory(prefix="vram-bench-top-") as tmp, Sleepers(args.processes) as sleepers:
        tmp_path = Path(tmp)
        scenario_file = write_scenario(tmp_path / "machine.json", scenario(sleepers.pids, real=True, gpus=args.gpus))
        shim = write_shim(tmp_path / "shim").parent
        base = {k: v for k, v in os.environ.items()
                if k not in ("PYTHONPATH", "VRAM_SIMULATE", "PYTHONDONTWRITEBYTECODE", "NO_COLOR")}
        base["TERM"] = "xterm-256color"
        top_args = ("top", "--simulate", str(scenario_file), "--interval", "1")
        vram = ([sys.executable, "-m", "vramkit", *top_args], {**base, "PYTHONPATH": str(src)}) if src else (
            _command("vram", "vramkit", *top_args), base)
        programs = {
            "vram top": (*vram, "GPU processes"),
            "nvitop": (_command("nvitop", "nvitop", "--interval", "1"),
                       {**base, "PYTHONPATH": str(shim), "VRAM_SIMULATE": str(scenario_file)}, "GiB"),
            "floor": ([sys.executable, "-c", FLOOR_APP], base, "empty Textual app"),
        }
        print(f"bench_top: {args.gpus} simulated GPUs, {args.processes} real processes, 1 s refresh, "
              f"{args.seconds:g} s measured per program and round, tmux 120x40; {environment()}")
        if src is not None:
            print(f"vramkit from {src}")
        results: dict[str, list[Result]] = {name: [] for name in programs}
        names = list(programs)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                cmd, env, ready = programs[name]
                sub = tmp_path / f"tmux-{r}-{name.replace(' ', '-')}"
                sub.mkdir()
                results[name].append(measure(f"bench{r}", cmd, env, sub, args.seconds, args.warmup, ready))

    total = {name: sum(x.cpu for x in v) for name, v in results.items()}
    first = {name: statistics.median(x.first_frame for x in v) for name, v in results.items()}
    rss = {name: max(x.rss for x in v) for name, v in results.items()}
    peak = {name: max(x.peak_rss for x in v) for name, v in results.items()}
    span = args.seconds * args.rounds
    print(f"\n{'program':<10} {'CPU s':>8} {'CPU %':>7} {'vs nvitop':>9}  {'first frame':>11} {'vs nvitop':>9}"
          f"  {'RSS MiB':>7} {'peak':>6} {'vs nvitop':>9} {'vs floor':>9}")
    for name in programs:
        print(f"{name:<10} {total[name]:8.2f} {100 * total[name] / span:6.1f}% {total[name] / total['nvitop']:8.2f}x"
              f"  {1000 * first[name]:9.0f}ms {first[name] / first['nvitop']:8.2f}x"
              f"  {rss[name] / MiB:7.1f} {peak[name] / MiB:6.1f} {rss[name] / rss['nvitop']:8.2f}x"
              f" {(rss[name] - rss['floor']) / MiB:+8.1f}M")
    print("\nper round, CPU s: " + "; ".join(f"{n} " + ", ".join(f"{x.cpu:.2f}" for x in v)
                                             for n, v in results.items()))
    print("per round, first frame ms: " + "; ".join(f"{n} " + ", ".join(f"{1000 * x.first_frame:.0f}" for x in v)
                                                     for n, v in results.items()))
    targets = [("CPU at most 0.30x nvitop's", total["vram top"] <= 0.30 * total["nvitop"],
                f"{total['vram top'] / total['nvitop']:.2f}x"),
               ("RSS no more than nvitop's", rss["vram top"] <= rss["nvitop"],
                f"{rss['vram top'] / MiB:.1f} vs {rss['nvitop'] / MiB:.1f} MiB"),
               ("first frame no later than nvitop's", first["vram top"] <= first["nvitop"],
                f"{1000 * first['vram top']:.0f} vs {1000 * first['nvitop']:.0f} ms")]
    above = {name: (rss[name] - rss["floor"]) / MiB for name in ("vram top", "nvitop")}
    print(f"\nthe floor (an empty Textual app): RSS {rss['floor'] / MiB:.1f} MiB; vram top holds "
          f"{above['vram top']:.1f} MiB above it, nvitop {above['nvitop']:+.1f}")
    for what, met, value in targets:
        print(f"target ({what}): {'MET' if met else 'NOT MET'} ({value})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
