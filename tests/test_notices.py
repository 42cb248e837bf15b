"""Idle-holder notices (history/notices.py) on the simulated machine with the stepped clock: the
notice command gets the facts as JSON once per repeat period, busy and small holders never, the
rate limit holds, a hanging command is killed, and reclaim goes through vram kill's checked and
audited path (a real process is signalled; a protected one is refused; a dry run only says)."""

from __future__ import annotations

import argparse
import json
import os
import pwd
import threading
from pathlib import Path

import pytest
from helpers import proc_state, start_sleeper, wait_for

from vramkit import procs
from vramkit.collector import Collector
from vramkit.history.notices import Notifier, attach_policy, holdings, run_command
from vramkit.history.policy import parse
from vramkit.machine import open_machine

FIXTURES = Path(__file__).parent / "fixtures"
EPOCH = 1767225600  # 2026-01-01T00:00:00Z
GiB = 1024**3

pytestmark = pytest.mark.usefixtures("kill_sandbox")  # conftest: no protect list, audit log in tmp

ME = pwd.getpwuid(os.getuid()).pw_name  # the real processes the tests start are the runner's


@pytest.fixture
def stepped(monkeypatch):
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")
    monkeypatch.setenv("VRAM_SIM_EPOCH", str(EPOCH))


@pytest.fixture
def appender(tmp_path):
    """A notice command that appends its stdin to a file: (argv, path of the file)."""
    script = tmp_path / "notify.sh"
    script.write_text('#!/bin/sh\ncat >> "$1"\n')
    script.chmod(0o755)
    out = tmp_path / "notices.jsonl"
    return [str(script), str(out)], out


def policy(command, **rule):
    top = {k: rule.pop(k) for k in ("max_per_minute", "timeout") if k in rule}
    return parse({**top, "rule": [{"name": "idle-big", "min_memory": "10GiB", "idle_for": "2h",
                                   "command": command, "repeat": "6h", **rule}]}, "test.toml", as_root=False)


class Drive:
    """A collector on a scenario and a Notifier on it; step(n) samples n times, a minute apart
    on the stepped clock, letting the notifier's worker finish after each sample."""

    def __init__(self, scenario, pol, say_lines, **kwargs):
        self.collector = Collector(open_machine(str(scenario)), interval=60)
        self.notifier = Notifier(pol, self.collector, say=say_lines.append, **kwargs)
        self.collector.subscribe(self.notifier)
        self._stop = threading.Event()
        self.t = 0

    def step(self, n=1):
        for _ in range(n):
            self.collector.sample()
            self.notifier.drain()
            self.collector.backend.sleep(self._stop, 60)
            self.t += 60

    def close(self):
        self.notifier.close()
        self.collector.close()


def records(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def expected(pid, user, uid, gpu, memory, t, idle, name="python", reclaim_at=None, start_ticks=None,
             simulated=True):
    from datetime import datetime, timezone

    iso = lambda s: datetime.fromtimestamp(s, timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    return {"rule": "idle-big", "host": os.uname().nodename, "time": iso(EPOCH + t), "timestamp": EPOCH + t,
            "user": user, "uid": uid, "pid": pid, "start_ticks": start_ticks, "name": name, "gpu": gpu,
            "gpu_uuid": f"GPU-00000000-0000-4000-8000-00000000000{gpu}", "memory_bytes": memory,
            "idle_seconds": idle,
            "reclaim": {"scheduled": reclaim_at is not None,
                        "at": None if reclaim_at is None else iso(EPOCH + reclaim_at),
                        "timestamp": None if reclaim_at is None else EPOCH + reclaim_at},
            "simulated": simulated}


def test_each_idle_holder_gets_one_notice_per_repeat_period_and_busy_or_small_ones_none(stepped, appender):
    command, out = appender
    lines: list[str] = []
    drive = Drive(FIXTURES / "notices_idle.json", policy(command), lines)
    try:
        drive.step(7200 // 60)  # t = 0 .. 7140: nobody idle for 2 h yet
        assert records(out) == []
        drive.step(1)  # t = 7200: alice has been idle 2 h
        assert records(out) == [expected(5001, "alice", 1001, 0, 12 * GiB, 7200, 7200.0)]
        drive.step((36000 - 7260) // 60 + 1)  # up to t = 36000
    finally:
        drive.close()
    got = records(out)
    # dave ran kernels from 3600 to 3660 (the sample at 3600 sees it busy): idle again from 3660.
    assert got == [
        expected(5001, "alice", 1001, 0, 12 * GiB, 7200, 7200.0),
        expected(5004, "dave", 1004, 0, 16 * GiB, 3660 + 7200, 7200.0),
        expected(5001, "alice", 1001, 0, 12 * GiB, 7200 + 21600, 28800.0),
        expected(5004, "dave", 1004, 0, 16 * GiB, 3660 + 7200 + 21600, 28800.0),
    ]
    assert not any(r["user"] in ("bob", "carol") for r in got)  # bob is busy; carol holds 2 GiB
    assert drive.notifier.sent == 4 and drive.notifier.failed == 0 and drive.notifier.held_back == 0
    assert sum("running" in line for line in lines) == 4


def crowd(n, **extra):
    """n synthetic processes, each idle with 12 GiB on one of two GPUs."""
    return {"name": "crowd",
            "gpus": [{"uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}", "memory_total": "1000GiB",
                      "utilization": 0} for i in range(2)],
            "processes": [{"pid": 6000 + i, "user": f"u{i}", "uid": 2000 + i, "gpus": {str(i % 2): "12GiB"},
                           "sm_util": 0} for i in range(n)], **extra}


def test_the_rate_limit_holds_and_the_rest_wait_for_a_later_minute(stepped, appender, write_scenario):
    command, out = appender
    lines: list[str] = []
    drive = Drive(write_scenario(crowd(25)), policy(command, max_per_minute=10), lines)
    try:
        drive.step(7200 // 60 + 1)  # t = 7200: all 25 idle for 2 h
        assert len(records(out)) == 10
        drive.step(1)  # t = 7260: a minute later, 10 more
        assert len(records(out)) == 20
        drive.step(2)  # t = 7320 (the last 5), 7380 (nothing left)
    finally:
        drive.close()
    got = records(out)
    assert len(got) == 25 and sorted(r["pid"] for r in got) == list(range(6000, 6025))
    assert [r["timestamp"] - EPOCH for r in got] == [7200] * 10 + [7260] * 10 + [7320] * 5
    assert drive.notifier.held_back == 15  # each waiting notice counted once, not once per sample
    assert sum("notices a minute" in line for line in lines) == 1  # said once
    assert lines[-1] == "policy: 15 notices waited for the rate limit (10 a minute)"


def test_a_hanging_notice_command_is_killed_with_what_it_started(tmp_path):
    script = tmp_path / "hang.sh"
    pidfile = tmp_path / "child.pid"
    script.write_text(f'#!/bin/sh\nsleep 600 &\necho $! > {pidfile}\necho "to stdout"\nwait\n')
    script.chmod(0o755)
    result = run_command((str(script),), b"{}", timeout=1)
    assert result.returncode is None and result.output == "to stdout"
    child = int(pidfile.read_text())
    assert wait_for(lambda: proc_state(child) in (None, "Z"))  # its background child went with it (the process group)


def test_a_failing_command_is_said_with_its_output_and_counted(stepped, tmp_path):
    script = tmp_path / "fail.sh"
    script.write_text('#!/bin/sh\necho "no mail \\033[31mserver"; exit 3\n')
    script.chmod(0o755)
    lines: list[str] = []
    drive = Drive(FIXTURES / "notices_idle.json", policy([str(script)]), lines)
    try:
        drive.step(7200 // 60 + 1)
    finally:
        drive.close()
    assert drive.notifier.failed == 1
    assert lines[-1] == ("policy: rule idle-big: the notice command for pid 5001 failed (exit status 3): "
                         "no mail ?[31mserver")


def test_output_beyond_the_cap_is_read_and_dropped(tmp_path):
    result = run_command(("/bin/sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' x"), b"", timeout=30)
    assert result.returncode == 0 and result.output == "x" * 4096


# ---------------------------------------------------------------- reclaim, real processes

def real_idle_scenario(pid: int) -> dict:
    return {"name": "reclaim",
            "gpus": [{"uuid": "GPU-00000000-0000-4000-8000-000000000000", "memory_total": "80GiB",
                      "utilization": 0}],
            "processes": [{"pid": pid, "source": "real", "gpus": {"0": "12GiB"}, "sm_util": 0}]}


def test_reclaim_signals_the_same_real_process_through_the_audited_path(stepped, appender, children,
                                                                        write_scenario, tmp_path):
    command, out = appender
    child = start_sleeper(children)
    ticks = procs.identity(child.pid).start_ticks
    lines: list[str] = []
    drive = Drive(write_scenario(real_idle_scenario(child.pid)), policy(command, reclaim_after="1h"), lines)
    try:
        drive.step(7200 // 60 + 1)  # t = 7200: notice, reclaim scheduled for 10800
        assert records(out) == [expected(child.pid, ME, os.getuid(), 0, 12 * GiB, 7200, 7200.0, name="sleep",
                                         reclaim_at=10800, start_ticks=ticks, simulated=True)]
        drive.step(3600 // 60 - 1)  # up to t = 10740: not yet
        assert child.poll() is None and not (tmp_path / "audit.log").exists()
        drive.step(1)  # t = 10800
    finally:
        drive.close()
    assert child.wait(10) == -15  # SIGTERM
    audit = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert [(a["event"], a["result"], a["signal"]) for a in audit] == [("signal", "sending", "SIGTERM"),
                                                                      ("outcome", "exited", "SIGTERM")]
    for a in audit:
        assert a["via"] == "policy" and a["policy_rule"] == "idle-big" and a["policy"] == "test.toml"
        assert a["target"]["pid"] == child.pid and a["target"]["start_ticks"] == ticks
    assert any(line.startswith(f"policy: rule idle-big: pid {child.pid} on GPU 0: reclaimed: SIGTERM sent")
               for line in lines)
    assert drive.notifier.reclaimed == 1 and len(records(out)) == 1


def test_reclaim_refuses_a_protected_process_and_audits_the_refusal(stepped, appender, children,
                                                                   write_scenario, tmp_path):
    conf = tmp_path / ".config" / "vramkit" / "protected.conf"  # HOME is tmp_path (kill_sandbox)
    conf.parent.mkdir(parents=True)
    conf.write_text("name sleep\n")
    command, out = appender
    child = start_sleeper(children)
    lines: list[str] = []
    drive = Drive(write_scenario(real_idle_scenario(child.pid)), policy(command, reclaim_after="0s"), lines)
    try:
        drive.step(7200 // 60 + 2)
    finally:
        drive.close()
    assert child.poll() is None  # still running
    audit = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert [(a["event"], a["rule"], a["via"]) for a in audit] == [("refusal", "protected", "policy")]
    assert any("not reclaimed: protected: name matches 'sleep'" in line for line in lines)
    assert drive.notifier.reclaimed == 0


def test_dry_run_says_what_it_would_do_and_does_nothing(stepped, appender, children, write_scenario, tmp_path):
    command, out = appender
    child = start_sleeper(children)
    lines: list[str] = []
    drive = Drive(write_scenario(real_idle_scenario(child.pid)), policy(command, reclaim_after="1h"), lines,
                  dry_run=True)
    try:
        drive.step(10800 // 60 + 1)
    finally:
        drive.close()
    assert child.poll() is None and not out.exists() and not (tmp_path / "audit.log").exists()
    assert lines == [
        f"policy (dry run): rule idle-big: {ME}'s pid {child.pid} holds 12.0GiB on GPU 0, idle for 2h00m: "
        f"would run {command[0]}; reclaim at 2026-01-01T03:00:00+00:00",
        f"policy: rule idle-big: pid {child.pid} on GPU 0 (dry run): would send SIGTERM to {ME}'s pid "
        f"{child.pid} holds 12.0GiB on GPU 0, idle for 3h00m",
    ]


def test_a_process_that_ran_kernels_after_its_notice_is_not_reclaimed(stepped, appender, children,
                                                                      write_scenario, tmp_path):
    command, out = appender
    child = start_sleeper(children)
    scenario = real_idle_scenario(child.pid)
    # busy from 9000 to 9060 (seen by the sample at 9000): its idle stretch starts over
    scenario["processes"][0]["sm_util"] = {"timeline": [[0, 0], [9000, 40], [9060, 0]], "interpolate": "step"}
    lines: list[str] = []
    drive = Drive(write_scenario(scenario), policy(command, reclaim_after="1h"), lines)
    try:
        drive.step(11400 // 60)
    finally:
        drive.close()
    assert child.poll() is None and not (tmp_path / "audit.log").exists()
    assert len(records(out)) == 1 and drive.notifier.reclaimed == 0


# ---------------------------------------------------------------- wiring and history

def restart_with_history(tmp_path, command, monkeypatch):
    """The recorder ran t = 0 .. 3000 (50 min, alice and dave idle throughout), then restarted at
    3060 with a policy: the new collector samples until t = 7200. Returns the say lines."""
    from vramkit.history.recorder import Recorder
    from vramkit.history.store import Store

    db = tmp_path / "history.db"
    first = Collector(open_machine(str(FIXTURES / "notices_idle.json")), interval=60)
    recorder = Recorder(Store.open(db, write=True), 60)
    first.subscribe(recorder)
    stop = threading.Event()
    for _ in range(51):  # t = 0 .. 3000
        first.sample()
        first.backend.sleep(stop, 60)
    recorder.close(first.backend.monotonic())
    first.close()

    pol = tmp_path / "policy.toml"
    pol.write_text(f'[[rule]]\nname = "idle-big"\nmin_memory = "10GiB"\nidle_for = "2h"\n'
                   f'command = {json.dumps(command)}\n')
    monkeypatch.setenv("VRAM_SIM_TIME", "3060")  # the restarted recorder's clock goes on
    second = Collector(open_machine(str(FIXTURES / "notices_idle.json")), interval=60)
    lines: list[str] = []
    close = attach_policy(second, argparse.Namespace(policy=str(pol), db=str(db), dry_run=False), lines.append)
    assert close is not None
    try:
        for _ in range((7200 - 3060) // 60 + 1):  # t = 3060 .. 7200
            second.sample()
            second.backend.sleep(stop, 60)
    finally:
        close()
        second.close()
    assert lines[0].startswith("policy: idle times from the history in ")
    assert lines[1] == f"policy {pol}: 1 rule (idle-big)"
    return lines


def test_attach_policy_seeds_idle_time_from_the_recorders_history(stepped, appender, tmp_path, monkeypatch):
    """alice has been idle since t = 0 by the history: her notice comes at 7200, 2 h after she
    became idle, not 2 h after the restart."""
    command, out = appender
    restart_with_history(tmp_path, command, monkeypatch)
    alice = [r for r in records(out) if r["pid"] == 5001]
    assert [(r["timestamp"] - EPOCH, r["idle_seconds"]) for r in alice] == [(7200, 7200.0)]


def test_a_process_busy_after_the_restart_starts_its_idle_time_over(stepped, appender, tmp_path, monkeypatch):
    """dave ran kernels at 3600-3660, after the restart: idle again from 3660, no notice by 7200."""
    command, out = appender
    restart_with_history(tmp_path, command, monkeypatch)
    assert [r["pid"] for r in records(out)] == [5001]


def test_without_a_policy_nothing_is_attached(stepped):
    if os.path.lexists("/etc/vramkit/policy.toml"):
        pytest.skip("this machine has a policy file")
    collector = Collector(open_machine(str(FIXTURES / "notices_idle.json")))
    try:
        assert attach_policy(collector, argparse.Namespace(policy=None, db=None), print) is None
    finally:
        collector.close()


def test_holdings_add_up_a_process_on_several_instances_of_one_gpu():
    from vramkit.gpu_state import Device, GpuProcess, Snapshot

    rows = [GpuProcess(pid=7, gpu=0, gpu_uuid="GPU-x", memory=GiB, mig_gi=1, idle=True, idle_for=50.0),
            GpuProcess(pid=7, gpu=0, gpu_uuid="GPU-x", memory=2 * GiB, mig_gi=2, idle=True, idle_for=30.0)]
    (h,) = holdings(Snapshot(time=0.0, gpus=[Device(index=0, uuid="GPU-x", processes=rows)]))
    assert (h.memory, h.idle_for) == (3 * GiB, 30.0)


def test_reclaim_checks_again_at_the_moment_it_runs(stepped, appender, children, write_scenario, tmp_path):
    """A reclaim waits in the worker; when it runs, the process is selected afresh: busy by now,
    it is left alone; another process under the same pid (other start ticks) is refused, audited."""
    from vramkit.history.notices import Holding

    command, out = appender
    child = start_sleeper(children)
    ticks = procs.identity(child.pid).start_ticks
    scenario = real_idle_scenario(child.pid)
    scenario["processes"][0]["sm_util"] = 60  # busy
    pol = policy(command, reclaim_after="0s")
    lines: list[str] = []
    drive = Drive(write_scenario(scenario), pol, lines)
    try:
        drive.step(1)
        noticed = Holding(child.pid, ticks, 0, None, 12 * GiB, 7200.0, "root", 0, "sleep")
        drive.notifier._reclaim(pol.rules[0], noticed)
        assert lines[-1] == (f"policy: rule idle-big: pid {child.pid} on GPU 0: no longer idle with 10.0GiB or "
                             "more: not reclaimed")
        assert not (tmp_path / "audit.log").exists()
        reused = Holding(child.pid, ticks - 1, 0, None, 12 * GiB, 7200.0, "root", 0, "sleep")
        drive.notifier._reclaim(pol.rules[0], reused)
    finally:
        drive.close()
    assert child.poll() is None
    assert "not reclaimed: identity: pid" in lines[-1]
    audit = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert [(a["event"], a["rule"], a["via"]) for a in audit] == [("refusal", "identity", "policy")]


# ---------------------------------------------------------------- the example notice scripts

EXAMPLES = Path(__file__).parent.parent / "docs" / "policy-examples"
HOSTILE_USERS = ["-froot", "a b", "$(touch /tmp/vram-pwned)", "alice\nbob", "bob;id", "", None]


def facts(user, name="python"):
    return {"rule": "idle-big", "host": "gpu7", "time": "2026-01-01T02:00:00+00:00", "timestamp": 1767232800.0,
            "user": user, "uid": 1001, "pid": 5001, "start_ticks": 99, "name": name, "gpu": 4,
            "gpu_uuid": "GPU-4", "memory_bytes": 18 * GiB, "idle_seconds": 7260.0,
            "reclaim": {"scheduled": True, "at": "2026-01-01T03:00:00+00:00", "timestamp": 1767236400.0},
            "simulated": False}


@pytest.fixture
def fake_tools(tmp_path):
    """A PATH whose who, write, mail and curl record their argv and stdin in tmp_path/calls."""
    import subprocess
    import sys

    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    calls.mkdir()
    recorder = (f"#!{sys.executable}\nimport json, os, sys\n"
                f"n = len(os.listdir({str(calls)!r}))\n"
                f"open(os.path.join({str(calls)!r}, '%03d.json' % n), 'w').write(json.dumps("
                "{'argv': [os.path.basename(sys.argv[0])] + sys.argv[1:], 'stdin': sys.stdin.read()}))\n")
    for tool in ("write", "mail", "curl"):
        (bin_dir / tool).write_text(recorder)
        (bin_dir / tool).chmod(0o755)
    (bin_dir / "who").write_text("#!/bin/sh\nprintf '%s\\n' 'root     pts/3        2026-01-01 01:00 (10.0.0.9)' "
                                 "'other    pts/4        2026-01-01 01:00' 'root     :0           2026-01-01 01:00' "
                                 "'root     pts/5;id     2026-01-01 01:00'\n")
    (bin_dir / "who").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(tmp_path)}

    def run(script, data, *args):
        done = subprocess.run([str(EXAMPLES / script), *args], input=json.dumps(data).encode(), env=env,
                              capture_output=True, timeout=30)
        got = [json.loads(p.read_text()) for p in sorted(calls.iterdir())]
        for p in calls.iterdir():
            p.unlink()
        return done.returncode, done.stderr.decode(), got
    return run


@pytest.mark.parametrize("user", HOSTILE_USERS)
def test_example_scripts_refuse_a_hostile_user_name_and_run_nothing(fake_tools, user):
    for script in ("vram-notice-terminals", "vram-notice-mail"):
        rc, err, calls = fake_tools(script, facts(user))
        assert rc == 1 and err.strip().endswith("not a user name: skipped") and calls == [], script
    assert not os.path.exists("/tmp/vram-pwned")


def test_the_terminal_script_writes_to_each_of_the_users_terminals(fake_tools):
    rc, err, calls = fake_tools("vram-notice-terminals", facts("root", name="x'; rm -rf ~ #"))
    assert rc == 0 and err == ""
    assert [c["argv"] for c in calls] == [["write", "root", "pts/3"]]  # not :0, not another's, not 'pts/5;id'
    assert calls[0]["stdin"] == (
        "vram on gpu7: your process 5001 (x'; rm -rf ~ #) holds 18.0 GiB on GPU 4 and has run no kernels for "
        "2h01m.\nPlease free the GPU for others: end it, or restart the notebook kernel, when you are done.\n"
        "If it is still idle at 2026-01-01T03:00:00+00:00, it will be stopped (SIGTERM) to free the memory.\n")


def test_the_mail_script_mails_the_owner(fake_tools):
    rc, err, calls = fake_tools("vram-notice-mail", facts("root"))
    assert rc == 0 and err == ""
    (call,) = calls
    assert call["argv"] == ["mail", "-s", "[vram] gpu7: GPU 4 held idle by your process 5001", "--", "root"]
    assert call["stdin"].startswith("Your process 5001 (python) on gpu7 holds 18.0 GiB of GPU 4 (GPU-4)")
    assert json.loads(call["stdin"].split("The facts, as vram sent them:\n", 1)[1]) == facts("root")


def test_the_webhook_script_posts_json_built_by_an_encoder(fake_tools, tmp_path):
    url = tmp_path / "webhook-url"
    url.write_text("https://hooks.example.com/T0/B0/xyz\n")
    hostile = facts('bob"}, "text": "pwned', name='"\\\n')
    rc, err, calls = fake_tools("vram-notice-webhook", hostile, str(url))
    assert rc == 0 and err == ""
    (call,) = calls
    assert call["argv"][-2:] == ["--", "https://hooks.example.com/T0/B0/xyz"]
    payload = json.loads(call["stdin"])
    assert payload["vram"] == hostile and payload["text"].startswith('gpu7: bob"}, "text": "pwned\'s process 5001')
    url.write_text("http://insecure.example.com/\n")
    rc, err, calls = fake_tools("vram-notice-webhook", hostile, str(url))
    assert rc == 1 and "does not hold an https:// URL" in err and calls == []
