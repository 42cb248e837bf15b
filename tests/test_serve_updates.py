"""What `vram serve` sends, and when it builds it: /metrics written by the sampler right after each
reading (a scrape only sends bytes), gzip when the client asks, and event streams that send the
whole status JSON once, then only what changed (serve/updates.py), the whole JSON again to a
stream that missed a delta."""

from __future__ import annotations

import copy
import gzip
import json
import socket
import time
import zlib
from typing import Any

import pytest
from helpers import Served, serving

import vramkit
from vramkit.serve import service as service_module
from vramkit.serve.http import CLIENT_TIMEOUT, Connection, VramHTTPServer, accepts_gzip
from vramkit.serve.service import Options, Service
from vramkit.serve.updates import CLOCKS, SLACK, TOP_CLOCKS, Shown, process_key

MAX_BODY = 64 << 20  # what a test inflates at most: a broken server cannot fill the memory


def inflate(data: bytes) -> bytes:
    """A gzip body, bounded."""
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(data, MAX_BODY)
    assert not d.unconsumed_tail, "more than MAX_BODY inflated"
    assert d.eof
    return out


# ---------------------------------------------------------------- the page's side, in Python
def apply(doc: dict[str, Any], delta: dict[str, Any]) -> None:
    """app.js' applyDelta, step for step: the test of the protocol's promise that the page's copy
    and the server's stay equal."""
    dt = delta["dt"]
    for name in TOP_CLOCKS:
        if isinstance(doc.get(name), (int, float)):
            doc[name] = doc[name] + dt
    doc.update(delta.get("set", {}))
    for i, gpu in enumerate(doc["gpus"]):
        for p in gpu["processes"]:
            for name in CLOCKS:
                if isinstance(p.get(name), (int, float)) and not isinstance(p.get(name), bool):
                    p[name] = p[name] + dt
        change = delta.get("gpus", {}).get(str(i))
        if not change:
            continue
        gpu.update(change.get("set", {}))
        gone = set(change.get("del", ()))
        processes = [p for p in gpu["processes"] if process_key(p) not in gone]
        by_key = {process_key(p): p for p in processes}
        for name, pairs in change.get("chg", {}).items():
            for key, value in pairs:
                by_key[key][name] = value
        gpu["processes"] = processes + change.get("add", [])


def proc(pid: int, **kw: Any) -> dict[str, Any]:
    return {"pid": pid, "mig_gi": None, "memory": 1 << 30, "user": "ann", "sm_utilization": 10,
            "cpu_percent": 50.0, "elapsed": 100.0, "idle": False, "idle_for": None, **kw}


def doc_at(t: float, processes: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"timestamp": t, "time": str(t), "watched_for": t - 1000.0, **top,
            "gpus": [{"index": 0, "memory_used": sum(p["memory"] for p in processes), "processes": processes},
                     {"index": 1, "memory_used": 0, "processes": []}]}


def test_a_delta_carries_what_changed_and_the_clocks_run_on_by_themselves():
    shown = Shown()
    first = [proc(10), proc(11, idle=True, idle_for=40.0), proc(12)]
    assert shown.advance(doc_at(1000.0, copy.deepcopy(first)), 1) is None  # nothing to make one from
    later = [proc(10, elapsed=102.0, sm_utilization=90), proc(11, elapsed=102.0, idle=True, idle_for=42.0),
             proc(13, elapsed=1.0)]
    delta = shown.advance(doc_at(1002.0, copy.deepcopy(later)), 2)
    assert delta is not None
    assert delta["base"] == 1 and delta["dt"] == 2.0
    assert delta["set"] == {"timestamp": 1002.0, "time": "1002.0"}  # watched_for ran on by itself
    gpu = delta["gpus"]["0"]
    assert gpu["chg"] == {"sm_utilization": [["10", 90]]}  # one value, not a process record
    assert gpu["del"] == ["12"]
    assert [p["pid"] for p in gpu["add"]] == [13]
    assert "set" not in gpu  # three processes of 1 GiB before and after: the same memory used
    assert "1" not in delta["gpus"]  # GPU 1 did not change: not named


def test_a_clock_that_jumps_is_sent():
    shown = Shown()
    shown.advance(doc_at(1000.0, [proc(10, idle=True, idle_for=500.0)]), 1)
    # It ran a kernel: no longer idle. Then a new process under the same pid (elapsed back to 1 s).
    delta = shown.advance(doc_at(1002.0, [proc(10, elapsed=102.0, idle=False, idle_for=None)]), 2)
    assert delta is not None and delta["gpus"]["0"]["chg"] == {"idle": [["10", False]], "idle_for": [["10", None]]}
    delta = shown.advance(doc_at(1004.0, [proc(10, elapsed=1.0)]), 3)
    assert delta is not None and delta["gpus"]["0"]["chg"] == {"elapsed": [["10", 1.0]]}


def test_the_page_s_copy_stays_the_server_s_and_within_slack_of_the_truth():
    shown = Shown()
    procs = [proc(pid, elapsed=float(pid), idle=pid % 3 == 0, idle_for=float(pid) / 2 if pid % 3 == 0 else None)
             for pid in range(100, 140)]
    t = 1_700_000_000.0
    shown.advance(doc_at(t, copy.deepcopy(procs)), 1)
    page = json.loads(json.dumps(shown.doc))  # what the page got: the whole JSON, through JSON
    for step in range(2, 40):
        dt = 1.0 + (step % 7) * 0.001  # readings do not come on the dot
        t += dt
        for i, p in enumerate(procs):
            p["elapsed"] = round(p["elapsed"] + dt, 1)  # as process_dict rounds it
            if p["idle_for"] is not None:
                p["idle_for"] += dt
            p["sm_utilization"] = (step * 7 + i) % 100 if i % 4 == 0 else p["sm_utilization"]
        if step == 20:
            procs = procs[5:] + [proc(999, elapsed=0.5)]
        truth = doc_at(t, copy.deepcopy(procs))
        delta = shown.advance(copy.deepcopy(truth), step)
        assert delta is not None
        apply(page, json.loads(json.dumps(delta)))
        assert page == shown.doc  # to the last bit, clocks included
        for mine, real in zip(page["gpus"][0]["processes"], truth["gpus"][0]["processes"]):
            assert mine["pid"] == real["pid"] and mine["sm_utilization"] == real["sm_utilization"]
            assert abs(mine["elapsed"] - real["elapsed"]) < SLACK
            if real["idle_for"] is not None:
                assert abs(mine["idle_for"] - real["idle_for"]) < SLACK


def test_a_different_number_of_gpus_makes_no_delta():
    shown = Shown()
    shown.advance(doc_at(1.0, [proc(1)]), 1)
    fewer = doc_at(2.0, [proc(1)])
    fewer["gpus"].pop()
    assert shown.advance(fewer, 2) is None


@pytest.mark.parametrize(("header", "wanted"), [
    ("gzip", True), ("gzip, deflate, br", True), ("br;q=1.0, gzip;q=0.8", True), ("*", True), ("GZIP", True),
    (None, False), ("", False), ("identity", False), ("gzip;q=0", False), ("gzip;q=0.000", False),
    ("deflate, br", False), ("gzip;q=nonsense", False), ("x" * 10_000 + ", gzip", True),
    (", " * 100 + "gzip", False),  # past the 64 entries looked at
])
def test_accept_encoding(header, wanted):
    assert accepts_gzip(header) is wanted


# ---------------------------------------------------------------- the service
def test_the_sampler_writes_metrics_and_a_scrape_only_sends_them(monkeypatch):
    service = Service(vramkit.open_machine("demo"), Options(interval=60.0, xids=False))
    try:
        service.collector.sample()
        written = service.metrics()
        assert b"vram_gpu_memory_used_bytes" in written

        def no_render(*args: object, **kw: object) -> bytes:
            raise AssertionError("rendered by the scraping thread")
        monkeypatch.setattr(service_module, "render", no_render)
        assert service.metrics() is written  # the bytes the sampler wrote
        assert inflate(service.metrics(packed=True)) == written  # compressed once, here
        monkeypatch.undo()
        service.collector.sample()  # gzip was asked: the sampler compresses too
        monkeypatch.setattr(service_module, "render", no_render)
        monkeypatch.setattr(service_module, "gzipped", no_render)
        assert service.metrics() is not written  # the new reading's, written by the sampler
        assert inflate(service.metrics(packed=True)) == service.metrics()
    finally:
        service.close()


# ---------------------------------------------------------------- over HTTP
def get(served: Served, path: str, encoding: str | None) -> tuple[int, dict[str, str], bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=20)
    try:
        conn.request("GET", path, headers={"Accept-Encoding": encoding} if encoding is not None else {})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read(MAX_BODY)
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/metrics", "/api/v1/snapshot", "/", "/static/app.js"])
def test_gzip_when_the_client_asks_and_only_then(served, path):
    server = served("--simulate", "demo", "--interval", "1h")  # one reading: every answer the same
    code, headers, plain = get(server, path, None)
    assert code == 200 and "content-encoding" not in headers
    code, headers, packed = get(server, path, "gzip, br")
    assert code == 200 and headers["content-encoding"] == "gzip"
    # The page also varies with the reader's language (issue 34: serve/page_words.py).
    assert headers["vary"] == ("Accept-Encoding, Accept-Language" if path == "/" else "Accept-Encoding")
    assert int(headers["content-length"]) == len(packed) < len(plain)
    assert inflate(packed) == plain
    code, headers, refused = get(server, path, "gzip;q=0, identity")
    assert "content-encoding" not in headers and refused == plain


class Events:
    """The events of an open stream, read as they come (bounded)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def next(self, count: int) -> list[tuple[str, int, bytes]]:
        """(event, id, data) of the events in the next `count` blocks (a comment is a block)."""
        events: list[tuple[str, int, bytes]] = []
        deadline = time.monotonic() + 30  # a broken server must not hang the suite
        for _ in range(count):
            while b"\n\n" not in self.buffer:
                assert time.monotonic() < deadline, f"{len(events)} of {count} events came"
                chunk = self.sock.recv(1 << 20)
                assert chunk, "the stream ended"
                self.buffer += chunk
                assert len(self.buffer) < MAX_BODY
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if line and not line.startswith(b":"))
            if b"event" in fields:
                events.append((fields[b"event"].decode(), int(fields[b"id"]), fields[b"data"]))
        return events


def open_stream(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk
        head += chunk
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
    return sock


@pytest.mark.slow
def test_a_stream_sends_the_whole_json_once_then_deltas_from_the_reading_before(served):
    server = served("--simulate", "demo")  # --interval 0.2s: processes' clocks, the timeline
    with open_stream(server.port) as sock:
        events = Events(sock).next(6)
    kind, seq, data = events[0]
    assert kind == "snapshot"
    page = json.loads(data)
    assert page["gpus"] and "processes" in page["gpus"][0]
    for kind, next_seq, data in events[1:]:
        assert kind == "delta"
        delta = json.loads(data)
        assert delta["base"] == seq
        assert len(data) < len(events[0][2]) / 10  # what changed, not everything again
        apply(page, delta)
        seq = next_seq
    code, _, truth_body = get(server, "/api/v1/snapshot", None)
    truth = json.loads(truth_body)
    assert code == 200 and len(page["gpus"]) == len(truth["gpus"])
    assert ({(p["pid"], p["user"]) for g in page["gpus"] for p in g["processes"]}
            == {(p["pid"], p["user"]) for g in truth["gpus"] for p in g["processes"]})


def test_a_stream_that_missed_a_delta_gets_the_whole_json():
    """The front's bookkeeping, in process, on a socket pair: a stream that has not taken the last
    event is skipped (as before); the next event it gets is the whole JSON, not a delta from a
    reading its page never had."""
    service = Service(vramkit.open_machine("demo"), Options(interval=3600.0, xids=False))
    server = VramHTTPServer(("127.0.0.1", 0), service)
    mine, theirs = socket.socketpair()
    try:
        mine.setblocking(False)
        conn = Connection(mine, ("127.0.0.1", 1), False, time.monotonic(), 1, CLIENT_TIMEOUT)
        conn.state = "stream"
        server._conns.add(conn)
        stream = Events(theirs)

        def reading() -> None:
            service.collector.sample()
            server._stream_news()

        reading()
        assert [kind for kind, _, _ in stream.next(1)] == ["snapshot"]
        reading()
        (kind, seq, data), = stream.next(1)
        assert kind == "delta"
        conn.out += b": not taken yet\n\n"  # the client is slow: this reading's delta is skipped
        reading()
        server._flush(conn)  # the client takes it now
        assert stream.next(1) == []  # the comment only
        reading()
        (kind, later, data), = stream.next(1)
        assert kind == "snapshot" and later == seq + 2  # the whole JSON, of the newest reading
        reading()
        (kind, _, data), = stream.next(1)
        assert kind == "delta" and json.loads(data)["base"] == later
    finally:
        server.server_close()
        service.close()
        theirs.close()


def test_gzip_of_one_body_is_the_same_bytes():
    body = b"vram_gpu_memory_used_bytes 1\n" * 1000
    assert service_module.gzipped(body) == service_module.gzipped(body)
    assert gzip.decompress(service_module.gzipped(body)) == body


def test_a_bug_building_an_event_costs_the_streams_not_the_server(capsys):
    """An exception building the stream's news (in the sampler, then in the front) is said once
    on stderr and is not a failed reading; the front goes on answering."""
    import urllib.request

    service = Service(vramkit.open_machine("demo"), Options(interval=0.2, xids=False))
    real = service.update
    calls: list[int] = []

    def breaks_after_the_first() -> object:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("a bug building an event")
        return real()
    service.update = breaks_after_the_first  # type: ignore[method-assign,assignment]
    with serving(service) as server:
        with open_stream(server.server_address[1]) as sock:
            assert [kind for kind, _, _ in Events(sock).next(1)] == ["snapshot"]
            for _ in range(3):  # readings with the stream open: each one's news fails
                seen = service.sequence
                assert service.wait_for_change(seen, 30) != seen
            for _ in range(3):
                with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/healthz", timeout=10) as r:
                    assert r.status == 200
    assert len(calls) >= 3 and service.state.read_errors == 0
    err = capsys.readouterr().err
    assert err.splitlines() == ["vram serve: internal error answering a request: RuntimeError: a bug building an event"]
