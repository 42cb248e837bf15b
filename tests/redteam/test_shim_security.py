"""`vram sim shim DIR` against another local user (issue 13 item 1): the shim is code that every
program putting DIR on PYTHONPATH imports, root's included, so whoever can write DIR or plant
files in it must not get to choose what is written where, or what is imported."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from vramkit.nvml.shim import MARKER, ShimError, write_shim

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chowns files to another user")


def _vram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vramkit", *args], capture_output=True, text=True, timeout=60)


@root_only
def test_a_directory_owned_by_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, NOBODY, NOBODY)
    with pytest.raises(ShimError, match="belongs to nobody"):
        write_shim(d)
    assert not (d / "pynvml.py").exists()
    result = _vram("sim", "shim", str(d))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "belongs to nobody" in result.stderr and "Traceback" not in result.stderr


@root_only
def test_an_existing_pynvml_owned_by_another_user_is_refused(tmp_path):
    shim = write_shim(tmp_path)
    # even one that looks like an earlier shim: its owner could have put anything after the marker
    shim.write_text(MARKER + " (vramkit 0)\nimport os  # their code\n")
    os.chown(shim, NOBODY, NOBODY)
    before = shim.read_text()
    with pytest.raises(ShimError, match="belongs to nobody"):
        write_shim(tmp_path)
    assert shim.read_text() == before


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_a_directory_others_can_write_is_refused(tmp_path, mode):
    # Sticky or not: another user could add pynvml/ or pynvml*.so beside the shim, which Python prefers.
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(mode)
    with pytest.raises(ShimError, match="writable by others"):
        write_shim(d)
    assert list(d.iterdir()) == []


def test_a_symlinked_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ShimError, match="symlink"):
        write_shim(tmp_path / "link")
    assert list(real.iterdir()) == []


def test_a_symlinked_pynvml_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text(MARKER + "\n")
    d = tmp_path / "d"
    d.mkdir()
    (d / "pynvml.py").symlink_to(victim)
    with pytest.raises(ShimError, match="not a shim"):
        write_shim(d)
    assert victim.read_text() == MARKER + "\n"


def test_planted_symlinks_at_temporary_names_are_never_followed(tmp_path):
    # The old code wrote `.pynvml.py.<pid>.tmp` through open(): a symlink planted there under the
    # next pids made the writer overwrite its target (as root: any file).
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "d"
    d.mkdir()
    pid = os.getpid()
    for p in range(max(1, pid - 50), pid + 200):
        (d / f".pynvml.py.{p}.tmp").symlink_to(victim)
    target = write_shim(d)
    assert victim.read_text() == "precious\n"
    assert target.read_text().startswith(MARKER) and not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    leftovers = {p.name for p in d.iterdir()} - {"pynvml.py"}
    assert all(Path(d / n).is_symlink() for n in leftovers)  # only the planted links; no temporary left


def test_the_usual_case_still_works_and_rewrites(tmp_path):
    d = tmp_path / "new" / "shim"
    first = write_shim(d)
    assert first.read_text().startswith(MARKER)
    assert stat.S_IMODE(d.stat().st_mode) & 0o022 == 0
    assert write_shim(d) == first and [p.name for p in d.iterdir()] == ["pynvml.py"]
