"""Leases: where they live, who can see them, how they end (the job shows up on the GPU, exits,
times out, or its holders die), and that crashed holders need no clean-up."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from helpers import AS_NOBODY, IS_ROOT, needs_root, run_vram, run_vram_as, vram_argv, wait_for

from vramkit import allocate
from vramkit import leases as L
from vramkit.allocate import LeaseWatcher
from vramkit.machine import open_machine

K0, K1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-00000000-0000-4000-8000-000000000001"


def two_gpus(processes=()) -> dict:
    return {"name": "two", "gpus": [
        {"uuid": K0, "pci_bus_id": "00000000:07:00.0", "memory_total": "40GiB"},
        {"uuid": K1, "pci_bus_id": "00000000:0F:00.0", "memory_total": "40GiB"}],
        "processes": [{"pid": pid, "source": "real", "gpus": {str(gpu): "2GiB"}} for pid, gpu in processes]}


# ---------------------------------------------------------------- where

@needs_root("to create the shared directory (only root does)")
def test_root_creates_the_shared_directory_sticky_and_world_writable(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "SHARED_DIR", tmp_path / "vramkit-leases")
    d = L.lease_dir(env={})
    assert d.path == tmp_path / "vramkit-leases" and d.shared and d.note is None
    mode = os.stat(d.path).st_mode
    assert stat.S_IMODE(mode) == 0o1777 and os.stat(d.path).st_uid == 0
    assert d.others_in == tmp_path  # every user's own directory beside it is read too


@pytest.mark.skipif(IS_ROOT, reason="root creates the shared directory; an ordinary user does not")
def test_an_ordinary_user_leases_in_a_directory_of_their_own_beside_the_shared_one(tmp_path, monkeypatch):
    """Issue 31 item 2: the first ordinary user made /tmp/vramkit-leases theirs, and every other
    user then refused it (its owner could remove their leases) and leased where nobody looked.
    Now an ordinary user never creates it: their leases go in /tmp/vramkit-leases-UID, only
    theirs to write and everyone's to read."""
    monkeypatch.setattr(L, "SHARED_DIR", tmp_path / "vramkit-leases")
    d = L.lease_dir(env={})
    assert not (tmp_path / "vramkit-leases").exists()
    assert d.path == tmp_path / f"vramkit-leases-{os.getuid()}" and d.shared and d.note is None
    assert stat.S_IMODE(os.stat(d.path).st_mode) == 0o755
    assert (d.others_in, d.others_base) == (tmp_path, "vramkit-leases")


@needs_root("to give the shared directory to another user")
def test_an_unsafe_shared_directory_is_read_but_leases_go_in_one_s_own(tmp_path, monkeypatch):
    shared = tmp_path / "vramkit-leases"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)  # world-writable, not sticky ...
    os.chown(shared, 65534, 65534)  # ... and someone else's: they could remove our leases
    monkeypatch.setattr(L, "SHARED_DIR", shared)
    run = tmp_path / "run"
    run.mkdir()
    d = L.lease_dir(env={"XDG_RUNTIME_DIR": str(run)})
    assert d.path == tmp_path / "vramkit-leases-0" and d.shared and d.note is None
    assert stat.S_IMODE(os.stat(d.path).st_mode) == 0o755
    assert not (run / "vramkit-leases").exists()


@pytest.mark.skipif(IS_ROOT, reason="root may write to any directory")
def test_a_shared_directory_you_cannot_write_is_read_but_leases_go_in_one_s_own(tmp_path, monkeypatch):
    shared = tmp_path / "vramkit-leases"
    shared.mkdir()
    os.chmod(shared, 0o1555)  # not writable by you (as if another user had made it for themselves)
    monkeypatch.setattr(L, "SHARED_DIR", shared)
    run = tmp_path / "run"
    run.mkdir()
    try:
        d = L.lease_dir(env={"XDG_RUNTIME_DIR": str(run)})
    finally:
        os.chmod(shared, 0o755)
    assert d.path == tmp_path / f"vramkit-leases-{os.getuid()}" and d.shared and d.note is None


@pytest.mark.skipif(IS_ROOT, reason="root may write to any directory")
def test_with_no_usable_tmp_the_private_fallback_says_what_an_admin_must_run(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    os.chmod(root, 0o555)  # nobody may create anything here: neither the shared nor an own directory
    monkeypatch.setattr(L, "SHARED_DIR", root / "vramkit-leases")
    run = tmp_path / "run"
    run.mkdir()
    try:
        d = L.lease_dir(env={"XDG_RUNTIME_DIR": str(run)})
    finally:
        os.chmod(root, 0o755)
    assert d.path == run / "vramkit-leases" and not d.shared
    assert "other users' vram runs cannot see them" in d.note
    assert "sudo scripts/install-system.sh" in d.note and "systemd-tmpfiles --create" in d.note


def test_an_unusable_vram_lease_dir_is_an_error(tmp_path, leasing):
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(L.LeaseError, match="VRAM_LEASE_DIR: .* is not a directory"):
        L.lease_dir(env={"VRAM_LEASE_DIR": str(afile)})
    result = run_vram("pick", "--simulate", "demo", env=leasing.env(VRAM_LEASE_DIR=str(afile)))
    assert result.rc == 1 and "VRAM_LEASE_DIR" in result.err and len(result.err_lines) == 1


def test_lease_timeout_from_the_environment():
    assert L.lease_timeout(env={}) == L.DEFAULT_TIMEOUT
    assert L.lease_timeout(env={"VRAM_LEASE_TIMEOUT": "90s"}) == 90
    with pytest.raises(L.LeaseError, match="VRAM_LEASE_TIMEOUT"):
        L.lease_timeout(env={"VRAM_LEASE_TIMEOUT": "soon"})


# ---------------------------------------------------------------- how leases end

def test_a_lease_ends_unit_by_unit_as_the_job_and_its_children_show_up(tmp_path, groups, write_scenario):
    d = L.LeaseDir(tmp_path, shared=True)
    # the job starts a child: the child is what the driver will list (as torchrun's workers)
    job = groups.start([sys.executable, "-c", "import subprocess, sys, time;"
                        "p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)"],
                       stdout=subprocess.PIPE, text=True)
    grandchild = int(job.stdout.readline())
    stranger = groups.start(["sleep", "60"])
    with d.locked():
        held = L.create_lease(d, [(K0, "GPU 0"), (K1, "GPU 1")], "run", 60)
    held.set_job(job.pid)
    path = write_scenario(two_gpus([(stranger.pid, 0)]))
    watcher = LeaseWatcher(open_machine(str(path)), held, job.pid)
    assert watcher.tick() is True and held.pending == [K0, K1]  # a stranger on GPU 0 is not our job
    path = write_scenario(two_gpus([(stranger.pid, 0), (grandchild, 1)]))
    watcher = LeaseWatcher(open_machine(str(path)), held, job.pid)
    assert watcher.tick() is True and held.pending == [K0]
    with d.locked():
        (lease,) = L.read_state(d).leases
    assert lease.units == [K0] and lease.job_pid == job.pid  # others see GPU 1 as no longer reserved
    path = write_scenario(two_gpus([(job.pid, 0), (grandchild, 1)]))
    watcher = LeaseWatcher(open_machine(str(path)), held, job.pid)
    assert watcher.tick() is False and held.pending == []
    assert L.leftovers(d) == []
    held.release()


def test_a_lease_whose_holders_are_gone_is_stale_at_once(tmp_path):
    d = L.LeaseDir(tmp_path, shared=True)
    code = ("import sys, vramkit.leases as L; from pathlib import Path\n"
            "d = L.LeaseDir(Path(sys.argv[1]), True)\n"
            "with d.locked():\n    L.create_lease(d, [('GPU-x', 'GPU 0')], 'run', 600)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=30)
    assert len(L.leftovers(d)) == 2  # lease-ID.json and lease-ID.lock, with nobody holding the lock
    with d.locked():
        assert L.read_state(d).leases == []
    assert L.leftovers(d) == []


def test_leases_time_out_and_broken_files_are_cleared(tmp_path):
    d = L.LeaseDir(tmp_path, shared=True)
    with d.locked():
        held = L.create_lease(d, [("GPU-x", "GPU 0")], "run", 0.2)
        assert len(L.read_state(d).leases) == 1
    time.sleep(0.3)
    (tmp_path / "lease-0-1-abc.json").write_text("{not json")  # no lock held: junk
    (tmp_path / "wait-0000000001-1.json").write_text("{}")  # a ticket nobody holds
    with d.locked():
        assert L.read_state(d).leases == []
    assert L.leftovers(d) == []
    held.release()  # harmless after the fact


@pytest.mark.slow
def test_a_jobs_lease_survives_its_launcher(leasing, groups):
    """vram run hands the lease's lock to its job: if the launcher dies, the GPU stays reserved
    while the job lives (up to the timeout); when the job exits too, it is free at once."""
    launcher = groups.start(vram_argv("run", "-q", "--simulate", "demo", "--only", "7", "--", "sleep", "2"),
                            env=leasing.env())
    assert wait_for(lambda: any(n.endswith(".json") for n in leasing.leftovers()))
    time.sleep(0.3)
    launcher.kill()
    launcher.wait()
    result = run_vram("pick", "--simulate", "demo", "--only", "7", env=leasing.env())
    assert result.rc == 1 and "GPU 7 is reserved by a vram run" in result.err
    assert wait_for(lambda: run_vram("pick", "--simulate", "demo", "--only", "7", env=leasing.env()).rc == 0,
                    timeout=15)
    assert leasing.leftovers() == []


# ---------------------------------------------------------------- between users

@pytest.mark.slow
@needs_root("to run vram as another user (setpriv)")
def test_users_see_each_others_leases(shared_dir, groups):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_") or k == "VRAM_LANG"}
    env.update(VRAM_LEASE_DIR=str(shared_dir / "leases"), VRAM_SIM_TIME="0", PYTHONDONTWRITEBYTECODE="1")
    # root's run, started with a umask that would hide its files from others
    root_job = groups.start(["sh", "-c", "umask 077; exec \"$@\"", "sh",
                             *vram_argv("run", "-q", "--simulate", "demo", "--only", "7", "--", "sleep", "30")],
                            env=env)
    leases = shared_dir / "leases"
    assert wait_for(lambda: leases.exists() and any(n.name.endswith(".json") for n in leases.iterdir()))
    assert stat.S_IMODE(os.stat(leases).st_mode) == 0o1777
    for f in leases.iterdir():
        if f.name.startswith("lease-") or f.name == ".lock":
            assert stat.S_IMODE(f.stat().st_mode) == 0o644, f.name
    as_nobody = run_vram_as(AS_NOBODY, "pick", "--simulate", "demo", "--only", "7", "--explain", env=env)
    assert as_nobody.rc == 1, as_nobody.err
    assert "GPU 7 is reserved by a vram run of root" in as_nobody.err
    # nobody's hold, in the directory root created, binds root too
    assert run_vram_as(AS_NOBODY, "pick", "--simulate", "demo", "--hold", "30s", env=env).out == "4\n"
    result = run_vram("pick", "--simulate", "demo", env=env)
    assert result.rc == 1 and "GPU 4 is reserved by vram pick --hold of nobody" in result.err
    root_job.kill()


def test_lease_files_say_who_holds_what(leasing, groups):
    groups.start(vram_argv("run", "-q", "--simulate", "demo", "-n", "2", "--", "sleep", "30"), env=leasing.env())
    assert wait_for(lambda: any(n.endswith(".json") for n in leasing.leftovers()))
    assert wait_for(lambda: json.loads(next(leasing.dir.glob("lease-*.json")).read_text()).get("job_pid"))
    data = json.loads(next(leasing.dir.glob("lease-*.json")).read_text())
    assert data["kind"] == "run" and data["command"] == "sleep"  # the program only: arguments can hold secrets
    assert data["units"] == ["GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e64", "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e67"]
    assert data["labels"] == {data["units"][0]: "GPU 4", data["units"][1]: "GPU 7"}
    assert data["expires"] - data["created"] == pytest.approx(L.DEFAULT_TIMEOUT)
    assert data["pidns"] == os.readlink("/proc/self/ns/pid")


# ---------------------------------------------------------------- untrusted files

def test_a_hold_ends_when_a_new_process_shows_up():
    lease = L.Lease(id="x", units=[K0], labels={}, kind="hold", user="u", uid=1, pid=1, created=0, expires=1,
                    locked=False, baseline={K0: [100, 101]})
    assert not L.fulfilled(lease, K0, [100, 101])
    assert L.fulfilled(lease, K0, [100, 101, 4242])
    # a scenario's made-up process (4242) is none of this /proc's: allocate.pids_here leaves it out
    rows = [SimpleNamespace(pid_here=100, real=True), SimpleNamespace(pid_here=4242, real=False)]
    assert not L.fulfilled(lease, K0, allocate.pids_here(rows))


def test_lease_files_from_other_users_are_untrusted(leasing):
    leasing.dir.mkdir(mode=0o1777)
    now = time.time()
    evil = {"id": "e", "units": ["GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e67"], "labels": {}, "kind": "hold",
            "user": "mallory\x1b[2J\x1b[31m", "uid": 1, "pid": 1, "created": now, "expires": now + 10**9,
            "locked": False}
    (leasing.dir / "lease-e.json").write_text(json.dumps(evil))
    (leasing.dir / "lease-f.json").write_text(json.dumps({**evil, "id": "f", "units": "all of them"}))  # junk
    result = run_vram("pick", "--simulate", "demo", "--explain", env=leasing.env())
    assert result.out == "4\n"  # GPU 7 is held by mallory's lease
    me = pwd.getpwuid(os.getuid()).pw_name
    assert f"reserved by vram pick --hold of {me} (pid 1," in result.err  # the file's owner, not what it says
    assert "mallory" not in result.err and "\x1b" not in result.err
    assert f"{leasing.dir / 'lease-f.json'} ({me}: units is not a list of GPU keys)" in result.err
    assert leasing.leftovers() == ["lease-e.json"]  # the junk one is gone
    with L.LeaseDir(leasing.dir, True).locked():
        (lease,) = L.read_state(L.LeaseDir(leasing.dir, True)).leases
    assert lease.expires == pytest.approx(now + L.MAX_LEASE)  # no lease lasts more than a day
