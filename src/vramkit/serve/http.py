"""The HTTP side of `vram serve`: read-only routes behind a front that gives a thread only to a
complete request, and nothing a client can make it do but answer.

    /                     the web page (static files from serve/web/)
    /metrics              Prometheus' text format
    /api/v1/snapshot      the newest reading, as `vram status --json` prints it
    /api/v1/events        server-sent events: the same JSON, then what changed after every reading
    /api/v1/history       recorded memory and utilization per GPU (?range=1h), when a store exists
    /api/v1/hosts         the other hosts of --hosts as this server last read them (serve/hosts.py)
    /healthz              200 once the first reading is in

One thread (the front, `serve_forever`) runs a selector over every connection: it accepts, runs
TLS handshakes without blocking, and reads each request head (request line and headers, at most
MAX_HEAD bytes, all of it within CLIENT_TIMEOUT seconds) into a buffer. Only a complete head goes
to a worker (at most MAX_CLIENTS threads), which builds the whole answer in memory; the front
writes it out as fast as the client takes it. So a client that connects and says nothing, sends
its head a byte at a time, or reads its answer slowly holds a descriptor and a few KiB, never a
thread. Event streams are written by the front too: after each reading it hands every stream the
same bytes (the delta from the reading before: serve/updates.py), skipping a stream that has not
taken the last event yet; such a stream, and a new one, is sent the whole JSON instead.
/metrics, the API and the page are sent gzipped to a client that asks (Accept-Encoding), each
compressed once per reading however many ask.

Limits (docs/fleet.md, "Limits"):
- at most max_connections (MAX_CONNECTIONS, lower where the open-files limit is) connections, and
  MAX_PER_ADDRESS of them from one client address (an IPv6 /64). A new connection beyond either
  closes the oldest connection that has not sent a complete request (of its own address, or of
  the address holding the most): idle connections cannot keep anyone out. Only when every
  connection is busy answering is the new one refused (503 at once without TLS, closed with it);
- MAX_STREAMS event streams, MAX_STREAMS_PER_ADDRESS from one address (503 beyond: the page polls);
- a request that needs a password checked (bcrypt, tens of milliseconds by design) waits for the
  one checking thread without holding a worker; waiting requests are taken in turn by address,
  so a guessing client delays its own guesses, not other addresses' logins;
- a GET or HEAD with a body (Content-Length other than 0, or Transfer-Encoding) is answered 400
  and the connection closed: body bytes are never read as a request.
"""

from __future__ import annotations

import collections
import functools
import http.client
import io
import ipaddress
import json
import math
import os
import queue
import resource
import selectors
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from ..errors import RequestError
from ..i18n import _
from . import page_words
from .service import Service, gzipped

MAX_CONNECTIONS = 1000  # connections open at once, in every state
MAX_PER_ADDRESS = 256  # of them, from one client address (an IPv6 /64)
MAX_CLIENTS = 64  # worker threads: requests being answered at once
MAX_STREAMS = 256  # event streams (a descriptor each, no thread)
MAX_STREAMS_PER_ADDRESS = 64
CLIENT_TIMEOUT = 10.0  # seconds a client may take to send its request head (and the TLS handshake)
# Another CLIENT_TIMEOUT, for tests only: the suite's tests of the timeout and of idle connections set a short
# one instead of waiting 10 s each (one test keeps the default). Not a user setting: not in --help or the config.
CLIENT_TIMEOUT_ENV = "VRAM_SERVE_CLIENT_TIMEOUT"
WRITE_TIMEOUT = 60.0  # seconds an answer may take to be read, in all
STREAM_SECONDS = 3600.0  # an event stream ends after this; the page reconnects
STREAM_STALL = 60.0  # an event stream that takes nothing for this long is closed
KEEP_ALIVE_EVENT = 15.0  # a comment on a quiet stream (also finds a client that went away)
LINGER = 2.0  # seconds a closing connection's unread bytes are drained, so the answer is not reset
MAX_REQUEST_LINE = 8192
MAX_HEAD = 32 * 1024  # bytes of request line and headers together (http.client allows 100 x 64 KiB)
SWEEP = 0.25  # seconds between looks at every connection's deadline
GZIP_FROM = 1024  # bytes: a shorter answer is sent as it is (gzip's header and the CPU cost more)
HISTORY_RANGES = {"5m": 300.0, "1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0}
STATIC = {  # the only files served: name -> content type
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "LICENSE-uPlot.txt": "text/plain; charset=utf-8",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
        b"Retry-After: 1\r\n\r\n")
READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
TLS_CHUNK = 16384  # bytes handed to one SSL write (one TLS record)


class Authorizer(Protocol):
    """Basic auth as the server uses it (webconfig.BasicAuth): `quick` answers from what it
    remembers (None: a slow check is needed), calling it runs the slow check."""

    def quick(self, header: str | None) -> bool | None: ...

    def __call__(self, header: str | None) -> bool: ...


Authorize = Authorizer | Callable[[str | None], bool]


def address_key(address: Any) -> str:
    """Whose a connection is, for the per-address limits: the IPv4 address, or the /64 of an
    IPv6 one (one host gets a whole /64); an IPv4-mapped IPv6 address counts as the IPv4 one."""
    host = str(address[0]) if isinstance(address, tuple) and address else str(address)
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def client_timeout() -> float:
    """CLIENT_TIMEOUT, or the seconds $VRAM_SERVE_CLIENT_TIMEOUT says (0.5 to 600)."""
    text = os.environ.get(CLIENT_TIMEOUT_ENV)
    if text is None:
        return CLIENT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0.5 <= seconds <= 600:  # nan too
        raise RequestError(_("{variable}: must be 0.5 to 600 seconds, got {value}").format(
            variable=CLIENT_TIMEOUT_ENV, value=repr(text[:64])))
    return seconds


def open_files_room() -> int:
    """How many connections the open-files limit leaves room for (descriptors for the database,
    the driver and the process itself kept aside)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft - 128))


@dataclass
class Outcome:
    """What a worker made of one request head."""

    data: bytes = b""  # the whole answer (for a stream: its headers)
    close: bool = True  # close the connection after it
    stream: bool = False  # then keep it as an event stream
    check: str | None = None  # the Authorization header to check first (nothing answered yet)


class Connection:
    """One client connection, in one of the states below; only the front thread changes it."""

    __slots__ = ("sock", "address", "key", "state", "inbuf", "out", "deadline", "since", "started",
                 "close_after", "tls", "want", "events", "stream_ends", "last_event", "progress",
                 "discarded", "seq", "shown")

    # handshake -> head -> busy [-> check -> busy] -> write -> head (keep-alive) | stream | linger
    def __init__(self, sock: socket.socket, address: Any, tls: bool, now: float, seq: int, timeout: float):
        self.sock = sock
        self.address = address
        self.key = address_key(address)
        self.state = "handshake" if tls else "head"
        self.inbuf = bytearray()
        self.out = bytearray()
        self.deadline = now + timeout  # handshake and head together
        self.since = now  # when it last began waiting for a request (the eviction order)
        self.started = now
        self.close_after = False
        self.tls = tls
        self.want = READ
        self.events = 0  # what the selector watches for it now
        self.stream_ends = 0.0
        self.last_event = now
        self.progress = now
        self.discarded = 0
        self.seq = seq  # tie-breaker for eviction: the order of acceptance
        self.shown = -1  # an event stream's: the reading its page holds (service.update().seq)

    @property
    def evictable(self) -> bool:
        """Waiting for a request it has not completed: closing it costs its client nothing it asked for."""
        return self.state in ("handshake", "head", "linger")


class VramHTTPServer:
    """The front: a selector loop over the listening socket, every connection and a wake-up
    socket, workers for complete requests, one thread for password checks.
    serve_forever / shutdown / server_close / server_address as socketserver's."""

    def __init__(self, address: tuple[str, int], service: Service, authorize: Authorize | None = None,
                 ipv6: bool = False, tls: ssl.SSLContext | None = None):
        self.service = service
        self.authorize = authorize
        self.tls = tls
        self.client_timeout = client_timeout()
        self.errors_said: set[str] = set()  # internal errors already printed (once each)
        self.max_connections = open_files_room()
        self.refused = 0  # connections refused: every one busy (503, or closed with TLS)
        self.evicted = 0  # idle connections closed to make room for a new one
        family = socket.AF_INET6 if ipv6 else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(1024)  # a burst of connections waits in the kernel's queue
        except BaseException:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self.socket, READ, "listen")
        self._selector.register(self._wake_r, READ, "wake")
        self._conns: set[Connection] = set()
        self._by_address: dict[str, set[Connection]] = {}
        self._accepted = 0
        self._posts: collections.deque[Callable[[], None]] = collections.deque()
        self._streams: dict[str, int] = {}  # address -> event streams open
        self._streams_lock = threading.Lock()
        self._seen = service.sequence
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._idle_workers = 0
        self._pool_lock = threading.Lock()
        self._checks: dict[str, collections.deque[tuple[Connection, bytes, str | None]]] = {}
        self._check_turns: collections.deque[str] = collections.deque()
        self._checks_cond = threading.Condition()
        self._checker: threading.Thread | None = None
        self._stopping = False
        self._shut_down = threading.Event()
        self._shut_down.set()
        self._closed = False
        service.on_change(self._wake)
        service.wants_updates = lambda: self.streams_open > 0

    # ------------------------------------------------------------ socketserver's interface
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._shut_down.clear()
        try:
            next_sweep = time.monotonic()
            while not self._stopping:
                timeout = min(poll_interval, SWEEP)
                for key, mask in self._selector.select(timeout):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._guarded(key.data, self._ready, mask)
                    self._run_posts()
                self._run_posts()
                try:
                    self._stream_news()
                except Exception as e:  # a bug building an event: said once, the front goes on
                    self.say_once(f"{type(e).__name__}: {e}")
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + SWEEP
        finally:
            self._stopping = False
            self._shut_down.set()

    def shutdown(self) -> None:
        """Stops serve_forever (from another thread) and waits until it has."""
        self._stopping = True
        self._wake()
        self._shut_down.wait()

    def server_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self._conns):
            self._close(conn)
        for _worker in self._workers:
            self._jobs.put(None)
        with self._checks_cond:
            self._checks.clear()
            self._check_turns.clear()
            self._checks_cond.notify_all()
        self._selector.close()
        for sock in (self.socket, self._wake_r, self._wake_w):
            sock.close()

    def handle_error(self, message: str) -> None:
        self.say_once(message)

    def say_once(self, message: str) -> None:
        if message not in self.errors_said and len(self.errors_said) < 100:
            self.errors_said.add(message)
            # Translators: said once per distinct error on vram serve's stderr; {error} is Python's, in English
            said = _("vram serve: internal error answering a request: {error}").format(error=message[:300])
            print(said, file=sys.stderr, flush=True)

    # ------------------------------------------------------------ wake-ups from other threads
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _post(self, action: Callable[[], None]) -> None:
        """Run `action` in the front thread, soon."""
        self._posts.append(action)
        self._wake()

    def _run_posts(self) -> None:
        while self._posts:
            action = self._posts.popleft()
            try:
                action()
            except Exception as e:  # a bug: said once, the front goes on
                self.say_once(f"{type(e).__name__}: {e}")

    def _guarded(self, conn: Connection, step: Callable[..., None], *args: Any) -> None:
        try:
            step(conn, *args)
        except Exception as e:
            self.say_once(f"{type(e).__name__}: {e}")
            self._close(conn)

    # ------------------------------------------------------------ accepting, and the limits
    def _accept(self) -> None:
        for _turn in range(256):  # then the other ready connections get a turn
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors (EMFILE), or a connection reset before accept
                return
            sock.setblocking(False)
            if not self._make_room(address_key(address)):
                self.refused += 1
                if self.tls is None:
                    try:
                        sock.send(BUSY)
                    except OSError:
                        pass
                sock.close()
                continue
            now = time.monotonic()
            if self.tls is not None:
                try:
                    sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
            self._accepted += 1
            conn = Connection(sock, address, self.tls is not None, now, self._accepted, self.client_timeout)
            self._conns.add(conn)
            self._by_address.setdefault(conn.key, set()).add(conn)
            self._guarded(conn, self._ready, READ)  # the client may have sent its hello or head already

    def _make_room(self, key: str) -> bool:
        """Room for one more connection from `key`: closes the longest-waiting idle connection of
        that address when it is at its limit, else, when the server is full, of the address
        holding the most. False when every candidate is busy answering."""
        mine = self._by_address.get(key, ())
        if len(mine) >= MAX_PER_ADDRESS and not self._evict_from(mine):
            return False
        if len(self._conns) >= self.max_connections:
            for _size, group in sorted(((len(g), g) for g in self._by_address.values()), key=lambda x: -x[0]):
                if self._evict_from(group):
                    break
            else:
                return False
        return True

    def _evict_from(self, group: Any) -> bool:
        """Close the connection of `group` that has waited longest without a complete request.
        Each candidate is read once more first: a client whose request has just arrived (it
        connected a moment ago, in the same burst) is answered, not dropped."""
        candidates = [c for c in group if c.evictable]
        while candidates:
            conn = min(candidates, key=lambda c: (c.since, c.seq))  # usually the first one goes
            candidates.remove(conn)
            if conn.state == "head":
                self._guarded(conn, self._read_head)
            if conn.state == "closed":  # it had gone: room made
                return True
            if conn.evictable:
                self.evicted += 1
                self._close(conn)
                return True
        return False

    # ------------------------------------------------------------ the connection's states
    def _watch(self, conn: Connection, events: int) -> None:
        if conn.state == "closed" or events == conn.events:
            return
        if conn.events and events:
            self._selector.modify(conn.sock, events, conn)
        elif events:
            self._selector.register(conn.sock, events, conn)
        else:
            self._selector.unregister(conn.sock)
        conn.events = events

    def _close(self, conn: Connection) -> None:
        if conn.state == "closed":
            return
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.events = 0
        if conn.state == "stream":
            self._release_stream(conn.key)
        conn.state = "closed"
        self._conns.discard(conn)
        group = self._by_address.get(conn.key)
        if group is not None:
            group.discard(conn)
            if not group:
                del self._by_address[conn.key]
        try:
            conn.sock.close()
        except OSError:
            pass

    def _ready(self, conn: Connection, mask: int) -> None:
        state = conn.state
        if state == "handshake":
            self._handshake(conn)
        elif state == "head":
            self._read_head(conn)
        elif state == "write":
            self._flush(conn)
        elif state == "stream":
            if not self._discard(conn):
                return
            if conn.out:
                self._flush(conn)
            else:
                self._watch(conn, READ)
        elif state == "linger":
            if self._discard(conn):
                self._watch(conn, READ)

    def _handshake(self, conn: Connection) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, WRITE)
            return
        except (OSError, ValueError):  # bad TLS, plain HTTP, a refused client certificate, a reset
            self._close(conn)
            return
        conn.state = "head"
        self._read_head(conn)

    def _recv(self, conn: Connection, size: int) -> bytes | None:
        """Bytes from the client; b'' when it is gone; None when there are none now."""
        try:
            return conn.sock.recv(size)
        except ssl.SSLWantReadError:
            conn.want = READ
            return None
        except ssl.SSLWantWriteError:
            conn.want = WRITE
            return None
        except (BlockingIOError, InterruptedError):
            conn.want = READ
            return None
        except (OSError, ValueError):
            return b""

    def _read_head(self, conn: Connection) -> None:
        while True:
            end = head_end(conn.inbuf)
            if end is not None:
                head = bytes(conn.inbuf[:end])
                del conn.inbuf[:end]
                self._dispatch(conn, head)
                return
            if len(conn.inbuf) > MAX_HEAD:
                self._answer_now(conn, oversized(bytes(conn.inbuf[:MAX_REQUEST_LINE + 1])))
                return
            data = self._recv(conn, min(65536, MAX_HEAD + 1 - len(conn.inbuf)))
            if data is None:
                self._watch(conn, conn.want)
                return
            if not data:
                self._close(conn)
                return
            conn.inbuf += data

    def _answer_now(self, conn: Connection, data: bytes) -> None:
        conn.inbuf.clear()
        conn.out += data
        conn.close_after = True
        self._start_write(conn)

    def _dispatch(self, conn: Connection, head: bytes, verdict: bool | None = None) -> None:
        conn.state = "busy"
        self._watch(conn, 0)
        self._submit(lambda: self._work(conn, head, verdict))

    def _work(self, conn: Connection, head: bytes, verdict: bool | None) -> None:
        """In a worker: the answer to one request head, handed back to the front."""
        try:
            outcome = Handler(self, conn.address, head, verdict).answer()
        except Exception as e:  # a bug below the routes' own handler: this client gets 500
            self.say_once(f"{type(e).__name__}: {e}")
            outcome = Outcome(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                              b"Connection: close\r\n\r\n")
        self._post(lambda: self._guarded(conn, self._answered, head, outcome))

    def _answered(self, conn: Connection, head: bytes, outcome: Outcome) -> None:
        if conn.state == "closed":
            if outcome.stream:
                self._release_stream(conn.key)
            return
        if outcome.check is not None:
            conn.state = "check"
            self._queue_check(conn, head, outcome.check)
            return
        conn.out += outcome.data
        conn.close_after = outcome.close
        if outcome.stream:
            conn.state = "stream"
            conn.close_after = True
            conn.inbuf.clear()
            now = time.monotonic()
            conn.stream_ends = now + STREAM_SECONDS
            conn.progress = conn.last_event = now
            update = self.service.update()
            if update is not None:
                conn.out += update.full
                conn.shown = update.seq
            self._flush(conn)
            return
        self._start_write(conn)

    def _start_write(self, conn: Connection) -> None:
        conn.state = "write"
        now = time.monotonic()
        conn.started = now
        conn.progress = now
        conn.deadline = now + self.client_timeout
        self._flush(conn)

    def _flush(self, conn: Connection) -> None:
        """Write what the connection has to send, as far as the client takes it now."""
        while conn.out:
            chunk = bytes(conn.out[:TLS_CHUNK]) if conn.tls else conn.out
            try:
                sent = conn.sock.send(chunk)
            except ssl.SSLWantWriteError:
                self._watch(conn, WRITE | (READ if conn.state == "stream" else 0))
                return
            except ssl.SSLWantReadError:
                self._watch(conn, READ)
                return
            except (BlockingIOError, InterruptedError):
                self._watch(conn, WRITE | (READ if conn.state == "stream" else 0))
                return
            except (OSError, ValueError):
                self._close(conn)
                return
            del conn.out[:sent]
            now = time.monotonic()
            conn.progress = now
            if conn.state == "write":
                conn.deadline = min(now + self.client_timeout, conn.started + WRITE_TIMEOUT)
        if conn.state == "stream":
            self._watch(conn, READ)
        elif conn.state == "write":
            self._written(conn)

    def _written(self, conn: Connection) -> None:
        if conn.close_after:
            self._linger(conn)
            return
        now = time.monotonic()
        conn.state = "head"  # keep-alive: the next request's head, with its own deadline
        conn.deadline = now + self.client_timeout
        conn.since = now
        self._read_head(conn)  # a pipelined request may be in already

    def _linger(self, conn: Connection) -> None:
        """Close without resetting the answer: stop sending, drain what the client still sends
        (a body nobody reads) for a moment, then close."""
        conn.inbuf.clear()
        conn.state = "linger"
        conn.deadline = time.monotonic() + LINGER
        conn.discarded = 0
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            self._close(conn)
            return
        if self._discard(conn):
            self._watch(conn, READ)

    def _discard(self, conn: Connection) -> bool:
        """Read and drop what the client sends (on a stream or while closing); False once the
        connection is closed (the client went, or sent more than 64 KiB)."""
        while True:
            data = self._recv(conn, 65536)
            if data is None:
                return True
            if not data or conn.discarded + len(data) > 65536:
                self._close(conn)
                return False
            conn.discarded += len(data)

    # ------------------------------------------------------------ deadlines
    def _sweep(self, now: float) -> None:
        for conn in list(self._conns):
            state = conn.state
            if state in ("handshake", "head", "write", "linger"):
                if now >= conn.deadline:
                    self._close(conn)
            elif state == "stream":
                if now >= conn.stream_ends or (conn.out and now - conn.progress >= STREAM_STALL):
                    self._close(conn)
                elif not conn.out and now - conn.last_event >= KEEP_ALIVE_EVENT:
                    conn.last_event = now
                    conn.out += b": keep-alive\n\n"
                    self._guarded(conn, self._flush)

    # ------------------------------------------------------------ event streams
    def admit_stream(self, key: str) -> bool:
        """Called by a worker: one more stream for `key`, within the limits."""
        with self._streams_lock:
            total = sum(self._streams.values())
            if total >= MAX_STREAMS or self._streams.get(key, 0) >= MAX_STREAMS_PER_ADDRESS:
                return False
            self._streams[key] = self._streams.get(key, 0) + 1
            return True

    def _release_stream(self, key: str) -> None:
        with self._streams_lock:
            left = self._streams.get(key, 0) - 1
            if left > 0:
                self._streams[key] = left
            else:
                self._streams.pop(key, None)

    @property
    def streams_open(self) -> int:
        with self._streams_lock:
            return sum(self._streams.values())

    def _stream_news(self) -> None:
        """After a reading: what changed to every stream that has taken the last event and holds
        the reading before; the whole JSON to one that missed an event."""
        sequence = self.service.sequence
        if sequence == self._seen:
            return
        streams = [c for c in self._conns if c.state == "stream"]
        if sequence < 0:  # the service is closing: every stream ends
            self._seen = sequence
            for conn in streams:
                self._close(conn)
            return
        if not streams:
            return
        self._seen = sequence
        update = self.service.update()
        if update is None:
            return
        now = time.monotonic()
        for conn in streams:
            if not conn.out and conn.shown != update.seq:  # one that has not taken the last event skips this one
                known = update.delta is not None and conn.shown == update.base
                conn.out += update.delta if known and update.delta is not None else update.full
                conn.shown = update.seq
                conn.last_event = now
                self._guarded(conn, self._flush)

    # ------------------------------------------------------------ workers
    def _submit(self, job: Callable[[], None]) -> None:
        with self._pool_lock:
            if self._idle_workers == 0 and len(self._workers) < MAX_CLIENTS:
                worker = threading.Thread(target=self._worker, name="vram-serve-worker", daemon=True)
                self._workers.append(worker)
                self._idle_workers += 1
                worker.start()
        self._jobs.put(job)

    def _worker(self) -> None:
        while True:
            job = self._jobs.get()
            with self._pool_lock:
                self._idle_workers -= 1
            if job is None:
                return
            try:
                job()
            except Exception as e:
                self.say_once(f"{type(e).__name__}: {e}")
            with self._pool_lock:
                self._idle_workers += 1

    # ------------------------------------------------------------ password checks, in turn by address
    def _queue_check(self, conn: Connection, head: bytes, header: str | None) -> None:
        with self._checks_cond:
            waiting = self._checks.get(conn.key)
            if waiting is None:
                waiting = self._checks[conn.key] = collections.deque()
                self._check_turns.append(conn.key)
            waiting.append((conn, head, header))
            self._checks_cond.notify()
            if self._checker is None:
                self._checker = threading.Thread(target=self._check_loop, name="vram-serve-auth", daemon=True)
                self._checker.start()

    def _check_loop(self) -> None:
        """One password check at a time (at most one core however many guess): the next address
        in turn, its oldest request."""
        authorize = self.authorize
        assert authorize is not None
        while True:
            with self._checks_cond:
                while not self._check_turns:
                    if self._closed:
                        return
                    self._checks_cond.wait()
                key = self._check_turns.popleft()
                waiting = self._checks[key]
                conn, head, header = waiting.popleft()
                if waiting:
                    self._check_turns.append(key)
                else:
                    del self._checks[key]
            try:
                ok = bool(authorize(header))
            except Exception as e:
                self.say_once(f"{type(e).__name__}: {e}")
                ok = False
            self._post(functools.partial(self._checked, conn, head, ok))

    def _checked(self, conn: Connection, head: bytes, verdict: bool) -> None:
        if conn.state == "check":
            self._dispatch(conn, head, verdict)


def head_end(buffer: bytearray) -> int | None:
    """Where the request head in `buffer` ends (after its empty line, CRLF or bare LF as
    http.server reads them), or None while it has not."""
    ends = [i for i in (buffer.find(b"\n\r\n"), buffer.find(b"\n\n")) if i >= 0]
    if not ends:
        return None
    i = min(ends)
    return i + (3 if buffer[i + 1:i + 2] == b"\r" else 2)


def accepts_gzip(header: str | None) -> bool:
    """Whether an Accept-Encoding header takes gzip: named (or "*") without q=0. The header is
    within the request head's bound; only its first 64 entries are looked at."""
    if not header:
        return False
    for item in header.split(",", 64)[:64]:
        name, _sep, params = item.partition(";")
        if name.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        q = params.strip().lower()
        if q.startswith("q="):
            try:
                return float(q[2:].strip()[:8]) > 0
            except ValueError:
                return False
        return True
    return False


def oversized(start: bytes) -> bytes:
    """The answer to a head past MAX_HEAD: 414 when its request line alone is too long, else 431."""
    if b"\n" not in start:
        return (b"HTTP/1.1 414 Request-URI Too Long\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: 22\r\nConnection: close\r\n\r\nrequest line too long\n")
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: 24\r\nConnection: close\r\n\r\nrequest head too large\n")


@functools.lru_cache(maxsize=len(STATIC))
def _static_gzipped(name: str, body: bytes) -> bytes:
    """A static file compressed once (the files do not change while serve runs)."""
    return gzipped(body)


class Handler(BaseHTTPRequestHandler):
    """One request head -> its answer, in a worker thread, in memory: http.server's parsing and
    answering, without a socket (the front reads and writes)."""

    server: VramHTTPServer  # type: ignore[assignment]  # ours, not a socketserver
    protocol_version = "HTTP/1.1"
    server_version = "vram-serve"
    sys_version = ""

    def __init__(self, server: VramHTTPServer, client_address: Any, head: bytes, verdict: bool | None):
        # No BaseHTTPRequestHandler.__init__: it would read from a socket.
        self.server = server
        self.client_address = client_address
        self.request = self.connection = None
        self.rfile = io.BytesIO(head)
        self.wfile = self._out = io.BytesIO()
        self.close_connection = True
        self.verdict = verdict
        self.stream = False
        self.check: str | None = None
        self._headers_sent = False

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # no access log on stderr: a scraper every 15 s would fill the journal

    def handle_expect_100(self) -> bool:
        return True  # no "100 Continue": a GET has no body to wait for, the rest is refused

    def answer(self) -> Outcome:
        self.handle_one_request()
        if self.check is not None:
            return Outcome(check=self.check)
        return Outcome(self._out.getvalue(), close=self.close_connection or self.stream, stream=self.stream)

    def handle_one_request(self) -> None:
        """http.server's, on a head the front read whole: 414 past MAX_REQUEST_LINE, 400 for a GET
        or HEAD with a body, 405 for every method but GET and HEAD (its 501 says 'unsupported', as
        if one day)."""
        self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
        if len(self.raw_requestline) > MAX_REQUEST_LINE:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414, "request line too long")
            self.close_connection = True
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        try:
            parsed = self.parse_request()  # it answers 400 or 431 itself
        except http.client.HTTPException:
            self.send_error(431, "request head too large")
            parsed = False
        if not parsed:
            self.close_connection = True
            return
        if self.command == "GET":
            self.do_GET()
        elif self.command == "HEAD":
            self.do_HEAD()
        else:
            self._refuse_method()

    # ------------------------------------------------------------ dispatch
    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._dispatch(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch(head=False)

    def _refuse_method(self) -> None:
        self.close_connection = True  # a body it may have sent is not read
        self._send(405, b"method not allowed: vram serve is read-only\n", "text/plain; charset=utf-8",
                   extra={"Allow": "GET, HEAD"})

    def _has_body(self) -> bool:
        if self.headers.get("Transfer-Encoding") is not None:
            return True
        for value in self.headers.get_all("Content-Length") or ():
            if not value.strip().isdigit() or int(value) != 0:
                return True
        return False

    def _dispatch(self, head: bool) -> None:
        if self._has_body():
            # Its body would be read as the next request: refused, and the connection closed.
            self.close_connection = True
            self._send(400, b"a GET or HEAD request has no body\n", "text/plain; charset=utf-8")
            return
        try:
            self._route(head)
        except Exception as e:  # a bug building an answer: this client gets 500, the server goes on
            self.server.say_once(f"{type(e).__name__}: {e}")
            self.close_connection = True
            self.stream = False
            self.wfile = self._out = io.BytesIO()
            self._headers_buffer: list[bytes] = []  # a half-written answer's headers
            self._send(500, b"internal error (said on vram serve's stderr)\n", "text/plain; charset=utf-8")

    def _authorized(self) -> bool | None:
        """Whether the request may be answered; None: its password needs the slow check first."""
        authorize = self.server.authorize
        if authorize is None:
            return True
        header = self.headers.get("Authorization")
        if self.verdict is not None:
            return self.verdict
        quick = getattr(authorize, "quick", None)
        if quick is None:
            return bool(authorize(header))
        ok: bool | None = quick(header)
        if ok is None:
            self.check = header
        return ok

    def _route(self, head: bool) -> None:
        ok = self._authorized()
        if ok is None:
            return  # the front checks the password, then asks again
        if not ok:
            self._send(401, b"unauthorized\n", "text/plain; charset=utf-8",
                       extra={"WWW-Authenticate": 'Basic realm="vram"'}, head=head)
            return
        url = urlsplit(self.path)
        path = url.path
        service = self.server.service
        packed = accepts_gzip(self.headers.get("Accept-Encoding"))
        if path == "/metrics":
            self._send(200, service.metrics(packed), "text/plain; version=0.0.4; charset=utf-8", head=head,
                       gzip=packed)
        elif path == "/api/v1/snapshot":
            code = 200 if service.latest is not None else 503
            self._send(code, service.snapshot_json(packed), "application/json", head=head, gzip=packed)
        elif path == "/api/v1/events":
            self._events(head)
        elif path == "/api/v1/history":
            self._history(url.query, head)
        elif path == "/api/v1/hosts":
            self._hosts(head)
        elif path == "/healthz":
            ok = service.latest is not None
            self._send(200 if ok else 503, b"ok\n" if ok else b"no reading yet\n", "text/plain; charset=utf-8",
                       head=head)
        elif path in ("/", "/index.html"):
            self._static("index.html", head)
        elif path.startswith("/static/") and path[len("/static/"):] in STATIC:
            self._static(path[len("/static/"):], head)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8", head=head)

    # ------------------------------------------------------------ answers
    def _send(self, code: int, body: bytes, content_type: str, head: bool = False,
              extra: dict[str, str] | None = None, gzip: bool | None = None, vary: tuple[str, ...] = ()) -> None:
        """gzip: None for an answer never compressed; else whether `body` is (the route compressed
        it, once per reading, because the client asked), and the answer varies with the asking.
        vary: other request headers the answer depends on (the page's Accept-Language)."""
        self._headers_sent = True
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        varies = (("Accept-Encoding",) if gzip is not None else ()) + vary
        if varies:
            self.send_header("Vary", ", ".join(varies))
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _static(self, name: str, head: bool) -> None:
        packed = accepts_gzip(self.headers.get("Accept-Encoding"))
        if name == "index.html":
            # In the reader's language, with the current reading in it.
            language = page_words.reader_language(self.headers.get("Accept-Language"))
            body = self.server.service.page(language, packed)
            self._send(200, body, STATIC[name], head=head, gzip=packed, vary=("Accept-Language",))
            return
        try:
            body = resources.files("vramkit.serve").joinpath("web").joinpath(name).read_bytes()
        except (FileNotFoundError, OSError):
            self._send(404, b"not found\n", "text/plain; charset=utf-8", head=head)
            return
        if packed:
            body = _static_gzipped(name, body)
        self._send(200, body, STATIC[name], head=head, gzip=packed)

    def _history(self, query: str, head: bool) -> None:
        service = self.server.service
        wanted = parse_qs(query).get("range", ["1h"])[0]
        span = HISTORY_RANGES.get(wanted)
        if span is None:
            body = json.dumps({"error": f"range must be one of {', '.join(HISTORY_RANGES)}"}).encode()
            self._send(400, body, "application/json", head=head)
            return
        code, body = service.history_json(span)
        packed = accepts_gzip(self.headers.get("Accept-Encoding")) and len(body) >= GZIP_FROM
        self._send(code, gzipped(body) if packed else body, "application/json", head=head, gzip=packed)

    def _hosts(self, head: bool) -> None:
        hosts = self.server.service.hosts
        if hosts is None:
            body = b'{"error": "this vram serve reads no other hosts (vram serve --hosts)"}'
            self._send(404, body, "application/json", head=head)
            return
        packed = accepts_gzip(self.headers.get("Accept-Encoding"))
        self._send(200, hosts.api_json(packed), "application/json", head=head, gzip=packed)

    def _events(self, head: bool) -> None:
        """The stream's headers; the front writes its events (no thread is held while it is open)."""
        if not head and not self.server.admit_stream(address_key(self.client_address)):
            self._send(503, b"too many event streams\n", "text/plain; charset=utf-8", extra={"Retry-After": "5"})
            return
        self._headers_sent = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        self.stream = not head
