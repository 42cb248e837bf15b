"""The shared lease directory under a hostile neighbour (issue 13): files planted there by another
user (played by `nobody`: files chowned to it when the tests run as root) must not hang, crash,
block or slow anybody else's vram run / pick / use_gpus, and leases must not publish secrets."""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import time

import pytest
from helpers import IS_ROOT, run_vram, vram_argv, wait_for

from vramkit import leases as L
from vramkit import procs
from vramkit.leases import files

NOBODY = 65534
G4, G7 = "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e64", "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e67"  # demo's fitting GPUs
OWNER = "nobody" if IS_ROOT else None  # who the planted files belong to


def shared(leasing):
    leasing.dir.mkdir(mode=0o1777, exist_ok=True)
    os.chmod(leasing.dir, 0o1777)
    return leasing.dir


def as_nobody(path) -> None:
    """Give a planted file to `nobody` (when we may: as root)."""
    if IS_ROOT:
        os.lchown(path, NOBODY, NOBODY)


def plant_lease(where, lease_id: str, **fields) -> str:
    now = time.time()
    data = {"id": lease_id, "units": [G4, G7], "labels": {G4: "GPU 4", G7: "GPU 7"}, "kind": "hold",
            "user": "alice", "uid": 1000, "pid": 1, "created": now, "expires": now + 3600, "locked": False,
            **fields}
    path = where / f"lease-{lease_id}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    as_nobody(path)
    return str(path)


def pick(leasing, *args: str):
    return run_vram("pick", "--simulate", "demo", *args, env=leasing.env(), timeout=20)


def warning_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("vram: warning: ignored in the lease directory")]


# ---------------------------------------------------------------- item 2: files that are not files

def test_fifos_symlinks_and_big_files_are_skipped_never_opened_blocking(leasing):
    """On the old code pick hung on the FIFO (opened O_RDONLY without O_NONBLOCK) while holding
    the directory lock: run_vram's timeout fired."""
    where = shared(leasing)
    planted = {
        "lease-fifo.json": lambda p: os.mkfifo(p),
        "wait-0000000001-1.json": lambda p: os.mkfifo(p),  # a ticket: its "lock" is opened too
        "lease-link.json": lambda p: os.symlink("/dev/zero", p),
        "lease-big.json": lambda p: p.write_text(json.dumps({"pad": "x" * (L.MAX_FILE + 1)})),
    }
    for name, make in planted.items():
        make(where / name)
        as_nobody(where / name)
    plant_lease(where, "fifolock", locked=True)  # a lease whose lock file is a FIFO
    os.mkfifo(where / "lease-fifolock.lock")
    as_nobody(where / "lease-fifolock.lock")
    result = pick(leasing)
    assert result.rc == 0 and result.out == "7\n", result.err
    (line,) = warning_lines(result.err)
    for name, why in [("lease-fifo.json", "not a regular file"), ("wait-0000000001-1.json", "not a regular file"),
                      ("lease-link.json", "a symlink"), ("lease-big.json", "larger than 64 KiB")]:
        assert f"{where / name} (" in line and why in line or "more" in line, line
    if OWNER:
        assert f"({OWNER}: not a regular file)" in line
    # the junk stays (another user's); the lease whose lock is a FIFO is stale (nobody holds it)
    assert set(planted) <= set(L.leftovers(L.LeaseDir(where, True)))


def test_use_gpus_is_not_hung_by_a_fifo(leasing, tmp_path):
    where = shared(leasing)
    os.mkfifo(where / "lease-x.json")
    as_nobody(where / "lease-x.json")
    code = "import vramkit, warnings; warnings.simplefilter('ignore'); " \
           "print(vramkit.use_gpus(simulate='demo').cuda_visible_devices)"
    proc = subprocess.run([sys.executable, "-c", code], env=leasing.env(), capture_output=True, text=True,
                          timeout=20)
    assert proc.returncode == 0 and proc.stdout == "7\n", proc.stderr


# ---------------------------------------------------------------- item 3: contents that lie

@pytest.mark.parametrize("fields, why", [
    ({"baseline": {G4: 5, G7: 5}}, "baseline is not a map of pid lists"),  # old code: TypeError in fulfilled()
    ({"created": float("nan")}, "not JSON"),  # NaN (json.dumps writes it): old code never expired it
    ({"expires": float("inf")}, "not JSON"),
    ({"pid": "1"}, "pid is not a pid"),
    ({"units": [G4, 7]}, "units is not a list of GPU keys"),
])
def test_a_lease_that_does_not_validate_is_ignored_and_named(leasing, fields, why):
    where = shared(leasing)
    path = plant_lease(where, "bad", **fields)
    result = pick(leasing)
    assert result.rc == 0 and result.out == "7\n", result.err  # old code: internal error, or GPUs 4, 7 blocked
    (line,) = warning_lines(result.err)
    assert f"{path} ({OWNER or ''}" in line and why in line, line


def test_a_live_ticket_with_a_bad_created_is_ignored(leasing):
    """Old code: float("x") raised ValueError, an internal error in every pick and run."""
    where = shared(leasing)
    path = where / "wait-0000000001-1.json"
    path.write_text(json.dumps({"user": "alice", "pid": 1, "created": "x", "policy": {"count": 1}}))
    as_nobody(path)
    with open(path) as held:  # the waiter is alive: it holds its ticket's lock
        fcntl.flock(held, fcntl.LOCK_EX)
        result = pick(leasing)
    assert result.rc == 0 and result.out == "7\n", result.err
    (line,) = warning_lines(result.err)
    assert f"{path} (" in line and "created is not a finite number" in line


def test_a_lease_lasts_a_day_from_its_files_mtime_and_names_its_files_owner(leasing):
    """created = expires = 1e12, naming alice and pid 1: on the old code it blocked GPUs 4 and 7
    forever (and said "alice"); now it is the file owner's, and over 24 h after the file's mtime."""
    where = shared(leasing)
    path = plant_lease(where, "forever", created=1e12, expires=1e12)
    result = pick(leasing)
    assert result.rc == 1
    owner = OWNER or __import__("pwd").getpwuid(os.getuid()).pw_name
    # "Ns ago" counts from the file's time (not 1e12): a few seconds at most, however slow the machine
    reserved = rf"GPU 4 is reserved by vram pick --hold of {owner} \(pid 1, \d{{1,2}}s ago\)"
    assert re.search(reserved, result.err), result.err
    assert "alice" not in result.err
    day_ago = time.time() - L.MAX_LEASE - 60
    os.utime(path, (day_ago, day_ago), follow_symlinks=False)
    result = pick(leasing)
    assert result.rc == 0 and result.out == "7\n", result.err


def test_a_future_mtime_does_not_stretch_the_day(leasing):
    """touch -d +10days on one's own lease: old code counted the 24 h from the mtime, so the lease
    lasted 11 days; now from the earlier of mtime and ctime (which touch sets to now)."""
    where = shared(leasing)
    path = plant_lease(where, "future", created=1e12, expires=1e12)
    later = time.time() + 10 * 86400
    os.utime(path, (later, later), follow_symlinks=False)
    d = L.LeaseDir(where, True)
    with d.locked():
        assert [x.id for x in L.read_state(d).leases] == ["future"]
        assert L.read_state(d, now=time.time() + L.MAX_LEASE + 60).leases == []


def test_a_lease_whose_pid_started_after_it_was_written_is_stale(leasing, children):
    """A reused pid: the holder the lease names is gone, another process has its number."""
    from helpers import start_sleeper

    where = shared(leasing)
    written = time.time() - 100
    sleeper = start_sleeper(children)  # started now: after the lease below was (said to be) written
    path = plant_lease(where, "reused", pid=sleeper.pid, pidns=procs.pid_namespace(), created=written,
                       expires=written + 3600)
    d = L.LeaseDir(where, True)
    with d.locked():
        assert [x.id for x in L.read_state(d).leases] == ["reused"]  # written after its pid started: fine
        os.utime(path, (written, written), follow_symlinks=False)
        assert L.read_state(d).leases == []  # written before its pid started: stale
    assert not os.path.exists(path)  # stale: removed (root may remove nobody's file in a sticky directory)


def test_a_lease_lasts_a_day_from_its_holders_start_too(leasing):
    """The day also counts from the holder's start (/proc): rewriting or touching the file does
    not stretch it. Read at a time past a day after this process started but within a day of
    the file: the lease is over; a moment earlier it is not."""
    from vramkit.procs import identity

    where = shared(leasing)
    started = identity(os.getpid()).start_time
    plant_lease(where, "old-holder", pid=os.getpid(), pidns=procs.pid_namespace(), created=1e12, expires=1e12)
    written = min(os.stat(where / "lease-old-holder.json").st_mtime, os.stat(where / "lease-old-holder.json").st_ctime)
    gap = written - started
    assert gap > 0  # this process started before the file was written
    d = L.LeaseDir(where, True)
    with d.locked():
        assert [x.id for x in L.read_state(d, now=started + L.MAX_LEASE - gap / 2).leases] == ["old-holder"]
        assert L.read_state(d, now=started + L.MAX_LEASE + gap / 2).leases == []
    # a pid of another pid namespace cannot be looked up: the file's times alone count then
    plant_lease(where, "elsewhere", pid=os.getpid(), pidns="pid:[1]", created=1e12, expires=1e12)
    with d.locked():
        assert [x.id for x in L.read_state(d, now=started + L.MAX_LEASE + gap / 2).leases] == ["elsewhere"]


def test_a_process_older_than_a_day_gets_no_lease_that_would_not_count(leasing, monkeypatch):
    """Its lease would count for nothing (a day from its holder's start): refused in one line,
    rather than a reservation nobody honours."""
    from vramkit.procs import identities

    monkeypatch.setattr(identities, "start_time", lambda ticks: time.time() - L.MAX_LEASE - 1)
    d = L.LeaseDir(shared(leasing), True)
    with d.locked(), pytest.raises(L.LeaseError, match="this process started more than 24 hours ago"):
        L.create_lease(d, [(G4, "GPU 4")], "api", 600)
    assert L.leftovers(d) == []


def test_a_ticket_counts_as_its_files_owner(leasing):
    where = shared(leasing)
    path = where / "wait-0000000001-1.json"
    path.write_text(json.dumps({"user": "alice", "created": time.time(), "policy": {"count": 1, "uid": 0}}))
    as_nobody(path)
    d = L.LeaseDir(where, True)
    with open(path) as held, d.locked():
        fcntl.flock(held, fcntl.LOCK_EX)
        (ticket,) = L.read_state(d).tickets
    assert ticket.policy["uid"] == os.stat(path).st_uid and ticket.user != "alice"


# ---------------------------------------------------------------- item 8: no command line for all to read

def test_a_lease_holds_the_program_name_not_its_arguments(leasing, groups):
    """Old code wrote the whole command line (shlex.join), secret included."""
    groups.start(vram_argv("run", "-q", "--simulate", "demo", "--", "sh", "-c", "sleep 30", "sh",
                           "--db-password=hunter2"), env=leasing.env())
    assert wait_for(lambda: any(p.read_text() for p in leasing.dir.glob("lease-*.json")), timeout=20)
    text = next(leasing.dir.glob("lease-*.json")).read_text()
    assert "hunter2" not in text and json.loads(text)["command"] == "sh"


def test_program_name():
    assert L.program_name("/usr/bin/python train.py --db-password=x") == "python"
    assert L.program_name(["/opt/x/train.sh", "--token", "s"]) == "train.sh"
    assert L.program_name("'unbalanced --secret") == "'unbalanced"
    assert L.program_name(None) is None and L.program_name([]) is None


# ---------------------------------------------------------------- item 11: junk that slows

def test_what_is_read_is_capped_per_file_and_per_owner(leasing, monkeypatch):
    """Old code read up to 1 MiB of every file and every file: 500 1 MiB junk files cost 8.5 s
    on every pick. Now: nothing over MAX_FILE is read, and at most MAX_PER_OWNER files of each
    owner, with a warning."""
    where = shared(leasing)
    big = "[" + "0," * (1 << 19) + "0]"  # 1 MiB of valid JSON
    for i in range(5):
        (where / f"lease-big{i}.json").write_text(big)
        as_nobody(where / f"lease-big{i}.json")
    for i in range(L.MAX_PER_OWNER + 40):
        (where / f"lease-junk{i}.json").write_text("{}")
        as_nobody(where / f"lease-junk{i}.json")
    parsed: list[int] = []
    real_loads = json.loads
    monkeypatch.setattr(files.json, "loads", lambda s, **kw: parsed.append(len(s)) or real_loads(s, **kw))
    lines: list[str] = []
    d = L.LeaseDir(where, True, on_warning=lines.append)
    started = time.monotonic()
    with d.locked():
        state = L.read_state(d)
    elapsed = time.monotonic() - started
    assert state.leases == [] and max(parsed) <= L.MAX_FILE
    assert len(parsed) <= L.MAX_PER_OWNER
    (line,) = lines
    owner = OWNER or __import__("pwd").getpwuid(os.getuid()).pw_name
    assert f"files of {owner} in {where} beyond the first {L.MAX_PER_OWNER} (not read)" in line
    assert elapsed < 2, elapsed


# ---------------------------------------------------------------- item 4: a squatted directory, a hostile .lock

@pytest.mark.skipif(not IS_ROOT, reason="needs root to give the shared directory to another user")
def test_a_shared_directory_squatted_by_another_user_is_not_used(tmp_path, monkeypatch):
    """nobody created /tmp/vramkit-leases first, sticky as vram makes it: as its owner they could
    remove root's leases (a GPU then goes to two jobs). Old code accepted it (it is sticky)."""
    squatted = tmp_path / "vramkit-leases"
    squatted.mkdir()
    os.chmod(squatted, 0o1777)
    os.chown(squatted, NOBODY, NOBODY)
    monkeypatch.setattr(L, "SHARED_DIR", squatted)
    run = tmp_path / "run"
    run.mkdir()
    d = L.lease_dir(env={"XDG_RUNTIME_DIR": str(run)})
    # Root's leases go in root's own directory beside it (which every user reads), not in nobody's.
    assert d.path == tmp_path / "vramkit-leases-0" and d.path.stat().st_uid == 0 and d.note is None
    os.chown(squatted, 0, 0)  # root's: shared
    assert L.lease_dir(env={"XDG_RUNTIME_DIR": str(run)}).path == squatted


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_a_hostile_lock_file_is_gone_around_and_named(leasing, kind):
    """A .lock that is a symlink, directory or FIFO: old code stopped every run/pick until root
    removed it (at first an internal error, then one line and exit 1); now vram goes around it
    (each GPU has its own lock) and names it and its owner in one warning."""
    where = shared(leasing)
    lock = where / ".lock"
    {"symlink": lambda: os.symlink("/etc/passwd", lock), "directory": lambda: lock.mkdir(),
     "fifo": lambda: os.mkfifo(lock)}[kind]()
    as_nobody(lock)
    result = pick(leasing)
    assert result.rc == 0 and result.out == "7\n", result.err
    (line,) = result.err.splitlines()
    assert line.startswith(f"vram: warning: {lock} is ") and "going around it" in line, line
    assert f"made by {OWNER}" in line or not OWNER


@pytest.mark.skipif(not IS_ROOT, reason="needs root to run vram as nobody against root's .lock")
def test_a_lock_file_with_mode_000_is_gone_around_not_an_internal_error(shared_dir):
    """Old code: the read-only retry's PermissionError escaped as an internal error; then one
    line and exit 1. Now nobody's pick goes around root's unreadable .lock, saying so."""
    from helpers import AS_NOBODY, clean_env, run_vram_as

    where = shared_dir / "leases"
    where.mkdir()
    os.chmod(where, 0o1777)
    (where / ".lock").touch()
    os.chmod(where / ".lock", 0)
    result = run_vram_as(AS_NOBODY, "pick", "--simulate", "demo", env=clean_env(VRAM_LEASE_DIR=str(where)))
    assert result.rc == 0 and result.out == "7\n", result.err
    (line,) = result.err.splitlines()
    assert f"cannot open {where / '.lock'}: Permission denied (owner root); going around it" in line, line


# ---------------------------------------------------------------- issue 31 item 2: two users, a fresh /tmp

# Run inside a mount namespace of its own (unshare -m) with an empty tmpfs on /tmp: a machine where
# no admin has acted and nobody has run vram yet. Each step runs `vram ARGS` as a uid (setpriv),
# without VRAM_LEASE_DIR, so vram chooses its lease directory as on a real machine. Prints one JSON
# list: per step, its uid, exit code, stdout, stderr. A step "&" starts in the background and waits
# for its job to write $STARTED (/tmp/started-N; its content is the step's "out"); the background
# steps are killed, with what they started, at the end.
FRESH_TMP_DRIVER = r"""
import json, os, subprocess, sys, time
# What the steps run from (this checkout, its venv) may itself be under /tmp (CI clones there): those
# entries are bound back into the fresh /tmp through a handle on the old one, and nothing else is.
old = os.open("/tmp", os.O_PATH)
keep = sorted({os.path.join("/tmp", os.path.relpath(p, "/tmp").split(os.sep)[0])
               for p in json.loads(sys.argv[3]) if p.startswith("/tmp/")})
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "vramkit-test-tmp", "/tmp"], check=True)
for path in keep:
    os.makedirs(path)
    subprocess.run(["mount", "--no-canonicalize", "--bind", f"/proc/self/fd/{old}/{os.path.basename(path)}", path],
                   check=True, pass_fds=(old,))  # as is: canonicalized, the path would be the new /tmp
steps, python = json.loads(sys.argv[1]), sys.argv[2]
results, background = [], []
for n, (uid, mode, args) in enumerate(steps):
    home = f"/tmp/home-{uid}"
    os.makedirs(home, exist_ok=True)
    os.chown(home, uid, uid)
    env = {k: v for k, v in os.environ.items() if k not in ("VRAM_LEASE_DIR", "XDG_RUNTIME_DIR")}
    env.update(HOME=home, STARTED=f"/tmp/started-{n}")
    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-m", "vramkit", *args]
    if mode == "&":
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        background.append(proc)
        deadline = time.monotonic() + 60
        while not os.path.exists(f"/tmp/started-{n}") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        results.append({"uid": uid, "rc": proc.poll(), "out": open(f"/tmp/started-{n}").read()
                        if os.path.exists(f"/tmp/started-{n}") else "", "err": ""})
    else:
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        results.append({"uid": uid, "rc": done.returncode, "out": done.stdout, "err": done.stderr})
for proc in background:
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
    proc.wait()
print(json.dumps(results))
"""
ALICE, BOB = 64101, 64102  # ordinary users with no name on this machine (shown by number)


def _fresh_tmp(*steps: tuple[int, str, list[str]]) -> list[dict]:
    from helpers import clean_env

    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("needs a mount namespace (unshare -m) for a fresh /tmp: " + probe.stderr.decode().strip())
    import vramkit

    needed = [os.path.realpath(p) for p in (sys.prefix, sys.executable, os.path.dirname(vramkit.__file__))]
    done = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", FRESH_TMP_DRIVER,
                           json.dumps(steps), sys.executable, json.dumps(needed)],
                          capture_output=True, text=True, env=clean_env(VRAM_LEASE_DIR=None), timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to be two ordinary users on a fresh /tmp")
def test_two_users_on_a_fresh_tmp_see_each_other_s_hold():
    """Issue 31 item 2: `vram pick --hold 1m` as one user, then `vram pick` as another got the same
    GPU (the first made /tmp/vramkit-leases theirs; the second refused it and leased alone)."""
    hold, pick = _fresh_tmp(
        (ALICE, "", ["pick", "--simulate", "demo", "--hold", "1m", "--format", "uuid"]),
        (BOB, "", ["pick", "--simulate", "demo", "--format", "uuid"]))
    assert hold["rc"] == 0 and pick["rc"] == 0, (hold, pick)
    assert {hold["out"].strip(), pick["out"].strip()} == {G4, G7}  # two GPUs fit: each got one
    assert "per-user" not in hold["err"] + pick["err"]  # no note: leases are shared


RUN_AND_WAIT = ["sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES" > "$STARTED"; sleep 60']


@pytest.mark.skipif(not IS_ROOT, reason="needs root to be two ordinary users on a fresh /tmp")
def test_two_users_vram_run_on_a_fresh_tmp_never_share_a_gpu():
    """The issue's "must show": as two ordinary users, `vram run` twice on one free GPU: the second
    waits or picks another. Here the first job holds its lease (it never shows on the simulated
    GPU); the second user's run gets the other GPU, and a third run (either user) finds none."""
    alice, bob, third = _fresh_tmp(
        (ALICE, "&", ["run", "--simulate", "demo", "--", *RUN_AND_WAIT]),
        (BOB, "&", ["run", "--simulate", "demo", "--", *RUN_AND_WAIT]),
        (ALICE, "", ["run", "--simulate", "demo", "--", "true"]))
    assert {alice["out"].strip(), bob["out"].strip()} == {"4", "7"}, (alice, bob)  # demo's two that fit
    assert third["rc"] == 1 and "no GPU fits now" in third["err"], third
    assert f"reserved by a vram run of {ALICE}" in third["err"] and f"of {BOB}" in third["err"]
