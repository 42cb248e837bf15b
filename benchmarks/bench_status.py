"""Whole-process wall time: `vram status` vs `nvitop -1` (and `gpustat`), on one simulated machine.

Equal terms: every program runs on the pynvml shim (`vram sim shim`) and pays `import pynvml`.
vram takes its real-driver path through it, as on a GPU server: the child imports the shim as
`pynvml`, then `vram status` opens "the driver" without --simulate. The processes holding memory
are real (spawned `sleep`s), so every program finds each one in /proc. Every program's stdout is
a pipe; runs are interleaved (the order rotates each round) and medians compared.

Machines (GPUS x PROCESSES): 8x200, 8x1000 and 64x200 by default. The headline is vram's ratio to
`nvitop -1`; the target is at most 0.35x. `vram status --simulate FILE` (no pynvml at all) is
shown as context, and so is the floor both programs stand on: a Python that only imports pynvml
through the shim (the interpreter, nvidia-ml-py, the shim loading its scenario). What each program
takes above that floor is its own work.

    .venv/bin/python benchmarks/bench_status.py [--runs 15] [--machines 8x200,8x1000,64x200] [--no-gpustat]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import (  # noqa: E402
    BIN,
    VRAM_VIA_DRIVER,
    Sleepers,
    environment,
    median_ms,
    program_env,
    scenario,
    shim_env,
    timed,
    write_scenario,
)

from vramkit.nvml.shim import write_shim  # noqa: E402

HEAVY = ("torch", "textual", "psutil", "rich", "pynvml")  # the first two must never be imported
TARGET = 0.35  # vram status at most this share of nvitop -1's time
VRAM, PEER = "vram status", "nvitop -1"
FLOOR = "import pynvml"  # python -c 'import pynvml' on the shim: what every program here pays first


def _command(script: str, module: str, *args: str) -> list[str]:
    path = BIN / script
    return [str(path), *args] if path.exists() else [sys.executable, "-m", module, *args]


def _on_shim(shim: Path, scenario_file: Path, src: Path | None) -> dict[str, str]:
    env = shim_env(shim, scenario_file)
    if src is not None:  # the shim imports vramkit too: from the same tree as vram
        env["PYTHONPATH"] += os.pathsep + str(src)
    return env


def _imports(cmd: list[str], env: dict[str, str]) -> tuple[set[str], list[tuple[int, str]]]:
    """Top-level packages `cmd` (a Python program) imports, and its slowest imports (cumulative µs, module)."""
    result = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, check=True)
    modules, slow = set(), []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "cumulative" in line:
            continue
        _, cumulative, raw_name = line[len("import time:"):].split("|")
        name = raw_name.strip()
        modules.add(name.split(".")[0])
        if not raw_name[1:].startswith(" "):  # nested imports are indented: only the top level here
            slow.append((int(cumulative), name))
    return modules, sorted(slow, reverse=True)


def _machines(text: str) -> list[tuple[int, int]]:
    try:
        out = [(int(g), int(p)) for g, p in (m.lower().split("x") for m in text.split(","))]
    except ValueError:
        raise SystemExit(f"bench_status: --machines takes e.g. 8x200,64x200, got {text!r}") from None
    if any(g < 1 or p < 1 for g, p in out):
        raise SystemExit("bench_status: every machine needs at least one GPU and one process")
    return out


def measure(gpus: int, processes: int, runs: int, gpustat: bool, tmp: Path, shim: Path,
            src: Path | None) -> dict[str, tuple[list[float], list[float]]]:
    """(wall, CPU) seconds per run of each program on a gpus x processes machine, interleaved.
    `src`: a vramkit source tree to run instead of the installed one."""
    with Sleepers(processes) as sleepers:
        scenario_file = write_scenario(tmp / f"machine-{gpus}x{processes}.json",
                                       scenario(sleepers.pids, real=True, gpus=gpus))
        on_shim = _on_shim(shim, scenario_file, src)
        programs = {
            VRAM: ([sys.executable, "-c", VRAM_VIA_DRIVER, "status"], on_shim),
            PEER: (_command("nvitop", "nvitop", "-1"), on_shim),
            "vram --simulate": (_command("vram", "vramkit", "status", "--simulate", str(scenario_file)),
                                program_env(src)),
            FLOOR: ([sys.executable, "-c", "import pynvml"], on_shim),
        }
        if gpustat:
            programs["gpustat"] = (_command("gpustat", "gpustat"), on_shim)
        for cmd, env in programs.values():  # warm-up: page cache, .pyc files
            timed(cmd, env)
            timed(cmd, env)
        samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in programs}
        names = list(programs)
        for r in range(runs):
            for name in names[r % len(names):] + names[:r % len(names)]:
                wall, cpu = timed(*programs[name])
                samples[name][0].append(wall)
                samples[name][1].append(cpu)
    return samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="timed runs of each program per machine (default 15)")
    ap.add_argument("--machines", default="8x200,8x1000,64x200",
                    help="GPUSxPROCESSES, comma-separated (default 8x200,8x1000,64x200)")
    ap.add_argument("--no-gpustat", action="store_true",
                    help="leave gpustat out (it sleeps 0.1 s per GPU: 6.4 s a run on 64 GPUs)")
    ap.add_argument("--vramkit-src", type=Path, metavar="DIR",
                    help="run vramkit from this source tree (the src/ of an older checkout: before/after)")
    args = ap.parse_args(argv)
    src = args.vramkit_src.resolve() if args.vramkit_src else None
    if src is not None and not (src / "vramkit" / "__init__.py").is_file():
        raise SystemExit(f"bench_status: --vramkit-src {src} has no vramkit/__init__.py")
    machines = _machines(args.machines)
    gpustat = not args.no_gpustat and ((BIN / "gpustat").exists() or importlib.util.find_spec("gpustat") is not None)

    print(f"bench_status: {args.runs} interleaved runs of each program per machine, all on the pynvml shim "
          f"(vram on its real-driver path); {environment()}")
    if src is not None:
        print(f"vramkit from {src}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("(PYTHONDONTWRITEBYTECODE is set here; it is unset for the programs measured, so that all of "
              "them run from cached bytecode as after a normal install)")
    if not gpustat and not args.no_gpustat:
        print("(gpustat is not installed: measured without it)")
    met = True
    with tempfile.TemporaryDirectory(prefix="vram-bench-") as tmp:
        tmp_path = Path(tmp)
        shim = write_shim(tmp_path / "shim").parent
        for gpus, processes in machines:
            samples = measure(gpus, processes, args.runs, gpustat, tmp_path, shim, src)
            medians = {name: median_ms(wall) for name, (wall, _) in samples.items()}
            cpu = {name: median_ms(c) for name, (_, c) in samples.items()}
            print(f"\n{gpus} GPUs x {processes} real processes")
            print(f"{'program':<16} {'median':>9} {'min':>9} {'max':>9}  vs {PEER}  {'CPU':>9}  vs {PEER}")
            for name, (wall, _) in samples.items():
                print(f"{name:<16} {medians[name]:7.1f}ms {min(wall) * 1000:7.1f}ms {max(wall) * 1000:7.1f}ms  "
                      f"{medians[name] / medians[PEER]:5.2f}x     {cpu[name]:7.1f}ms  {cpu[name] / cpu[PEER]:5.2f}x")
            for what, times in (("wall", medians), ("CPU", cpu)):
                floor = times[FLOOR]
                print(f"{what} above the floor ({FLOOR} on the shim, {floor:.1f}ms): "
                      f"{VRAM} {times[VRAM] - floor:.1f}ms, {PEER} {times[PEER] - floor:.1f}ms; "
                      f"at {TARGET}x {VRAM} would have {TARGET * times[PEER] - floor:.1f}ms")
            ratio = medians[VRAM] / medians[PEER]
            ok = ratio <= TARGET
            met = met and ok
            print(f"target ({VRAM} at most {TARGET}x {PEER}, wall medians): {'MET' if ok else 'NOT MET'} "
                  f"({ratio:.2f}x; CPU {cpu[VRAM] / cpu[PEER]:.2f}x)")
        imports_file = write_scenario(tmp_path / "imports.json", scenario([], real=True))
        modules, slow = _imports([sys.executable, "-m", "vramkit", "status", "--simulate", str(imports_file)],
                                 program_env(src))
        # The headline path: the shim as pynvml, then vram on "the driver" (what every round measured)
        driver_modules, driver_slow = _imports([sys.executable, "-c", VRAM_VIA_DRIVER, "status"],
                                               _on_shim(shim, imports_file, src))

    found = {m: m in modules for m in HEAVY}
    print("\n`vram status --simulate` imports: " + ", ".join(f"{m} {'YES' if v else 'no'}" for m, v in found.items()))
    print("slowest top-level imports (cumulative): " +
          ", ".join(f"{name} {us / 1000:.1f}ms" for us, name in slow[:6]))
    print(f"on the real-driver path through the shim: typing {'YES' if 'typing' in driver_modules else 'no'}, "
          f"dataclasses {'YES' if 'dataclasses' in driver_modules else 'no'}; slowest top-level imports: " +
          ", ".join(f"{name} {us / 1000:.1f}ms" for us, name in driver_slow[:6]))
    clean = not (found["torch"] or found["textual"])
    print(f"no torch, no textual in `vram status`: {'OK' if clean else 'FAILED'}")
    print(f"all targets: {'MET' if met else 'NOT MET'}")
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
