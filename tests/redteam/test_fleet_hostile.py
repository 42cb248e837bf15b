"""vram fleet against a hostile or broken Prometheus (issue 26 item 5): a real HTTP server on
127.0.0.1 in a thread, answering with what no Prometheus should: GPU indexes that are digits only
to str.isdigit ('²'), numbers out of range (1e307), JSON nested past the recursion limit,
malformed status lines and headers, answers dripped a byte at a time (headers or body), a
hundred thousand warnings, and random mutations of a valid answer. `vram fleet` must answer
with its numbers or one line and exit 1, within --timeout, and never an internal error."""

from __future__ import annotations

import copy
import json
import random
import socket
import threading
import urllib.parse
from collections.abc import Callable

import pytest
from helpers import assert_one_line_error, clean_env, closed_after, run_vram
from test_fleet import T, gpu_series, target, two_hosts, vector

from vramkit.errors import VramkitError
from vramkit.fleet import Q_GPU, Q_SEEN, Q_UP, Q_USERS, Prometheus, pick_host, read_fleet
from vramkit.gpu_choice import Policy
from vramkit.render.fleet_view import fleet_json, render_fleet
from vramkit.render.style import Style

GiB = 1024**3
PLAIN = Style(color=False, unicode=False)
MAX_WARNINGS = 20  # warnings --json keeps (vramkit.fleet.MAX_WARNINGS)
Behaviour = Callable[[socket.socket, str], None]


def http_answer(body: bytes, status: str = "200 OK", headers: str = "Content-Type: application/json\r\n") -> bytes:
    return (f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode() + body


class Hostile:
    """A raw HTTP server: reads a request, lets `behave(conn, query)` answer it however it likes."""

    def __init__(self, behave: Behaviour):
        self.behave = behave
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(30)
                request = b""
                while b"\r\n\r\n" not in request and len(request) < 65536:
                    data = conn.recv(4096)
                    if not data:
                        return
                    request += data
                path = request.split(b" ")[1].decode() if b" " in request else "/"
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).get("query", [""])[0]
                self.behave(conn, query)
            except OSError:  # the client gave up (as it should, for some of these)
                pass

    def drip(self, conn: socket.socket, data: bytes, every: float = 0.2) -> None:
        """Send `data` a byte at a time, `every` seconds apart, until done, closed or stopped."""
        for i in range(len(data)):
            if self.stop.wait(every):
                return
            conn.sendall(data[i:i + 1])

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def hostile():
    yield from closed_after(Hostile)


def answering(answers: dict[str, object]) -> Behaviour:
    """Each query's answer: JSON-able, or bytes sent as the body as they are."""
    def behave(conn: socket.socket, query: str) -> None:
        answer = answers.get(query, vector())
        conn.sendall(http_answer(answer if isinstance(answer, bytes) else json.dumps(answer).encode()))
    return behave


def fleet(url: str, *args: str, timeout: float = 60):
    # --ignore-down: a down host is an answer here; the exit status then says only vram's own failures
    return run_vram("fleet", "--prometheus", url, "--ignore-down", *args, env=clean_env(), timeout=timeout)


def assert_answers(result, rc: int = 0):
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert result.rc == rc, result.err


# ---------------------------------------------------------------- labels and values

@pytest.mark.parametrize("index", ["²", "٣", "１", "1_0", " 1", "+1", "0x1", "1.0", "-1", "123456", ""])
def test_a_gpu_index_that_is_not_ascii_digits_is_not_a_gpu(hostile, index):
    answers = two_hosts()
    answers[Q_GPU]["data"]["result"] += vector(*gpu_series("10.0.0.1:9787", 0, "X", GiB, 2 * GiB, 0.5, 1))[
        "data"]["result"]
    for s in answers[Q_GPU]["data"]["result"][-8:]:
        s["metric"]["gpu"] = index
    answers[Q_USERS]["data"]["result"].append({"metric": target("10.0.0.1:9787", gpu=index, user="eve"),
                                               "value": [T, str(GiB)]})
    h = hostile(answering(answers))
    result = fleet(h.url, "--json")
    assert_answers(result)
    gpus = result.json()["hosts"][0]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]  # the two real ones, unchanged
    assert "eve" not in result.out


@pytest.mark.parametrize("metric,value", [
    ("vram_gpu_utilization_ratio", "1e307"), ("vram_gpu_utilization_ratio", "-1e307"),
    ("vram_gpu_utilization_ratio", "1.5"), ("vram_gpu_memory_used_bytes", "1e307"),
    ("vram_gpu_memory_total_bytes", "-5"), ("vram_gpu_processes", "1e307"),
    ("vram_gpu_memory_free_bytes", "1" * 400), ("vram_gpu_utilization_ratio", "Inf"),
])
def test_numbers_out_of_range_are_unknown(hostile, metric, value):
    answers = two_hosts()
    for s in answers[Q_GPU]["data"]["result"]:
        if s["metric"]["__name__"] == metric:
            s["value"] = [T, value]
    answers[Q_GPU]["data"]["result"] += vector(
        ({"__name__": "vram_read_errors_total", **target("10.0.0.1:9787")}, "1e307"),
        ({"__name__": "vram_process_series_dropped", **target("10.0.0.1:9787")}, "-3"))["data"]["result"]
    answers[Q_USERS]["data"]["result"][0]["value"] = [T, "1e307"]
    h = hostile(answering(answers))
    for args in ((), ("--json",)):
        result = fleet(h.url, *args)
        assert_answers(result)
        assert "1e307" not in result.out and "e+307" not in result.out and "1" * 30 not in result.out
    field = {"vram_gpu_utilization_ratio": "utilization", "vram_gpu_memory_used_bytes": "memory_used",
             "vram_gpu_memory_total_bytes": "memory_total", "vram_gpu_processes": "processes",
             "vram_gpu_memory_free_bytes": "memory_free"}[metric]
    assert {g[field] for g in fleet(h.url, "--json").json()["hosts"][0]["gpus"]} == {None}
    picked = run_vram("fleet", "pick", "--prometheus", h.url, env=clean_env())
    assert "internal error" not in picked.err and picked.rc in (0, 1), picked.err


def test_label_values_that_are_not_strings_drop_the_sample(hostile):
    answers = two_hosts()
    deep = "DEEP"
    answers[Q_USERS]["data"]["result"] += [
        {"metric": target("10.0.0.1:9787", gpu="1", user=deep), "value": [T, str(GiB)]},
        {"metric": {**target("10.0.0.1:9787", gpu="1"), "user": ["mallory"]}, "value": [T, str(GiB)]},
        {"metric": {**target("10.0.0.1:9787", gpu="1"), "user": 7}, "value": [T, str(GiB)]},
    ]
    answers[Q_UP] = {"status": "error", "errorType": {"nested": [1, 2]}, "error": deep}
    body = json.dumps(answers[Q_USERS]).replace('"DEEP"', "[" * 500 + "]" * 500).encode()
    error = json.dumps(answers[Q_UP]).replace('"DEEP"', "[" * 500 + "]" * 500).encode()
    h = hostile(answering({**answers, Q_USERS: body, Q_UP: error}))
    assert_one_line_error(fleet(h.url), 1, "answered an error: <dict>: <list>")
    h2 = hostile(answering({**answers, Q_USERS: body, Q_UP: two_hosts()[Q_UP]}))
    result = fleet(h2.url, "--json")
    assert_answers(result)
    assert result.json()["hosts"][0]["gpus"][1]["users"] == {"alice": GiB}


# ---------------------------------------------------------------- answers that are not the API's

@pytest.mark.parametrize("body,needle", [
    (b"[" * 100_000, "nested too deeply"),
    (b'{"status": "success", "data": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001, "nested too deeply"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": [' + b"9" * 5000 + b"]}}", "not JSON"),
], ids=["deep-list", "deep-object", "long-number"])  # an id of the whole body would not fit in a child's environment
def test_deeply_nested_or_unreadable_json_is_one_line(hostile, body, needle):
    h = hostile(answering({Q_UP: body}))
    assert_one_line_error(fleet(h.url), 1, f"Prometheus at {h.url} answered", needle)


@pytest.mark.parametrize("raw,needle", [
    (b"HTTP/1.1 abc\r\n\r\n", "did not answer in HTTP"),
    (b"garbage\r\n\r\n", "did not answer in HTTP"),
    (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n{}", "did not answer in HTTP"),
    (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n{}", "did not answer in HTTP"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", "Prometheus at"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "Prometheus at"),
    (b"HTTP/1.1 500 \x1b[2J\xff\r\nContent-Length: 2\r\n\r\n{}", "answered an error: HTTP 500 ?[2J"),
    (b"", "Prometheus at"),
])
def test_malformed_http_is_one_line(hostile, raw, needle):
    h = hostile(lambda conn, query: conn.sendall(raw))
    line = assert_one_line_error(fleet(h.url), 1, needle)
    assert "\x1b" not in line


def test_an_answer_too_large_is_not_read(hostile):
    body = b'{"status": "success", "warnings": ["' + b"w" * (33 * 1024**2) + b'"]}'
    h = hostile(lambda conn, query: conn.sendall(http_answer(body)))
    assert_one_line_error(fleet(h.url), 1, "answered more than 32MiB for one query")


def test_warnings_are_said_once_each_and_at_most_a_few(hostile):
    answers = two_hosts()
    # 100,000 warnings: 60,001 distinct, the rest repeats, one with a terminal escape.
    warnings = [f"remote store {i % 60_000} did not answer" for i in range(100_000)]
    warnings[0] = "\x1b[2Jcleared"
    distinct = len(set(warnings))
    for q in (Q_UP, Q_GPU):
        answers[q]["warnings"] = warnings
    h = hostile(answering(answers))
    result = fleet(h.url)
    assert_answers(result)
    lines = result.out.splitlines()
    assert len(lines) < 20
    warned = [line for line in lines if line.startswith("Prometheus warns")]
    assert warned[0] == "Prometheus warns: ?[2Jcleared"
    assert len(warned) == 6
    assert warned[-1] == f"Prometheus warns {distinct - 5} more times (--json lists {MAX_WARNINGS})"
    data = fleet(h.url, "--json").json()
    assert len(data["warnings"]) == MAX_WARNINGS and data["warnings_left_out"] == distinct - MAX_WARNINGS


# ---------------------------------------------------------------- the deadline

def test_headers_dripped_a_byte_at_a_time_end_at_the_deadline(hostile):
    padded = http_answer(json.dumps(vector()).encode(), headers=f"X-Pad: {'a' * 300}\r\n")
    h = hostile(lambda conn, query: h.drip(conn, padded))  # 300 bytes of headers: a minute
    assert_one_line_error(fleet(h.url, "--timeout", "1s", timeout=30), 1, f"Prometheus at {h.url} did not "
                          "answer within 1s")


def test_a_body_dripped_a_byte_at_a_time_ends_at_the_deadline(hostile):
    body = json.dumps(two_hosts()[Q_UP]).encode() * 100

    def behave(conn: socket.socket, query: str) -> None:
        head = http_answer(body)
        conn.sendall(head[:-len(body)])
        h.drip(conn, body)
    h = hostile(behave)
    assert_one_line_error(fleet(h.url, "--timeout", "1s", timeout=30), 1, "did not answer within 1s")


def test_the_deadline_is_for_all_the_queries_together(hostile):
    """Each answer dripped within 0.8s would pass a deadline per answer of 1s; four of them do not."""
    body = json.dumps(vector()).encode()

    def behave(conn: socket.socket, query: str) -> None:
        h.drip(conn, http_answer(body), every=0.6 / len(http_answer(body)))
    h = hostile(behave)
    assert_one_line_error(fleet(h.url, "--timeout", "1s", timeout=30), 1, "did not answer within 1s")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_server_that_never_answers_ends_at_the_deadline(hostile, scheme):
    h = hostile(lambda conn, query: h.stop.wait(60))
    url = h.url.replace("http", scheme, 1)  # https: the TLS handshake waits, the request never comes
    assert_one_line_error(fleet(url, "--timeout", "1s", timeout=30), 1, "did not answer within 1s")


# ---------------------------------------------------------------- fuzz

HOSTILE_VALUES: list[object] = [
    "²", "٣", "1e307", "-1e307", "NaN", "+Inf", "-0", "", "1_000", "0x10", "1" * 5000, 1e307, -1, True, None,
    [], {}, "x" * 1000, "\x1b[2J\u202e", "\udcff", 10**30, [1, 2, 3], {"a": "b"}, "DEEP", "vector", "success",
    "gpu", "vram_gpu_utilization_ratio", "vram_host_info", "vram_gpu_lost", "0", "1", "99999",
]


def _paths(node: object, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*path, i))
    return out


def _mutate(rng: random.Random, answer: dict) -> bytes:
    doc = copy.deepcopy(answer)
    for _ in range(rng.randint(1, 4)):
        paths = _paths(doc)[1:]
        if not paths:
            break
        path = rng.choice(paths)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        how = rng.random()
        if how < 0.6:
            parent[path[-1]] = rng.choice(HOSTILE_VALUES)
        elif how < 0.75 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):  # a label or field renamed to a hostile name
            value = parent.pop(path[-1])
            parent[str(rng.choice(HOSTILE_VALUES))] = value
        elif isinstance(parent, list) and parent:
            parent.append(copy.deepcopy(parent[0]))
    depth = rng.choice((30, 3000))
    text = json.dumps(doc).replace('"DEEP"', "[" * depth + "]" * depth)
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.3:  # and a few bytes changed
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(buf))
            buf[at] = rng.choice(b'{}[]",:0123456789.eE-+ \x00\xff\\nul')
        data = bytes(buf)
    return data


def test_fuzzed_answers_never_give_an_internal_error(hostile):
    rng = random.Random(26)
    answers: dict[str, object] = {}
    h = hostile(lambda conn, query: answering(answers)(conn, query))
    base = two_hosts()
    base[Q_GPU]["data"]["result"] += vector(*gpu_series("10.0.0.2:9787", 0, "L40S", GiB, 45 * GiB, 0.5, 1))[
        "data"]["result"]
    outcomes = {"ok": 0, "error": 0}
    for i in range(300):
        answers.clear()
        answers.update(base)
        for q in rng.sample([Q_UP, Q_SEEN, Q_GPU, Q_USERS], rng.randint(1, 2)):
            answers[q] = _mutate(rng, base[q])
        try:
            got = read_fleet(Prometheus(h.url, timeout=30))
        except VramkitError as e:
            assert "\n" not in str(e) and "\x1b" not in str(e)
            outcomes["error"] += 1
            continue
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"iteration {i}: {type(e).__name__}: {e}; answers: {answers!r:.2000}")
        try:
            text = render_fleet(got, PLAIN, 120) + fleet_json(got)
            for policy in (Policy(count=1), Policy(count=2, min_free=40 * GiB)):
                pick_host(got, policy)
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"iteration {i}: {type(e).__name__}: {e}; answers: {answers!r:.2000}")
        assert not any(ord(c) < 0x20 and c != "\n" for c in text)
        outcomes["ok"] += 1
    assert outcomes["ok"] > 50 and outcomes["error"] > 10, outcomes  # both paths were exercised
