"""vram fleet against a fake Prometheus HTTP API (canned answers per query): parsing, hosts down
or partial, Prometheus' warnings, hostile label values, bounded answers, and fleet pick."""

from __future__ import annotations

import json
import urllib.parse

import pytest
from helpers import assert_one_line_error, clean_env, closed_after, run_vram
from test_fleet_hosts import FakeHost, send

from vramkit.errors import RequestError
from vramkit.fleet import Q_GPU, Q_SEEN, Q_UP, Q_USERS, Prometheus, PrometheusError, check_url, pick_host, read_fleet
from vramkit.gpu_choice import Policy
from vramkit.render.fleet_view import render_fleet
from vramkit.render.style import Style

GiB = 1024**3
T = 1767225600.0


def vector(*samples: tuple[dict[str, str], str]) -> dict:
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": m, "value": [T, v]} for m, v in samples]}}


def target(instance: str, **labels: str) -> dict[str, str]:
    return {"job": "vram", "instance": instance, **labels}


def gpu_series(instance: str, gpu: int, name: str, used: int, total: int, util: float, procs: int,
               uuid: str | None = None) -> list[tuple[dict[str, str], str]]:
    uuid = uuid or f"GPU-{instance}-{gpu}"
    key = {"gpu": str(gpu), "uuid": uuid}
    return [
        ({"__name__": "vram_gpu_info", **target(instance, **key), "name": name,
          "pci_bus_id": f"00000000:{gpu + 7:02X}:00.0"}, "1"),
        ({"__name__": "vram_gpu_memory_used_bytes", **target(instance, **key)}, str(used)),
        ({"__name__": "vram_gpu_memory_total_bytes", **target(instance, **key)}, str(total)),
        ({"__name__": "vram_gpu_memory_reserved_bytes", **target(instance, **key)}, str(GiB // 2)),
        ({"__name__": "vram_gpu_memory_free_bytes", **target(instance, **key)}, str(total - GiB // 2 - used)),
        ({"__name__": "vram_gpu_utilization_ratio", **target(instance, **key)}, str(util)),
        ({"__name__": "vram_gpu_processes", **target(instance, **key)}, str(procs)),
        ({"__name__": "vram_gpu_lost", **target(instance, **key)}, "0"),
    ]


def host_info(instance: str, hostname: str) -> tuple[dict[str, str], str]:
    return {"__name__": "vram_host_info", **target(instance, hostname=hostname, simulated="false")}, "1"


def two_hosts() -> dict[str, object]:
    """gpu-a up with two A100s, gpu-b down, and Prometheus' own target (not a vram host)."""
    return {
        Q_UP: vector((target("10.0.0.1:9787"), "1"), (target("10.0.0.2:9787"), "0"),
                     ({"job": "prometheus", "instance": "localhost:9090"}, "1")),
        Q_SEEN: vector((target("10.0.0.1:9787", hostname="gpu-a", version="1"), "1"),
                       (target("10.0.0.2:9787", hostname="gpu-b", version="1"), "1")),
        Q_GPU: vector(host_info("10.0.0.1:9787", "gpu-a"),
                      *gpu_series("10.0.0.1:9787", 0, "NVIDIA A100-SXM4-80GB", 70 * GiB, 80 * GiB, 0.97, 2),
                      *gpu_series("10.0.0.1:9787", 1, "NVIDIA A100-SXM4-80GB", 1 * GiB, 80 * GiB, 0.0, 1)),
        Q_USERS: vector((target("10.0.0.1:9787", gpu="0", user="bob"), str(60 * GiB)),
                        (target("10.0.0.1:9787", gpu="0", user="alice"), str(10 * GiB)),
                        (target("10.0.0.1:9787", gpu="1", user="alice"), str(1 * GiB))),
    }


class FakePrometheus(FakeHost):
    """A real HTTP server answering /api/v1/query from a dict {query: answer (JSON-able or bytes)}."""

    def __init__(self, answers: dict[str, object]):
        self.answers = answers
        self.asked: list[str] = []
        super().__init__(self._answer)
        self.url = f"http://{self.address}"

    def _answer(self, handler) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        query = urllib.parse.parse_qs(parts.query).get("query", [""])[0]
        self.asked.append(query)
        answer = self.answers.get(query, vector())
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        send(handler, body, status=200 if parts.path == "/api/v1/query" else 404)


@pytest.fixture
def fake():
    yield from closed_after(FakePrometheus)


PLAIN = Style(color=False, unicode=False)


def test_hosts_gpus_and_top_users_are_parsed(fake):
    f = fake(two_hosts())
    fleet = read_fleet(Prometheus(f.url))
    assert set(f.asked) == {Q_UP, Q_SEEN, Q_GPU, Q_USERS}
    assert [(h.host, h.state) for h in fleet.hosts] == [("gpu-a", "up"), ("gpu-b", "down")]
    a = fleet.hosts[0]
    assert (a.instance, a.job, a.up, a.simulated) == ("10.0.0.1:9787", "vram", True, False)
    g0, g1 = a.gpus
    assert (g0.index, g0.name, g0.memory_used, g0.memory_total, g0.utilization, g0.processes) == (
        0, "NVIDIA A100-SXM4-80GB", 70 * GiB, 80 * GiB, 97, 2)
    assert g0.memory_free == 80 * GiB - GiB // 2 - 70 * GiB and g0.memory_reserved == GiB // 2
    assert (g0.top_user, g0.top_user_memory) == ("bob", 60 * GiB)
    assert (g1.top_user, g1.utilization) == ("alice", 0)
    # Prometheus' own target is not a vram host.
    assert "localhost:9090" not in {h.instance for h in fleet.hosts}


def test_a_down_host_is_said_plainly_and_shows_no_stale_numbers(fake):
    answers = two_hosts()
    # Prometheus still holds gpu-b's last GPU series (within the lookback): not shown as current.
    answers[Q_GPU]["data"]["result"] += vector(*gpu_series("10.0.0.2:9787", 0, "L40S", GiB, 45 * GiB, 0.5, 1))[
        "data"]["result"]
    fleet = read_fleet(Prometheus(fake(answers).url))
    b = fleet.hosts[1]
    assert (b.host, b.up, b.gpus) == ("gpu-b", False, [])
    assert b.notes == ["scrape down (up == 0 for 10.0.0.2:9787): Prometheus cannot read it; no current numbers"]
    text = render_fleet(fleet, PLAIN, 120)
    assert text.splitlines()[0].endswith("2 hosts, 2 GPUs, 1 down")
    assert any(line.startswith("gpu-b") and "scrape down (up == 0" in line for line in text.splitlines())
    assert fleet.to_dict()["hosts"][1]["state"] == "down"


def test_a_target_saying_it_is_another_host_is_shown_by_its_address(fake):
    # Through Prometheus too: a target whose --hostname is another target's (gpu-a, in another case)
    # or a down target's address may not pass for it (fleet pick would name the wrong machine).
    answers = two_hosts()
    answers[Q_UP] = vector((target("10.0.0.1:9787"), "1"), (target("10.0.0.2:9787"), "0"),
                           (target("10.0.0.3:9787"), "1"), (target("10.0.0.4:9787"), "1"))
    answers[Q_SEEN]["data"]["result"] += vector(
        (target("10.0.0.3:9787", hostname="GPU-A.", version="1"), "1"),
        (target("10.0.0.4:9787", hostname="10.0.0.2:9787", version="1"), "1"))["data"]["result"]
    answers[Q_GPU]["data"]["result"] += vector(
        host_info("10.0.0.3:9787", "GPU-A."), host_info("10.0.0.4:9787", "10.0.0.2:9787"),
        *gpu_series("10.0.0.3:9787", 0, "H200", 0, 141 * GiB, 0.0, 0),
        *gpu_series("10.0.0.4:9787", 0, "H200", 0, 141 * GiB, 0.0, 0))["data"]["result"]
    # and a series without a target's labels (a recording rule's): no host of its own
    unlabelled = vector(*gpu_series("", 0, "A100", GiB, 80 * GiB, 0.0, 0))["data"]["result"]
    for series in unlabelled:
        series["metric"].pop("job", None)
        series["metric"].pop("instance", None)
    answers[Q_GPU]["data"]["result"] += unlabelled
    fleet = read_fleet(Prometheus(fake(answers).url))
    shown = {h.instance: h.host for h in fleet.hosts}
    # Two say they are gpu-a: which one is cannot be told, so neither is shown as gpu-a.
    assert shown == {"10.0.0.1:9787": "10.0.0.1:9787", "10.0.0.2:9787": "gpu-b", "10.0.0.3:9787": "10.0.0.3:9787",
                     "10.0.0.4:9787": "10.0.0.4:9787"}


def test_partial_answers_are_said_per_host(fake):
    answers = two_hosts()
    answers[Q_UP] = vector((target("10.0.0.1:9787"), "1"), (target("10.0.0.2:9787"), "1"),
                           (target("10.0.0.3:9787"), "1"))
    # gpu-a: GPU 1 without memory numbers; 10.0.0.2 answers but reports no GPU; 10.0.0.3 was never seen.
    answers[Q_GPU]["data"]["result"] = [s for s in answers[Q_GPU]["data"]["result"]
                                        if not (s["metric"].get("gpu") == "1"
                                                and s["metric"]["__name__"] == "vram_gpu_memory_used_bytes")]
    answers[Q_GPU]["data"]["result"] += vector(
        ({"__name__": "vram_read_errors_total", **target("10.0.0.2:9787")}, "7"),
        ({"__name__": "vram_process_series_dropped", **target("10.0.0.1:9787")}, "3"))["data"]["result"]
    answers[Q_GPU]["warnings"] = ["query result may be partial: a remote store did not answer"]
    fleet = read_fleet(Prometheus(fake(answers).url))
    notes = {h.host: h.notes for h in fleet.hosts}
    assert notes["gpu-a"] == ["partial: no memory numbers for GPU 1",
                              "partial: 3 process series left out by --max-process-series (top user may be incomplete)"]
    assert notes["gpu-b"] == ["partial: the target answers but reports no GPU (7 failed readings)"]
    assert notes["10.0.0.3:9787"] == ["partial: the target answers but reports no GPU"]
    assert {h.state for h in fleet.hosts} == {"partial"}
    assert fleet.warnings == ["query result may be partial: a remote store did not answer"]
    text = render_fleet(fleet, PLAIN, 120)
    assert "Prometheus warns: query result may be partial" in text and "3 partial" in text.splitlines()[0]


def test_hostile_label_values_are_sanitized(fake):
    answers = two_hosts()
    evil_user = "mallory\x1b]0;owned\x07\u202e\u200b"
    answers[Q_USERS] = vector((target("10.0.0.1:9787", gpu="0", user=evil_user), str(79 * GiB)),
                              (target("10.0.0.1:9787", gpu="1", user="x\udcff"), str(GiB)))
    body = json.dumps(answers[Q_GPU]).replace("gpu-a", "gpu-\\u001b[2Ja")
    # Bytes that are not UTF-8 (0xff 0xfe), raw in the answer, in the GPU's name.
    answers[Q_GPU] = body.replace("NVIDIA A100-SXM4-80GB", "A100 \udcff\udcfe").encode("utf-8", "surrogateescape")
    fleet = read_fleet(Prometheus(fake(answers).url))
    a = fleet.hosts[0]
    assert a.host == "gpu-?[2Ja"
    assert a.gpus[0].top_user == "mallory?]0;owned???"
    assert a.gpus[1].top_user == "x?"  # a lone surrogate (JSON \udcff) is replaced, as control characters are
    assert a.gpus[0].name == "A100 \ufffd\ufffd"
    text = render_fleet(fleet, PLAIN, 120)
    out = json.dumps(fleet.to_dict(), ensure_ascii=False)
    for shown in (text, out):
        assert not any(ord(c) < 0x20 and c != "\n" for c in shown)
        assert "\u202e" not in shown and "\u200b" not in shown
        shown.encode("utf-8")  # no lone surrogate left: printable as UTF-8


def test_values_that_are_not_numbers_stay_unknown(fake):
    answers = two_hosts()
    for s in answers[Q_GPU]["data"]["result"]:
        if s["metric"]["__name__"] == "vram_gpu_utilization_ratio":
            s["value"] = [T, "NaN"]
        if s["metric"]["__name__"] == "vram_gpu_processes":
            s["value"] = [T, "many"]
    answers[Q_UP]["data"]["result"].append({"metric": "not a dict", "value": [T, "1"]})
    fleet = read_fleet(Prometheus(fake(answers).url))
    assert [g.utilization for g in fleet.hosts[0].gpus] == [None, None]
    assert [g.processes for g in fleet.hosts[0].gpus] == [None, None]
    assert "N/A" in render_fleet(fleet, PLAIN, 120)


@pytest.mark.parametrize(("answer", "needle"), [
    ({"status": "error", "errorType": "bad_data", "error": "parse error at char 3\x1b[2J"},
     "answered an error: bad_data: parse error at char 3?[2J"),
    (b"<html>not the API</html>", "not JSON"),
    ([1, 2, 3], "JSON that is not its API's"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "where its API gives a vector"),
])
def test_answers_that_are_not_data_are_errors(fake, answer, needle):
    f = fake({Q_UP: answer})
    with pytest.raises(PrometheusError) as e:
        Prometheus(f.url).query(Q_UP)
    assert needle in str(e.value)


def test_an_answer_is_bounded(fake):
    big = vector(*[(target(f"10.0.{i // 250}.{i % 250}:9787"), "1") for i in range(5000)])
    f = fake({Q_UP: big})
    assert len(Prometheus(f.url).query(Q_UP)) == 5000
    with pytest.raises(PrometheusError, match="answered more than 0MiB for one query"):
        Prometheus(f.url, max_answer=64 * 1024).query(Q_UP)


@pytest.mark.parametrize("url", ["prometheus:9090", "file:///etc/passwd", "http://", "http://h:70000",
                                 "http://h:9090/?x=1", "http://h:9090/#top"])
def test_a_bad_address_is_a_request_error(url):
    with pytest.raises(RequestError) as e:
        check_url(url)
    assert e.value.param == "url" and e.value.exit_code == 2


def test_an_address_with_a_path_prefix_is_kept():
    assert check_url(" https://example.org/prometheus/ ") == "https://example.org/prometheus"


def test_pick_chooses_the_host_with_the_most_free_memory_and_says_why_others_do_not_fit(fake):
    answers = two_hosts()
    answers[Q_UP]["data"]["result"].append({"metric": target("10.0.0.3:9787"), "value": [T, "1"]})
    answers[Q_GPU]["data"]["result"] += vector(
        host_info("10.0.0.3:9787", "gpu-c"),
        *gpu_series("10.0.0.3:9787", 0, "L40S", 2 * GiB, 48 * GiB, 0.0, 1),
        *gpu_series("10.0.0.3:9787", 1, "L40S", 1 * GiB, 48 * GiB, 0.9, 1),  # the emptiest, but busy
        *gpu_series("10.0.0.3:9787", 2, "L40S", 0, 48 * GiB, 0.0, 0))["data"]["result"]
    fleet = read_fleet(Prometheus(fake(answers).url))
    one, why = pick_host(fleet, Policy(count=1, min_free=40 * GiB))
    assert one is not None and (one.host.host, one.cuda_visible_devices) == ("gpu-a", "1")  # 78.5GiB free
    two, why = pick_host(fleet, Policy(count=2, min_free=40 * GiB))
    assert two is not None and (two.host.host, two.cuda_visible_devices) == ("gpu-c", "0,2")
    assert [w.split(":")[0] for w in why] == ["gpu-a", "gpu-b"]
    assert "too few GPUs fit now" in why[0] and "scrape down" in why[1]
    none, why = pick_host(fleet, Policy(count=4, min_free=40 * GiB))
    assert none is None and len(why) == 3


def test_fleet_and_fleet_pick_as_commands(fake):
    f = fake(two_hosts())
    shown = run_vram("fleet", "--prometheus", f.url, env=clean_env())
    assert shown.rc == 1, shown.err  # gpu-b is down: shown, and said by the exit status
    assert run_vram("fleet", "--prometheus", f.url, "--ignore-down", env=clean_env()).rc == 0
    lines = shown.out.splitlines()
    assert lines[0] == f"vram fleet via Prometheus {f.url}: 2 hosts, 2 GPUs, 1 down"
    assert lines[2].split()[:3] == ["gpu-a", "0", "A100-SXM4-80GB"] and "70.0/80.0GiB" in lines[2]
    assert lines[2].split()[-4:] == ["97%", "2", "bob", "60.0GiB"]
    env = clean_env(VRAM_PROMETHEUS=f.url)
    picked = run_vram("fleet", "pick", "--min-free", "40GiB", "--json", env=env).json()
    assert (picked["host"], picked["cuda_visible_devices"], picked["cuda_device_order"]) == ("gpu-a", "1", "PCI_BUS_ID")
    assert picked["gpus"][0]["uuid"] == "GPU-10.0.0.1:9787-1"
    text = run_vram("fleet", "pick", "--min-free", "40GiB", env=env).out
    assert text.startswith("on gpu-a: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 (GPU 1:")
    refused = run_vram("fleet", "pick", "-n", "2", "--min-free", "40GiB", env=env)
    assert_one_line_error(refused, 1, "no host fits 2 GPUs, ≥40.0GiB free", "gpu-a: ", "gpu-b: scrape down")
    assert_one_line_error(run_vram("fleet", "pick", "-n", "0", env=env), 2, "--count")
    assert_one_line_error(run_vram("fleet", "pick", "--min-free", "lots", env=env), 2, "--min-free")
    assert_one_line_error(run_vram("fleet", "--timeout", "0", env=env), 2, "--timeout")
    for flag in (["--only", "0"], ["--exclude", "1"], ["--exclusive"]):  # one machine's: refused, never ignored
        assert_one_line_error(run_vram("fleet", "pick", "--min-free", "40GiB", *flag, env=env), 2, flag[0],
                              "not for fleet pick", "vram pick")
