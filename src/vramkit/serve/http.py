"""The HTTP side of `vram serve`: a small threaded server with bounded concurrency, read-only
routes, and nothing a client can make it do but answer.

    /                     the web page (static files from serve/web/)
    /metrics              Prometheus' text format
    /api/v1/snapshot      the newest reading, as `vram status --json` prints it
    /api/v1/events        server-sent events: the same JSON after every reading
    /api/v1/history       recorded memory and utilization per GPU (?range=1h), when a store exists
    /healthz              200 once the first reading is in

Every connection beyond MAX_CLIENTS is answered 503 at once, without a thread (with TLS it is
closed: a 503 would need a handshake first); a client that has not sent its whole request head
(request line and headers, at most MAX_HEAD bytes) CLIENT_TIMEOUT seconds after it began is
dropped, however slowly it trickles bytes in; at most MAX_STREAMS event streams are open.
With TLS (--web-config), the handshake runs in the connection's own thread, under the same timeout.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .service import Service

if TYPE_CHECKING:
    import ssl

MAX_CLIENTS = 64  # requests handled at once
MAX_STREAMS = 32  # of them, event streams
CLIENT_TIMEOUT = 10.0  # seconds a client may take to send its request
STREAM_SECONDS = 3600.0  # an event stream ends after this; the page reconnects
MAX_REQUEST_LINE = 8192
MAX_HEAD = 32 * 1024  # bytes of request line and headers together (http.client allows 100 x 64 KiB)
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

Authorize = Callable[[str | None], bool]  # the Authorization header -> allowed


class VramHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a burst of connections waits in the kernel's queue rather than being dropped
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], service: Service, authorize: Authorize | None = None,
                 ipv6: bool = False, tls: ssl.SSLContext | None = None):
        self.address_family = socket.AF_INET6 if ipv6 else socket.AF_INET
        self.service = service
        self.authorize = authorize
        self.tls = tls
        self.errors_said: set[str] = set()  # internal errors already printed (once each)
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        self.refused = 0  # connections answered 503 for want of a slot
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            if self.tls is None:
                try:
                    request.setblocking(False)  # never wait on a client here: this is the accept loop
                    request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\nRetry-After: 1\r\n\r\n")
                except OSError:
                    pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            if self.tls is not None:
                request.settimeout(CLIENT_TIMEOUT)
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (OSError, ValueError):  # ssl.SSLError is an OSError; a timeout too
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away, timed out or spoke bad TLS is no news; anything else is a bug,
        said in one line (once per message), never a traceback per connection."""
        kind, error = sys.exc_info()[:2]
        if kind is None or issubclass(kind, OSError):
            return
        self.say_once(f"{kind.__name__}: {error}")

    def say_once(self, message: str) -> None:
        if message not in self.errors_said and len(self.errors_said) < 100:
            self.errors_said.add(message)
            print(f"vram serve: internal error answering a request: {message[:300]}", file=sys.stderr, flush=True)


class _HeadTooLarge(http.client.HTTPException):
    """More than MAX_HEAD bytes before the request head ended: http.server answers 431."""


class HeadReader(io.RawIOBase):
    """The connection's bytes for the request parser, with a deadline and a byte budget for the
    request head: a socket timeout alone bounds each read, so a client trickling one byte every
    few seconds (slowloris) would hold its thread for ever."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.deadline: float | None = None  # monotonic time the head must be in by
        self.budget: int | None = None  # bytes the head may still take

    def start_head(self) -> None:
        self.deadline = time.monotonic() + CLIENT_TIMEOUT
        self.budget = MAX_HEAD

    def end_head(self) -> None:
        self.deadline = self.budget = None
        self.sock.settimeout(CLIENT_TIMEOUT)  # for writing the answer

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request head took too long")
            self.sock.settimeout(left)
        if self.budget is not None:
            if self.budget <= 0:
                raise _HeadTooLarge(f"request head longer than {MAX_HEAD} bytes")
            view = view[:self.budget]
        n = self.sock.recv_into(view)
        if self.budget is not None:
            self.budget -= n
        return n


class Handler(BaseHTTPRequestHandler):
    server: VramHTTPServer
    timeout = CLIENT_TIMEOUT
    protocol_version = "HTTP/1.1"
    server_version = "vram-serve"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # no access log on stderr: a scraper every 15 s would fill the journal

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the base class's reader, replaced by one with a deadline
        self.head_reader = HeadReader(self.connection)
        self.rfile = io.BufferedReader(self.head_reader)

    def handle_one_request(self) -> None:
        """http.server's, with the head's deadline and budget, a 414 past MAX_REQUEST_LINE and
        405 for every method but GET and HEAD (its 501 says 'unsupported', as if one day)."""
        self.head_reader.start_head()
        self._headers_sent = False
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414, "request line too long")
                self.close_connection = True
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():  # it answered 400 or 431 itself
                self.close_connection = True
                return
        except TimeoutError:
            self.close_connection = True
            return
        except _HeadTooLarge:
            self.send_error(431, "request head too large")
            self.close_connection = True
            return
        self.head_reader.end_head()
        if self.command == "GET":
            self.do_GET()
        elif self.command == "HEAD":
            self.do_HEAD()
        else:
            self._refuse_method()
        self.wfile.flush()

    # ------------------------------------------------------------ dispatch
    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._dispatch(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch(head=False)

    def _refuse_method(self) -> None:
        self.close_connection = True  # a body it may have sent is not read
        self._send(405, b"method not allowed: vram serve is read-only\n", "text/plain; charset=utf-8",
                   extra={"Allow": "GET, HEAD"})

    def _dispatch(self, head: bool) -> None:
        try:
            self._route(head)
        except OSError:
            raise  # the client went away: handle_error stays quiet
        except Exception as e:  # a bug building an answer: this client gets 500, the server goes on
            self.server.say_once(f"{type(e).__name__}: {e}")
            self.close_connection = True
            if not self._headers_sent:
                self._send(500, b"internal error (said on vram serve's stderr)\n", "text/plain; charset=utf-8")

    def _route(self, head: bool) -> None:
        authorize = self.server.authorize
        if authorize is not None and not authorize(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", "text/plain; charset=utf-8",
                       extra={"WWW-Authenticate": 'Basic realm="vram"'})
            return
        url = urlsplit(self.path)
        path = url.path
        service = self.server.service
        if path == "/metrics":
            self._send(200, service.metrics(), "text/plain; version=0.0.4; charset=utf-8", head=head)
        elif path == "/api/v1/snapshot":
            code = 200 if service.latest is not None else 503
            self._send(code, service.snapshot_json(), "application/json", head=head)
        elif path == "/api/v1/events":
            self._events(head)
        elif path == "/api/v1/history":
            self._history(url.query, head)
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
    _headers_sent = False

    def _send(self, code: int, body: bytes, content_type: str, head: bool = False,
              extra: dict[str, str] | None = None) -> None:
        self._headers_sent = True
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _static(self, name: str, head: bool) -> None:
        try:
            body = resources.files("vramkit.serve").joinpath("web").joinpath(name).read_bytes()
        except (FileNotFoundError, OSError):
            self._send(404, b"not found\n", "text/plain; charset=utf-8", head=head)
            return
        self._send(200, body, STATIC[name], head=head)

    def _history(self, query: str, head: bool) -> None:
        service = self.server.service
        wanted = parse_qs(query).get("range", ["1h"])[0]
        span = HISTORY_RANGES.get(wanted)
        if span is None:
            body = json.dumps({"error": f"range must be one of {', '.join(HISTORY_RANGES)}"}).encode()
            self._send(400, body, "application/json", head=head)
            return
        code, answer = service.history(span)
        self._send(code, json.dumps(answer, allow_nan=False).encode(), "application/json", head=head)

    def _events(self, head: bool) -> None:
        streams = self.server.streams
        if not streams.acquire(blocking=False):
            self._send(503, b"too many event streams\n", "text/plain; charset=utf-8", extra={"Retry-After": "5"})
            return
        try:
            self._headers_sent = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            for name, value in SECURITY_HEADERS.items():
                self.send_header(name, value)
            self.end_headers()
            if head:
                return
            self.close_connection = True
            service = self.server.service
            seen = -2
            ends = time.monotonic() + STREAM_SECONDS
            while time.monotonic() < ends:
                current = service.wait_for_change(seen, timeout=15)
                if current < 0:
                    return  # the service is closing
                if current == seen:
                    self.wfile.write(b": keep-alive\n\n")  # also finds a client that went away
                else:
                    seen = current
                    self.wfile.write(b"event: snapshot\ndata: " + service.snapshot_json() + b"\n\n")
                self.wfile.flush()
        except OSError:
            return  # the client went away
        finally:
            streams.release()
