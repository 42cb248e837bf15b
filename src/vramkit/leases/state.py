"""Reading the lease directory: the live leases and the queue, every file checked as another
user's input; stale ones removed where allowed. A lease lives while its lock is held, for its
time, and no longer than its holders: (pid, start ticks) within this boot (procs.ProcessKey)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..i18n import N_, _
from ..procs import (
    ALIVE,
    GONE,
    ProcessKey,
    boot_id,
    descends_from,
    pid_namespace,
    read_stat,
    sanitize,
    start_time,
    user_name,
)
from ..procs.namespaces import proc_numbers_ours
from .files import _held, _Junk, _read_json, _remove
from .locking import LeaseDir
from .model import Lease, LockedGpu, State, Ticket
from .settings import LEGACY_PID_SLACK, MAX_ENTRIES, MAX_FILE, MAX_LEASE, MAX_PER_OWNER

_LEASE_RE = re.compile(r"^lease-([0-9a-z-]+)\.json$")
# A ticket's SEQ is written with at least 10 digits and read with up to 19: a waiter takes the
# highest live SEQ + 1, so a ticket planted at 9999999999 must not push the next ones out of sight.
_TICKET_RE = re.compile(r"^wait-(\d{10,19})-(\d+)\.json$")


def read_state(d: LeaseDir, now: float | None = None, *, known: Collection[str] | None = None) -> State:
    """Live leases and tickets; stale ones are removed where allowed. Call with d.locked().
    With `known` (lease ids), only the leases not in it, and no tickets: what appeared since.

    Every file is another user's input: anything that is not a regular file of at most MAX_FILE
    bytes holding a valid lease or ticket is ignored (never opened blocking, never followed) and
    named once in a warning (d.warn_ignored); at most MAX_PER_OWNER files of each owner are read."""
    now = time.time() if now is None else now
    me = os.getuid()
    leases: list[Lease] = []
    tickets: list[Ticket] = []
    ignored: list[str] = []
    per_owner: dict[int, int] = {}
    for entry in os.scandir(d.path):
        name = entry.name
        lease_m, ticket_m = _LEASE_RE.match(name), _TICKET_RE.match(name)
        if known is not None and (ticket_m or (lease_m and lease_m.group(1) in known)):
            continue
        if not (lease_m or ticket_m):
            with contextlib.suppress(OSError):
                if name.startswith(".tmp-") and now - entry.stat(follow_symlinks=False).st_mtime > 60:
                    _remove(Path(entry.path))  # left by a writer killed mid-write
            continue
        path = Path(entry.path)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        owner = st.st_uid
        per_owner[owner] = per_owner.get(owner, 0) + 1
        if per_owner[owner] > MAX_PER_OWNER:
            if per_owner[owner] == MAX_PER_OWNER + 1:
                ignored.insert(0, _("files of {user} in {path} beyond the first {n} (not read)").format(
                    user=user_name(owner), path=d.path, n=MAX_PER_OWNER))
            continue
        try:
            if stat.S_ISLNK(st.st_mode):
                raise _Junk(_("a symlink"))
            if not stat.S_ISREG(st.st_mode):
                raise _Junk(_("not a regular file"))
            if st.st_size > MAX_FILE:
                raise _Junk(_("larger than {size} KiB").format(size=MAX_FILE // 1024))
            if lease_m:
                lock = path.with_name(f"lease-{lease_m.group(1)}.lock")
                try:
                    data, st = _read_json(path)
                    lease = _lease_from(data, st, lease_m.group(1))
                except _Junk:
                    if owner == me and not _held(lock):
                        _remove(path, lock)  # our own, half-written (cannot happen) or corrupted
                    raise
                if now >= lease.expires or (lease.locked and not _held(lock, owner)):
                    _remove(path, lock)  # timed out (or its pid reused), or its launcher and job are both gone
                    continue
                leases.append(lease)
            elif ticket_m:
                if not _held(path, owner):
                    _remove(path)  # the waiter is gone
                    continue
                data, st = _read_json(path)
                tickets.append(_ticket_from(data, st, int(ticket_m.group(1)), int(ticket_m.group(2))))
        except FileNotFoundError:
            continue  # removed meanwhile
        except _Junk as e:
            ignored.append(f"{path} ({user_name(owner)}: {e})")
    if d.others_in is not None:
        from .others import foreign_dirs

        for name in foreign_dirs(d.others_in, d.others_base, d.path):
            leases.extend(_foreign_leases(d.others_in / name, now, known, ignored))
    tickets.sort(key=lambda t: (t.seq, t.pid))  # the same order for every reader, even on a tie
    if ignored:
        d.warn_ignored(ignored)
    d._seen.update(lease.id for lease in leases)
    for key, holder in d.locked_out.items():
        leases.append(LockedGpu(id=f"locked-{key}", units=[key], labels={}, kind="lock", user="?", uid=-1, pid=0,
                                created=now, expires=now, locked=False, holder=holder))
    return State(leases, tickets)


def _foreign_leases(path: Path, now: float, known: Collection[str] | None, ignored: list[str]) -> list[Lease]:
    """The live leases in another user's lease directory (others.py), read as their input: the
    directory opened once, never through a symlink, at most MAX_ENTRIES names listed and
    MAX_PER_OWNER leases of one owner read; regular files of at most MAX_FILE bytes only. Nothing
    is removed there (stale leases are skipped: their owner's vram removes them), and tickets are
    not read (waiting in line is per directory)."""
    try:
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []  # gone, a symlink now, or not readable by us: its owner's leases stay theirs
    leases: list[Lease] = []
    per_owner: dict[int, int] = {}
    try:
        with os.scandir(dfd) as entries:
            for listed, entry in enumerate(entries):
                if listed >= MAX_ENTRIES:
                    ignored.append(_("{path} (names beyond the first {n}: not read)").format(path=path, n=MAX_ENTRIES))
                    break
                m = _LEASE_RE.match(entry.name)
                if not m or (known is not None and m.group(1) in known):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                owner = st.st_uid
                per_owner[owner] = per_owner.get(owner, 0) + 1
                if per_owner[owner] > MAX_PER_OWNER:
                    continue
                try:
                    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
                        raise _Junk(_("not a regular file of at most 64 KiB"))
                    data, st = _read_json(entry.name, dir_fd=dfd)
                    lease = _lease_from(data, st, m.group(1))
                except FileNotFoundError:
                    continue
                except _Junk as e:
                    ignored.append(f"{path / entry.name} ({user_name(owner)}: {e})")
                    continue
                if now >= lease.expires or (lease.locked and not _held(f"lease-{m.group(1)}.lock", owner, dfd)):
                    continue  # stale: left for its owner's vram to remove
                leases.append(lease)
    except OSError:
        pass  # the directory went away while being read: what was read counts
    finally:
        os.close(dfd)
    return leases


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _pid(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31


def _ticks(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _text(value: object, most: int = 4096) -> bool:
    return isinstance(value, str) and len(value) <= most


def _lease_from(data: dict[str, Any], st: os.stat_result, lease_id: str) -> Lease:
    """A lease from its file, or _Junk saying why not. Lease files are written by other users:
    every field is checked (types, finite numbers), text is stripped of control characters, the
    user is the file's owner (never what the file says), and the lease lasts at most MAX_LEASE
    from the file's own mtime, whatever the file says."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise _Junk(_(what))  # (marked N_ below: translated only when it fails)

    need(data.get("id") == lease_id, N_("its id is not its name's"))
    units, labels, baseline = data.get("units"), data.get("labels"), data.get("baseline", {})
    need(isinstance(units, list) and len(units) <= 4096 and all(_text(u, 256) for u in units),
         N_("units is not a list of GPU keys"))
    assert isinstance(units, list)
    need(isinstance(labels, dict) and all(_text(k, 256) and _text(v, 256) for k, v in labels.items()),
         N_("labels is not a map of text"))
    assert isinstance(labels, dict)
    need(data.get("kind") in ("run", "api", "hold"), N_("kind is not run, api or hold"))
    need(_pid(data.get("pid")), N_("pid is not a pid"))
    need(data.get("job_pid") is None or _pid(data.get("job_pid")), N_("job_pid is not a pid"))
    need(_finite(data.get("created")) and _finite(data.get("expires")), N_("created or expires is not a finite number"))
    need(isinstance(data.get("locked", True), bool), N_("locked is not true or false"))
    need(data.get("pidns") is None or _text(data.get("pidns"), 256), N_("pidns is not text"))
    need(_text(data.get("host", ""), 256), N_("host is not text"))
    need(data.get("command") is None or _text(data.get("command")), N_("command is not text"))
    need(data.get("boot_id") is None or _text(data.get("boot_id"), 64), N_("boot_id is not text"))
    need(all(data.get(k) is None or _ticks(data.get(k)) for k in ("start_ticks", "job_start_ticks")),
         N_("start_ticks or job_start_ticks is not a count of clock ticks"))
    need(isinstance(baseline, dict) and all(
        _text(k, 256) and isinstance(v, list) and all(_pid(p) for p in v) for k, v in baseline.items()),
        N_("baseline is not a map of pid lists"))
    assert isinstance(baseline, dict)
    written = min(st.st_mtime, st.st_ctime)  # a future mtime (touch -d) moves the ctime to now
    # a lease cannot postdate its file, nor predate 1970 (another user's -1e308 is finite: 300 digits of "ago")
    created = max(0.0, min(float(data["created"]), written))
    expires = min(float(data["expires"]), written + MAX_LEASE, _holder_deadline(data, written))
    return Lease(id=lease_id, units=list(units), labels={k: sanitize(v) for k, v in labels.items()},
                 kind=data["kind"], user=sanitize(user_name(st.st_uid)), uid=st.st_uid, pid=data["pid"],
                 created=created, expires=expires, locked=data.get("locked", True), job_pid=data.get("job_pid"),
                 pidns=data.get("pidns"), host=sanitize(data.get("host", "")),
                 command=sanitize(data["command"]) if data.get("command") else None,
                 baseline={k: list(v) for k, v in baseline.items()}, start_ticks=data.get("start_ticks"),
                 job_start_ticks=data.get("job_start_ticks"), boot_id=data.get("boot_id"))


def _holder_deadline(data: dict[str, Any], written: float) -> float:
    """When a lease must end by its holders (/proc, not the file's word): MAX_LEASE after the start
    of the first of its holder and job that is alive; -inf (at once) when none is alive and one
    is known to be gone for good: written in another boot, or its pid now another process's.
    A pid that no longer exists says nothing (the lease's lock, or its time, decides). Pids of
    another pid namespace cannot be looked up here: math.inf (the file's times still cap it)."""
    boot, this_boot = data.get("boot_id"), boot_id()
    if boot is not None and this_boot is not None and boot != this_boot:
        return -math.inf  # written before this machine last booted: its holders are gone with that boot
    pidns = data.get("pidns")
    if pidns is None or pidns != pid_namespace() or not proc_numbers_ours():
        return math.inf
    if boot is None:
        return _legacy_holder_deadline(data, written)
    starts, dead = [], False
    for pid, ticks in ((data["pid"], data.get("start_ticks")), (data.get("job_pid"), data.get("job_start_ticks"))):
        if pid is None or ticks is None:
            continue  # no job yet, or its start not recorded: it says nothing
        key = ProcessKey(pid, ticks, boot)
        status = key.status()
        if status == ALIVE:
            starts.append(key.start_time)
        elif status != GONE:
            dead = True  # the pid is another process's now: this holder has ended
    if starts:
        return min(starts) + MAX_LEASE
    return -math.inf if dead else math.inf


def _legacy_holder_deadline(data: dict[str, Any], written: float) -> float:
    """_holder_deadline for a lease written by vram before leases recorded start ticks (a launcher
    of the previous version may still run): a pid whose process started after the file was
    written (to LEGACY_PID_SLACK: /proc's start time is exact to the boot time's second) is
    reused, and its holder gone."""
    starts, reused = [], False
    for pid in (data["pid"], data.get("job_pid")):
        stat_ = read_stat(pid) if pid is not None else None
        if stat_ is None:
            continue  # gone: its lock (or the time) says whether the lease lives
        started = start_time(stat_.start_ticks)
        if started > written + LEGACY_PID_SLACK:
            reused = True
        else:
            starts.append(started)
    if starts:
        return min(starts) + MAX_LEASE
    return -math.inf if reused else math.inf


def _ticket_from(data: dict[str, Any], st: os.stat_result, seq: int, pid: int) -> Ticket:
    """A waiter's ticket from its file, or _Junk: the policy must be a map whose numbers are
    finite; its uid (whose processes count as "other users'") is the file's owner."""
    policy = data.get("policy")
    if not isinstance(policy, dict):
        raise _Junk(_("policy is not a map"))
    if any(isinstance(v, float) and not math.isfinite(v) for v in policy.values()):
        raise _Junk(_("policy has a number that is not finite"))
    created = data.get("created", st.st_mtime)
    if not _finite(created):
        raise _Junk(_("created is not a finite number"))
    return Ticket(seq=seq, pid=pid, user=sanitize(user_name(st.st_uid)), policy={**policy, "uid": st.st_uid},
                  created=max(0.0, min(float(created), st.st_mtime)))


def fulfilled(lease: Lease, key: str, pids_on_unit: list[int]) -> bool:
    """Whether the lease's job now shows on the unit in NVML, which ends the reservation.

    `pids_on_unit` are processes of this /proc: the pids here of the unit's rows (allocate.pids_here),
    never a host pid NVML lists inside a container for a process no pid here could be told to be
    (its number may be an unrelated process's here). Pids are only comparable inside one pid
    namespace: a lease taken in another (a container's, read on the host, or the host's, read in a
    container) is only fulfilled by its own launcher, or by time."""
    if lease.kind == "lock":
        return False
    if lease.pidns is not None and lease.pidns != pid_namespace():
        return False  # its pids (job, baseline) number processes of another namespace
    if lease.kind == "hold":
        before = {p for p in lease.baseline.get(key, []) if isinstance(p, int)}
        return any(p not in before for p in pids_on_unit)
    job = lease.job_pid or lease.pid
    if lease.pidns is None or not proc_numbers_ours():
        return False  # whose namespace its pids are cannot be told, or /proc numbers another's
    recorded = lease.job_key if lease.job_pid else lease.holder_key
    if recorded is not None and recorded.status() != ALIVE:
        return False  # that pid is another process's now (or free): nothing descends from the job
    return any(descends_from(p, job) for p in pids_on_unit)
