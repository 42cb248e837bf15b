"""Leases name their holder and job as processes: (pid, start ticks) within one boot (issue 27
item 3), not a pid plus a start time compared to the second. A lease of another boot is dead; a
lease whose pid is now another process's is stale whenever its file was written; leases written
by the previous version (no start ticks) are still read, by the old rule."""

from __future__ import annotations

import json
import os
import time

from helpers import start_sleeper

from vramkit import leases as L
from vramkit import procs
from vramkit.leases.model import Lease
from vramkit.leases.state import fulfilled

G4 = "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e64"


def shared(leasing):
    leasing.dir.mkdir(mode=0o1777, exist_ok=True)
    os.chmod(leasing.dir, 0o1777)
    return leasing.dir


def plant(where, lease_id: str, **fields) -> str:
    """A "hold" lease (alive by time, no lock file) of this process's pid namespace."""
    now = time.time()
    data = {"id": lease_id, "units": [G4], "labels": {G4: "GPU 4"}, "kind": "hold", "user": "alice", "uid": 0,
            "pid": os.getpid(), "created": now, "expires": now + 3600, "locked": False,
            "pidns": procs.pid_namespace(), **fields}
    path = where / f"lease-{lease_id}.json"
    path.write_text(json.dumps(data))
    return str(path)


def live(where) -> list[str]:
    d = L.LeaseDir(where, True)
    try:
        with d.locked():
            return sorted(lease.id for lease in L.read_state(d).leases)
    finally:
        d.close()


def test_process_keys_tell_a_live_process_from_a_reused_pid_and_another_boot(children):
    sleeper = start_sleeper(children)
    key = procs.ProcessKey.of(sleeper.pid)
    assert key is not None and key.boot_id == procs.boot_id() and key.status() == procs.ALIVE
    assert procs.ProcessKey(sleeper.pid, key.start_ticks + 1, key.boot_id).status() == procs.REUSED
    assert procs.ProcessKey(sleeper.pid, key.start_ticks, "another-boot").status() == procs.OTHER_BOOT
    sleeper.kill()
    sleeper.wait()
    assert key.status() == procs.GONE
    assert procs.ProcessKey.of(sleeper.pid) is None or procs.ProcessKey.of(sleeper.pid) != key


def test_a_lease_records_its_holder_and_job_as_pid_start_ticks_and_boot(leasing, children):
    d = L.LeaseDir(shared(leasing), True)
    with d.locked():
        held = L.create_lease(d, [(G4, "GPU 4")], "run", 600)
    job = start_sleeper(children)
    held.set_job(job.pid)
    written = json.loads(held.path.read_text())
    me, them = procs.ProcessKey.of(os.getpid()), procs.ProcessKey.of(job.pid)
    assert (written["pid"], written["start_ticks"], written["boot_id"]) == (me.pid, me.start_ticks, me.boot_id)
    assert (written["job_pid"], written["job_start_ticks"]) == (them.pid, them.start_ticks)
    with d.locked():
        (lease,) = L.read_state(d).leases
    assert lease.holder_key == me and lease.job_key == them
    held.release()
    d.close()


def test_a_lease_of_another_boot_is_dead(leasing):
    where = shared(leasing)
    me = procs.ProcessKey.of(os.getpid())
    plant(where, "this-boot", start_ticks=me.start_ticks, boot_id=me.boot_id)
    plant(where, "last-boot", start_ticks=me.start_ticks, boot_id="00000000-0000-0000-0000-000000000000")
    assert live(where) == ["this-boot"]
    assert not (where / "lease-last-boot.json").exists()  # stale: removed


def test_a_reused_pid_ends_the_lease_whenever_the_file_was_written(leasing, children):
    """By start time (the old rule) a pid that started before the file was written looked like
    the holder; by start ticks it is not, however close the times."""
    where = shared(leasing)
    sleeper = start_sleeper(children)
    ticks = procs.ProcessKey.of(sleeper.pid).start_ticks
    plant(where, "holder", pid=sleeper.pid, start_ticks=ticks, boot_id=procs.boot_id())
    plant(where, "reused", pid=sleeper.pid, start_ticks=ticks - 1, boot_id=procs.boot_id())
    assert live(where) == ["holder"]


def test_a_gone_holder_says_nothing_the_lease_lives_by_its_time(leasing, children):
    where = shared(leasing)
    sleeper = start_sleeper(children)
    key = procs.ProcessKey.of(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    plant(where, "gone-holder", pid=key.pid, start_ticks=key.start_ticks, boot_id=key.boot_id)
    if procs.ProcessKey.of(key.pid) is None:  # (not reused meanwhile)
        assert live(where) == ["gone-holder"]


def test_a_lease_of_the_previous_version_is_still_read(leasing):
    """No start ticks, no boot id: a launcher of the previous version still running."""
    where = shared(leasing)
    plant(where, "legacy")  # this process, started before the file was written
    assert live(where) == ["legacy"]


def test_the_job_must_still_be_the_recorded_process_to_fulfil_a_lease(children):
    job = start_sleeper(children)
    ticks = procs.ProcessKey.of(job.pid).start_ticks
    now = time.time()

    def lease(job_ticks: int | None) -> Lease:
        return Lease(id="x", units=[G4], labels={}, kind="run", user="me", uid=0, pid=os.getpid(), created=now,
                     expires=now + 60, job_pid=job.pid, pidns=procs.pid_namespace(),
                     start_ticks=procs.ProcessKey.of(os.getpid()).start_ticks, job_start_ticks=job_ticks,
                     boot_id=procs.boot_id())

    assert fulfilled(lease(ticks), G4, [job.pid])
    assert not fulfilled(lease(ticks + 1), G4, [job.pid])  # the pid is another process's now
    assert fulfilled(lease(None), G4, [job.pid])  # a lease of the previous version: by pid
