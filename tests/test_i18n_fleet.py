"""vram fleet in Chinese (issue 34): every way Prometheus can fail to answer (PrometheusError, the
line vram fleet and fleet pick print) is said in zh_CN; what stays English is the address, the
names of things (Prometheus, JSON, API, HTTP) and what came from outside: Prometheus' own error
text, the system's reason, the reader's detail."""

from __future__ import annotations

import re
import time

import pytest
from helpers import free_port, run_vram, zh_env
from test_fleet import FakePrometheus, vector

from vramkit import i18n
from vramkit.fleet import Prometheus, PrometheusError

KEPT = {"Prometheus", "JSON", "API", "HTTP", "vector", "dict"}  # "dict": the JSON type it got, as Python names it


def english_left(message: str, *outside: str) -> list[str]:
    """The English words of `message` once the address, the text from outside and the names of
    things are taken out."""
    for text in outside:
        message = message.replace(text, " ")
    words = re.findall(r"[A-Za-z](?:[A-Za-z_'-]*[A-Za-z_])?", re.sub(r"\b\d+(\.\d+)?(s|MiB)\b", " ", message))
    return [w for w in words if w not in KEPT]


@pytest.fixture(scope="module")
def prometheus():
    fake = FakePrometheus({
        "not-json": b"<html>a login page</html>",
        "a-list": [1, 2],
        "a-matrix": {"status": "success", "data": {"resultType": "matrix", "result": []}},
        "an-error": {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
        "big": vector(*[({"job": "vram", "instance": f"h{i}"}, "1") for i in range(2000)]),
    })
    yield fake
    fake.close()


@pytest.fixture
def chinese(monkeypatch):
    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()


@pytest.mark.parametrize(("query", "outside"), [
    ("not-json", ()), ("a-list", ()), ("a-matrix", ()), ("an-error", ("bad_data: parse error at char 3",)),
])
def test_an_answer_that_is_not_data_is_said_in_chinese(chinese, prometheus, query, outside):
    with pytest.raises(PrometheusError) as failed:
        Prometheus(prometheus.url).query(query)
    message = str(failed.value)
    assert re.search(r"[\u4e00-\u9fff]", message), message
    assert not english_left(message, prometheus.url, *outside), message


def test_a_failed_read_is_said_in_chinese(chinese, prometheus):
    """Too big, too slow, unreachable: each kind of GetError, worded for the reader."""
    failures = []
    for prom, deadline in ((Prometheus(prometheus.url, max_answer=16 * 1024), None),
                           (Prometheus(prometheus.url, timeout=0.5), time.monotonic() - 1),
                           (Prometheus(f"http://127.0.0.1:{free_port()}"), None)):
        with pytest.raises(PrometheusError) as failed:
            prom.query("big", deadline)
        failures.append((prom.url, str(failed.value)))
    for url, message in failures:
        assert re.search(r"[\u4e00-\u9fff]", message), message
        assert not english_left(message, url, "Connection refused"), message


def test_vram_fleet_says_prometheus_cannot_be_reached_in_chinese():
    url = f"http://127.0.0.1:{free_port()}"
    shown = run_vram("fleet", "--prometheus", url, env=zh_env())
    assert shown.rc == 1 and not shown.out, shown
    assert shown.err == f"vram: 无法连接 {url} 上的 Prometheus：Connection refused\n", shown.err


CONFIG_WORDS = {"basic_auth", "tls_config", "username", "password", "password_file", "ca_file", "cert_file",
                "key_file", "insecure_skip_verify", "proxy_url", "true", "false", "UTF"}


@pytest.mark.parametrize("text", [
    b"basic_auth: {username: 3, password: x}",  # a non-empty string expected
    b"basic_auth: [1]",  # a mapping expected
    b"\xff\xfe",  # not UTF-8
    b"- a\n- b",  # not a mapping of basic_auth, tls_config
    b"proxy_url: http://proxy",  # not supported
    b"basic_auth: {username: a}",  # neither password nor password_file
    b"tls_config: {ca_file: empty.pem}",  # an empty file is no certificate
    b"tls_config: {cert_file: c.pem}",  # without its key_file
    b"tls_config: {insecure_skip_verify: 'yes'}",  # not true or false
], ids=["string", "mapping", "utf8", "top", "unknown", "password", "empty-ca", "cert-alone", "bool"])
def test_a_hosts_config_vram_cannot_use_is_said_in_chinese(chinese, tmp_path, text):
    from vramkit.errors import RequestError
    from vramkit.fleet_hosts import load_client_config

    (tmp_path / "empty.pem").write_bytes(b"")
    path = tmp_path / "fleet.yml"
    path.write_bytes(text)
    with pytest.raises(RequestError) as refused:
        load_client_config(path)
    message = refused.value.message
    assert re.search(r"[\u4e00-\u9fff]", message), message
    assert not [w for w in english_left(message, str(path)) if w not in CONFIG_WORDS], message
