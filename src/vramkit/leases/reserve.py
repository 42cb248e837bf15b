"""Taking a lease: written under the GPUs' locks, then checked by reading the directory again;
HeldLease, the lease this process holds (its lock passed on to the job)."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import secrets
import socket
import time
from dataclasses import asdict

from ..i18n import _
from ..procs import ProcessKey, boot_id, pid_namespace, user_name
from ..procs.namespaces import proc_numbers_ours
from .errors import LeaseConflict, LeaseError
from .files import _remove, _write_json
from .locking import LeaseDir
from .model import Lease, program_name
from .settings import MAX_LEASE
from .state import read_state


class HeldLease:
    """A lease this process holds. Pass `fd` to the job so the lease outlives a crashed launcher."""

    def __init__(self, d: LeaseDir, lease: Lease, fd: int | None):
        self.dir, self.lease = d, lease
        self.fd: int | None = fd
        self.path = d.path / f"lease-{lease.id}.json"
        self.lock_path = d.path / f"lease-{lease.id}.lock"

    @property
    def pending(self) -> list[str]:
        return list(self.lease.units)

    def set_job(self, pid: int) -> None:
        """The launched job: recorded as (pid, start ticks), read now, while it runs (its
        launcher has not reaped it), so that a reused pid is never taken for it."""
        job = ProcessKey.of(pid) if proc_numbers_ours() else None  # (else /proc/PID is another process)
        with self.dir.locked():
            self.lease.job_pid = pid
            self.lease.job_start_ticks = job.start_ticks if job is not None else None
            if self.lease.units and self.path.exists():
                _write_json(self.path, asdict(self.lease))

    def release_units(self, keys: list[str]) -> None:
        """The job shows on these units: they are no longer reserved."""
        with self.dir.locked():
            self.lease.units = [k for k in self.lease.units if k not in keys]
            if not self.lease.units:
                _remove(self.path, self.lock_path)
            elif self.path.exists():
                _write_json(self.path, asdict(self.lease))

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.lease.expires

    def release(self) -> None:
        """End the lease (the job exited, or it never started). Safe to call twice."""
        if self.lease.units:
            self.lease.units = []
            with contextlib.suppress(LeaseError), self.dir.locked():
                _remove(self.path, self.lock_path)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def create_lease(d: LeaseDir, units: list[tuple[str, str]], kind: str, timeout: float, *,
                 command: str | None = None, baseline: dict[str, list[int]] | None = None) -> HeldLease:
    """Reserve `units` ((key, label) pairs). Call with d.locked(), after deciding. Of `command`
    only the program's name is written: lease files are readable by every user, and arguments
    can hold secrets (--db-password=...).

    No lease is written for a GPU without holding its lock (LeaseDir.hold_unit; one this look
    did not lock from its start is locked now). A lock file's owner can swap it for another file,
    so that two launchers each hold "its lock": so, write, then check (_check_written). Another
    lease on one of these GPUs that the caller did not choose by (read_state in this look) means
    LeaseConflict, and nothing is left reserved; choosing again gives a right answer."""
    now = time.time()
    labels = dict(units)
    for key in sorted(labels):
        holder = d.hold_unit(key)
        if holder is not None:
            raise LeaseError(_("{gpu} is reserved by {who}").format(gpu=labels[key], who=holder))
    me = ProcessKey.of(os.getpid()) if proc_numbers_ours() else None  # (else /proc/PID is another process)
    expires = min(now + timeout, me.start_time + MAX_LEASE if me is not None else math.inf)
    if expires <= now:  # a lease counts at most MAX_LEASE from its holder's start (_holder_deadline)
        raise LeaseError(_("this process started more than 24 hours ago, and a lease lasts at most 24 hours from "
                           "its holder's start: start the job with `vram run`, or from a new process"))
    uid = os.getuid()
    lease = Lease(id=f"{int(now * 1000):x}-{os.getpid()}-{secrets.token_hex(3)}", units=[k for k, _label in units],
                  labels=labels, kind=kind, user=user_name(uid), uid=uid, pid=os.getpid(), created=now,
                  expires=expires, locked=kind != "hold", pidns=pid_namespace(), host=socket.gethostname(),
                  command=program_name(command), baseline=baseline or {},
                  start_ticks=me.start_ticks if me is not None else None, boot_id=boot_id())
    seen = set(d._seen)  # what the caller chose by
    fd = None
    lock_path = d.path / f"lease-{lease.id}.lock"
    if lease.locked:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            os.fchmod(fd, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if fd is not None:
                os.close(fd)
            raise LeaseError(f"cannot create a lease in {d.path}: {e.strerror}") from None
    try:
        _write_json(d.path / f"lease-{lease.id}.json", asdict(lease))
    except OSError as e:
        if fd is not None:
            os.close(fd)
        _remove(lock_path)
        raise LeaseError(f"cannot write a lease in {d.path}: {e.strerror}") from None
    held = HeldLease(d, lease, fd)
    try:
        _check_written(d, lease, seen)
    except BaseException:  # LeaseConflict, or Ctrl-C half-way: no lease left behind
        held.release()
        raise
    return held


def _check_written(d: LeaseDir, lease: Lease, seen: set[str]) -> None:
    """LeaseConflict when the directory, read again after `lease` was written, holds another live
    lease on one of its GPUs that the caller did not choose by (not in `seen`).

    Of two launchers that both chose a GPU (each holding a flock on a different file under its
    lock's name), the second to write its lease reads after both were written and finds the
    first's: it backs off. The first may find the second's too, and back off as well: nothing is
    then reserved and both choose again; never do both keep. No tie-break by time or id can let
    one keep a lease it found another beside: the other may have read before this one wrote,
    and kept its own."""
    for other in read_state(d, known={*seen, lease.id}).leases:
        if other.kind == "lock":
            continue
        taken = [lease.labels[k] for k in other.units if k in lease.labels]
        if taken:
            now = time.time()
            raise LeaseConflict(_("{gpu} was reserved by {who} while this vram was choosing; nothing was "
                                  "reserved: try again").format(gpu=taken[0], who=other.who(now)))
