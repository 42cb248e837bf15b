"""What `vram kill` refuses, and the rule it names: other users' processes (as root without
--all-users; as a normal user always), protected processes whatever the flags, and the
audit log it keeps of every signal, refusal and outcome."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
import time

import pytest
from helpers import (
    AS_NOBODY,
    IGNORE_TERM,
    clean_env,
    cmdline,
    proc_state,
    real_gpu_scenario,
    run_vram,
    run_vram_as,
    start_python,
    start_sleeper,
    wait_for,
)

GiB = 1024**3
NOBODY = 65534


def _uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Uid:")).split()[1])


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


def start(children, argv: list[str], want: bytes) -> subprocess.Popen:
    proc = children.start(argv)
    assert wait_for(lambda: cmdline(proc.pid) == want), cmdline(proc.pid)
    return proc


@pytest.fixture
def env(tmp_path):
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     XDG_STATE_HOME=None, COLUMNS="200")


@pytest.fixture
def nobody_child(children):
    if os.geteuid() != 0:
        pytest.skip("starting a process as another user needs root")
    proc = start(children, [*AS_NOBODY, "sleep", "600"], b"sleep\x00600\x00")
    assert _uid(proc.pid) == NOBODY
    return proc


def protect_sshd(tmp_path) -> str:
    """Where the rule that protects a test's fake sshd (`exec -a sshd sleep`) comes from. As root the
    process is root's, a system account's, and the built-in name protects it; a login user's process
    named sshd is not protected by the built-in list (tests/test_protect_names.py), only by the
    user's own protected.conf."""
    if os.geteuid() == 0:
        return "built-in: remote login"
    conf = tmp_path / ".config" / "vramkit" / "protected.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("name sshd\n")
    conf.chmod(0o644)
    return f"{conf}:1"


def kill(path, *args: str, env: dict[str, str]):
    return run_vram("kill", "--simulate", str(path), *args, env=env)


def targets(result) -> dict[int, dict]:
    return {t["pid"]: t for t in json.loads(result.out)["targets"]}


# ---------------------------------------------------------------- ownership

@pytest.mark.slow
def test_root_needs_all_users_for_another_users_process(nobody_child, write_scenario, env):
    path = write_scenario(real_gpu_scenario({nobody_child.pid: {"0": "2GiB"}}))
    refused = kill(path, str(nobody_child.pid), "--yes", "--force", "--timeout", "0.5", "--json", env=env)
    assert refused.rc == 1
    t = targets(refused)[nobody_child.pid]
    assert t["status"] == "refused" and t["rule"] == "ownership"
    assert "nobody" in t["reason"] and "--all-users" in t["reason"]
    time.sleep(0.2)
    assert alive(nobody_child.pid)

    done = kill(path, str(nobody_child.pid), "--yes", "--all-users", "--timeout", "5", "--json", env=env)
    assert done.rc == 0, done.err
    assert targets(done)[nobody_child.pid]["status"] == "exited"


def test_root_selectors_leave_other_users_alone_without_all_users(nobody_child, children, write_scenario, env):
    mine = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({nobody_child.pid: {"0": "2GiB"}, mine.pid: {"0": "1GiB"}}))
    result = kill(path, "--gpu", "0", "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc == 0, result.err
    assert list(targets(result)) == [mine.pid]
    notes = " ".join(result.json()["notes"])
    assert "nobody" in notes and "--all-users" in notes
    assert alive(nobody_child.pid)


def test_root_user_selector_without_all_users_is_refused(nobody_child, write_scenario, env):
    path = write_scenario(real_gpu_scenario({nobody_child.pid: {"0": "2GiB"}}))
    result = kill(path, "--user", "nobody", "--yes", "--json", env=env)
    assert result.rc == 1
    assert targets(result)[nobody_child.pid]["rule"] == "ownership"
    assert alive(nobody_child.pid)


def test_a_normal_user_cannot_signal_roots_process(children, shared_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root to run vram as another user")
    root_child = start_sleeper(children)
    path = shared_dir / "scenario.json"
    path.write_text(json.dumps(real_gpu_scenario({root_child.pid: {"0": "2GiB"}})))
    path.chmod(0o644)
    env = clean_env(VRAM_AUDIT_LOG=str(shared_dir / "nobody-audit.log"), HOME=str(shared_dir), XDG_CONFIG_HOME=None)
    for extra in ((), ("--all-users", "--force")):
        result = run_vram_as(AS_NOBODY, "kill", "--simulate", str(path), str(root_child.pid), "--yes",
                             "--timeout", "0.5", "--json", *extra, env=env)
        assert result.rc == 1, result.err
        t = targets(result)[root_child.pid]
        assert t["status"] == "refused" and t["rule"] == "ownership"
        assert "root" in t["reason"] and "only your own" in t["reason"]
        if extra:
            assert "--all-users needs root" in t["reason"]
    assert alive(root_child.pid)
    log = shared_dir / "nobody-audit.log"
    assert log.stat().st_uid == NOBODY and stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert {line["event"] for line in lines} == {"refusal"} and lines[0]["caller"]["uid"] == NOBODY


def test_a_normal_user_signals_their_own_process(children, shared_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root to run vram as another user")
    own = start(children, [*AS_NOBODY, "sleep", "600"], b"sleep\x00600\x00")
    path = shared_dir / "scenario.json"
    path.write_text(json.dumps(real_gpu_scenario({own.pid: {"1": "2GiB"}})))
    path.chmod(0o644)
    env = clean_env(VRAM_AUDIT_LOG=str(shared_dir / "nobody-audit.log"), HOME=str(shared_dir), XDG_CONFIG_HOME=None)
    result = run_vram_as(AS_NOBODY, "kill", "--simulate", str(path), "--gpu", "1", "--yes", "--timeout", "5",
                         "--json", env=env)
    assert result.rc == 0, result.err
    assert targets(result)[own.pid]["status"] == "exited"


# ---------------------------------------------------------------- protected processes

def test_protected_processes_are_refused_whatever_the_flags(children, write_scenario, env, tmp_path):
    origin = protect_sshd(tmp_path)
    sshd = start(children, ["bash", "-c", "exec -a sshd sleep 600"], b"sshd\x00600\x00")
    me, parent = os.getpid(), os.getppid()  # vram's parent (pytest) and its parent
    placements = {1: {"0": "1GiB"}, 2: {"0": "1GiB"}, me: {"1": "1GiB"}, parent: {"1": "1GiB"},
                  sshd.pid: {"1": "1GiB"}}
    path = write_scenario(real_gpu_scenario(placements))
    result = kill(path, "1", "2", str(me), str(parent), str(sshd.pid), "--force", "--all-users", "--yes",
                  "--timeout", "0.5", "--json", env=env)
    assert result.rc == 1
    rules = {pid: (t["status"], t["rule"]) for pid, t in targets(result).items()}
    assert rules == {1: ("refused", "pid-1"), 2: ("refused", "kernel-thread"), me: ("refused", "caller"),
                     parent: ("refused", "caller"), sshd.pid: ("refused", "protected")}
    reason = targets(result)[sshd.pid]["reason"]
    assert "'sshd'" in reason and origin in reason
    assert all(not t["signals"] for t in targets(result).values())
    assert alive(sshd.pid)
    gpus = {g["index"]: g for g in result.json()["gpus"]} if result.rc == 0 else {
        g["index"]: g for g in json.loads(result.out)["gpus"]}
    assert gpus[1]["freed"] == 0


def test_text_names_the_rule_of_each_refusal(children, write_scenario, env, tmp_path):
    origin = protect_sshd(tmp_path)
    sshd = start(children, ["bash", "-c", "exec -a sshd sleep 600"], b"sshd\x00600\x00")
    path = write_scenario(real_gpu_scenario({1: {"0": "1GiB"}, sshd.pid: {"1": "1GiB"}}))
    result = kill(path, "1", str(sshd.pid), "--force", "--all-users", "--yes", env=env)
    assert result.rc == 1
    assert "refused by rule 'pid-1'" in result.out
    assert f"refused by rule 'protected': name matches 'sshd' ({origin})" in result.out


def test_users_protect_their_own_processes(children, write_scenario, env, tmp_path):
    conf = tmp_path / ".config" / "vramkit" / "protected.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("# my notebook server must stay\nname  jupyter-lab*\ncommand *--keep-me*\n")
    notebook = start(children, ["bash", "-c", "exec -a jupyter-lab-x sleep 600"], b"jupyter-lab-x\x00600\x00")
    argv = [sys.executable, "-c", "import time; time.sleep(600)", "--keep-me"]
    other = start(children, argv, ("\0".join(argv) + "\0").encode())
    path = write_scenario(real_gpu_scenario({notebook.pid: {"0": "1GiB"}, other.pid: {"0": "1GiB"}}))
    result = kill(path, "--gpu", "0", "--force", "--yes", "--timeout", "0.5", "--json", env=env)
    assert result.rc == 1
    found = targets(result)
    assert found[notebook.pid]["rule"] == "protected" and f"{conf}:2" in found[notebook.pid]["reason"]
    assert found[other.pid]["rule"] == "protected" and f"{conf}:3" in found[other.pid]["reason"]
    assert alive(notebook.pid) and alive(other.pid)


def test_a_broken_protected_conf_stops_everything(children, write_scenario, env, tmp_path):
    conf = tmp_path / ".config" / "vramkit" / "protected.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("name ok\nprocess bad-kind\n")
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--yes", env=env)
    assert result.rc == 2 and result.out == ""
    assert f"{conf}:2" in result.err and "unknown kind" in result.err and len(result.err_lines) == 1
    assert alive(child.pid)


# ---------------------------------------------------------------- audit log

@pytest.mark.slow
def test_audit_log_has_a_line_per_action_and_mode_0600(children, write_scenario, env, tmp_path):
    goes = start_sleeper(children)
    stubborn = start_python(children, IGNORE_TERM)
    protect_sshd(tmp_path)
    sshd = start(children, ["bash", "-c", "exec -a sshd sleep 600"], b"sshd\x00600\x00")
    placements = {goes.pid: {"0": "3GiB"}, stubborn.pid: {"1": "2GiB"}, sshd.pid: {"1": "1GiB"}}
    path = write_scenario(real_gpu_scenario(placements))
    result = kill(path, str(goes.pid), str(stubborn.pid), str(sshd.pid), "--yes", "--force", "--timeout", "0.5",
                  env=env)
    assert result.rc == 1  # sshd refused
    log = tmp_path / "audit.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert f"audit log: {log}" in result.out
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    events = [(rec["event"], rec["target"]["pid"], rec.get("signal"), rec["result"]) for rec in lines]
    assert ("refusal", sshd.pid, "SIGTERM", "refused") in events
    assert ("signal", goes.pid, "SIGTERM", "sending") in events
    assert ("outcome", goes.pid, "SIGTERM", "exited") in events
    assert ("signal", stubborn.pid, "SIGTERM", "sending") in events
    assert ("signal", stubborn.pid, "SIGKILL", "sending") in events
    assert ("outcome", stubborn.pid, "SIGKILL", "exited") in events
    assert len(lines) == 6
    me = pwd.getpwuid(os.getuid()).pw_name
    for rec in lines:
        assert rec["time"].endswith("+00:00") and abs(rec["timestamp"] - time.time()) < 60
        assert rec["caller"]["uid"] == os.getuid() and rec["caller"]["user"] == me
        assert rec["simulated"] is True and rec["scenario"] == "kill-test"
        assert rec["argv"][:2] == ["vram", "kill"]
        target = rec["target"]
        assert target["start_ticks"] > 0 and target["start_time"] > 0 and target["user"] == me
        assert rec["memory"] == {goes.pid: 3 * GiB, stubborn.pid: 2 * GiB, sshd.pid: GiB}[target["pid"]]
    refusal = next(rec for rec in lines if rec["event"] == "refusal")
    assert refusal["rule"] == "protected" and "sshd" in refusal["reason"]
    assert refusal["gpus"] == {"1": GiB}


def test_an_existing_log_is_tightened_to_0600_and_appended_to(children, write_scenario, env, tmp_path):
    log = tmp_path / "audit.log"
    log.write_text('{"event": "earlier"}\n')
    log.chmod(0o644)
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    assert kill(path, str(child.pid), "--yes", "--timeout", "5", env=env).rc == 0
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = log.read_text().splitlines()
    assert lines[0] == '{"event": "earlier"}' and len(lines) == 3


def test_when_the_audit_log_cannot_be_written_nothing_is_signalled(children, write_scenario, env, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--yes", env={**env, "VRAM_AUDIT_LOG": str(blocker / "audit.log")})
    assert result.rc == 1 and result.out == ""
    assert "audit log" in result.err and "nothing was signalled" in result.err and len(result.err_lines) == 1
    assert alive(child.pid)


def test_audit_log_refuses_to_follow_a_symlink(children, write_scenario, env, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "audit.log").symlink_to(target)
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--yes", env=env)
    assert result.rc == 1 and "audit log" in result.err
    assert target.read_text() == "" and alive(child.pid)
