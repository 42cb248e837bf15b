"""An hour of the long-running programs at once: `vram top`, `vram serve` and `vram record`, side by
side on one simulated machine of 8 GPUs and 500 real processes, their resident memory (and CPU)
printed once a minute, and whether each stayed flat after the warm-up.

All three run as on a GPU server: on the pynvml shim (`vram sim shim`), vram on its real-driver
path through it (the child imports the shim as `pynvml`, then opens "the driver", no --simulate),
each sampling every --interval (1 s):
- `vram top --interval 1` in its own tmux server (120x40), told alive by its table's heading;
- `vram serve --listen 127.0.0.1:0 --interval 1s`, scraped for /metrics every --scrape-every
  seconds (15, Prometheus' default) on a fresh connection; every scrape must carry all processes;
- `vram record --interval 1s` into a real SQLite file ($VRAM_DB, which serve reads too, as beside
  a recorder on a server); at the end its samples are counted.

Once a minute (--every): each program's VmRSS and its CPU share since the line before (user +
system of all its threads, from /proc/PID/stat), and the load average. A program that dies, a top
that stops showing its table or a scrape that misses processes ends the run with the reason.

The verdict per program: flat when, after the first --warmup minutes, its RSS never rose more than
--tolerance MiB (1.0) above what it was at the end of the warm-up. Also printed: its growth over the
second half of the run (a slow leak shows there even when it stays inside the tolerance).

    .venv/bin/python benchmarks/bench_soak.py [--minutes 60] [--warmup 5] [--processes 500] [--gpus 8]
        [--interval 1] [--scrape-every 15] [--every 60] [--tolerance 1.0] [--vramkit-src DIR]

--vramkit-src DIR runs all three (and the shim) from another source tree's src/ (a snapshot of this
one, so that edits made while the hour runs do not reach modules loaded late).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import VRAM_VIA_DRIVER, Sleepers, cpu_seconds, environment, scenario, shim_env, write_scenario  # noqa: E402
from bench_serve import Exporter, parse, scrape  # noqa: E402
from bench_top import TmuxRun, memory  # noqa: E402

from vramkit.nvml.shim import write_shim  # noqa: E402

MiB = 2**20
TOP_READY = "GPU processes"  # the process table's heading: only the running view shows it


@dataclass
class Program:
    name: str
    pid: int
    rss: list[int] = field(default_factory=list)  # one a line (bytes)
    cpu: list[float] = field(default_factory=list)  # CPU % since the line before
    last_cpu: float = 0.0


def _minute(seconds: float) -> str:
    return f"{seconds / 60:.2f}".rstrip("0").rstrip(".")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _samples(db: Path) -> int:
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM samples").fetchone()[0])
    finally:
        conn.close()


def verdict(p: Program, warm: int, tolerance: float) -> tuple[bool, str]:
    """(flat, the numbers): RSS after line `warm` (the end of the warm-up) against it."""
    base, after = p.rss[warm], p.rss[warm:]
    rose = (max(after) - base) / MiB
    half = len(p.rss) // 2
    second_half = (p.rss[-1] - p.rss[half]) / MiB
    flat = rose <= tolerance
    return flat, (f"{p.rss[0] / MiB:.1f} MiB at the start, {base / MiB:.1f} after the warm-up, "
                  f"{p.rss[-1] / MiB:.1f} at the end (at most {rose:+.1f} above the warm-up's end; "
                  f"second half {second_half:+.1f})")


def run(args: argparse.Namespace) -> int:
    src = args.vramkit_src.resolve() if args.vramkit_src else None
    with tempfile.TemporaryDirectory(prefix="vram-bench-soak-") as tmp, Sleepers(args.processes) as sleepers:
        tmp_path = Path(tmp)
        scenario_file = write_scenario(tmp_path / "machine.json", scenario(sleepers.pids, real=True, gpus=args.gpus))
        env = shim_env(write_shim(tmp_path / "shim").parent, scenario_file)
        if src is not None:  # the shim imports vramkit too: from the same tree
            env["PYTHONPATH"] += os.pathsep + str(src)
        db = tmp_path / "history.db"
        env.update(VRAM_DB=str(db), VRAM_LANG="en", TERM="xterm-256color")
        env.pop("NO_COLOR", None)
        vram = [sys.executable, "-c", VRAM_VIA_DRIVER]
        every = f"{args.interval:g}"
        (tmp_path / "tmux").mkdir()
        top = TmuxRun("soak", [*vram, "top", "--interval", every], env, tmp_path / "tmux")
        serve = Exporter("vram serve", [*vram, "serve", "--listen", "127.0.0.1:0", "--interval", f"{every}s"],
                         env, tmp_path / "serve.log", None)
        record_log = (tmp_path / "record.log").open("wb")
        record = subprocess.Popen([*vram, "record", "--interval", f"{every}s", "--quiet"], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=record_log)
        pids = set(sleepers.pids)
        try:
            return _watch(args, top, serve, record, tmp_path, pids, db)
        finally:
            top.close()
            serve.close()
            if record.poll() is None:
                record.terminate()
                try:
                    record.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    record.kill()
                    record.wait()
            record_log.close()


def _watch(args: argparse.Namespace, top: TmuxRun, serve: Exporter, record: subprocess.Popen, tmp_path: Path,
           pids: set[int], db: Path) -> int:
    def fail(why: str) -> int:
        print(f"bench_soak: {why}", flush=True)
        return 1

    # Ready: top shows its table, a scrape carries every process, record has written a sample.
    deadline = time.monotonic() + 120
    serve.wait_listening()
    assert serve.port is not None
    while True:
        try:
            ready = (TOP_READY in top.screen() and pids <= parse(scrape(serve.port)[1]).pids
                     and db.exists() and _samples(db) > 0)
        except (OSError, subprocess.CalledProcessError, sqlite3.Error) as e:  # the database may be mid-creation
            ready = False
            why = str(e)
        else:
            why = ""
        if ready:
            break
        if record.poll() is not None:
            return fail(f"vram record exited {record.returncode}: "
                        f"{(tmp_path / 'record.log').read_text(errors='replace').strip()[-500:]}")
        if serve.proc.poll() is not None:
            return fail(str(serve.died()))
        if time.monotonic() > deadline:
            return fail(f"not all three ready within 120 s ({why or 'top: ' + top.screen()[-400:]})")
        time.sleep(0.5)

    programs = [Program("vram top", top.pid), Program("vram serve", serve.proc.pid),
                Program("vram record", record.pid)]
    began = time.monotonic()
    for p in programs:
        p.last_cpu = cpu_seconds(p.pid)
        p.rss.append(memory(p.pid)[0])
    lines = int(args.minutes * 60 / args.every)
    width = max(len(p.name) for p in programs)
    print(f"{'minute':>6} {'load':>5}  " + "  ".join(f"{p.name:>{width}} {'RSS MiB':>7} {'CPU':>5}" for p in programs))
    print(f"{_minute(0.0):>6} {os.getloadavg()[0]:5.2f}  "
          + "  ".join(f"{'':>{width}} {p.rss[0] / MiB:7.1f} {'':>5}" for p in programs), flush=True)
    scrapes = 0
    next_scrape = began
    for line in range(1, lines + 1):
        due = began + line * args.every
        while (now := time.monotonic()) < due:
            if now >= next_scrape:
                try:
                    seen = parse(scrape(serve.port)[1]).pids
                except OSError as e:
                    return fail(f"a scrape of vram serve failed: {e}")
                if not pids <= seen:
                    return fail(f"a scrape of vram serve carried {len(pids & seen)} of the {len(pids)} processes")
                scrapes += 1
                next_scrape += args.scrape_every
            time.sleep(max(0.0, min(due, next_scrape) - time.monotonic()))
        for p in programs:
            if not _alive(p.pid):
                return fail(f"{p.name} died before minute {_minute(line * args.every)}")
            cpu = cpu_seconds(p.pid)
            p.cpu.append(100 * (cpu - p.last_cpu) / args.every)
            p.last_cpu = cpu
            p.rss.append(memory(p.pid)[0])
        if TOP_READY not in top.screen():
            return fail(f"vram top stopped showing its table:\n{top.screen()}")
        print(f"{_minute(line * args.every):>6} {os.getloadavg()[0]:5.2f}  "
              + "  ".join(f"{'':>{width}} {p.rss[-1] / MiB:7.1f} {p.cpu[-1]:4.1f}%" for p in programs), flush=True)

    samples = _samples(db)
    print(f"\n{scrapes} scrapes of /metrics, each with all {len(pids)} processes; "
          f"vram record wrote {samples} samples in {args.minutes:g} minutes and more")
    warm = round(args.warmup * 60 / args.every)
    all_flat = True
    for p in programs:
        flat, numbers = verdict(p, warm, args.tolerance)
        all_flat &= flat
        cpu = sorted(p.cpu)
        print(f"{p.name}: {'FLAT' if flat else 'NOT FLAT'} after minute {args.warmup:g} "
              f"(within {args.tolerance:g} MiB): {numbers}; CPU {cpu[len(cpu) // 2]:.1f}% of a core "
              f"(median of the lines; {cpu[0]:.1f}-{cpu[-1]:.1f}%)")
    print(f"target (each RSS flat after the warm-up): {'MET' if all_flat else 'NOT MET'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0, help="how long all three run (60)")
    ap.add_argument("--warmup", type=float, default=5.0, help="minutes of warm-up the verdict leaves out (5)")
    ap.add_argument("--processes", type=int, default=500, help="real processes holding GPU memory (500)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between each program's readings (1)")
    ap.add_argument("--scrape-every", type=float, default=15.0, help="seconds between scrapes of /metrics (15)")
    ap.add_argument("--every", type=float, default=60.0, help="seconds between lines of the curve (60)")
    ap.add_argument("--tolerance", type=float, default=1.0, help="MiB the RSS may rise after the warm-up (1.0)")
    ap.add_argument("--vramkit-src", type=Path, metavar="DIR", help="vramkit from this source tree's src/")
    args = ap.parse_args(argv)
    if args.every <= 0 or args.scrape_every <= 0 or args.interval <= 0:
        ap.error("--every, --scrape-every and --interval: more than 0")
    if not 0 <= args.warmup * 60 < args.minutes * 60 - args.every:
        ap.error("--warmup: at least one line of the curve must come after it, within --minutes")
    if args.vramkit_src is not None and not (args.vramkit_src / "vramkit" / "__init__.py").is_file():
        ap.error(f"--vramkit-src {args.vramkit_src} has no vramkit/__init__.py")
    print(f"bench_soak: vram top, serve and record at once, each every {args.interval:g} s, on {args.gpus} "
          f"simulated GPUs (pynvml shim) and {args.processes} real processes, {args.minutes:g} minutes; "
          f"{environment()}" + (f"\nvramkit from {args.vramkit_src.resolve()}" if args.vramkit_src else ""),
          flush=True)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
