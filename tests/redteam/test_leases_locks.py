"""A neighbour holding the lease directory's locks (issue 13 item 5): whoever holds the directory
lock, or one GPU's lock, must not deny vram run / pick / use_gpus to everybody. The directory lock
is gone around (each GPU has its own lock) and its holder named; a held GPU lock blocks that GPU
only, and every message about it names the holder. No GPU is ever given twice meanwhile.

The holder is `nobody` (a child dropped to uid 65534) when the suite runs as root, else the
runner's own child process: the locks are the same either way, only the name differs."""

from __future__ import annotations

import os
import pwd

import pytest
from helpers import IS_ROOT, clean_env, run_vram, run_vram_as
from lease_races import G4, G7, gpu_lock, hold, sticky_lease_dir

from vramkit import leases as L
from vramkit.leases import locking, reserve


@pytest.fixture
def where(shared_dir):
    return sticky_lease_dir(shared_dir)


HOLDER = "nobody" if IS_ROOT else pwd.getpwuid(os.getuid()).pw_name

def vram(where, *args):
    return run_vram(*args, env=clean_env(VRAM_LEASE_DIR=str(where)), timeout=60)


def test_a_held_directory_lock_is_gone_around_and_its_holder_named(where, children):
    """Old code waited 30 s, then failed with the holder named: one user could stop everybody."""
    holder = hold(children, where / ".lock")
    lines: list[str] = []
    d = L.LeaseDir(where, True, on_warning=lines.append)
    with d.locked(patience=0.2):
        assert L.read_state(d).leases == []
        mine = L.create_lease(d, [(G4, "GPU 4")], "run", 600)
    (line,) = lines
    assert f"the lease directory lock {where / '.lock'} is held by pid {holder.pid} of user {HOLDER} (python" in line
    assert "going around it: each GPU has a lock of its own" in line
    assert gpu_lock(where, G4).exists()  # the GPU's own lock guarded the lease
    other = L.LeaseDir(where, True, on_warning=lines.append)
    with other.locked(patience=0.2):
        (seen,) = L.read_state(other).leases  # the lease counts for everybody as before
    assert seen.id == mine.lease.id and seen.units == [G4]
    mine.release()
    d.close()
    other.close()


def test_vram_pick_and_run_go_on_while_the_directory_lock_is_held(where, children):
    holder = hold(children, where / ".lock")
    picked = vram(where, "pick", "--simulate", "demo")
    assert picked.rc == 0 and picked.out == "7\n", picked.err
    assert f"held by pid {holder.pid} of user {HOLDER}" in picked.err
    ran = vram(where, "run", "-q", "--simulate", "demo", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
    assert ran.rc == 0 and ran.out == "7\n", ran.err
    assert f"held by pid {holder.pid} of user {HOLDER}" in ran.err


def test_a_held_gpu_lock_blocks_that_gpu_only_and_names_its_holder(where, children):
    """Demo's GPUs 4 and 7 fit; the neighbour holds GPU 4's lock: GPU 7 is still given out,
    and asking for GPU 4 (or for both) says who holds it."""
    holder = hold(children, gpu_lock(where, G4))
    named = f"GPU 4 is reserved by pid {holder.pid} of user {HOLDER} (python"
    ran = vram(where, "run", "-q", "--simulate", "demo", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
    assert ran.rc == 0 and ran.out == "7\n", ran.err
    for args in (("--only", "4"), ("-n", "2")):
        blocked = vram(where, "pick", "--simulate", "demo", *args)
        assert blocked.rc == 1 and named in blocked.err, blocked.err
        assert "which holds its lock in the lease directory" in blocked.err
        assert len(blocked.err.splitlines()) == 1


@pytest.mark.parametrize("kind", ["fifo", "mode-000"])
def test_a_gpu_lock_file_that_is_not_a_lock_blocks_that_gpu_only_and_names_its_owner(where, kind):
    """A FIFO, or a file others may not open, under GPU 4's lock name (planted by nobody when we
    are root; the mode-000 file is then tried by a third user, uid 1, as root opens anything)."""
    path = gpu_lock(where, G4)
    prefix: tuple[str, ...] = ()
    if kind == "fifo":
        os.mkfifo(path)
    elif IS_ROOT:
        path.touch(mode=0)
        prefix = ("setpriv", "--reuid=1", "--regid=1", "--clear-groups")
    else:
        pytest.skip("needs root to plant a file as another user (its owner may open it)")
    if IS_ROOT:
        os.lchown(path, 65534, 65534)
    env = clean_env(VRAM_LEASE_DIR=str(where))
    picked = run_vram_as(prefix, "pick", "--simulate", "demo", env=env)
    assert picked.rc == 0 and picked.out == "7\n", picked.err
    blocked = run_vram_as(prefix, "pick", "--simulate", "demo", "--only", "4", env=env)
    assert blocked.rc == 1, blocked.err
    assert "GPU 4 is reserved by its lock file, which cannot be used: " in blocked.err, blocked.err
    assert str(path) in blocked.err and HOLDER in blocked.err, blocked.err


def test_holding_every_lock_denies_gpus_but_names_the_holder(where, children):
    """At worst: all GPUs blocked, and whom to ask is in the message."""
    holder = hold(children, where / ".lock", gpu_lock(where, G4), gpu_lock(where, G7))
    result = vram(where, "pick", "--simulate", "demo")
    assert result.rc == 1, result.err
    assert f"held by pid {holder.pid} of user {HOLDER}" in result.err  # the directory lock: a warning
    error = result.err.splitlines()[-1]
    assert f"GPU 4 is reserved by pid {holder.pid} of user {HOLDER}" in error
    assert f"GPU 7 is reserved by pid {holder.pid} of user {HOLDER}" in error


def test_a_gpu_never_leased_here_cannot_go_to_two_launchers_while_the_directory_lock_is_held(where, children):
    """While the directory lock is gone around, two launchers can choose at the same moment.
    For a GPU with a lock file they take turns on it; for a GPU never leased here (no lock file
    yet) both may choose it: the second to lock it sees the first's lease and reserves nothing."""
    hold(children, where / ".lock")
    first, second = (L.LeaseDir(where, True, on_warning=lambda _: None) for _ in range(2))
    with second.locked(patience=0.2):
        assert L.read_state(second).leases == []  # second chooses GPU 4 ...
        with first.locked(patience=0.2):
            assert L.read_state(first).leases == []  # ... and so does first, at the same moment
            won = L.create_lease(first, [(G4, "GPU 4")], "run", 600)
        with pytest.raises(L.LeaseConflict, match="GPU 4 was reserved by a vram run of .* while this vram was "
                                                  "choosing; nothing was reserved: try again"):
            L.create_lease(second, [(G4, "GPU 4")], "run", 600)
    assert L.leftovers(first) == [f"lease-{won.lease.id}.json", f"lease-{won.lease.id}.lock"]
    won.release()
    first.close()
    second.close()


def test_naming_the_machines_gpus_makes_even_a_first_lease_take_turns(where, children):
    """locked(units=...) takes the lock of each GPU named, creating its file, before choosing:
    then a GPU never leased here is not chosen by two launchers at once either."""
    hold(children, where / ".lock")
    first, second = (L.LeaseDir(where, True, on_warning=lambda _: None) for _ in range(2))
    with second.locked(patience=0.2, units=[G4, G7]):
        assert L.read_state(second).leases == []
        with first.locked(patience=0.2, units=[G4, G7]):  # second holds them: first cannot choose them
            blocked = L.read_state(first).leases
            assert sorted(b.units[0] for b in blocked) == [G4, G7]
            assert all(f"pid {os.getpid()} of user" in b.who() for b in blocked)
        won = L.create_lease(second, [(G4, "GPU 4")], "run", 600)  # no second look needed: it held G4
    won.release()
    first.close()
    second.close()


def test_a_lease_is_written_then_checked_by_one_more_read(where, monkeypatch):
    """Holding the GPU's lock since the look began is not enough: its file's owner may have
    swapped it (test_leases_swap.py). create_lease reads the directory once more, after its
    lease is written (the usual case costs two reads, never more)."""
    d = L.LeaseDir(where, True)
    with d.locked():
        L.create_lease(d, [(G4, "GPU 4")], "run", 600).release()  # first lease: G4's lock file appears
    present: list[list[str]] = []  # lease files there at each read
    real = L.read_state
    def spy(*a, **kw):
        present.append([n for n in L.leftovers(d) if n.endswith(".json")])
        return real(*a, **kw)

    monkeypatch.setattr(L, "read_state", spy)
    monkeypatch.setattr(reserve, "read_state", spy)  # create_lease's check after writing
    with d.locked():
        assert L._held(gpu_lock(where, G4))
        L.read_state(d)
        held = L.create_lease(d, [(G4, "GPU 4")], "run", 600)
    assert present == [[], [f"lease-{held.lease.id}.json"]]
    held.release()
    d.close()


@pytest.mark.skipif(not IS_ROOT, reason="needs root to hold the locks as another user (one's own are waited for)")
def test_many_locks_held_by_one_neighbour_cost_one_wait(where, children, monkeypatch):
    """The neighbour holds the directory lock and the locks of three made-up GPUs, each from its
    own process: vram waits `patience` for the first it meets, then goes around the rest of that
    user's at once, instead of waiting for each (the waits would add up to a denial)."""
    fakes = [gpu_lock(where, f"GPU-fake-{i}") for i in range(3)]
    holders = [hold(children, path) for path in (where / ".lock", *fakes)]
    outcomes: list[tuple[int | None, bool]] = []  # (holder given up on, at once?)
    real = locking._acquire

    def spy(fd, patience, known_hostile=lambda pid: False):
        at_once: list[bool] = []
        result = real(fd, patience, lambda pid: at_once.append(known_hostile(pid)) or at_once[-1])
        outcomes.append((result, any(at_once)))
        return result

    monkeypatch.setattr(locking, "_acquire", spy)
    d = L.LeaseDir(where, True, on_warning=lambda _: None)
    with d.locked(patience=0.2):
        assert sorted(d.locked_out) == [f"GPU-fake-{i}" for i in range(3)]
    assert outcomes == [(p.pid, i > 0) for i, p in enumerate(holders)]
    d.close()


def test_gpu_lock_names_round_trip_and_junk_names_are_not_locks():
    for key in (G4, "MIG-5c1e1a2b-58f2-5c37-9d2b-6a0f4a2c8e11", "GPU-x/1/0", "é", ".hidden"):
        name = L._unit_lock_name(key)
        assert name.startswith("gpu-") and "/" not in name and locking._unit_key(name) == key
    for junk in ("gpu-.lock", "gpu-%zz.lock", "gpu-%FF.lock", "gpu-a/b.lock", "gpu-%41.lock", "lease-x.lock"):
        assert locking._unit_key(junk) is None, junk  # %41 is 'A', which is never escaped: not a name vram makes
