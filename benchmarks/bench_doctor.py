"""`vram doctor LOG` on large training logs, against the floor measured in the same run.

The logs: training progress lines (seeded, ~100 bytes each) of 1, 10 and 100 MB, with a caught
out-of-memory message a third of the way in and the one that ended the job (a real PyTorch
traceback, tests/fixtures/oom/) at the end. Two measures, each against its floor:

- whole process: `vram doctor LOG --no-live` (stdout a pipe, cached bytecode) against two floors,
  wall and CPU time: a Python process that reads the same file and finds the last out-of-memory
  marker with bytes.rfind (what any reader of the log has to do at least: "bare"), and the same
  after importing the standard library a command that parses a log needs (argparse for its
  arguments, re for the messages, dataclasses for the records it builds, textwrap for its text:
  "floor", the one the target is against). Runs interleaved, medians compared.
- in process: `find_oom(text)` against `text.rfind(marker)` for each marker, on the same text.

Targets: `vram doctor LOG --no-live` at most 2.5x the floor (CPU, issue 36); on the 10 MB log in
at most 0.1 s (issue 19), and its time growing no faster than the log (ms per MB flat or falling:
it searches the log's last 4 MiB and counts the lines before).

    .venv/bin/python benchmarks/bench_doctor.py [--sizes 1,10,100] [--runs 9] [--vramkit-src DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import BIN, ROOT, environment, median_ms, program_env, timed  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "oom"
MB = 10**6
TARGET_MS, TARGET_MB = 100.0, 10
TARGET_RATIO = 2.5  # vram doctor LOG --no-live at most this many times the floor (CPU)
# The floor: read the whole file, find the last marker of an out-of-memory message.
MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
           "Unable to find a valid cuDNN algorithm", "DefaultCPUAllocator: ")
FLOOR = f"""\
import sys
data = open(sys.argv[1], "rb").read()
print(max(data.rfind(m) for m in {tuple(m.encode() for m in MARKERS)!r}))
"""
STDLIB = "import argparse, dataclasses, re, textwrap\n"  # what parsing a log needs of the standard library


def write_log(path: Path, size: int, seed: int = 19) -> Path:
    """A training log of about `size` bytes ending in a CUDA out-of-memory traceback."""
    rng = random.Random(seed)
    caught = (FIXTURES / "training_log_two_ooms.txt").read_text().splitlines()[1] + "\n"
    ending = (FIXTURES / "cuda_2_2_two_processes_private_pools.txt").read_text()
    lines, written, step = [], 0, 0
    while written < size - len(ending):
        if step == 0 or written < size // 3 <= written + 120:
            line = caught if step else "[2026-11-30 09:00:00] starting run 19 on 8 GPUs\n"
        else:
            line = (f"[2026-11-30 {9 + step // 3600 % 12:02d}:{step // 60 % 60:02d}:{step % 60:02d}] "
                    f"epoch {step // 5000} step {step} loss {rng.uniform(0.5, 3):.4f} lr {3e-4:.1e} "
                    f"grad_norm {rng.uniform(0, 2):.3f} tok/s {rng.randint(40000, 90000)}\n")
        lines.append(line)
        written += len(line)
        step += 1
    path.write_text("".join(lines) + ending)
    return path


def in_process(path: Path, repeat: int = 5) -> tuple[float, float]:
    """(find_oom ms, literal-scan ms) on the log's text, best of `repeat`."""
    from vramkit.doctor.oom import find_oom

    text = path.read_text()
    report = find_oom(text)
    if report is None or report.form != "2.2+":
        raise SystemExit(f"bench_doctor: find_oom did not find the final message in {path}")
    best_find = best_scan = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        find_oom(text)
        best_find = min(best_find, time.perf_counter() - start)
        start = time.perf_counter()
        max(text.rfind(m) for m in MARKERS)
        best_scan = min(best_scan, time.perf_counter() - start)
    return best_find * 1000, best_scan * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10,100", help="log sizes in MB (default 1,10,100)")
    ap.add_argument("--runs", type=int, default=9, help="timed runs of each command per size (default 9)")
    ap.add_argument("--vramkit-src", type=Path, metavar="DIR",
                    help="run vramkit from this source tree (the src/ of an older checkout: before/after)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    src = args.vramkit_src.resolve() if args.vramkit_src else None
    env = program_env(src)
    if src is not None:
        sys.path.insert(0, str(src))  # the in-process measure too
    vram = [str(BIN / "vram")] if (BIN / "vram").exists() and src is None else [sys.executable, "-m", "vramkit"]

    print(f"bench_doctor: logs of {', '.join(f'{s} MB' for s in sizes)}, {args.runs} interleaved runs each; "
          f"{environment()}" + (f"\nvramkit from {src}" if src else ""))
    rows = []
    with tempfile.TemporaryDirectory(prefix="vram-bench-doctor-") as tmp:
        for size in sizes:
            log = write_log(Path(tmp) / f"train-{size}MB.log", size * MB)
            programs = {"vram": [*vram, "doctor", str(log), "--no-live"],
                        "bare": [sys.executable, "-c", FLOOR, str(log)],
                        "floor": [sys.executable, "-c", STDLIB + FLOOR, str(log)]}
            for cmd in programs.values():  # warm-up: page cache, .pyc files
                timed(cmd, env)
            wall: dict[str, list[float]] = {name: [] for name in programs}
            cpu: dict[str, list[float]] = {name: [] for name in programs}
            names = list(programs)
            for r in range(args.runs):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    w, c = timed(programs[name], env)
                    wall[name].append(w)
                    cpu[name].append(c)
            find_ms, scan_ms = in_process(log)
            rows.append((size, {n: median_ms(v) for n, v in wall.items()}, {n: median_ms(v) for n, v in cpu.items()},
                         min(wall["vram"]) * 1000, max(wall["vram"]) * 1000, find_ms, scan_ms))

    print(f"\n{'':>7} {'vram doctor':>12} {'':>8} {'':>8} {'':>8} {'bare':>17} {'floor':>17} {'vs floor':>14} "
          f"{'vs bare':>7}")
    print(f"{'log':>7} {'median':>12} {'min':>8} {'max':>8} {'CPU':>8} {'median':>8} {'CPU':>8} {'median':>8} "
          f"{'CPU':>8} {'wall':>7} {'CPU':>6} {'CPU':>7}   {'find_oom':>9} {'rfind':>8} {'vs rfind':>8}")
    for size, wall_ms, cpu_ms, low, high, find_ms, scan_ms in rows:
        print(f"{size:>4} MB {wall_ms['vram']:10.1f}ms {low:6.1f}ms {high:6.1f}ms {cpu_ms['vram']:6.1f}ms "
              f"{wall_ms['bare']:6.1f}ms {cpu_ms['bare']:6.1f}ms {wall_ms['floor']:6.1f}ms {cpu_ms['floor']:6.1f}ms "
              f"{wall_ms['vram'] / wall_ms['floor']:6.2f}x {cpu_ms['vram'] / cpu_ms['floor']:5.2f}x "
              f"{cpu_ms['vram'] / cpu_ms['bare']:6.2f}x   {find_ms:7.2f}ms {scan_ms:6.2f}ms {find_ms / scan_ms:7.2f}x")
    print("bare: python reads the whole log and finds the last marker (bytes.rfind); floor: the same after "
          "importing argparse, dataclasses, re, textwrap; find_oom / rfind: in process, on the same text (best of 5)")
    worst = max(cpu_ms["vram"] / cpu_ms["floor"] for _, _, cpu_ms, *_ in rows)
    print(f"target (vram doctor LOG --no-live at most {TARGET_RATIO}x the floor, CPU, every size): "
          f"{'MET' if worst <= TARGET_RATIO else 'NOT MET'} (at most {worst:.2f}x)")
    by_size = {size: wall_ms["vram"] for size, wall_ms, *_ in rows}
    if TARGET_MB in by_size:
        ok = by_size[TARGET_MB] <= TARGET_MS
        print(f"target (vram doctor on a {TARGET_MB} MB log in at most {TARGET_MS:.0f} ms): "
              f"{'MET' if ok else 'NOT MET'} ({by_size[TARGET_MB]:.1f} ms)")
    per_mb = [by_size[size] / size for size in sizes]
    linear = all(later <= earlier * 1.2 for earlier, later in zip(per_mb, per_mb[1:]))
    print(f"ms per MB as the log grows: {', '.join(f'{v:.2f}' for v in per_mb)}: "
          f"{'no faster than linear' if linear else 'FASTER THAN LINEAR'}")
    print(f"median of the in-process ratios: {statistics.median(f / s for *_, f, s in rows):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
