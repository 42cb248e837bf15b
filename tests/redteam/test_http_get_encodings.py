"""http_get against a hostile or careless HTTP peer (vram fleet --hosts, vram serve --hosts, fleet's
Prometheus): an error status whose body comes in an encoding it cannot unpack is still that status,
as it was before it asked for gzip; gzip sent chunked and in many members is one body; zeros after
the last member are padding (as gzip(1) takes them); a 200 whose body cannot be unpacked is said as
an answer that cannot be read, not as a host that did not answer in HTTP. A peer that makes the
reader spin (a body in tens of thousands of empty gzip members or 1-byte chunks, 100 Continue after
100 Continue) is refused at a count of what was done, not read until the deadline."""

from __future__ import annotations

import gzip
import re
import time

import pytest
from helpers import clean_env, run_vram
from test_fleet_hosts import FakeHost, send, snapshot

from vramkit.fleet import Prometheus, PrometheusError
from vramkit.fleet_hosts import ClientConfig, Down, fetch_snapshot
from vramkit.http_get import MAX_LINE_BYTES, MAX_LINES, MAX_MEMBERS, GetError, get
from vramkit.serve.hosts import OtherHosts

MiB = 1024**2
BODY = b'{"gpus": [], "error": "no reading yet"}'
EMPTY_MEMBER = gzip.compress(b"", mtime=0)  # 20 bytes


def send_chunked(handler, chunks: bytes) -> None:
    """A 200 whose body is `chunks`, already in chunked framing."""
    handler.protocol_version = "HTTP/1.1"
    handler.send_response(200)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(chunks)


def answer(handler) -> None:
    path = handler.path.split("/api/v1/", 1)[0]
    name, _dash, count = path.rpartition("-")
    if name == "/members":  # BODY's member, then empty ones: count members in all
        send(handler, gzip.compress(BODY, mtime=0) + EMPTY_MEMBER * (int(count) - 1), **{"Content-Encoding": "gzip"})
    elif name == "/chunks":  # 1-byte chunks, with the last chunk and the trailer's end: count lines
        send_chunked(handler, b"1\r\nx\r\n" * (int(count) - 2) + b"0\r\n\r\n")
    elif name == "/chunk-lines":  # chunk sizes padded with extensions: count bytes of lines
        line = b"1;" + b"e" * 4000 + b"\r\n"
        send_chunked(handler, (line + b"x\r\n") * (int(count) // len(line)) + b"0\r\n\r\n")
    elif name == "/continue":  # 100 Continue, count times, then an answer
        handler.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n" * int(count))
        send(handler, BODY)
    elif path == "/401-br":  # a proxy in front of vram serve: its login page, in an encoding not asked for
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
    elif path == "/padded":  # a complete member, then zeros (a block device's padding)
        send(handler, gzip.compress(BODY) + b"\0" * 70_000, **{"Content-Encoding": "gzip"})
    elif path == "/padded-junk":  # zeros, then something else: not padding
        send(handler, gzip.compress(BODY) + b"\0" * 9 + b"junk", **{"Content-Encoding": "gzip"})
    elif path == "/200-broken":  # a 200 whose gzip is broken
        send(handler, b"\x1f\x8b\x08\x00" + b"\xff" * 40, **{"Content-Encoding": "gzip"})
    elif path == "/200-cut":
        send(handler, gzip.compress(snapshot())[:-6], **{"Content-Encoding": "gzip"})
    elif path == "/200-br":
        send(handler, b"\x0b\x02\x80{}", **{"Content-Encoding": "br"})


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


def test_zeros_after_the_last_member_are_padding(server):
    got = get(f"http://{server.address}/padded", time.monotonic() + 10, MiB)
    assert (got.status, got.body) == (200, BODY)


@pytest.mark.parametrize(("path", "detail"), [
    ("/padded-junk", "its gzip is followed by something other than zeros"),
    ("/200-broken", "its gzip is broken: "),
    ("/200-cut", "its gzip ends before the end of its data"),
    ("/200-br", "it came in an encoding not asked for (br)"),
])
def test_a_200_whose_body_cannot_be_unpacked_is_an_answer_that_cannot_be_read(server, path, detail):
    with pytest.raises(GetError) as failed:
        get(f"http://{server.address}{path}", time.monotonic() + 10, MiB)
    assert failed.value.kind == "bad-body" and failed.value.detail.startswith(detail), failed.value
    # vram serve --hosts: the API's "why" and sentence (the page's words, by why)
    entry = OtherHosts([f"http://{server.address}{path}"], period=60, timeout=10).read(0)
    assert (entry["up"], entry["why"]) == (False, "bad-body"), entry
    assert entry["error"].startswith("answered, but its answer cannot be read: " + detail), entry
    # fleet's Prometheus reader
    with pytest.raises(PrometheusError, match="answered, but its answer cannot be read: " + re.escape(detail)):
        Prometheus(f"http://{server.address}{path}", timeout=10).query("up")


def test_vram_fleet_says_a_host_answered_but_its_answer_cannot_be_read(server):
    shown = run_vram("fleet", "--hosts", f"{server.address}/200-broken", env=clean_env())
    assert shown.rc == 1, shown.err
    line = shown.out.splitlines()[-1]
    assert "down: it answered, but its answer cannot be read: its gzip is broken: " in line, shown.out
    assert "did not answer in HTTP" not in shown.out


@pytest.mark.parametrize(("path", "bound", "at_bound", "detail"), [
    ("/members", MAX_MEMBERS, BODY, f"its gzip comes in more than {MAX_MEMBERS} members"),
    ("/chunks", MAX_LINES, b"x" * (MAX_LINES - 2), f"its chunks and trailers run past {MAX_LINES} lines"),
    ("/chunk-lines", MAX_LINE_BYTES, b"x" * (MAX_LINE_BYTES // 4004), "its chunk size lines run past 1 MiB"),
], ids=["members", "chunks", "chunk-lines"])
def test_a_body_that_makes_the_reader_spin_is_refused_at_a_count(server, path, bound, at_bound, detail):
    """32 MiB of empty gzip members cost ~2.5 s of CPU a read, 4 MiB of 1-byte chunks ~3.7 s: the
    reader counts members, lines and their bytes, and stops past the bound with 'bad-body', which
    vram fleet --hosts and vram serve --hosts say as an answer that cannot be read."""
    got = get(f"http://{server.address}{path}-{bound}", time.monotonic() + 30, 32 * MiB)
    assert (got.status, got.body) == (200, at_bound), got.body[:80]
    down = fetch_snapshot(f"http://{server.address}{path}-{bound + 4004}", time.monotonic() + 30, ClientConfig(),
                          32 * MiB)
    assert down == Down("bad-body", detail), down
    assert down.note(10, 32 * MiB) == f"down: it answered, but its answer cannot be read: {detail}"


def test_100_continue_after_100_continue_is_not_http_past_the_bound(server):
    got = get(f"http://{server.address}/continue-3", time.monotonic() + 30, MiB)
    assert (got.status, got.body) == (200, BODY)
    with pytest.raises(GetError) as failed:
        get(f"http://{server.address}/continue-{MAX_LINES // 2 + 1}", time.monotonic() + 30, MiB)
    assert (failed.value.kind, failed.value.detail) == ("not-http", f"its head runs past {MAX_LINES} lines")
