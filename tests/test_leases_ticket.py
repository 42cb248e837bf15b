"""The lease queue's ticket numbers (wait-SEQ-PID.json): a waiter takes the highest live SEQ + 1.
SEQ is written with at least 10 digits; a ticket at 9999999999 (planted, or a long-lived queue)
must not push later waiters out of the name pattern, where they would be invisible to each other
and to everyone else, and the order must be the same for every reader."""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from vramkit import leases as L


def plant(d: L.LeaseDir, seq: str, pid: int) -> int:
    """A live waiter's ticket with a chosen number: the file, flock'd (held) by this test."""
    path = d.path / f"wait-{seq}-{pid}.json"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, json.dumps({"user": "x", "pid": pid, "created": 0, "policy": {"count": 1}}).encode())
    return fd


@pytest.fixture
def lease_dir(tmp_path):
    return L.lease_dir(env={"VRAM_LEASE_DIR": str(tmp_path)})


def test_waiters_behind_a_ten_digit_ticket_still_see_each_other(lease_dir):
    d = lease_dir
    fd = plant(d, "9999999999", 1)
    held = []
    try:
        for _ in range(3):
            with d.locked():
                held.append(L.enqueue(d, L.read_state(d), {"count": 1}))
        assert [t.seq for t in held] == [10_000_000_000, 10_000_000_001, 10_000_000_002]
        with d.locked():
            seen = L.read_state(d).tickets
        # everyone in line, in the order they joined (before: only the first, the rest unseen)
        assert [t.seq for t in seen] == [9_999_999_999, 10_000_000_000, 10_000_000_001, 10_000_000_002]
        assert [t.pid for t in seen] == [1] + [os.getpid()] * 3
    finally:
        for t in held:
            t.leave()
        os.close(fd)


def test_the_last_queue_number_names_whose_ticket_took_it(lease_dir):
    d = lease_dir
    fd = plant(d, str(L.MAX_SEQ), 1)
    try:
        with d.locked():
            state = L.read_state(d)
            assert [t.seq for t in state.tickets] == [L.MAX_SEQ]  # 19 digits: still read
            with pytest.raises(L.LeaseError, match=r"pid 1.*last number"):
                L.enqueue(d, state, {"count": 1})
        assert [n for n in L.leftovers(d) if n.startswith("wait-")] == [f"wait-{L.MAX_SEQ}-1.json"]
    finally:
        os.close(fd)


def test_tickets_with_the_same_number_are_ordered_by_pid_for_every_reader(lease_dir):
    d = lease_dir
    fds = [plant(d, "0000000007", pid) for pid in (300, 20, 1000)]
    try:
        with d.locked():
            assert [(t.seq, t.pid) for t in L.read_state(d).tickets] == [(7, 20), (7, 300), (7, 1000)]
    finally:
        for fd in fds:
            os.close(fd)
