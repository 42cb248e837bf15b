"""Joining the lease queue is all or nothing: an interrupt half-way leaves no ticket file."""

from __future__ import annotations

import os

import pytest

from vramkit import leases as L
from vramkit.leases import queue


def test_an_interrupt_while_writing_the_ticket_leaves_no_file(tmp_path, monkeypatch):
    d = L.lease_dir(env={"VRAM_LEASE_DIR": str(tmp_path)})
    real_write = os.write

    def interrupted(fd: int, data: bytes) -> int:
        raise KeyboardInterrupt  # as Ctrl-C arriving between creating the file and writing it

    monkeypatch.setattr(queue.os, "write", interrupted)
    with d.locked():
        state = L.read_state(d)
        with pytest.raises(KeyboardInterrupt):
            L.enqueue(d, state, {"count": 1})
    monkeypatch.setattr(queue.os, "write", real_write)
    assert L.leftovers(d) == []
    with d.locked():  # and the queue still works
        ticket = L.enqueue(d, L.read_state(d), {"count": 1})
    assert [n for n in L.leftovers(d) if n.startswith("wait-")]
    ticket.leave()
    assert L.leftovers(d) == []
