"""The HTTP side of `vram serve`: a small threaded server with bounded concurrency, read-only
routes, and nothing a client can make it do but answer.

    /                     the web page (static files from serve/web/)
    /metrics              Prometheus' text format
    /api/v1/snapshot      the newest reading, as `vram status --json` prints it
    /api/v1/events        server-sent events: the same JSON after every reading
    /api/v1/history       recorded memory and utilization per GPU (?range=1h), when a store exists
    /healthz              200 once the first reading is in

Every connection beyond MAX_CLIENTS is answered 503 at once, without a thread; a client that
sends nothing for CLIENT_TIMEOUT seconds is dropped; at most MAX_STREAMS event streams are open.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .service import Service

MAX_CLIENTS = 64  # requests handled at once
MAX_STREAMS = 32  # of them, event streams
CLIENT_TIMEOUT = 10.0  # seconds a client may take to send its request
STREAM_SECONDS = 3600.0  # an event stream ends after this; the page reconnects
MAX_REQUEST_LINE = 8192
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
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], service: Service, authorize: Authorize | None = None,
                 ipv6: bool = False):
        self.address_family = socket.AF_INET6 if ipv6 else socket.AF_INET
        self.service = service
        self.authorize = authorize
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        self.refused = 0  # connections answered 503 for want of a slot
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
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
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class Handler(BaseHTTPRequestHandler):
    server: VramHTTPServer
    timeout = CLIENT_TIMEOUT
    protocol_version = "HTTP/1.1"
    server_version = "vram-serve"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # no access log on stderr: a scraper every 15 s would fill the journal

    # ------------------------------------------------------------ dispatch
    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._dispatch(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch(head=False)

    def _refuse_method(self) -> None:
        self._send(405, b"method not allowed: vram serve is read-only\n", "text/plain; charset=utf-8",
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method  # noqa: N815

    def _dispatch(self, head: bool) -> None:
        if len(self.path) > MAX_REQUEST_LINE:
            self._send(414, b"request line too long\n", "text/plain; charset=utf-8")
            return
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
    def _send(self, code: int, body: bytes, content_type: str, head: bool = False,
              extra: dict[str, str] | None = None) -> None:
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
