"""`vram kill` after the red-team report (/tmp/rt-kill/REPORT.md items 3, 4, 6, 7, 9 and the
doubled audit-log prefix): a signal such as USR1 is described as what it does (it ends a process
that does not handle it) and a target it ended is `exited`; SIGHUP and SIGTERM to vram close every
audit record as Ctrl-C does; a pid is ASCII digits only; root does not append to another user's
audit log; --idle is at least a second."""

from __future__ import annotations

import json
import os
import select
import signal
import stat
import subprocess

import pytest
from helpers import (
    assert_one_line_error,
    clean_env,
    needs_root,
    proc_state,
    real_gpu_scenario,
    reap,
    run_vram,
    start_python,
    start_sleeper,
    vram_argv,
    wait_for,
)

# Handles USR1 (says so on stdout), so USR1 does not end it.
ON_USR1 = ("import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *a: print('usr1', flush=True)); "
           "print('ready', flush=True); time.sleep(600)")
# Ignores SIGTERM, and says on stdout that one came.
NOTES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: print('term', flush=True)); "
              "print('ready', flush=True); time.sleep(600)")


def alive(proc: subprocess.Popen) -> bool:
    return proc_state(proc.pid) not in (None, "Z")


@pytest.fixture
def env(tmp_path):
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit" / "audit.log"), HOME=str(tmp_path),
                     XDG_CONFIG_HOME=None, XDG_STATE_HOME=None, COLUMNS="200")


def kill(path, *args: str, env: dict[str, str]):
    return run_vram("kill", "--simulate", str(path), *args, env=env)


def records(path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


# ---------------------------------------------------------------- item 3: USR1 and the like

@pytest.mark.parametrize("sig", ["USR1", "USR2", "ALRM", "PIPE", "64"])
def test_the_dry_run_says_such_a_signal_ends_a_process_that_does_not_handle_it(children, write_scenario, env, sig):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--signal", sig, "--dry-run", env=env)
    assert result.rc == 0, result.err
    intro = next(line for line in result.out.splitlines() if line.startswith("dry run"))
    assert "does not end a process" not in intro
    assert "it ends a process that does not handle, ignore or block it" in intro
    assert "vram does not wait for an exit, only looks for 1s" in intro
    assert alive(child)


def test_the_dry_run_of_stop_still_says_it_does_not_end_a_process(children, write_scenario, env):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--signal", "STOP", "--dry-run", env=env)
    assert result.rc == 0, result.err
    assert "(it does not end a process: vram does not wait)" in result.out


def test_a_process_usr1_ended_is_reported_exited_and_its_memory_freed(children, write_scenario, env, tmp_path):
    child = start_sleeper(children)  # sleep has no USR1 handler: the default action ends it
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "10GiB"}}))
    result = kill(path, str(child.pid), "--signal", "USR1", "--yes", "--json", env=env)
    assert result.rc == 0, result.err
    target = {t["pid"]: t for t in result.json()["targets"]}[child.pid]
    assert target["status"] == "exited" and target["signals"] == ["SIGUSR1"]
    assert child.wait(5) == -signal.SIGUSR1
    assert result.json()["gpus"][0]["freed"] == 10 * 1024**3
    outcome = [r for r in records(tmp_path / "audit" / "audit.log") if r["event"] == "outcome"]
    assert [r["result"] for r in outcome] == ["exited"]


@pytest.mark.slow  # a second's look or wait
def test_a_process_that_handles_usr1_is_signalled_with_a_note(children, write_scenario, env):
    child = start_python(children, ON_USR1)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--signal", "USR1", "--yes", "--json", env=env)
    assert result.rc == 0, result.err
    target = {t["pid"]: t for t in result.json()["targets"]}[child.pid]
    assert target["status"] == "signalled"
    assert "still running 1s after SIGUSR1: it handles, ignores or blocks it, or has not ended yet" in target["notes"]
    assert child.stdout.readline().strip() == b"usr1" and alive(child)


def test_force_with_usr1_is_refused_in_true_words(write_scenario, env):
    path = write_scenario(real_gpu_scenario({}))
    line = assert_one_line_error(kill(path, "--gpu", "0", "--signal", "USR1", "--force", "--yes", env=env), 2,
                                 "--force", "SIGUSR1 ends only a process that does not handle, ignore or block it")
    assert "does not end a process" not in line
    assert_one_line_error(kill(path, "--gpu", "0", "--signal", "STOP", "--force", "--yes", env=env), 2,
                          "SIGSTOP does not end a process")


# ---------------------------------------------------------------- item 4: SIGHUP, SIGTERM to vram

def _start_kill(children, write_scenario, tmp_path, *args: str, **popen):
    stubborn = start_python(children, NOTES_TERM)
    path = write_scenario(real_gpu_scenario({stubborn.pid: {"0": "4GiB"}}))
    log = tmp_path / "audit" / "audit.log"
    env = clean_env(VRAM_AUDIT_LOG=str(log), HOME=str(tmp_path), XDG_CONFIG_HOME=None, XDG_STATE_HOME=None)
    proc = subprocess.Popen(vram_argv("kill", "--simulate", str(path), str(stubborn.pid), "--yes", *args),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **popen)
    # Once the record is on disk and the SIGTERM reached the child, vram is waiting
    assert wait_for(lambda: any(r["event"] == "signal" for r in records(log)), timeout=20)
    assert select.select([stubborn.stdout], [], [], 20)[0] and stubborn.stdout.readline().strip() == b"term"
    return stubborn, proc, log


@pytest.mark.parametrize("stop", [signal.SIGHUP, signal.SIGTERM])
def test_sighup_or_sigterm_while_waiting_closes_the_audit_record(children, write_scenario, tmp_path, stop):
    stubborn, proc, log = _start_kill(children, write_scenario, tmp_path, "--timeout", "10m")
    try:
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=20)
    finally:
        reap(proc)
    assert proc.returncode == 128 + stop, err
    assert "Traceback" not in err and "internal error" not in err
    assert "interrupted" in err and len(err.strip().splitlines()) == 1
    row = next(line for line in out.splitlines() if line.lstrip().startswith(str(stubborn.pid)))
    assert "signalled" in row
    assert f"vram was stopped by {stop.name} while waiting for it to exit: it was still running after SIGTERM" in out
    mine = [r for r in records(log) if r["target"]["pid"] == stubborn.pid]
    assert [r["event"] for r in mine] == ["signal", "outcome"]
    assert mine[-1]["result"] == "interrupted" and mine[-1]["sent"] == ["SIGTERM"]
    assert f"interrupted ({stop.name})" in mine[-1]["reason"]
    assert alive(stubborn)  # it ignored SIGTERM and vram sent nothing more


def _ignore_hup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.slow  # a second's look or wait
def test_a_sighup_vram_was_started_ignoring_is_still_ignored(children, write_scenario, tmp_path):
    """nohup vram kill ...: a hang-up does not stop it; it waits out --timeout as asked."""
    stubborn, proc, log = _start_kill(children, write_scenario, tmp_path, "--timeout", "2s",
                                      preexec_fn=_ignore_hup)
    try:
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=20)
    finally:
        reap(proc)
    assert proc.returncode == 1, err  # still running after the wait: not stopped by the hang-up
    assert [r["result"] for r in records(log) if r["event"] == "outcome"] == ["still running"]


# ---------------------------------------------------------------- item 6: pids are ASCII digits

def _odd_forms(pid: int) -> list[str]:
    text = str(pid)
    arabic = "".join(chr(0x0660 + int(c)) for c in text)
    fullwidth = "".join(chr(0xFF10 + int(c)) for c in text)
    return [text[:1] + "_" + text[1:], arabic, fullwidth, "+" + text, " " + text, text + "\n"]


def test_a_pid_is_ascii_digits_only(children, write_scenario, env):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    assert kill(path, str(child.pid), "--dry-run", env=env).rc == 0  # the plain form selects it
    for odd in _odd_forms(child.pid):
        assert_one_line_error(kill(path, odd, "--dry-run", env=env), 2, "not a pid")
    assert alive(child)


def test_a_signal_number_is_ascii_digits_only(write_scenario, env):
    path = write_scenario(real_gpu_scenario({}))
    assert_one_line_error(kill(path, "--gpu", "0", "--signal", "\u0661\u0665", "--dry-run", env=env), 2,
                          "unknown signal")


# ---------------------------------------------------------------- item 7: another user's audit log

@needs_root("to make a file another user owns")
def test_root_refuses_an_audit_log_another_user_owns(children, write_scenario, env, tmp_path):
    log = tmp_path / "theirs.log"
    log.write_text("")
    log.chmod(0o644)
    os.chown(log, 65534, 65534)
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--yes", env={**env, "VRAM_AUDIT_LOG": str(log)})
    line = assert_one_line_error(result, 1, f"cannot write the audit log {log}",
                                 "it belongs to uid 65534, not to root or you", "nothing was signalled")
    assert line.count("cannot write the audit log") == 1
    assert alive(child)
    info = log.stat()
    assert log.read_text() == "" and info.st_uid == 65534 and stat.S_IMODE(info.st_mode) == 0o644


@needs_root("to make a directory another user owns")
def test_root_refuses_an_audit_log_in_a_directory_another_user_may_empty(children, write_scenario, env, tmp_path):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    theirs, open_to_all = tmp_path / "theirs", tmp_path / "open"
    theirs.mkdir(0o755)
    os.chown(theirs, 65534, 65534)
    open_to_all.mkdir()
    open_to_all.chmod(0o777)  # not sticky: anyone may remove what is in it
    for directory, why in ((theirs, "its directory belongs to uid 65534, not to root or you"),
                           (open_to_all, "its directory may be written by others and is not sticky")):
        log = directory / "audit.log"
        result = kill(path, str(child.pid), "--yes", env={**env, "VRAM_AUDIT_LOG": str(log)})
        assert_one_line_error(result, 1, f"cannot write the audit log {log}", why, "nothing was signalled")
        assert alive(child) and not log.exists()
    open_to_all.chmod(0o1777)  # sticky, as /tmp: only the log's owner may remove it
    done = kill(path, str(child.pid), "--yes", "--timeout", "5",
                env={**env, "VRAM_AUDIT_LOG": str(open_to_all / "audit.log")})
    assert done.rc == 0 and (open_to_all / "audit.log").stat().st_uid == 0


def test_the_callers_own_log_is_still_tightened_and_appended_to(children, write_scenario, env, tmp_path):
    log = tmp_path / "mine.log"
    log.write_text('{"event": "earlier"}\n')
    log.chmod(0o640)
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    assert kill(path, str(child.pid), "--yes", "--timeout", "5", env={**env, "VRAM_AUDIT_LOG": str(log)}).rc == 0
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and len(log.read_text().splitlines()) == 3


def test_a_symlink_on_the_way_is_named_once(children, write_scenario, env, shared_dir):
    (shared_dir / "real").mkdir()
    (shared_dir / "link").symlink_to(shared_dir / "real")  # in a directory everyone may write
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    log = shared_dir / "link" / "audit.log"
    result = kill(path, str(child.pid), "--yes", env={**env, "VRAM_AUDIT_LOG": str(log)})
    line = assert_one_line_error(result, 1, f"cannot write the audit log {log}: link on its path is a symlink")
    assert line.count("cannot write the audit log") == 1
    assert alive(child) and not (shared_dir / "real" / "audit.log").exists()


# ---------------------------------------------------------------- item 9: --idle is at least 1s

@pytest.mark.parametrize("idle", ["0", "0s", "0.5s"])
def test_idle_under_a_second_is_bad_usage(write_scenario, env, idle):
    path = write_scenario(real_gpu_scenario({}))
    assert_one_line_error(kill(path, "--idle", idle, "--dry-run", env=env), 2, "--idle",
                          f"must be at least 1 second, got {idle}")


@pytest.mark.slow  # a second's look or wait
def test_idle_of_a_second_is_accepted(write_scenario, env):
    path = write_scenario(real_gpu_scenario({}))
    result = kill(path, "--idle", "1s", "--dry-run", env=env)
    assert result.rc == 0, result.err
    assert "watching from now for up to 1s" in result.out


# ---------------------------------------------------------------- --user of no user here

def test_a_user_no_one_is_is_bad_usage_not_nothing_to_signal(env):
    # demo's users are made up (alice, bob...): a scenario's users count, as the user database's do
    typo = kill("demo", "--user", "bobb", "--all-users", "--yes", env=env)
    assert_one_line_error(typo, 2, "--user: there is no user bobb here")
    assert "--user: --user" not in typo.err  # the option is named once
    for known in ("bob", "root", "12345"):  # a scenario's, the database's, a uid without a name
        result = kill("demo", "--user", known, "--all-users", "--dry-run", env=env)
        assert result.rc in (0, 1) and "there is no user" not in result.err, (known, result.err)
