"""vram fleet --hosts: each host's own vram serve read directly (real serve processes, and fake
hosts that answer what a broken or hostile server would), with basic auth and TLS."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, closed_after, free_port, needs_root, run_vram, sanitized

from vramkit.errors import RequestError
from vramkit.fleet_hosts import ClientConfig, load_client_config, parse_hosts, read_hosts


class FakeHost:
    """A real HTTP server on a free port answering each GET with `answer(handler)` (a host's
    /api/v1/snapshot here, Prometheus' /api/v1/query in test_fleet); `requests`: their headers."""

    def __init__(self, answer) -> None:
        outer = self
        self.requests: list[dict[str, str]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.requests.append(dict(self.headers))
                answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    yield from closed_after(FakeHost)


def send(handler, body: bytes, status: int = 200, **headers: str) -> None:
    handler.send_response(status)
    for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}.items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(body)


def snapshot(*gpus: dict, hostname: str = "fake") -> bytes:
    return json.dumps({"schema": 1, "hostname": hostname, "gpus": list(gpus)}).encode()


# ---------------------------------------------------------------- real hosts

def test_two_real_hosts_and_a_dead_one(served):
    a = served("--simulate", "demo", "--hostname", "gpu-a")
    b = served("--simulate", "mig", "--hostname", "gpu-b")
    dead = f"127.0.0.1:{free_port()}"
    hosts = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
    shown = run_vram("fleet", "--hosts", hosts, "--hosts", dead, env=clean_env())
    assert shown.rc == 1, shown.err  # a host is down: said, and the exit says it too
    lines = shown.out.splitlines()
    assert lines[0].startswith("vram fleet via each host's vram serve: 3 hosts, 10 GPUs")
    assert lines[0].endswith("1 down")
    assert lines[-1].split()[0] == dead and "down: cannot reach it" in lines[-1]
    demo_status = run_vram("status", "--simulate", "demo", "--json", env=clean_env()).json()
    gpu_a = [line.split() for line in lines if line.startswith("gpu-a")]
    assert [row[1] for row in gpu_a] == [str(g["index"]) for g in demo_status["gpus"]]
    assert run_vram("fleet", "--hosts", hosts, "--hosts", dead, "--ignore-down", env=clean_env()).rc == 0

    doc = run_vram("fleet", "--hosts", hosts, "--json", env=clean_env()).json()
    assert doc["source"] == "hosts" and doc["prometheus"] is None
    assert [(h["host"], h["state"]) for h in doc["hosts"]] == [("gpu-a", "up"), ("gpu-b", "up")]
    by_index = {g["index"]: g for g in doc["hosts"][0]["gpus"]}
    for g in demo_status["gpus"]:  # the same GPUs as the host's own status, user totals from its processes
        users: dict[str, int] = {}
        for p in g["processes"]:
            users[p["user"]] = users.get(p["user"], 0) + p["memory"]
        assert by_index[g["index"]]["memory_total"] == g["memory_total"]
        assert by_index[g["index"]]["users"] == users and by_index[g["index"]]["processes"] == len(g["processes"])

    picked = run_vram("fleet", "pick", "--hosts", hosts, "--min-free", "60GiB", "--json", env=clean_env()).json()
    free = {(h["host"], g["index"]): g["memory_free"] for h in doc["hosts"] for g in h["gpus"]}
    best = max(free.items(), key=lambda kv: kv[1] or 0)[0]
    assert (picked["host"], picked["cuda_visible_devices"]) == (best[0], str(best[1]))


# ---------------------------------------------------------------- hostile and broken hosts

def test_broken_and_hostile_answers_are_said_per_host_and_never_guessed(fake):
    gpu = {"index": 0, "name": "\x1b[31mA100\x07", "memory_used": -5, "memory_total": 1e400,
           "memory_free": "lots", "utilization": 250, "lost": "yes",
           "processes": [{"user": "eve\nroot", "memory": 2**40}, {"user": "eve\nroot", "memory": 2**40},
                         "not a process", {"memory": float("nan")}]}
    hostile = fake(lambda h: send(h, snapshot(gpu, {"index": True}, {"index": "1"}, {"index": 10**6},
                                              hostname="\x1b]0;pwned\x07host")))
    deep = fake(lambda h: send(h, b"[" * 100000 + b"]" * 100000))
    html = fake(lambda h: send(h, b"<html>not here</html>", **{"Content-Type": "text/html"}))
    no_reading = fake(lambda h: send(h, b'{"error": "no reading yet"}'))
    huge = fake(lambda h: send(h, b"[" + b"0," * 600_000 + b"0]"))
    fleet = read_hosts([f"http://{x.address}" for x in (hostile, deep, html, no_reading, huge)], 10,
                       max_answer=1024**2)
    h, d, t, n, big = fleet.hosts
    assert h.up and h.host == sanitized("\x1b]0;pwned\x07host")
    assert [g.index for g in h.gpus] == [0]  # True, "1" and 1000000 are not indexes
    g = h.gpus[0]
    assert "\x1b" not in (g.name or "") and "\x07" not in (g.name or "")
    assert (g.memory_used, g.memory_total, g.memory_free, g.utilization, g.lost) == (None, None, None, None, False)
    assert g.processes == 4 and g.users == {sanitized("eve\nroot"): 2 * 2**40}
    assert "\n" not in sanitized("eve\nroot")
    assert h.state == "partial" and "no memory numbers for GPU 0" in h.notes[0]
    assert (d.state, d.notes) == ("down", ["down: answered something that is not vram serve's JSON "
                                           "(is this its address?)"])
    assert t.state == "down" and "not vram serve's JSON" in t.notes[0]
    assert (n.state, n.notes) == ("partial", ["partial: no reading yet"])
    assert (big.state, big.notes) == ("down", ["down: answered more than 1MiB: not read"])


def test_a_host_that_trickles_is_down_at_the_one_deadline_and_the_others_are_shown(fake):
    def trickle(handler) -> None:
        handler.send_response(200)
        handler.end_headers()
        try:
            for _ in range(60):
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass

    slow = [fake(trickle) for _ in range(3)]
    good = fake(lambda h: send(h, snapshot({"index": 0, "memory_used": 1, "memory_total": 2})))
    started = time.monotonic()
    fleet = read_hosts([f"http://{x.address}" for x in (*slow, good)], 1.5)
    took = time.monotonic() - started
    assert [h.state for h in fleet.hosts] == ["down", "down", "down", "up"]
    assert fleet.hosts[0].notes == ["down: did not answer within 1.5s"]
    assert took < 30  # one deadline for all of them, not one each after the other (3 x 30 s)


def test_credentials_are_not_carried_over_a_redirect(fake, tmp_path):
    thief = fake(lambda h: send(h, snapshot()))
    redirect = fake(lambda h: send(h, b"", status=302, Location=f"http://{thief.address}/api/v1/snapshot"))
    config = tmp_path / "fleet.yml"
    config.write_text("basic_auth: {username: alice, password: s3cret}\n")
    fleet = read_hosts([f"http://{redirect.address}"], 5, load_client_config(config))
    assert fleet.hosts[0].state == "down" and fleet.hosts[0].notes[0].startswith("down: answered HTTP 302")
    assert redirect.requests[0]["Authorization"] == "Basic YWxpY2U6czNjcmV0"
    assert thief.requests == []


# ---------------------------------------------------------------- basic auth and TLS against vram serve

def test_basic_auth_and_tls_from_a_scrape_config(served, tmp_path):
    bcrypt = pytest.importorskip("bcrypt", reason="the serve extra (bcrypt) is not installed")
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    from test_serve_webconfig import make_cert

    cert, key = make_cert(tmp_path)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: {cert}, key_file: {key}}}\n"
                   f"basic_auth_users:\n  alice: '{hashed}'\n")
    import ssl
    context = ssl.create_default_context(cafile=str(cert))
    server = served("--simulate", "demo", "--hostname", "gpu-tls", "--web-config", str(web),
                    context=context, auth=("alice", "s3cret"))
    address = f"https://127.0.0.1:{server.port}"
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    password.chmod(0o600)
    config = tmp_path / "fleet.yml"
    config.write_text("basic_auth: {username: alice, password_file: password}\n"
                      f"tls_config: {{ca_file: {cert.name}}}\n")
    config.chmod(0o600)
    shown = run_vram("fleet", "--hosts", address, "--hosts-config", str(config), env=clean_env())
    assert shown.rc == 0, shown.err
    assert shown.out.splitlines()[2].startswith("gpu-tls")

    password.write_text("wrong\n")
    refused = run_vram("fleet", "--hosts", address, "--hosts-config", str(config), env=clean_env())
    assert refused.rc == 1 and "down: answered HTTP 401 Unauthorized (basic auth: see --hosts-config)" in refused.out
    no_ca = run_vram("fleet", "--hosts", address, env=clean_env())
    assert no_ca.rc == 1 and "CERTIFICATE_VERIFY_FAILED" in no_ca.out


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize(("value", "needle"), [
    ("", "expected host addresses"),
    ("gpu a", "got 'gpu a'"),
    ("ftp://gpu-a", "got 'ftp://gpu-a'"),
    ("alice:pw@gpu-a", "got 'alice:pw@gpu-a'"),
    ("gpu-a:99999", "bad port in 'gpu-a:99999'"),
    ("gpu-a/?x=1", "got 'gpu-a/?x=1'"),
    ("gpu-\x1b[31ma", "got 'gpu-?[31ma'"),
    ("127.0.0.1:1980\n1", "got '127.0.0.1:1980?1'"),  # not 127.0.0.1:19801: urlsplit drops a newline
    ("gpu-a:19\t80", "got 'gpu-a:19?80'"),
    ("gpu-a:0", "bad port in 'gpu-a:0'"),
    ("a..b", "got 'a..b'"),
    ("x" * 64 + ".example", "got '" + "x" * 64 + ".example'"),
])
def test_a_bad_address_is_one_line_and_exit_2(value, needle):
    with pytest.raises(RequestError):
        parse_hosts([value])
    result = run_vram("fleet", "--hosts", value, env=clean_env())
    assert_one_line_error(result, 2, "--hosts: ", needle)


def test_addresses_are_normalized_and_kept_once():
    assert parse_hosts(["gpu-a,gpu-b:9000", "https://gpu-c/vram/", "gpu-a:9787", "[::1]:9"]) == [
        "http://gpu-a:9787", "http://gpu-b:9000", "https://gpu-c:9787/vram", "http://[::1]:9"]


@pytest.mark.parametrize(("text", "needle"), [
    ("basic_auth: {username: alice}\n", "basic_auth: needs a username and one of password, password_file"),
    ("basic_auth: {username: alice, password: a, password_file: b}\n", "needs a username and one of"),
    ("bearer_token: abc\n", "bearer_token: not supported (supported: basic_auth, tls_config)"),
    ("tls_config: {server_name: gpu-a}\n", "tls_config.server_name: not supported"),
    ("tls_config: {cert_file: c.crt}\n", "tls_config: cert_file and key_file go together"),
    ("tls_config: {insecure_skip_verify: maybe}\n", "insecure_skip_verify: expected true or false"),
    ("tls_config: {ca_file: missing.crt}\n", "tls_config.ca_file: cannot read"),
    ("[1, 2\n", "fleet.yml: "),
    ("- a list\n", "expected a mapping of basic_auth, tls_config"),
])
def test_a_bad_client_config_is_one_line_naming_the_key(tmp_path, text, needle):
    config = tmp_path / "fleet.yml"
    config.write_text(text)
    result = run_vram("fleet", "--hosts", "127.0.0.1:1", "--hosts-config", str(config), env=clean_env())
    assert_one_line_error(result, 2, "--hosts-config: ", needle)


def test_a_certificate_that_does_not_load_says_why(tmp_path):
    for name in ("c.crt", "c.key"):
        (tmp_path / name).write_text("not a PEM file")
        (tmp_path / name).chmod(0o600)
    config = tmp_path / "fleet.yml"
    config.write_text("tls_config: {cert_file: c.crt, key_file: c.key}\n")
    with pytest.raises(RequestError, match=r"tls_config.cert_file: does not load: \[SSL\] PEM lib"):
        load_client_config(config)


def test_files_of_the_config_that_others_can_replace_or_read_are_refused(tmp_path):
    config = tmp_path / "fleet.yml"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config.write_text("basic_auth: {username: alice, password_file: fifo}\n")
    with pytest.raises(RequestError, match="fifo is not a regular file"):
        load_client_config(config)  # O_NONBLOCK: a FIFO nobody writes does not hang
    secret = tmp_path / "password"
    secret.write_text("pw")
    secret.chmod(0o644)
    config.write_text("basic_auth: {username: alice, password_file: password}\n")
    with pytest.raises(RequestError, match="readable by every user: chmod o-r "):
        load_client_config(config)
    config.chmod(0o666)
    with pytest.raises(RequestError, match="writable by every user"):
        load_client_config(config)


@needs_root("to give the config to another user")
def test_as_root_a_config_of_another_users_is_refused(tmp_path):
    # Its owner could name a file only root may read as the password, sent to a host of their choice.
    secret = tmp_path / "root-only"
    secret.write_text("root's secret")
    secret.chmod(0o600)
    config = tmp_path / "fleet.yml"
    config.write_text("basic_auth: {username: x, password_file: root-only}\n")
    os.chown(config, 65534, 65534)
    with pytest.raises(RequestError, match="belongs to uid 65534: as root, vram reads only a config of root's"):
        load_client_config(config)
    os.chown(config, 0, 0)
    sent = load_client_config(config).authorization  # root's own config: root named the file
    assert sent is not None and base64.b64decode(sent.split()[1]) == b"x:root's secret"


def test_hosts_and_prometheus_are_one_or_the_other(tmp_path):
    result = run_vram("fleet", "--hosts", "gpu-a", "--prometheus", "http://p:9090", env=clean_env())
    assert_one_line_error(result, 2, "--hosts: reads the hosts without Prometheus")
    config = tmp_path / "c.yml"
    config.write_text("{}\n")
    result = run_vram("fleet", "--hosts-config", str(config), "--prometheus", "http://p:9090", env=clean_env())
    assert_one_line_error(result, 2, "--hosts-config: goes with --hosts")


def test_an_empty_config_is_no_settings(tmp_path):
    config = tmp_path / "c.yml"
    config.write_text("")
    assert load_client_config(Path(config)) == ClientConfig()
