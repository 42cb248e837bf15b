"""`vram sim spawn -o FILE` where FILE is in a shared directory (issue 26 item 9): what another user
planted at FILE is never opened. A FIFO is refused at once (opening it to write would wait for a
reader forever); a file someone else owns is refused, never written through (root's spawn must not
fill a file planted in /tmp); a symlink is refused; the caller's own file is replaced by a rename,
so another link to it keeps its old content. Each refusal is one line, exit 2, and comes before any
placeholder process is started.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
from helpers import assert_one_line_error, needs_root, run_vram

SPAWN = ("sim", "spawn", "--simulate", "demo", "-o")
PLANTED = '{"planted": true}\n'


def _spawn(output: Path, *command: str):
    # a generous timeout: the old code waited on the FIFO for ever; the answer comes at once
    return run_vram(*SPAWN, str(output), *command, timeout=120)


@pytest.mark.parametrize("command", [("--", "true"), ()], ids=["with-a-command", "until-ctrl-c"])
def test_a_fifo_at_the_output_is_refused_at_once(tmp_path, command):
    fifo = tmp_path / "real.json"
    os.mkfifo(fifo, 0o666)
    assert_one_line_error(_spawn(fifo, *command), 2, "-o", str(fifo), "FIFO")


def test_a_directory_at_the_output_is_refused(tmp_path):
    assert_one_line_error(_spawn(tmp_path, "--", "true"), 2, str(tmp_path), "not a regular file")


def test_the_caller_s_own_file_is_replaced_never_written_through(tmp_path):
    out = tmp_path / "real.json"
    out.write_text(PLANTED)
    other = tmp_path / "other-link.json"
    os.link(out, other)  # a second name for the old file: it keeps what it held
    result = _spawn(out, "--", "true")
    assert result.rc == 0, result.err
    assert other.read_text() == PLANTED
    written = json.loads(out.read_text())
    assert written["processes"] and all(p["source"] == "real" for p in written["processes"])
    assert out.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-link.json", "real.json"]  # no temporary left


@needs_root("to plant a file as nobody")
def test_root_refuses_a_file_planted_by_nobody_in_tmp():
    planted = Path("/tmp") / f"vram-spawn-planted-{secrets.token_hex(6)}.json"  # the real, sticky /tmp
    try:
        planted.write_text(PLANTED)
        os.chmod(planted, 0o666)
        os.chown(planted, 65534, 65534)
        line = assert_one_line_error(_spawn(planted, "--", "true"), 2, str(planted), "belongs to")
        assert "not to you" in line
        assert planted.read_text() == PLANTED and planted.stat().st_uid == 65534  # untouched
    finally:
        planted.unlink(missing_ok=True)


@needs_root("to plant a symlink as nobody")
def test_root_refuses_a_symlink_planted_by_nobody_in_tmp(tmp_path):
    victim = tmp_path / "root-owned.json"
    victim.write_text(PLANTED)
    link = Path("/tmp") / f"vram-spawn-link-{secrets.token_hex(6)}.json"
    try:
        link.symlink_to(victim)
        os.lchown(link, 65534, 65534)
        assert_one_line_error(_spawn(link, "--", "true"), 2, str(link), "symlink")
        assert victim.read_text() == PLANTED
    finally:
        link.unlink(missing_ok=True)


def test_no_placeholder_is_started_before_the_refusal(cli, tmp_path, monkeypatch):
    from vramkit.nvml.placeholders import Placeholders

    def started(self):
        raise AssertionError("placeholders started before the output was checked")

    monkeypatch.setattr(Placeholders, "start", started)
    fifo = tmp_path / "real.json"
    os.mkfifo(fifo)
    rc, out, err = cli(*SPAWN, str(fifo), "--", "true")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and "FIFO" in err, err
