"""The audit log against a full disk and a hostile neighbour (issue 13 item 6): nothing is
signalled without a record on disk first, and nothing planted at or on the way to the log's
path can hang vram, redirect its writes, or pass as a log."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import time

import pytest
from helpers import clean_env, proc_state, real_gpu_scenario, start_python, start_sleeper, vram_argv

from vramkit import audit, procs
from vramkit.audit import AuditError, AuditLog
from vramkit.killing import Criteria, execute, kill, make_plan
from vramkit.machine import open_machine


def alive(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z")


@pytest.fixture
def env(tmp_path):
    return clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                     XDG_STATE_HOME=None, COLUMNS="200", PYTHONDONTWRITEBYTECODE="1")


def _kill(env, *args: str, limit: int | None = None, timeout: float = 30) -> tuple[int, list[str]]:
    def preexec() -> None:
        if limit is not None:  # a disk that is full for this file: appending fails with EFBIG
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    p = subprocess.run(vram_argv("kill", *args), capture_output=True, text=True, env=env, timeout=timeout,
                       stdin=subprocess.DEVNULL, preexec_fn=preexec)
    return p.returncode, p.stderr.strip().splitlines()


def test_a_fifo_as_the_log_fails_at_once_and_signals_nothing(children, write_scenario, env, tmp_path):
    fifo = tmp_path / "audit.log"
    os.mkfifo(fifo)
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    started = time.monotonic()
    rc, err = _kill(env, "--simulate", str(path), str(child.pid), "--yes", timeout=20)
    assert time.monotonic() - started < 15
    assert rc == 1 and len(err) == 1 and "audit log" in err[0] and "not a regular file" in err[0], err
    assert "nothing was signalled" in err[0] and alive(child.pid)
    # With a reader on the FIFO (the open would succeed) it is refused all the same.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        rc, err = _kill(env, "--simulate", str(path), str(child.pid), "--yes", timeout=20)
    finally:
        os.close(reader)
    assert rc == 1 and len(err) == 1 and "not a regular file" in err[0] and alive(child.pid)


def test_a_full_disk_signals_nothing(children, write_scenario, env, tmp_path):
    # A real write failure from the kernel: the log file is exactly as large as vram may make
    # files (RLIMIT_FSIZE), so the first append fails as on a full disk (EFBIG instead of ENOSPC).
    log = tmp_path / "audit.log"
    line = b'{"event": "earlier"}\n'
    limit = len(line) * 1000
    log.write_bytes(line * 1000)
    log.chmod(0o600)
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    rc, err = _kill(env, "--simulate", str(path), str(child.pid), "--yes", "--timeout", "2", limit=limit)
    assert rc == 1 and len(err) == 1 and "audit log" in err[0] and "too large" in err[0].lower(), err
    assert alive(child.pid)
    assert log.read_bytes() == line * 1000


def test_enospc_on_the_log_signals_nothing(children, write_scenario, tmp_path, monkeypatch, kill_sandbox):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    log = AuditLog(tmp_path / "audit.log").open()
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        if fd == log._fd:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(audit.os, "write", full)
    machine = open_machine(str(path))
    try:
        plan = make_plan(machine, Criteria(pids=(child.pid,)))
        with pytest.raises(AuditError, match="No space left on device"):
            execute(machine, plan, signal.SIGTERM, timeout=1, audit=log)
    finally:
        machine.close()
        log.close()
    assert alive(child.pid) and plan.targets[0].signals == []


def test_the_signal_record_is_on_disk_before_the_signal(children, write_scenario, tmp_path, monkeypatch,
                                                         kill_sandbox):
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    log_path = tmp_path / "audit.log"
    seen: list[tuple[int, list[dict]]] = []
    synced: list[int] = []
    real_send, real_fsync = procs.Pinned.send, os.fsync

    def send(self: procs.Pinned, sig: int) -> str | None:
        seen.append((sig, [json.loads(x) for x in log_path.read_text().splitlines()]))
        assert synced, "the record was not fsync'd before the signal"
        return real_send(self, sig)

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(procs.Pinned, "send", send)
    monkeypatch.setattr(audit.os, "fsync", fsync)
    report = kill([child.pid], timeout=5, simulate=str(path), audit_log=log_path)
    assert report.targets[0].status == "exited"
    assert [sig for sig, _ in seen] == [signal.SIGTERM]
    records = seen[0][1]
    assert [(r["event"], r["target"]["pid"], r["signal"], r["result"]) for r in records] == [
        ("signal", child.pid, "SIGTERM", "sending")]


def test_a_real_child_finds_the_record_when_it_gets_the_signal(children, write_scenario, env, tmp_path):
    log = tmp_path / "audit.log"
    code = ("import json, os, signal, sys, time\n"
            "def on_term(*_):\n"
            f"    text = open({str(log)!r}).read()\n"
            "    ok = any(json.loads(x)['event'] == 'signal' and json.loads(x)['target']['pid'] == os.getpid()\n"
            "             for x in text.splitlines())\n"
            "    print('recorded' if ok else 'unrecorded', flush=True)\n"
            "    os._exit(0)\n"
            "signal.signal(signal.SIGTERM, on_term)\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)\n")
    child = start_python(children, code)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    rc, err = _kill(env, "--simulate", str(path), str(child.pid), "--yes", "--timeout", "5")
    assert rc == 0, err
    assert child.stdout.readline().strip() == b"recorded"


def test_a_symlink_in_a_shared_directory_on_the_way_is_not_followed(children, write_scenario, env, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (shared / "logs").symlink_to(elsewhere)  # as another user would plant it
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    rc, err = _kill({**env, "VRAM_AUDIT_LOG": str(shared / "logs" / "audit.log")},
                    "--simulate", str(path), str(child.pid), "--yes")
    assert rc == 1 and len(err) == 1 and "symlink" in err[0] and "nothing was signalled" in err[0], err
    assert list(elsewhere.iterdir()) == [] and alive(child.pid)


def test_a_symlink_in_a_private_directory_is_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to("real")
    with AuditLog(tmp_path / "link" / "sub" / "audit.log") as log:
        log.write("outcome", result="exited")
    assert json.loads((real / "sub" / "audit.log").read_text())["result"] == "exited"


def test_a_world_writable_log_is_refused(children, write_scenario, env, tmp_path):
    log = tmp_path / "audit.log"
    log.write_text('{"event": "signal", "forged": true}\n')
    log.chmod(0o666)
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "1GiB"}}))
    rc, err = _kill(env, "--simulate", str(path), str(child.pid), "--yes")
    assert rc == 1 and len(err) == 1 and "everyone may write it" in err[0], err
    assert alive(child.pid)
