"""Waiting in line: a waiter's ticket (wait-SEQ-PID.json, flock'd while it waits)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from ..i18n import _
from ..procs import user_name
from .errors import LeaseError
from .files import _remove
from .locking import LeaseDir
from .model import State
from .settings import MAX_SEQ


class HeldTicket:
    """This process's place in the queue; leave() when served or giving up."""

    def __init__(self, d: LeaseDir, path: Path, fd: int, seq: int):
        self.dir, self.path, self.seq = d, path, seq
        self.fd: int | None = fd

    def leave(self) -> None:
        """Call with d.locked() (or accept that the queue sees the departure a moment later)."""
        if self.fd is not None:
            _remove(self.path)
            os.close(self.fd)
            self.fd = None


def enqueue(d: LeaseDir, state: State, policy: dict[str, Any]) -> HeldTicket:
    """Join the queue behind every live waiter. Call with d.locked()."""
    last = max(state.tickets, key=lambda t: t.seq, default=None)
    seq = 1 if last is None else last.seq + 1
    if seq > MAX_SEQ:  # someone's ticket took the last number: say whose, rather than wait unseen
        assert last is not None
        raise LeaseError(_("cannot join the queue in {path}: the ticket of {who} took its last number ({seq}); it "
                           "must leave the queue first").format(path=d.path, who=last.who(), seq=last.seq))
    path = d.path / f"wait-{seq:010d}-{os.getpid()}.json"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:  # a stale ticket with our pid and seq: it was ours before a crash
        _remove(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise LeaseError(_("cannot join the queue in {path}: {error}").format(path=d.path, error=e.strerror)) from None
    try:
        os.fchmod(fd, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"user": user_name(os.getuid()), "pid": os.getpid(), "created": time.time(),
                                 "policy": policy}).encode())
        return HeldTicket(d, path, fd, seq)
    except BaseException:  # Ctrl-C or a full disk half-way: no ticket left behind
        os.close(fd)
        _remove(path)
        raise


def leftovers(d: LeaseDir) -> list[str]:
    """Lease (.json and .lock) and ticket files present now: after every job is done, none."""
    return sorted(n for n in os.listdir(d.path) if n.startswith(("lease-", "wait-")))
