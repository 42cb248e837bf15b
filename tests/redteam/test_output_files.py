"""The files vram writes where the user names them (output_files.py: sim spawn -o, doctor and estimate
--timeline, report --plot): never through a symlink, never into a FIFO, never into another user's file;
one's own file is written afresh. vram often runs as root, and such paths are often in a shared /tmp."""

from __future__ import annotations

import os
import stat

import pytest
from helpers import needs_root

from vramkit.output_files import OutputRefused, write_new


def test_ones_own_file_is_replaced_with_the_mode_asked(tmp_path):
    out = tmp_path / "plot.svg"
    out.write_text("old\n")
    os.chmod(out, 0o600)
    write_new(str(out), b"<svg/>\n")
    assert out.read_bytes() == b"<svg/>\n" and stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.svg"]  # no temporary left beside it


@pytest.mark.parametrize("planted", ["symlink", "dangling symlink", "fifo", "directory"])
def test_what_another_user_can_plant_is_refused_and_left_as_it_was(tmp_path, planted):
    victim = tmp_path / "root-owned.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "tl.svg"
    if planted == "symlink":
        out.symlink_to(victim)
    elif planted == "dangling symlink":
        out.symlink_to(tmp_path / "new-file-of-root")
    elif planted == "fifo":
        os.mkfifo(out)
    else:
        out.mkdir()
    with pytest.raises(OutputRefused, match="cannot write it") as refused:
        write_new(str(out), b"<svg/>\n", param="timeline")
    assert refused.value.param == "timeline" and refused.value.exit_code == 2
    assert victim.read_text() == "keep me\n" and not (tmp_path / "new-file-of-root").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root-owned.txt", "tl.svg"]


@needs_root("to plant a file as another user")
def test_another_users_file_is_not_reused(tmp_path):
    out = tmp_path / "gpus.svg"
    out.write_text("theirs\n")
    os.chown(out, 65534, 65534)
    with pytest.raises(OutputRefused, match="not to you"):
        write_new(str(out), b"<svg/>\n")
    assert out.read_text() == "theirs\n"
