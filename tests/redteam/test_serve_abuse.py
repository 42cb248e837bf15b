"""vram serve under bad input and abuse, each against a real `vram serve` process: floods of
connections, slow and oversized requests, odd paths and methods, hostile user names and command
lines, bad flags, and signals with streams open. Nothing here measures time: a bound on waiting
only keeps a broken server from hanging the suite."""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from helpers import (
    Served,
    assert_one_line_error,
    clean_env,
    read_until_closed,
    run_vram,
    scenario_data,
    serving,
    vram_argv,
)
from prometheus_client.parser import text_string_to_metric_families

from vramkit.errors import RequestError
from vramkit.procs import sanitize
from vramkit.serve import http as serve_http

FLOOD = 1000
# vram serve's CLIENT_TIMEOUT (10 s), shortened through its test setting where a test only needs the server to
# drop idle connections (one test checks the default itself)
SHORT_TIMEOUT = 2.0
SHORT = {serve_http.CLIENT_TIMEOUT_ENV: str(SHORT_TIMEOUT)}
MAX_CLIENTS = 64  # requests it handles at once (a worker thread each)
MAX_PER_ADDRESS = 256  # connections it keeps from one address (these floods all come from 127.0.0.1)


@pytest.fixture
def many_files():
    """Room for FLOOD sockets in this process (the default soft limit is often 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FLOOD + 200
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the open-files limit ({hard}) is below the {want} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raw(port: int, data: bytes, read: bool = True) -> bytes:
    """Send bytes as they are (no client library normalising the path) and read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        if not read:
            return b""
        return read_until_closed(sock)


def status_of(answer: bytes) -> int | None:
    if not answer.startswith(b"HTTP/1."):
        return None
    return int(answer.split(b" ", 2)[1])


def server_load(pid: int) -> tuple[int, int]:
    """(threads, open file descriptors) of a process now."""
    threads = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                       if line.startswith("Threads:")))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def flood(port: int, n: int, request: bytes | None, pid: int, head_timeout: float = serve_http.CLIENT_TIMEOUT
          ) -> tuple[list[bytes], int, int]:
    """n connections at once, each sending `request` (None: nothing) and reading until the server
    closes it. Returns what each received, and the most threads and descriptors the server had
    meanwhile. Idle connections are held until the server's request timeout (`head_timeout`) has passed: by then
    it has closed every one it accepted (the kernel may have accepted more than its queue held:
    those the server never sees stay open on this side)."""
    sel = selectors.DefaultSelector()
    answers: dict[socket.socket, bytearray] = {}
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        answers[sock] = bytearray()
        sel.register(sock, selectors.EVENT_WRITE if request else selectors.EVENT_READ)
    open_ = set(answers)
    most_threads = most_fds = 0
    ends = time.monotonic() + (head_timeout + 5 if request is None else 120)
    while open_ and time.monotonic() < ends:
        threads, fds = server_load(pid)
        most_threads, most_fds = max(most_threads, threads), max(most_fds, fds)
        for key, events in sel.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if events & selectors.EVENT_WRITE:
                try:
                    sock.send(request or b"")
                except OSError:
                    sel.unregister(sock)
                    open_.discard(sock)
                    continue
                sel.modify(sock, selectors.EVENT_READ)
            else:
                try:
                    chunk = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if chunk:
                    answers[sock] += chunk
                else:
                    sel.unregister(sock)
                    open_.discard(sock)
    result = [bytes(a) for a in answers.values()]
    for sock in answers:
        sock.close()
    sel.close()
    return result, most_threads, most_fds


def wait_healthy(s: Served) -> int:
    """/healthz once the flood has drained (slots free as their connections end)."""
    for _ in range(200):
        try:
            code = s.get("/healthz")[0]
        except OSError:
            code = 0
        if code == 200:
            return code
        time.sleep(0.1)
    return code


def warm(s: Served) -> None:
    for path in ("/metrics", "/api/v1/snapshot", "/healthz", "/"):
        s.get(path)


# ---------------------------------------------------------------- floods

def test_a_thousand_idle_connections_are_bounded(served, many_files):
    """Idle connections cost no thread; past the per-address limit each newcomer closes the
    longest-idle one (without an answer: it asked nothing)."""
    s = served("--simulate", "demo", env=SHORT)
    warm(s)
    before = rss_kib(s.pid)
    idle_threads = server_load(s.pid)[0]
    answers, threads, fds = flood(s.port, FLOOD, None, s.pid, head_timeout=SHORT_TIMEOUT)
    assert threads <= idle_threads and fds <= MAX_PER_ADDRESS + 32, (threads, fds)
    assert all(status_of(a) is None for a in answers)
    assert s.proc.poll() is None
    assert wait_healthy(s) == 200
    after = rss_kib(s.pid)
    assert after - before < 64 * 1024, f"RSS grew from {before} KiB to {after} KiB"
    assert s.stop() == 0


def test_a_thousand_concurrent_scrapes(served, many_files):
    s = served("--simulate", "demo")
    warm(s)
    before = rss_kib(s.pid)
    idle_threads = server_load(s.pid)[0]
    answers, threads, fds = flood(s.port, FLOOD, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                  s.pid)
    assert threads <= idle_threads + MAX_CLIENTS and fds <= MAX_PER_ADDRESS + 32, (threads, fds)
    codes = [status_of(a) for a in answers]
    assert codes.count(200) >= 1
    assert set(codes) <= {200, 503, None}, set(codes)
    for a in answers:
        if status_of(a) == 200:
            body = a.split(b"\r\n\r\n", 1)[1]
            assert b"vram_gpu_memory_total_bytes" in body  # complete answers, not cut ones
    assert wait_healthy(s) == 200
    after = rss_kib(s.pid)
    assert after - before < 64 * 1024, f"RSS grew from {before} KiB to {after} KiB"
    assert s.stop() == 0


def test_connections_that_send_nothing_hold_no_slot(served):
    """64 connections that send nothing (once enough to refuse everyone 503) take nothing a
    request needs: the next is answered at once (tests/redteam/test_serve_hostile.py: the sieges)."""
    s = served("--simulate", "demo")
    idle = [socket.create_connection(("127.0.0.1", s.port), timeout=30) for _ in range(64)]
    try:
        answer = raw(s.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status_of(answer) == 200
    finally:
        for sock in idle:
            sock.close()


@pytest.mark.parametrize("setting", [None, SHORT_TIMEOUT], ids=["default", "test-setting"])
def test_a_slow_client_is_dropped_after_the_timeout(served, setting):
    """Slowloris: a header trickled a byte at a time, each byte well within the socket timeout.
    The server must close the connection while the client is still sending, and not before its
    timeout: the default (CLIENT_TIMEOUT, 10 s), or the shorter one its test setting asks for (the
    setting the idle-connection tests use)."""
    timeout = serve_http.CLIENT_TIMEOUT if setting is None else setting
    s = served("--simulate", "demo", env={} if setting is None else {serve_http.CLIENT_TIMEOUT_ENV: str(setting)})
    connected = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    closed = False
    trickle = b"X-Slow: " + b"a" * 200
    for byte in trickle[:60]:  # 30 s at two bytes a second: 3 x the default timeout
        try:
            sock.send(bytes([byte]))
        except OSError:
            closed = True
            break
        ready = selectors.DefaultSelector()
        ready.register(sock, selectors.EVENT_READ)
        if ready.select(timeout=0.5):
            try:
                closed = sock.recv(4096) == b""
            except ConnectionResetError:
                closed = True
        ready.close()
        if closed:
            break
    lasted = time.monotonic() - connected
    sock.close()
    assert closed, "the server kept a client that trickled its headers"
    # The server's deadline runs from when it accepted the connection, after `connected`: whatever the load,
    # a connection closed sooner would mean a shorter timeout than this server was given.
    assert lasted >= timeout, f"closed after {lasted:.1f} s, before the {timeout:g} s timeout"
    assert s.get("/healthz")[0] == 200


# ---------------------------------------------------------------- oversized and odd requests

def test_a_very_long_request_line_is_refused(served):
    s = served("--simulate", "demo")
    answer = raw(s.port, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(answer) == 414


def test_many_headers_are_refused(served):
    s = served("--simulate", "demo")
    headers = b"".join(b"X-%d: v\r\n" % i for i in range(150))
    assert status_of(raw(s.port, b"GET /metrics HTTP/1.1\r\n" + headers + b"\r\n")) == 431


def test_a_huge_request_head_is_refused(served):
    """Under http.server's 100 headers of 64 KiB each (6 MiB a connection, 64 connections at once)."""
    s = served("--simulate", "demo")
    headers = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 8000) for i in range(20))
    assert status_of(raw(s.port, b"GET /metrics HTTP/1.1\r\n" + headers + b"\r\n")) == 431
    assert s.get("/healthz")[0] == 200


@pytest.mark.parametrize("path", [
    "/nope", "/static/../x", "/static/..%2fhttp.py", "/static/%2e%2e/%2e%2e/etc/passwd", "/static/",
    "/static/index.html/..", "/static//app.js", "//etc/passwd", "/static/app.js%00", "/metrics/../../x",
    "/static/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/static/APP.JS", "/api/v1/",
])
def test_unknown_paths_and_traversal_are_404(served_once, path):
    answer = raw(served_once.port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert status_of(answer) == 404, answer[:200]
    assert b"root:" not in answer


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "FOO"])
def test_every_method_but_get_and_head_is_405(served_once, method):
    answer = raw(served_once.port, f"{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc".encode())
    assert status_of(answer) == 405 and b"Allow: GET, HEAD" in answer


def test_garbage_is_400_and_the_server_goes_on(served):
    s = served("--simulate", "demo")
    for junk in (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + os.urandom(64) + b"\r\n\r\n",
                 b"GET\r\n\r\n", b"\xff\xfe\xfd /metrics HTTP/1.1\r\n\r\n", b"GET /metrics HTTP/9.9\r\n\r\n"):
        assert status_of(raw(s.port, junk)) in (400, 405, 505, None)
    assert s.get("/healthz")[0] == 200
    assert s.proc.poll() is None


@pytest.fixture(scope="module")
def served_once():
    s = Served("--simulate", "demo")
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()


# ---------------------------------------------------------------- hostile text

HOSTILE_USERS = ["ev\u001b[31mil\"q\\b\nx", "{}=,\"\\", "\u202eeman", "tab\there", "zw\u200bsp", "ok-user"]
HOSTILE_COMMANDS = [
    "python -c \"print('\u001b]0;pwned\u0007')\" --token=SECRET-ONE \\ \n next",
    "train.py --password 'SECRET-TWO' \u202e evil",
    "a} b{c=\"d\" SECRET-THREE # \r\n",
    "\u001b[2J\u001b[H clear SECRET-FOUR",
    "quote\" back\\slash SECRET-FIVE",
    "plain SECRET-SIX",
]


def hostile_scenario(tmp_path: Path, users=HOSTILE_USERS, commands=HOSTILE_COMMANDS) -> Path:
    data = {"name": "hostile", "gpus": [{"memory_total": "80GiB"}, {"memory_total": "80GiB"}],
            "processes": [{"pid": 100 + i, "gpus": {str(i % 2): f"{i + 1}GiB"}, "user": user, "command": command}
                          for i, (user, command) in enumerate(zip(users, commands))]}
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    return path


def parse(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_hostile_names_still_parse_and_no_command_line_is_exported(tmp_path, served):
    s = served("--simulate", str(hostile_scenario(tmp_path)))
    code, text, _ = s.get("/metrics")
    assert code == 200
    families = parse(text)
    memory = families["vram_process_memory_bytes"]
    assert len(memory) == len(HOSTILE_USERS)
    users = {sample.labels["user"] for sample in memory}
    assert users == {sanitize(u) for u in HOSTILE_USERS}  # escapes stripped, quotes and backslashes kept
    assert not any("\x1b" in u or "\n" in u or "\u202e" in u for u in users)
    assert all("command" not in sample.labels for sample in memory)
    for command in HOSTILE_COMMANDS:  # not the command, nor its sanitised form, nor its secret
        secret = next(w for w in command.split() if "SECRET" in w).strip("'")
        assert command not in text and sanitize(command) not in text and secret not in text
    snapshot = json.loads(s.get("/api/v1/snapshot")[1])
    assert "SECRET" not in json.dumps(snapshot)
    assert all(p["command"] is None for g in snapshot["gpus"] for p in g["processes"])
    assert s.stop() == 0


def test_process_commands_exports_them_sanitised(tmp_path, served):
    s = served("--simulate", str(hostile_scenario(tmp_path)), "--process-commands")
    text = s.get("/metrics")[1]
    memory = parse(text)["vram_process_memory_bytes"]
    exported = {sample.labels["command"] for sample in memory}
    assert exported == {sanitize(c) for c in HOSTILE_COMMANDS}
    assert not any("\x1b" in c or "\n" in c or "\r" in c for c in exported)
    snapshot = json.loads(s.get("/api/v1/snapshot")[1])
    assert {p["command"] for g in snapshot["gpus"] for p in g["processes"]} == exported


def test_lone_surrogates_in_names(tmp_path, served):
    """Names that were not UTF-8 ("\\udcff" in a scenario, as surrogateescape decodes a bad byte)."""
    path = hostile_scenario(tmp_path, ["lone\ud800sur", "x\udcffy"], ["bad \udcff byte SECRET-SEVEN", "ok"])
    s = served("--simulate", str(path))
    code, text, _ = s.get("/metrics")  # Served.get decodes strictly: the body is UTF-8
    assert code == 200
    users = {sample.labels["user"] for sample in parse(text)["vram_process_memory_bytes"]}
    assert len(users) == 2 and not any(0xD800 <= ord(c) <= 0xDFFF for u in users for c in u)
    assert "SECRET" not in text
    code, body, _ = s.get("/api/v1/snapshot")
    assert code == 200 and len(json.loads(body)["gpus"]) == 2


def test_a_failing_answer_is_a_500_said_once_and_the_server_goes_on(capsys):
    """Whatever breaks building one answer costs that answer, not the server, and is said once
    on stderr (not a traceback per request)."""
    import urllib.error
    import urllib.request

    from vramkit.machine import open_machine
    from vramkit.serve.service import Options, Service

    service = Service(open_machine("demo"), Options(interval=0.2))
    with serving(service) as server:
        def broken(*_: object) -> bytes:
            raise RuntimeError("a bug building /metrics")
        service.metrics = broken  # type: ignore[method-assign]
        base = f"http://127.0.0.1:{server.server_address[1]}"
        for _ in range(3):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(base + "/metrics", timeout=10)
            assert caught.value.code == 500
        with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
            assert r.status == 200
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines() == ["vram serve: internal error answering a request: RuntimeError: a bug building /metrics"]


# ---------------------------------------------------------------- the series cap

def test_the_process_series_cap(served):
    s = served("--simulate", "demo", "--max-process-series", "5")
    families = parse(s.get("/metrics")[1])
    for name in ("vram_process_memory_bytes", "vram_process_idle_seconds", "vram_process_sm_utilization_ratio"):
        assert len(families[name]) == 5, name  # demo reports every process's SM share
    listed = run_vram("ps", "--simulate", "demo", "--json").json()["processes"]
    held = sorted((p["memory"] for p in listed), reverse=True)
    kept = sorted((sample.value for sample in families["vram_process_memory_bytes"]), reverse=True)
    assert kept == held[:5]  # the largest holders
    assert s.stop() == 0


def test_the_dropped_count_is_the_same_reading_s(served):
    s = served("--simulate", "demo", "--max-process-series", "5")
    rows = len(run_vram("ps", "--simulate", "demo", "--json").json()["processes"])
    dropped = parse(s.get("/metrics")[1])["vram_process_series_dropped"]
    assert [sample.value for sample in dropped] == [rows - 5]


# ---------------------------------------------------------------- bad flags and addresses

@pytest.mark.parametrize("interval", ["abc", "0s", "-1s", "nan", "2h", "1e400s", ""])
def test_a_bad_interval_is_one_line_and_exit_2(interval):
    assert_one_line_error(run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--interval", interval),
                          2, "--interval")


def test_the_client_timeout_setting(monkeypatch):
    monkeypatch.delenv(serve_http.CLIENT_TIMEOUT_ENV, raising=False)
    assert serve_http.client_timeout() == serve_http.CLIENT_TIMEOUT == 10
    monkeypatch.setenv(serve_http.CLIENT_TIMEOUT_ENV, "2.5")
    assert serve_http.client_timeout() == 2.5


@pytest.mark.parametrize("value", ["abc", "0", "0.1", "-2", "nan", "inf", "1e400", "601", ""])
def test_a_client_timeout_setting_out_of_range_is_refused(monkeypatch, value):
    monkeypatch.setenv(serve_http.CLIENT_TIMEOUT_ENV, value)
    with pytest.raises(RequestError, match=serve_http.CLIENT_TIMEOUT_ENV):
        serve_http.client_timeout()


def test_a_bad_client_timeout_setting_is_one_line_and_exit_2():
    result = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0",
                      env=clean_env(**{serve_http.CLIENT_TIMEOUT_ENV: "2\nseconds"}))
    assert_one_line_error(result, 2, serve_http.CLIENT_TIMEOUT_ENV)


@pytest.mark.parametrize("listen", ["256.1.1.1:0", "[::1", ":-1", "127.0.0.1:1:2", "no such host.invalid:0"])
def test_an_address_that_cannot_be_listened_on_is_one_line(listen):
    result = run_vram("serve", "--simulate", "demo", "--listen", listen)
    assert_one_line_error(result, 2, "--listen")


def ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_ipv6_loopback(served):
    s = served("--simulate", "demo", listen="[::1]:0")
    assert s.base.startswith("http://[::1]:")
    assert s.get("/healthz")[0] == 200
    assert s.stop() == 0


# ---------------------------------------------------------------- stopping

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_it_cleanly_with_event_streams_open(served, sig):
    s = served("--simulate", "demo")
    streams = []
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        sock.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        streams.append(sock)
    s.proc.send_signal(sig)
    assert s.proc.wait(timeout=30) == 0
    assert s.proc.stderr is not None
    assert "Traceback" not in s.proc.stderr.read()
    for sock in streams:
        sock.close()


def test_a_signal_before_the_first_reading_stops_it_too(tmp_path):
    """A machine whose first reading is slow: SIGTERM while the collector is still reading."""
    data = scenario_data("demo")
    data["faults"] = {"slow_calls": {"nvmlDeviceGetComputeRunningProcesses": 2000}}
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(data))
    proc = subprocess.Popen(vram_argv("serve", "--simulate", str(path), "--listen", "127.0.0.1:0"),
                            env=clean_env(), stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert "vram serve: http://127.0.0.1:" in proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
