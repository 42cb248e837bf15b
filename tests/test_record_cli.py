"""`vram record` as a real process on real files: killed (SIGKILL) at random moments and restarted,
stopped by SIGTERM/SIGINT, read while it writes (also by another user), a full disk, bad
databases, and a driver that fails and comes back (issue 11, "Must show")."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SCENARIO_DIR, clean_env, mounted_tmpfs, run_vram, vram_argv

from vramkit.history import query
from vramkit.history.store import Store, StoreError

EPOCH = 1767225600  # 2026-01-01 00:00 UTC: the stepped clock's t=0
INTERVAL = 60
AS_VRAMTEST = ("setpriv", "--reuid=1001", "--regid=1001", "--clear-groups")
HANG_GUARD = 120  # seconds: only so that a broken recorder fails the test instead of hanging it


def stepped_env(start: float = 0) -> dict[str, str]:
    """A stepped scenario clock starting at EPOCH + start: vram records as fast as it can."""
    return clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=f"{start:g}")


_STARTED: list[subprocess.Popen[str]] = []  # killed at each test's end, whatever happened


@pytest.fixture(autouse=True)
def _no_recorder_left():
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=HANG_GUARD)


def start_record(db: Path, *args: str, env: dict[str, str], stderr: Path | None = None,
                 preexec_fn=None, prefix: tuple[str, ...] = (),
                 python_flags: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    err = open(stderr, "w") if stderr is not None else subprocess.PIPE  # noqa: SIM115 - the child owns it
    try:
        argv = vram_argv("record", "--simulate", "demo", "--db", str(db), *args, python_flags=python_flags)
        return _started(subprocess.Popen([*prefix, *argv],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True,
                                env=env, preexec_fn=preexec_fn))
    finally:
        if stderr is not None:
            err.close()


def after_open(sql: str) -> tuple[str, ...]:
    """Python flags (run_vram's python_flags) that run `vram` with `sql` run on the recorder's
    database once it has opened and checked it, as another program of the owner's can while it
    records: a trigger that makes its writes fail (one already there when it opens is refused,
    tests/redteam/test_history_schema_swapped.py)."""
    return ("-c", "import runpy, sys\nfrom vramkit.history.store import Store\nprepare = Store._prepare\n"
                  "def _prepare(self):\n    prepare(self)\n    if self.writable:\n"
                  "        self.conn.executescript(SQL)\n"
                  f"SQL = {sql!r}\nStore._prepare = _prepare\nsys.argv = ['vram', *sys.argv[3:]]\n"
                  "runpy.run_module('vramkit', run_name='__main__')")


def _started(proc: subprocess.Popen[str]) -> subprocess.Popen[str]:
    _STARTED.append(proc)
    return proc


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.communicate(timeout=HANG_GUARD)


def sample_count(db: Path) -> int:
    """Samples committed so far (the newest sample's id: raw samples older than a day move into
    1-minute rows), read as any reader would (read-only)."""
    try:
        conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT coalesce(max(id), 0) FROM samples").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.OperationalError:  # not created yet
        return 0


def wait_until(predicate, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        assert proc is None or proc.poll() is None, f"vram record exited {proc.returncode}"
        assert time.monotonic() < deadline, "gave up waiting (hang guard)"
        time.sleep(0.01)


def facts(db: Path) -> dict[str, float]:
    """What a killed or stopped recorder left, from a reader's side."""
    store = Store.open(db)
    try:
        c = store.conn
        assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        first, last = c.execute("SELECT min(t), max(t) FROM (SELECT t FROM samples UNION ALL "
                                "SELECT t FROM gpu_rollup)").fetchone()
        newest = c.execute("SELECT max(t) FROM samples").fetchone()[0]
        return {
            "first": first, "newest": newest,
            # Seconds recorded on GPU 0, over every tier.
            "covered": c.execute("SELECT SUM(seconds) FROM gpu_time WHERE gpu = 0").fetchone()[0] or 0.0,
            "uncredited": c.execute("SELECT count(*) FROM samples WHERE span = 0").fetchone()[0],
            "jobs": c.execute("SELECT count(*) FROM jobs").fetchone()[0],
            "lives": c.execute("SELECT count(*) FROM (SELECT DISTINCT pid, start_ticks, user FROM jobs)").fetchone()[0],
            "job_seconds": c.execute("SELECT SUM(gpu_seconds) FROM job_totals").fetchone()[0] or 0.0,
            "proc_seconds": c.execute("SELECT SUM(seconds) FROM proc_time").fetchone()[0] or 0.0,
        }
    finally:
        store.close()


def file_state(path: Path) -> dict[str, str]:
    """The bytes of a database and its companions, to show a refused open changed nothing."""
    out = {}
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        if name.exists() and not name.is_symlink() and name.is_file():
            out[name.name] = hashlib.sha256(name.read_bytes()).hexdigest()
    return out


# ------------------------------------------------------------------ 1. SIGKILL mid-write, restart

@pytest.mark.any_user  # a recorder on its own file in tmp_path: the same whoever runs it
def test_sigkill_at_random_moments_loses_at_most_the_last_interval_and_restart_continues(tmp_path):
    db = tmp_path / "history.db"
    rng = random.Random(11)
    start = 0.0
    for round_ in range(4):
        # As fast as it can write: a minute of scenario time per sample, days of it per second,
        # rollups every 5 samples and raw rows moving to 1-minute rows after the first day.
        proc = start_record(db, "--interval", "60s", "--duration", "365d", "--quiet", env=stepped_env(start))
        before = sample_count(db)
        goal = before + rng.randrange(1, 1500)
        wait_until(lambda goal=goal: sample_count(db) >= goal, proc)
        time.sleep(rng.uniform(0, 0.05))  # land anywhere in a write or a rollup
        stop(proc, signal.SIGKILL)
        got = facts(db)
        # Nothing lost but the newest sample's interval: every second from the first sample to
        # the newest one is recorded, and only the newest sample is uncredited.
        assert got["first"] == EPOCH
        assert got["covered"] == got["newest"] - EPOCH, (round_, got)
        assert got["uncredited"] == 1
        # The jobs table moved in the same transactions as the samples.
        assert got["job_seconds"] == pytest.approx(got["proc_seconds"], rel=1e-12)
        # One row per process life: continued across the restarts, never duplicated.
        assert got["jobs"] == got["lives"]
        if round_ == 0:
            lives = got["jobs"]
        assert got["jobs"] == lives
        start = got["newest"] - EPOCH + INTERVAL  # the clock goes on where the killed one stopped

    # A clean restart credits the killed recorder's last sample (the wall clock spans the two runs,
    # one interval) and carries on: still every second from the first sample to the newest.
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--samples", "3",
                      env=stepped_env(start))
    assert result.rc == 0, result.err
    got = facts(db)
    assert got["covered"] == got["newest"] - EPOCH
    assert got["uncredited"] == 1  # the newest: no time passed on the stepped clock after it
    assert got["jobs"] == lives
    assert got["job_seconds"] == pytest.approx(got["proc_seconds"], rel=1e-12)


@pytest.mark.any_user  # a recorder on its own file in tmp_path: the same whoever runs it
def test_sigkill_on_the_real_clock(tmp_path):
    db = tmp_path / "history.db"
    for _ in range(3):
        proc = start_record(db, "--interval", "0.1s", "--quiet", env=clean_env(VRAM_SIM_TIME=None))
        goal = sample_count(db) + 5
        wait_until(lambda goal=goal: sample_count(db) >= goal, proc)
        stop(proc, signal.SIGKILL)
        got = facts(db)
        assert got["job_seconds"] == pytest.approx(got["proc_seconds"], rel=1e-9)
        assert got["jobs"] == got["lives"]
    store = Store.open(db)
    try:
        # Every sample but the newest is credited, each with a real interval (restarts within the
        # gap credit the killed run's last sample from the wall clock).
        spans = [s for (s,) in store.conn.execute("SELECT span FROM samples ORDER BY id")]
    finally:
        store.close()
    assert spans[-1] == 0 and all(0 < s < 10 for s in spans[:-1]), spans


# ------------------------------------------------------------------ 2. SIGTERM / SIGINT flush

@pytest.mark.any_user  # a recorder on its own file in tmp_path: the same whoever runs it
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_credits_the_last_sample_and_exits_0(tmp_path, sig):
    db = tmp_path / "history.db"
    proc = start_record(db, "--interval", "0.2s", env=clean_env(VRAM_SIM_TIME=None))
    wait_until(lambda: sample_count(db) >= 3, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=HANG_GUARD)
    assert proc.returncode == 0, err
    n = sample_count(db)
    assert err.splitlines()[-1] == f"vram record: stopped: {n} samples recorded"
    got = facts(db)
    assert got["uncredited"] == 0  # the newest sample stands for the time until the signal
    assert got["job_seconds"] == pytest.approx(got["proc_seconds"], rel=1e-9)
    # Stopped: the file stands alone (no -wal/-shm), so a reader who cannot write the directory reads it.
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()


# ------------------------------------------------------------------ 3. readers during writes

@pytest.mark.any_user  # a recorder on its own file in tmp_path: the same whoever runs it
def test_readers_never_fail_nor_block_the_recorder(tmp_path):
    db = tmp_path / "history.db"
    proc = start_record(db, "--interval", "60s", "--duration", "365d", "--quiet", env=stepped_env())
    try:
        wait_until(lambda: sample_count(db) >= 10, proc)
        reads = 0
        while reads < 150:  # readers as `vram report` and `vram top` make them, in a loop
            store = Store.open(db)
            try:
                rows = query.usage(store, 0, 2e9, "user")
                assert {u.key for u in rows} >= {"bob", "alice"}
                query.usage(store, 0, 2e9, "gpu")
                query.idle_holders(store, 0, 2e9)
                query.coverage(store, 0, 2e9)
            finally:
                store.close()
            reads += 1
        for by in ("user", "gpu", "life", "day"):  # and vram report itself, a process of its own
            report = run_vram("report", "--db", str(db), "--since", f"@{EPOCH}", "--until", f"@{EPOCH + 400 * 86400}",
                              "--by", by, "--json", env=stepped_env())
            assert report.rc == 0, report.err
            assert report.json()["rows"]
        # A reader that holds one read transaction open for long: the recorder goes on writing.
        reader = Store.open(db)
        try:
            reader.conn.execute("BEGIN")
            held = reader.conn.execute("SELECT count(*) FROM samples").fetchone()[0]
            wait_until(lambda: sample_count(db) >= held + 500, proc)
            # ... and the reader's view does not move under it.
            assert reader.conn.execute("SELECT count(*) FROM samples").fetchone()[0] == held
            reader.conn.execute("COMMIT")
        finally:
            reader.close()
    finally:
        stop(proc, signal.SIGTERM)
    assert proc.returncode == 0


@pytest.fixture
def readable_dir() -> Iterator[Path]:
    """A root-owned directory others may read but not write (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="vramkit-history-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


READ_AS_OTHER = """
import json, sys
from vramkit.history import query
from vramkit.history.store import Store
store = Store.open(sys.argv[1])
rows = query.usage(store, 0, 2e9, "user")
print(json.dumps({u.key: u.gpu_seconds for u in rows}))
"""


def read_as_vramtest(db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AS_VRAMTEST, vram_argv()[0], "-c", READ_AS_OTHER, str(db)], capture_output=True,
                          text=True, env=clean_env(), timeout=HANG_GUARD, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to record as root and read as another user")
def test_another_user_reads_roots_history(readable_dir):
    db = readable_dir / "history.db"
    # While recording: others read the copy published at the name (the live file is private/,
    # which only root can enter) ...
    proc = start_record(db, "--interval", "60s", "--duration", "365d", "--quiet", "--publish-every", "0.1s",
                        env=stepped_env())
    try:
        wait_until(lambda: sample_count(db) >= 20, proc)
        assert oct(db.stat().st_mode & 0o777) == "0o644"
        assert oct((readable_dir / "private").stat().st_mode & 0o777) == "0o700"
        live = read_as_vramtest(db)
        assert live.returncode == 0, live.stderr
        assert json.loads(live.stdout)["bob"] > 0
    finally:
        stop(proc, signal.SIGKILL)
    # ... after a SIGKILL (the -wal and -shm files are left behind) ...
    killed = read_as_vramtest(db)
    assert killed.returncode == 0, killed.stderr
    # ... and after a clean stop (no -wal or -shm: the reader could not create them).
    done = run_vram("record", "--simulate", "demo", "--db", str(db), "--samples", "2", env=stepped_env(2 * 86400))
    assert done.rc == 0, done.err
    stopped = read_as_vramtest(db)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["bob"] >= json.loads(killed.stdout)["bob"] > 0


# ------------------------------------------------------------------ 4. disk full

FULL = re.compile("disk is full|cannot write")  # ENOSPC; EFBIG reads as an I/O error in SQLite


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _fill_and_free(db: Path, errors: Path, proc: subprocess.Popen[str], make_room) -> None:
    """The recorder fills the space, says so once, keeps running, and records again when room
    comes back; what it wrote before stays intact."""
    try:
        wait_until(lambda: any(FULL.search(line) for line in _lines(errors)), proc)
        n_full = sample_count(db)
        before = facts(db)
        full_at = before["newest"]
        totals = {u.key: (u.gpu_seconds, u.memory_byte_seconds) for u in _usage(db, full_at)}
        # It keeps going (samples are taken and dropped) without repeating itself.
        time.sleep(0.5)
        assert proc.poll() is None
        make_room()
        wait_until(lambda: any("recording again" in line for line in _lines(errors)), proc)
        wait_until(lambda: sample_count(db) >= n_full + 20, proc)
    finally:
        stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, errors.read_text()
    lines = _lines(errors)
    # Said once: the samples not written; and, where the disk filled during a rollup, that too, once.
    full = [ln for ln in lines if FULL.search(ln)]
    assert len([ln for ln in full if "samples are not being recorded" in ln]) == 1, lines
    assert len(full) - 1 <= len([ln for ln in full if "rolled up" in ln or "hour sums" in ln]) <= 1, lines
    assert len([ln for ln in lines if "recording again" in ln]) == 1, lines
    assert all(ln.startswith("vram record: ") for ln in lines), lines
    after = facts(db)
    # What was written before the disk filled is unchanged; the time while full is not counted.
    assert {u.key: (u.gpu_seconds, u.memory_byte_seconds) for u in _usage(db, full_at)} == totals
    assert after["job_seconds"] == pytest.approx(after["proc_seconds"], rel=1e-12)
    assert after["covered"] < after["newest"] - EPOCH


def _usage(db: Path, until: float) -> list[query.Usage]:
    store = Store.open(db)
    try:
        return query.usage(store, 0, until, "user")
    finally:
        store.close()


def test_disk_full_through_a_file_size_limit(tmp_path):
    db, errors = tmp_path / "history.db", tmp_path / "stderr"
    limit = 400 * 1024

    def limited() -> None:  # in the child: files may not grow past `limit`, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    proc = start_record(db, "--interval", "60s", "--duration", "365d", env=stepped_env(), stderr=errors,
                        preexec_fn=limited)

    def make_room() -> None:
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    _fill_and_free(db, errors, proc, make_room)


@pytest.fixture
def small_tmpfs() -> Iterator[Path]:
    with mounted_tmpfs("512k", "vramkit-full-") as path:
        yield path


def test_disk_full_on_a_small_tmpfs(small_tmpfs, tmp_path):
    db, errors = small_tmpfs / "history.db", tmp_path / "stderr"
    proc = start_record(db, "--interval", "60s", "--duration", "365d", env=stepped_env(), stderr=errors)

    def make_room() -> None:
        subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)

    _fill_and_free(db, errors, proc, make_room)


# ------------------------------------------------------------------ 5. bad databases

@pytest.fixture
def recorded(tmp_path) -> Path:
    """A real history of two hours, stopped cleanly."""
    db = tmp_path / "real.db"
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--duration", "2h",
                      env=stepped_env())
    assert result.rc == 0, result.err
    return db


def _refused(db: Path, words: str, readable: bool = False) -> None:
    """vram record and (unless `readable`) a reader both refuse `db` with one line naming the
    problem, exit 2, and leave every byte as it was."""
    before = file_state(db) if db.exists() else {}
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--samples", "1", env=stepped_env(10**7))
    assert result.rc == 2, (result.rc, result.err)
    assert len(result.err_lines) == 1 and "Traceback" not in result.err, result.err
    assert re.search(words, result.err), result.err
    if not readable and (db.is_symlink() or db.is_file()):
        with pytest.raises(StoreError):
            Store.open(db).close()
    assert (file_state(db) if db.exists() else {}) == before


def test_random_bytes(tmp_path):
    db = tmp_path / "history.db"
    db.write_bytes(random.Random(1).randbytes(100_000))
    _refused(db, "not a readable vram history database")


def test_a_truncated_database(recorded):
    data = recorded.read_bytes()
    recorded.write_bytes(data[: len(data) // 2])
    _refused(recorded, "not a readable vram history database")


def test_a_database_with_a_damaged_page(recorded):
    data = bytearray(recorded.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page * 3: page * 3 + 200] = random.Random(2).randbytes(200)  # the fourth page's header
    recorded.write_bytes(bytes(data))
    _refused(recorded, "not a readable vram history database", readable=True)
    store = Store.open(recorded)  # a reader opens it (no scan: reports stay fast); the damage is real
    try:
        try:
            damaged = store.conn.execute("PRAGMA integrity_check").fetchall() != [("ok",)]
        except sqlite3.DatabaseError:
            damaged = True
        assert damaged
    finally:
        store.close()


def test_another_programs_sqlite_file(tmp_path):
    db = tmp_path / "history.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    _refused(db, "not a vram history")


def test_a_newer_schema(recorded):
    conn = sqlite3.connect(recorded)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    _refused(recorded, "newer vramkit")


def test_a_symlink_is_never_followed(recorded, tmp_path):
    link = tmp_path / "link.db"
    link.symlink_to(recorded)
    target = file_state(recorded)
    _refused(link, "symbolic link")
    assert file_state(recorded) == target


def test_a_directory_another_user_may_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    _refused(shared / "history.db", "another user")
    assert not (shared / "history.db").exists()
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 1001, 1001)
        _refused(theirs / "history.db", "another user")


def test_a_companion_file_planted_by_another_user(recorded):
    if os.geteuid() != 0:
        pytest.skip("needs root to make a file another user owns")
    wal = Path(f"{recorded}-wal")
    wal.write_bytes(b"")
    os.chown(wal, 1001, 1001)
    _refused(recorded, "another user")


def test_a_database_locked_by_another_recorder(tmp_path):
    db = tmp_path / "history.db"
    first = start_record(db, "--interval", "1s", "--quiet", env=clean_env(VRAM_SIM_TIME=None))
    try:
        wait_until(lambda: sample_count(db) >= 1, first)
        n = sample_count(db)
        result = run_vram("record", "--simulate", "demo", "--db", str(db), "--samples", "1")
        # A failure of the moment, not bad input: exit 1, which the service's unit restarts.
        assert result.rc == 1 and len(result.err_lines) == 1, result.err
        assert "locked" in result.err and "another 'vram record'" in result.err
        wait_until(lambda: sample_count(db) > n, first)  # the first one goes on
    finally:
        stop(first, signal.SIGTERM)
    assert first.returncode == 0


@pytest.fixture
def read_only_view(recorded) -> Iterator[Path]:
    """`recorded`'s directory seen through a read-only bind mount (a real EROFS), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    view = Path(tempfile.mkdtemp(prefix="vramkit-ro-"))
    if subprocess.run(["mount", "--bind", str(recorded.parent), str(view)], capture_output=True).returncode != 0:
        view.rmdir()
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield view / recorded.name
    finally:
        if subprocess.run(["umount", str(view)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(view)], check=False)
        view.rmdir()


def test_a_read_only_file_system(read_only_view):
    _refused(read_only_view, "read-only|Read-only", readable=True)
    store = Store.open(read_only_view)  # a reader still reads it
    try:
        assert query.usage(store, 0, 2e9, "user")
    finally:
        store.close()


@pytest.mark.parametrize("what", ["file", "directory"])
def test_read_only_for_its_user(recorded, shared_dir, what):
    """A read-only file, or a writable file in a read-only directory (SQLite must create the
    -wal file beside it), for a user who is not root (root writes anything): vram record as vramtest."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run as another user")
    db = shared_dir / "history.db"
    shutil.copy(recorded, db)
    os.chown(db, 1001, 1001)
    db.chmod(0o400 if what == "file" else 0o600)
    shared_dir.chmod(0o755 if what == "file" else 0o555)
    os.chown(shared_dir, 1001, 1001)
    before = file_state(db)
    result = subprocess.run([*AS_VRAMTEST, *vram_argv("record", "--simulate", "demo", "--db", str(db),
                                                      "--samples", "1")],
                            capture_output=True, text=True, env=stepped_env(10**7), timeout=HANG_GUARD)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert re.search("Permission denied|read-only|cannot open", result.stderr), result.stderr
    assert "Traceback" not in result.stderr
    assert file_state(db) == before
    shared_dir.chmod(0o755)  # for the clean-up


# ------------------------------------------------------------------ 6. faults while recording

def test_a_scenario_with_faults_is_recorded(tmp_path):
    """The faulty scenario (a lost GPU, unsupported fields, pids /proc cannot see) records."""
    db = tmp_path / "history.db"
    result = run_vram("record", "--simulate", str(SCENARIO_DIR / "faulty.json"), "--db", str(db),
                      "--interval", "60s", "--duration", "1h", env=stepped_env())
    assert result.rc == 0, result.err
    store = Store.open(db)
    try:
        lost = store.conn.execute("SELECT gpu, count(*) FROM gpu_raw WHERE lost GROUP BY gpu").fetchall()
        assert lost == [(1, 61)]
        assert store.conn.execute("SELECT count(*) FROM samples WHERE span = 0").fetchone()[0] == 1
    finally:
        store.close()
    assert len([ln for ln in result.err_lines if "GPU 1" in ln]) == 1, result.err


# ------------------------------------------------------------------ 7. the size bound, from the command line

@pytest.mark.any_user  # a recorder on its own file in tmp_path: the same whoever runs it
def test_max_size_keeps_the_file_bounded_oldest_first(tmp_path):
    db = tmp_path / "history.db"
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "30m", "--duration", "40d",
                      "--keep-raw", "1h", "--keep-minute", "1h", "--max-size", "1MiB", env=stepped_env())
    assert result.rc == 0, result.err
    assert db.stat().st_size <= 1024**2
    store = Store.open(db)
    try:
        first, last = store.conn.execute("SELECT min(t), max(t) FROM gpu_time").fetchone()
        newest = store.conn.execute("SELECT max(t) FROM samples").fetchone()[0]
    finally:
        store.close()
    assert newest == EPOCH + 40 * 86400  # the newest is kept ...
    assert first > EPOCH + 86400  # ... the oldest days went
    assert last == newest


def test_a_real_process_is_one_life_across_kills(tmp_path, children, write_scenario):
    """Real processes have start ticks: a killed and restarted recorder continues their lives by
    (pid, start ticks)."""
    worker = children.start(["sleep", "600"])
    scenario = write_scenario({"gpus": [{"memory_total": "24GiB", "utilization": 50}],
                               "processes": [{"pid": worker.pid, "source": "real", "gpus": {"0": "6GiB"}}]})
    db = tmp_path / "history.db"
    env = clean_env(VRAM_SIM_TIME=None)
    for _ in range(3):
        proc = _started(subprocess.Popen(
            vram_argv("record", "--simulate", str(scenario), "--db", str(db), "--interval", "0.1s", "--quiet"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        goal = sample_count(db) + 5
        wait_until(lambda goal=goal: sample_count(db) >= goal, proc)
        stop(proc, signal.SIGKILL)
    store = Store.open(db)
    try:
        lives = store.conn.execute("SELECT pid, start_ticks, t.gpu_seconds FROM jobs JOIN job_totals t "
                                       "ON t.id = jobs.id").fetchall()
        held = store.conn.execute("SELECT SUM(seconds) FROM proc_time").fetchone()[0]
    finally:
        store.close()
    assert len(lives) == 1 and lives[0][0] == worker.pid and lives[0][1] is not None, lives
    assert lives[0][2] == pytest.approx(held, rel=1e-9)


# ------------------------------------------------------------------ 8. rollups that fail, a change of zone

def _held_and_rows(db: Path) -> tuple[dict[tuple[int, int], tuple[float, float]], dict[tuple[int, int], tuple]]:
    """Per life and GPU, a report's seconds and byte-seconds (query.held: the hour and day sums
    where it may) and the same summed over every row of every tier."""
    store = Store.open(db)
    try:
        held = {(h.job, h.gpu): (h.seconds, h.memory_byte_seconds) for h in query.held(store, 0, 2 * EPOCH)}
        rows = {(job, gpu): (s, mbs) for job, gpu, s, mbs in store.conn.execute(
            "SELECT job, gpu, SUM(seconds), SUM(memory * seconds) FROM proc_time GROUP BY job, gpu")}
    finally:
        store.close()
    return held, rows


def test_a_change_of_zone_keeps_the_rollups_going(tmp_path):
    """Berlin's 29 March 2026 is 23 hours from 28 March 23:00 UTC, Lagos's 24 from the same
    instant: a recorder restarted in Lagos failed every rollup ("UNIQUE constraint failed:
    local_days.t: samples are not being recorded"), kept raw samples past retention and grew."""
    db = tmp_path / "history.db"
    runs = (("Europe/Berlin", 1774742400, 271), ("Africa/Lagos", 1774742400 + 271 * 300, 300))
    for zone, epoch, samples in runs:
        result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "5m", "--samples",
                          str(samples), "--quiet", env=clean_env(TZ=zone, VRAM_SIM_CLOCK="stepped", VRAM_SIM_TIME="0",
                                                      VRAM_SIM_EPOCH=str(epoch)))
        assert result.rc == 0 and result.err == "", result.err
    with sqlite3.connect(db) as c:
        newest, oldest, ids = c.execute("SELECT max(t), min(t), max(id) FROM samples").fetchone()
        summed = int(c.execute("SELECT value FROM meta WHERE key = 'hour_sample'").fetchone()[0])
        minutes = c.execute("SELECT count(*) FROM proc_rollup WHERE tier = 60").fetchone()[0]
        days = c.execute("SELECT t, hi FROM local_days ORDER BY t").fetchall()
    c.close()
    assert oldest >= newest - 86400 - 300  # the raw tier holds its day (--keep-raw 24h), no more
    assert summed >= ids - 100 and minutes  # rolled up to the last pass (every 300 s of recording)
    assert days and all(hi <= t for (_t, hi), (t, _hi) in zip(days, days[1:]))  # none overlaps another
    held, rows = _held_and_rows(db)
    assert set(held) == set(rows)
    for key, values in rows.items():
        assert held[key] == pytest.approx(values, rel=1e-9), key


def test_a_rollup_that_keeps_failing_says_so_and_still_keeps_retention(tmp_path):
    """Hour sums that cannot be written (here a trigger made once the recorder has the file open
    refuses them; before, a change of zone did) leave the raw rows past twice --keep-raw rolled up without them: the
    file stays bounded, samples go on, the
    recorder says once what fails (not that samples are not recorded), and reports still give
    every row's totals (the hours rolled up without sums are read row by row)."""
    db, errors = tmp_path / "history.db", tmp_path / "stderr"
    first = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--duration", "3h",
                     env=stepped_env())
    assert first.rc == 0, first.err
    proc = start_record(db, "--interval", "60s", "--duration", "9h", "--keep-raw", "1h", "--quiet",
                        env=stepped_env(3 * 3600),
                        stderr=errors, python_flags=after_open(
                            "CREATE TRIGGER IF NOT EXISTS refuse BEFORE INSERT ON proc_hour BEGIN "
                            "SELECT RAISE(ABORT, 'refused by a trigger'); END"))
    proc.communicate(timeout=HANG_GUARD)
    assert proc.returncode == 0, errors.read_text()
    lines = _lines(errors)
    assert len(lines) == 1 and "refused by a trigger" in lines[0], lines
    assert "the hour sums could not be updated; samples are still recorded, raw samples are kept for twice " \
           "--keep-raw" in lines[0]
    with sqlite3.connect(db) as c:
        newest, oldest = c.execute("SELECT max(t), min(t) FROM samples").fetchone()
        c.execute("DROP TRIGGER refuse")  # not vram's: a reader refuses the file while it is there
    c.close()
    assert newest == EPOCH + 12 * 3600  # every sample written (no line said otherwise)
    assert oldest >= newest - 2 * 3600 - 300 - 60  # raw rows past twice --keep-raw were rolled up (every 300 s)
    held, rows = _held_and_rows(db)
    assert set(held) == set(rows)
    for key, values in rows.items():
        assert held[key] == pytest.approx(values, rel=1e-9), key
