"""`vram serve` under attack (issue 26 items 2 and 8): what a legitimate client waits, and what the
server spends, while attackers hold idle connections and event streams, or flood it with wrong
passwords. The attackers are tests/redteam/test_serve_hostile.py's (Siege, Guesser); this script times.

- siege: `idle` silent connections from 127.0.0.1 (reopened as the server drops them) and 32
  event streams; the legitimate client GETs /metrics on a fresh connection every 0.1 s.
- flood: basic auth (a bcrypt hash of cost --cost), the right password verified once, then
  `guessers` threads each sending new wrong passwords back to back on a kept-alive connection;
  the legitimate client GETs /metrics with the right password every 0.1 s. The server's CPU
  (user + system, all threads, /proc/PID/stat) over the same seconds, in cores.

Each is measured without the attack first (baseline), then with it. --src runs another checkout's
vram (e.g. a `git worktree` of an older commit) for a before/after comparison.

    .venv/bin/python benchmarks/bench_serve_hostile.py [--seconds 10] [--idle 64] [--guessers 60]
        [--cost 10] [--tls] [--src /tmp/old/src]
"""

from __future__ import annotations

import argparse
import base64
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_serve_hostile import PASSWORD, Guesser, Siege, make_cert, web_config  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Server:
    def __init__(self, src: str | None, *args: str, context: ssl.SSLContext | None = None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_")}
        env["VRAM_SIM_TIME"] = "0"
        if src:
            env["PYTHONPATH"] = src
        self.proc = subprocess.Popen([sys.executable, "-m", "vramkit", "serve", "--listen", "127.0.0.1:0",
                                      "--simulate", "demo", *args], env=env, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        self.port = int(line.split("127.0.0.1:")[1].split("/")[0])
        self.base = f"{'https' if context else 'http'}://127.0.0.1:{self.port}"
        self.context = context
        time.sleep(1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def ask(server: Server, auth: str | None) -> float | None:
    """Seconds for one GET /metrics on a fresh connection; None when it was not answered 200."""
    request = urllib.request.Request(server.base + "/metrics")
    if auth:
        request.add_header("Authorization", auth)
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30, context=server.context) as r:
            r.read()
            ok = r.status == 200
    except (OSError, urllib.error.HTTPError):
        ok = False
    return time.perf_counter() - start if ok else None


def measure(server: Server, seconds: float, auth: str | None = None) -> str:
    times: list[float] = []
    failed = 0
    cpu0, wall0 = cpu_seconds(server.proc.pid), time.monotonic()
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        t = ask(server, auth)
        if t is None:
            failed += 1
        else:
            times.append(t)
        time.sleep(0.1)
    cores = (cpu_seconds(server.proc.pid) - cpu0) / (time.monotonic() - wall0)
    if not times:
        return f"0 answered, {failed} failed; server CPU {cores:.2f} cores"
    times.sort()
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    return (f"{len(times)} answered, {failed} failed; /metrics p50 {statistics.median(times) * 1000:.1f} ms, "
            f"p95 {p95 * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms; server CPU {cores:.2f} cores")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--idle", type=int, default=64)
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--guessers", type=int, default=60)
    parser.add_argument("--cost", type=int, default=10)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--src", help="PYTHONPATH for the vram serve measured (another checkout's src/)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        context = ssl.create_default_context(cafile=str(make_cert(directory))) if args.tls else None

        server = Server(args.src, context=context) if not args.tls else None
        if server is not None:
            print(f"siege: idle {args.idle}, streams {args.streams}")
            print("  baseline:   ", measure(server, args.seconds))
            try:
                with Siege(server.port, idle=args.idle, streams=args.streams):
                    print("  under siege:", measure(server, args.seconds))
            except (OSError, AssertionError) as e:
                print(f"  under siege: the attackers could not even open their streams ({e!s:.80})")
            server.stop()

        config = web_config(directory, tls=args.tls, cost=args.cost)
        server = Server(args.src, "--web-config", str(config), context=context)
        right = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        ask(server, right)
        print(f"password flood: {args.guessers} guessers, bcrypt cost {args.cost}{', TLS' if args.tls else ''}")
        print("  baseline:   ", measure(server, args.seconds, right))
        stop = threading.Event()
        guessers = [Guesser(server.port, i, context, stop) for i in range(args.guessers)]
        for g in guessers:
            g.start()
        time.sleep(1)
        print("  under flood:", measure(server, args.seconds, right))
        stop.set()
        for g in guessers:
            g.join(timeout=60)
        answered: dict[int, int] = {}
        for g in guessers:
            for code, n in g.answers.items():
                answered[code] = answered.get(code, 0) + n
        print(f"  guesses answered: {answered}")
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
