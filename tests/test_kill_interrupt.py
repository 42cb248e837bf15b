"""Ctrl-C while `vram kill` waits: it reports what was signalled and what is known, closes each
audit record with an outcome, and exits 130 (issue 31, item 6)."""

from __future__ import annotations

import json
import select
import signal
import subprocess

from helpers import clean_env, real_gpu_scenario, reap, start_python, vram_argv, wait_for

# Ignores SIGTERM, and says on stdout that one came: the test presses Ctrl-C once the signal went.
NOTES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: print('term', flush=True)); "
              "print('ready', flush=True); time.sleep(600)")


def _records(path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def test_ctrl_c_while_waiting_reports_and_closes_the_audit_record(children, write_scenario, tmp_path):
    stubborn = start_python(children, NOTES_TERM)
    path = write_scenario(real_gpu_scenario({stubborn.pid: {"0": "4GiB"}}))
    log = tmp_path / "audit" / "audit.log"
    env = clean_env(VRAM_AUDIT_LOG=str(log), HOME=str(tmp_path), XDG_CONFIG_HOME=None, XDG_STATE_HOME=None)
    proc = subprocess.Popen(vram_argv("kill", "--simulate", str(path), str(stubborn.pid), "--yes",
                                      "--timeout", "10m"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert wait_for(lambda: any(r["event"] == "signal" for r in _records(log)), timeout=20)
        assert select.select([stubborn.stdout], [], [], 20)[0] and stubborn.stdout.readline().strip() == b"term"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        reap(proc)
    assert proc.returncode == 130, err
    assert "internal error" not in err and "Traceback" not in err
    assert "interrupted" in err and len(err.strip().splitlines()) == 1
    row = next(line for line in out.splitlines() if line.lstrip().startswith(str(stubborn.pid)))
    assert "signalled" in row
    assert "interrupted (Ctrl-C) while waiting" in out and "SIGTERM" in out
    assert "GPU 0" in out  # what each GPU holds now
    records = [r for r in _records(log) if r["target"]["pid"] == stubborn.pid]
    assert [r["event"] for r in records] == ["signal", "outcome"]
    assert records[-1]["result"] == "interrupted" and records[-1]["sent"] == ["SIGTERM"]
    assert records[-1]["signal"] == "SIGTERM"
    assert stubborn.poll() is None  # it ignored SIGTERM and vram sent nothing more
