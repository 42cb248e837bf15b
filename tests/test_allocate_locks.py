"""acquire() and the lease directory's per-GPU locks (issue 13 item 5): each look takes the lock
of every GPU of the machine before choosing, creating its file, so that launchers take turns on a
GPU never leased here too; a launcher that finds a chosen GPU leased meanwhile (LeaseConflict)
chooses again instead of failing with "try again"."""

from __future__ import annotations

import pytest

from vramkit import leases as L
from vramkit.allocate import acquire, build_policy
from vramkit.cuda_env import devices_of
from vramkit.gpu_choice import units_of
from vramkit.machine import open_machine


@pytest.fixture
def where(leasing):
    """A shared lease directory of the test's own, made as vram makes one (sticky, writable by all)."""
    d = L.lease_dir(leasing.env())
    d.close()
    return d.path


@pytest.fixture
def demo():
    machine = open_machine("demo")
    try:
        yield machine
    finally:
        machine.close()


def machine_keys(machine) -> list[str]:
    snap = machine.snapshot()
    return [u.key for u in units_of(snap, devices_of(snap))]


def default_policy(machine):
    policy, _ = build_policy(devices_of(machine.snapshot()), env={})
    return policy


def test_a_look_holds_the_lock_of_every_gpu_before_choosing(where, demo, monkeypatch):
    """On a directory where no GPU was ever leased: while acquire() reads the leases to choose,
    every GPU of the machine has its lock file, and it is held (by this look)."""
    keys = machine_keys(demo)
    seen: list[dict[str, bool]] = []
    real = L.read_state

    def spy(d, *args, **kwargs):
        seen.append({k: L._held(where / L._unit_lock_name(k)) for k in keys})
        return real(d, *args, **kwargs)

    monkeypatch.setattr(L, "read_state", spy)
    d = L.LeaseDir(where, True)
    selection = acquire(demo, default_policy(demo), lease_kind="run", lease_dir=d)
    assert seen and seen[0] == {k: True for k in keys}
    assert sorted(p.name for p in where.glob("gpu-*.lock")) == sorted(L._unit_lock_name(k) for k in keys)
    selection.release()
    d.close()


def test_a_gpu_leased_while_choosing_makes_acquire_choose_again(where, demo, monkeypatch):
    """Another launcher leases the GPU this one is about to choose, between its read and its
    write. That can happen only where this look does not hold the GPU's lock from its start:
    here, acquire() runs inside the caller's own look (a nested look takes no GPU locks), on a
    directory where no GPU was ever leased. create_lease finds the other lease (LeaseConflict):
    acquire chooses again and gets the other fitting GPU, instead of failing."""
    policy = default_policy(demo)
    keys = machine_keys(demo)
    other = L.LeaseDir(where, True, on_warning=lambda _: None)
    theirs: list[L.HeldLease] = []
    real = L.read_state

    def another_launcher_leases_gpu_7(d, *args, **kwargs):
        state = real(d, *args, **kwargs)
        if d is not other and not theirs:
            # It goes around the directory lock (this process holds it), then takes GPU 7's lock.
            with other.locked(patience=0.1, units=keys):
                real(other)
                theirs.append(L.create_lease(other, [(keys[7], "GPU 7")], "run", 600))
        return state

    monkeypatch.setattr(L, "read_state", another_launcher_leases_gpu_7)
    d = L.LeaseDir(where, True)
    with d.locked():
        selection = acquire(demo, policy, lease_kind="run", lease_dir=d)
    assert theirs, "the other launcher never leased"
    assert selection.indices == [4]  # GPU 7 would have been chosen: it has the most free memory
    assert selection.lease is not None and selection.lease.lease.units == [keys[4]]
    assert theirs[0].lease.units == [keys[7]]
    selection.release()
    theirs[0].release()
    assert L.leftovers(d) == []
    d.close()
    other.close()
