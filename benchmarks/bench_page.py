"""The page of `vram serve` on a big server (issue 32: 8 GPUs x 200 processes, a reading every
2 s) in a real headless Chromium: how busy the browser's main thread is between updates (the
issue's target: at most 3 %), its long tasks (none over 50 ms per update), and what each update
costs in bytes and in the page's own script.

The machine is tests/helpers.py's crowded_scenario (23 users; every other process's SM % moves
at every reading, so every GPU changes at every update), served by `vram serve --simulate FILE
--interval 2s`. One Chromium (selenium, /usr/bin/chromedriver) for the whole run; each round
loads the page afresh, lets it settle (the whole JSON, then --settle deltas), then measures
--updates updates:

- busy: Chromium's main-thread task time over the window's wall time (CDP Performance.getMetrics
  TaskDuration: what the issue's "main thread busy" is), with its script, layout and style parts.
  Task times are wall time: on a loaded machine a task that waits for a core counts that wait.
- cpu: the CPU time of Chromium's renderer main threads (/proc/PID/task/PID/stat of every
  `--type=renderer` process) over the same wall time: what the page's work costs, less swayed by
  the neighbours.
- long tasks over 50 ms (a `longtask` PerformanceObserver) and the longest; bytes of each update
  as the page receives it; the page's own handler time per update (wrapped listeners).

The peer, in the same rounds, interleaved: the floor, the same Chromium on an empty page for as
long (what the browser costs by itself under the machine's load at that moment); with
--vramkit-src DIR also vram serve from another source tree (an older commit's src/: before and
after). Each round's numbers are printed, then the median and the range over the rounds.

    .venv/bin/python benchmarks/bench_page.py [--rounds 5] [--updates 6] [--gpus 8] [--processes 200]
        [--vramkit-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import TICKS, environment, program_env  # noqa: E402
from helpers import chromium_sandbox_args, crowded_scenario  # noqa: E402

CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 60.0  # seconds before a wait for the page gives up
FLOOR_PAGE = "data:text/html,<!doctype html><title>floor</title><p>nothing here"

# Before the page's own script: each event's size and handler time, and Chromium's long tasks.
MEASURE = """
window.__events = [];
window.__waiters = [];
const Source = window.EventSource;
window.EventSource = class extends Source {
  addEventListener(type, listener, options) {
    return super.addEventListener(type, (event) => {
      const began = performance.now();
      listener(event);
      if (type === "snapshot" || type === "delta") {
        window.__events.push({ type: type, bytes: event.data.length, ms: performance.now() - began });
        for (const waiter of window.__waiters.splice(0)) waiter();
      }
    }, options);
  }
};
window.__long = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__long.push({ start: e.startTime, duration: e.duration });
}).observe({ type: 'longtask', buffered: true });
"""
READ = "return {events: window.__events.slice(), long: window.__long.slice(), now: performance.now()}"
# Waits in the page until it has taken N events: one DevTools command for the whole window (a
# command is a task on the main thread: polling for the count would add to what is measured).
AWAIT = """
const [n, done] = arguments;
const check = () => { if (window.__events.length >= n) done(true); else window.__waiters.push(check); };
check();
"""
METRICS = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")


@dataclass
class Window:
    """One round's measurement of one page."""

    wall: float  # seconds
    metrics: dict[str, float]  # CDP's durations over the window, seconds
    cpu: float  # renderer main threads' CPU seconds over the window
    updates: int = 0
    long_tasks: list[float] = field(default_factory=list)  # ms
    bytes: list[int] = field(default_factory=list)
    script_ms: list[float] = field(default_factory=list)

    def share(self, name: str = "TaskDuration") -> float:
        return 100 * self.metrics[name] / self.wall

    @property
    def cpu_share(self) -> float:
        return 100 * self.cpu / self.wall


def renderer_threads() -> list[int]:
    """The pids of Chromium's renderer processes (their main thread's tid is the pid)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read()  # (a zygote's child rewrites it: one string, spaces between)
        except OSError:
            continue
        if b"--type=renderer" in argv:
            found.append(int(entry))
    return found


def main_thread_cpu(pids: list[int]) -> dict[int, float]:
    """CPU seconds of each renderer's main thread (a renderer gone meanwhile: absent)."""
    found = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/task/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return found


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the renderers alive at both readings spent between them."""
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())


def cdp_metrics(driver) -> dict[str, float]:
    values = {m["name"]: m["value"] for m in driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
    return {name: values.get(name, 0.0) for name in METRICS}


class Serve:
    """`vram serve` on the crowded machine, on a free port."""

    def __init__(self, scenario: Path, interval: str, src: str | None):
        env = program_env(Path(src) if src else None)
        env.pop("VRAM_SIM_TIME", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "vramkit", "serve", "--listen", "127.0.0.1:0",
                                      "--interval", interval, "--simulate", str(scenario)],
                                     env=env, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if not found:
            raise SystemExit(f"bench_page: vram serve did not start: {line.strip()}")
        self.url = found.group(1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def until(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(lambda d: condition(d), message=what)


def measure_page(driver, url: str, settle: int, updates: int) -> Window:
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": MEASURE})
    try:
        driver.get(url)
        until(driver, lambda d: sum(e["type"] == "delta" for e in d.execute_script(READ)["events"]) >= settle,
              f"{settle} updates after the whole reading")
        start, metrics0, pids = driver.execute_script(READ), cdp_metrics(driver), renderer_threads()
        cpu0 = main_thread_cpu(pids)
        seen = len(start["events"])
        driver.execute_async_script(AWAIT, seen + updates)
        end, metrics1, cpu1 = driver.execute_script(READ), cdp_metrics(driver), main_thread_cpu(pids)
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})
    events = end["events"][seen:]
    kinds = {e["type"] for e in events}
    if kinds != {"delta"}:
        print(f"  (note: events in the window: {sorted(kinds)})")
    window_ms = end["now"] - start["now"]
    return Window(window_ms / 1000, {k: metrics1[k] - metrics0[k] for k in METRICS}, cpu_between(cpu0, cpu1),
                  updates=len(events),
                  long_tasks=[t["duration"] for t in end["long"] if t["start"] >= start["now"]],
                  bytes=[e["bytes"] for e in events], script_ms=[e["ms"] for e in events])


def measure_floor(driver, seconds: float) -> Window:
    driver.get(FLOOR_PAGE)
    time.sleep(0.5)
    metrics0, pids = cdp_metrics(driver), renderer_threads()
    cpu0, wall0 = main_thread_cpu(pids), time.monotonic()
    time.sleep(seconds)
    metrics1, cpu1, wall1 = cdp_metrics(driver), main_thread_cpu(pids), time.monotonic()
    return Window(wall1 - wall0, {k: metrics1[k] - metrics0[k] for k in METRICS}, cpu_between(cpu0, cpu1))


def line(name: str, w: Window) -> str:
    text = (f"  {name:<8} busy {w.share():5.2f} % (script {w.share('ScriptDuration'):.2f}, layout "
            f"{w.share('LayoutDuration'):.2f}, style {w.share('RecalcStyleDuration'):.2f}); renderer main-thread "
            f"CPU {w.cpu_share:5.2f} %")
    if w.updates:
        text += (f"; {w.updates} updates in {w.wall:.1f} s; long tasks > 50 ms: {len(w.long_tasks)}"
                 f"{f' (longest {max(w.long_tasks):.0f} ms)' if w.long_tasks else ''}; bytes per update "
                 f"{statistics.median(w.bytes):.0f} median / {max(w.bytes)} max; script per update "
                 f"{statistics.median(w.script_ms):.1f} ms median / {max(w.script_ms):.1f} max")
    return text


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f} % median ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=6, help="updates measured per round (default 6)")
    parser.add_argument("--settle", type=int, default=2, help="updates let pass after the page loads (default 2)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=200, help="per GPU (default 200)")
    parser.add_argument("--interval", default="2s", help="vram serve's --interval (default 2s)")
    parser.add_argument("--vramkit-src", metavar="DIR", help="also run vram serve from this source tree")
    args = parser.parse_args()

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None or not os.access(CHROMEDRIVER, os.X_OK):
        raise SystemExit("bench_page: needs chromium and /usr/bin/chromedriver "
                         "(Debian: apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
    except ImportError:
        raise SystemExit("bench_page: needs selenium (.venv/bin/pip install selenium)") from None

    print(f"bench_page: {environment()}; load average {os.getloadavg()[0]:.1f}")
    print(f"vram serve --interval {args.interval}, {args.gpus} GPUs x {args.processes} processes; "
          f"{args.rounds} rounds of {args.updates} updates; the floor: an empty page for as long")
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp:
        scenario = Path(tmp) / "crowded.json"
        scenario.write_text(json.dumps(crowded_scenario(args.gpus, args.processes)))
        servers = {"vram": Serve(scenario, args.interval, None)}
        if args.vramkit_src:
            servers["other"] = Serve(scenario, args.interval, args.vramkit_src)
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900",
                    *chromium_sandbox_args()):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
        driver.set_script_timeout(WAIT)
        driver.execute_cdp_cmd("Performance.enable", {})
        results: dict[str, list[Window]] = {name: [] for name in [*servers, "floor"]}
        try:
            for n in range(args.rounds):
                print(f"round {n + 1} (load average {os.getloadavg()[0]:.1f}):")
                order = list(servers) if n % 2 == 0 else list(reversed(servers))
                for name in order:
                    w = measure_page(driver, servers[name].url, args.settle, args.updates)
                    results[name].append(w)
                    print(line(name, w), flush=True)
                floor = measure_floor(driver, statistics.mean(w.wall for w in results["vram"][-1:]))
                results["floor"].append(floor)
                print(line("floor", floor), flush=True)
        finally:
            driver.quit()
            for server in servers.values():
                server.close()
    print(f"over {args.rounds} rounds:")
    for name, windows in results.items():
        text = (f"  {name:<8} busy {spread([w.share() for w in windows])}; renderer main-thread CPU "
                f"{spread([w.cpu_share for w in windows])}")
        if name != "floor":
            longs = [t for w in windows for t in w.long_tasks]
            text += (f"; long tasks > 50 ms: {len(longs)} in {sum(w.updates for w in windows)} updates"
                     f"{f' (longest {max(longs):.0f} ms)' if longs else ''}; bytes per update "
                     f"{statistics.median(b for w in windows for b in w.bytes):.0f} median")
        print(text)
    busy = {name: statistics.median(w.share() for w in windows) for name, windows in results.items()}
    cpu = {name: statistics.median(w.cpu_share for w in windows) for name, windows in results.items()}
    print(f"vram's page above the floor: busy {busy['vram'] - busy['floor']:.2f} points, CPU "
          f"{cpu['vram'] - cpu['floor']:.2f} points (target: busy <= 3 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
