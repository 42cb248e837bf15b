"""vram record --policy: the idle-holder notices wired into the recorder (issue 11 item 5), as a
user runs it: a real recorder process on the stepped clock, a real notice command."""

from __future__ import annotations

import json
import os
import stat

from helpers import assert_one_line_error, clean_env, run_vram

EPOCH = 1767225600  # 2026-01-01 00:00 UTC


def _notice_command(tmp_path):
    out = tmp_path / "notices.jsonl"
    script = tmp_path / "notify"
    script.write_text(f"#!/bin/sh\ncat >> {out}\necho >> {out}\n")
    script.chmod(0o755)
    return script, out


def _policy(tmp_path, command, extra: str = "") -> os.PathLike:
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[[rule]]\nname = "idle-big"\nmin_memory = "10GiB"\nidle_for = "2h"\n'
                      f'command = ["{command}"]\nrepeat = "6h"\n{extra}')
    policy.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return policy


def _record(tmp_path, *args: str):
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=None,
                    VRAM_AUDIT_LOG=str(tmp_path / "audit.log"))
    return run_vram("record", "--simulate", "demo", "--db", str(tmp_path / "h.db"), "--interval", "60",
                    "--duration", "4h", *args, env=env, timeout=120)


def test_the_recorder_runs_the_policy_s_command_for_an_idle_holder(tmp_path):
    command, out = _notice_command(tmp_path)
    done = _record(tmp_path, "--policy", str(_policy(tmp_path, command)))
    assert done.rc == 0, done.err
    notices = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    # demo's alice holds 18 GiB on GPU 4 and runs nothing: one notice when idle for 2 h, at 02:00.
    assert [(n["user"], n["pid"], n["gpu"], n["idle_seconds"], n["timestamp"]) for n in notices] == [
        ("alice", 38817, 4, 7200.0, EPOCH + 7200)]
    assert any("rule idle-big: alice's pid 38817 holds 18.0GiB on GPU 4, idle for 2h00m" in line
               for line in done.err_lines)
    assert done.err_lines[-1].startswith("vram record: stopped: ")


def test_a_dry_run_says_what_it_would_do_and_runs_nothing(tmp_path):
    command, out = _notice_command(tmp_path)
    done = _record(tmp_path, "--policy", str(_policy(tmp_path, command, 'reclaim_after = "1h"\n')), "--dry-run")
    assert done.rc == 0, done.err
    assert not out.exists() and not (tmp_path / "audit.log").exists()
    assert any("would run" in line for line in done.err_lines)


def test_a_malformed_policy_stops_the_recorder_before_it_records(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nname = "x"\nmin_memory = "10 gigs"\nidle_for = "2h"\ncommand = ["/bin/true"]\n')
    bad.chmod(0o600)
    result = _record(tmp_path, "--policy", str(bad))
    assert_one_line_error(result, 2, "--policy", "min_memory")
    assert not (tmp_path / "h.db").exists()
