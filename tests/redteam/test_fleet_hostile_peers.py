"""Red team, third wave: a hostile network peer against `vram fleet` (fleet_hosts.py, fleet.py):
basic auth asked for over plain HTTP, a certificate from a CA other than the configured one, an
empty CA file, a Prometheus redirecting to ftp://, a host passing for another host of the list.
Each test performs the attack with real servers."""

from __future__ import annotations

import shutil
import socket
import ssl

import pytest
from helpers import assert_one_line_error, clean_env, run_vram
from test_fleet_hosts import FakeHost, send, snapshot

# ---------------------------------------------------------------- basic auth over plain HTTP

def test_basic_auth_is_not_sent_in_clear_to_a_host_given_without_a_scheme(tmp_path):
    host = FakeHost(lambda h: send(h, snapshot()))
    try:
        config = tmp_path / "fleet.yml"
        config.write_text("basic_auth: {username: alice, password: s3cret}\n")
        refused = run_vram("fleet", "--hosts", host.address, "--hosts-config", str(config), env=clean_env())
        assert_one_line_error(refused, 2, "basic auth password would go in clear text over plain HTTP",
                              f"https://{host.address}")
        assert host.requests == []
        # Asked for in so many words, it is sent.
        sent = run_vram("fleet", "--hosts", f"http://{host.address}", "--hosts-config", str(config),
                        env=clean_env())
        assert sent.rc == 0, sent.err
        assert [r["Authorization"] for r in host.requests] == ["Basic YWxpY2U6czNjcmV0"]
    finally:
        host.close()


# ---------------------------------------------------------------- a certificate from a CA other than ca_file's

def test_a_ca_file_is_the_only_ca_a_host_certificate_may_come_from(served, tmp_path):
    # A network peer holding a certificate for the host's name (or address) from a CA the system
    # trusts, where the config names the fleet's own CA: as in Prometheus, only ca_file counts.
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    from test_serve_webconfig import make_cert

    peer_cert, peer_key = make_cert(tmp_path, "peer")
    fleet_ca, _ = make_cert(tmp_path, "fleet-ca")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: {peer_cert}, key_file: {peer_key}}}\n")
    peer = served("--simulate", "demo", "--web-config", str(web),
                  context=ssl.create_default_context(cafile=str(peer_cert)))
    address = f"https://127.0.0.1:{peer.port}"
    system = clean_env(SSL_CERT_FILE=str(peer_cert), SSL_CERT_DIR=str(tmp_path / "none"))  # the system trusts it
    assert run_vram("fleet", "--hosts", address, env=system).rc == 0
    config = tmp_path / "fleet.yml"
    config.write_text(f"tls_config: {{ca_file: {fleet_ca.name}}}\n")
    pinned = run_vram("fleet", "--hosts", address, "--hosts-config", str(config), env=system)
    assert pinned.rc == 1 and "CERTIFICATE_VERIFY_FAILED" in pinned.out


def test_an_empty_ca_file_is_refused_not_read_as_the_systems_cas(tmp_path):
    (tmp_path / "empty.crt").write_text("")
    config = tmp_path / "fleet.yml"
    config.write_text("tls_config: {ca_file: empty.crt}\n")
    result = run_vram("fleet", "--hosts", "https://127.0.0.1:1", "--hosts-config", str(config), env=clean_env())
    assert_one_line_error(result, 2, "tls_config.ca_file: not a certificate: the file is empty")


# ---------------------------------------------------------------- a redirect to ftp://

def test_a_prometheus_redirecting_to_ftp_is_not_followed_there():
    # urllib follows a redirect to ftp://, on a connection the one deadline's watch does not see:
    # an FTP server trickling its welcome a byte at a time kept vram waiting long past --timeout.
    ftp = socket.socket()
    ftp.bind(("127.0.0.1", 0))
    ftp.listen(4)
    ftp.settimeout(0)
    host = FakeHost(lambda h: send(h, b"", status=302, Location=f"ftp://127.0.0.1:{ftp.getsockname()[1]}/q"))
    try:
        result = run_vram("fleet", "--prometheus", f"http://{host.address}", env=clean_env())
        with pytest.raises(BlockingIOError):
            ftp.accept()  # nobody connected
        assert result.rc == 1 and "redirected (302) to an address that is not http or https" in result.err
        assert len(result.err_lines) == 1
    finally:
        host.close()
        ftp.close()


def test_a_prometheus_redirecting_to_itself_is_said_as_a_redirect_not_as_not_json():
    host = FakeHost(lambda h: send(h, b"", status=302, Location="/api/v1/query"))
    try:
        result = run_vram("fleet", "--prometheus", f"http://{host.address}", env=clean_env())
        assert result.rc == 1 and "answered an error: HTTP 302" in result.err and "not JSON" not in result.err
        assert len(result.err_lines) == 1
    finally:
        host.close()


# ---------------------------------------------------------------- a host passing for another

def _gpu(free_gib: int) -> dict:
    return {"index": 0, "uuid": "GPU-x", "name": "A100-SXM4-80GB", "memory_total": 80 * 2**30,
            "memory_used": (80 - free_gib) * 2**30, "memory_free": free_gib * 2**30, "utilization": 0,
            "processes": []}


@pytest.mark.parametrize("claim", ["gpu-a", "localhost", "GPU-A", "gpu-a.", "LOCALHOST", "localhost.",
                                   "{real}", "{real_upper}"])
def test_a_host_saying_it_is_another_host_of_the_list_is_shown_by_its_address(claim):
    # gpu-a is busy; the hostile host says it is gpu-a (or the name typed for gpu-a, with its port,
    # in another case, with a trailing dot) with a GPU to spare: fleet pick must not say 'on gpu-a'.
    real = FakeHost(lambda h: send(h, snapshot(_gpu(2), hostname="gpu-a")))
    real_address = "localhost:" + real.address.rsplit(":", 1)[1]
    claim = claim.format(real=real_address, real_upper=real_address.upper())
    liar = FakeHost(lambda h: send(h, snapshot(_gpu(78), hostname=claim)))
    try:
        hosts = f"{real_address},{liar.address}"
        picked = run_vram("fleet", "pick", "--hosts", hosts, "--min-free", "40GiB", "--json", env=clean_env()).json()
        assert picked["host"] == picked["instance"] == liar.address
        doc = run_vram("fleet", "--hosts", hosts, "--json", env=clean_env()).json()
        shown = {h["instance"]: h["host"] for h in doc["hosts"]}
        assert shown[liar.address] == liar.address and list(shown.values()).count(claim) <= 1
    finally:
        real.close()
        liar.close()


def test_a_host_may_not_take_a_down_hosts_address():
    # A host of the list that does not answer keeps its address: another may not say it is that one.
    from vramkit.fleet import FleetHost, names_no_one_else_claims

    down = FleetHost(host="10.0.0.7:9787", instance="10.0.0.7:9787", job="", up=False)
    liar = FleetHost(host="10.0.0.7:9787", instance="10.0.0.8:9787", job="", up=True)
    twin = FleetHost(host="gpu-c", instance="10.0.0.9:9787", job="vram", up=True)  # one target, two jobs:
    also = FleetHost(host="gpu-c", instance="10.0.0.9:9787", job="vram-2", up=True)  # the same machine
    names_no_one_else_claims([down, liar, twin, also])
    assert liar.host == "10.0.0.8:9787" and liar.notes and down.host == "10.0.0.7:9787"
    assert twin.host == also.host == "gpu-c" and not twin.notes
