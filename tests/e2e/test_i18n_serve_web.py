"""The web page of `vram serve` in its reader's language (issue 34): the request's Accept-Language
(q-values respected; zh, zh-CN, zh-Hans -> zh_CN), else the server's own; the page's words come
through the gettext catalog (serve/page_words.py), made once per language. In the real headless
Chromium (test_serve_web's server and helpers): a browser asking for zh-CN reads a Chinese page
with no English left but names, numbers, units and commands; one asking for en-US the English
page as before. Skipped with test_serve_web where chromium, chromedriver or selenium is missing
(the tests without a browser run anyway)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import assert_one_line_error, chromium_env, chromium_sandbox_args, run_vram, zh_env

from vramkit import i18n
from vramkit.serve import page_words

WEB = Path(page_words.__file__).parent / "web"
ZH = "zh_CN"


# ------------------------------------------------------------ the words, without a browser

def test_every_word_of_the_page_is_in_the_table_and_translated():
    """index.html's {{markers}} and app.js's t("...") / tn("...") are the table's English, and the
    zh_CN catalog translates each (a word added to the page without its entry fails here)."""
    english, chinese = page_words.words(i18n.ENGLISH), page_words.words(ZH)
    markers = page_words.MARKER.findall((WEB / "index.html").read_text())
    script = (WEB / "app.js").read_text()
    # t("..."), and t(NAMES[...]) for the words of a table in app.js
    looked_up = re.findall(r'\bt\("((?:[^"\\]|\\.)*)"', script)
    named = re.search(r"FIELD_NAMES = \{([^}]*)\}", script)
    assert named
    looked_up += re.findall(r':\s*"([^"]*)"', named.group(1))
    counted = re.findall(r'\btn\("((?:[^"\\]|\\.)*)",\s*"((?:[^"\\]|\\.)*)"', script)
    assert len(markers) >= 10 and len(looked_up) >= 40 and len(counted) >= 4
    for word in markers + looked_up:
        assert word in english.words, f"{word!r} is not in page_words' table"
        assert chinese.words[word] != word, f"{word!r} has no zh_CN translation"
    for singular, plural in counted:
        assert english.english_plurals.get(singular) == plural, f"{singular!r} is not in page_words' table"
        assert chinese.plurals[singular] != (singular, plural), f"{singular!r} has no zh_CN translation"
    # What the server says in its JSON and the page shows translated.
    assert chinese.words[page_words.NO_HISTORY] != page_words.NO_HISTORY


def test_a_reading_s_reasons_come_translated_with_the_page():
    """N/A reasons and GPU errors are stored in English (the JSON's); the page gets the catalog's
    words for those of its reading. NVML's own error names are not in it: they stay as NVML said."""
    lost = "GPU is lost (fell off the bus or needs a reset)"
    block = page_words.reasons(ZH, {"not supported", lost, "NVML error 999", "</script><b>"}).decode()
    found = re.fullmatch(r'<script type="application/json" id="reasons">(.*)</script>\n', block)
    assert found and "<" not in found.group(1)
    said = json.loads(found.group(1))
    assert said == {"not supported": "不支持", lost: i18n.translator(ZH).gettext(lost)} and said[lost] != lost
    assert page_words.reasons(i18n.ENGLISH, {"not supported", lost}) == b""


@pytest.mark.parametrize(("header", "language"), [
    ("zh-CN,zh;q=0.9,en;q=0.8", ZH), ("zh", ZH), ("zh-Hans", ZH), ("zh-Hans-CN", ZH), ("ZH_cn", ZH),
    ("en-US,en;q=0.9", "en"), ("fr-FR, zh;q=0.5, en;q=0.4", ZH), ("en;q=0.3, zh-Hans", ZH),
    ("zh-CN;q=0.2, en-GB;q=0.8", "en"), ("zh-CN;q=0, en", "en"), ("de, fr;q=0.5, en;q=0.1", "en"),
])
def test_the_reader_s_language_comes_from_accept_language(header, language):
    assert page_words.reader_language(header) == language


@pytest.mark.parametrize("header", [None, "", "fr-FR", "zh-TW", "zh-CN;q=0", "*", "zh-CN;q=abc", ",,;q=1"])
def test_without_a_language_vram_has_the_page_speaks_the_server_s(monkeypatch, header):
    """Traditional Chinese has no catalog (a Simplified one is not theirs): the server's setting."""
    for server in ("en", ZH):
        monkeypatch.setenv("VRAM_LANG", server)
        i18n.reset()
        assert page_words.reader_language(header) == server


def test_the_page_is_made_once_per_language():
    zh = page_words.page(ZH)
    assert page_words.page(ZH) is zh and page_words.words(ZH) is page_words.words(ZH)
    text = zh.decode()
    assert '<html lang="zh-CN">' in text and "{{" not in text
    assert '<h2 id="history-title">历史</h2>' in text
    # The footer's links and code are the template's markup, moved by the translation, not escaped.
    assert '<code>vram serve</code> 的只读视图' in text and '<a href="/metrics">/metrics</a>' in text
    assert '<noscript><p>本页面需要 JavaScript 才能显示 GPU；<a href="/api/v1/snapshot">' in text
    words = json.loads(re.search(r'<script type="application/json" id="words">(.*?)</script>', text).group(1))
    assert words["words"]["History"] == "历史" and words["plurals"]["{n} GPU"] == ["{n} 块 GPU"] * 2


def test_the_english_page_is_the_template_as_it_was():
    """English: no words block, every marker its own English: the page before issue 34 (but for
    two line breaks inside the footer's sentences, now one line each)."""
    text = page_words.page(i18n.ENGLISH).decode()
    assert '<html lang="en">' in text and 'id="words"' not in text and "{{" not in text
    assert ('<p>Read-only view of <code>vram serve</code>. The same data: <a href="/api/v1/snapshot">'
            '/api/v1/snapshot</a> · <a href="/metrics">/metrics</a></p>') in text
    assert "<label>processes by <select" in text and "<label>of <select" in text


@pytest.mark.slow
def test_the_server_answers_each_reader_in_theirs(served):
    server = served("--simulate", "demo")
    zh_status, zh, zh_headers = server.get("/", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    en_status, en, en_headers = server.get("/", headers={"Accept-Language": "en-US,en;q=0.9"})
    assert (zh_status, en_status) == (200, 200)
    assert '<html lang="zh-CN">' in zh and '<html lang="en">' in en
    for headers in (zh_headers, en_headers):
        assert "Accept-Language" in headers["Vary"]
        assert "script-src 'self'" in headers["Content-Security-Policy"]  # the words are data, not script
    # The API stays English whatever the reader's language.
    status, body, _headers = server.get("/api/v1/history", headers={"Accept-Language": "zh-CN"})
    assert status == 404 and json.loads(body)["error"] == page_words.NO_HISTORY
    # A Chinese server: Chinese for a browser that asks for no language vram has, English for one that asks for it.
    zh_server = served("--simulate", "demo", env={"VRAM_LANG": ZH})
    assert '<html lang="zh-CN">' in zh_server.get("/", headers={"Accept-Language": "fr"})[1]
    assert '<html lang="en">' in zh_server.get("/", headers={"Accept-Language": "en"})[1]


def test_a_chinese_server_s_api_errors_stay_english(served, tmp_path):
    """The history store's errors are worded where they are raised: a Chinese server answered its
    JSON API's 503 in Chinese. The API speaks English whatever the server's language."""
    not_a_store = tmp_path / "history.db"
    not_a_store.write_bytes(b"this is no SQLite file, just text\n" * 64)
    errors = {}
    for language in (ZH, "en"):
        server = served("--simulate", "demo", "--db", str(not_a_store), env={"VRAM_LANG": language})
        status, body, _headers = server.get("/api/v1/history", headers={"Accept-Language": "zh-CN"})
        assert status == 503
        errors[language] = json.loads(body)["error"]
    assert errors[ZH] == errors["en"] and errors["en"].isascii(), errors


# ------------------------------------------------------------ what the server says to its operator

def test_a_chinese_server_s_web_config_errors_are_chinese(tmp_path):
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users:\n  alice: plain-text-password\n")
    zh = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--web-config", str(path), env=zh_env())
    # the option, the file and its key, what is wrong: each after a full-width colon (the key as written)
    line = assert_one_line_error(zh, 2, f"--web-config：{path}: basic_auth_users.alice：不是 bcrypt 哈希",
                                 "htpasswd -nBC 10")
    assert "not a bcrypt hash" not in line
    path.chmod(0o666)
    zh = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--web-config", str(path), env=zh_env())
    assert_one_line_error(zh, 2, f"--web-config：{path}：{path} 所有用户都可写：chmod o-w {path}")


def test_an_internal_error_is_said_in_the_server_s_language(monkeypatch, capsys):
    from vramkit.machine import open_machine
    from vramkit.serve.http import VramHTTPServer
    from vramkit.serve.service import Options, Service

    monkeypatch.setenv("VRAM_LANG", ZH)
    i18n.reset()
    server = VramHTTPServer(("127.0.0.1", 0), Service(open_machine("demo"), Options(interval=60)))
    try:
        server.say_once("RuntimeError: a bug")
    finally:
        server.server_close()
    assert capsys.readouterr().err == "vram serve：应答请求时出现内部错误：RuntimeError: a bug\n"


# ------------------------------------------------------------ the page in a real browser

try:
    from selenium.webdriver.common.by import By
    from test_serve_web import (  # noqa: F401 - scenario_file and served: fixtures, used by name
        CHROMEDRIVER,
        CHROMIUM,
        browser_errors,
        gpu_notes,
        gpus_on_page,
        load,
        record_last_hour,
        scenario_file,
        served,
        wait,
        webdriver,
    )
    BROWSER = None
except pytest.skip.Exception as e:  # no chromium, chromedriver or selenium: said by test_serve_web
    BROWSER = str(e)

needs_browser = pytest.mark.skipif(BROWSER is not None, reason=str(BROWSER))


@pytest.fixture(scope="module")
def zh_browser(tmp_path_factory):
    """Chromium set to Chinese as a Chinese user's is: its UI language and the languages it asks for."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900",
                "--lang=zh-CN", *chromium_sandbox_args()):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"intl.accept_languages": "zh-CN,zh"})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(CHROMEDRIVER, env=chromium_env(tmp_path_factory))
    driver = webdriver.Chrome(service=service, options=options)
    yield driver
    driver.quit()


# Every text a reader meets: what is shown, the tooltips, what a screen reader says, the tab's title.
READ_TEXTS = """
const texts = [document.body.innerText, document.title];
for (const e of document.querySelectorAll('[title]')) texts.push(e.getAttribute('title'));
for (const e of document.querySelectorAll('[aria-label]')) texts.push(e.getAttribute('aria-label'));
for (const e of document.querySelectorAll('option')) texts.push(e.textContent);
return texts;
"""
READ_HEADS = ("return Array.from(document.querySelectorAll("
              "'#gpus article.gpu:first-child th')).map((h) => h.textContent)")
# English the Chinese page keeps: names of things (GPU, SM, CPU, CUDA, MIG, PID), units, and the
# commands and paths it names.
KEPT = {"GPU", "SM", "CPU", "CUDA", "MIG", "PID", "GiB", "MiB", "HTTP", "JSON", "JavaScript", "vram", "serve",
        "record", "db", "api", "snapshot", "metrics"}


def untranslated(driver, server_url: str) -> list[str]:
    """English words on the page that are not data (host, GPU, user, process and scenario names,
    versions: the status JSON's own) and not KEPT. The driver's N/A reasons are not data here:
    stored in English, they are shown in the reader's words."""
    with urllib.request.urlopen(server_url + "api/v1/snapshot", timeout=20) as answer:
        data = json.loads(answer.read())
    names = {data.get("hostname") or "", data.get("scenario") or "", data.get("driver_version") or ""}
    for gpu in data["gpus"]:
        names.add(gpu.get("name") or "")
        for p in gpu.get("processes") or ():
            names |= {str(p.get("user") or ""), str(p.get("name") or "")}
    left = []
    for text in driver.execute_script(READ_TEXTS):
        for name in sorted(names - {""}, key=len, reverse=True):
            text = text.replace(name, " ")
        left += [w for w in re.findall(r"[A-Za-z]{2,}", text) if w not in KEPT]
    return left


@needs_browser
@pytest.mark.slow
def test_a_chinese_browser_reads_the_page_in_chinese(zh_browser, served, tmp_path):
    db = tmp_path / "history.db"
    record_last_hour(db)
    server = served("--simulate", "demo", "--db", str(db))  # an English server (the suite's VRAM_LANG=en)
    load(zh_browser, server.url)
    wait(zh_browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts canvas")) == 2, "two history charts")
    wait(zh_browser, lambda d: "实时" in d.find_element(By.ID, "freshness").text, "the live reading's line")
    assert zh_browser.execute_script("return document.documentElement.lang") == "zh-CN"
    assert zh_browser.find_element(By.ID, "history-title").text == "历史"
    assert zh_browser.find_element(By.ID, "simulated").text == "模拟"
    heads = zh_browser.execute_script(READ_HEADS)
    assert heads == ["PID", "用户", "进程", "显存", "SM", "CPU", "运行时长", ""]
    facts = zh_browser.find_element(By.ID, "facts").text
    assert "场景 demo，不是真实 GPU" in facts and "8 块 GPU" in facts and "个进程占用" in facts
    rows = {row["pid"]: row for g in gpus_on_page(zh_browser).values() for row in g["rows"]}
    assert rows["38817"]["flags"].startswith("空闲 ")  # demo's alice, idle for as long as the history says
    legend = [e.get_attribute("textContent") for e in
              zh_browser.find_elements(By.CSS_SELECTOR, "#charts .chart:first-child .u-legend .u-series .u-label")]
    assert legend[0] == "时间"
    assert zh_browser.find_element(By.ID, "history-note").text.startswith("由 vram record 记录")
    assert untranslated(zh_browser, server.url) == []
    assert not browser_errors(zh_browser)

    # Without a store, the server's English reason (the API's) is shown in Chinese.
    bare = served("--simulate", "demo")
    load(zh_browser, bare.url)
    wait(zh_browser, lambda d: d.find_element(By.ID, "history-note").text, "the history note")
    assert zh_browser.find_element(By.ID, "history-note").text == (
        "无历史图表：没有历史：请运行 'vram record'，或用 vram serve --db 指定其数据库。")
    assert untranslated(zh_browser, bare.url) == []


@needs_browser
def test_the_same_browser_asking_for_english_gets_the_english_page(zh_browser, served, scenario_file):
    """The request's Accept-Language decides, not the browser's UI: en-US is the page as before."""
    server = served("--simulate", str(scenario_file))
    zh_browser.execute_cdp_cmd("Network.enable", {})
    zh_browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Accept-Language": "en-US,en;q=0.9"}})
    try:
        load(zh_browser, server.url)
        wait(zh_browser, lambda d: "live" in d.find_element(By.ID, "freshness").text, "the live reading's line")
        assert zh_browser.execute_script("return document.documentElement.lang") == "en"
        assert zh_browser.find_element(By.ID, "history-title").text == "History"
        assert zh_browser.find_element(By.ID, "simulated").text == "SIMULATED"
        heads = zh_browser.execute_script(READ_HEADS)
        assert heads == ["pid", "user", "process", "memory", "SM", "CPU", "age", ""]
        assert "scenario web-page, not real GPUs" in zh_browser.find_element(By.ID, "facts").text
        assert "2 GPUs" in zh_browser.find_element(By.ID, "facts").text
        assert not browser_errors(zh_browser)
    finally:
        zh_browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
        zh_browser.execute_cdp_cmd("Network.disable", {})


@needs_browser
def test_the_driver_s_reasons_are_in_the_reader_s_words(zh_browser, served, tmp_path):
    """The lab's GPUs whose processes the driver would not list: the reason (stored in English,
    the JSON's) in Chinese on a Chinese page, as `vram status` says it."""
    from test_gpu_state_unknown_process_lists import REFUSED, UNSUPPORTED, lab_scenario

    path = tmp_path / "lab.json"
    path.write_text(json.dumps(lab_scenario()))
    server = served("--simulate", str(path))
    load(zh_browser, server.url)
    notes = gpu_notes(zh_browser)
    assert notes[UNSUPPORTED] == "进程未知（不支持）" and notes[REFUSED] == "进程未知（无权限）"
    assert notes[2] == "无进程"
    assert zh_browser.find_element(By.ID, "facts").text.endswith("由 5 个进程占用（2 块 GPU 的进程未知）")
    assert untranslated(zh_browser, server.url) == []
    assert not browser_errors(zh_browser)
    try:  # the Chinese page on a phone: one column, nothing wider than the screen
        zh_browser.set_window_size(390, 844)
        load(zh_browser, server.url)
        scroll, client = zh_browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert scroll <= client
    finally:
        zh_browser.set_window_size(1280, 900)
