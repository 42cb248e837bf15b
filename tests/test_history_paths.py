"""Where the history is: the recorder writes root's or the user's own database; readers find the
user's own, else the service's (root's), so users of a server whose admin runs the service see
its history without naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramkit.history import paths


@pytest.fixture
def user(monkeypatch, tmp_path):
    monkeypatch.delenv("VRAM_DB", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(paths.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(paths, "SYSTEM_DB", tmp_path / "system" / "history.db")
    return tmp_path


def test_the_recorder_writes_root_s_or_the_user_s_own(user, monkeypatch):
    assert paths.default_path() == user / "state" / "vramkit" / "history.db"
    monkeypatch.setattr(paths.os, "geteuid", lambda: 0)
    assert paths.default_path() == paths.SYSTEM_DB


def test_readers_find_the_user_s_own_then_the_service_s(user):
    own = user / "state" / "vramkit" / "history.db"
    assert paths.reader_path() == own and paths.found_path() is None  # nothing anywhere
    paths.SYSTEM_DB.parent.mkdir()
    paths.SYSTEM_DB.write_bytes(b"")
    assert paths.reader_path() == paths.found_path() == paths.SYSTEM_DB
    own.parent.mkdir(parents=True)
    own.write_bytes(b"")
    assert paths.reader_path() == own


def test_a_named_database_wins_even_when_missing(user, monkeypatch):
    assert paths.reader_path("x.db") == paths.found_path("x.db") == Path("x.db")
    monkeypatch.setenv("VRAM_DB", str(user / "env.db"))
    assert paths.reader_path() == paths.found_path() == user / "env.db"
    assert paths.default_path() == user / "env.db"
