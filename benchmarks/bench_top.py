"""The live view's cost: `vram top` vs `nvitop`, both refreshing every second in a real terminal
(tmux), on simulated machines of 8 GPUs and 200, then 500 processes: CPU, memory and the first frame.

The processes are real (spawned `sleep`s), so nvitop's psutil finds each one in /proc as vram
does. Both programs run on the pynvml shim (`vram sim shim`), and vram takes its real-driver path
through it: the child imports the shim as `pynvml`, then vram opens "the driver" as on a GPU
server (no --simulate), so it pays `import pynvml` and NVML's calls as nvitop does. Each program
runs alone in its own tmux session (120x40) for a warm-up, then its CPU seconds (user + system,
from /proc/PID/stat, children included) are measured over --seconds of wall time. Rounds are
interleaved: each round runs every program once, the order alternating. The ratio vram / nvitop
is what counts (lower is better): per round (the two ran minutes apart at most), printed as the
median and the range over the rounds, and pooled (the sums of all rounds).

Also per program and round: the first frame (from starting the tmux session to the first screen
capture showing memory in GiB, polled every 10 ms: the same start-up cost of tmux for both), and
its resident memory (VmRSS at the end of the measured time, and the peak, VmHWM).

vram top runs with --idle-after 1: where it has run for idle_after (5 minutes by default), each
process that holds memory and runs no kernels is an alert, worded and counted on every refresh.
The sleepers run nothing and hold 200-900 MiB each (those holding 256 MiB or more are alerts), so
a round measures that steady state, which its 20 s would not reach at the default.

A third program is the floor the live view stands on: an empty Textual app (one Static line, no
data), run the same way in the first round (its memory is what it is here for). vram top keeps
Textual (DESIGN.md), so its distance to this floor is what it could still save. A fourth, also in
the first round only: the same app importing pynvml first, on the shim ("floor+nvml"): what any
pynvml program in Textual pays before it reads a GPU (on the shim that includes the simulator
the peers load too), so that vram top's own part above the floor is printed apart.

--compare DIR: a fourth program in every round, vram top from another tree's src/ ("compared"), so
that a change is measured against the tree before it in the same rounds: on a busy machine, runs
minutes apart differ by more than most changes do.

--curve SECONDS: afterwards, vram top alone on each machine for that long, its RSS and CPU printed
every --curve-every seconds (flat after warm-up, or growing as its history fills).

    .venv/bin/python benchmarks/bench_top.py [--machines 8x200,8x500] [--seconds 20] [--rounds 5]
        [--vramkit-src DIR]     (vramkit from an older tree's src/: before/after)
        [--compare DIR]         (also, in every round, vram top from DIR: "compared", interleaved)
        [--curve 600 --curve-every 30]
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

from _machine import BIN, VRAM_VIA_DRIVER, Sleepers, cpu_seconds, environment, scenario, write_scenario  # noqa: E402

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
FLOOR_NVML_APP = "import pynvml\n" + FLOOR_APP  # the floor, paying `import pynvml` as every pynvml tool does
FLOORS = ("floor", "floor+nvml")  # their memory is all they are here for: the first round shows it


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


def _machines(text: str) -> list[tuple[int, int]]:
    """'8x200,8x500' -> [(8, 200), (8, 500)]: GPUs x processes."""
    out = []
    for part in text.split(","):
        gpus, _, procs = part.strip().partition("x")
        if not (gpus.isdigit() and procs.isdigit() and int(gpus) > 0):
            raise argparse.ArgumentTypeError(f"not GPUs x processes: {part!r} (8x500)")
        out.append((int(gpus), int(procs)))
    return out


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """median (min-max)"""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _programs(src: Path | None, scenario_file: Path, shim: Path,
              compare: Path | None = None) -> dict[str, tuple[list[str], dict[str, str], str]]:
    """name -> (argv, environment, text only its running view shows)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VRAM_SIMULATE", "PYTHONDONTWRITEBYTECODE", "NO_COLOR")}
    base["TERM"] = "xterm-256color"
    base["VRAM_LANG"] = "en"  # the view is told ready by an English heading (nvitop speaks only English)
    on_shim = {**base, "PYTHONPATH": str(shim), "VRAM_SIMULATE": str(scenario_file)}
    # vram on its real-driver path through the shim, as nvitop; an older tree's vramkit after the shim
    vram_env = {**on_shim, "PYTHONPATH": f"{shim}{os.pathsep}{src}"} if src else on_shim
    top = [sys.executable, "-c", VRAM_VIA_DRIVER, "top", "--interval", "1", "--idle-after", "1"]
    programs = {
        "vram top": (top, vram_env, "GPU processes"),
        "nvitop": (_command("nvitop", "nvitop", "--interval", "1"), on_shim, "GiB"),
        "floor": ([sys.executable, "-c", FLOOR_APP], base, "empty Textual app"),
        "floor+nvml": ([sys.executable, "-c", FLOOR_NVML_APP], on_shim, "empty Textual app"),
    }
    if compare is not None:
        programs["compared"] = (top, {**on_shim, "PYTHONPATH": f"{shim}{os.pathsep}{compare}"}, "GPU processes")
    return programs


def run_machine(gpus: int, processes: int, args: argparse.Namespace, src: Path | None) -> None:
    """Every round on one machine; prints the table and whether the targets are met."""
    with tempfile.TemporaryDirectory(prefix="vram-bench-top-") as tmp, Sleepers(processes) as sleepers:
        tmp_path = Path(tmp)
        scenario_file = write_scenario(tmp_path / "machine.json", scenario(sleepers.pids, real=True, gpus=gpus))
        programs = _programs(src, scenario_file, write_shim(tmp_path / "shim").parent, args.compare)
        print(f"\n{gpus} x {processes}: {gpus} simulated GPUs, {processes} real processes, {args.rounds} rounds of "
              f"{args.seconds:g} s per program", flush=True)
        results: dict[str, list[Result]] = {name: [] for name in programs}
        names = list(programs)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                if name in FLOORS and r > 0:
                    continue
                cmd, env, ready = programs[name]
                sub = tmp_path / f"tmux-{r}-{name.replace(' ', '-')}"
                sub.mkdir()
                results[name].append(measure(f"bench{r}", cmd, env, sub, args.seconds, args.warmup, ready))
        curve = rss_curve(programs["vram top"], tmp_path, args) if args.curve else None

    ratios = [v.cpu / n.cpu for v, n in zip(results["vram top"], results["nvitop"])]
    pooled = sum(x.cpu for x in results["vram top"]) / sum(x.cpu for x in results["nvitop"])
    floor_rss = statistics.median(x.rss for x in results["floor"])
    print(f"{'program':<10} {'CPU s per round':>22} {'CPU %':>6}  {'first frame ms':>20}  {'RSS MiB':>18}"
          f" {'peak':>6} {'above floor':>11}")
    for name, rs in results.items():
        cpu = [x.cpu for x in rs]
        print(f"{name:<10} {_spread(cpu):>22} {100 * statistics.median(cpu) / args.seconds:5.1f}%"
              f"  {_spread([1000 * x.first_frame for x in rs], '{:.0f}'):>20}"
              f"  {_spread([x.rss / MiB for x in rs], '{:.1f}'):>18} {max(x.peak_rss for x in rs) / MiB:6.1f}"
              f" {(statistics.median(x.rss for x in rs) - floor_rss) / MiB:+10.1f}M")
    print("per round, CPU s: " + "; ".join(f"{n} " + ", ".join(f"{x.cpu:.2f}" for x in v) for n, v in results.items()))
    print(f"vram top / nvitop CPU, per round: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"vram top / nvitop CPU: {_spread(ratios, '{:.3f}')}x per round (median, range); pooled {pooled:.3f}x")
    frames = [v.first_frame / n.first_frame for v, n in zip(results["vram top"], results["nvitop"])]
    print(f"vram top / nvitop first frame: {_spread(frames)}x per round")
    above = (statistics.median(x.rss for x in results["vram top"]) - floor_rss) / MiB
    nvml_rss = statistics.median(x.rss for x in results["floor+nvml"])
    print(f"RSS above the floor: vram top {above:+.1f} MiB, of which `import pynvml` on the shim "
          f"{(nvml_rss - floor_rss) / MiB:+.1f} (floor+nvml) and vram top's own "
          f"{(statistics.median(x.rss for x in results['vram top']) - nvml_rss) / MiB:+.1f}")
    if "compared" in results:
        theirs = [c.cpu / n.cpu for c, n in zip(results["compared"], results["nvitop"])]
        versus = [v.cpu / c.cpu for v, c in zip(results["vram top"], results["compared"])]
        print(f"compared / nvitop CPU: {_spread(theirs, '{:.3f}')}x per round; pooled "
              f"{sum(x.cpu for x in results['compared']) / sum(x.cpu for x in results['nvitop']):.3f}x")
        print(f"vram top / compared CPU, per round: {', '.join(f'{r:.3f}' for r in versus)}; "
              f"{_spread(versus, '{:.3f}')}x; pooled "
              f"{sum(x.cpu for x in results['vram top']) / sum(x.cpu for x in results['compared']):.3f}x")
    if curve:
        print("vram top alone, over time (s): RSS MiB, CPU % since the point before")
        print("  " + "; ".join(f"{t:.0f}: {m / MiB:.1f}" + ("" if c is None else f", {c:.1f}%") for t, m, c in curve))
    cpu_met = statistics.median(ratios) <= TARGET_CPU
    print(f"target (CPU at most {TARGET_CPU}x nvitop's, median of rounds): {'MET' if cpu_met else 'NOT MET'} "
          f"({statistics.median(ratios):.3f}x; rounds {min(ratios):.3f}-{max(ratios):.3f}x)")
    rss_met = above <= TARGET_ABOVE_FLOOR
    print(f"target (RSS at most {TARGET_ABOVE_FLOOR} MiB above the floor, an empty Textual app): "
          f"{'MET' if rss_met else 'NOT MET'} ({above:+.1f} MiB)")


def rss_curve(program: tuple[list[str], dict[str, str], str], tmp_path: Path,
              args: argparse.Namespace) -> list[tuple[float, int, float | None]]:
    """vram top alone for --curve seconds, every --curve-every: (seconds since its first full view,
    VmRSS, CPU % since the previous point)."""
    cmd, env, ready = program
    sub = tmp_path / "tmux-curve"
    sub.mkdir()
    run = TmuxRun("curve", cmd, env, sub)
    try:
        _wait_for(run, ready, 0.2)
        began, points = time.monotonic(), []
        before, cpu_before = began, cpu_seconds(run.pid)
        while True:
            now, cpu = time.monotonic(), cpu_seconds(run.pid)
            share = 100 * (cpu - cpu_before) / (now - before) if points else None
            points.append((now - began, memory(run.pid)[0], share))
            before, cpu_before = now, cpu
            if now - began >= args.curve:
                return points
            time.sleep(min(args.curve_every, args.curve - (now - began)))
    finally:
        run.close()


TARGET_CPU = 0.25
TARGET_ABOVE_FLOOR = 8.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machines", type=_machines, default=_machines("8x200,8x500"),
                    help="GPUs x real processes, comma-separated (8x200,8x500)")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured wall time per program and round (20)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds after the full view before measuring (3)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, interleaved; the order alternates (5)")
    ap.add_argument("--vramkit-src", type=Path, metavar="DIR",
                    help="run vram top from this source tree (the src/ of an older checkout: before/after)")
    ap.add_argument("--compare", type=Path, metavar="DIR",
                    help="also run vram top from this source tree in every round, interleaved (before/after)")
    ap.add_argument("--curve", type=float, default=0.0, metavar="SECONDS",
                    help="afterwards, vram top alone on each machine this long, its RSS and CPU over time (0: no)")
    ap.add_argument("--curve-every", type=float, default=30.0, metavar="SECONDS", help="the curve's step (30)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    if shutil.which("tmux") is None:
        raise SystemExit("bench_top: needs tmux")
    src = args.vramkit_src.resolve() if args.vramkit_src else None
    if src is not None and not (src / "vramkit" / "__init__.py").is_file():
        raise SystemExit(f"bench_top: --vramkit-src {src} has no vramkit/__init__.py")
    print(f"bench_top: vram top and nvitop --interval 1 on the pynvml shim, tmux 120x40, {args.warmup:g} s warm-up; "
          f"{environment()}")
    if src is not None:
        print(f"vramkit from {src}")
    if args.compare is not None:
        args.compare = args.compare.resolve()
        if not (args.compare / "vramkit" / "__init__.py").is_file():
            raise SystemExit(f"bench_top: --compare {args.compare} has no vramkit/__init__.py")
        print(f"compared: vram top with vramkit from {args.compare}")
    for gpus, processes in args.machines:
        run_machine(gpus, processes, args, src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
