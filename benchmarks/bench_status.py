"""Whole-process wall time: `vram status` vs `gpustat` vs `nvitop -1`, on one simulated machine.

The machine: 8 A100-80GB GPUs and 200 processes holding memory on them. The processes are real
(spawned `sleep`s), so the peers' psutil finds each one in /proc as vram does. The peers run on
the pynvml shim (`vram sim shim`), vram on `--simulate FILE`; every program's stdout is a pipe.
Runs are interleaved (the order rotates each round) and medians compared. The target: vram takes
at most half the time of the faster peer.

    .venv/bin/python benchmarks/bench_status.py [--runs 15] [--processes 200] [--gpus 8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import BIN, Sleepers, environment, median_ms, scenario, write_scenario  # noqa: E402

from vramkit.nvml.shim import write_shim  # noqa: E402

HEAVY = ("torch", "textual", "psutil", "rich", "pynvml")  # the first two must never be imported


def _command(script: str, module: str, *args: str) -> list[str]:
    path = BIN / script
    return [str(path), *args] if path.exists() else [sys.executable, "-m", module, *args]


def _env(shim: Path | None, scenario_file: Path | None) -> dict[str, str]:
    # Every program runs as installed normally, with cached bytecode: PYTHONDONTWRITEBYTECODE would
    # make vram compile its own modules on every run (~35 ms) while the peers' .pyc came with pip.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VRAM_SIMULATE", "PYTHONDONTWRITEBYTECODE")}
    if shim is not None:
        env["PYTHONPATH"] = str(shim)
    if scenario_file is not None:
        env["VRAM_SIMULATE"] = str(scenario_file)
    return env


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"bench_status: {' '.join(cmd)} exited {result.returncode}: "
                         f"{result.stderr.decode(errors='replace').strip()[-500:]}")
    return elapsed


def _imports(scenario_file: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """Top-level packages `vram status` imports, and its slowest imports (cumulative µs, module)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "vramkit", "status", "--simulate", str(scenario_file)]
    result = subprocess.run(cmd, env=_env(None, None), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, check=True)
    modules, slow = set(), []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        modules.add(name.split(".")[0])
        if not name.startswith(" "):
            slow.append((int(cumulative), name))
    return modules, sorted(slow, reverse=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="timed runs of each program (default 15)")
    ap.add_argument("--processes", type=int, default=200, help="real processes holding GPU memory (default 200)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="vram-bench-") as tmp, Sleepers(args.processes) as sleepers:
        tmp_path = Path(tmp)
        scenario_file = write_scenario(tmp_path / "machine.json",
                                       scenario(sleepers.pids, real=True, gpus=args.gpus))
        shim = write_shim(tmp_path / "shim").parent
        peers_env = _env(shim, scenario_file)
        programs = {
            "vram status": (_command("vram", "vramkit", "status", "--simulate", str(scenario_file)),
                            _env(None, None)),
            "gpustat": (_command("gpustat", "gpustat"), peers_env),
            "nvitop -1": (_command("nvitop", "nvitop", "-1"), peers_env),
        }
        # What the shim itself adds to each peer run: `import pynvml` through it minus the real one.
        import_real = [sys.executable, "-c", "import pynvml"]
        import_shim = [sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"]

        print(f"bench_status: {args.gpus} simulated GPUs, {args.processes} real processes, "
              f"{args.runs} interleaved runs each; {environment()}")
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            print("(PYTHONDONTWRITEBYTECODE is set here; it is unset for the programs measured, so that all of "
                  "them run from cached bytecode as after a normal install)")
        for cmd, env in programs.values():  # warm-up: page cache, .pyc files
            _time(cmd, env)
            _time(cmd, env)
        samples: dict[str, list[float]] = {name: [] for name in programs}
        shim_cost: dict[str, list[float]] = {"real": [], "shim": []}
        names = list(programs)
        for r in range(args.runs):
            for name in names[r % len(names):] + names[:r % len(names)]:
                samples[name].append(_time(*programs[name]))
            shim_cost["real"].append(_time(import_real, _env(None, None)))
            shim_cost["shim"].append(_time(import_shim, peers_env))
        modules, slow = _imports(scenario_file)

    medians = {name: median_ms(s) for name, s in samples.items()}
    faster_peer = min((n for n in medians if n != "vram status"), key=medians.get)
    print(f"\n{'program':<12} {'median':>9} {'min':>9} {'max':>9}  vs {faster_peer}")
    for name, s in samples.items():
        ratio = medians[name] / medians[faster_peer]
        print(f"{name:<12} {medians[name]:7.1f}ms {min(s) * 1000:7.1f}ms {max(s) * 1000:7.1f}ms  {ratio:5.2f}x")
    overhead = median_ms(shim_cost["shim"]) - median_ms(shim_cost["real"])
    print(f"\nthe shim's own cost in each peer run (import pynvml + nvmlInit through the shim, minus a plain "
          f"import pynvml): {overhead:.1f}ms")
    adjusted = medians[faster_peer] - max(overhead, 0.0)
    print(f"{faster_peer} without that cost: ~{adjusted:.1f}ms; vram / that = {medians['vram status'] / adjusted:.2f}x")
    target = medians["vram status"] <= 0.5 * medians[faster_peer]
    print(f"target (vram at most half the time of the faster peer, {faster_peer}): "
          f"{'MET' if target else 'NOT MET'} ({medians['vram status']:.1f}ms vs {0.5 * medians[faster_peer]:.1f}ms)")

    found = {m: m in modules for m in HEAVY}
    print("\n`vram status` imports: " + ", ".join(f"{m} {'YES' if v else 'no'}" for m, v in found.items()))
    print("slowest top-level imports (cumulative): " +
          ", ".join(f"{name} {us / 1000:.1f}ms" for us, name in slow[:6]))
    ok = not (found["torch"] or found["textual"])
    print(f"no torch, no textual in `vram status`: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
