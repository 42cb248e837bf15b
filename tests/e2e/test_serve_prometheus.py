"""vram serve, Prometheus and vram fleet together, as a lab runs them: a real Prometheus server
(the Debian package's /usr/bin/prometheus) scraping two `vram serve` processes (two simulated hosts
on different scenarios), read through Prometheus' HTTP API: every query of every panel of the
Grafana dashboard returns data, and `vram fleet --json` shows both hosts with each scenario's
numbers exactly. Also: a Prometheus that never answers, or answers errors, is said in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import (
    PATIENCE,
    PROMETHEUS,
    Groups,
    assert_one_line_error,
    clean_env,
    expected_gpus,
    minimal_scenario,
    run_vram,
    start_prometheus,
    vram_argv,
)

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "vram-dashboard.json"
needs_prometheus = pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                                      reason="needs the Prometheus server (Debian package 'prometheus'; .ci/run "
                                             "installs it)")


def get_json(url: str, timeout: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def scenario_a() -> dict:
    data = minimal_scenario()
    data["name"] = "host-a"
    for g in data["gpus"]:
        g.update(name="NVIDIA A100-SXM4-80GB", memory_reserved="519MiB", memory_utilization=20, temperature=60,
                 power=200.0, power_limit=400)
    data["processes"] = [
        {"pid": 101, "user": "ann", "command": "python a.py", "gpus": {"0": "10GiB"}, "sm_util": 0},  # idle holder
        {"pid": 102, "user": "ben", "command": "python b.py", "gpus": {"0": "3GiB", "1": "5GiB"}},
    ]
    return data


def scenario_b() -> dict:
    data = minimal_scenario()
    data["name"] = "host-b"
    data["gpus"] = [
        {"name": "NVIDIA L40S", "uuid": f"GPU-11111111-0000-4000-8000-00000000000{i}",
         "pci_bus_id": f"00000000:{0x41 + i:02X}:00.0", "memory_total": "46068MiB", "memory_reserved": "527MiB",
         "utilization": util, "memory_utilization": 5, "temperature": 40, "power": 90.5, "power_limit": 350}
        for i, util in enumerate((0, 80, 10))]
    data["processes"] = [
        {"pid": 201, "user": "carl", "command": "train.py", "gpus": {"1": "30GiB"}},
        {"pid": 202, "user": "dora\x1b[31m\u202e", "command": "x", "gpus": {"2": "2GiB"}, "sm_util": 0},
    ]
    return data


@pytest.fixture
def lab(tmp_path):
    """Two vram serve processes and a Prometheus scraping them every second. Yields
    (Prometheus' URL, {hostname: scenario data}, the targets, {hostname: its vram serve process})."""
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("needs the Prometheus server (Debian package 'prometheus')")
    group = Groups()
    hosts = {"gpu-a": scenario_a(), "gpu-b": scenario_b()}
    targets = []
    serves: dict[str, subprocess.Popen] = {}
    try:
        for name, data in hosts.items():
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(data))
            proc = group.start(vram_argv("serve", "--simulate", str(path), "--listen", "127.0.0.1:0",
                                         "--interval", "0.5s", "--hostname", name),
                               env=clean_env(), stderr=subprocess.PIPE, text=True)
            line = proc.stderr.readline()
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            assert found, f"vram serve did not say where it listens: {line!r}"
            targets.append(f"127.0.0.1:{found.group(1)}")
            serves[name] = proc
        url = start_prometheus(group, tmp_path, targets)
        yield url, hosts, targets, serves
    finally:
        group.cleanup()


def query(url: str, promql: str) -> list[dict]:
    answer = get_json(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def wait_until(what, describe, timeout: float = PATIENCE):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still not so after {timeout}s: {describe()}")
        time.sleep(0.25)


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expression) for every target of every panel, variables set to 'All'
    (Grafana's regex-all: the variables' allValue, .*)."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v.get("allValue") or ".*" for v in dashboard["templating"]["list"] if v["type"] == "query"}
    out = []
    for panel in dashboard["panels"]:
        for t in panel["targets"]:
            expr = t["expr"]
            for name, value in variables.items():
                expr = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, expr)
            assert "$" not in expr, f"an unknown variable in {panel['title']}: {expr}"
            out.append((panel["title"], expr))
    return out


@needs_prometheus
def test_every_dashboard_panel_has_data_and_fleet_shows_each_scenario_exactly(lab):
    url, hosts, targets, _ = lab
    wait_until(lambda: sum(float(r["value"][1]) for r in query(url, 'up{job="vram"}')) == 2,
               lambda: f"both vram serve targets up: {query(url, 'up')}")

    queries = panel_queries()
    assert len(queries) >= 8
    # The dashboard's variables themselves list both hosts.
    hostnames = {r["metric"]["hostname"] for r in query(url, "vram_host_info")}
    assert hostnames == set(hosts)

    def empty() -> list[str]:
        return [f"{title}: {expr}" for title, expr in queries if not query(url, expr)]
    wait_until(lambda: not empty(), lambda: f"panels without data: {empty()}")

    # Memory per user is the scenarios' sums, through Prometheus.
    per_user = {r["metric"]["user"]: float(r["value"][1])
                for r in query(url, "sum by (user) (vram_process_memory_bytes)")}
    assert per_user["ann"] == 10 * 1024**3 and per_user["ben"] == 8 * 1024**3 and per_user["carl"] == 30 * 1024**3

    def fleet() -> dict | None:
        result = run_vram("fleet", "--prometheus", url, "--json", env=clean_env())
        data = result.json()
        ready = [h for h in data["hosts"] if h["state"] == "up" and len(h["gpus"]) == len(hosts[h["host"]]["gpus"])]
        return data if len(ready) == 2 else None
    data = wait_until(fleet, lambda: run_vram("fleet", "--prometheus", url, env=clean_env()).out)
    assert [h["host"] for h in data["hosts"]] == ["gpu-a", "gpu-b"]
    for host in data["hosts"]:
        assert host["job"] == "vram" and host["instance"] in targets and host["simulated"] is True
        assert host["notes"] == []
        want = expected_gpus(hosts[host["host"]])
        for got, exp in zip(host["gpus"], want, strict=True):
            assert (got["index"], got["uuid"], got["name"], got["pci_bus_id"]) == (
                exp["index"], exp["uuid"], exp["name"], exp["pci_bus_id"])
            assert (got["memory_used"], got["memory_total"], got["memory_reserved"], got["memory_free"]) == (
                exp["memory_used"], exp["memory_total"], exp["memory_reserved"], exp["memory_free"])
            assert got["utilization"] == exp["utilization"]
            assert got["processes"] == len(exp["processes"])
            holders: dict[str, int] = {}
            for p in exp["processes"].values():
                holders[p["user"]] = holders.get(p["user"], 0) + p["memory"]
            top = max(holders.items(), key=lambda kv: kv[1]) if holders else (None, None)
            assert (got["top_user"], got["top_user_memory"]) == (
                None if top[0] is None else top[0].replace("\x1b", "?").replace("\u202e", "?"), top[1])

    # The table says the same, with the hostile user name sanitized.
    text = run_vram("fleet", "--prometheus", url, env=clean_env()).out
    assert "\x1b" not in text and "\u202e" not in text and "dora?[31m?" in text
    assert re.search(r"gpu-b\s+1\s+L40S\s+[#.]+\s+30\.0/45\.0GiB\s+80%\s+1\s+carl 30(\.0)?GiB", text), text

    # fleet pick: two GPUs with 40GiB free each fit only on gpu-a.
    picked = run_vram("fleet", "pick", "-n", "2", "--min-free", "40GiB", "--prometheus", url, "--json",
                      env=clean_env()).json()
    assert (picked["host"], picked["cuda_visible_devices"]) == ("gpu-a", "0,1")
    refused = run_vram("fleet", "pick", "-n", "3", "--min-free", "40GiB", "--prometheus", url, env=clean_env())
    assert_one_line_error(refused, 1, "no host fits 3 GPUs", "gpu-a:", "gpu-b:")


@needs_prometheus
def test_a_host_whose_scrape_fails_is_said_to_be_down(lab):
    url, hosts, targets, serves = lab
    wait_until(lambda: len([h for h in run_vram("fleet", "--prometheus", url, "--json", "--ignore-down",
                                                env=clean_env()).json()["hosts"] if h["gpus"]]) == 2,
               lambda: "both hosts have GPUs")
    # Stop gpu-b's vram serve: Prometheus' next scrape of it fails (up == 0).
    serves["gpu-b"].send_signal(signal.SIGTERM)
    serves["gpu-b"].wait(timeout=30)

    def down() -> dict | None:
        data = run_vram("fleet", "--prometheus", url, "--json", "--ignore-down", env=clean_env()).json()
        states = {h["host"]: h["state"] for h in data["hosts"]}
        return data if states == {"gpu-a": "up", "gpu-b": "down"} else None
    data = wait_until(down, lambda: run_vram("fleet", "--prometheus", url, env=clean_env()).out)
    b = next(h for h in data["hosts"] if h["host"] == "gpu-b")
    assert b["gpus"] == [] and "up == 0" in b["notes"][0]
    result = run_vram("fleet", "--prometheus", url, env=clean_env())
    assert result.rc == 1  # a host is down: shown, and said by the exit status
    assert re.search(r"^gpu-b\s+scrape down \(up == 0", result.out, re.M), result.out
    assert "1 down" in result.out.splitlines()[0]


# ---------------------------------------------------------------- a Prometheus that misbehaves

class Misbehaving(BaseHTTPRequestHandler):
    release: threading.Event

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urllib.parse.urlsplit(self.path).path
        if path.startswith("/silent"):  # never answers (until the test ends)
            self.release.wait(120)
            return
        if path.startswith("/unavailable"):
            self._send(503, b'{"status":"error","errorType":"unavailable","error":"TSDB not ready\\u001b[2J"}')
        elif path.startswith("/html"):
            self._send(502, b"<html>Bad Gateway</html>", "text/html")
        elif path.startswith("/notjson"):
            self._send(200, b"this is not JSON", "text/plain")
        elif path.startswith("/badquery"):
            self._send(400, b'{"status":"error","errorType":"bad_data","error":"invalid parameter \\"query\\""}')
        else:
            self._send(404, b"404 page not found", "text/plain")

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def misbehaving():
    release = threading.Event()
    handler = type("Handler", (Misbehaving,), {"release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("path", "needles"), [
    ("/silent", ("did not answer within 0.5s",)),
    ("/unavailable", ("answered an error: unavailable: TSDB not ready?[2J",)),
    ("/html", ("answered an error: HTTP 502",)),
    ("/notjson", ("not JSON", "is this Prometheus' address?")),
    ("/badquery", ("answered an error: bad_data: invalid parameter",)),
])
def test_a_prometheus_that_is_slow_or_errs_is_one_line_and_exit_1(misbehaving, path, needles):
    result = run_vram("fleet", "--prometheus", misbehaving + path, "--timeout", "0.5s", env=clean_env())
    line = assert_one_line_error(result, 1, *needles)
    assert "\x1b" not in line and "Traceback" not in result.err


def test_an_unreachable_prometheus_is_exit_1_and_a_bad_address_exit_2():
    with socket.socket() as held:  # bound, never listening: refused, and no other test can take it meanwhile
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        assert_one_line_error(run_vram("fleet", "--prometheus", f"http://127.0.0.1:{port}", env=clean_env()), 1,
                              f"cannot reach Prometheus at http://127.0.0.1:{port}")
    for bad in ("prometheus:9090", "ftp://x", "http://", "http://h:99999", "http://h/?q=1"):
        assert_one_line_error(run_vram("fleet", "--prometheus", bad, env=clean_env()), 2, "--prometheus")
    assert_one_line_error(run_vram("fleet", env=clean_env()), 2, "--prometheus", "VRAM_PROMETHEUS")


# ---------------------------------------------------------------- names, docs and the service

def exposition(**options) -> str:
    """The demo scenario's /metrics text, built in this process (as vram serve builds it)."""
    import argparse

    from prometheus_client import CollectorRegistry, generate_latest

    from vramkit.cli.common import open_for
    from vramkit.serve.metrics import ExportState, SnapshotCollector

    machine = open_for(argparse.Namespace(simulate="demo"))
    try:
        snap = machine.snapshot()
    finally:
        machine.close()
    state = ExportState(hostname="gpu-a", version="test", read_seconds=0.01)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap, state, **options))
    return generate_latest(registry).decode()


def test_docs_metrics_lists_every_metric_and_label():
    text = exposition(dcgm_names=True, commands=True)
    doc = (DASHBOARD.parent.parent / "metrics.md").read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert {"vram_gpu_memory_used_bytes", "vram_read_errors_total", "DCGM_FI_DEV_FB_USED"} <= names
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"docs/metrics.md does not list {missing}"
    labels = set(re.findall(r'[{,]([A-Za-z_]+)="', text))
    assert not sorted(k for k in labels if f"`{k}`" not in doc), "docs/metrics.md does not name every label"


@pytest.mark.skipif(not shutil.which("promtool"), reason="needs promtool (Debian package 'prometheus')")
def test_vram_names_follow_prometheus_conventions_by_promtool():
    lint = subprocess.run(["promtool", "check", "metrics"], input=exposition(dcgm_names=True, commands=True),
                          capture_output=True, text=True)
    problems = [line for line in (lint.stdout + lint.stderr).splitlines() if line.strip()]
    # dcgm-exporter's own camelCase labels (modelName, Hostname) are kept on purpose, so that DCGM
    # dashboards work; every vram_ family must pass.
    assert problems and all(p.startswith("DCGM_FI_") and "camelCase" in p for p in problems), problems


def test_the_serve_service_runs_a_command_line_vram_accepts():
    import configparser
    import shlex

    from vramkit.cli.main import build_parser

    unit_path = DASHBOARD.parent.parent.parent / "contrib" / "systemd" / "vram-serve.service"
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read_string(unit_path.read_text())
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0] == "/usr/local/bin/vram" and argv[-1] == "$VRAM_SERVE_OPTIONS"
    args = build_parser().parse_args(argv[1:-1])
    assert (args.command, args.listen) == ("serve", "127.0.0.1:9787")  # safe by default
    assert unit["Service"]["RestartPreventExitStatus"] == "2"
    install = [line.strip("# ").strip() for line in unit_path.read_text().splitlines() if "sudo " in line]
    fleet_doc = (DASHBOARD.parent.parent / "fleet.md").read_text()
    assert install == ["sudo scripts/install-system.sh",  # the whole install (README, "For admins"), or by hand:
                       "sudo install -m 644 contrib/systemd/vram-serve.service /etc/systemd/system/",
                       "sudo systemctl enable --now vram-serve"]
    assert all(line in fleet_doc for line in install)
