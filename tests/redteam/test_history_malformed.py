"""A malformed history database and `vram record` (issue 26, item 6): values of the wrong type or
out of range that the recorder reads back (after a restart, or matching a running process) never
become internal errors, a write that fails is said once and recording goes on, and `--samples N`
ends after N attempts whatever happens to them. A real recorder process on real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, run_vram
from test_record_cli import after_open

EPOCH = 1767225600
GUARD = 60  # seconds: only so that a recorder that never ends fails the test instead of hanging it


def stepped_env(start: float = 0) -> dict[str, str]:
    return clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=f"{start:g}")


@pytest.fixture
def recorded(tmp_path) -> Path:
    db = tmp_path / "history.db"
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--samples", "5",
                      env=stepped_env())
    assert result.rc == 0, result.err
    return db


def change(db: Path, *statements: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def record(db: Path, samples: int, start: float, python_flags: tuple[str, ...] = ()):
    return run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--samples", str(samples),
                    env=stepped_env(start), timeout=GUARD, python_flags=python_flags)


def count(db: Path) -> int:
    conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM samples").fetchone()[0])
    finally:
        conn.close()


def test_held_memory_of_the_wrong_type_does_not_stop_recording(recorded):
    """The last sample was never credited (a killed recorder) and one of its memory values is text:
    crediting it on the first new sample must not fail that sample, and every one after it (the
    recorder would record nothing for the rest of its life while --samples N never ended)."""
    change(recorded,
           "UPDATE samples SET span = 0 WHERE id = (SELECT max(id) FROM samples)",
           "UPDATE proc_raw SET memory = 'lots' WHERE sample = (SELECT max(id) FROM samples)")
    result = record(recorded, 3, 5 * 60)
    assert result.rc == 0, result.err
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert result.err_lines[-1] == "vram record: stopped: 3 samples recorded", result.err
    assert count(recorded) == 8


def test_a_wrong_typed_job_matching_a_running_process(recorded):
    """bob's process life has its GPU list as a number and an old last-seen time: not trusted, so
    a running process never continues it; every sample is recorded."""
    change(recorded, "UPDATE jobs SET gpus = 7, last_seen = -1e9 WHERE user = 'bob'")
    result = record(recorded, 3, 5 * 60)
    assert result.rc == 0, result.err
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert count(recorded) == 8


def test_wrong_typed_values_read_back_when_resuming(recorded):
    """The last sample was never credited (a killed recorder): the restart reads its processes,
    their idle times and their jobs back. Text where numbers belong, a huge number, NaN."""
    change(recorded,
           "UPDATE samples SET span = 0 WHERE id = (SELECT max(id) FROM samples)",
           "UPDATE proc_raw SET memory = 'lots' WHERE sample = (SELECT max(id) FROM samples)",
           "UPDATE proc_raw SET idle = 'yes' WHERE sample = (SELECT max(id) FROM samples) AND gpu = 0",
           "UPDATE holding SET idle_since = 'since monday'",
           "UPDATE jobs SET gpus = '0,x', peak_memory = 'big' WHERE user = 'alice'",
           "UPDATE jobs SET start_ticks = 'abc' WHERE user = 'carol'",
           "UPDATE jobs SET gpus = '99999999999999999999' WHERE user = 'dave'",
           "UPDATE jobs SET last_seen = 1e400 WHERE user = 'erin'")
    result = record(recorded, 3, 5 * 60)
    assert result.rc == 0, result.err
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert result.err_lines[-1] == "vram record: stopped: 3 samples recorded", result.err
    assert count(recorded) == 8


def test_a_newest_sample_of_the_wrong_type(recorded):
    change(recorded, "UPDATE samples SET t = 'yesterday', span = 0 WHERE id = (SELECT max(id) FROM samples)")
    result = record(recorded, 2, 5 * 60)
    assert result.rc == 0 and "internal error" not in result.err, result.err
    assert count(recorded) == 7


@pytest.mark.parametrize("key,value", [("hour_sample", "'zz'"), ("hour_since", "x'00'"), ("hour_t_last", "'soon'")])
def test_hour_sums_meta_that_is_not_a_number(recorded, key, value):
    """The hour sums' bookkeeping the rollup reads: one line at start, exit 2, nothing changed."""
    change(recorded, f"INSERT INTO meta (key, value) VALUES ('{key}', {value}) "
                     "ON CONFLICT(key) DO UPDATE SET value = excluded.value")
    before = recorded.read_bytes()
    result = record(recorded, 2, 5 * 60)
    assert_one_line_error(result, 2, str(recorded), "not a readable vram history database", key)
    assert recorded.read_bytes() == before


def test_every_write_failing_still_ends_after_n_attempts(recorded):
    """A database that refuses every sample (a trigger another program made once the recorder had
    the file open: its writes all fail; one there before is refused, test_history_schema_swapped):
    said once, and --samples 4 ends after 4 attempts."""
    result = record(recorded, 4, 5 * 60, python_flags=after_open(
        "CREATE TRIGGER IF NOT EXISTS refuse BEFORE INSERT ON samples BEGIN SELECT RAISE(ABORT, 'no'); END"))
    assert result.rc == 0, result.err
    assert len([ln for ln in result.err_lines if "samples are not being recorded" in ln]) == 1, result.err
    assert result.err_lines[-1] == "vram record: stopped: 0 samples recorded, 4 not written", result.err
    assert count(recorded) == 5
