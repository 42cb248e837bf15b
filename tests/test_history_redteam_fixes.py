"""The recorder against a clock it cannot trust at start, a full disk at start, and a schema version
below 1 (red-team report on history, items 1, 2, 3 and 5): real `vram record` runs on the stepped
scenario clock (six hours in about a second), read back through `vram report`."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import clean_env, mounted_tmpfs, run_vram

from vramkit.history.store import StoreBusyError, StoreError, StoreUnavailableError, open_error

EPOCH = 1767225600  # 2026-01-01 00:00 UTC
HOUR = 3600
YEARS_2 = 2 * 366 * 86400
AHEAD = "ahead of the newest recorded sample"
BEHIND = "behind the newest recorded sample"


def record(db: Path, epoch: int, duration: str, *args: str, scenario: str = "lab-day"):
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(epoch), TZ="UTC")
    return run_vram("record", "--simulate", scenario, "--db", str(db), "--interval", "20s", "--duration", duration,
                    "--quiet", *args, env=env, timeout=120)


def report(db: Path, since: int, until: int, by: str = "gpu") -> dict:
    result = run_vram("report", "--db", str(db), "--since", f"@{since}", "--until", f"@{until}", "--by", by,
                      "--json", env=clean_env(TZ="UTC"))
    return result.json()


def gpu_hours(data: dict) -> dict[int, float]:
    return {row["gpu"]: round(row["gpu_seconds"] / HOUR, 6) for row in data["rows"]}


def credited(db: Path, gpu: int = 0) -> float:
    """Seconds the file holds for one GPU over every tier (each GPU's rows count the same time)."""
    c = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return float(c.execute("SELECT SUM(seconds) FROM gpu_time WHERE gpu = ?", (gpu,)).fetchone()[0] or 0.0)
    finally:
        c.close()


def file_bytes(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.parent.glob(f"{path.name}*")) if p.is_file()}


@pytest.fixture
def six_hours(tmp_path) -> tuple[Path, dict]:
    """lab-day's six hours from EPOCH, stopped cleanly, and its report by GPU."""
    db = tmp_path / "lab.db"
    result = record(db, EPOCH, "6h")
    assert result.rc == 0 and result.err == "", result.err
    before = report(db, EPOCH, EPOCH + 6 * HOUR)
    assert before["coverage"]["recorded_seconds"] == 6 * HOUR
    assert gpu_hours(before) == {0: 5.0, 1: 5.5}  # what the scenario gives
    return db, before


# ------------------------------------------------------------------ 1. a clock far ahead at start

def test_a_clock_far_ahead_at_start_expires_no_history(six_hours):
    db, before = six_hours
    # Three hours (rollups every minute, past FORGET_AFTER) with the clock two years ahead.
    result = record(db, EPOCH + 6 * HOUR + YEARS_2, "3h")
    assert result.rc == 0, result.err
    said = [line for line in result.err_lines if AHEAD in line]
    assert len(said) == 1 and said == result.err_lines, result.err
    assert "732d00h ahead" in said[0] and "retention counts from that sample" in said[0]
    after = report(db, EPOCH, EPOCH + 6 * HOUR)
    assert after["coverage"]["recorded_seconds"] == 6 * HOUR  # was 0s (0%): all six hours expired
    assert after["coverage"]["first_sample"] == EPOCH
    assert after["rows"] == before["rows"]
    # The new run's own lives, each once: a running process is never forgotten into a second life.
    c = sqlite3.connect(db)
    try:
        lives = c.execute("SELECT pid, start_time, count(*) FROM jobs GROUP BY pid, start_time").fetchall()
    finally:
        c.close()
    assert all(n == 1 for _pid, _start, n in lives), lives
    assert len([1 for _pid, start, _n in lives if start > EPOCH + YEARS_2]) == 3, lives


def test_a_recorder_stopped_a_while_restarts_as_before(six_hours):
    """A stop after which counting from the clock deletes nothing: nothing held, nothing said."""
    db, before = six_hours
    result = record(db, EPOCH + 8 * HOUR, "1h")
    assert result.rc == 0 and result.err == "", result.err
    assert report(db, EPOCH, EPOCH + 6 * HOUR)["rows"] == before["rows"]
    assert report(db, EPOCH + 8 * HOUR, EPOCH + 9 * HOUR)["coverage"]["recorded_seconds"] == HOUR


def test_short_retention_is_held_only_as_far_as_the_stored_end(tmp_path):
    """--keep-quarter 3h: two hours ahead would delete two of the three hours kept, so retention
    counts from the stored end: a 10-minute run then expires what 10 minutes expire (a quarter hour
    at most, the tier's bucket), not two hours."""
    db = tmp_path / "short.db"
    keep = ("--keep-raw", "1h", "--keep-minute", "2h", "--keep-quarter", "3h")
    assert record(db, EPOCH, "6h", *keep).rc == 0
    kept = report(db, EPOCH, EPOCH + 6 * HOUR)["coverage"]["recorded_seconds"]
    assert 3 * HOUR <= kept <= 3 * HOUR + 900
    result = record(db, EPOCH + 8 * HOUR, "10m", *keep)
    assert result.rc == 0 and len(result.err_lines) == 1 and "2h00m ahead" in result.err, result.err
    after = report(db, EPOCH, EPOCH + 6 * HOUR)["coverage"]["recorded_seconds"]
    assert kept - 900 <= after < kept  # was about 2h less


def test_a_clock_far_back_at_start_expires_nothing_either(six_hours):
    db, before = six_hours
    result = record(db, EPOCH - YEARS_2, "10m")
    assert result.rc == 0, result.err
    assert len(result.err_lines) == 1 and BEHIND in result.err, result.err
    after = report(db, EPOCH, EPOCH + 6 * HOUR)
    assert after["coverage"]["recorded_seconds"] == 6 * HOUR and after["rows"] == before["rows"]


# ------------------------------------------------------------------ 3. a clock set back between runs

def test_a_clock_set_back_between_runs_counts_nothing_twice(six_hours):
    db, before = six_hours
    result = record(db, EPOCH, "1h")  # the clock back six hours: the first hour again
    assert result.rc == 0, result.err
    said = [line for line in result.err_lines if BEHIND in line]
    assert len(said) == 1 and said == result.err_lines and "6h00m behind" in said[0], result.err
    after = report(db, EPOCH, EPOCH + 6 * HOUR)
    assert after["coverage"]["recorded_seconds"] == 6 * HOUR  # was 6h59m (117%)
    assert gpu_hours(after) == gpu_hours(before)  # was 6.00 and 6.00
    assert credited(db) == pytest.approx(6 * HOUR)


def test_a_clock_set_back_into_the_history_counts_from_where_it_ends(six_hours):
    db, _before = six_hours
    # Back one hour: 05:00 to 07:00, of which 05:00 to 06:00 was recorded already.
    result = record(db, EPOCH + 5 * HOUR, "2h")
    assert result.rc == 0, result.err
    assert "1h00m behind" in result.err, result.err
    assert credited(db) == pytest.approx(7 * HOUR, abs=40)  # to a sample or two at the seam, never 8h
    assert report(db, EPOCH, EPOCH + 7 * HOUR)["coverage"]["recorded_seconds"] == pytest.approx(7 * HOUR, abs=40)


@pytest.mark.slow  # two days of samples
def test_a_clock_set_back_past_the_raw_tier_counts_nothing_twice(tmp_path):
    """Two days recorded: the first day is in 1-minute rows, which the set-back run is checked against."""
    db = tmp_path / "two.db"
    assert record(db, EPOCH, "2d").rc == 0
    assert credited(db) == pytest.approx(48 * HOUR)
    result = record(db, EPOCH, "1h")
    assert result.rc == 0 and "2d00h behind" in result.err, result.err
    assert credited(db) == pytest.approx(48 * HOUR)  # was 49h
    data = report(db, EPOCH, EPOCH + 48 * HOUR)
    assert data["coverage"]["recorded_seconds"] == pytest.approx(48 * HOUR)


# ------------------------------------------------------------------ 2. a full disk at start

@pytest.fixture
def tiny_tmpfs() -> Iterator[Path]:
    with mounted_tmpfs("6m", "vramkit-full-start-") as path:
        yield path


def _fill(directory: Path) -> Path:
    """Take every free block of `directory`'s file system (unbuffered: the last write fails, not a close)."""
    fill = directory / "fill"
    fd = os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return fill


def test_a_full_disk_at_start_is_a_failure_of_the_moment(tiny_tmpfs):
    db = tiny_tmpfs / "history.db"
    assert record(db, EPOCH, "1h").rc == 0
    kept = file_bytes(db)
    fill = _fill(tiny_tmpfs)
    result = record(db, EPOCH + 2 * HOUR, "1h")
    # Exit 1: the service's unit restarts it (RestartPreventExitStatus=2 keeps down only what a
    # restart cannot fix), and the message is a failure's, not an error of the request.
    assert result.rc == 1, (result.rc, result.err)
    assert result.err_lines == [f"vram: --db: {db}: the disk is full"], result.err
    assert file_bytes(db) == kept
    new = run_vram("record", "--simulate", "demo", "--db", str(tiny_tmpfs / "new.db"), "--samples", "1",
                   env=clean_env(VRAM_SIM_CLOCK="stepped"))
    assert new.rc == 1 and "the disk is full" in new.err and len(new.err_lines) == 1, (new.rc, new.err)
    fill.unlink()  # space again: the restarted recorder continues
    assert record(db, EPOCH + 2 * HOUR, "1h").rc == 0
    assert report(db, EPOCH, EPOCH + 3 * HOUR)["coverage"]["recorded_seconds"] == 2 * HOUR


@pytest.mark.parametrize(("code", "kind"), [
    (13, StoreUnavailableError),  # SQLITE_FULL
    (10 | 3 << 8, StoreUnavailableError),  # SQLITE_IOERR_WRITE: EIO, or a file size limit
    (10 | 2 << 8, StoreError),  # SQLITE_IOERR_SHORT_READ: a file cut short is damaged
    (26, StoreError),  # SQLITE_NOTADB
    (11, StoreError),  # SQLITE_CORRUPT
])
def test_which_sqlite_errors_at_start_are_of_the_moment(code, kind):
    e = sqlite3.OperationalError("disk I/O error" if code & 0xFF == 10 else "database disk image is malformed"
                                 if code == 11 else "file is not a database" if code == 26 else "database or disk "
                                 "is full")
    e.sqlite_errorcode = code
    error = open_error(e, Path("h.db"))
    assert type(error) is kind and error.exit_code == (1 if kind is StoreUnavailableError else 2)
    locked = sqlite3.OperationalError("database is locked")
    assert type(open_error(locked, Path("h.db"))) is StoreBusyError


# ------------------------------------------------------------------ 5. a schema version below 1

@pytest.mark.parametrize(("version", "words"), [
    (-5, "corrupt: schema version -5, which vram never writes"),
    (0, "corrupt: index 'jobs_last_seen' is not one vram makes"),
])
def test_reader_and_recorder_agree_on_a_schema_below_1(tmp_path, version, words):
    db = tmp_path / "n.db"
    assert record(db, EPOCH, "1h").rc == 0
    c = sqlite3.connect(db)
    c.execute(f"PRAGMA user_version = {version}")
    c.commit()
    c.close()
    kept = file_bytes(db)
    line = f"vram: error: --db: {db} is not a readable vram history database ({words})"
    read = run_vram("report", "--db", str(db))
    written = run_vram("record", "--simulate", "demo", "--db", str(db), "--samples", "1", "--quiet",
                       env=clean_env(VRAM_SIM_CLOCK="stepped"))
    assert (read.rc, read.err_lines) == (2, [line])  # was "'vram record' upgrades it to 8"
    assert (written.rc, written.err_lines) == (2, [line])
    assert file_bytes(db) == kept
