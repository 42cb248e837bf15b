"""Red team of the schema check (store.check_schema, 100c1ec; query.read_transaction's check, bafbf37):
the owner of another user's history file (`--db`) edits it while vram reads it. A reader checks
the schema at open and again as the first read of each read transaction; a statement outside
one reads whatever schema the file has when it runs. What must hold: every read that follows a
check reads the schema checked (no reader that never answers, no rows counted twice), or the file
is refused with one line. The swap is made deterministic by wrapping a function in the vram
process (as tests/test_record_cli.after_open does) or by editing the file after Store.open."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, run_vram
from test_history_schema_swapped import HANG_GUARD, LIFE, REPORT, SAMPLES, SWAPS, recorded  # noqa: F401 - the fixture
from test_history_store import EPOCH

from vramkit.history import query, recorded_idle, series
from vramkit.history.store import Store, StoreError

# The owner's edits that a reader must never read as vram's: samples as a view that never ends;
# proc_raw as a view that gives every row twice (the legacy rename leaves vram's views on proc_raw).
ENDLESS_SAMPLES = SWAPS["samples_endless_view"][0]
DOUBLED_PROC_RAW = ("PRAGMA legacy_alter_table = ON; ALTER TABLE proc_raw RENAME TO kept; "
                    "CREATE VIEW proc_raw AS SELECT * FROM kept UNION ALL SELECT * FROM kept")
DOUBLED_GPU_RAW = ("PRAGMA legacy_alter_table = ON; ALTER TABLE gpu_raw RENAME TO kept; "
                   "CREATE VIEW gpu_raw AS SELECT sample, gpu, used * 2 AS used, reserved, util, mem_util, temp, "
                   "power, procs, lost FROM kept")
DOUBLED_SAMPLES = SWAPS["samples_doubled"][0]


def _swap(db: Path | str, sql: str) -> bool:
    """The owner's edit from a program of its own; False when SQLite's lock kept it out (a reader in
    its read transaction)."""
    c = sqlite3.connect(db, timeout=0.2)
    try:
        c.executescript(sql)
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        c.close()


def _swapped_in_vram(sql: str, function: str, after: bool) -> tuple[str, ...]:
    """Python flags for run_vram: `vram` with `sql` run once by another connection (the owner's),
    just after (or before) the vram process calls query.`function`."""
    call = "result = wrapped(*args)\n    " if after else ""
    return ("-c", "import runpy, sqlite3, sys\nfrom vramkit.history import query\n"
                  f"wrapped = query.{function}\ndone = []\n"
                  f"def {function}(*args):\n    {call}if not done:\n        done.append(1)\n"
                  "        path = args[1] if isinstance(args[0], sqlite3.Connection) else args[0].path\n"
                  "        owner = sqlite3.connect(path, timeout=0.2)\n"
                  "        try:\n            owner.executescript(SQL)\n        except sqlite3.OperationalError:\n"
                  "            pass  # locked out by the reader's read transaction\n"
                  "        owner.close()\n"
                  f"    return {'result' if after else 'wrapped(*args)'}\n"
                  f"SQL = {sql!r}\nquery.{function} = {function}\n"
                  "sys.argv = ['vram', *sys.argv[3:]]\nrunpy.run_module('vramkit', run_name='__main__')")


@pytest.mark.parametrize("sql", [ENDLESS_SAMPLES, DOUBLED_PROC_RAW], ids=["endless_samples", "doubled_proc_raw"])
def test_vram_life_reads_the_schema_it_checked(recorded, sql):  # noqa: F811 - the fixture imported
    """`vram life PID --db` with the file's samples or proc_raw swapped for a view just after its
    check: it answers as vram recorded it (the owner's edit kept out until it is done) or refuses
    the file with one line. On bafbf37 process_lives read outside a read transaction: the
    endless view hung it (killed at HANG_GUARD) and the doubled one gave each point twice (18
    points for 9 samples)."""
    done = run_vram(*LIFE, "--db", str(recorded), "--json", env=clean_env(), timeout=HANG_GUARD,
                    python_flags=_swapped_in_vram(sql, "check_jobs_through", after=True))
    if done.rc == 2:
        assert_one_line_error(done, 2, str(recorded))
        return
    assert done.rc == 0, done.err
    one, = json.loads(done.out)["lives"]
    assert (one["gpu_seconds"], len(one["points"])) == (80, SAMPLES)


def test_vram_report_reads_its_coverage_in_a_checked_read_transaction(recorded):  # noqa: F811
    """`vram report` with samples swapped for a view that never ends between its sums and its
    coverage (two read transactions): refused with one line naming samples. On bafbf37 coverage
    read the first and last times before its read transaction: the report never answered (killed
    at HANG_GUARD)."""
    done = run_vram(*REPORT, "--db", str(recorded), env=clean_env(), timeout=HANG_GUARD,
                    python_flags=_swapped_in_vram(ENDLESS_SAMPLES, "coverage", after=False))
    assert_one_line_error(done, 2, str(recorded), "'samples'")


@pytest.fixture
def reader(recorded):  # noqa: F811 - the fixture imported
    store = Store.open(recorded)
    try:
        yield store
    finally:
        store.close()


def test_the_live_views_history_reads_the_schema_it_checked(reader):
    """series.gpu_series (`vram top`'s and `vram serve`'s history) on a file whose gpu_raw became a
    view doubling the memory used after Store.open: refused, naming the table kept. On bafbf37
    it read outside a read transaction: GPU 0 drawn at 8 GiB for its 4."""
    assert _swap(reader.path, DOUBLED_GPU_RAW)
    with pytest.raises(StoreError, match=f"{reader.path}.*'kept'"):
        series.gpu_series(reader, EPOCH + 90, 90, 9)


def test_the_reports_memory_chart_reads_the_schema_it_checked(reader):
    """query.memory_series (the report's memory chart) after proc_raw became a view giving each row
    twice: refused. On bafbf37 it read 8 GiB held for each 4."""
    assert _swap(reader.path, DOUBLED_PROC_RAW)
    with pytest.raises(StoreError, match=f"{reader.path}.*'kept'"):
        query.memory_series(reader, EPOCH, EPOCH + 90, 10)


def test_recorded_idle_reads_the_schema_it_checked(recorded, monkeypatch):  # noqa: F811
    """read_recorded_idle (kill --idle --db, doctor --db) with samples swapped for a view that gives
    each sample twice just after its Store.open: the history is not used, and the note names the
    table kept. On bafbf37 it read the swapped samples outside a read transaction and used them."""
    opened = Store._prepare

    def prepare(self: Store) -> None:
        opened(self)
        _swap(self.path, DOUBLED_SAMPLES)

    monkeypatch.setattr(Store, "_prepare", prepare)
    found = recorded_idle.read_recorded_idle(EPOCH + 80, recorded)
    assert found.note.startswith("history not used") and "'kept'" in found.note, found.note


def test_a_reader_keeps_its_own_page_cache_whatever_the_files_header_says(recorded):  # noqa: F811
    """The header's default page cache size (bytes 48-51, PRAGMA default_cache_size) is taken by
    SQLite for every connection that opens the file: an owner's file that says 10**9 pages makes a
    reader hold every page it reads (a report on a 56 MB file of raw rows: 20.7 -> 84.0 MB max
    RSS, /usr/bin/time). A reader keeps SQLite's default 2000 KiB, also after the owner changes
    the schema's cookie between two reads (the schema read again). On bafbf37 it was 10**9."""
    assert _swap(recorded, "PRAGMA default_cache_size = 1000000000")
    store = Store.open(recorded)
    try:
        assert store.conn.execute("PRAGMA cache_size").fetchone()[0] == -2000
        assert _swap(recorded, "CREATE TABLE bump (x); DROP TABLE bump")  # the same schema, read again
        assert query.held(store, EPOCH, EPOCH + 3600)
        assert store.conn.execute("PRAGMA cache_size").fetchone()[0] == -2000
    finally:
        store.close()
