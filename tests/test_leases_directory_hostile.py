"""The lease directory and the path to it under a hostile neighbour (red team, kill/leases items 1,
2 and 5): a directory others may write must be sticky (or they remove your leases and get your
GPU), no directory on the way may be one another user can change (they move the lease directory
away), no symlink on the way another user planted is followed, and a VRAM_LEASE_DIR no directory
can have is bad input (exit 2), said in one line. The second user is `nobody`, as root."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import AS_NOBODY, IS_ROOT, assert_one_line_error, clean_env, needs_root, run_vram, run_vram_as, vram_argv

from vramkit import leases as L


def use(path: Path) -> L.LeaseDir:
    return L.lease_dir(env={"VRAM_LEASE_DIR": str(path)})


def refused(path: Path, *needles: str) -> str:
    with pytest.raises(L.LeaseError) as caught:
        use(path)
    message = str(caught.value)
    for needle in needles:
        assert needle in message, message
    assert caught.value.exit_code == 1  # the machine's state, not the value: like another owner's directory
    return message


def pick(path: Path, *args: str):
    return run_vram("pick", "--simulate", "demo", *args, env=clean_env(VRAM_LEASE_DIR=str(path)), timeout=20)


# ---------------------------------------------------------------- item 1: not sticky

@pytest.mark.parametrize("mode", [0o777, 0o770, 0o775, 0o757], ids=oct)
def test_a_lease_directory_others_may_write_must_be_sticky(tmp_path, mode):
    """Old code: accepted; another user removed root's lease files and got the same GPU."""
    leases = tmp_path / "leases"
    leases.mkdir()
    leases.chmod(mode)
    refused(leases, f"{leases} may be written by users other than its owner and is not sticky",
            f"chmod +t {leases}", f"chmod go-w {leases}")
    result = pick(leases, "--hold", "1m")
    assert_one_line_error(result, 1, "VRAM_LEASE_DIR:", "not sticky", "chmod +t")
    assert os.listdir(leases) == []  # no lease was written there


@pytest.mark.parametrize("mode", [0o1777, 0o1770, 0o755, 0o700], ids=oct)
def test_a_sticky_or_private_lease_directory_is_used(tmp_path, mode):
    leases = tmp_path / "leases"
    leases.mkdir()
    leases.chmod(mode)
    assert use(leases).path == leases


def test_a_shared_directory_that_is_not_sticky_is_not_written(tmp_path, monkeypatch):
    """The default /tmp/vramkit-leases, world-writable but not sticky: leases go in one's own beside it."""
    monkeypatch.setattr(L, "SHARED_DIR", tmp_path / "vramkit-leases")
    (tmp_path / "vramkit-leases").mkdir()
    (tmp_path / "vramkit-leases").chmod(0o777)
    d = L.lease_dir(env={})
    assert d.path == tmp_path / f"vramkit-leases-{os.getuid()}"
    assert os.listdir(tmp_path / "vramkit-leases") == []


def test_what_vram_creates_passes_its_own_checks_whatever_the_umask(tmp_path):
    """The lease directory 1777 and its missing parents 0755, even with umask 0 (old code: makedirs
    made the parents 0777, which another user could have renamed the lease directory out of)."""
    leases = tmp_path / "a" / "b" / "leases"
    proc = subprocess.run(["sh", "-c", 'umask 0; exec "$@"', "sh", *vram_argv("pick", "--simulate", "demo")],
                          env=clean_env(VRAM_LEASE_DIR=str(leases)), capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0 and proc.stdout == "7\n", proc.stderr
    assert stat.S_IMODE(os.stat(leases).st_mode) == 0o1777
    for parent in (tmp_path / "a", tmp_path / "a" / "b"):
        assert stat.S_IMODE(os.stat(parent).st_mode) == 0o755, parent
    assert use(leases).path == leases


# ---------------------------------------------------------------- item 2: the way there

def test_a_parent_others_may_write_must_be_sticky(tmp_path):
    """Old code: used; whoever may write the parent could rename the lease directory away (every
    lease in it gone at once) and put one of theirs in its place."""
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    leases = parent / "leases"
    refused(leases, f"{leases}: {parent} on the way may be written by other users and is not sticky",
            f"chmod +t {parent}")
    assert not leases.exists()  # not created either
    assert_one_line_error(pick(leases), 1, f"{parent} on the way", "not sticky")
    parent.chmod(0o1777)  # as /tmp is
    assert use(leases).path == leases


def test_a_symlink_of_one_s_own_on_the_way_is_followed(tmp_path, shared_dir):
    """Nobody else can replace a symlink of root's (/var/run -> /run) or the caller's in a sticky
    directory: it is followed, relative or absolute."""
    real = tmp_path / "real"
    real.mkdir()
    (shared_dir / "absolute").symlink_to(real)
    (shared_dir / "relative").symlink_to(Path("..") / shared_dir.name / "absolute" / ".." / "real")
    for link in ("absolute", "relative"):
        assert use(shared_dir / link / "leases").path == shared_dir / link / "leases"
    assert stat.S_IMODE(os.stat(real / "leases").st_mode) == 0o1777


def test_the_lease_directory_itself_is_never_a_symlink(tmp_path):
    (tmp_path / "real").mkdir(mode=0o1777)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    refused(tmp_path / "link", f"{tmp_path / 'link'} is not a directory")


@needs_root("to be the victim of another user's symlink and directory (nobody plants them)")
def test_a_symlink_or_directory_another_user_planted_on_the_way_is_refused(shared_dir):
    """Old code: root followed nobody's symlink and created its 1777 lease directory in nobody's
    directory; nobody then renamed it away and got the GPU root held."""
    theirs, link = shared_dir / "theirs", shared_dir / "evil"
    for argv in (["mkdir", "-m", "755", str(theirs)], ["ln", "-s", str(theirs), str(link)]):
        subprocess.run([*AS_NOBODY, *argv], check=True, timeout=20)
    refused(link / "leases", f"{link} on the way is a symlink of nobody, not of root or you",
            "give the path without it")
    refused(theirs / "leases", f"{theirs} on the way belongs to nobody, not to root or you")
    assert os.listdir(theirs) == []  # root's vram created nothing there
    result = pick(link / "leases", "--hold", "1m")
    assert_one_line_error(result, 1, "VRAM_LEASE_DIR:", "symlink of nobody")
    assert os.listdir(theirs) == []


@needs_root("to run vram as another user (nobody) in root's directory")
def test_another_user_s_vram_refuses_root_s_directory_that_is_not_sticky_too(shared_dir):
    leases = shared_dir / "leases"
    leases.mkdir()
    leases.chmod(0o777)
    result = run_vram_as(AS_NOBODY, "pick", "--simulate", "demo", env=clean_env(VRAM_LEASE_DIR=str(leases)))
    assert_one_line_error(result, 1, "not sticky", f"chmod +t {leases}")
    assert os.listdir(leases) == []


@pytest.mark.skipif(IS_ROOT, reason="root may write anywhere")
def test_a_place_one_cannot_reach_is_one_line(tmp_path):
    """Old code: a PermissionError from lstat was an internal error."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    locked.chmod(0)
    try:
        assert_one_line_error(pick(locked / "x" / "leases"), 1, "VRAM_LEASE_DIR: cannot create", "Permission denied")
    finally:
        locked.chmod(0o700)


# ---------------------------------------------------------------- item 5: values no directory can have

@pytest.mark.parametrize(("value", "needle"), [
    ("/tmp/" + "x" * 256, "VRAM_LEASE_DIR: a name in the path is longer than 255 bytes"),
    ("/tmp/" + "\u00e9" * 128, "VRAM_LEASE_DIR: a name in the path is longer than 255 bytes"),  # 256 bytes
    ("/tmp" + "/x" * 2048, "VRAM_LEASE_DIR: the path is longer than 4095 bytes"),
    ("relative", "VRAM_LEASE_DIR: give an absolute path"),
], ids=["name", "utf-8-name", "path", "relative"])
def test_a_value_no_directory_can_have_is_bad_input(value, needle):
    """Old code: 'internal error: OSError: [Errno 36] File name too long' (exit 1), and exit 1 for a
    relative path; VRAM_LEASE_TIMEOUT=abc exits 2."""
    for command in (("pick", "--simulate", "demo"), ("run", "-q", "--simulate", "demo", "--", "true")):
        result = run_vram(*command, env=clean_env(VRAM_LEASE_DIR=value), timeout=20)
        assert_one_line_error(result, 2, f"vram: error: {needle}")
    with pytest.raises(L.LeaseError) as caught:
        L.lease_dir(env={"VRAM_LEASE_DIR": value})
    assert caught.value.exit_code == 2


def test_the_longest_name_is_still_a_name(tmp_path):
    assert use(tmp_path / ("x" * 255)).path == tmp_path / ("x" * 255)
