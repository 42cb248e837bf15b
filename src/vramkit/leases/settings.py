"""Where leases live, how long they last and how patient vram is with locks: the numbers of
docs/leases.md, and VRAM_LEASE_TIMEOUT."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..i18n import _
from .errors import LeaseError

ENV_DIR = "VRAM_LEASE_DIR"
ENV_TIMEOUT = "VRAM_LEASE_TIMEOUT"
SHARED_DIR = Path("/tmp/vramkit-leases")
# Where no admin has made SHARED_DIR root's, each user keeps leases in a directory of their own
# beside it, SHARED_DIR's name + "-UID" (only they can write it), and every vram reads everyone's
# (others.py): leases are shared by all users of /tmp without any directory another user owns.
MAX_DIRS = 256  # other users' lease directories read per look
MAX_DIRS_PER_OWNER = 4  # of them from one owner (their own, one beside a squatted name, the old shared one)
MAX_ENTRIES = 4096  # names listed in one other user's directory per look: their junk costs them, not us
DEFAULT_TIMEOUT = 600.0  # seconds a lease waits for its job to appear on the GPU
MAX_LEASE = 24 * 3600.0  # no lease lasts longer, whatever its file says
HOLD_PATIENCE = 2.0  # seconds one holder may keep a lock before vram goes around it (vram holds one for ms)
LOCK_PATIENCE = 30.0  # seconds a lock may change hands without this vram getting it, before it goes around
MAX_UNIT_LOCKS = 256  # GPU lock files taken per look (a machine has at most a few dozen GPUs and MIG slices)
MAX_UNIT_LOCKS_PER_OWNER = 64  # of them from one owner: another user's junk cannot make every look slow
MAX_FILE = 64 * 1024  # bytes: a lease or ticket is a few hundred; anything larger is junk, never read
MAX_PER_OWNER = 256  # lease and ticket files read per owner per round; the rest of theirs are ignored
RELOCKS = 4  # tries to lock a GPU's lock file that keeps being replaced (create_lease's check still guards)
MAX_SEQ = 10**19 - 1  # the last queue number (only a planted ticket gets near it)
# Leases written by vram before leases recorded their holders' start ticks name pids only; those
# are told from reused ones by start time, exact to the boot time's second (state.py).
LEGACY_PID_SLACK = 1.0


def lease_timeout(env: Mapping[str, str] | None = None) -> float:
    from ..units import parse_duration

    env = os.environ if env is None else env
    raw = env.get(ENV_TIMEOUT)
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = parse_duration(raw)
    except ValueError as e:
        raise LeaseError(f"{ENV_TIMEOUT}: {e}") from None
    if not 0 < value <= MAX_LEASE:
        raise LeaseError(_("{variable}: must be more than 0 and at most 24h").format(variable=ENV_TIMEOUT))
    return value
