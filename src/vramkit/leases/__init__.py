"""Leases: a GPU vram handed out stays reserved until its job shows up on it in NVML, exits,
or the lease times out, so that concurrent launchers never hand out the same GPU twice.

Everything lives in one directory shared by the machine's users, or where no admin has made
one, in one per user that every vram reads (others.py; docs/leases.md):

  .lock                 flock'd (exclusively, for milliseconds) around every read-decide-write, so
                        that launchers take turns; one that is held too long is gone around
  gpu-KEY.lock          one per GPU (or MIG instance) of the machine: no lease is written for a
                        GPU without holding its lock, so whoever holds one blocks that GPU only;
                        its owner may swap it for another file, so a lease is also checked after
                        it is written (create_lease)
  lease-ID.json         a lease: which units, whose (the holder and its job as pid + start ticks,
                        with the boot id), until when (replaced atomically)
  lease-ID.lock         held (flock) by the launcher and, inherited, by its job: while anyone
                        holds it the lease is alive; when both are gone (even by SIGKILL) the
                        kernel drops the lock and the lease is stale at once
  wait-SEQ-PID.json     a waiter's ticket (its policy), flock'd by the waiter; SEQ orders the queue

A crashed holder needs no clean-up: the next vram that reads the directory sees the lock free
(or the time up, or its holders gone) and removes the files it may remove (in a sticky
directory, the owner's). Locks are flock(2) through Python's fcntl module: they belong to the
open file, so a job started with the lease's file descriptor keeps the lease alive after its
launcher is gone.

One concern per module:

  settings.py   the numbers (timeouts, patience, bounds) and VRAM_LEASE_TIMEOUT
  errors.py     LeaseError, LeaseConflict
  files.py      files in a directory every user writes to: no symlinks, no blocking, bounded
                reads, atomic writes, lock checks, removal where allowed
  locking.py    LeaseDir: a look (the directory lock, then every GPU's, in name order), locks
                kept too long gone around with their holder named
  directory.py  which directory: $VRAM_LEASE_DIR, the shared one when safe (root's), else this
                user's own beside it, else a private one
  others.py     where no admin made the shared one: each user's own directory, everyone's read
  model.py      Lease, LockedGpu, Ticket, State; program_name
  state.py      read_state: every file checked, stale ones removed; holders by (pid, start
                ticks, boot id); fulfilled
  reserve.py    create_lease (write, then check), HeldLease
  queue.py      enqueue, HeldTicket, leftovers
"""

from __future__ import annotations

from collections.abc import Mapping

from ..procs.namespaces import proc_numbers_ours
from . import directory as _directory
from .errors import LeaseConflict, LeaseError
from .files import _held
from .locking import LeaseDir, _unit_lock_name
from .model import Lease, LockedGpu, State, Ticket, program_name
from .queue import HeldTicket, enqueue, leftovers
from .reserve import HeldLease, create_lease
from .settings import (
    DEFAULT_TIMEOUT,
    ENV_DIR,
    ENV_TIMEOUT,
    HOLD_PATIENCE,
    LOCK_PATIENCE,
    MAX_FILE,
    MAX_LEASE,
    MAX_PER_OWNER,
    MAX_SEQ,
    MAX_UNIT_LOCKS,
    MAX_UNIT_LOCKS_PER_OWNER,
    RELOCKS,
    SHARED_DIR,
    lease_timeout,
)
from .state import fulfilled, read_state


def lease_dir(env: Mapping[str, str] | None = None) -> LeaseDir:
    """$VRAM_LEASE_DIR, else the shared directory (this package's SHARED_DIR, read when called:
    tests point it elsewhere), else a per-user directory (directory.lease_dir)."""
    return _directory.lease_dir(env, shared_dir=SHARED_DIR)


__all__ = ["DEFAULT_TIMEOUT", "ENV_DIR", "ENV_TIMEOUT", "HOLD_PATIENCE", "LOCK_PATIENCE", "MAX_FILE", "MAX_LEASE",
           "MAX_PER_OWNER", "MAX_SEQ", "MAX_UNIT_LOCKS", "MAX_UNIT_LOCKS_PER_OWNER", "RELOCKS", "SHARED_DIR",
           "HeldLease", "HeldTicket", "Lease", "LeaseConflict", "LeaseDir", "LeaseError", "LockedGpu", "State",
           "Ticket", "_held", "_unit_lock_name", "create_lease", "enqueue", "fulfilled", "lease_dir",
           "lease_timeout", "leftovers", "proc_numbers_ours", "program_name", "read_state"]
