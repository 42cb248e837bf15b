"""One bounded HTTP GET from a server vram does not trust: Prometheus' API (fleet.py), another host's
vram serve (fleet_hosts.py).

- One deadline for the whole request, connection, TLS, headers and body together (and redirects,
  when followed, to http and https addresses only): a watch shuts the connection down when it
  passes, whatever it is waiting for (a byte a second is no answer).
- The body is bounded in size; an HTTP error status comes back as an answer, with its body (as
  bounded), for the caller to read its error text.
- It asks for gzip (vram serve's answers shrink ~10x) and unpacks it as it comes, the bound on
  the unpacked size: a small answer that unpacks to gigabytes (a gzip bomb) is cut off there.
- The work of one read is bounded by counting, not by the clock alone: the lines of the answer's
  framing (status lines, headers, chunk sizes, trailers: each costs the HTTP client a round of
  Python, however few bytes it holds) and their bytes, and the gzip members (each a new inflater):
  an answer in a million 1-byte chunks or empty gzip members is refused after the bound, not read
  until the deadline.
- Every failure is one GetError saying what kind it was, for the caller to word.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import VramkitError

CHUNK = 65536
# What one answer may cost beyond its bytes. An honest one needs a few: vram serve sends one gzip
# member with a Content-Length; a Go server (Prometheus) chunks every ~4 KiB; gzip(1)'s
# concatenations and BGZF's 64 KiB blocks stay within a few hundred members at 32 MiB.
MAX_LINES = 65_536  # lines of framing: status lines (100 Continue's too), headers, chunk sizes, trailers
MAX_LINE_BYTES = 1024**2  # bytes of those lines together
MAX_MEMBERS = 16_384  # gzip members in one body


@dataclass
class Answer:
    status: int
    reason: str
    body: bytes


class GetError(VramkitError):
    """Why a GET got no answer. kind: 'slow' (the deadline passed), 'unreachable' (the connection
    failed or broke), 'not-http' (what came back is not HTTP, or a head past MAX_LINES),
    'bad-body' (it answered in HTTP, but its body cannot be unpacked: broken or cut gzip, an
    encoding not asked for, more gzip members or chunks than MAX_MEMBERS or MAX_LINES), 'too-big'
    (over max_bytes)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


class Watch:
    """A deadline over every connection of one request (redirects included): when it passes, the
    connections are shut down, which ends any read or TLS handshake waiting on them at once. Each
    socket is watched through its own duplicate of the descriptor, so the watch never touches a
    descriptor number the program reused after the connection closed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self._fds: list[int] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    def passed(self) -> bool:
        return self.expired or time.monotonic() >= self.deadline

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            fd = os.dup(sock.fileno())
            self._fds.append(fd)
            if self.expired:
                _shut(fd)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for fd in self._fds:
                _shut(fd)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for fd in self._fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()

    def connection(self, http_class: Callable[..., http.client.HTTPConnection]
                   ) -> Callable[..., http.client.HTTPConnection]:
        """urllib's connection class, made to connect within the deadline and be watched."""
        def make(host: str, **kwargs: Any) -> http.client.HTTPConnection:
            kwargs["timeout"] = self.left()
            conn = http_class(host, **kwargs)
            conn.response_class = _Response
            create: Callable[..., socket.socket] = conn._create_connection  # type: ignore[attr-defined]

            def watched(address: tuple[str, int], timeout: float | None = None,
                        source_address: tuple[str, int] | None = None) -> socket.socket:
                sock = create(address, self.left(), source_address)
                sock.settimeout(self.left())  # also bounds each read; the watch bounds them all
                self.add(sock)
                return sock
            conn._create_connection = watched  # type: ignore[attr-defined]
            return conn
        return make


class _Framing:
    """The file an answer is read from, counting the lines the HTTP client reads from it (and
    their bytes): past MAX_LINES or MAX_LINE_BYTES, GetError of `kind`, 'not-http' while the head
    is read, 'bad-body' in the body (counted anew). Reads of the body's own bytes pass straight
    through."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self.kind = "not-http"
        self.lines = 0
        self.size = 0
        self.read, self.readinto, self.read1, self.peek, self.close = (
            file.read, file.readinto, file.read1, file.peek, file.close)

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self._file.readline(limit)
        self.lines += 1
        self.size += len(line)
        if self.lines > MAX_LINES or self.size > MAX_LINE_BYTES:
            head = self.kind == "not-http"
            if self.lines > MAX_LINES:
                raise GetError(self.kind, f"its {'head runs' if head else 'chunks and trailers run'} past "
                                          f"{MAX_LINES} lines")
            raise GetError(self.kind, f"its {'head runs' if head else 'chunk size lines run'} past "
                                      f"{MAX_LINE_BYTES // 1024**2} MiB")
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class _Response(http.client.HTTPResponse):
    """http.client's answer, its framing counted (_Framing)."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self._framing = _Framing(self.fp)
        self.fp = self._framing  # type: ignore[assignment]

    def begin(self) -> None:
        super().begin()
        self._framing.kind, self._framing.lines, self._framing.size = "bad-body", 0, 0  # the body's own count


def _shut(fd: int) -> None:
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as what it is (a 3xx), not followed: credentials are never carried
    to an address the user did not name."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _HttpOnlyRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects followed to http and https addresses only: urllib follows one to ftp:// too, a
    connection the watch does not see (a server trickling there outlasts the deadline)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise GetError("not-http", f"redirected ({code}) to an address that is not http or https")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(watch: Watch, context: ssl.SSLContext | None, redirects: bool) -> urllib.request.OpenerDirector:
    class Plain(urllib.request.HTTPHandler):
        def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
            return super().do_open(watch.connection(http_class), req, **kwargs)

    class Tls(urllib.request.HTTPSHandler):
        def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
            return super().do_open(watch.connection(http_class), req, **kwargs)

    handlers: list[urllib.request.BaseHandler] = [Plain(), Tls(context=context),
                                                  _HttpOnlyRedirect() if redirects else _NoRedirect()]
    return urllib.request.build_opener(*handlers)


def reason(e: BaseException) -> str:
    """An exception's words, one line (http.client's include the bytes it refused, repr'd)."""
    text = str(e) or type(e).__name__
    return text.splitlines()[0] if text.strip() else type(e).__name__


def get(url: str, deadline: float, max_bytes: int, headers: Mapping[str, str] | None = None,
        context: ssl.SSLContext | None = None, redirects: bool = True) -> Answer:
    """GET `url` by `deadline` (time.monotonic()), reading at most `max_bytes` of body; an HTTP
    error status is an Answer too. Raises GetError."""
    if time.monotonic() >= deadline:
        raise GetError("slow")
    watch = Watch(deadline)
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip", **(headers or {})})
    try:
        opener = _opener(watch, context, redirects)
        try:
            with opener.open(request, timeout=watch.left()) as response:
                return Answer(response.status, str(response.reason), _read(response, watch, max_bytes))
        except urllib.error.HTTPError as e:  # 4xx/5xx (and a 3xx not followed): its body may say why
            try:
                try:
                    body = _read(e, watch, max_bytes)
                except GetError as unread:
                    # A body it cannot unpack (an encoding not asked for, broken gzip) leaves the
                    # status the answer, as before it asked for gzip; too big or too slow does not.
                    if unread.kind != "bad-body":
                        raise
                    body = b""
                except Exception:  # noqa: BLE001 - the status is the answer; a body cut short adds nothing
                    if watch.passed():
                        raise GetError("slow") from None
                    body = b""
                return Answer(e.code, str(e.reason), body)
            finally:
                with contextlib.suppress(Exception):
                    e.close()
    except GetError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a broken answer makes urllib raise
        if watch.passed() or isinstance(e, TimeoutError):
            raise GetError("slow") from None
        if isinstance(e, urllib.error.URLError):
            if isinstance(e.reason, TimeoutError):
                raise GetError("slow") from None
            why: object = (e.reason.strerror if isinstance(e.reason, OSError) and e.reason.strerror
                           else e.reason)
            raise GetError("unreachable", str(why)) from None
        if isinstance(e, (OSError, ValueError)):  # a connection reset mid-answer, a bad chunk size
            raise GetError("unreachable", reason(e)) from None
        # A malformed status line, too many headers (http.client.HTTPException), or whatever else
        # a broken answer makes the HTTP client raise.
        raise GetError("not-http", reason(e)) from None
    finally:
        watch.close()


def _read(response: Any, watch: Watch, max_bytes: int) -> bytes:
    """The body, unpacked where it came gzipped: at most `max_bytes` as sent and as unpacked."""
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    unpack = Gunzip(max_bytes) if encoding in ("gzip", "x-gzip") else None
    if unpack is None and encoding != "identity":
        raise GetError("bad-body", f"it came in an encoding not asked for ({encoding[:40]})")
    chunks: list[bytes] = []
    size = 0
    while True:
        if watch.passed():
            raise GetError("slow")
        chunk = response.read(CHUNK)
        if not chunk:
            if watch.passed():  # the watch shut the connection: an end, not the answer's
                raise GetError("slow")
            if unpack is not None:
                unpack.end()
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise GetError("too-big")
        chunks.extend(unpack.feed(chunk) if unpack is not None else (chunk,))


class Gunzip:
    """A gzip body unpacked as it comes, never more than `limit` bytes of it however few bytes
    came: zlib is asked for at most one byte past what is left, so a bomb costs `limit` bytes of
    memory and the time to unpack that much, then GetError('too-big'). Members one after another
    (as gzip(1) writes them) are one body; zeros after the last member are padding (as gzip(1) and
    Python's gzip take them), but only zeros may follow them. At most MAX_MEMBERS members: an
    empty one is 20 bytes, and each costs a new inflater (32 MiB of them ~2.5 s of CPU)."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self._unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._members = 1
        self._fed = False
        self._padding = False  # a member ended and zeros followed: only zeros may come now

    def feed(self, data: bytes) -> list[bytes]:
        out = []
        try:
            while data:
                if self._padding or (self._unzip.eof and data[0] == 0):
                    self._padding = True
                    if data.strip(b"\0"):
                        raise GetError("bad-body", "its gzip is followed by something other than zeros")
                    break
                if self._unzip.eof:  # a member has ended: what follows is the next one
                    self._members += 1
                    if self._members > MAX_MEMBERS:
                        raise GetError("bad-body", f"its gzip comes in more than {MAX_MEMBERS} members")
                    self._unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._fed = True
                piece = self._unzip.decompress(data, self.left + 1)
                if len(piece) > self.left:
                    raise GetError("too-big")
                self.left -= len(piece)
                out.append(piece)
                data = self._unzip.unused_data if self._unzip.eof else self._unzip.unconsumed_tail
        except zlib.error as e:
            raise GetError("bad-body", f"its gzip is broken: {e}") from None
        return out

    def end(self) -> None:
        if self._fed and not self._unzip.eof:
            raise GetError("bad-body", "its gzip ends before the end of its data")
