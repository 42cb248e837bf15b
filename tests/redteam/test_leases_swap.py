"""A neighbour swapping a GPU's lock file must not get that GPU given twice (issue 13 item 5, the
hole a review found in the per-GPU locks). Whoever creates gpu-KEY.lock first owns it, and in the
sticky lease directory may unlink and recreate it (its name is predictable from the GPU's UUID).
Holding `.lock` (so that launchers go around it) and swapping the file between two launchers'
looks leaves each holding a flock on a different file: both see the GPU free, both lease it.

The defence: after writing its lease, create_lease reads the directory again, and a lease on one
of its GPUs that it did not choose by makes it remove its own and raise LeaseConflict (acquire
then chooses again); and a lock taken on a file that is no longer at its name is taken again."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import IS_ROOT, wait_for
from lease_races import (
    G4,
    assert_no_overlap,
    go_around_together,
    gpu_lock,
    hold,
    launch,
    records,
    sticky_lease_dir,
    wait_all,
)

from vramkit import leases as L
from vramkit.cuda_env import devices_of
from vramkit.gpu_choice import units_of
from vramkit.leases import locking
from vramkit.machine import open_machine

NEIGHBOUR = 65534  # nobody: owner of the lock files it planted (when the suite runs as root)

# The neighbour's swapper: holds the directory lock, then unlinks and recreates each GPU lock file
# named on the command line, over and over (a new inode under the same name each time).
SWAP = ("import fcntl, os, sys\n"
        "d = sys.argv[1]\n"
        "held = os.open(os.path.join(d, '.lock'), os.O_RDONLY | os.O_CREAT, 0o644)\n"
        "fcntl.flock(held, fcntl.LOCK_EX)\n"
        "open(os.path.join(d, 'swapping'), 'w').close()\n"
        "while True:\n"
        "    for name in sys.argv[2:]:\n"
        "        p = os.path.join(d, name)\n"
        "        try:\n"
        "            os.unlink(p)\n"
        "            os.close(os.open(p, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o644))\n"
        "        except OSError:\n"
        "            pass\n")


@pytest.fixture
def where(shared_dir):
    return sticky_lease_dir(shared_dir)


def plant(path: Path) -> None:
    """The neighbour's file under a GPU lock name (given to nobody when we may)."""
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o644))
    if IS_ROOT:
        os.lchown(path, NEIGHBOUR, NEIGHBOUR)


def swap(path: Path) -> None:
    """What the file's owner may do in a sticky directory: another file under the same name."""
    before = os.lstat(path).st_ino
    os.unlink(path)
    plant(path)
    assert os.lstat(path).st_ino != before


def leases_on(where: Path, key: str) -> list[L.Lease]:
    look = L.LeaseDir(where, True, on_warning=lambda _: None)
    try:
        with look.locked(patience=0.2):
            return [lease for lease in L.read_state(look).leases if key in lease.units and lease.kind != "lock"]
    finally:
        look.close()


@pytest.mark.parametrize("writes_first", ["the one that looked first", "the one that looked second"])
def test_a_gpu_lock_file_swapped_between_two_looks_never_gives_the_gpu_twice(where, children, writes_first):
    """Launchers a and b go around the held directory lock; between their looks the neighbour
    swaps GPU 4's lock file, so each holds a flock on a different file, and each reads the
    directory empty. Whichever writes its lease second finds the other's and backs off: exactly
    one lease holds GPU 4. Today's code gave it to both."""
    hold(children, where / ".lock")
    plant(gpu_lock(where, G4))
    a, b = (L.LeaseDir(where, True, on_warning=lambda _: None) for _ in range(2))
    won: list[L.HeldLease] = []
    lost: list[str] = []

    def lease(d: L.LeaseDir) -> None:
        try:
            won.append(L.create_lease(d, [(G4, "GPU 4")], "run", 600))
        except L.LeaseConflict as e:
            lost.append(str(e))

    with a.locked(patience=0.2, units=[G4]):
        assert L.read_state(a).leases == []
        swap(gpu_lock(where, G4))
        with b.locked(patience=0.2, units=[G4]):
            assert b.locked_out == {}  # b holds "GPU 4's lock" too: a flock on the new file
            assert L.read_state(b).leases == []
            order = (a, b) if writes_first == "the one that looked first" else (b, a)
            for d in order:
                lease(d)
    assert len(won) == 1 and len(lost) == 1, (won, lost)
    assert won[0].dir is order[0]  # the second to write backs off: the first may not have seen it
    assert "GPU 4 was reserved by a vram run of " in lost[0] and "nothing was reserved" in lost[0]
    assert [lease.id for lease in leases_on(where, G4)] == [won[0].lease.id]
    assert L.leftovers(a) == [f"lease-{won[0].lease.id}.json", f"lease-{won[0].lease.id}.lock"]  # no trace of the loser
    won[0].release()
    a.close()
    b.close()


def test_a_gpu_lock_file_swapped_away_and_back_never_gives_the_gpu_twice(where, children):
    """The swap undone (a hard link kept, renamed back over the name): when a writes, the name
    is its file again, so checking the lock file's identity is not enough; b's lease, written
    after a read, is what a finds when it reads again."""
    hold(children, where / ".lock")
    path = gpu_lock(where, G4)
    plant(path)
    kept = where / "kept-by-the-neighbour"
    a, b = (L.LeaseDir(where, True, on_warning=lambda _: None) for _ in range(2))
    with a.locked(patience=0.2, units=[G4]):
        assert L.read_state(a).leases == []
        os.link(path, kept)
        swap(path)
        with b.locked(patience=0.2, units=[G4]):
            assert L.read_state(b).leases == []
            theirs = L.create_lease(b, [(G4, "GPU 4")], "run", 600)
        os.rename(kept, path)  # a's file is GPU 4's lock again
        with pytest.raises(L.LeaseConflict):
            L.create_lease(a, [(G4, "GPU 4")], "run", 600)
    assert [lease.id for lease in leases_on(where, G4)] == [theirs.lease.id]
    theirs.release()
    a.close()
    b.close()


def test_a_lock_taken_on_a_file_no_longer_at_its_name_is_taken_again(where, monkeypatch):
    """The file is swapped while a look waits for (or takes) its lock: a flock on a file that is
    no longer GPU 4's lock keeps nobody out, so the look takes the lock of the file that is."""
    plant(gpu_lock(where, G4))
    real = locking._acquire
    swapped: list[int] = []

    def swap_first(fd, *args, **kwargs):
        if not swapped and os.fstat(fd).st_ino == os.lstat(gpu_lock(where, G4)).st_ino:
            swapped.append(os.fstat(fd).st_ino)
            swap(gpu_lock(where, G4))
        return real(fd, *args, **kwargs)

    monkeypatch.setattr(locking, "_acquire", swap_first)
    d = L.LeaseDir(where, True, on_warning=lambda _: None)
    with d.locked(units=[G4]):
        assert swapped and os.lstat(gpu_lock(where, G4)).st_ino != swapped[0]
        assert L._held(gpu_lock(where, G4))  # the file now at the name is the one locked
    d.close()


def slow_every_look(directory: Path) -> None:
    """The neighbour's junk, as much as a look reads of one owner (MAX_PER_OWNER files just under
    MAX_FILE): every look takes tens of milliseconds, so that the looks of launchers overlap."""
    junk = ('{"id": "x", "pad": "' + "x" * (L.MAX_FILE - 64) + '"}').encode()
    for i in range(L.MAX_PER_OWNER):
        path = directory / f"lease-junk{i}.json"
        path.write_bytes(junk)
        if IS_ROOT:
            os.lchown(path, NEIGHBOUR, NEIGHBOUR)


@pytest.mark.slow
def test_launchers_never_share_a_gpu_while_a_neighbour_swaps_the_lock_files(groups, children, leasing, tmp_path):
    """Real launchers (16 `vram run --wait` for demo's two fitting GPUs) while a neighbour holds
    the directory lock and swaps every GPU's lock file in a loop; the launchers go around the
    directory lock in the same instant (go_around_together), so their first looks overlap. Each
    job records when it held which GPU: no two overlap, and everyone gets a turn."""
    leasing.dir.mkdir(mode=0o1777, parents=True)
    os.chmod(leasing.dir, 0o1777)
    machine = open_machine("demo")
    snap = machine.snapshot()
    names = [L._unit_lock_name(u.key) for u in units_of(snap, devices_of(snap))]
    machine.close()
    slow_every_look(leasing.dir)
    children.start([sys.executable, "-c", SWAP, str(leasing.dir), *names])
    assert wait_for(lambda: (leasing.dir / "swapping").exists(), timeout=20)
    out = tmp_path / "records"
    out.mkdir()
    log = open(tmp_path / "stderr.txt", "w")
    procs = [launch(groups, leasing, out, f"j{i:02d}", 0.5, "--wait", "120", "-n", "1", log=log) for i in range(16)]
    go_around_together(procs, Path(os.path.realpath(leasing.dir / ".lock")))
    codes = wait_all(procs, timeout=180)
    log.close()
    assert codes == [0] * 16, (tmp_path / "stderr.txt").read_text()[-3000:]
    assert set(assert_no_overlap(records(out))) == {"4", "7"}
    assert [n for n in leasing.leftovers() if not n.startswith("lease-junk")] == []
