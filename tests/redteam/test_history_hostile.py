"""A hostile neighbour and root's history (issue 26, items 1 and 3): another local user, as a real
process running as `nobody`, takes every lock it can on the history files (fcntl read locks on
every byte, flock, an open SQLite read transaction) while root's real `vram record` runs,
starts, stops and restarts; and files another user owns or may write are refused by root's
recorder and root's readers. Real SQLite files, real processes, the stepped scenario clock."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import AS_NOBODY, assert_one_line_error, clean_env, needs_root, run_vram, run_vram_as, vram_argv

pytestmark = needs_root("to record as root while another user (nobody) attacks the files")

EPOCH = 1767225600
HANG_GUARD = 120  # seconds: only so that a broken recorder fails the test instead of hanging it
NOBODY = 65534

# The neighbour: every file and directory it can reach under ROOT, opened read-only and locked
# every way an unprivileged process can (fcntl read lock on every byte, flock exclusive or
# shared, and for a database an SQLite read transaction held open), re-scanned every few ms so
# that files made later (a -wal, a -shm, a newly published copy) are locked too. It writes what
# it holds to STATUS, and holds it until it is killed or DEADLINE passes.
NEIGHBOUR = r"""
import errno, fcntl, json, os, sqlite3, struct, sys, time
root, status, deadline = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
held, conns, refused = {}, {}, set()
def lock(path, fd):
    took = []
    try:
        fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0))
        took.append("fcntl-read")
    except OSError:
        pass
    for how, name in ((fcntl.LOCK_EX, "flock-ex"), (fcntl.LOCK_SH, "flock-sh")):
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            took.append(name)
            break
        except OSError:
            pass
    return took
while time.monotonic() < deadline:
    for top, dirs, files in os.walk(root, onerror=lambda e: refused.add(e.filename)):
        for name in [*dirs, *files, "."]:
            path = os.path.normpath(os.path.join(top, name))
            try:
                st = os.lstat(path)
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EPERM):
                    refused.add(path)
                continue
            key = (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
            if key in held:
                os.close(fd)
                continue
            held[key] = (path, fd, lock(path, fd))
            if path.endswith(".db") and os.path.isfile(path):
                try:
                    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, timeout=0)
                    c.execute("BEGIN")
                    c.execute("SELECT count(*) FROM sqlite_schema").fetchone()
                    conns[key] = c
                except sqlite3.Error:
                    pass
    with open(status + ".tmp", "w") as f:
        json.dump({"held": [[p, how] for p, _, how in held.values()], "refused": sorted(refused),
                   "transactions": [held[k][0] for k in conns]}, f)
    os.replace(status + ".tmp", status)
    time.sleep(0.005)
"""


def stepped_env(start: float = 0) -> dict[str, str]:
    return clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=f"{start:g}")


@pytest.fixture
def shared() -> Iterator[Path]:
    """Root's directory that every user may enter and read (as /var/lib/vramkit is)."""
    path = Path(tempfile.mkdtemp(prefix="vramkit-hostile-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Neighbour:
    def __init__(self, root: Path, seconds: float = HANG_GUARD):
        self.home = Path(tempfile.mkdtemp(prefix="vramkit-neighbour-"))
        os.chown(self.home, NOBODY, NOBODY)  # where it writes what it holds
        self.status = self.home / "held.json"
        self.proc = subprocess.Popen([*AS_NOBODY, sys.executable, "-c", NEIGHBOUR, str(root), str(self.status),
                                      str(seconds)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def state(self) -> dict:
        try:
            return json.loads(self.status.read_text())
        except (OSError, ValueError):
            return {"held": [], "refused": [], "transactions": []}

    def wait_holding(self, path: Path, what: str = "flock-ex") -> None:
        deadline = time.monotonic() + HANG_GUARD
        while not any(p == str(path) and what in how for p, how in self.state()["held"]):
            assert self.proc.poll() is None, self.proc.communicate()[1]
            assert time.monotonic() < deadline, self.state()
            time.sleep(0.01)

    def stop(self) -> dict:
        state = self.state()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=HANG_GUARD)
        shutil.rmtree(self.home, ignore_errors=True)
        return state


@pytest.fixture
def neighbour_at() -> Iterator:
    started: list[Neighbour] = []

    def start(root: Path) -> Neighbour:
        n = Neighbour(root)
        started.append(n)
        return n
    yield start
    for n in started:
        n.stop()


def newest_sample(db: Path) -> int:
    """The newest sample's id (ids only grow: raw samples rolled up leave the newest), read by root."""
    from vramkit.history.store import Store

    store = Store.open(db)
    try:
        return int(store.conn.execute("SELECT coalesce(max(id), 0) FROM samples").fetchone()[0])
    finally:
        store.close()


def record(db: Path, samples: int, start: float) -> None:
    """`vram record --samples N` as root: exit 0, each attempt recorded, nothing said but the two lines."""
    before = newest_sample(db) if db.exists() else 0
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--samples",
                      str(samples), env=stepped_env(start), timeout=HANG_GUARD)
    assert result.rc == 0, result.err
    assert result.err_lines[-1] == f"vram record: stopped: {samples} samples recorded", result.err
    assert len(result.err_lines) == 2, result.err  # the start line and the stop line: no failure said
    assert newest_sample(db) == before + samples


# ------------------------------------------------------------------ item 1: readers cannot block the writer

def test_a_neighbour_holding_every_lock_it_can_take_stops_nothing(shared, neighbour_at):
    db = shared / "history.db"
    record(db, 5, 0)
    neighbour = neighbour_at(shared)
    neighbour.wait_holding(db)
    # Started while every lock it can take is held: at once, recording every sample.
    record(db, 30, 5 * 60)
    # A recorder running while the neighbour keeps locking what appears (each published copy),
    # then stopped by SIGTERM and started again: nothing lost, exit 0 each time.
    before = newest_sample(db)
    proc = subprocess.Popen(vram_argv("record", "--simulate", "demo", "--db", str(db), "--interval", "60s",
                                      "--duration", "365d", "--publish-every", "0.1s"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=stepped_env(35 * 60))
    try:
        deadline = time.monotonic() + HANG_GUARD
        while newest_sample(db) < before + 300 or len(neighbour.state()["held"]) < 4:
            assert proc.poll() is None and time.monotonic() < deadline, neighbour.state()
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_GUARD)
    assert proc.returncode == 0, err
    lines = err.splitlines()
    n = int(lines[-1].split("stopped: ")[1].split()[0])
    assert lines[-1] == f"vram record: stopped: {n} samples recorded" and len(lines) == 2, err
    assert newest_sample(db) == before + n
    record(db, 10, 40 * 86400)
    # Other users still read the history, from the published copy, through the neighbour's locks.
    report = run_vram_as(AS_NOBODY, "report", "--db", str(db), "--since", f"@{EPOCH}", "--json",
                         env=stepped_env(41 * 86400))
    assert report.rc == 0, report.err
    assert {row["user"] for row in report.json()["rows"]} >= {"alice", "bob"}
    state = neighbour.stop()
    # It did hold what it could: the published file (several copies of it), the directory, and a
    # read transaction on the database; the live one it could not even open.
    held = {p for p, how in state["held"] if how}
    assert str(db) in held and str(shared) in held, state
    assert str(db) in state["transactions"], state
    assert str(shared / "private") in state["refused"], state
    assert len([p for p, _ in state["held"] if p == str(db)]) >= 2, state  # copies replaced under it
    assert not any(Path(f"{db}{s}").exists() for s in ("-wal", "-shm", "-journal"))


def test_the_history_of_the_old_layout_moves_private_under_a_neighbour_s_locks(shared, neighbour_at, tmp_path):
    """/var/lib/vramkit/history.db as an older vramkit left it (the live file itself, readable by
    all): the first recorder of this one keeps every row, with the neighbour holding the old file
    locked (flock, fcntl and a read transaction) from before it starts."""
    old = tmp_path / "old"
    old.mkdir(mode=0o700)
    record(old / "history.db", 20, 0)
    db = shared / "history.db"
    shutil.copy(old / "history.db", db)
    db.chmod(0o644)
    kept = newest_sample(db)
    neighbour = neighbour_at(shared)
    neighbour.wait_holding(db)
    assert str(db) in neighbour.state()["transactions"]
    inode = db.stat().st_ino
    record(db, 5, 20 * 60)
    assert newest_sample(db) == kept + 5
    assert (shared / "private" / "history.db").is_file()
    assert db.stat().st_ino != inode  # what the neighbour holds is the old file, not the history
    assert oct(db.stat().st_mode & 0o777) == "0o644"
    report = run_vram_as(AS_NOBODY, "report", "--db", str(db), "--since", f"@{EPOCH}", "--json",
                         env=stepped_env(86400))
    assert report.rc == 0, report.err
    assert report.json()["coverage"]["recorded_seconds"] == 24 * 60


# ------------------------------------------------------------------ item 3: files another user can write

@pytest.fixture
def sticky() -> Iterator[Path]:
    """A directory like /tmp: everyone may create files in it, sticky."""
    path = Path(tempfile.mkdtemp(prefix="vramkit-sticky-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def history(tmp_path) -> Path:
    """A real history, recorded by root in a directory of root's own."""
    path = tmp_path / "made" / "history.db"
    path.parent.mkdir(mode=0o700)
    record(path, 5, 0)
    return path


def _as_nobody(path: Path, mode: int) -> None:
    os.chown(path, NOBODY, NOBODY)
    path.chmod(mode)


def test_root_s_recorder_refuses_a_file_another_user_made(sticky, history):
    """mallory (nobody) made /tmp/x.db 0666, with a real history in it: root recording there
    would let her rewrite jobs and idle times. Refused, naming the file and the rule."""
    db = sticky / "x.db"
    shutil.copy(history, db)
    _as_nobody(db, 0o666)
    before = db.read_bytes()
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--samples", "1", env=stepped_env(600))
    assert_one_line_error(result, 2, str(db), "belongs to another user")
    assert db.read_bytes() == before and db.stat().st_uid == NOBODY
    assert not (sticky / "private").exists()


@pytest.mark.parametrize("which", ["", "-wal", "-shm", "-journal"])
def test_root_s_recorder_refuses_a_file_others_may_write(tmp_path, history, which):
    """Root's own database, or a companion of it, that group or others may write."""
    if which:
        Path(f"{history}{which}").write_bytes(b"")
    target = Path(f"{history}{which}")
    target.chmod(0o666)
    result = run_vram("record", "--simulate", "demo", "--db", str(history), "--samples", "1", env=stepped_env(600))
    assert_one_line_error(result, 2, str(target), "can be written by other users")


def test_root_s_readers_refuse_a_database_another_user_can_write(sticky, history):
    theirs = sticky / "theirs.db"
    shutil.copy(history, theirs)
    _as_nobody(theirs, 0o644)
    result = run_vram("report", "--db", str(theirs), "--since", f"@{EPOCH}")
    assert_one_line_error(result, 2, str(theirs), "belongs to another user")
    writable = history.parent / "writable.db"
    shutil.copy(history, writable)
    writable.chmod(0o646)
    result = run_vram("report", "--db", str(writable), "--since", f"@{EPOCH}")
    assert_one_line_error(result, 2, str(writable), "can be written by other users")
    # The same history, safe, reads.
    assert run_vram("report", "--db", str(history), "--since", f"@{EPOCH}").rc == 0


def test_a_directory_on_the_way_that_another_user_owns(shared, sticky, history):
    """.../mallory/lab/history.db: lab is root's, but mallory owns the directory it is in and can
    swap it for one of her own at any time; in /tmp, a directory of hers is hers to change. The
    path is walked, not only its last directory, for the recorder and for root's readers."""
    hers = shared / "mallory"
    hers.mkdir()
    _as_nobody(hers, 0o755)
    in_tmp = sticky / "mallory"
    in_tmp.mkdir()
    _as_nobody(in_tmp, 0o755)
    for where, words in ((hers, f"{hers}/lab can be changed by another user (uid {NOBODY} owns {hers})"),
                         (in_tmp, f"{in_tmp} belongs to another user (uid {NOBODY})")):
        lab = where / "lab"
        lab.mkdir(mode=0o700)
        shutil.copy(history, lab / "history.db")
        for args in (("record", "--simulate", "demo", "--samples", "1"), ("report", "--since", f"@{EPOCH}")):
            result = run_vram(*args, "--db", str(lab / "history.db"), env=stepped_env(600))
            assert_one_line_error(result, 2, words)


# ------------------------------------------------------------------ the unit: a neighbour cannot keep it down

def test_the_service_restarts_after_a_failure_of_the_moment():
    """A database locked by another recorder exits 1 (restarted: Restart=on-failure), never the
    2 the unit's RestartPreventExitStatus keeps down; nothing another user does makes it exit 2."""
    from vramkit.history.store import StoreBusyError, StoreError

    assert StoreBusyError("x").exit_code == 1 and issubclass(StoreBusyError, StoreError)
    unit = (Path(__file__).resolve().parents[2] / "contrib" / "systemd" / "vram-record.service").read_text()
    assert "Restart=on-failure" in unit and "RestartPreventExitStatus=2" in unit

