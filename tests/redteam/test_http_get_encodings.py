"""http_get against a hostile or careless HTTP peer (vram fleet --hosts, vram serve --hosts, fleet's
Prometheus): an error status whose body comes in an encoding it cannot unpack is still that status,
as it was before it asked for gzip; gzip sent chunked and in many members is one body."""

from __future__ import annotations

import gzip
import time

import pytest
from test_fleet_hosts import FakeHost, send

from vramkit.fleet_hosts import ClientConfig, Down, fetch_snapshot
from vramkit.http_get import get

MiB = 1024**2
BODY = b'{"gpus": [], "error": "no reading yet"}'


def answer(handler) -> None:
    path = handler.path.removesuffix("/api/v1/snapshot")
    if path == "/401-br":  # a proxy in front of vram serve: its login page, in an encoding not asked for
        send(handler, b"\x0b\x02\x80login", status=401, **{"Content-Encoding": "br"})
    elif path == "/503-cut":  # an error page cut short in its gzip
        send(handler, gzip.compress(b"<html>busy</html>")[:-5], status=503, **{"Content-Encoding": "gzip"})
    elif path == "/chunked":  # gzip sent chunked, in many members, as a streaming server writes it
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(200)
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for i in range(0, len(BODY), 7):
            member = gzip.compress(BODY[i:i + 7], mtime=0)
            for j in range(0, len(member), 5):
                part = member[j:j + 5]
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        handler.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def server():
    host = FakeHost(answer)
    yield host
    host.close()


@pytest.mark.parametrize(("path", "status"), [("/401-br", 401), ("/503-cut", 503)])
def test_an_error_status_whose_body_cannot_be_unpacked_is_still_that_status(server, path, status):
    got = get(f"http://{server.address}{path}", time.monotonic() + 10, MiB)
    assert (got.status, got.body) == (status, b"")


def test_vram_fleet_says_the_status_not_that_it_did_not_answer_in_http(server):
    down = fetch_snapshot(f"http://{server.address}/401-br", time.monotonic() + 10, ClientConfig(), MiB)
    assert isinstance(down, Down) and (down.kind, down.detail) == ("status", "401 Unauthorized"), down
    assert down.note(10, MiB).startswith("down: answered HTTP 401 Unauthorized"), down.note(10, MiB)


def test_chunked_gzip_in_many_members_is_one_body(server):
    got = get(f"http://{server.address}/chunked", time.monotonic() + 10, MiB)
    assert (got.status, got.body) == (200, BODY)
