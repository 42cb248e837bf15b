"""http_get: the one bounded GET of vram fleet --hosts, vram serve --hosts and vram fleet's
Prometheus. It asks for gzip and unpacks it as it comes, bounded by the unpacked size: a real HTTP
server here sends what a hostile host would, a gzip bomb (a megabyte that unpacks to a gigabyte),
broken gzip, an encoding never asked for."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc

import pytest
from helpers import clean_env, run_vram
from test_fleet_hosts import FakeHost, send, snapshot

from vramkit.http_get import GetError, get
from vramkit.serve.hosts import OtherHosts

MiB = 1024**2
# 1 GiB of zeros as 1,024 gzip members of 1 MiB each (as `cat a.gz b.gz` makes: one body), ~1 MB sent
BOMB = gzip.compress(bytes(MiB), mtime=0) * 1024


SNAPSHOT = snapshot({"index": 0, "memory_total": 80 * 1024**3}, hostname="gpu-a") * 20
BROKEN = {  # path: (body, its headers, what get() says of it)
    "/cut": (gzip.compress(b'{"gpus": []}')[:-6], {"Content-Encoding": "gzip"},
             "its gzip ends before the end of its data"),
    "/plain": (b"plain bytes", {"Content-Encoding": "gzip"}, "its gzip is broken: "),
    "/brotli": (b"\x00" * 40, {"Content-Encoding": "br"}, "it came in an encoding not asked for (br)"),
}


def answer(handler) -> None:
    """What the server sends for each path: as a server that gzips when asked (/snapshot), a
    hostile host's bomb (/bomb and /bomb/api/v1/snapshot, where vram fleet and serve --hosts ask)."""
    path = handler.path
    if path == "/snapshot":
        asked = "gzip" in handler.headers.get("Accept-Encoding", "")
        send(handler, gzip.compress(SNAPSHOT) if asked else SNAPSHOT, **({"Content-Encoding": "gzip"} if asked else {}))
    elif path.startswith("/bomb"):
        send(handler, BOMB, **{"Content-Encoding": "gzip"})
    elif path == "/error":
        send(handler, gzip.compress(b'{"error": "no reading yet"}'), status=503, **{"Content-Encoding": "gzip"})
    else:
        body, headers, _said = BROKEN[path]
        send(handler, body, **headers)


@pytest.fixture(scope="module")
def server():
    host = FakeHost(answer)
    yield host
    host.close()


def test_it_asks_for_gzip_and_reads_the_answer_unpacked(server):
    got = get(f"http://{server.address}/snapshot", time.monotonic() + 10, MiB)
    assert (got.status, got.body) == (200, SNAPSHOT)
    assert server.requests[-1].get("Accept-Encoding") == "gzip"


def test_a_gzip_bomb_is_cut_off_at_the_cap_in_bounded_memory(server):
    tracemalloc.start()
    try:
        with pytest.raises(GetError) as cut:
            get(f"http://{server.address}/bomb", time.monotonic() + 30, 16 * MiB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert cut.value.kind == "too-big"
    assert peak < 3 * 16 * MiB, peak  # the cap and the answer as sent, not the gigabyte


@pytest.mark.parametrize("path", sorted(BROKEN))
def test_broken_gzip_or_an_encoding_not_asked_for_is_one_error(server, path):
    with pytest.raises(GetError) as failed:
        get(f"http://{server.address}{path}", time.monotonic() + 10, MiB)
    assert failed.value.kind == "bad-body" and failed.value.detail.startswith(BROKEN[path][2]), failed.value


def test_an_error_status_s_gzipped_body_is_read_unpacked(server):
    got = get(f"http://{server.address}/error", time.monotonic() + 10, MiB)
    assert (got.status, json.loads(got.body)) == (503, {"error": "no reading yet"})


@pytest.mark.slow
def test_vram_fleet_and_serve_say_a_bomb_s_host_is_down_in_one_line(server):
    address = f"{server.address}/bomb"
    shown = run_vram("fleet", "--hosts", address, env=clean_env())
    assert shown.rc == 1 and shown.err == "", shown
    assert shown.out.splitlines()[-1].endswith(" down: answered more than 32MiB: not read"), shown.out
    # vram serve --hosts reads its hosts the same way (one host's read, as its reader thread does it)
    entry = OtherHosts([f"http://{address}"], period=60, timeout=30).read(0)
    assert (entry["up"], entry["why"], entry["detail"]) == (False, "too-big", "16MiB")
