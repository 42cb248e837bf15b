"""vram serve under attack, while a legitimate client (urllib, a real Prometheus, a real Chromium)
keeps asking: each attack runs with real sockets against a real `vram serve --simulate demo`,
and the legitimate requests must be answered (200) while it goes on.

- idle connections (hundreds, reopened by the attacker as the server drops them, from one address
  or from many), silent TLS connections, 32 event streams held open;
- a flood of wrong passwords, with and without TLS;
- a GET whose body is a second request;
- many pages asking for the same history.

Nothing here measures time (benchmarks/bench_serve_hostile.py does: latency and CPU); deadlines
only keep a broken server from hanging the suite."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import resource
import selectors
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from helpers import (
    PROMETHEUS,
    Groups,
    Served,
    chromium_env,
    chromium_sandbox_args,
    read_until_closed,
    serving,
    start_prometheus,
)

from vramkit.serve import http as serve_http

# An idle connection is dropped after vram serve's CLIENT_TIMEOUT (10 s): the sieges that need the server to
# drop and the attacker to reconnect give it a short one through its test setting (tests/redteam/test_serve_abuse.py
# checks the default and the setting)
HEAD_TIMEOUT = 2.0
SHORT = {serve_http.CLIENT_TIMEOUT_ENV: str(HEAD_TIMEOUT)}
OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not installed")
PASSWORD = "right horse battery"


# ---------------------------------------------------------------- the attackers

def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Siege:
    """Attackers against one server, in a background thread: `idle` silent connections spread over
    `sources` (local addresses: 127.0.0.2 and up are loopback too), each reopened as soon as the
    server closes it (as an attacker reconnecting every few seconds would); `tls_idle` that finish
    a TLS handshake and then say nothing; `streams` event streams that read every event."""

    def __init__(self, port: int, idle: int = 0, sources: tuple[str, ...] = ("127.0.0.1",), tls_idle: int = 0,
                 streams: int = 0, context: ssl.SSLContext | None = None, auth: str | None = None):
        self.port, self.sources, self.context, self.auth = port, sources, context, auth
        self.sel = selectors.DefaultSelector()
        self.kinds: dict[socket.socket, str] = {}
        self.reopened = 0
        self.stream_events: dict[socket.socket, int] = {}
        self.streams_closed = 0
        self.stop_flag = threading.Event()
        for _ in range(streams):
            self._open_stream()
        for _ in range(tls_idle):
            self._open_tls_idle()
        for i in range(idle):
            self._open_idle(sources[i % len(sources)])
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self, source: str = "127.0.0.1") -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30, source_address=(source, 0))

    def _add(self, sock: socket.socket, kind: str) -> None:
        sock.setblocking(False)
        self.kinds[sock] = kind
        self.sel.register(sock, selectors.EVENT_READ)

    def _open_idle(self, source: str) -> None:
        self._add(self._connect(source), f"idle {source}")

    def _open_tls_idle(self) -> None:
        assert self.context is not None
        self._add(self.context.wrap_socket(self._connect(), server_hostname="127.0.0.1"), "tls")

    def _open_stream(self) -> None:
        sock: socket.socket = self._connect()
        if self.context is not None:
            sock = self.context.wrap_socket(sock, server_hostname="127.0.0.1")
        auth = f"Authorization: {self.auth}\r\n" if self.auth else ""
        sock.sendall(f"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first[:100]
        self.stream_events[sock] = first.count(b"event: ")
        self._add(sock, "stream")

    def _run(self) -> None:
        while not self.stop_flag.is_set():
            for key, _ in self.sel.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue
                except OSError:
                    data = b""
                kind = self.kinds[sock]
                if data and kind == "stream":
                    self.stream_events[sock] += data.count(b"event: ")
                    continue
                self.sel.unregister(sock)
                del self.kinds[sock]
                sock.close()
                if kind == "stream":
                    self.streams_closed += 1
                    continue
                try:  # the attacker comes back at once
                    if kind == "tls":
                        self._open_tls_idle()
                    else:
                        self._open_idle(kind.split()[1])
                    self.reopened += 1
                except OSError:
                    pass

    def __enter__(self) -> Siege:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=30)
        for sock in self.kinds:
            sock.close()
        self.sel.close()


def keep_asking(s: Served, paths: tuple[str, ...], seconds: float) -> list[tuple[str, int]]:
    """The legitimate client: each path in turn, every 0.2 s for `seconds`; (path, status) each."""
    codes = []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        for path in paths:
            try:
                codes.append((path, s.get(path)[0]))
            except OSError as e:
                codes.append((path, f"{type(e).__name__}: {e}"))  # type: ignore[arg-type]
        time.sleep(0.2)
    return codes


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def many_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1500
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the open-files limit ({hard}) is below the {want} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def loopback_sources(n: int) -> tuple[str, ...]:
    """Other loopback addresses to connect from (Linux answers all of 127/8), as many attackers."""
    found = []
    for i in range(2, 2 + n):
        try:
            with socket.socket() as sock:
                sock.bind((f"127.0.0.{i}", 0))
            found.append(f"127.0.0.{i}")
        except OSError:
            break
    if len(found) < n:
        pytest.skip("this machine cannot connect from other 127/8 addresses")
    return tuple(found)


# ---------------------------------------------------------------- idle connections and streams

def test_idle_connections_and_event_streams_keep_no_one_out(served):
    """300 idle connections (past the per-address limit), reopened for longer than the head
    timeout, and 32 event streams: every legitimate request is still answered."""
    s = served("--simulate", "demo", env=SHORT)
    with Siege(s.port, idle=300, streams=32) as siege:
        codes = keep_asking(s, ("/metrics", "/api/v1/snapshot", "/", "/healthz"), HEAD_TIMEOUT + 3)
        # One more stream for the page's own, beside the attacker's 32.
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as page:
            page.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
            assert page.recv(65536).startswith(b"HTTP/1.1 200")
        streams_fine = siege.streams_closed == 0 and all(n >= 2 for n in siege.stream_events.values())
        reopened = siege.reopened
    assert {code for _, code in codes} == {200}, [c for c in codes if c[1] != 200][:5]
    assert reopened > 0  # the server dropped idle connections, and the attacker came back
    assert streams_fine  # the attacker's streams got their events: they are served too, just without a thread
    assert s.proc.poll() is None and s.stop() == 0


def test_idle_connections_from_many_addresses_cannot_fill_the_server(served, many_files):
    """More idle connections than the server holds, from 12 addresses: a newcomer makes room by
    closing the longest-idle connection of the address that holds the most."""
    s = served("--simulate", "demo")
    sources = loopback_sources(12)
    with Siege(s.port, idle=1100, sources=sources):
        codes = keep_asking(s, ("/metrics", "/healthz"), 3)
        fds = open_fds(s.pid)
    assert {code for _, code in codes} == {200}, [c for c in codes if c[1] != 200][:5]
    assert fds <= serve_http.MAX_CONNECTIONS + 64, fds  # bounded by the connection limit
    assert s.stop() == 0


def test_event_streams_are_limited_per_address(served):
    s = served("--simulate", "demo")
    with Siege(s.port, streams=serve_http.MAX_STREAMS_PER_ADDRESS):
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as one_more:
            one_more.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = one_more.recv(65536)
        assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 5" in answer
        other = loopback_sources(1)[0]
        with socket.create_connection(("127.0.0.1", s.port), timeout=30, source_address=(other, 0)) as elsewhere:
            elsewhere.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
            assert elsewhere.recv(65536).startswith(b"HTTP/1.1 200")
        assert s.get("/metrics")[0] == 200
    assert s.stop() == 0


# ---------------------------------------------------------------- TLS and basic auth

def make_cert(directory: Path) -> Path:
    assert OPENSSL is not None
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=server", "-keyout", str(key), "-out", str(cert),
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    key.chmod(0o600)
    return cert


def web_config(directory: Path, tls: bool, cost: int = 4) -> Path:
    bcrypt = pytest.importorskip("bcrypt", reason="the serve extra (bcrypt) is not installed")
    pytest.importorskip("yaml", reason="the serve extra (pyyaml) is not installed")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(cost)).decode()
    text = f"basic_auth_users:\n  alice: '{hashed}'\n  bob: '{hashed}'\n"
    if tls:
        text = "tls_server_config: {cert_file: server.crt, key_file: server.key}\n" + text
    path = directory / "web.yml"
    path.write_text(text)
    path.chmod(0o600)
    return path


@needs_openssl
def test_with_tls_and_basic_auth_silent_and_handshaken_connections_keep_no_one_out(tmp_path, served):
    cert = make_cert(tmp_path)
    context = ssl.create_default_context(cafile=str(cert))
    s = served("--simulate", "demo", "--web-config", str(web_config(tmp_path, tls=True)), context=context,
               auth=("alice", PASSWORD))
    with Siege(s.port, idle=150, tls_idle=60, streams=32, context=context, auth=basic("alice", PASSWORD)) as siege:
        codes = keep_asking(s, ("/metrics", "/api/v1/snapshot", "/"), 4)
        streams_fine = siege.streams_closed == 0
    assert {code for _, code in codes} == {200}, [c for c in codes if c[1] != 200][:5]
    assert streams_fine
    assert s.stop() == 0


class Guesser(threading.Thread):
    """One attacker thread: wrong passwords, each different, one after another on one connection
    (a new one when the server closes it)."""

    def __init__(self, port: int, number: int, context: ssl.SSLContext | None, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.number, self.context, self.stop = port, number, context, stop
        self.answers: dict[int, int] = {}
        self.sent = threading.Event()  # its first guess is with the server

    def connection(self) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=120, context=self.context)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def run(self) -> None:
        conn = self.connection()
        guess = 0
        while not self.stop.is_set():
            guess += 1
            try:
                wrong = basic("alice", f"guess-{self.number}-{guess}")
                conn.request("GET", "/metrics", headers={"Authorization": wrong})
                self.sent.set()
                response = conn.getresponse()
                response.read()
                self.answers[response.status] = self.answers.get(response.status, 0) + 1
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = self.connection()
        conn.close()


@pytest.mark.parametrize("tls", [False, pytest.param(True, marks=needs_openssl)], ids=["http", "https"])
def test_a_wrong_password_flood_does_not_keep_the_right_one_out(tmp_path, served, tls):
    """64 threads guessing alice's password, each guess new (so each costs a bcrypt check): the
    right password, once verified, is answered throughout; the guesses are answered 401, in
    turn (one check at a time), never served."""
    context = ssl.create_default_context(cafile=str(make_cert(tmp_path))) if tls else None
    s = served("--simulate", "demo", "--web-config", str(web_config(tmp_path, tls=tls, cost=8)), context=context,
               auth=("alice", PASSWORD))
    assert s.get("/metrics")[0] == 200  # verified once, as Prometheus' first scrape would be
    stop = threading.Event()
    guessers = [Guesser(s.port, i, context, stop) for i in range(64)]
    for g in guessers:
        g.start()
    try:
        for g in guessers:  # the guesses are queued (each one's first sent: it waits for its answer)
            assert g.sent.wait(60)
        codes = keep_asking(s, ("/metrics", "/api/v1/snapshot"), 3)
        assert s.get("/metrics", auth=("alice", "wrong"))[0] == 401  # answered too, in its turn
        threads = int(next(line.split()[1] for line in Path(f"/proc/{s.pid}/status").read_text().splitlines()
                           if line.startswith("Threads:")))
    finally:
        stop.set()
        for g in guessers:
            g.join(timeout=120)
    assert {code for _, code in codes} == {200}, [c for c in codes if c[1] != 200][:5]
    answered: dict[int, int] = {}
    for g in guessers:
        for code, n in g.answers.items():
            answered[code] = answered.get(code, 0) + n
    assert set(answered) <= {401}, answered  # never 200, never refused for want of a slot
    assert threads <= serve_http.MAX_CLIENTS + 8, threads  # the waiting guesses hold no thread each
    assert s.stop() == 0


# ---------------------------------------------------------------- a body on a GET

@pytest.mark.parametrize("framing", [b"Content-Length: %d\r\n", b"Transfer-Encoding: chunked\r\n"],
                         ids=["content-length", "chunked"])
def test_a_get_with_a_body_is_400_and_its_body_is_never_a_request(served, framing):
    s = served("--simulate", "demo")
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    if b"%d" in framing:
        head = framing % len(smuggled)
        body = smuggled
    else:
        head = framing
        body = b"%x\r\n" % len(smuggled) + smuggled + b"\r\n0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n" + body)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1  # one answer, then closed: the body was not served as a request
    assert b"vram_gpu" not in answer
    # A GET with an empty body (Content-Length: 0) is an ordinary GET, on a kept-alive connection.
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                     b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.count(b"HTTP/1.1 200") == 2
    assert s.stop() == 0


# ---------------------------------------------------------------- history, once per reading

def test_history_is_computed_once_per_reading_however_many_ask(monkeypatch, tmp_path):
    """Twenty pages asking for the same range between two readings cost one query of the store."""
    from vramkit.history import series, store
    from vramkit.machine import open_machine
    from vramkit.serve.service import Options, Service

    queries = []

    class FakeStore:
        def close(self) -> None:
            pass

    def gpu_series(_store, until, span, points):
        queries.append(span)
        return series.GpuSeries(since=until - span, until=until, width=span / points)
    monkeypatch.setattr(store.Store, "open", classmethod(lambda cls, path, *a, **k: FakeStore()))
    monkeypatch.setattr(series, "gpu_series", gpu_series)
    service = Service(open_machine("demo"), Options(interval=3600, history_db=tmp_path / "history.db"))
    with serving(service) as server:
        base = f"http://127.0.0.1:{server.server_address[1]}/api/v1/history"
        bodies = set()
        for _ in range(20):
            with urllib.request.urlopen(base + "?range=1h", timeout=30) as r:
                assert r.status == 200
                bodies.add(r.read())
        assert len(bodies) == 1 and json.loads(bodies.pop())["width"] == 12
        with urllib.request.urlopen(base + "?range=24h", timeout=30) as r:  # another range: its own query
            assert r.status == 200
    assert queries == [3600.0, 86400.0]


# ---------------------------------------------------------------- when every connection is busy

def test_when_every_connection_of_an_address_is_busy_the_next_is_503(monkeypatch):
    """Connections waiting for a password check are busy, not idle: past the per-address limit
    the newcomer is refused 503 at once, and another address still gets in."""
    from vramkit.machine import open_machine
    from vramkit.serve.service import Options, Service

    monkeypatch.setattr(serve_http, "MAX_PER_ADDRESS", 8)
    release = threading.Event()

    class SlowAuth:
        def quick(self, header):
            return None

        def __call__(self, header):
            release.wait(60)
            return header == basic("alice", PASSWORD)

    service = Service(open_machine("demo"), Options(interval=0.2))
    request = f"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: {basic('alice', PASSWORD)}\r\n" \
              "Connection: close\r\n\r\n".encode()
    waiting = []
    with serving(service, authorize=SlowAuth()) as server:
        port = server.server_address[1]
        try:
            for _ in range(8):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(request)
                waiting.append(sock)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and sum(len(q) for q in server._checks.values()) < 7:
                time.sleep(0.05)  # all eight are taken in (one being checked, seven in line)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as refused:
                refused.sendall(request)
                answer = read_until_closed(refused)
            assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer
            other = loopback_sources(1)[0]
            elsewhere = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(other, 0))
            elsewhere.sendall(request)
            waiting.append(elsewhere)
            release.set()
            for sock in waiting:
                assert read_until_closed(sock).startswith(b"HTTP/1.1 200")
        finally:
            release.set()
            for sock in waiting:
                sock.close()


# ---------------------------------------------------------------- a real Prometheus, a real browser

def test_a_real_prometheus_scrapes_through_the_siege(tmp_path, served):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("needs the Prometheus server (Debian package 'prometheus')")
    # Prometheus keeps its connection between scrapes (every 2 s): a timeout above that, so that only the
    # attacker's idle connections are dropped
    timeout = 5.0
    s = served("--simulate", "demo", env={serve_http.CLIENT_TIMEOUT_ENV: str(timeout)})
    prometheus = Groups()

    def query(promql: str) -> list:
        with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}),
                                    timeout=10) as r:
            return json.loads(r.read())["data"]["result"]
    try:
        url = start_prometheus(prometheus, tmp_path, [f"127.0.0.1:{s.port}"], interval="2s")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if query('up{job="vram"} == 1'):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("Prometheus never scraped vram serve: " + "".join(
                p.read_text() for p in tmp_path.glob("prometheus-*.log")))
        with Siege(s.port, idle=300, streams=32):
            time.sleep(timeout + 6)  # past the head timeout: the attacker has reconnected
            scrapes = query('count_over_time(up{job="vram"}[10s])')  # the scrapes during the siege
            failed = query('count_over_time((up{job="vram"} == 0)[10s:1s])')
    finally:
        prometheus.cleanup()
    assert scrapes and int(scrapes[0]["value"][1]) >= 4, scrapes  # every 2 s, during the siege
    assert not failed, failed  # and none of them failed
    assert s.stop() == 0


def test_a_real_browser_gets_the_live_page_through_the_siege(served, tmp_path_factory):
    chromedriver = "/usr/bin/chromedriver"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not os.access(chromedriver, os.X_OK) or chromium is None:
        pytest.skip("needs chromium and /usr/bin/chromedriver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    s = served("--simulate", "demo")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    for arg in chromium_sandbox_args():
        options.add_argument(arg)
    with Siege(s.port, idle=300, streams=32):
        driver = webdriver.Chrome(service=webdriver.ChromeService(chromedriver, env=chromium_env(tmp_path_factory)),
                                  options=options)
        try:
            driver.get(s.base + "/")
            WebDriverWait(driver, 30, poll_frequency=0.1).until(
                lambda d: d.find_elements(By.CSS_SELECTOR, "#gpus article.gpu")
                and re.search(r"· live$", d.find_element(By.ID, "freshness").text))
            cards = len(driver.find_elements(By.CSS_SELECTOR, "#gpus article.gpu"))
        finally:
            driver.quit()
    assert cards == 8  # the demo's GPUs, over a live event stream beside the attacker's 32
    assert s.stop() == 0
