"""Leases shared between users where no admin has acted (issue 31 item 2, docs/leases.md "Where
leases live"): each user's own directory beside the shared one's name, everyone's read as another
user's input. Two users are played here by two directories of one user (the tests run as anyone);
tests/redteam/test_leases_security.py runs two real users on a fresh /tmp (as root)."""

from __future__ import annotations

import os
import time

import pytest

from vramkit import leases as L
from vramkit.leases import settings

K0, K1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-00000000-0000-4000-8000-000000000001"


def user_dir(root, name: str) -> L.LeaseDir:
    path = root / name
    path.mkdir(mode=0o755, exist_ok=True)
    return L.LeaseDir(path, shared=True, others_in=root, others_base="vramkit-leases",
                      on_warning=lambda line: None)


def lease(d: L.LeaseDir, key: str, kind: str = "run", timeout: float = 60) -> L.HeldLease:
    with d.locked():
        L.read_state(d)
        return L.create_lease(d, [(key, f"GPU {key[-1]}")], kind, timeout, command="python train.py")


def units_of(d: L.LeaseDir) -> list[str]:
    with d.locked():
        return sorted(k for lease_ in L.read_state(d).leases for k in lease_.units)


def test_another_user_s_live_lease_is_seen_and_ends_with_it(tmp_path):
    alice, bob = user_dir(tmp_path, "vramkit-leases-1001"), user_dir(tmp_path, "vramkit-leases-1002")
    held = lease(alice, K0)
    assert units_of(bob) == [K0]
    held.release()
    assert units_of(bob) == []


def test_another_user_s_stale_lease_is_skipped_and_left_for_its_owner(tmp_path):
    alice, bob = user_dir(tmp_path, "vramkit-leases-1001"), user_dir(tmp_path, "vramkit-leases-1002")
    held = lease(alice, K0)
    assert held.fd is not None
    os.close(held.fd)  # the launcher and its job are gone: nobody holds the lease's lock
    held.fd = None
    assert units_of(bob) == []
    assert (alice.path / f"lease-{held.lease.id}.json").exists()  # bob's vram does not tidy alice's directory
    assert units_of(alice) == [] and not (alice.path / f"lease-{held.lease.id}.json").exists()


def test_the_old_shared_name_of_any_owner_is_read_too(tmp_path):
    """A /tmp/vramkit-leases an ordinary user made (an older vram did) is not written by others,
    but the leases in it count."""
    old = user_dir(tmp_path, "vramkit-leases")
    bob = user_dir(tmp_path, "vramkit-leases-1002")
    held = lease(old, K1, kind="hold")
    try:
        assert units_of(bob) == [K1]
    finally:
        held.release()


def test_two_users_choosing_the_same_gpu_never_both_keep_it(tmp_path):
    """No lock is shared between users' directories: a lease is checked after it is written, in
    every directory. Bob read before Alice wrote; his lease on the same GPU is refused, and a
    fresh look sees hers."""
    alice, bob = user_dir(tmp_path, "vramkit-leases-1001"), user_dir(tmp_path, "vramkit-leases-1002")
    with bob.locked():
        assert L.read_state(bob).leases == []  # bob looks: K0 is free
        held = lease(alice, K0)  # alice leases it meanwhile
        with pytest.raises(L.LeaseConflict, match="was reserved by a vram run of"):
            L.create_lease(bob, [(K0, "GPU 0")], "run", 60)
    assert units_of(bob) == [K0] and [n for n in os.listdir(bob.path) if n.startswith("lease-")] == []
    held.release()


def test_a_symlink_under_a_lease_directory_s_name_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    planted = user_dir(target.parent, "target-of-link")
    held = lease(planted, K0)
    (tmp_path / "vramkit-leases-666").symlink_to(planted.path)
    bob = user_dir(tmp_path, "vramkit-leases-1002")
    try:
        assert units_of(bob) == []
    finally:
        held.release()


def test_junk_in_another_user_s_directory_is_named_and_costs_a_bounded_look(tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "MAX_ENTRIES", 50)
    from vramkit.leases import state

    monkeypatch.setattr(state, "MAX_ENTRIES", 50)
    junk = user_dir(tmp_path, "vramkit-leases-666")
    os.mkfifo(junk.path / "lease-1-2-abc.json")
    for i in range(200):
        (junk.path / f"x{i}").write_text("")
    bob = user_dir(tmp_path, "vramkit-leases-1002")
    warned: list[str] = []
    bob.on_warning = warned.append
    started = time.monotonic()
    with bob.locked():
        assert L.read_state(bob).leases == []
    assert time.monotonic() - started < 10  # (a FIFO opened blocking would hang here)
    assert any("names beyond the first 50" in w for w in warned), warned


def test_at_most_a_few_directories_of_one_owner_are_read(tmp_path):
    for i in range(settings.MAX_DIRS_PER_OWNER + 3):
        (tmp_path / f"vramkit-leases-9-{i:02d}").mkdir()
    from vramkit.leases.others import foreign_dirs

    mine = tmp_path / "vramkit-leases-1002"
    mine.mkdir()
    names = foreign_dirs(tmp_path, "vramkit-leases", mine)
    assert len(names) == settings.MAX_DIRS_PER_OWNER and mine.name not in names


def test_one_s_own_directory_is_found_again_when_its_name_was_taken(tmp_path, monkeypatch):
    """Another user made /tmp/vramkit-leases-UID first (here: a file): this user's directory is
    then vramkit-leases-UID-RANDOM, the same one every time, and readers find it by its prefix."""
    from vramkit.leases.others import own_dir

    shared = tmp_path / "vramkit-leases"
    (tmp_path / f"vramkit-leases-{os.getuid()}").write_text("squatted")
    first, why = own_dir(shared)
    assert why is None and first is not None and first.name.startswith(f"vramkit-leases-{os.getuid()}-")
    assert own_dir(shared) == (first, None)
    assert oct(first.stat().st_mode & 0o777) == oct(0o755)
