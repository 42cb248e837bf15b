"""`vram kill` on real processes that a simulated scenario lists as GPU processes: they are
signalled, waited for, escalated with --force, and the freed memory is reported per GPU (the
simulator frees a real process's memory when it exits, as the driver does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import (
    ESCAPE,
    IGNORE_TERM,
    assert_one_line_error,
    clean_env,
    cmdline,
    needs_root,
    proc_state,
    real_gpu_scenario,
    run_vram,
    run_vram_answering,
    run_vram_tty,
    start_python,
    start_sleeper,
    wait_for,
)

GiB = 1024**3
ON_USR1 = ("import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *a: print('usr1', flush=True)); "
           "print('ready', flush=True); time.sleep(600)")


def alive(proc: subprocess.Popen) -> bool:
    return proc_state(proc.pid) not in (None, "Z")


@pytest.fixture
def env(tmp_path):
    """A clean environment with the audit log in tmp_path and HOME there (no user protections)."""
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit" / "audit.log"), HOME=str(tmp_path),
                     XDG_CONFIG_HOME=None, XDG_STATE_HOME=None)


def kill(path, *args: str, env: dict[str, str]):
    return run_vram("kill", "--simulate", str(path), *args, env=env)


def by_pid(result) -> dict[int, dict]:
    return {t["pid"]: t for t in result.json()["targets"]} if result.rc == 0 else {
        t["pid"]: t for t in json.loads(result.out)["targets"]}


def test_terminates_gpu_processes_and_reports_freed_memory(children, write_scenario, env):
    a, b = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({a.pid: {"0": "6GiB"}, b.pid: {"0": "2GiB", "1": "3GiB"}}))
    result = kill(path, str(a.pid), str(b.pid), "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc == 0, result.err
    data = result.json()
    assert data["ok"] is True and data["signal"] == "SIGTERM" and data["dry_run"] is False
    targets = {t["pid"]: t for t in data["targets"]}
    assert targets[a.pid]["status"] == "exited" and targets[b.pid]["status"] == "exited"
    assert targets[a.pid]["signals"] == ["SIGTERM"]
    assert targets[a.pid]["memory"] == 6 * GiB and targets[b.pid]["memory"] == 5 * GiB
    assert [g["gpu"] for g in targets[b.pid]["gpus"]] == [0, 1]
    gpus = {g["index"]: g for g in data["gpus"]}
    assert gpus[0]["memory_used_before"] == 8 * GiB and gpus[0]["memory_used_after"] == 0
    assert gpus[0]["freed"] == 8 * GiB and gpus[1]["freed"] == 3 * GiB
    assert gpus[0]["still_holding"] == [] and gpus[1]["still_holding"] == []
    assert a.wait(5) == -signal.SIGTERM and b.wait(5) == -signal.SIGTERM


def test_text_report_says_what_was_freed_per_gpu(children, write_scenario, env):
    a, keep = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({a.pid: {"0": "6GiB"}, keep.pid: {"0": "2GiB"}}))
    result = kill(path, str(a.pid), "--yes", "--timeout", "5", env=clean_env(**{**env, "COLUMNS": "200"}))
    assert result.rc == 0, result.err
    assert "SIMULATED" in result.out.splitlines()[0]
    row = next(line for line in result.out.splitlines() if line.lstrip().startswith(str(a.pid)))
    assert "exited" in row and "6.0GiB" in row and "sleep 600" in row
    gpu0 = next(line for line in result.out.splitlines() if line.startswith("GPU 0"))
    assert "8.0GiB -> 2.0GiB used" in gpu0 and "6.0GiB freed" in gpu0
    held = [line for line in result.out.splitlines() if "still held" in line]
    assert len(held) == 1 and str(keep.pid) in held[0] and "2.0GiB" in held[0]
    assert "\x1b" not in result.out  # not a terminal: no colours
    assert alive(keep)


@pytest.mark.slow
def test_a_process_ignoring_sigterm_is_still_running_then_force_kills_it(children, write_scenario, env):
    stubborn = start_python(children, IGNORE_TERM)
    path = write_scenario(real_gpu_scenario({stubborn.pid: {"1": "4GiB"}}))

    first = kill(path, str(stubborn.pid), "--yes", "--timeout", "0.5", "--json", env=env)
    assert first.rc == 1
    target = by_pid(first)[stubborn.pid]
    assert target["status"] == "still running" and target["signals"] == ["SIGTERM"]
    assert any("--force" in note for note in target["notes"])
    assert alive(stubborn)
    gpu1 = json.loads(first.out)["gpus"][0]
    assert gpu1["freed"] == 0 and [p["pid"] for p in gpu1["still_holding"]] == [stubborn.pid]

    second = kill(path, str(stubborn.pid), "--yes", "--timeout", "0.5", "--force", "--json", env=env)
    assert second.rc == 0, second.err
    target = by_pid(second)[stubborn.pid]
    assert target["status"] == "exited" and target["signals"] == ["SIGTERM", "SIGKILL"]
    assert second.json()["gpus"][0]["freed"] == 4 * GiB
    assert stubborn.wait(5) == -signal.SIGKILL


@pytest.mark.slow
def test_text_says_still_running_and_suggests_force(children, write_scenario, env):
    stubborn = start_python(children, IGNORE_TERM)
    path = write_scenario(real_gpu_scenario({stubborn.pid: {"0": "1GiB"}}))
    result = kill(path, str(stubborn.pid), "--yes", "--timeout", "0.3", env=env)
    assert result.rc == 1
    assert "still running" in result.out and "--force" in result.out
    assert "nothing freed" in result.out


def test_signal_kill_needs_no_force(children, write_scenario, env):
    stubborn = start_python(children, IGNORE_TERM)
    path = write_scenario(real_gpu_scenario({stubborn.pid: {"0": "1GiB"}}))
    result = kill(path, str(stubborn.pid), "--yes", "--signal", "KILL", "--timeout", "3", "--json", env=env)
    assert result.rc == 0, result.err
    assert by_pid(result)[stubborn.pid]["signals"] == ["SIGKILL"]


@pytest.mark.slow  # vram looks a second for an exit after USR1
def test_a_signal_that_does_not_end_the_process_is_reported_as_signalled(children, write_scenario, env):
    child = start_python(children, ON_USR1)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--yes", "--signal", "USR1", "--json", env=env)
    assert result.rc == 0, result.err
    assert by_pid(result)[child.pid]["status"] == "signalled"
    assert child.stdout.readline().strip() == b"usr1"
    assert alive(child)


def test_a_stopped_process_is_continued_so_it_can_end(children, write_scenario, env):
    child = start_sleeper(children)
    child.send_signal(signal.SIGSTOP)
    assert wait_for(lambda: proc_state(child.pid) == "T")
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--yes", "--timeout", "3", "--json", env=env)
    assert result.rc == 0, result.err
    target = by_pid(result)[child.pid]
    assert target["status"] == "exited" and target["signals"] == ["SIGTERM", "SIGCONT"]


@pytest.mark.slow
def test_dry_run_signals_nothing(children, write_scenario, env, tmp_path):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "3GiB"}}))
    result = kill(path, str(child.pid), "--dry-run", env=env)
    assert result.rc == 0, result.err
    assert "dry run" in result.out and "SIGTERM" in result.out and str(child.pid) in result.out
    as_json = kill(path, str(child.pid), "--dry-run", "--json", env=env).json()
    assert as_json["dry_run"] is True and as_json["targets"][0]["status"] == "would signal"
    assert as_json["targets"][0]["signals"] == []
    time.sleep(0.2)
    assert alive(child)
    assert not (tmp_path / "audit").exists()  # nothing happened, nothing logged


def test_without_a_terminal_and_without_yes_it_refuses(children, write_scenario, env, tmp_path):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "3GiB"}}))
    result = kill(path, str(child.pid), env=env)
    assert_one_line_error(result, 2, "--yes", "--dry-run", "not a terminal")
    time.sleep(0.2)
    assert alive(child)
    assert not (tmp_path / "audit").exists()


def test_asks_and_answering_no_signals_nothing(children, write_scenario, env):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "3GiB"}}))
    result = run_vram_answering("kill", "--simulate", str(path), str(child.pid), answer="n\n", env=env)
    assert result.rc == 1
    assert "Send SIGTERM to this process? [y/N]" in result.err
    # The question comes after the list of what would be signalled: pid, user, GPU, memory, age, command.
    header = next(line for line in result.out.splitlines() if "PID" in line)
    assert header.split()[:6] == ["PID", "USER", "GPU", "MEMORY", "AGE", "ACTION"] and "COMMAND" in header
    row = next(line for line in result.out.splitlines() if line.lstrip().startswith(str(child.pid)))
    assert "3.0GiB" in row and "sleep 600" in row and "SIGTERM" in row
    assert "nothing was signalled" in result.out
    time.sleep(0.2)
    assert alive(child)


def test_asks_and_answering_yes_signals(children, write_scenario, env):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "3GiB"}}))
    result = run_vram_answering("kill", "--simulate", str(path), str(child.pid), "--timeout", "5", answer="y\n",
                                env=env)
    assert result.rc == 0, result.err
    assert "exited" in result.out and "3.0GiB freed" in result.out
    assert child.wait(5) == -signal.SIGTERM


def test_gpu_selects_your_processes_on_that_gpu(children, write_scenario, env):
    on0, on1 = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({on0.pid: {"0": "1GiB"}, on1.pid: {"1": "1GiB"}}))
    result = kill(path, "--gpu", "1", "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc == 0, result.err
    assert list(by_pid(result)) == [on1.pid]
    assert on1.wait(5) == -signal.SIGTERM and alive(on0)


def test_user_selects_that_users_processes(children, write_scenario, env):
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    a, b = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({a.pid: {"0": "1GiB"}, b.pid: {"1": "1GiB"}}))
    result = kill(path, "--user", me, "--gpu", "0", "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc == 0, result.err
    assert list(by_pid(result)) == [a.pid]
    assert alive(b)


@pytest.mark.slow
def test_idle_selects_processes_on_gpus_that_stayed_at_zero_utilization(children, write_scenario, env):
    busy, idle = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({busy.pid: {"0": "1GiB"}, idle.pid: {"1": "1GiB"}}, utilization=(30, 0)))
    started = time.monotonic()
    result = kill(path, "--idle", "1s", "--yes", "--timeout", "5", "--json", env=env)
    assert time.monotonic() - started >= 1  # it sampled over the window (at least 1s: the shortest --idle)
    assert result.rc == 0, result.err
    assert list(by_pid(result)) == [idle.pid]
    assert idle.wait(5) == -signal.SIGTERM and alive(busy)


@pytest.mark.slow
def test_idle_finds_the_idle_process_on_a_busy_shared_gpu(children, write_scenario, env):
    # One GPU at 30%: the busy job's own samples say 30, the notebook's say 0 (no kernels).
    busy, idle = start_sleeper(children), start_sleeper(children)
    data = real_gpu_scenario({busy.pid: {"0": "6GiB"}, idle.pid: {"0": "2GiB"}}, utilization=(30, 0))
    data["processes"][0]["sm_util"] = 30
    data["processes"][1]["sm_util"] = 0
    result = kill(write_scenario(data), "--gpu", "0", "--idle", "1s", "--yes", "--timeout", "5", "--json",
                  env=env)
    assert result.rc == 0, result.err
    assert list(by_pid(result)) == [idle.pid]
    assert idle.wait(5) == -signal.SIGTERM and alive(busy)


def test_idle_drops_a_process_whose_gpu_gets_busy_during_the_window(children, write_scenario, env):
    child = start_sleeper(children)
    data = real_gpu_scenario({child.pid: {"1": "1GiB"}})
    data["gpus"][1]["utilization"] = {"timeline": [[0, 0], [0.3, 0], [0.35, 80]], "interpolate": "step"}
    path = write_scenario(data)
    run_env = {**env, "VRAM_SIM_EPOCH": str(time.time())}
    run_env.pop("VRAM_SIM_TIME")  # let the scenario clock run
    result = kill(path, "--idle", "1s", "--yes", "--json", env=run_env)
    assert result.rc == 0, result.err
    assert result.json()["targets"] == []
    assert alive(child)


def test_zombie_selects_orphans_holding_memory(children, write_scenario, env, strays):
    # bash starts sleep in the background and exits: the sleep is re-parented to init (an orphan).
    out = subprocess.run(["bash", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    orphan = strays.add(int(out.stdout))
    assert wait_for(lambda: cmdline(orphan) == b"sleep\x00600\x00")
    with open(f"/proc/{orphan}/status") as f:
        ppid = int(next(line for line in f if line.startswith("PPid:")).split()[1])
    if ppid != 1:
        pytest.skip(f"orphans are re-parented to a subreaper (pid {ppid}) here, not to init")
    other = start_sleeper(children)
    data = real_gpu_scenario({orphan: {"0": "2GiB"}, other.pid: {"0": "1GiB"}})
    data["processes"][0]["sm_util"] = 0  # idle on a GPU busy with other work: a stale holder (an orphan
    path = write_scenario(data)          # at work is a daemon: tests/test_kill_zombie_busy.py)
    result = kill(path, "--zombie", "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc == 0, result.err
    assert list(by_pid(result)) == [orphan]
    assert wait_for(lambda: proc_state(orphan) in (None, "Z"))
    assert alive(other)


def own_synthetic(pid: int, **fields) -> dict:
    """A scenario with one made-up process of the user running the tests (so the ownership rule,
    checked first, lets it through, as root or not) on GPU 0."""
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    data = real_gpu_scenario({})
    data["processes"] = [{"pid": pid, "user": me, "uid": os.getuid(), "command": "python train.py",
                          "gpus": {"0": "9GiB"}, **fields}]
    return data


def test_a_defunct_process_is_refused_with_the_reason(write_scenario, env):
    # Your own [python] <defunct>, re-parented to init: the zombie rule says why.
    path = write_scenario(own_synthetic(29044, state="zombie", ppid=1, command="[python] <defunct>"))
    result = kill(path, "29044", "--yes", "--json", env=env)
    assert result.rc == 1
    target = by_pid(result)[29044]
    assert target["status"] == "refused" and target["rule"] == "zombie"
    assert "reap" in target["reason"] and "holders" in target["reason"]


@needs_root("for --all-users (demo's defunct process is carol's)")
def test_another_users_defunct_process_is_refused_as_root_with_all_users(env):
    # demo's pid 29044 is carol's [python] <defunct>: root needs --all-users, then the zombie rule says why.
    result = run_vram("kill", "--simulate", "demo", "29044", "--all-users", "--yes", "--json", env=env)
    assert result.rc == 1
    target = by_pid(result)[29044]
    assert target["status"] == "refused" and target["rule"] == "zombie"
    assert "reap" in target["reason"] and "holders" in target["reason"]


def test_a_simulated_process_is_never_signalled(write_scenario, env):
    # A synthetic pid is not a real process here (a real one could have the same number).
    result = kill(write_scenario(own_synthetic(52001)), "52001", "--yes", "--json", env=env)
    assert result.rc == 1
    assert by_pid(result)[52001]["rule"] == "simulated"


@needs_root("for --all-users (demo's process 52001 is carol's)")
def test_another_users_simulated_process_is_never_signalled_as_root_with_all_users(env):
    result = run_vram("kill", "--simulate", "demo", "52001", "--all-users", "--yes", "--json", env=env)
    assert result.rc == 1
    assert by_pid(result)[52001]["rule"] == "simulated"


def test_a_pid_that_holds_no_gpu_memory_is_refused(children, write_scenario, env):
    child, other = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({other.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--yes", "--json", env=env)
    assert result.rc == 1
    target = by_pid(result)[child.pid]
    assert target["rule"] == "not-gpu" and "kill(1)" in target["reason"]
    assert alive(child)


def test_nothing_matching_is_not_an_error(write_scenario, env):
    path = write_scenario(real_gpu_scenario({}))
    result = kill(path, "--gpu", "0", "--yes", env=env)
    assert result.rc == 0, result.err
    assert "nothing to signal" in result.out


@pytest.mark.parametrize("args, needles", [
    ((), ("name what to signal",)),
    (("--gpu", "0", "--signal", "FOO"), ("--signal", "FOO")),
    (("--gpu", "0", "--force", "--signal", "USR1"), ("--force", "USR1")),
    (("--gpu", "0", "--json"), ("--json", "--yes")),
    (("--gpu", "0", "--timeout", "soon", "--yes"), ("--timeout",)),
    (("--gpu", "0", "--idle", "-5m", "--yes"), ("--idle",)),
    (("--gpu", "7", "--yes"), ("no GPU 7",)),
    (("12x",), ("not a pid",)),
])
def test_bad_usage_is_one_line_and_exit_2(write_scenario, env, args, needles):
    path = write_scenario(real_gpu_scenario({}))
    assert_one_line_error(kill(path, *args, env=env), 2, *needles)


def test_help_has_examples():
    result = run_vram("kill", "--help")
    assert result.rc == 0
    assert "examples:" in result.out and "--dry-run" in result.out and "docs/safety.md" in result.out


def test_vram_help_lists_kill():
    assert "kill" in run_vram("--help").out


def test_colour_only_on_a_terminal_and_never_with_no_color(children, write_scenario, env):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    args = ("kill", "--simulate", str(path), str(child.pid), "--dry-run")
    assert ESCAPE in run_vram_tty(*args, env=env).out
    assert ESCAPE not in run_vram_tty(*args, env={**env, "NO_COLOR": "1"}).out
    assert alive(child)


def test_hostile_command_lines_are_stripped(children, write_scenario, env):
    child = children.start([sys.executable, "-c", "import time; time.sleep(600)", "\x1b[2J", "a\nb"])
    assert wait_for(lambda: b"a\nb" in cmdline(child.pid))
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    result = kill(path, str(child.pid), "--dry-run", env={**env, "COLUMNS": "300"})
    assert "\x1b" not in result.out
    assert "?[2J a?b" in result.out
    assert by_pid(kill(path, str(child.pid), "--dry-run", "--json", env=env))[child.pid]["command"].endswith(
        "?[2J a?b")
