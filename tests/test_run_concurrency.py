"""Many `vram run --wait` launchers at once, as on a busy shared server: no GPU is ever held by
two jobs at once, everyone gets a turn, in order, and no lease is left behind; a launcher killed
with SIGKILL costs the others at most its lease timeout.

Each job records when it started and ended and what CUDA_VISIBLE_DEVICES it got; the checks
read those records, not vram's output. On scenario demo at t=0, only GPUs 4 and 7 fit the
default policy, so 24 one-GPU jobs queue for two GPUs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import vram_argv, wait_for
from lease_races import assert_no_overlap, go_around_together, launch, records, wait_all

pytestmark = pytest.mark.slow  # many launchers racing for GPUs, seconds of real waiting

def plant_hostile_files(directory: Path) -> list[str]:
    """What a hostile neighbour leaves in the shared lease directory (issue 13): a FIFO under a
    lease's name, a FIFO ticket, a 1 MiB junk lease, a lease whose baseline is not a pid list, one
    that claims every GPU forever for someone else. Given to `nobody` when we may (as root)."""
    directory.mkdir(mode=0o1777, parents=True, exist_ok=True)
    os.chmod(directory, 0o1777)
    now = time.time()
    fake = {"units": ["GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e64", "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e67"],
            "labels": {}, "kind": "hold", "user": "alice", "uid": 1000, "pid": 1, "locked": False}
    os.mkfifo(directory / "lease-fifo.json")
    os.mkfifo(directory / "wait-0000000001-1.json")
    (directory / "lease-junk.json").write_text("[" + "0," * (1 << 19) + "0]")
    (directory / "lease-base.json").write_text(json.dumps({**fake, "id": "base", "created": now, "expires": now + 3600,
                                                           "baseline": {"x": 5}}))
    (directory / "lease-nan.json").write_text(json.dumps({**fake, "id": "nan", "created": float("nan"),
                                                          "expires": float("inf")}))
    names = sorted(os.listdir(directory))
    if os.geteuid() == 0:
        for name in names:
            os.lchown(directory / name, 65534, 65534)
    return names


def hold_directory_lock(leasing, warm_up: bool):
    """The directory lock held for the whole test (issue 13 item 5), here by the runner itself.
    Every launcher goes around the lock; the GPUs' own locks keep them apart. `warm_up`: after
    one earlier `vram run` leased both fitting GPUs, so each has its lock file (a machine in
    use); else on a fresh directory, where no GPU has a lock file yet and all 24 launchers go
    around the directory lock at about the same moment: each look creates and takes the lock
    of every GPU of the machine before choosing, so they still take turns (go_around_together)."""
    import fcntl

    leasing.dir.mkdir(mode=0o1777, parents=True, exist_ok=True)
    if warm_up:
        warm = subprocess.run(vram_argv("run", "-q", "--simulate", "demo", "-n", "2", "--", "true"),
                              env=leasing.env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        assert warm.returncode == 0, warm.stderr
    else:
        assert not list(leasing.dir.glob("gpu-*.lock"))
    held = open(leasing.dir / ".lock", "a")
    fcntl.flock(held, fcntl.LOCK_EX)
    return held


@pytest.mark.parametrize("hostile", ["clean", "hostile-files", "directory-lock-held",
                                     "directory-lock-held-no-gpu-leased-yet"])
def test_24_concurrent_launchers_never_share_a_gpu(groups, leasing, tmp_path, hostile):
    where = tmp_path / "records"
    where.mkdir()
    planted = plant_hostile_files(leasing.dir) if hostile == "hostile-files" else []
    held = hold_directory_lock(leasing, warm_up=hostile == "directory-lock-held") \
        if hostile.startswith("directory-lock-held") else None
    log = open(tmp_path / "stderr.txt", "w")
    started = time.monotonic()
    procs = [launch(groups, leasing, where, f"j{i:02d}", 0.2, "--wait", "120", "-n", "1", log=log) for i in range(24)]
    if hostile == "directory-lock-held-no-gpu-leased-yet":
        go_around_together(procs, Path(os.path.realpath(leasing.dir / ".lock")))
    codes = wait_all(procs, timeout=120)
    elapsed = time.monotonic() - started
    log.close()
    if held is not None:
        held.close()
    assert codes == [0] * 24, (tmp_path / "stderr.txt").read_text()[-3000:]
    if held is not None:
        assert f"is held by pid {os.getpid()} of user" in (tmp_path / "stderr.txt").read_text()
    recs = records(where)
    assert len(recs) == 24  # all finished
    assert {r["order"] for r in recs} == {"PCI_BUS_ID"}
    by_gpu = assert_no_overlap(recs)
    assert set(by_gpu) == {"4", "7"}  # the two GPUs that fit; both used
    assert [n for n in leasing.leftovers() if n not in planted] == []  # no lease or ticket left behind
    print(f"24 launchers on 2 GPUs: {elapsed:.1f}s, per GPU {[len(v) for v in by_gpu.values()]}")


def test_a_launcher_killed_mid_way_costs_at_most_its_lease_timeout(groups, leasing, tmp_path):
    """The victim's job outlives its launcher (SIGKILL cannot be passed on) and still holds the
    lease's lock, so GPU 7 stays reserved until the lease times out (5 s here), no longer;
    meanwhile the others go on, on GPU 4, then on both."""
    where = tmp_path / "records"
    where.mkdir()
    victim = launch(groups, leasing, where, "victim", 60, "--lease-timeout", "5s")
    assert wait_for(lambda: (where / "start-victim.json").exists(), timeout=20)
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    assert victim.wait(timeout=10) == -signal.SIGKILL
    victim_job = json.loads((where / "start-victim.json").read_text())
    assert victim_job["cvd"] == "7"
    assert os.path.exists(f"/proc/{victim_job['pid']}")  # its job lives on, orphaned
    lease = json.loads(next(leasing.dir.glob("lease-*.json")).read_text())
    assert lease["job_pid"] == victim_job["pid"] and killed_at < lease["expires"]
    others = [launch(groups, leasing, where, f"j{i:02d}", 0.4, "--wait", "120") for i in range(16)]
    assert wait_all(others, timeout=120) == [0] * 16
    recs = records(where)
    assert len(recs) == 16
    by_gpu = assert_no_overlap(recs)
    assert by_gpu["4"], "GPU 4 was free all along"
    on_7 = sorted(r["start"] for r in by_gpu.get("7", []))
    assert on_7, "the others never got GPU 7 back"
    assert on_7[0] >= lease["expires"]  # reserved until the lease ran out, though its launcher was dead
    assert leasing.leftovers() == []  # the expired lease was cleaned up by the others


def test_a_launcher_killed_with_its_job_frees_the_gpu_at_once(groups, leasing, tmp_path):
    """No job left to hold the lease's lock: the kernel drops it, and the GPU is free long before
    the (120 s) lease timeout."""
    where = tmp_path / "records"
    where.mkdir()
    victim = launch(groups, leasing, where, "victim", 60, "--only", "7", "--lease-timeout", "120s")
    assert wait_for(lambda: (where / "start-victim.json").exists(), timeout=20)
    waiter = launch(groups, leasing, where, "next", 0.1, "--only", "7", "--wait", "60")
    assert wait_for(lambda: any(n.startswith("wait-") for n in leasing.leftovers()), timeout=20)
    os.killpg(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    assert waiter.wait(timeout=60) == 0
    rec = records(where)[0]
    assert rec["tag"] == "next" and rec["cvd"] == "7"
    assert rec["start"] - killed_at < 30  # well before the lease timeout
    assert leasing.leftovers() == []


def hold(groups, leasing, gpu: str):
    """A vram run holding `gpu` until the test ends it (SIGTERM, passed on to its sleep)."""
    proc = groups.start(vram_argv("run", "-q", "--simulate", "demo", "--only", gpu, "--", "sleep", "60"),
                        env=leasing.env())
    assert wait_for(lambda: any(json.loads(p.read_text()).get("job_pid") for p in leasing.dir.glob("lease-*.json")
                                if "GPU " + gpu in p.read_text()), timeout=20)
    return proc


def tickets(leasing) -> int:
    return sum(n.startswith("wait-") for n in leasing.leftovers())


def test_waiters_are_served_first_come_first_served(groups, leasing, tmp_path):
    where = tmp_path / "records"
    where.mkdir()
    holder = hold(groups, leasing, "7")
    waiters = []
    for i in range(5):
        waiters.append(launch(groups, leasing, where, f"w{i}", 0.1, "--only", "7", "--wait", "60"))
        assert wait_for(lambda n=i + 1: tickets(leasing) == n, timeout=20)
    holder.terminate()
    assert holder.wait(timeout=20) == 128 + signal.SIGTERM
    assert wait_all(waiters, timeout=60) == [0] * 5
    order = [r["tag"] for r in sorted(records(where), key=lambda r: r["start"])]
    assert order == ["w0", "w1", "w2", "w3", "w4"]
    assert leasing.leftovers() == []


def test_a_big_request_is_not_starved_by_later_small_ones(groups, leasing, tmp_path):
    """A waiter for two GPUs holds GPU 4 when it frees, although a later one-GPU waiter could use
    it at once: first come, first served."""
    where = tmp_path / "records"
    where.mkdir()
    on_4, on_7 = hold(groups, leasing, "4"), hold(groups, leasing, "7")
    big = launch(groups, leasing, where, "big", 0.1, "-n", "2", "--wait", "60")
    assert wait_for(lambda: tickets(leasing) == 1, timeout=20)
    small = launch(groups, leasing, where, "small", 0.1, "--wait", "60")
    assert wait_for(lambda: tickets(leasing) == 2, timeout=20)
    on_4.terminate()
    assert on_4.wait(timeout=20) == 128 + signal.SIGTERM
    time.sleep(1.5)  # time enough for the small one to take GPU 4, were it allowed to
    assert not list(where.glob("start-*.json")) and tickets(leasing) == 2
    on_7.terminate()
    assert wait_all([big, small], timeout=60) == [0, 0]
    recs = {r["tag"]: r for r in records(where)}
    assert recs["big"]["cvd"] == "4,7"
    assert recs["small"]["start"] >= recs["big"]["end"]
    assert leasing.leftovers() == []
