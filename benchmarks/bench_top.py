"""CPU cost of the live view: `vram top` vs `nvitop`, both refreshing every second in a real
terminal (tmux), on one simulated machine of 8 GPUs and 500 processes.

The processes are real (spawned `sleep`s), so nvitop's psutil finds each one in /proc as vram
does. nvitop runs on the pynvml shim (`vram sim shim`); vram on `--simulate FILE`. Each program
runs alone in its own tmux session (120x40) for a warm-up, then its CPU seconds (user + system,
from /proc/PID/stat, children included) are measured over --seconds of wall time. Rounds alternate
the order. The ratio vram / nvitop is what counts; lower is better.

    .venv/bin/python benchmarks/bench_top.py [--seconds 60] [--processes 500] [--gpus 8] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import BIN, Sleepers, environment, scenario, write_scenario  # noqa: E402

from vramkit.nvml.shim import write_shim  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _command(script: str, module: str, *args: str) -> list[str]:
    path = BIN / script
    return [str(path), *args] if path.exists() else [sys.executable, "-m", module, *args]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of pid and its waited-for children."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    # fields[11..14] = utime, stime, cutime, cstime (stat fields 14-17)
    return sum(int(x) for x in fields[11:15]) / TICKS


class TmuxRun:
    """One program alone in a detached tmux session of its own server."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], tmpdir: Path):
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


def measure(name: str, argv: list[str], env: dict[str, str], tmpdir: Path, seconds: float, warmup: float,
            expect: str) -> float:
    run = TmuxRun(name, argv, env, tmpdir)
    try:
        deadline = time.monotonic() + 30
        while expect not in run.screen():
            if time.monotonic() > deadline:
                raise SystemExit(f"bench_top: {name} did not show {expect!r}:\n{run.screen()}")
            time.sleep(0.2)
        time.sleep(warmup)
        start = cpu_seconds(run.pid)
        time.sleep(seconds)
        used = cpu_seconds(run.pid) - start
        if expect not in run.screen():
            raise SystemExit(f"bench_top: {name} stopped showing {expect!r}:\n{run.screen()}")
        return used
    finally:
        run.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured wall time per program and round (60)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds after the first frame before measuring (3)")
    ap.add_argument("--processes", type=int, default=500, help="real processes holding GPU memory (500)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds; the order alternates (1)")
    args = ap.parse_args(argv)
    if shutil.which("tmux") is None:
        raise SystemExit("bench_top: needs tmux")

    with tempfile.TemporaryDirectory(prefix="vram-bench-top-") as tmp, Sleepers(args.processes) as sleepers:
        tmp_path = Path(tmp)
        scenario_file = write_scenario(tmp_path / "machine.json", scenario(sleepers.pids, real=True, gpus=args.gpus))
        shim = write_shim(tmp_path / "shim").parent
        base = {k: v for k, v in os.environ.items()
                if k not in ("PYTHONPATH", "VRAM_SIMULATE", "PYTHONDONTWRITEBYTECODE", "NO_COLOR")}
        base["TERM"] = "xterm-256color"
        programs = {
            "vram top": (_command("vram", "vramkit", "top", "--simulate", str(scenario_file), "--interval", "1"),
                         base, "GiB"),
            "nvitop": (_command("nvitop", "nvitop", "--interval", "1"),
                       {**base, "PYTHONPATH": str(shim), "VRAM_SIMULATE": str(scenario_file)}, "GiB"),
        }
        print(f"bench_top: {args.gpus} simulated GPUs, {args.processes} real processes, 1 s refresh, "
              f"{args.seconds:g} s measured per program and round, tmux 120x40; {environment()}")
        used: dict[str, list[float]] = {name: [] for name in programs}
        names = list(programs)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                cmd, env, expect = programs[name]
                sub = tmp_path / f"tmux-{r}-{name.replace(' ', '-')}"
                sub.mkdir()
                used[name].append(measure(f"bench{r}", cmd, env, sub, args.seconds, args.warmup, expect))

    total = {name: sum(v) for name, v in used.items()}
    span = args.seconds * args.rounds
    print(f"\n{'program':<10} {'CPU s':>8} {'CPU %':>7}  vs nvitop")
    for name in programs:
        print(f"{name:<10} {total[name]:8.2f} {100 * total[name] / span:6.1f}%  "
              f"{total[name] / total['nvitop']:6.2f}x" if total["nvitop"] else "")
    print(f"\nvram top uses {total['vram top'] / total['nvitop']:.2f}x the CPU of nvitop "
          f"({total['vram top']:.2f} s vs {total['nvitop']:.2f} s over {span:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
