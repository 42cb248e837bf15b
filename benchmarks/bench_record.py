"""CPU cost of recording history: `vram record` vs nvitop's ResourceMetricCollector, both sampling
every second, on one simulated machine of 8 GPUs and 200 processes.

The processes are real (spawned `sleep`s), so both programs find each one in /proc. Both run on
the pynvml shim (`vram sim shim`), and vram takes its real-driver path through it: the child
imports the shim as `pynvml`, then vram opens "the driver" as on a GPU server (no --simulate),
so it pays `import pynvml` and NVML's calls as nvitop does.

- vram: `vram record --interval 1s` into a real SQLite file on disk (default retention).
- nvitop: `ResourceMetricCollector(root_pids={1}, interval=1.0)` activated with a tag, so its
  own daemon thread takes a snapshot of every GPU and every GPU process each second and
  aggregates it (mean/min/max/last per metric); once a minute the script calls `collect()`,
  appends the aggregate as one JSON line to a file on disk and clears the buffer. That is the
  least nvitop can do and still keep what it collects. (root_pids={1}: every process on the
  GPUs; the script holds pid 1's HostProcess, which the collector keeps only weakly.)

Each program runs alone in its own process; after --warmup seconds its CPU (user + system of
all its threads, from /proc/PID/stat) is measured over --seconds of wall time. Rounds alternate
the order; each round's CPU per minute is printed, and the median and range over the rounds.
Afterwards the script checks that both really recorded every process. Target (issue 36): at most
0.5 CPU seconds per minute in every round, and below the peer.

    .venv/bin/python benchmarks/bench_record.py [--seconds 60] [--rounds 5] [--processes 200] [--gpus 8]
        [--vramkit-src DIR] [--compare DIR]

--compare DIR adds, in every round, `vram record` from another source tree (before/after in one run,
interleaved with the others, on the same machine and shim).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import VRAM_VIA_DRIVER, Sleepers, cpu_seconds, environment, scenario, shim_env, write_scenario  # noqa: E402

from vramkit.nvml.shim import write_shim  # noqa: E402

TARGET = 0.5  # CPU seconds per minute, in every round

# nvitop's collector: sampled by its own daemon thread every `interval`; a minute's aggregate is
# written to disk. SIGTERM writes what is buffered and exits.
NVITOP_COLLECTOR = """\
import json, signal, sys, threading
from nvitop import Device, HostProcess, ResourceMetricCollector

out_path, interval, every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
# The collector keeps its root processes in a WeakSet: without this reference to pid 1's it
# forgets the root at once and collects no process at all.
root = HostProcess(1)
collector = ResourceMetricCollector(Device.all(), root_pids={1}, interval=interval)
with open(out_path, "a") as out, collector(tag="record"):
    while True:
        stopping = stop.wait(every)
        out.write(json.dumps(collector.collect()) + "\\n")
        out.flush()
        collector.clear()
        if stopping:
            break
"""


def measure(cmd: list[str], env: dict[str, str], seconds: float, warmup: float) -> float:
    child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        time.sleep(warmup)
        if child.poll() is not None:
            raise SystemExit(f"bench_record: {cmd[0]} exited {child.returncode}: "
                             f"{child.stderr.read().decode(errors='replace')[-500:]}")  # type: ignore[union-attr]
        start = cpu_seconds(child.pid)
        time.sleep(seconds)
        used = cpu_seconds(child.pid) - start
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        try:
            _, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            _, err = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"bench_record: {' '.join(cmd[:3])} exited {child.returncode}: "
                         f"{err.decode(errors='replace').strip()[-500:]}")
    return used


def check_vram(db: Path, processes: int, name: str = "vram") -> str:
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        samples = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM proc_raw WHERE sample = (SELECT max(sample) FROM proc_raw)"
                            ).fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM jobs WHERE start_ticks IS NOT NULL").fetchone()[0]
    finally:
        conn.close()
    if jobs < processes:
        raise SystemExit(f"bench_record: vram recorded {jobs} process lives with a host side, expected {processes}")
    return f"{name}: {samples} samples, {rows} (process, GPU) rows in the last, {jobs} process lives, " \
           f"{db.stat().st_size / 2**20:.1f} MiB on disk"


def check_nvitop(log: Path, processes: int) -> str:
    lines = log.read_text().splitlines()
    pids = {key.split("/")[1] for line in lines for key in json.loads(line) if "/pid:" in key}
    if len(pids) < processes:
        raise SystemExit(f"bench_record: nvitop's collector saw {len(pids)} processes, expected {processes}")
    return f"nvitop: {len(lines)} aggregates written, {len(pids)} processes in them, " \
           f"{log.stat().st_size / 2**20:.1f} MiB on disk"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured wall time per program and round (60)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds after start before measuring (5)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the order alternates (5)")
    ap.add_argument("--processes", type=int, default=200, help="real processes holding GPU memory (200)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    ap.add_argument("--vramkit-src", type=Path, metavar="DIR",
                    help="run vramkit (vram and the shim) from this source tree: before/after")
    ap.add_argument("--compare", type=Path, metavar="DIR",
                    help="also run vram record from this source tree in every round (vram and its shim from DIR)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="vram-bench-record-") as tmp, Sleepers(args.processes) as sleepers:
        tmp_path = Path(tmp)
        scenario_file = write_scenario(tmp_path / "machine.json", scenario(sleepers.pids, real=True, gpus=args.gpus))
        shim = write_shim(tmp_path / "shim").parent
        env = shim_env(shim, scenario_file)
        if args.vramkit_src is not None:  # the shim imports vramkit too: from the same tree as vram
            env["PYTHONPATH"] += os.pathsep + str(args.vramkit_src.resolve())
        compared = f"vram record ({args.compare.resolve().parent.name or args.compare})" if args.compare else ""
        if args.compare is not None:
            compare_env = shim_env(shim, scenario_file)
            compare_env["PYTHONPATH"] += os.pathsep + str(args.compare.resolve())
        print(f"bench_record: {args.gpus} simulated GPUs, {args.processes} real processes, 1 s interval, "
              f"{args.seconds:g} s measured per program and round after {args.warmup:g} s, "
              f"{args.rounds} rounds; {environment()}"
              + (f"\nvramkit from {args.vramkit_src.resolve()}" if args.vramkit_src else "")
              + (f"\n{compared}: vramkit from {args.compare.resolve()}" if args.compare else ""))
        used: dict[str, list[float]] = {"vram record": [], "nvitop collector": []}
        if compared:
            used[compared] = []
        checks = []
        for r in range(args.rounds):
            names = list(used)
            for name in names[r % len(names):] + names[:r % len(names)]:  # each program first in turn
                if name.startswith("vram record"):
                    db = tmp_path / f"history-{r}-{len(checks)}.db"
                    cmd = [sys.executable, "-c", VRAM_VIA_DRIVER, "record", "--db", str(db), "--interval", "1s",
                           "--quiet"]
                    used[name].append(measure(cmd, compare_env if name == compared else env, args.seconds,
                                              args.warmup))
                    checks.append(check_vram(db, args.processes, name if name == compared else "vram"))
                else:
                    log = tmp_path / f"nvitop-{r}.jsonl"
                    cmd = [sys.executable, "-c", NVITOP_COLLECTOR, str(log), "1", "60"]
                    used[name].append(measure(cmd, env, args.seconds, args.warmup))
                    checks.append(check_nvitop(log, args.processes))

    # CPU seconds per minute, each round and over all of them.
    rates = {name: [60 * x / args.seconds for x in v] for name, v in used.items()}
    per_minute = {name: statistics.mean(r) for name, r in rates.items()}
    peer = per_minute["nvitop collector"]
    width = max(17, *map(len, rates))
    print(f"\n{'program':<{width}} {'CPU s/min':>9} {'% of a core':>12} {'median':>7} {'min':>6} {'max':>6}  "
          f"{'per round (CPU s/min)':<34} vs nvitop")
    for name, r in rates.items():
        ratio = f"{per_minute[name] / peer:6.2f}x" if peer else "   n/a"
        print(f"{name:<{width}} {per_minute[name]:9.3f} {100 * per_minute[name] / 60:11.2f}% "
              f"{statistics.median(r):7.3f} {min(r):6.3f} {max(r):6.3f}  "
              f"{', '.join(f'{x:.3f}' for x in r):<34} {ratio}")
    print("\n" + "\n".join(checks))
    worst = max(rates["vram record"])
    met = worst <= TARGET and per_minute["vram record"] < peer
    print(f"\ntarget (at most {TARGET} CPU s/min in every round, and below nvitop's collector): "
          f"{'MET' if met else 'NOT MET'} (worst round {worst:.3f}, mean {per_minute['vram record']:.3f} "
          f"vs {peer:.3f} CPU s/min)")
    if compared:
        print(f"{compared}: worst round {max(rates[compared]):.3f}, mean {per_minute[compared]:.3f} CPU s/min; "
              f"this tree / it: {per_minute['vram record'] / per_minute[compared]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
