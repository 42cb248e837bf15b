"""Who holds a file lock: /proc/locks, matched by device and inode."""

from __future__ import annotations

import os

MAX_LOCKS_BYTES = 1 << 20  # /proc/locks lists every lock on the machine: read this much at most


def flock_holders(st: os.stat_result) -> list[int]:
    """The pids holding a flock (or waiting for one: "->" lines are skipped) on the file `st`
    describes, in /proc/locks's order; 0 for a holder listed without a pid (another pid
    namespace). [] when none is listed or /proc/locks cannot be read."""
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read(MAX_LOCKS_BYTES).splitlines()
    except OSError:
        return []
    holders = []
    for line in lines:
        parts = line.split()  # "1: FLOCK  ADVISORY  WRITE 4121 08:01:1234 0 EOF"; waiters have "->"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == ident:
            holders.append(int(parts[4]) if parts[4].isdigit() else 0)
    return holders


def flock_holder(fd: int) -> int:
    """The pid holding a flock on `fd`'s file; 0 when none is listed (released meanwhile, or
    held from another pid namespace)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return 0
    return next((pid for pid in flock_holders(st) if pid), 0)
