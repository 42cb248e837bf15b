"""vram serve --web-config: Prometheus' exporter-toolkit format (TLS, basic auth), checked strictly,
and a real server over TLS with a certificate made here, read by a client that verifies it."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Served, assert_one_line_error, clean_env, run_vram, wait_for

bcrypt = pytest.importorskip("bcrypt", reason="the serve extra (bcrypt) is not installed")
pytest.importorskip("yaml", reason="the serve extra (pyyaml) is not installed")

from vramkit.serve.webconfig import BasicAuth, WebConfigError, load  # noqa: E402

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not installed")
PASSWORD = "s3cret pass"


def hashed(password: str = PASSWORD) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()  # cost 4: tests stay fast


def make_cert(directory: Path, name: str = "server") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (mode 0600)."""
    assert OPENSSL is not None
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    key.chmod(0o600)
    return cert, key


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# ---------------------------------------------------------------- the file, checked

def test_users_only_and_relative_paths_from_the_config_directory(tmp_path):
    config = load(write(tmp_path / "web.yml", f"basic_auth_users:\n  alice: '{hashed()}'\n"))
    assert config.tls is None and set(config.users) == {"alice"}


@needs_openssl
def test_tls_paths_are_relative_to_the_config_file(tmp_path):
    make_cert(tmp_path)
    config = load(write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                              "  min_version: TLS13\n"))
    assert config.tls is not None and config.tls.cert_file == tmp_path / "server.crt"
    assert config.tls.min_version == "TLS13"


@needs_openssl
def test_a_symlinked_certificate_is_followed(tmp_path):
    """Let's Encrypt's live/ directory is symlinks: they must work."""
    real = tmp_path / "archive"
    real.mkdir()
    make_cert(real)
    (tmp_path / "cert.pem").symlink_to(real / "server.crt")
    (tmp_path / "key.pem").symlink_to(real / "server.key")
    config = load(write(tmp_path / "web.yml", "tls_server_config: {cert_file: cert.pem, key_file: key.pem}\n"))
    assert config.tls is not None


BAD_CONFIGS = [
    ("tls_server_config: [unclosed\n", "line 2: expected ',' or ']'"),
    ("basic_auth_users: {alice: x}\nrate_limit: {interval: 1s}\n", "rate_limit: not supported"),
    ("- a list\n", "expected a mapping"),
    ("basic_auth_users:\n  alice: plain-text-password\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("basic_auth_users:\n  alice: $1$abc$0123456789012345678901\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("basic_auth_users:\n  alice: 12\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("basic_auth_users:\n  'a:b': $2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG\n",
     "basic_auth_users: 'a:b' is not a user name"),
    ("basic_auth_users:\n  alice: $2y$99$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG\n",
     "not a bcrypt hash"),
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
     "tls_server_config.cert_file: cannot read"),
    ("tls_server_config:\n  key_file: x.key\n", "tls_server_config.cert_file: required"),
    ("tls_server_config:\n  cert: '-----BEGIN CERTIFICATE-----'\n", "tls_server_config.cert: not supported"),
    ("tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "tls_server_config.cipher_suites"),
    ("tls_server_config: yes\n", "tls_server_config: expected a mapping"),
    ('"\\e[31m\\nkey": 1\n', "?[31m?key: not supported"),
    ("\x1b[31m: 1\n", "unacceptable character #x001b"),
]


@pytest.mark.parametrize(("text", "needle"), BAD_CONFIGS)
def test_a_malformed_config_names_the_file_and_the_key(tmp_path, text, needle):
    path = write(tmp_path / "web.yml", text)
    with pytest.raises(WebConfigError) as caught:
        load(path)
    assert str(path) in caught.value.message and needle in caught.value.message
    assert "\n" not in caught.value.message and "\x1b" not in caught.value.message


@needs_openssl
@pytest.mark.parametrize(("extra", "needle"), [
    ("  client_auth_type: RequireAndVerifyClientCert\n", "tls_server_config.client_ca_file: required"),
    ("  client_auth_type: RequireAnyClientCert\n", "tls_server_config.client_auth_type: 'RequireAnyClientCert'"),
    ("  min_version: SSL3\n", "tls_server_config.min_version: 'SSL3' is not one of"),
    ("  min_version: TLS13\n  max_version: TLS12\n", "is above max_version"),
    ("  client_ca_file: server.key\n", "tls_server_config.client_ca_file"),
])
def test_bad_tls_settings(tmp_path, extra, needle):
    make_cert(tmp_path)
    path = write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                 + extra)
    with pytest.raises(WebConfigError, match=needle.replace("(", r"\(")):
        load(path)


@needs_openssl
def test_a_key_that_is_not_the_certificate_s_is_refused(tmp_path):
    make_cert(tmp_path, "one")
    make_cert(tmp_path, "two")
    path = write(tmp_path / "web.yml", "tls_server_config: {cert_file: one.crt, key_file: two.key}\n")
    with pytest.raises(WebConfigError, match="do not load as a certificate and its key"):
        load(path)


@needs_openssl
def test_a_private_key_every_user_can_read_is_refused(tmp_path):
    _, key = make_cert(tmp_path)
    key.chmod(0o644)
    path = write(tmp_path / "web.yml", "tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    with pytest.raises(WebConfigError, match=r"tls_server_config.key_file: .* is readable by every user: chmod o-r "):
        load(path)


def test_a_config_every_user_can_write_is_refused(tmp_path):
    path = write(tmp_path / "web.yml", "basic_auth_users: {}\n", mode=0o666)
    with pytest.raises(WebConfigError, match="writable by every user"):
        load(path)


def test_a_fifo_or_a_directory_is_not_read(tmp_path):
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    with pytest.raises(WebConfigError, match="not a regular file"):
        load(fifo)  # O_NONBLOCK: a FIFO nobody writes does not hang the start
    with pytest.raises(WebConfigError, match="not a regular file"):
        load(tmp_path)


# ---------------------------------------------------------------- through the command

@pytest.mark.parametrize(("text", "needle"), BAD_CONFIGS[:4])
def test_the_command_says_one_line_and_exits_2(tmp_path, text, needle):
    path = write(tmp_path / "web.yml", text)
    result = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--web-config", str(path))
    assert_one_line_error(result, 2, "--web-config", str(path), needle)


def test_a_missing_config_file(tmp_path):
    result = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--web-config",
                      str(tmp_path / "nope.yml"))
    assert_one_line_error(result, 2, "--web-config", "nope.yml", "No such file")


@pytest.mark.parametrize("missing", ["yaml", "bcrypt"])
def test_without_the_serve_extra_it_says_what_to_install(tmp_path, missing):
    path = write(tmp_path / "web.yml", "basic_auth_users: {}\n")
    argv = ["serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--web-config", str(path)]
    code = f"import sys; sys.modules[{missing!r}] = None; from vramkit.cli.main import main; sys.exit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""
    # vramkit is not on a package index: the hint installs the extra into this checkout's install.
    [line] = proc.stderr.splitlines()
    assert line.startswith("vram: error: --web-config: needs pyyaml and bcrypt: ")
    assert f"{sys.executable} -m pip install -e " in line and "[serve]" in line and "'vramkit[serve]'" not in line


# ---------------------------------------------------------------- basic auth

def test_basic_auth_checks_and_remembers_only_the_right_password():
    auth = BasicAuth({"alice": hashed().encode(), "bob": hashed("other").encode()})
    assert auth(basic("alice", PASSWORD))
    checks = auth.bcrypt_checks
    for _ in range(20):  # a scrape every 15 s must not pay bcrypt each time
        assert auth(basic("alice", PASSWORD))
    assert auth.bcrypt_checks == checks
    assert not auth(basic("alice", PASSWORD + "x"))  # a remembered user with another password: checked, refused
    assert auth.bcrypt_checks == checks + 1
    assert not auth(basic("bob", PASSWORD))
    assert not auth(basic("mallory", PASSWORD))  # an unknown user costs a check too (no timing oracle)
    assert auth.bcrypt_checks == checks + 3
    for i in range(50):
        auth(basic(f"user{i}", "guess"))
    assert len(auth._verified) <= len(auth.users)  # the cache cannot grow past the user list


def test_a_refused_password_is_remembered_too():
    """Repeating a wrong (user, password) costs no second bcrypt; the cache is bounded."""
    auth = BasicAuth({"alice": hashed().encode()})
    assert not auth(basic("alice", "wrong"))
    assert not auth(basic("mallory", "wrong"))
    checks = auth.bcrypt_checks
    for _ in range(10):
        assert not auth(basic("alice", "wrong"))
        assert not auth(basic("mallory", "wrong"))
    assert auth.bcrypt_checks == checks
    assert auth.quick(basic("alice", "wrong")) is False
    assert auth.quick(basic("alice", PASSWORD)) is None  # not verified yet: only bcrypt can tell
    assert auth(basic("alice", PASSWORD)) and auth.quick(basic("alice", PASSWORD)) is True
    auth.MAX_FAILURES = 5
    for i in range(20):
        auth(basic("alice", f"guess {i}"))
    assert len(auth._failed) == 5


def test_one_bcrypt_check_at_a_time(monkeypatch):
    """Guesses from many threads at once are checked one after another: at most one core."""
    import threading
    import time

    auth = BasicAuth({"alice": hashed().encode()})
    running = most = 0
    lock = threading.Lock()
    real = auth._bcrypt

    class Counting:
        @staticmethod
        def checkpw(password, hashed_password):
            nonlocal running, most
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.02)  # long enough for the threads to overlap if they could
            with lock:
                running -= 1
            return real.checkpw(password, hashed_password)
    auth._bcrypt = Counting  # type: ignore[assignment]
    start = threading.Barrier(8)

    def guess(i: int) -> None:
        start.wait()
        auth(basic("alice", f"guess {i}"))
    threads = [threading.Thread(target=guess, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert auth.bcrypt_checks == 8 and most == 1


def test_an_unknown_user_costs_what_the_costliest_user_costs():
    """The decoy an unknown user is checked against has the highest cost of the configured hashes
    (not capped): with cost-13 hashes, an unknown user's check is a cost-13 check too."""
    costly = bcrypt.hashpw(b"pw", bcrypt.gensalt(13))
    auth = BasicAuth({"alice": hashed().encode(), "bob": costly})
    assert auth._decoy.split(b"$")[2] == b"13"
    assert not auth(basic("mallory", "pw"))  # bob's password for an unknown user: never a way in
    assert auth(basic("bob", "pw"))


@pytest.mark.parametrize("header", [None, "", "Bearer abc", "Basic !!!notbase64", "Basic " + base64.b64encode(
    b"no-colon").decode(), "Basic " + base64.b64encode(b"\xff\xfe:pw").decode(), "Basic " + "A" * 5000,
    basic("alice", "x" * 100)])
def test_malformed_authorization_is_refused_without_error(header):
    auth = BasicAuth({"alice": hashed().encode()})
    assert auth(header) is False


def test_a_password_past_72_bytes_is_checked_as_bcrypt_does():
    long = "p" * 80
    auth = BasicAuth({"alice": bcrypt.hashpw(long[:72].encode(), bcrypt.gensalt(4))})
    assert auth(basic("alice", long))  # bcrypt 5 raises on > 72 bytes; htpasswd truncates


def test_basic_auth_over_http(tmp_path, served):
    config = write(tmp_path / "web.yml", f"basic_auth_users:\n  alice: '{hashed()}'\n")
    s = served("--simulate", "demo", "--web-config", str(config), auth=None)
    code, _, headers = s.get("/metrics")
    assert code == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert s.get("/metrics", auth=("alice", "wrong"))[0] == 401
    assert s.get("/healthz", auth=("nobody", PASSWORD))[0] == 401
    # Started without a password, Served could not wait for the first reading (/healthz said 401,
    # not 503): wait for it here, as alice (a loaded machine read /metrics before it, without GPUs).
    assert wait_for(lambda: s.get("/healthz", auth=("alice", PASSWORD))[0] == 200, timeout=10)
    code, text, _ = s.get("/metrics", auth=("alice", PASSWORD))
    assert code == 200 and "vram_gpu_memory_used_bytes" in text
    assert s.stop() == 0


# ---------------------------------------------------------------- TLS, for real

@needs_openssl
def test_tls_with_basic_auth_verified_against_the_certificate(tmp_path, served):
    cert, _ = make_cert(tmp_path)
    config = write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                         f"basic_auth_users:\n  alice: '{hashed()}'\n")
    verify = ssl.create_default_context(cafile=str(cert))
    s = served("--simulate", "demo", "--web-config", str(config), context=verify, auth=("alice", PASSWORD))
    assert s.first_line.startswith("vram serve: https://127.0.0.1:")
    code, text, _ = s.get("/metrics")
    assert code == 200 and "vram_gpu_memory_total_bytes" in text
    assert s.get("/metrics", auth=("alice", "nope"))[0] == 401
    # A client that trusts only the system's CAs refuses this self-signed certificate: it is TLS for real.
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib_get(f"https://127.0.0.1:{s.port}/healthz", ssl.create_default_context())
    # Plain HTTP to the TLS port gets no answer, and the server goes on.
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as plain:
        plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = plain.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 200")
    assert s.get("/healthz")[0] == 200
    assert s.stop() == 0


@needs_openssl
def test_a_client_certificate_is_required_when_configured(tmp_path, served):
    cert, _ = make_cert(tmp_path)
    client_cert, client_key = make_cert(tmp_path, "client")
    config = write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                   "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client.crt\n")
    with_cert = ssl.create_default_context(cafile=str(cert))
    with_cert.load_cert_chain(client_cert, client_key)
    s = served("--simulate", "demo", "--web-config", str(config), context=with_cert)
    assert s.get("/healthz")[0] == 200
    without = ssl.create_default_context(cafile=str(cert))
    with pytest.raises(OSError):
        urllib_get(f"https://127.0.0.1:{s.port}/healthz", without)
    assert s.get("/healthz")[0] == 200
    assert s.stop() == 0


def urllib_get(url: str, context: ssl.SSLContext) -> int:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10, context=context) as r:
        return int(r.status)


# ---------------------------------------------------------------- who can reach it

def read_rest(s: Served) -> list[str]:
    assert s.stop() == 0
    assert s.proc.stderr is not None
    return s.proc.stderr.read().splitlines()


def test_listening_beyond_loopback_without_a_web_config_warns(served):
    s = served("--simulate", "demo", listen="0.0.0.0:0")
    rest = read_rest(s)
    assert len(rest) == 1 and rest[0].startswith("vram serve: warning: listening on 0.0.0.0 without --web-config")


def test_loopback_does_not_warn(served):
    assert read_rest(served("--simulate", "demo")) == []


def test_basic_auth_without_tls_beyond_loopback_warns_of_clear_text(tmp_path, served):
    config = write(tmp_path / "web.yml", f"basic_auth_users:\n  alice: '{hashed()}'\n")
    s = served("--simulate", "demo", "--web-config", str(config), listen="0.0.0.0:0", auth=("alice", PASSWORD))
    rest = read_rest(s)
    assert len(rest) == 1 and "clear text" in rest[0]


@needs_openssl
def test_tls_and_basic_auth_beyond_loopback_do_not_warn(tmp_path, served):
    cert, _ = make_cert(tmp_path)
    config = write(tmp_path / "web.yml", "tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
                                         f"basic_auth_users:\n  alice: '{hashed()}'\n")
    s = served("--simulate", "demo", "--web-config", str(config), listen="0.0.0.0:0",
                   context=ssl.create_default_context(cafile=str(cert)), auth=("alice", PASSWORD))
    assert s.get("/healthz")[0] == 200
    assert read_rest(s) == []


@needs_openssl
def test_a_client_that_never_starts_its_handshake_blocks_no_one(tmp_path, served):
    """The handshake runs in the connection's own thread: a silent client on the TLS port does not
    stop the accept loop from serving the next one."""
    cert, _ = make_cert(tmp_path)
    config = write(tmp_path / "web.yml", "tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    s = served("--simulate", "demo", "--web-config", str(config),
                   context=ssl.create_default_context(cafile=str(cert)))
    silent = [socket.create_connection(("127.0.0.1", s.port), timeout=30) for _ in range(3)]
    try:
        assert s.get("/healthz")[0] == 200
    finally:
        for sock in silent:
            sock.close()
    assert s.stop() == 0


@pytest.mark.parametrize(("host", "web", "tls", "authenticated", "warned"), [
    ("127.0.0.1", False, False, False, None), ("::1", False, False, False, None),
    ("localhost", False, False, False, None), ("127.0.0.2", False, False, False, None),
    ("0.0.0.0", False, False, False, "without --web-config"), ("::", False, False, False, "without --web-config"),
    ("0.0.0.0", True, True, False, "without basic_auth_users or required client certificates"),
    ("192.0.2.1", True, False, True, "clear text"), ("0.0.0.0", True, True, True, None),
])
def test_who_is_warned(host, web, tls, authenticated, warned):
    from vramkit.cli.serve import exposure_warning

    line = exposure_warning(host, web, tls, authenticated)
    assert (line is None) if warned is None else (line is not None and warned in line)


@needs_openssl
def test_min_version_is_enforced(tmp_path, served):
    cert, _ = make_cert(tmp_path)
    config = write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                         "  min_version: TLS13\n")
    s = served("--simulate", "demo", "--web-config", str(config),
                   context=ssl.create_default_context(cafile=str(cert)))
    assert s.get("/healthz")[0] == 200
    old = ssl.create_default_context(cafile=str(cert))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(OSError):
        urllib_get(f"https://127.0.0.1:{s.port}/healthz", old)
    assert s.stop() == 0
