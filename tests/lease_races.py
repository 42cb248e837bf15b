"""What the lease tests share: launchers racing for GPUs (each job records when it held which GPU)
and a neighbour's process holding lock files in the lease directory (test_lease_locks,
test_run_concurrency, test_lease_swap)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import AS_NOBODY, IS_ROOT, vram_argv, wait_for

from vramkit import leases as L

G4, G7 = "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e64", "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e67"  # demo's fitting GPUs
# Create (if need be) and flock each file named on the command line, then wait to be killed.
HOLD = ("import fcntl, os, sys, time\n"
        "fds = [os.open(p, os.O_RDONLY | os.O_CREAT, 0o644) for p in sys.argv[1:]]\n"
        "for fd in fds: fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "time.sleep(120)\n")


def sticky_lease_dir(shared_dir: Path) -> Path:
    """A lease directory like the machine's: root's (or the runner's), sticky, writable by all."""
    path = shared_dir / "leases"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def hold(children, *paths):
    """A neighbour's process holding the flock on `paths` (created by it if missing)."""
    prefix = list(AS_NOBODY) if IS_ROOT else []
    proc = children.start([*prefix, sys.executable, "-c", HOLD, *map(str, paths)])
    assert wait_for(lambda: all(L._held(p) for p in paths), timeout=20)
    return proc


def gpu_lock(where, key):
    return where / L._unit_lock_name(key)


JOB = r"""
import json, os, sys, time
records, seconds, tag = sys.argv[1], float(sys.argv[2]), sys.argv[3]
record = {"tag": tag, "pid": os.getpid(), "launcher": os.getppid(), "start": time.time(),
          "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "order": os.environ.get("CUDA_DEVICE_ORDER")}
with open(os.path.join(records, f"start-{tag}.json"), "w") as f:
    json.dump(record, f)
time.sleep(seconds)
record["end"] = time.time()
with open(os.path.join(records, f"end-{tag}.json"), "w") as f:
    json.dump(record, f)
"""


def records(where: Path, kind: str = "end") -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(where.glob(f"{kind}-*.json"))]


def launch(groups, leasing, where: Path, tag: str, seconds: float, *args: str, env_extra=None, log=None):
    argv = vram_argv("run", "--simulate", "demo", *args, "--", sys.executable, "-c", JOB, str(where), str(seconds), tag)
    env = leasing.env(**(env_extra or {}))
    return groups.start(argv, env=env, stdout=subprocess.DEVNULL, stderr=log or subprocess.DEVNULL)


def assert_no_overlap(recs: list[dict]) -> dict[str, list[dict]]:
    by_gpu: dict[str, list[dict]] = collections.defaultdict(list)
    for r in recs:
        by_gpu[r["cvd"]].append(r)
    for gpu, rs in by_gpu.items():
        rs.sort(key=lambda r: r["start"])
        for a, b in zip(rs, rs[1:]):
            assert b["start"] >= a["end"], f"GPU {gpu} held twice: {a['tag']} until {a['end']}, {b['tag']} from " \
                                           f"{b['start']}"
    return by_gpu


def wait_all(procs, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in procs]


def opened(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd) == str(path) for fd in fds.iterdir())
    except OSError:  # it exited, or closed a descriptor while we looked
        return False


def go_around_together(procs, lock: Path) -> None:
    """Make the launchers go around the held directory lock in the same instant, the worst case
    for a GPU never leased here: once every one waits for the lock (has it open), stop them all,
    let more than the patience (2 s) pass, and continue them all: each finds it has waited long
    enough at its next try, and all choose at once."""
    assert wait_for(lambda: all(opened(p.pid, lock) for p in procs), timeout=60)
    for p in procs:
        os.kill(p.pid, signal.SIGSTOP)
    time.sleep(2.5)
    for p in procs:
        os.kill(p.pid, signal.SIGCONT)
