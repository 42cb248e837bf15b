"""The recorder's SQLite page cache (issue 36): bounded small, so that `vram record`'s memory stops
growing in its first minute instead of as the file grows over many (SQLite's default cache, 2 MiB,
fills page by page and stays full; its sorter at a rollup takes as much again). Readers keep
SQLite's default: a report reads many pages once."""

from __future__ import annotations

import sqlite3

from vramkit.history.store import WRITER_CACHE_KIB, Store


def test_the_recorder_keeps_a_small_page_cache_and_readers_the_default(tmp_path):
    db = tmp_path / "h.db"
    writer = Store.open(db, write=True)
    try:
        assert WRITER_CACHE_KIB <= 1024
        assert writer.conn.execute("PRAGMA cache_size").fetchone() == (-WRITER_CACHE_KIB,)
        default = sqlite3.connect(":memory:").execute("PRAGMA cache_size").fetchone()
        reader = Store.open(db)
        try:
            assert reader.conn.execute("PRAGMA cache_size").fetchone() == default
        finally:
            reader.close()
    finally:
        writer.close()
