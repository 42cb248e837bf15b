"""vram serve with a history store (--db) seeds its idle clock from it, as kill and doctor do: a
holder idle for the 20 minutes `vram record` watched is idle ~20 minutes at serve's first
reading, not 0 s (issue 32 item 4). Without --db serve counts from its own start."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request

from helpers import clean_env, run_vram, vram_argv

ALICE = 38817  # demo's Jupyter kernel: holds 18 GiB on GPU 4 and runs nothing
RECORDED = 1200  # seconds the recorder watched, on a stepped clock that ends now


def idle_seconds(db: str | None, env: dict[str, str]) -> float:
    argv = vram_argv("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--interval", "0.5s",
                     *(["--db", db] if db else []))
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stderr.readline()
        port = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert port, line
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=10) as r:
                text = r.read().decode()
            found = re.search(rf'^vram_process_idle_seconds{{[^}}]*pid="{ALICE}"[^}}]*}} (\S+)$', text, re.M)
            if found:
                return float(found.group(1))
            time.sleep(0.2)
        raise AssertionError("no idle series for alice's kernel")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_continues_the_recorded_idle_time(tmp_path):
    db = str(tmp_path / "history.db")
    epoch = time.time() - RECORDED
    recorded = run_vram("record", "--simulate", "demo", "--db", db, "--interval", "60s", "--duration", f"{RECORDED}s",
                        env=clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(epoch)), timeout=120)
    assert recorded.rc == 0, recorded.err
    env = clean_env(VRAM_SIM_EPOCH=str(epoch))
    seeded = idle_seconds(db, env)
    assert seeded >= RECORDED - 120, seeded  # the recorder's first sample of it, not serve's start
    fresh = idle_seconds(None, env)
    assert fresh < RECORDED - 120, fresh  # without history: from serve's own first reading
