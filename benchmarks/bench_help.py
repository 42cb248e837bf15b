"""CPU time of `vram --help` and `vram --version` against a bare `python -c pass`, in one run.

The floor for any Python command is the interpreter starting (`python -c pass`); the target
(issue 19 item 4) is `vram --help` and `vram --version` in at most 30 ms of CPU where the
interpreter takes ~11 ms, i.e. at most 2.7x `python -c pass` measured in the same run.
`import vramkit` alone (what every `vram` command pays before its own code) is shown as context.

CPU time is user + system of the child, from wait4's rusage (not wall time: the machine may be
shared). Programs run from cached bytecode, as after an install (PYTHONDONTWRITEBYTECODE unset
for them). Rounds are interleaved, the order rotating each round; medians are compared.

    .venv/bin/python benchmarks/bench_help.py [--runs 31]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import BIN, environment  # noqa: E402

TARGET_RATIO = 30 / 11  # 30 ms of CPU where the interpreter alone takes 11 ms


def _vram(*args: str) -> list[str]:
    script = BIN / "vram"  # the installed entry point, as a user runs it
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "vramkit", *args]


PROGRAMS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import vramkit": [sys.executable, "-c", "import vramkit"],
    "vram --help": _vram("--help"),
    "vram --version": _vram("--version"),
    "vram status --help": _vram("status", "--help"),
}
HEADLINE = ("vram --help", "vram --version")


def _cpu_seconds(cmd: list[str], env: dict[str, str]) -> float:
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"bench_help: {' '.join(cmd)} exited {proc.returncode}: "
                         f"{err.decode(errors='replace').strip()[-500:]}")
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=31, help="timed rounds (default 31)")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "VRAM_SIMULATE")}

    names = list(PROGRAMS)
    for name in names:  # warm-up: bytecode written, files in the page cache
        for _ in range(2):
            _cpu_seconds(PROGRAMS[name], env)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.runs):
        for name in names[i % len(names):] + names[:i % len(names)]:
            samples[name].append(_cpu_seconds(PROGRAMS[name], env))

    floor = statistics.median(samples["python -c pass"])
    print(f"bench_help: CPU time (user + system), {args.runs} interleaved rounds; {environment()}")
    print()
    print(f"{'program':<20}{'median':>9}{'min':>9}{'max':>9}  vs python -c pass")
    for name in names:
        cpu = samples[name]
        median = statistics.median(cpu)
        print(f"{name:<20}{median * 1000:>7.1f}ms{min(cpu) * 1000:>7.1f}ms{max(cpu) * 1000:>7.1f}ms"
              f"  {median / floor:5.2f}x")
    print()
    met = True
    for name in HEADLINE:
        ratio = statistics.median(samples[name]) / floor
        met &= ratio <= TARGET_RATIO
        print(f"target ({name} <= {TARGET_RATIO:.1f}x python -c pass, 30 ms where it takes 11): "
              f"{'MET' if ratio <= TARGET_RATIO else 'NOT MET'} ({ratio:.2f}x)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
