"""Red team: a history file whose schema is not vram's own. The file can be another user's (`--db`
on a shared server), or a copy of one the recorder appends to: any object in sqlite_schema can be
swapped for one of the same name (a view where vram made a table), changed (an extra column) or
added (a trigger the recorder would run, often as root; an index on an expression; a table; a
view). What must hold: readers (`vram life`, `vram report`) and the recorder (`vram record`) refuse
such a file at open with one line naming the file and the object (exit 2), before they read a row
or write one: no reader that never answers, no totals of the neighbour's making, no trigger run.
Real `vram` processes on real files, recorded on the stepped scenario clock."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, run_sql, run_vram
from test_history_job_writes import ONE_GPU
from test_history_store import EPOCH
from test_record_cli import sample_count, stepped_env

from vramkit.history import query, store
from vramkit.history.store import SCHEMA_VERSION, Store, StoreError

# Only so that a reader that never answers fails the test instead of hanging it (the redteam
# tests' guard): a refusal comes long before.
HANG_GUARD = 30
SAMPLES = 9  # 10 s apart: the totals in `jobs` written at 0 and 60 s, 20 s of raw rows after the mark

LIFE = ("life", "102")
REPORT = ("report", "--since", f"@{EPOCH:.0f}", "--until", f"@{EPOCH + 3600:.0f}", "--by", "life")
RECORD = ("record", "--interval", "10s", "--samples", "2", "--quiet")


@pytest.fixture
def recorded(tmp_path) -> Path:
    """A file a real `vram record` wrote: 90 s of ONE_GPU (ben, pid 102, holds 4 GiB idle)."""
    db = tmp_path / "h.db"
    (tmp_path / "scenario.json").write_text(json.dumps(ONE_GPU))
    done = run_vram(*RECORD[:3], "--samples", str(SAMPLES), "--quiet", "--simulate", str(tmp_path / "scenario.json"),
                    "--db", str(db), env=stepped_env(0), timeout=HANG_GUARD)
    assert done.rc == 0, done.err
    assert _life(db)["gpu_seconds"] == 80
    return db


def _life(db: Path) -> dict:
    done = run_vram(*LIFE, "--db", str(db), "--json", env=clean_env(), timeout=HANG_GUARD)
    assert done.rc == 0, done.err
    one, = done.json()["lives"]
    return one


def _record(db: Path) -> object:
    return run_vram(*RECORD, "--simulate", str(db.parent / "scenario.json"), "--db", str(db),
                    env=stepped_env(10 * SAMPLES), timeout=HANG_GUARD)


def _refused(done, db: Path, name: str) -> None:
    assert_one_line_error(done, 2, str(db), repr(name))


# Each a neighbour's edit, and the object the refusal names.
SWAPS = {
    # samples as a view of the same columns that never ends: a reader that never answers
    "samples_endless_view": ("DROP TABLE samples; CREATE VIEW samples (id, t, span) AS WITH RECURSIVE n(i) AS "
                             "(SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i, 0.0 + i, 10.0 FROM n", "samples"),
    # samples as a view that counts every row twice (its rows kept in a table of another name;
    # the legacy rename leaves vram's views reading `samples`)
    "samples_doubled": ("PRAGMA legacy_alter_table = ON; ALTER TABLE samples RENAME TO kept; "
                        "CREATE VIEW samples AS SELECT * FROM kept UNION ALL SELECT * FROM kept", "kept"),
    "extra_column": ("ALTER TABLE jobs ADD COLUMN note TEXT", "jobs"),
    "expression_index": ("CREATE INDEX doubled ON proc_raw (memory * 2)", "doubled"),
    "extra_table": ("CREATE TABLE notes (x)", "notes"),
    "view_of_no_function": ("CREATE VIEW spy AS SELECT no_such_function(1) AS x", "spy"),
    "trigger": ("CREATE TRIGGER spy AFTER INSERT ON samples BEGIN "
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('spy', NEW.id); END", "spy"),
}


@pytest.mark.parametrize("swap", sorted(SWAPS))
@pytest.mark.parametrize("args", [LIFE, REPORT], ids=["life", "report"])
def test_readers_refuse_a_schema_that_is_not_vrams(recorded, swap, args):
    """`vram life` and `vram report --by life` on a file with one object swapped, changed or added:
    one line naming the file and the object, exit 2, at once. On 35c75d0 both readers never
    answered the endless view (killed at HANG_GUARD), the report read the doubled view's totals
    (100 s for each life's 80), and every edit was read as if vram had made it (exit 0)."""
    sql, name = SWAPS[swap]
    run_sql(recorded, sql)
    for json_flag in ((), ("--json",)):
        _refused(run_vram(*args, *json_flag, "--db", str(recorded), env=clean_env(), timeout=HANG_GUARD),
                 recorded, name)


@pytest.mark.parametrize("swap", sorted(SWAPS))
def test_the_recorder_refuses_a_schema_that_is_not_vrams_and_writes_nothing(recorded, swap):
    """`vram record` appending to such a file: one line naming the object, exit 2, and not a row
    written (no sample added, no trigger run). On 35c75d0 it appended two samples through each
    added object and the extra column, the trigger ran in it (meta 'spy' = 11, the newest
    sample), the endless view hung it (killed at HANG_GUARD), and it took the doubled view for
    its table, failed each write and exited 0."""
    sql, name = SWAPS[swap]
    run_sql(recorded, sql)
    _refused(_record(recorded), recorded, name)
    c = sqlite3.connect(f"{recorded.absolute().as_uri()}?mode=ro", uri=True)
    try:
        assert c.execute("SELECT count(*) FROM meta WHERE key = 'spy'").fetchone()[0] == 0
    finally:
        c.close()
    if swap not in ("samples_endless_view", "samples_doubled"):
        assert sample_count(recorded) == SAMPLES


def test_the_recorder_refuses_a_schema_7_file_with_a_trigger_before_upgrading_it(recorded):
    """A schema 7 file (as a 035a53a recorder left it) with a trigger on samples: the recorder
    that would upgrade it to 8 refuses it first, and leaves it at 7 with the trigger never run.
    On 35c75d0 it upgraded the file and the trigger ran with each new sample."""
    run_sql(recorded, "DROP VIEW job_totals; DELETE FROM meta WHERE key = 'jobs_through'; PRAGMA user_version = 7; "
                     + SWAPS["trigger"][0])
    _refused(_record(recorded), recorded, "spy")
    c = sqlite3.connect(f"{recorded.absolute().as_uri()}?mode=ro", uri=True)
    try:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 7
        assert c.execute("SELECT count(*) FROM meta WHERE key = 'spy'").fetchone()[0] == 0
    finally:
        c.close()
    assert sample_count(recorded) == SAMPLES


def test_what_sqlite_makes_itself_is_read_and_the_refusal_is_translated(recorded):
    """A table of its own (refused, said in the reader's language: zh_CN here) gone again, the file
    ANALYZEd (SQLite's own sqlite_stat1): read as before, by readers and the recorder. On 35c75d0
    the extra table was read as vram's (exit 0)."""
    run_sql(recorded, SWAPS["extra_table"][0])
    line = assert_one_line_error(run_vram(*LIFE, "--db", str(recorded), env=clean_env(VRAM_LANG="zh_CN"),
                                          timeout=HANG_GUARD), 2, str(recorded), "'notes'")
    assert "（" in line and "不是 vram 创建的对象" in line, line  # the catalog's words, full-width
    run_sql(recorded, "DROP TABLE notes; ANALYZE")
    one = _life(recorded)
    assert (one["gpu_seconds"], one["idle_seconds"]) == (80, 80)
    assert _record(recorded).rc == 0
    assert sample_count(recorded) == SAMPLES + 2


@pytest.mark.parametrize("swap, word", [("trigger", "触发器"), ("expression_index", "索引"),
                                        ("extra_table", "表"), ("view_of_no_function", "视图")])
def test_the_refusal_names_the_kind_of_object_in_the_readers_language(recorded, swap, word):
    """The object's kind is a word of the message, translated as the rest is: on a27aa13 a Chinese
    reader was told "（损坏：trigger 'spy' 不是 vram 创建的对象）", SQLite's own English word."""
    sql, name = SWAPS[swap]
    run_sql(recorded, sql)
    line = assert_one_line_error(run_vram(*LIFE, "--db", str(recorded), env=clean_env(VRAM_LANG="zh_CN"),
                                          timeout=HANG_GUARD), 2, str(recorded), repr(name))
    assert f"{word} {name!r} 不是 vram 创建的对象" in line, line
    assert not any(kind in line for kind in ("table", "view", "index", "trigger")), line


def test_a_schema_swapped_after_a_reader_opened_the_file_is_refused_in_its_read(recorded):
    """The file's owner swaps samples for a view that counts rows twice after a reader opened (and
    checked) it: the reader's next read transaction checks the schema again as its first read (so
    every statement in it reads that schema) and refuses the file, naming an object. On 100c1ec
    the check ran only at open and query.held read the doubled rows (100 s for each life's 80)."""
    reader = Store.open(recorded)
    try:
        assert query.held(reader, EPOCH, EPOCH + 3600)
        run_sql(recorded, SWAPS["samples_doubled"][0])
        with pytest.raises(StoreError, match=f"{recorded}.*'kept'"):
            query.held(reader, EPOCH, EPOCH + 3600)
    finally:
        reader.close()


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
def test_the_schema_read_from_the_migrations_is_the_one_sqlite_stores(version):
    """Each open compares the file with the schema read from the migrations' text (store.
    _schema_written: a fraction of a millisecond), and a file that differs with what SQLite itself
    stores when the migrations run (_schema_of: 2-3 ms) before refusing it: the two must be the same
    rows, or every open of a good file would pay for the second. Neither exists on 35c75d0."""
    assert store._schema_written(version) == store._schema_of(version)
