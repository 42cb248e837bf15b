"""The web page of `vram serve` in a real headless Chromium (selenium): the scenario's numbers on
the page, live updates as its timeline moves (server-sent events, and polling where events are
unavailable), other users' names shown as text, a phone's width, the server's CSP, history charts.

Skipped, saying why, where chromium, chromedriver or selenium is missing. With
VRAM_UPDATE_SCREENSHOT=1 the history test also writes docs/img/serve-page.png."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import chromium_env, chromium_sandbox_args, clean_env, crowded_scenario, vram_argv, wait_for

from vramkit.units import parse_size

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not os.access(CHROMEDRIVER, os.X_OK) or CHROMIUM is None:
    pytest.skip("needs chromium and /usr/bin/chromedriver (Debian: apt-get install chromium chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

WAIT = 20.0  # seconds before a wait for the page gives up (a failure, not a measurement)
GIB = 1 << 30
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "serve-page.png"
HOSTILE_USER = "<img src=x onerror=alert(1)>"
QUOTED_USER = "o'brien \"q\" & <b>x</b>"
HOSTILE_GPU = 'NVIDIA <i>Test</i> "GPU"'
# GPU 0's process steps between 10 and 30 GiB every 3 s of the scenario clock (real time here),
# so whatever the page shows first, the other value must follow.
STEPS = ["10GiB", "30GiB"]
SCENARIO = {
    "name": "web-page",
    "gpus": [
        {"name": HOSTILE_GPU, "uuid": "GPU-00000000-0000-4000-8000-000000000000",
         "pci_bus_id": "00000000:07:00.0", "memory_total": "80GiB", "utilization": 50, "temperature": 61,
         "power": 200, "power_limit": 300},
        {"uuid": "GPU-00000000-0000-4000-8000-000000000001", "pci_bus_id": "00000000:0F:00.0",
         "memory_total": "40GiB", "utilization": 0},
    ],
    "processes": [
        {"pid": 4242, "user": HOSTILE_USER,
         "gpus": {"0": {"timeline": [[0, STEPS[0]], [3, STEPS[1]], [6, STEPS[0]]], "interpolate": "step",
                        "repeat": 6}}},
        {"pid": 5151, "user": QUOTED_USER, "sm_util": 0, "gpus": {"1": "2GiB"}},
    ],
}


def used_of_total(used: int, total: int) -> str:
    return f"{used / GIB:.1f} / {total / GIB:.1f} GiB"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    for arg in chromium_sandbox_args():
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(CHROMEDRIVER, env=chromium_env(tmp_path_factory))
    driver = webdriver.Chrome(service=service, options=options)
    yield driver
    driver.quit()


@pytest.fixture
def served(served):
    """conftest's `vram serve` (helpers.Served) as the page's tests want it: a reading every 0.5 s,
    its scenario clock running in real time."""
    return lambda *args, **kw: served(*args, **{"interval": "0.5s", "env": {"VRAM_SIM_TIME": None}, **kw})


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    path = tmp_path / "web-page.json"
    path.write_text(json.dumps(SCENARIO))
    return path


def wait(driver, condition, what: str):
    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(lambda d: condition(d), message=what)


# The page replaces its GPU cards on every reading: read them in one script run, not element by element.
READ_GPUS = """
const text = (root, css) => { const e = root.querySelector(css); return e ? e.textContent : null; };
return Array.from(document.querySelectorAll('#gpus article.gpu')).map((card) => ({
  index: card.dataset.index, name: text(card, '.gpu-name'), memory: text(card, '.mem-text'),
  util: text(card, '.util-text'), temperature: text(card, '.temperature'), power: text(card, '.power'),
  note: text(card, '.no-procs'),
  rows: Array.from(card.querySelectorAll('tr.proc')).map((row) => ({
    pid: text(row, 'td.pid'), user: text(row, 'td.user'), pmem: text(row, 'td.pmem'), age: text(row, 'td.age'),
    flags: text(row, 'td.flags')})),
}));
"""


def gpus_on_page(driver) -> dict[int, dict]:
    return {int(g["index"]): g for g in driver.execute_script(READ_GPUS)}


def gpu_notes(driver) -> dict[int, str | None]:
    """Each GPU card's note where it has no process table ('no processes', 'processes unknown
    (...)'), None where it has one."""
    return {index: gpu["note"] for index, gpu in gpus_on_page(driver).items()}


def memory_text(driver, index: int) -> str:
    return gpus_on_page(driver).get(index, {}).get("memory") or ""


def process_rows(driver, index: int) -> list[dict[str, str]]:
    """pid, user and memory of each process row (the columns a scenario fixes)."""
    return [{k: row[k] for k in ("pid", "user", "pmem")} for row in gpus_on_page(driver)[index]["rows"]]


def record_last_hour(db: Path) -> None:
    """An hour of the demo machine's history in `db`, ending now (vram record on the stepped
    scenario clock: a second's work)."""
    env = clean_env(VRAM_SIM_TIME=None, VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(int(time.time()) - 3600))
    subprocess.run(vram_argv("record", "--simulate", "demo", "--db", str(db), "--interval", "30",
                             "--duration", "1h"), env=env, check=True, capture_output=True, timeout=60)


def browser_errors(driver) -> list[str]:
    """Script errors and CSP refusals in the browser's console (failed loads such as the
    history 404 are the page's business, said on the page)."""
    return [e["message"] for e in driver.get_log("browser")
            if e.get("source") == "javascript" or "Content Security Policy" in e["message"]
            or "Refused to" in e["message"]]


def load(driver, url: str) -> None:
    driver.get_log("browser")  # from here on, only this page's messages
    driver.get(url)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#gpus article.gpu"), "the GPUs on the page")


def test_the_page_shows_the_scenario_and_follows_its_timeline(browser, served, scenario_file):
    server = served("--simulate", str(scenario_file))
    load(browser, server.url)

    assert browser.find_element(By.ID, "simulated").is_displayed()
    assert browser.find_element(By.ID, "simulated").text == "SIMULATED"
    assert "scenario web-page" in browser.find_element(By.ID, "facts").text

    total0, total1 = parse_size("80GiB"), parse_size("40GiB")
    steps = [used_of_total(parse_size(s), total0) for s in STEPS]
    first = memory_text(browser, 0)
    assert first in steps
    assert memory_text(browser, 1) == used_of_total(parse_size("2GiB"), total1)
    assert process_rows(browser, 1) == [{"pid": "5151", "user": QUOTED_USER, "pmem": "2.0 GiB"}]
    gpus = gpus_on_page(browser)
    assert (gpus[0]["util"], gpus[0]["temperature"], gpus[0]["power"]) == ("50%", "61 °C", "200 / 300 W")
    assert gpus[1]["util"] == "0%"
    # 5151 holds memory with sm_util 0 (an idle holder); 4242 runs on a GPU busy at 50%.
    assert gpus[1]["rows"][0]["flags"].startswith("idle") and gpus[0]["rows"][0]["flags"] == ""
    assert all(row["age"].startswith("1h0") for g in gpus.values() for row in g["rows"])  # age "1h" at t=0
    # The timeline moves: the other step comes, in the bar's text and in the process row.
    other = steps[1 - steps.index(first)]
    wait(browser, lambda d: memory_text(d, 0) == other, f"GPU 0 showing {other}")
    other_size = STEPS[1 - steps.index(first)]
    wait(browser, lambda d: process_rows(d, 0) == [{"pid": "4242", "user": HOSTILE_USER,
                                                     "pmem": f"{parse_size(other_size) / GIB:.1f} GiB"}],
         "GPU 0's process row following the timeline")
    assert "live" in browser.find_element(By.ID, "freshness").text
    assert not browser_errors(browser)


def test_other_users_names_are_text_not_markup(browser, served, scenario_file):
    server = served("--simulate", str(scenario_file))
    load(browser, server.url)
    users = [row["user"] for index in (0, 1) for row in process_rows(browser, index)]
    assert users == [HOSTILE_USER, QUOTED_USER]
    assert gpus_on_page(browser)[0]["name"] == HOSTILE_GPU
    # Nothing the names spell was made into elements, and no script ran.
    assert not browser.find_elements(By.CSS_SELECTOR, "#gpus img, #gpus b, #gpus i")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - asking raises when there is none
    assert not browser_errors(browser)


def test_a_phone_sees_one_column_without_horizontal_scrolling(browser, served):
    server = served("--simulate", "demo")
    try:
        browser.set_window_size(390, 844)
        load(browser, server.url)
        scroll, client = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert scroll <= client
        # In one script run: the page replaces its cards on every reading, and an element found
        # before one is stale after it (more often on a busy machine, e.g. tests run in parallel).
        lefts = set(browser.execute_script(
            "return Array.from(document.querySelectorAll('#gpus article.gpu'))"
            ".map((card) => card.getBoundingClientRect().left)"))
        assert len(lefts) == 1  # one column
        assert not browser_errors(browser)
    finally:
        browser.set_window_size(1280, 900)


def test_without_event_source_it_polls_and_says_when_the_server_stops(browser, served, scenario_file):
    server = served("--simulate", str(scenario_file))
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                     {"source": "delete window.EventSource;"})
    try:
        load(browser, server.url)
        assert browser.execute_script("return typeof window.EventSource") == "undefined"
        wait(browser, lambda d: "polling" in d.find_element(By.ID, "freshness").text, "the page saying it polls")
        first = memory_text(browser, 0)
        wait(browser, lambda d: memory_text(d, 0) not in ("", first), "a new value by polling")
        server.stop()
        wait(browser, lambda d: "stopped answering" in d.find_element(By.ID, "freshness").text,
             "the page saying the server stopped answering")
        assert memory_text(browser, 0)  # the last reading stays on the page
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})


def test_without_a_store_the_history_says_why_in_one_line(browser, served):
    server = served("--simulate", "demo")
    load(browser, server.url)
    wait(browser, lambda d: d.find_element(By.ID, "history-note").text, "the history note")
    note = browser.find_element(By.ID, "history-note").text
    assert note.startswith("No history chart: no history: run 'vram record'")
    assert not browser.find_elements(By.CSS_SELECTOR, "#charts canvas")


def test_history_charts_from_the_store(browser, served, tmp_path):
    db = tmp_path / "history.db"
    # An hour of demo, recorded in well under a second on the stepped clock, ending now.
    record_last_hour(db)
    server = served("--simulate", "demo", "--db", str(db), "--hostname", "gpu-lab-01")
    load(browser, server.url)
    wait(browser, lambda d: d.find_element(By.ID, "host").text == "gpu-lab-01", "the host's name in the banner")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts canvas")) == 2, "two history charts")
    legend = [e.get_attribute("textContent") for e in
              browser.find_elements(By.CSS_SELECTOR, "#charts .chart:first-child .u-legend .u-series .u-label")]
    assert legend == ["time"] + [f"GPU {i}" for i in range(8)]
    assert browser.find_element(By.ID, "history-note").text.startswith("Recorded by vram record")
    browser.find_element(By.CSS_SELECTOR, '#ranges button[data-range="5m"]').click()
    assert browser.find_element(By.CSS_SELECTOR, '#ranges button[data-range="5m"]').get_attribute(
        "aria-pressed") == "true"
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts canvas")) == 2, "the 5m charts")
    assert not browser_errors(browser)
    if os.environ.get("VRAM_UPDATE_SCREENSHOT") == "1":
        browser.find_element(By.CSS_SELECTOR, '#ranges button[data-range="1h"]').click()
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts canvas")) == 2, "the 1h charts")
        height, frame = browser.execute_script("return [document.documentElement.scrollHeight, "
                                               "window.outerHeight - window.innerHeight]")
        browser.set_window_size(1280, height + frame)  # the whole page, without a scroll bar
        try:
            wait(browser, lambda d: d.execute_script("return window.innerHeight") >= height, "the taller window")
            browser.save_screenshot(str(SCREENSHOT))
        finally:
            browser.set_window_size(1280, 900)


# ------------------------------------------------------------ issue 31: unknown lists, rounding, first paint, idle

READ_FACTS = "return document.getElementById('facts').textContent"


def test_a_gpu_whose_process_list_is_unknown_says_so_never_zero(browser, served, tmp_path):
    """Issue 31 item 3: the lab's GPUs 3 and 5 (NOT_SUPPORTED, no permission) say 'processes
    unknown (REASON)', an empty GPU 'no processes', and the banner counts what it could not list."""
    from test_gpu_state_unknown_process_lists import REFUSED, UNSUPPORTED, WHY, lab_scenario

    path = tmp_path / "lab.json"
    path.write_text(json.dumps(lab_scenario()))
    server = served("--simulate", str(path))
    load(browser, server.url)
    notes = gpu_notes(browser)
    assert notes[UNSUPPORTED] == f"processes unknown ({WHY[UNSUPPORTED]})"
    assert notes[REFUSED] == f"processes unknown ({WHY[REFUSED]})"
    assert notes[2] == "no processes"
    assert notes[0] is None  # a table of its process
    assert browser.execute_script(READ_FACTS).endswith("used by 5 processes (processes unknown on 2 GPUs)")
    assert not browser_errors(browser)


# Values on the halfway point between two printed ones: Python's format rounds a tie to even (what
# `vram status` prints), JavaScript's toFixed and Math.round take it up.
TIES = {
    "name": "ties",
    "gpus": [{"memory_total": "80GiB", "memory_used": "78.25GiB", "utilization": 50, "power": 62.5,
              "power_limit": 400},
             {"memory_total": "80GiB", "memory_used": "18GiB", "utilization": 0, "power": 63.5,
              "power_limit": 400}],
    "processes": [{"pid": 7001, "user": "dave", "sm_util": 50, "gpus": {"0": "78.25GiB"}},
                  {"pid": 7002, "user": "alice", "sm_util": 0, "gpus": {"1": "18GiB"}}],
}


def test_the_page_rounds_as_vram_status_does(browser, served, tmp_path):
    """Issue 31 item 10: 78.25 GiB is 78.2 and 22.5 % is 22 on the page as in `vram status`."""
    from vramkit.render import fmt
    from vramkit.units import format_size

    path = tmp_path / "ties.json"
    path.write_text(json.dumps(TIES))
    snap = vramkit_snapshot(path)
    server = served("--simulate", str(path))
    load(browser, server.url)
    gpus = gpus_on_page(browser)
    pcts = browser.execute_script("return Array.from(document.querySelectorAll('#gpus article.gpu .pct'))"
                                  ".map((e) => e.textContent)")
    for g in snap.gpus:
        cli_pair = fmt.memory_pair(g.memory_used, g.memory_total)  # "78.2/80.0GiB"
        assert gpus[g.index]["memory"] == cli_pair.replace("/", " / ").replace("GiB", " GiB")
        assert pcts[g.index] == fmt.pct(100 * fmt.mem_fraction(g))
        assert gpus[g.index]["power"] == fmt.power(g).replace("/", " / ").replace("W", " W")
        assert gpus[g.index]["rows"][0]["pmem"] == format_size(g.processes[0].memory).replace("GiB", " GiB")
    # What those are, so that the rule itself is pinned: ties to even.
    assert (gpus[0]["memory"], pcts[1], gpus[0]["power"], gpus[1]["power"]) == (
        "78.2 / 80.0 GiB", "22%", "62 / 400 W", "64 / 400 W")
    total = sum(g.memory_used or 0 for g in snap.gpus)
    assert f"{format_size(total).replace('GiB', ' GiB')} of 160 GiB used by 2 processes" in browser.execute_script(
        READ_FACTS)


def vramkit_snapshot(path: Path):
    import vramkit

    return vramkit.snapshot(simulate=str(path))


def test_the_first_paint_has_the_reading_without_asking_again(browser, served, scenario_file):
    """Issue 31 item 10: the page as served carries the current reading, so the GPUs show with
    the event stream and the snapshot API both unreachable (blocked here)."""
    server = served("--simulate", str(scenario_file))
    # (asked at once, the snapshot API answered 503 when the reading came late: on a loaded machine
    # the first reading takes seconds, and the page and the API wait for it in their own ways)
    assert wait_for(server.has_read, timeout=WAIT, interval=0.05), "no first reading"
    with urllib.request.urlopen(server.url, timeout=WAIT) as answer:
        html = answer.read().decode()
    assert '<script type="application/json" id="reading">' in html
    assert "waiting for the first reading" not in html
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/api/v1/events*", "*/api/v1/snapshot*"]})
    try:
        load(browser, server.url)
        assert "scenario web-page" in browser.execute_script(READ_FACTS)
        assert memory_text(browser, 1) == used_of_total(parse_size("2GiB"), parse_size("40GiB"))
        assert not [e for e in browser_errors(browser) if "Content Security Policy" in e or "Refused to" in e]
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
        browser.execute_cdp_cmd("Network.disable", {})


def test_a_holder_idle_since_before_the_server_watched_shows_no_made_up_duration(browser, served):
    """Issue 31 item 10: demo's alice has held GPU 4 idle for hours; a server that has just started
    cannot know for how long, so the page says 'idle', not 'idle 0s'."""
    server = served("--simulate", "demo")
    load(browser, server.url)
    rows = {row["pid"]: row for g in gpus_on_page(browser).values() for row in g["rows"]}
    assert rows["38817"]["flags"] == "idle"


def test_the_time_axis_shows_its_date_line_whole(browser, served, tmp_path):
    """Issue 31 item 10: the history chart's time axis is as tall as its two-line labels (time over
    date): no ink on the chart canvas' bottom rows, where a cut label would end."""
    db = tmp_path / "history.db"
    record_last_hour(db)
    server = served("--simulate", "demo", "--db", str(db))
    load(browser, server.url)
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts canvas")) == 2, "two history charts")
    ink = browser.execute_script("""
      return Array.from(document.querySelectorAll('#charts canvas')).map((c) => {
        const rows = Math.max(2, Math.round(2 * window.devicePixelRatio));
        const data = c.getContext('2d').getImageData(0, c.height - rows, c.width, rows).data;
        let n = 0;
        for (let i = 3; i < data.length; i += 4) if (data[i] > 0) n += 1;
        return n;
      });""")
    labels = browser.execute_script("return Array.from(document.querySelectorAll('#charts canvas'))"
                                    ".map((c) => c.height)")
    assert ink == [0, 0], (ink, labels)


# ------------------------------------------------------------ issue 32 item 6: the page on a big server

# Before the page's own script: every event's size and type, the nodes each update adds to the
# page, and Chromium's long tasks (all counted in the browser, as the page takes them).
MEASURE = """
window.__events = [];
window.__waiters = [];
window.__added = 0;
const Source = window.EventSource;
window.EventSource = class extends Source {
  addEventListener(type, listener, options) {
    return super.addEventListener(type, (event) => {
      const began = performance.now();
      listener(event);
      const ms = performance.now() - began;
      if (type === "snapshot" || type === "delta") {
        window.__events.push({ type: type, bytes: event.data.length, ms: ms });
        for (const waiter of window.__waiters.splice(0)) waiter();
      }
    }, options);
  }
};
new MutationObserver((records) => {
  for (const r of records) for (const n of r.addedNodes) {
    window.__added += 1 + (n.getElementsByTagName ? n.getElementsByTagName('*').length : 0);
  }
}).observe(document, { childList: true, subtree: true });
window.__long = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__long.push({ start: e.startTime, duration: e.duration });
}).observe({ type: 'longtask', buffered: true });
"""
AWAIT_EVENTS = """
const [n, done] = arguments;
const check = () => { if (window.__events.length >= n) done(true); else window.__waiters.push(check); };
check();
"""
READ_MEASURES = ("return {events: window.__events.slice(), added: window.__added, long: window.__long.slice(), "
                 "now: performance.now()}")


def task_seconds(driver) -> float:
    """Chromium's main-thread task time so far (CDP Performance.getMetrics: TaskDuration)."""
    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return next(m["value"] for m in metrics if m["name"] == "TaskDuration")


@pytest.mark.slow
def test_a_big_server_s_page_gets_what_changed_and_draws_a_few_rows_per_gpu(browser, served, tmp_path):
    """8 GPUs x 200 processes, a reading every 2 s: after the whole JSON once, each update is what
    changed, at most a tenth of the whole JSON (what every update was); each GPU draws its first rows with a count of
    the rest, and an update changes the page's nodes in place: it adds fewer nodes than one GPU's
    card holds (the page drew all 1,600 rows at each one, then every card afresh: ~700 nodes).
    The main thread's time is measured and printed (-s), not judged: on a shared 2-core machine
    it says more about the neighbours than about the page (benchmarks/bench_page.py measures it
    against an empty page's, over rounds)."""
    path = tmp_path / "crowded.json"
    path.write_text(json.dumps(crowded_scenario(8, 200)))
    server = served("--simulate", str(path), "--interval", "2s")  # vram serve's own interval
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": MEASURE})
    browser.execute_cdp_cmd("Performance.enable", {})
    try:
        load(browser, server.url)
        wait(browser, lambda d: sum(e["type"] == "delta" for e in d.execute_script(READ_MEASURES)["events"]) >= 2,
             "the first deltas")
        start, busy_start = browser.execute_script(READ_MEASURES), task_seconds(browser)
        seen = len(start["events"])
        # Waited for in the page, in one command: a command is a task on the main thread, and
        # polling for the count would add to the time measured.
        browser.set_script_timeout(4 * WAIT)
        browser.execute_async_script(AWAIT_EVENTS, seen + 6)
        end, busy_end = browser.execute_script(READ_MEASURES), task_seconds(browser)
        events = end["events"][seen:]
        with urllib.request.urlopen(server.url + "api/v1/snapshot", timeout=WAIT) as answer:
            whole = len(answer.read())  # what each update was: the whole status JSON
        cards = gpus_on_page(browser)
        card_nodes = browser.execute_script("return document.querySelector('#gpus article.gpu')"
                                            ".getElementsByTagName('*').length")
        buttons = browser.execute_script("return Array.from(document.querySelectorAll('#gpus button.more'))"
                                         ".map((b) => b.textContent)")
        assert not browser_errors(browser)
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})
        browser.execute_cdp_cmd("Performance.disable", {})

    assert [e["type"] for e in events] == ["delta"] * len(events)
    assert whole > 500_000
    biggest = max(e["bytes"] for e in events)
    assert biggest <= whole / 10, (biggest, whole)
    assert len(cards) == 8 and all(len(card["rows"]) == 5 for card in cards.values())
    assert buttons == ["+ 195 more (show all 200)"] * 8
    added = (end["added"] - start["added"]) / len(events)
    assert added < card_nodes, (added, card_nodes)
    window_ms = end["now"] - start["now"]
    long_tasks = [t["duration"] for t in end["long"] if t["start"] >= start["now"]]
    print(f"\npage at 8 x 200: {len(events)} updates in {window_ms / 1000:.1f} s, bytes per update "
          f"{statistics.median(e['bytes'] for e in events):.0f} median / {biggest} max against {whole} whole "
          f"({100 * biggest / whole:.1f} %); nodes added per update {added:.0f}; the page's script per update "
          f"{statistics.median(e['ms'] for e in events):.1f} ms median; long tasks over 50 ms: "
          f"{len(long_tasks)} (longest {max(long_tasks, default=0):.0f} ms); main thread busy "
          f"{100 * (busy_end - busy_start) / (window_ms / 1000):.1f} % of the time")


@pytest.mark.slow
def test_sorting_filtering_and_showing_every_process_of_a_gpu(browser, served, tmp_path):
    """The page's own controls on the big server: by SM %, one user's processes, and "show all"."""
    data = crowded_scenario(2, 30)
    path = tmp_path / "crowded.json"
    path.write_text(json.dumps(data))
    server = served("--simulate", str(path))
    load(browser, server.url)
    assert [len(g["rows"]) for g in gpus_on_page(browser).values()] == [5, 5]
    heads = browser.execute_script("return Array.from(document.querySelectorAll('#gpus article.gpu:first-child th'))"
                                   ".map((th) => th.textContent)")
    assert heads == ["pid", "user", "process", "memory", "SM", "CPU", "age", ""]
    Select(browser.find_element(By.ID, "user")).select_by_value("user03")
    mine = sorted(str(p["pid"]) for p in data["processes"] if p["user"] == "user03" and "0" in p["gpus"])
    wait(browser, lambda d: sorted(r["pid"] for r in gpus_on_page(d)[0]["rows"]) == mine, "user03's processes")
    Select(browser.find_element(By.ID, "user")).select_by_value("")
    Select(browser.find_element(By.ID, "sort")).select_by_value("pid")
    first = sorted(str(p["pid"]) for p in data["processes"] if "0" in p["gpus"])
    wait(browser, lambda d: [r["pid"] for r in gpus_on_page(d)[0]["rows"]] == first[:5], "GPU 0 by pid")
    # Found and clicked in one step of the page's own loop: an update may redraw the button between a
    # find_element and its click (a stale element).
    browser.execute_script("""document.querySelector('#gpus button.more[data-gpu="0"]').click()""")
    wait(browser, lambda d: [r["pid"] for r in gpus_on_page(d)[0]["rows"]] == first, "all of GPU 0")
    # Kept across updates: the next reading redraws GPU 0 whole, by pid.
    said = browser.find_element(By.ID, "freshness").text
    wait(browser, lambda d: d.find_element(By.ID, "freshness").text != said, "the next reading")
    assert [r["pid"] for r in gpus_on_page(browser)[0]["rows"]] == first
    assert len(gpus_on_page(browser)[1]["rows"]) == 5
    strip = browser.execute_script("return Array.from(document.querySelectorAll('#strip a.chip'))"
                                   ".map((a) => [a.getAttribute('href'), a.textContent])")
    assert [href for href, _ in strip] == ["#gpu-0", "#gpu-1"]
    assert not browser_errors(browser)


@pytest.mark.slow
def test_a_busy_gpu_is_not_drawn_as_an_alarm_and_the_strip_fits_a_phone(browser, served, tmp_path):
    """Utilization at 90 % is a GPU doing its job: only memory nearly full is drawn in the alarm
    colour. On a phone the strip of 8 GPUs and the process tables stay within the screen."""
    path = tmp_path / "crowded.json"
    path.write_text(json.dumps(crowded_scenario(8, 20)))
    server = served("--simulate", str(path))
    try:
        browser.set_window_size(390, 844)
        load(browser, server.url)
        assert browser.execute_script("return document.querySelectorAll('#gpus .utilization .bar.high').length") == 0
        assert gpus_on_page(browser)[0]["util"] == "90%"
        scroll, client = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert scroll <= client
        chips = browser.execute_script(
            "return Array.from(document.querySelectorAll('#strip a.chip')).map((c) => {"
            " const r = c.getBoundingClientRect(); return [r.left, r.right, r.top]; })")
        assert len(chips) == 8 and all(0 <= left and right <= client for left, right, _ in chips)
        assert len({top for _, _, top in chips}) <= 2  # two lines at most
        header_heights = browser.execute_script(
            "return Array.from(document.querySelectorAll('#gpus th')).map((th) => th.getBoundingClientRect().height)")
        assert max(header_heights) < 2 * min(h for h in header_heights if h > 0)  # no header wraps
        assert not browser_errors(browser)
    finally:
        browser.set_window_size(1280, 900)
