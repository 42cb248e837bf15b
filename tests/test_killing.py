"""The library under `vram kill`: identity checked at the moment of signalling (pid + start
time, through a pidfd), the protected-process rules, the audit log, and the Python API."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import signal
import stat

import pytest
from helpers import (
    IGNORE_TERM,
    clean_env,
    minimal_scenario,
    proc_state,
    real_gpu_scenario,
    run_vram,
    start_python,
    start_sleeper,
    wait_for,
)

from vramkit import procs
from vramkit.audit import SYSTEM_LOG, AuditLog, default_path
from vramkit.killing import (
    EXITED,
    REFUSED,
    STILL_RUNNING,
    WOULD_SIGNAL,
    Criteria,
    KillRequestError,
    execute,
    kill,
    make_plan,
    parse_signal,
)
from vramkit.machine import open_machine
from vramkit.protect import Candidate, ProtectConfigError, load, parse

GiB = 1024**3


pytestmark = pytest.mark.usefixtures("kill_sandbox")  # conftest: no protect list, audit log in tmp


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


def test_a_stale_identity_is_refused_at_the_moment_of_signalling(children, write_scenario, tmp_path):
    child = start_sleeper(children)
    machine = open_machine(str(write_scenario(real_gpu_scenario({child.pid: {"0": "2GiB"}}))))
    try:
        plan = make_plan(machine, Criteria(pids=(child.pid,)))
        target = plan.targets[0]
        assert target.status == WOULD_SIGNAL and target.start_ticks == procs.identity(child.pid).start_ticks
        # As if the recorded process had exited and its pid now belonged to another one.
        target.identity = dataclasses.replace(target.identity, start_ticks=target.identity.start_ticks - 1)
        with AuditLog(tmp_path / "audit.log") as log:
            report = execute(machine, plan, signal.SIGTERM, timeout=0.5, audit=log)
    finally:
        machine.close()
    assert target.status == REFUSED and target.refusal.rule == "identity"
    assert "another process" in target.refusal.reason and target.signals == []
    assert not report.ok and alive(child.pid)
    record = json.loads((tmp_path / "audit.log").read_text())
    assert record["event"] == "refusal" and record["rule"] == "identity"


def test_pin_refuses_another_start_time_and_reports_exited():
    child_ticks = procs.identity(os.getpid()).start_ticks
    assert procs.pin(os.getpid(), child_ticks + 7) == "identity"
    held = procs.pin(os.getpid(), child_ticks)
    assert isinstance(held, procs.Pinned) and held.fd is not None  # pidfd_open exists on this kernel
    assert held.send(0) == "permission"  # never ourselves, whatever the caller asks
    held.close()


def test_pin_of_a_reaped_pid_says_exited(children):
    child = start_sleeper(children)
    ticks = procs.identity(child.pid).start_ticks
    child.kill()
    child.wait()
    assert procs.pin(child.pid, ticks) == "exited" or procs.identity(child.pid).start_ticks != ticks


def test_pinned_signal_reaches_the_process_and_wait_sees_it_end(children):
    child = start_sleeper(children)
    held = procs.pin(child.pid, procs.identity(child.pid).start_ticks)
    assert held.send(signal.SIGTERM) is None
    import time

    ended = procs.wait_gone([held], time.monotonic() + 5)
    assert child.pid in ended
    held.close()


def test_identity_fields_of_a_child(children):
    child = start_sleeper(children)
    me = procs.identity(child.pid)
    assert me.ppid == os.getpid() and me.name == "sleep" and me.argv0 == "sleep"
    assert me.uids == (os.getuid(),) * 3 and me.ns_pids == (child.pid,) and not me.kernel_thread
    assert procs.identity(2).kernel_thread  # kthreadd
    assert procs.identity(999_999_999) is None


def test_ancestors_reach_init():
    chain = procs.ancestors()
    assert chain[0] == os.getpid() and chain[1] == os.getppid() and chain[-1] == 1


def test_the_initial_pid_namespace_is_told_by_its_inode():
    # Told apart independently: in the host's PID namespace a process has one pid (NSpid has one
    # field); inside a container's it also has the ones of the namespaces above.
    nspid = next(line for line in open("/proc/self/status") if line.startswith("NSpid:")).split()[1:]
    assert procs.in_initial_pid_namespace() is (len(nspid) == 1)


def test_a_defunct_child_is_seen_as_gone(children):
    child = start_sleeper(children)
    ticks = procs.identity(child.pid).start_ticks
    child.kill()
    assert wait_for(lambda: proc_state(child.pid) == "Z")
    assert procs.is_defunct(child.pid) and procs.gone(child.pid, ticks)


# ---------------------------------------------------------------- protection rules

def _cand(**kw) -> Candidate:
    # A system account's process (uid 0): names are credible for it (tests/test_protect_names.py
    # has a login user's process named like a daemon).
    base = {"pid": 4242, "name": "python", "argv0": "python", "command": "python train.py", "user": "alice",
            "uids": (0, 0, 0), "real": False}
    return Candidate(**{**base, **kw})


def test_builtin_rules_cover_the_usual_suspects():
    rules = load(system=None, user=os.devnull)
    for name in ("Xorg", "gnome-shell", "nvidia-persistenced", "nv-hostengine", "sshd", "dockerd",
                 "containerd-shim-runc-v2", "systemd", "systemd-logind", "slurmstepd"):
        refusal = rules.check(_cand(name=name[:15], argv0=name))
        assert refusal is not None and refusal.rule == "protected", name
    assert rules.check(_cand()) is None
    assert rules.check(_cand(pid=1, real=True)).rule == "pid-1"
    assert rules.check(_cand(kernel_thread=True, real=True)).rule == "kernel-thread"
    assert rules.check(_cand(pid=1, real=False)) is None  # a simulated pid 1 is not this machine's init


def test_caller_chain_is_protected():
    rules = load(system=None, user=os.devnull, caller_chain=(100, 50, 1))
    assert "vram itself" in rules.check(_cand(pid=100, real=True)).reason
    assert "shell" in rules.check(_cand(pid=50, real=True)).reason


def test_admin_and_user_files_extend_the_list(tmp_path):
    system = tmp_path / "system.conf"
    system.write_text("# site rules\ntriton*\nuser svc-*\n")
    user = tmp_path / "user.conf"
    user.write_text("command *serve.py --port 8000*  # my demo server\n")
    rules = load(system=system, user=user)
    assert rules.files == (str(system), str(user))
    assert f"{system}:2" in rules.check(_cand(name="tritonserver", argv0="tritonserver")).reason
    assert f"{system}:3" in rules.check(_cand(user="svc-infer")).reason
    assert f"{user}:1" in rules.check(_cand(command="python serve.py --port 8000 --x")).reason
    assert rules.check(_cand(command="python serve.py --port 9000")) is None


@pytest.mark.parametrize("text, where", [("pid 42\n", ":1"), ("\n\nname\tok\nprocess /bin/x\n", ":4")])
def test_a_bad_rule_line_names_the_file_and_line(text, where):
    with pytest.raises(ProtectConfigError, match=f"conf{where}: unknown kind"):
        parse(text, "conf")


# ---------------------------------------------------------------- audit log

def test_audit_log_default_places(monkeypatch, tmp_path):
    monkeypatch.delenv("VRAM_AUDIT_LOG")
    if os.geteuid() == 0:
        assert str(default_path()) == "/var/log/vramkit/audit.log"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert default_path() == tmp_path / ".local" / "state" / "vramkit" / "audit.log"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_path() == tmp_path / "state" / "vramkit" / "audit.log"


def test_a_simulated_machine_has_its_own_audit_log_even_as_root(monkeypatch, tmp_path):
    # A rehearsal on a scenario must not add lines to the server's real log (root's default).
    monkeypatch.delenv("VRAM_AUDIT_LOG")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    simulated = tmp_path / "state" / "vramkit" / "audit-simulated.log"
    for euid in (0, 1000):
        monkeypatch.setattr(os, "geteuid", lambda euid=euid: euid)
        assert default_path(simulated=True) == simulated
        assert AuditLog(context={"simulated": True, "scenario": "demo"}).path == simulated
    assert AuditLog(context={"simulated": False}).path == tmp_path / "state" / "vramkit" / "audit.log"
    monkeypatch.setenv("VRAM_AUDIT_LOG", str(tmp_path / "chosen.log"))  # the variable still wins
    assert default_path(simulated=True) == tmp_path / "chosen.log"


def _system_log_state() -> tuple[int, int] | None:
    """The real audit log's size and mtime; None where it is missing or, as an ordinary user, out
    of sight (root's 0700 directory): then vram could not have written it either."""
    try:
        info = SYSTEM_LOG.stat()
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def test_vram_kill_on_a_scenario_writes_the_simulated_log(tmp_path, write_scenario):
    system_before = _system_log_state()
    # a defunct process of the runner's own (an ordinary user may signal only their own)
    data = minimal_scenario()
    data["processes"][0].update(uid=os.getuid(), user=pwd.getpwuid(os.getuid()).pw_name, state="zombie", ppid=1)
    env = clean_env(HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    result = run_vram("kill", "--simulate", str(write_scenario(data)), "--zombie", "--yes", env=env)
    log = tmp_path / "state" / "vramkit" / "audit-simulated.log"
    assert f"audit log: {log}" in result.out, result.out + result.err
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines and all(line["simulated"] is True and line["scenario"] == "tiny" for line in lines)
    assert _system_log_state() == system_before


def test_audit_log_creates_private_file_and_directory(tmp_path):
    path = tmp_path / "new" / "dir" / "audit.log"
    with AuditLog(path, {"scenario": "x"}) as log:
        log.write("signal", target={"pid": 1}, result="sent")
        log.write("outcome", target={"pid": 1}, result="exited")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [rec["event"] for rec in lines] == ["signal", "outcome"]
    assert lines[0]["scenario"] == "x" and lines[0]["caller"]["pid"] == os.getpid() and lines[0]["host"]


# ---------------------------------------------------------------- the Python API

@pytest.mark.slow
def test_api_kill_terminates_and_reports(children, write_scenario, tmp_path):
    a = start_sleeper(children)
    stubborn = start_python(children, IGNORE_TERM)
    path = write_scenario(real_gpu_scenario({a.pid: {"0": "2GiB"}, stubborn.pid: {"1": "1GiB"}}))
    report = kill([a.pid, stubborn.pid], timeout=0.5, simulate=str(path))
    status = {t.pid: t.status for t in report.targets}
    assert status == {a.pid: EXITED, stubborn.pid: STILL_RUNNING} and not report.ok
    assert {c.index: c.freed for c in report.gpus} == {0: 2 * GiB, 1: 0}
    assert report.audit_log == str(tmp_path / "audit.log")

    report = kill([stubborn.pid], timeout=0.5, force=True, simulate=str(path))
    assert report.ok and report.targets[0].signals == ["SIGTERM", "SIGKILL"]


def test_api_dry_run_and_selectors(children, write_scenario, tmp_path):
    a, b = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({a.pid: {"0": "2GiB"}, b.pid: {"1": "1GiB"}}))
    report = kill(gpu=1, dry_run=True, simulate=str(path))
    assert [(t.pid, t.status) for t in report.targets] == [(b.pid, WOULD_SIGNAL)]
    assert report.dry_run and alive(b.pid) and not (tmp_path / "audit.log").exists()


def test_api_refuses_nonsense():
    with pytest.raises(KillRequestError, match="name what to signal"):
        kill(simulate="demo")
    with pytest.raises(KillRequestError, match="unknown signal"):
        kill([1], signal="NOPE", simulate="demo")
    with pytest.raises(KillRequestError, match="waits only after a signal meant to end one"):
        kill([1], signal="USR1", force=True, simulate="demo")  # it ends only a process that does not handle it
    with pytest.raises(KillRequestError, match="does not end a process"):
        kill([1], signal="STOP", force=True, simulate="demo")
    with pytest.raises(KillRequestError, match="no GPU 9"):
        kill(gpu=9, simulate="demo")


def test_parse_signal_forms():
    assert parse_signal("term") == parse_signal("SIGTERM") == parse_signal("15") == parse_signal(15) == signal.SIGTERM
    assert parse_signal("kill") == signal.SIGKILL
    for bad in ("0", "SIGNOPE", ""):
        with pytest.raises(KillRequestError):
            parse_signal(bad)


def test_the_protected_conf_example_in_the_docs_parses():
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "safety.md").read_text()
    example = text.split("# /etc/vramkit/protected.conf\n", 1)[1].split("```", 1)[0]
    rules = parse(example, "example")
    assert [(r.kind, r.pattern) for r in rules] == [
        ("name", "tritonserver"), ("name", "vllm-*"), ("command", "*--serve-forever*"), ("user", "svc-inference"),
        ("exe", "/opt/tritonserver/bin/*"), ("name", "jupyterhub")]
