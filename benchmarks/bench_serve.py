"""The exporter's cost: `vram serve` vs `nvitop-exporter`, time per scrape of /metrics and the
exporter's CPU seconds per minute, on one simulated machine of 8 GPUs and 200 processes.

The processes are real (spawned `sleep`s), so both programs find each one in /proc. Both run on
the pynvml shim (`vram sim shim`), and vram takes its real-driver path through it: the child
imports the shim as `pynvml`, then vram opens "the driver" as on a GPU server (no --simulate),
so it pays `import pynvml` and NVML's calls as nvitop-exporter does.

- vram: `vram serve --listen 127.0.0.1:0 --interval 1s` (defaults otherwise: per-process series
  with pid and user, no command line).
- nvitop-exporter: `nvitop-exporter --bind-address 127.0.0.1 --port P --interval 1` (as shipped;
  it also exports host metrics and the command line of each process in process_info).

Both sample every --interval seconds. The same scraper, in this script, asks each for /metrics
every --scrape-every seconds on a fresh connection, as Prometheus would, each scrape at a random
offset within one sampling interval (seeded: the same offsets for both), so that scrapes meet
readings in progress as often as they would with Prometheus' clock drifting against the
exporter's. Each scrape's wall time is measured here, client-side (connect to last byte), and
every body is checked to carry series for all the processes. Scrapes ask for no compression
unless --gzip (Prometheus asks for gzip; both then compress).
Each program runs alone in its own process; once a scrape shows every process and --warmup
seconds have passed, its CPU (user + system of all its threads, from /proc/PID/stat) is measured
over --seconds of wall time while the scraper keeps scraping. Rounds alternate the order.
Scrape times are printed as median / 95th percentile / max over all rounds, and the same per round.
Targets: vram's 95th-percentile scrape at most 15 ms (issue 36, at 8 x 1,000: --processes 1000),
and vram's CPU at most half the peer's.

--profile: afterwards, where vram's time goes, in one process on the same shim: a reading of the
machine and a /metrics render timed apart, and cProfile's top functions of each.

nvitop-exporter is not a dependency of vramkit; install it into the same environment with
`.venv/bin/pip install nvitop-exporter`. Without it the script measures vram alone and says so.

    .venv/bin/python benchmarks/bench_serve.py [--seconds 60] [--rounds 5] [--interval 1] [--scrape-every 5]
        [--processes 200] [--gzip] [--profile] [--vram-flag=--process-commands] [--vramkit-src DIR]

--vramkit-src DIR runs vram serve from another source tree (an older commit's src/): before and after.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import importlib.util
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import (  # noqa: E402
    BIN,
    VRAM_VIA_DRIVER,
    Sleepers,
    cpu_seconds,
    environment,
    free_port,
    scenario,
    shim_env,
    write_scenario,
)

from vramkit.nvml.shim import write_shim  # noqa: E402

VRAM, PEER = "vram serve", "nvitop-exporter"
INSTALL_PEER = ".venv/bin/pip install nvitop-exporter"
_PID_LABEL = re.compile(rb'[{,]pid="(\d+)"')
_VRAM_URL = re.compile(r"http://127\.0\.0\.1:(\d+)/")
_READ_SECONDS = re.compile(rb"^vram_read_duration_seconds ([0-9.e+-]+)$", re.M)


@dataclass
class Body:
    """What one /metrics answer carried."""

    series: int  # sample lines
    process_series: int  # sample lines with a pid label
    pids: set[int]
    size: int


def parse(body: bytes) -> Body:
    lines = [line for line in body.split(b"\n") if line and not line.startswith(b"#")]
    pids = set()
    process_series = 0
    for line in lines:
        m = _PID_LABEL.search(line)
        if m:
            process_series += 1
            pids.add(int(m.group(1)))
    return Body(len(lines), process_series, pids, len(body))


def scrape(port: int, gzip_ok: bool = False, timeout: float = 10.0) -> tuple[float, bytes]:
    """(wall seconds from connect to the last byte, body) of one GET /metrics on a fresh
    connection; `gzip_ok`: saying Accept-Encoding: gzip, as Prometheus does (the body is
    decompressed after the clock stops)."""
    headers = {"Accept": "text/plain", **({"Accept-Encoding": "gzip"} if gzip_ok else {})}
    began = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    elapsed = time.perf_counter() - began
    if resp.status != 200:
        raise OSError(f"HTTP {resp.status}")
    if resp.getheader("Content-Encoding", "") == "gzip":
        body = gzip.decompress(body)
    return elapsed, body


@dataclass
class Result:
    cpu: list[float] = field(default_factory=list)  # CPU seconds per round
    scrapes: list[float] = field(default_factory=list)  # seconds per scrape in the measured windows
    per_round: list[list[float]] = field(default_factory=list)  # the same, round by round
    bodies: list[Body] = field(default_factory=list)  # one per round (the last scrape's)
    read_seconds: list[float] = field(default_factory=list)  # vram's own vram_read_duration_seconds


class Exporter:
    """One exporter process, its stderr in a file; `port` once it listens."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log: Path, port: int | None):
        self.name, self.log, self.port = name, log, port
        self._err = log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._err)

    def died(self) -> SystemExit:
        return SystemExit(f"bench_serve: {self.name} exited {self.proc.returncode}: "
                          f"{self.log.read_text(errors='replace').strip()[-800:]}")

    def wait_listening(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.port is None:  # vram says its URL on stderr's first line
            m = _VRAM_URL.search(self.log.read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise self.died()
            if time.monotonic() > deadline:
                raise SystemExit(f"bench_serve: {self.name} did not say where it listens in {timeout:g} s")
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()


def run_one(exporter: Exporter, pids: set[int], args: argparse.Namespace, result: Result) -> None:
    """Warm up until a scrape shows every process, then scrape every --scrape-every seconds for
    --seconds while measuring the exporter's CPU."""
    exporter.wait_listening()
    assert exporter.port is not None
    deadline = time.monotonic() + 60
    while True:
        try:
            _, body = scrape(exporter.port)
            if pids <= parse(body).pids:
                break
        except OSError:
            pass
        if exporter.proc.poll() is not None:
            raise exporter.died()
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_serve: {exporter.name} showed not all {len(pids)} processes within 60 s")
        time.sleep(0.2)
    time.sleep(args.warmup)
    start_cpu = cpu_seconds(exporter.proc.pid)
    began = time.monotonic()
    n = 0
    last = b""
    # Each scrape lands at a random phase of the sampling cycle (seeded: the same phases for both
    # programs), so the times cover scrapes that meet a reading in progress as often as a
    # Prometheus whose scrapes drift against the exporter's clock would.
    phases = random.Random(args.seed)
    result.per_round.append([])
    while True:
        due = began + n * args.scrape_every + phases.uniform(0, min(args.interval, args.scrape_every))
        if due >= began + args.seconds:
            break
        time.sleep(max(0.0, due - time.monotonic()))
        try:
            elapsed, last = scrape(exporter.port, args.gzip)
        except OSError as e:
            raise SystemExit(f"bench_serve: a scrape of {exporter.name} failed: {e}") from None
        result.scrapes.append(elapsed)
        result.per_round[-1].append(elapsed)
        seen = parse(last)
        if not pids <= seen.pids:
            raise SystemExit(f"bench_serve: a scrape of {exporter.name} carried {len(pids & seen.pids)} of the "
                             f"{len(pids)} processes")
        m = _READ_SECONDS.search(last)
        if m:
            result.read_seconds.append(float(m.group(1)))
        n += 1
    time.sleep(max(0.0, began + args.seconds - time.monotonic()))
    result.cpu.append(cpu_seconds(exporter.proc.pid) - start_cpu)
    if exporter.proc.poll() is not None:
        raise exporter.died()
    result.bodies.append(parse(last))


# vram serve's two costs, apart, in one process on the shim (argv: renders to profile, top N).
PROFILE_VRAM = """\
import cProfile, io, os, pstats, statistics, sys, time
import pynvml
del os.environ["VRAM_SIMULATE"]
from vramkit.serve.metrics import vram_metrics
from vramkit.serve.service import Options, Service
from vramkit.machine import open_machine

runs, top = int(sys.argv[1]), int(sys.argv[2])
service = Service(open_machine(None), Options(interval=1.0))
reads, renders, families = [], [], []
for _ in range(runs):
    a = time.perf_counter(); snap = service.collector.snapshot(); service._taken(snap)
    b = time.perf_counter(); body = service.metrics()
    c = time.perf_counter(); list(vram_metrics(snap, service.state, False, 2000))
    reads.append(b - a); renders.append(c - b); families.append(time.perf_counter() - c)
ms = lambda v: statistics.median(v) * 1000
print(f"in one process: a reading {ms(reads):.1f}ms, a /metrics render {ms(renders):.1f}ms "
      f"(building the metric families {ms(families):.1f}ms of it, the rest prometheus_client's text), "
      f"{len(body) / 1024:.0f} KiB (medians of {runs})")
for name, work in (("render", service.metrics), ("reading", service.collector.snapshot)):
    profile = cProfile.Profile()
    for _ in range(runs):
        service.sequence += 1  # a new snapshot for the render cache
        profile.runcall(work)
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    print(f"\\ncProfile, {runs} x {name}, by own time:\\n" + text[text.index("   ncalls"):].rstrip())
"""


def _peer_command(port: int, interval: float) -> list[str]:
    args = ["--bind-address", "127.0.0.1", "--port", str(port), "--interval", f"{interval:g}"]
    path = BIN / "nvitop-exporter"
    return [str(path), *args] if path.exists() else [sys.executable, "-m", "nvitop_exporter", *args]


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured wall time per program and round (60)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds after the first full scrape before "
                    "measuring (5)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the order alternates (5)")
    ap.add_argument("--interval", type=float, default=1.0, help="both exporters' sampling interval, seconds (1)")
    ap.add_argument("--scrape-every", type=float, default=5.0, help="seconds between scrapes of each (5)")
    ap.add_argument("--processes", type=int, default=200, help="real processes holding GPU memory (200)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (8)")
    ap.add_argument("--profile", action="store_true", help="afterwards, where vram's time goes (cProfile)")
    ap.add_argument("--gzip", action="store_true", help="scrape with Accept-Encoding: gzip, as Prometheus does "
                    "(off: neither is asked to compress)")
    ap.add_argument("--seed", type=int, default=12, help="seed of the scrapes' phases (12)")
    ap.add_argument("--vram-flag", action="append", default=[], metavar="FLAG",
                    help="one more flag for vram serve, e.g. --vram-flag=--process-commands (repeatable)")
    ap.add_argument("--vramkit-src", type=Path, metavar="DIR",
                    help="run vram serve from this source tree (the src/ of an older checkout: before/after)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    src = args.vramkit_src.resolve() if args.vramkit_src else None
    if src is not None and not (src / "vramkit" / "__init__.py").is_file():
        raise SystemExit(f"bench_serve: --vramkit-src {src} has no vramkit/__init__.py")

    have_peer = importlib.util.find_spec("nvitop_exporter") is not None
    if not have_peer:
        print(f"bench_serve: nvitop-exporter is not installed for {sys.executable}, so there is no peer to "
              f"compare with; measuring vram serve alone. Install it with: {INSTALL_PEER} "
              "(it is not a dependency of vramkit)")
    names = [VRAM, PEER] if have_peer else [VRAM]
    results = {name: Result() for name in names}

    with tempfile.TemporaryDirectory(prefix="vram-bench-serve-") as tmp, Sleepers(args.processes) as sleepers:
        tmp_path = Path(tmp)
        scenario_file = write_scenario(tmp_path / "machine.json", scenario(sleepers.pids, real=True, gpus=args.gpus))
        env = shim_env(write_shim(tmp_path / "shim").parent, scenario_file)
        pids = set(sleepers.pids)
        print(f"bench_serve: {args.gpus} simulated GPUs, {args.processes} real processes, on the pynvml shim; "
              f"sampling every {args.interval:g} s, one scrape every {args.scrape_every:g} s; {args.seconds:g} s "
              f"measured per program and round after {args.warmup:g} s, {args.rounds} rounds; {environment()}")
        if args.gzip:
            print("scrapes say Accept-Encoding: gzip")
        if args.vram_flag:
            print(f"vram serve also runs with: {' '.join(args.vram_flag)}")
        if src is not None:
            print(f"vram serve from {src}")
        vram_env = {**env, "PYTHONPATH": f"{env['PYTHONPATH']}{os.pathsep}{src}"} if src else env
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                log = tmp_path / f"{name.replace(' ', '-')}-{r}.log"
                if name == VRAM:
                    cmd = [sys.executable, "-c", VRAM_VIA_DRIVER, "serve", "--listen", "127.0.0.1:0",
                           "--interval", f"{args.interval:g}s", *args.vram_flag]
                    exporter = Exporter(name, cmd, vram_env, log, None)
                else:
                    port = free_port()
                    exporter = Exporter(name, _peer_command(port, args.interval), env, log, port)
                try:
                    run_one(exporter, pids, args, results[name])
                finally:
                    exporter.close()
        if args.profile:
            prof = subprocess.run([sys.executable, "-c", PROFILE_VRAM, "30", "12"], env=vram_env, capture_output=True,
                                  text=True, stdin=subprocess.DEVNULL)
            profile_text = prof.stdout if prof.returncode == 0 else f"profile failed: {prof.stderr[-800:]}"

    span = args.seconds * args.rounds
    per_minute = {name: 60 * sum(res.cpu) / span for name, res in results.items()}
    peer_cpu = per_minute.get(PEER)
    print(f"\n{'program':<16} {'scrape median':>13} {'p95':>8} {'max':>8} {'scrapes':>7}  {'CPU s/min':>9} "
          f"{'% core':>7}  per round (CPU s)  vs {PEER}")
    for name, res in results.items():
        ms = [s * 1000 for s in res.scrapes]
        ratio = f"{per_minute[name] / peer_cpu:6.2f}x" if peer_cpu else "   n/a"
        print(f"{name:<16} {statistics.median(ms):11.1f}ms {_pct(ms, 0.95):6.1f}ms {max(ms):6.1f}ms {len(ms):7d}  "
              f"{per_minute[name]:9.3f} {100 * per_minute[name] / 60:6.2f}%  "
              f"{', '.join(f'{x:.2f}' for x in res.cpu):<18} {ratio}")
    if have_peer:
        mine, theirs = statistics.median(results[VRAM].scrapes), statistics.median(results[PEER].scrapes)
        print(f"scrape time, vram / {PEER} (medians): {mine / theirs:.2f}x")
    print("per round, scrape median / p95 / max (ms):")
    for name, res in results.items():
        rounds = [[s * 1000 for s in r] for r in res.per_round]
        print(f"  {name:<16} " + ", ".join(f"{statistics.median(r):.1f} / {_pct(r, 0.95):.1f} / {max(r):.1f}"
                                          for r in rounds if r))

    print("\nwhat each scrape carried (the last of each round; every scrape carried all "
          f"{args.processes} processes' series):")
    for name, res in results.items():
        b = res.bodies[-1]
        print(f"  {name:<16} {b.series:6d} series, {b.process_series:6d} of them per process "
              f"({b.process_series / max(1, len(b.pids)):.1f} per process), {b.size / 1024:.0f} KiB")
    if results[VRAM].read_seconds:
        rs = [x * 1000 for x in results[VRAM].read_seconds]
        print(f"  vram's own reading of the machine (vram_read_duration_seconds): median {statistics.median(rs):.1f}ms")

    p95 = _pct(results[VRAM].scrapes, 0.95) * 1000
    scrape_ok = p95 <= 15.0
    print(f"\ntarget: scrape at most 15 ms (95th percentile): {'MET' if scrape_ok else 'NOT MET'} ({p95:.1f}ms)")
    if peer_cpu is None:
        print(f"target: CPU at most half the peer's: NOT JUDGED (no peer; {INSTALL_PEER})")
    else:
        cpu_ok = per_minute[VRAM] <= 0.5 * peer_cpu
        print(f"target: CPU at most half of {PEER}'s: {'MET' if cpu_ok else 'NOT MET'} "
              f"({per_minute[VRAM]:.3f} vs {0.5 * peer_cpu:.3f} CPU s/min)")
    if args.profile:
        print("\n" + profile_text.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
