"""A process's name is chosen by whoever starts it (prctl(PR_SET_NAME), `exec -a`): a name rule
must not let a user make their GPU job unkillable through vram. A name protects only a process
that is credibly what the name says: run by a system account, or (where a login user runs the
real thing, as a desktop session) from the system's own executable of that name
(/proc/PID/exe, root's file in root's directories). docs/safety.md, "The protected list"."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest
from helpers import AS_NOBODY, cmdline, proc_state, real_gpu_scenario, run_vram, wait_for

from vramkit import protect as P

IS_ROOT = os.geteuid() == 0
NOBODY = 65534
PRCTL = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0); "
         "print('ready', flush=True); time.sleep(600)")


@pytest.fixture
def env(tmp_path):
    from helpers import clean_env

    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     XDG_STATE_HOME=None, COLUMNS="200")


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def login_user_process(children, how: str, name: str) -> int:
    """A login user's process named `name`: nobody's when the tests run as root, else the tester's own."""
    as_user = AS_NOBODY if IS_ROOT else ()
    if how == "exec -a":
        proc = children.start([*as_user, "bash", "-c", f"exec -a {name} sleep 600"])
        assert wait_for(lambda: cmdline(proc.pid) == f"{name}\x00600\x00".encode())
    else:
        python = "/usr/bin/python3" if IS_ROOT and os.path.exists("/usr/bin/python3") else sys.executable
        proc = subprocess.Popen([*as_user, python, "-c", PRCTL, name], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        children.procs.append(proc)
        assert proc.stdout.readline().strip() == b"ready"
        assert comm(proc.pid) == name
    return proc.pid


def kill_json(path, pid: int, env) -> dict:
    flags = ("--all-users",) if IS_ROOT else ()  # as root: what the policy's reclaim does
    result = run_vram("kill", "--simulate", str(path), str(pid), *flags, "--yes", "--timeout", "5", "--json",
                      env=env)
    assert result.rc in (0, 1), result.err
    return json.loads(result.out)


@pytest.mark.parametrize("name", ["sshd", "Xorg", "systemd"])
@pytest.mark.parametrize("how", ["prctl", "exec -a"])
def test_a_login_users_gpu_job_named_like_a_daemon_can_be_ended(children, write_scenario, env, how, name):
    pid = login_user_process(children, how, name)
    path = write_scenario(real_gpu_scenario({pid: {"0": "8GiB"}}))
    out = kill_json(path, pid, env)
    (target,) = out["targets"]
    assert target["status"] == "exited", target
    assert wait_for(lambda: not alive(pid))
    # said, not obeyed: why the name did not protect it
    assert any(f"matches '{name}'" in n and "does not protect it" in n and "not a system account" in n
               for n in target["notes"]), target["notes"]


@pytest.mark.skipif(not IS_ROOT, reason="needs root to start a root-owned process")
def test_a_system_accounts_process_named_sshd_is_still_protected(children, write_scenario, env):
    proc = children.start(["bash", "-c", "exec -a sshd sleep 600"])  # root's: uid 0 is a system account
    assert wait_for(lambda: cmdline(proc.pid) == b"sshd\x00600\x00")
    path = write_scenario(real_gpu_scenario({proc.pid: {"1": "1GiB"}}))
    out = kill_json(path, proc.pid, env)
    (target,) = out["targets"]
    assert (target["status"], target["rule"]) == ("refused", "protected")
    assert "name matches 'sshd' (built-in: remote login)" in target["reason"]
    assert alive(proc.pid)


# ---------------------------------------------------------------- the rule, on a fake /proc tree

def system_binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"no {name} here")
    real = os.path.realpath(found)
    if os.stat(real).st_uid != 0:
        pytest.skip(f"{real} is not root's here")
    return real


def fake_proc(tmp_path, pid: int, exe: str | None):
    root = tmp_path / "proc"
    (root / str(pid)).mkdir(parents=True)
    if exe is not None:
        (root / str(pid) / "exe").symlink_to(exe)
    return str(root)


def cand(pid: int = 4242, name: str = "sleep", uid: int = NOBODY, **kw) -> P.Candidate:
    base = {"pid": pid, "name": name, "argv0": name, "command": f"{name} 600", "user": "someone",
            "uids": (uid, uid, uid)}
    return P.Candidate(**{**base, **kw})


def test_the_systems_own_executable_makes_a_name_credible(tmp_path):
    sleep = system_binary("sleep")
    proc = fake_proc(tmp_path, 4242, sleep)
    exe = P.executable(4242, proc)
    assert exe.system and exe.path == sleep
    rules = P.Protection(rules=[P.Rule("name", os.path.basename(sleep), "test")], proc=proc, uid_max=999)
    refusal, note = rules.judge(cand(name=os.path.basename(sleep)))
    assert refusal is not None and refusal.rule == "protected" and note is None


def test_a_users_copy_or_another_program_does_not(tmp_path):
    copy = tmp_path / "bin" / "gnome-shell"
    copy.parent.mkdir()
    shutil.copy(system_binary("sleep"), copy)
    proc = fake_proc(tmp_path, 4242, str(copy))
    rules = P.Protection(rules=P.builtin_rules(), proc=proc, uid_max=999)
    refusal, note = rules.judge(cand(name="gnome-shell"))
    assert refusal is None
    assert "'gnome-shell' (built-in: display server)" in note and str(copy) in note
    # the system's sleep renamed Xorg: a system program, but not the one the name says
    proc2 = fake_proc(tmp_path / "b", 4243, system_binary("sleep"))
    refusal, note = P.Protection(rules=P.builtin_rules(), proc=proc2, uid_max=999).judge(cand(4243, "Xorg"))
    assert refusal is None and "is not 'Xorg'" in note


def test_sshd_and_other_system_only_names_need_a_system_account(tmp_path):
    rules = P.Protection(rules=P.builtin_rules(), proc=fake_proc(tmp_path, 4242, None), uid_max=999)
    for name in ("sshd", "nvidia-persistenced", "slurmstepd"):
        refusal, note = rules.judge(cand(name=name))
        assert refusal is None and "the real one runs as a system account" in note, name
        assert rules.judge(cand(name=name, uid=0))[0].rule == "protected"
        assert rules.judge(cand(name=name, uid=120))[0].rule == "protected"  # e.g. nvidia-persistenced's user
    # a setuid program's effective uid alone does not make a login user's process a system one
    assert rules.judge(cand(name="sshd", uids=(1000, 0, 0)))[0] is None


def test_an_unreadable_executable_is_said(tmp_path):
    rules = P.Protection(rules=P.builtin_rules(), proc=fake_proc(tmp_path, 4242, None), uid_max=999)
    refusal, note = rules.judge(cand(name="gnome-shell"))
    assert refusal is None and "its executable cannot be read" in note


def test_file_rules_name_and_command_need_credibility_user_and_exe_do_not(tmp_path):
    sleep = system_binary("sleep")
    proc = fake_proc(tmp_path, 4242, sleep)
    admin = P.parse("name tritonserver\ncommand *--serve-forever*\nuser svc-*\n"
                    f"exe {os.path.dirname(sleep)}/*\n", "/etc/vramkit/protected.conf")
    rules = P.Protection(rules=admin, proc=proc, uid_max=999, caller_uid=0)
    # a login user's python called tritonserver, with --serve-forever: neither protects it
    fake = cand(name="tritonserver", command="tritonserver --serve-forever", exe=P.Executable(
        "/home/u/venv/bin/python3", False, "its executable /home/u/venv/bin/python3 is not in a system directory"))
    refusal, note = rules.judge(fake)
    assert refusal is None and "tritonserver" in note
    refusal, note = rules.judge(fake._replace(name="python", argv0="python"))
    assert refusal is None and "anyone can put any text in a command line" in note
    # a service account's (system uid) is protected by name, as is anyone's by user or executable
    assert rules.judge(fake._replace(uids=(998, 998, 998)))[0].rule == "protected"
    assert ":3" in rules.judge(fake._replace(name="x", argv0="x", command="x", user="svc-infer"))[0].reason
    assert "executable matches" in rules.judge(cand(name="whatever"))[0].reason


def test_your_own_rules_protect_your_own_processes_as_written(tmp_path):
    mine = P.parse("name jupyter*\ncommand *--keep-me*\n", "~/.config/vramkit/protected.conf", own=True)
    rules = P.Protection(rules=mine, proc=fake_proc(tmp_path, 4242, None), uid_max=999, caller_uid=1000)
    assert rules.judge(cand(name="jupyter-lab", uid=1000))[0].rule == "protected"
    assert rules.judge(cand(name="x", command="x --keep-me", uid=1000))[0].rule == "protected"
    # another login user's process with that name: your rule is not a way for them to hide from you
    assert rules.judge(cand(name="jupyter-lab", uid=1001))[0] is None


def test_system_uid_max_follows_login_defs(tmp_path):
    defs = tmp_path / "login.defs"
    for text, want in [("SYS_UID_MAX 499\nUID_MIN 1000\n", 499), ("UID_MIN\t500\n", 499), ("", 999),
                       ("#SYS_UID_MAX 10\n", 999), ("SYS_UID_MAX 4294967294\n", 60000)]:
        defs.write_text(text)
        assert P.system_uid_max(str(defs)) == want, text
    assert P.system_uid_max(str(tmp_path / "missing")) == 999


# ---------------------------------------------------------------- protected.conf is read safely

def conf_path(tmp_path):
    conf = tmp_path / ".config" / "vramkit" / "protected.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    return conf


def own_sleeper(children) -> int:
    proc = children.start(["sleep", "600"])
    assert wait_for(lambda: cmdline(proc.pid) == b"sleep\x00600\x00")
    return proc.pid


def kill_own(write_scenario, pid: int, env) -> tuple[dict, str]:
    path = write_scenario(real_gpu_scenario({pid: {"0": "1GiB"}}))
    result = run_vram("kill", "--simulate", str(path), str(pid), "--yes", "--timeout", "5", "--json", env=env,
                      timeout=60)
    assert result.rc in (0, 1), result.err
    return json.loads(result.out), result.err


def test_a_fifo_protected_conf_does_not_hang_vram(children, write_scenario, env, tmp_path):
    os.mkfifo(conf_path(tmp_path))
    pid = own_sleeper(children)
    out, _ = kill_own(write_scenario, pid, env)
    assert out["targets"][0]["status"] == "exited"
    assert any("protected.conf ignored: not a regular file" in n for n in out["notes"])


def test_a_symlinked_protected_conf_is_not_followed(children, write_scenario, env, tmp_path):
    elsewhere = tmp_path / "elsewhere.conf"
    elsewhere.write_text("name sleep\n")
    conf_path(tmp_path).symlink_to(elsewhere)
    pid = own_sleeper(children)
    out, _ = kill_own(write_scenario, pid, env)
    assert out["targets"][0]["status"] == "exited"  # the rule behind the link was not obeyed
    assert any("protected.conf ignored: it is a symbolic link" in n for n in out["notes"])


def test_a_protected_conf_others_may_change_is_not_obeyed(children, write_scenario, env, tmp_path):
    conf = conf_path(tmp_path)
    conf.write_text("name sleep\n")
    conf.chmod(0o666)
    pid = own_sleeper(children)
    out, _ = kill_own(write_scenario, pid, env)
    assert out["targets"][0]["status"] == "exited"
    assert any("users other than its owner may change it" in n for n in out["notes"])


@pytest.mark.skipif(not IS_ROOT, reason="needs root to make a file another user's")
def test_another_users_protected_conf_is_not_obeyed(children, write_scenario, env, tmp_path):
    # e.g. root running with a user's HOME (sudo keeps it on some systems): that user's file is theirs
    conf = conf_path(tmp_path)
    conf.write_text("name sleep\n")
    os.chown(conf, NOBODY, NOBODY)
    pid = own_sleeper(children)
    out, _ = kill_own(write_scenario, pid, env)
    assert out["targets"][0]["status"] == "exited"
    assert any(f"belongs to uid {NOBODY}, not to root or you" in n for n in out["notes"])


def test_read_conf_unit(tmp_path):
    conf = tmp_path / "p.conf"
    assert P.read_conf(conf, system=False) == (None, None)  # none: fine
    conf.write_text("name x\n")
    conf.chmod(0o644)
    assert P.read_conf(conf, system=True) == ("name x\n", None)
    conf.write_text("x" * (P.MAX_CONF + 1))
    with pytest.raises(P.ProtectConfigError, match="larger than"):
        P.read_conf(conf, system=False)
    assert stat.S_IMODE(conf.stat().st_mode) == 0o644
