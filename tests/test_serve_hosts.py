"""`vram serve --hosts`: the page shows the other hosts' vram serve below this machine's GPUs, a
stopped host as down with when it was last seen, in the reader's language, and another host's
names as text, never as markup. Real `vram serve` processes (the simulator) on free ports and the
real headless Chromium (test_serve_web's fixtures)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest
import test_i18n_serve_web
import test_serve_web
from helpers import Served, closed_after, run_vram
from test_serve_web import HOSTILE_GPU, HOSTILE_USER, QUOTED_USER, WAIT, browser_errors, wait

# test_serve_web's fixtures (a Chromium for the module, `vram serve` processes), and the Chinese Chromium
browser, served, zh_browser = test_serve_web.browser, test_serve_web.served, test_i18n_serve_web.zh_browser
NoAlertPresentException = pytest.importorskip("selenium.common.exceptions").NoAlertPresentException
By = pytest.importorskip("selenium.webdriver.common.by").By

HOSTILE_HOST = "<script>alert(2)</script>gpu-x"
HOSTILE_COMMAND = "python -c '<img src=y onerror=alert(3)>'"
HOSTILE = {
    "name": "hostile",
    "gpus": [{"name": HOSTILE_GPU, "memory_total": "80GiB", "utilization": 50}],
    "processes": [
        {"pid": 4242, "user": HOSTILE_USER, "command": HOSTILE_COMMAND, "gpus": {"0": "10GiB"}},
        {"pid": 5151, "user": QUOTED_USER, "gpus": {"0": "2GiB"}},
    ],
}

# Each host's section as the page draws it, read in one script run (the page redraws sections).
READ_HOSTS = """
const text = (root, css) => { const e = root.querySelector(css); return e ? e.textContent : null; };
return Array.from(document.querySelectorAll('#hosts section.host')).map((s) => ({
  address: s.dataset.address, name: text(s, '.host-name'), down: s.classList.contains('down'),
  state: text(s, '.host-state'),
  gpus: Array.from(s.querySelectorAll('article.gpu')).map((card) => ({
    index: card.dataset.index, name: text(card, '.gpu-name'),
    users: Array.from(card.querySelectorAll('tr.proc td.user')).map((td) => td.textContent),
    commands: Array.from(card.querySelectorAll('tr.proc td.pname')).map((td) => td.textContent)})),
}));
"""


def address(server: Served) -> str:
    return server.url.split("://", 1)[1].rstrip("/")


def hosts_api(server: Served) -> list[dict]:
    with urllib.request.urlopen(server.url + "api/v1/hosts", timeout=20) as answer:
        return json.loads(answer.read())["hosts"]


def wait_for_api(server: Served, up: list[bool]) -> list[dict]:
    deadline = time.monotonic() + WAIT
    while True:
        hosts = hosts_api(server)
        if [h["up"] for h in hosts] == up or time.monotonic() > deadline:
            assert [h["up"] for h in hosts] == up, hosts
            return hosts
        time.sleep(0.1)


def hosts_on_page(driver) -> list[dict]:
    return driver.execute_script(READ_HOSTS)


@pytest.mark.slow
def test_the_page_shows_every_host_and_a_stopped_one_as_down(browser, served):
    a = served("--simulate", "demo", "--hostname", "gpu-a")
    b = served("--simulate", "mig", "--hostname", "gpu-b")
    main = served("--simulate", "demo", "--hostname", "gpu-main", "--hosts", f"{address(a)},{address(b)}",
                  "--hosts-timeout", "5s")
    wait_for_api(main, [True, True])
    b.stop()
    hosts = wait_for_api(main, [True, False])
    assert hosts[1]["why"] == "unreachable" and hosts[1]["error"].startswith("cannot reach it: ")
    assert isinstance(hosts[1]["last_seen"], float) and hosts[1]["snapshot"] is None
    assert hosts[1]["hostname"] == "gpu-b"  # the name it gave when it last answered
    browser.get_log("browser")
    browser.get(main.url)

    demo = run_vram("status", "--simulate", "demo", "--json").json()
    names = [g["name"] for g in demo["gpus"]]

    def shown(driver):
        found = hosts_on_page(driver)
        return found if len(found) == 2 and found[0]["gpus"] and found[1]["down"] else None
    found = wait(browser, shown, "both hosts on the page, the stopped one down")
    first, second = found
    assert (first["address"], first["name"], first["down"]) == (address(a), "gpu-a", False)
    assert [g["name"] for g in first["gpus"]] == names
    users = sorted(u for g in first["gpus"] for u in g["users"])
    assert users and set(users) <= {p["user"] for g in demo["gpus"] for p in g["processes"]}
    # The stopped host: down, why, and when this server last read it; no GPUs of a reading gone stale.
    assert (second["address"], second["name"]) == (address(b), "gpu-b") and not second["gpus"]
    assert second["state"].startswith("Down: cannot reach it: ") and ". Last seen at " in second["state"]
    # This machine's GPUs as before, and nothing of another host among them.
    assert len(browser.find_elements(By.CSS_SELECTOR, "#gpus article.gpu")) == len(demo["gpus"])
    assert not browser_errors(browser)


class SlowHost:
    """A host on the network that accepts connections and then never answers (silent) or answers
    HTTP a byte every 0.1 s (trickle); it counts the connections it is holding open at once."""

    def __init__(self, trickle: bool):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.trickle = trickle
        self.open = self.most = self.accepted = 0
        self.lock = threading.Lock()
        self.closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self.lock:
                self.open += 1
                self.accepted += 1
                self.most = max(self.most, self.open)
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n" \
            + b" " * 1_000_000
        try:
            with conn:
                conn.settimeout(0.1)
                sent = 0
                while not self.closing.is_set():
                    if self.trickle:
                        conn.sendall(answer[sent:sent + 1])
                        sent += 1
                    try:
                        if conn.recv(4096) == b"" and not self.trickle:
                            return  # the reader hung up
                    except TimeoutError:
                        pass
        except OSError:
            pass  # the reader hung up
        finally:
            with self.lock:
                self.open -= 1

    def close(self) -> None:
        self.closing.set()
        self.sock.close()


@pytest.fixture
def slow_host():
    yield from closed_after(SlowHost)


@pytest.mark.slow
def test_a_silent_or_trickling_host_never_holds_up_the_others(browser, served, slow_host):
    """Each host is read on its own clock with its own deadline: with --hosts-timeout 10m, a host
    that accepts and never answers and one that trickles a byte at a time hold one connection
    each, and meanwhile the host that answers is on /api/v1/hosts and the page, read again every
    interval (one deadline a round held every host's reading until the slowest had answered)."""
    silent, trickle = slow_host(False), slow_host(True)
    a = served("--simulate", "demo", "--hostname", "gpu-a")
    main = served("--simulate", "demo", "--hosts", f"{silent.address},{address(a)},{trickle.address}",
                  "--hosts-timeout", "10m")
    stamps: set[float] = set()
    deadline = time.monotonic() + 2 * WAIT
    while len(stamps) < 4:
        hosts = hosts_api(main)
        assert [hosts[0]["why"], hosts[2]["why"]] == ["waiting", "waiting"], hosts
        if hosts[1]["up"]:
            stamps.add(hosts[1]["snapshot"]["timestamp"])
        assert time.monotonic() < deadline, f"gpu-a read {len(stamps)} times while the others were silent"
        time.sleep(0.1)
    browser.get(main.url)

    def shown(driver):
        found = hosts_on_page(driver)
        return found if len(found) == 3 and found[1]["gpus"] else None
    silent_row, gpu_a, trickle_row = wait(browser, shown, "gpu-a's GPUs beside the hosts not read yet")
    assert gpu_a["name"] == "gpu-a" and not gpu_a["down"]
    assert [silent_row["state"], trickle_row["state"]] == ["Not read yet.", "Not read yet."]
    assert not silent_row["gpus"] and not trickle_row["gpus"]
    # One connection each, held; never a second read of a host while its first is open.
    assert (silent.accepted, silent.most, trickle.accepted, trickle.most) == (1, 1, 1, 1)
    assert [h["why"] for h in hosts_api(main)] == ["waiting", None, "waiting"]
    assert not browser_errors(browser)


@pytest.mark.slow
def test_a_page_that_polls_follows_the_hosts_too(browser, served):
    """Without EventSource the page polls /api/v1/snapshot and /api/v1/hosts: a host that stops
    answering turns down on the page there too."""
    a = served("--simulate", "demo", "--hostname", "gpu-a")
    main = served("--simulate", "demo", "--hosts", address(a))
    wait_for_api(main, [True])
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.EventSource;"})
    try:
        browser.get(main.url)
        wait(browser, lambda d: "polling" in d.find_element(By.ID, "freshness").text, "the page saying it polls")
        assert wait(browser, lambda d: [h for h in hosts_on_page(d) if h["gpus"]], "gpu-a's GPUs")[0]["name"] == "gpu-a"
        a.stop()
        wait(browser, lambda d: [h for h in hosts_on_page(d) if h["down"]], "gpu-a down, by polling")
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})


@pytest.mark.slow
def test_another_host_s_names_are_text_not_markup(browser, served, tmp_path):
    scenario = tmp_path / "hostile.json"
    scenario.write_text(json.dumps(HOSTILE))
    hostile = served("--simulate", str(scenario), "--hostname", HOSTILE_HOST, "--process-commands")
    main = served("--simulate", "demo", "--hosts", address(hostile))
    wait_for_api(main, [True])
    browser.get_log("browser")
    browser.get(main.url)
    found = wait(browser, lambda d: [h for h in hosts_on_page(d) if h["gpus"]], "the hostile host's GPUs")
    host = found[0]
    assert host["name"] == HOSTILE_HOST
    assert [g["name"] for g in host["gpus"]] == [HOSTILE_GPU]
    assert host["gpus"][0]["users"] == [HOSTILE_USER, QUOTED_USER]
    assert not browser.find_elements(By.CSS_SELECTOR, "#hosts img, #hosts b, #hosts i, #hosts script")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - asking raises when there is none
    assert not browser_errors(browser)


@pytest.mark.slow
def test_a_down_host_is_said_in_the_reader_s_language(zh_browser, served):
    a = served("--simulate", "demo")
    main = served("--simulate", "demo", "--hosts", address(a))
    wait_for_api(main, [True])
    a.stop()
    wait_for_api(main, [False])
    zh_browser.get(main.url)
    found = wait(zh_browser, lambda d: [h for h in hosts_on_page(d) if h["down"]], "the stopped host, down")
    state = found[0]["state"]
    assert state.startswith("宕机：无法连接：") and "最后一次读到是在" in state, state
    # The API stays English.
    assert hosts_api(main)[0]["error"].startswith("cannot reach it: ")


def test_what_is_kept_of_a_snapshot_is_checked_field_by_field():
    from vramkit.serve.hosts import MAX_GPUS, MAX_PROCESSES, kept_snapshot

    doc = {"hostname": "x\x1b[31m", "timestamp": float("nan"), "gpus": [
        {"index": 0, "name": ["not", "text"], "memory_used": True, "utilization": 1e400,
         "na": {"processes": 5}, "processes": [{"pid": "1"}, {"pid": 7, "user": 3, "extra": "dropped"}]},
        {"index": -1}, "junk", {"index": 0, "name": "a second GPU 0"}]}
    kept = kept_snapshot(doc)
    assert kept is not None and "\x1b" not in kept["hostname"] and kept["timestamp"] is None
    (gpu,) = kept["gpus"]
    assert gpu["name"] is None and gpu["memory_used"] is None and gpu["utilization"] is None and gpu["na"] == {}
    assert [p["pid"] for p in gpu["processes"]] == [7] and gpu["processes"][0]["user"] is None
    assert "extra" not in gpu["processes"][0]
    assert kept_snapshot({"error": "no reading yet"}) is None and kept_snapshot([1]) is None
    # Bounded per host: a host that lists a million processes costs the page no more than MAX_PROCESSES.
    crowd = [{"pid": 100 + i, "memory": 1} for i in range(10_000)]
    big = kept_snapshot({"gpus": [{"index": i, "processes": crowd} for i in range(100)]})
    assert big is not None and len(big["gpus"]) == MAX_GPUS
    assert sum(len(g["processes"]) for g in big["gpus"]) == MAX_PROCESSES


def test_without_hosts_the_api_says_so_and_bad_hosts_are_exit_2(served):
    plain = served("--simulate", "demo")
    with pytest.raises(urllib.error.HTTPError) as refused:
        hosts_api(plain)
    assert refused.value.code == 404
    bad = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--hosts", "gpu a")
    assert bad.rc == 2 and bad.err.count("\n") == 1 and "--hosts" in bad.err and "Traceback" not in bad.err
    lone = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--hosts-config", "x.yml")
    assert lone.rc == 2 and "--hosts-config: goes with --hosts" in lone.err


def test_a_delta_names_only_the_hosts_that_changed_and_the_page_s_copy_stays_the_server_s():
    """The event stream with --hosts (serve/updates.py): each round makes new entries; a host whose
    reading is the same is not sent, one whose reading moved is sent as its own delta, one that went
    down as its changed fields; app.js' way of applying them (test_serve_updates.apply for a
    reading) keeps the page's copy equal to the server's."""
    import copy

    from test_serve_updates import apply, doc_at, proc

    from vramkit.serve.updates import Shown

    def entry(name: str, snapshot: dict | None, **fields) -> dict:
        return {"address": name, "up": snapshot is not None, "why": None, "error": None, "detail": None,
                "last_seen": None, "snapshot": snapshot, **fields}

    def reading(t: float, hosts: list[dict]) -> dict:
        return {**doc_at(t, [proc(1, memory=1 << 30, elapsed=10.0)]), "hosts": hosts}

    def host_a(t: float, memory: int) -> dict:
        return doc_at(t, [proc(7, memory=memory, elapsed=100.0 + t, user="<b>x</b>")], hostname="gpu-a")

    still = doc_at(5.0, [proc(9, memory=2 << 30, elapsed=50.0)], hostname="gpu-b")
    shown = Shown()
    assert shown.advance(reading(0.0, [entry("a:1", host_a(0.0, 1 << 30)), entry("b:1", copy.deepcopy(still))]),
                         1) is None
    page = copy.deepcopy(shown.doc)
    rounds = [
        [entry("a:1", host_a(2.0, 1 << 30)), entry("b:1", copy.deepcopy(still))],  # a's clock runs on
        [entry("a:1", host_a(4.0, 3 << 30)), entry("b:1", copy.deepcopy(still))],  # a's process grows
        [entry("a:1", host_a(6.0, 3 << 30)), entry("b:1", None, why="unreachable", error="cannot reach it: x",
                                                    detail="x", last_seen=5.0)],  # b goes down
    ]
    for seq, hosts in enumerate(rounds, start=2):
        delta = shown.advance(reading(2.0 * (seq - 1), hosts), seq)
        assert delta is not None
        sent = delta.get("hosts", {})
        assert "0" in sent and ("1" in sent) == (seq == 4), delta
        wire = json.loads(json.dumps(delta))
        apply(page, wire)
        for i, change in wire.get("hosts", {}).items():
            host = page["hosts"][int(i)]
            host.update(change.get("set", {}))
            if "doc" in change:
                apply(host["snapshot"], change["doc"])
        assert page == shown.doc
    assert rounds[-1][0]["snapshot"]["gpus"][0]["processes"][0]["memory"] == 3 << 30
    assert page["hosts"][1]["up"] is False and page["hosts"][1]["snapshot"] is None


def test_the_page_words_each_reason_a_host_is_down_as_the_api_does_and_translated():
    """app.js' DOWN is page_words.HOST_DOWN (the API's English, by kind), and zh_CN translates each."""
    import re
    from pathlib import Path

    from vramkit.serve import page_words

    script = (Path(page_words.__file__).parent / "web" / "app.js").read_text()
    table = re.search(r"const DOWN = \{(.*?)\};", script, re.S)
    assert table
    in_page = dict(re.findall(r'"?([\w-]+)"?: "([^"]*)"', table.group(1)))
    assert in_page == {k: v for k, v in page_words.HOST_DOWN.items() if k != "waiting"}
    chinese = page_words.words("zh_CN").words
    for english in page_words.HOST_DOWN.values():
        assert chinese[english] != english, english
