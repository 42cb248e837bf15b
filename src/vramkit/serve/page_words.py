"""The words of `vram serve`'s web page, in its reader's language.

Every text the page shows is in `_table` (pgettext context "page", so that the page's "memory" or
"user" is translated apart from a CLI column's), which the catalog's extractor reads like any
other message. The language is the request's (Accept-Language, its q-values respected), else the
server's own (i18n.language(): VRAM_LANG, ui.language, LANG). For each language the page is made
once (`page`): index.html's {{English}} markers replaced by their translation (escaped; a
sentence's {placeholders} are the few links and code in MARKUP), <html lang> set, and the
translations app.js looks up (`t("...")`) put in as a JSON data block (no script runs from it,
the CSP allows it, as the reading's block beside it). English needs no block: app.js falls back
to the English it holds.

The driver's N/A reasons are stored in English (the JSON's `na`); the page gets the translations
of the current reading's with the reading (`reasons`: a second block, made once per reading).

What stays English: the JSON API and /metrics (programs read them), the data the page shows
(host, GPU, user and process names, NVML's own error names, a history store's error), numbers,
units and durations (as `vram status` prints them: 12m05s, GiB, W, °C).
"""

from __future__ import annotations

import functools
import gettext
import html
import json
import re
from collections.abc import Iterable
from importlib import resources

from .. import i18n
from ..i18n import N_

# What the API answers where the server has no history; the page shows it in its reader's language.
NO_HISTORY = N_("no history: run 'vram record', or name its database with vram serve --db")
# Why another host (vram serve --hosts) is down, by serve/hosts.py's kind: the API's English sentence,
# which the page shows in its reader's language (app.js' DOWN holds the same).
HOST_DOWN = {
    "slow": N_("did not answer within {detail}"),
    "too-big": N_("answered more than {detail}: not read"),
    "unreachable": N_("cannot reach it: {detail}"),
    "protocol": N_("did not answer in HTTP: {detail}"),
    "bad-body": N_("answered, but its answer cannot be read: {detail}"),
    "status": N_("answered HTTP {detail}"),
    "not-json": N_("answered something that is not vram serve's JSON"),
    "waiting": N_("not read yet"),
}
# The markup a sentence of index.html holds as a {placeholder}: a translation moves it, never changes it.
MARKUP = {
    "command": "<code>vram serve</code>",
    "snapshot": '<a href="/api/v1/snapshot">/api/v1/snapshot</a>',
    "metrics": '<a href="/metrics">/metrics</a>',
}
MARKER = re.compile(r"\{\{((?:[^{}]|\{\w+\})+)\}\}")  # {{English}}, which may hold {name} placeholders
PLACEHOLDER = re.compile(r"\{(\w+)\}")
HTML_LANG = '<html lang="en">'
MAX_LANGUAGES = 64  # entries of an Accept-Language header looked at (the head is bounded anyway)


class Words:
    """What `_table` asks for, answered by one catalog: each page word's translation by its
    English, and each plural's two forms (one, other: the rule of English and Chinese, the
    catalogs there are) by its English singular."""

    def __init__(self, catalog: gettext.NullTranslations):
        self.catalog = catalog
        self.words: dict[str, str] = {}
        self.plurals: dict[str, tuple[str, str]] = {}
        self.english_plurals: dict[str, str] = {}

    def pgettext(self, context: str, message: str) -> None:
        self.words[message] = self.catalog.pgettext(context, message)

    def ngettext(self, singular: str, plural: str, n: int) -> None:
        """n: a count that takes the plural form (the table's 2)."""
        self.english_plurals[singular] = plural
        self.plurals[singular] = (self.catalog.ngettext(singular, plural, 1),
                                  self.catalog.ngettext(singular, plural, n))

    def gettext(self, message: str) -> None:
        """A message the server sends in its JSON (in English), which the page shows translated."""
        self.words[message] = self.catalog.gettext(message)


def _table(w: Words) -> None:
    """Every text of index.html and app.js. A new one: here, then `make i18n`."""
    # Translators: the label on a simulated machine's page (vram serve --simulate), in capitals in English
    w.pgettext("page", "SIMULATED")
    # Translators: what the strip of small per-GPU chips under the banner is (read by screen readers)
    w.pgettext("page", "GPUs at a glance: memory · utilization")
    # Translators: what the section of the GPUs' cards is (read by screen readers)
    w.pgettext("page", "GPUs")
    # Translators: the label before the menu choosing the order of the process tables ("processes by
    # [memory]"); it labels that menu alone
    w.pgettext("page", "processes by")
    # Translators: the label before the menu choosing whose processes are shown ("of [all users]",
    # after "processes by [memory]"); it labels that menu alone: a word such as "user" will do
    w.pgettext("page", "of")
    # Translators: a sort order and a column of the process table: GPU memory held
    w.pgettext("page", "memory")
    # Translators: a sort order and a column of the process table: the process's user (owner)
    w.pgettext("page", "user")
    # Translators: a sort order and a column of the process table: how long the process has run
    w.pgettext("page", "age")
    # Translators: a sort order and a column of the process table: the process id
    w.pgettext("page", "pid")
    # Translators: a column of the process table: the program's name
    w.pgettext("page", "process")
    w.pgettext("page", "all users")
    w.pgettext("page", "History")
    # Translators: what the 5m / 1h / 24h / 7d buttons choose (read by screen readers)
    w.pgettext("page", "time range")
    # Translators: the page's footer; {command} is "vram serve", {snapshot} and {metrics} are links
    w.pgettext("page", "Read-only view of {command}. The same data: {snapshot} · {metrics}")
    # Translators: shown where the browser runs no JavaScript; {snapshot} is a link to /api/v1/snapshot
    w.pgettext("page", "This page needs JavaScript to show the GPUs; {snapshot} has the same data as JSON.")

    # The banner
    w.pgettext("page", "simulated machine (scenario {scenario}), not real GPUs")
    # Translators: the browser tab's title of a simulated machine's page
    w.pgettext("page", "SIMULATED {host} · vram")
    w.pgettext("page", "scenario {scenario}, not real GPUs")
    # Translators: the NVIDIA driver's version, in the banner
    w.pgettext("page", "driver {version}")
    w.ngettext("{n} GPU", "{n} GPUs", 2)
    # Translators: the banner's total, e.g. "216 GiB of 320 GiB used by 5 processes"
    w.ngettext("{used} of {total} used by {n} process", "{used} of {total} used by {n} processes", 2)
    # Translators: {held} is the total above ("216 GiB of 320 GiB used by 5 processes"), followed by
    # on how many GPUs the driver would not list the processes
    w.ngettext("{held} (processes unknown on {n} GPU)", "{held} (processes unknown on {n} GPUs)", 2)
    # Translators: the time of the last reading before there is one ("Last reading: none yet")
    w.pgettext("page", "none yet")
    w.pgettext("page", "Connecting…")
    # Translators: {time} and {when} are times of day (14:41:44)
    w.pgettext("page", "The server stopped answering at {time}. Last reading: {when}. Retrying…")
    # Translators: {duration} is e.g. 35s or 2m05s, {when} a time of day (14:41:44)
    w.pgettext("page", "No new reading for {duration}: the server answers, but its last reading is from {when}.")
    # Translators: {when} is a time of day (14:41:44); "live": the page follows the server's readings as they come
    w.pgettext("page", "Last reading {when} · live")
    w.pgettext("page", "Last reading {when} · polling every {seconds} s")

    # The strip of chips
    # Translators: a chip of the strip, for a GPU that fell off the bus
    w.pgettext("page", "lost")
    # Translators: a chip's tooltip: "GPU 3: memory 70.6 / 80.0 GiB, utilization 95%"
    w.pgettext("page", "GPU {index}: memory {memory}, utilization {utilization}")

    # A GPU's card
    w.pgettext("page", "GPU lost: it fell off the bus; no reading")
    # Translators: the short label of a GPU's memory bar
    w.pgettext("page", "mem")
    # Translators: the short label of a GPU's utilization bar
    w.pgettext("page", "util")
    # Translators: a tooltip on a value the driver did not give: "temperature: not supported"
    w.pgettext("page", "{field}: {reason}")
    w.pgettext("page", "temperature")
    # Translators: a GPU's power draw (a tooltip's name for it)
    w.pgettext("page", "power")
    # Translators: the share of time the GPU's memory was being read or written
    w.pgettext("page", "memory busy")
    # Translators: the share of time the GPU's memory was being read or written: "mem busy 12%"
    w.pgettext("page", "mem busy {percent}%")
    w.ngettext("MIG: {n} instance", "MIG: {n} instances", 2)
    # Translators: {reason} is the driver's, in English (e.g. "not supported")
    w.pgettext("page", "processes unknown ({reason})")
    w.pgettext("page", "no processes")
    # Translators: the user filter leaves none of a GPU's processes: {n} of other users are hidden
    w.pgettext("page", "no processes of {user} ({n} of others)")
    # Translators: a flag of a process holding memory while its GPU share is 0
    w.pgettext("page", "idle")
    # Translators: {duration} is e.g. 2h05m
    w.pgettext("page", "idle {duration}")
    # Translators: idle at least that long (since the server started watching); {duration} is e.g. 5m00s
    w.pgettext("page", "idle ≥ {duration}")
    w.pgettext("page", "idle since before vram serve started watching it")
    # Translators: a flag of a zombie (defunct) process
    w.pgettext("page", "zombie")
    # Translators: a flag of an orphan process (its parent is gone)
    w.pgettext("page", "orphan")
    # Translators: the button under a process table showing all its rows: "+ 195 more (show all 200)"
    w.pgettext("page", "+ {more} more (show all {all})")
    # Translators: the same button once every row is shown
    w.pgettext("page", "show the first {n}")

    # History
    # Translators: {range} is 5m, 1h, 24h or 7d
    w.pgettext("page", "Nothing recorded in the last {range}.")
    w.pgettext("page", "No history chart: the chart library did not load.")
    # Translators: {duration} is the width of one point of the chart, e.g. 12s or 2m24s
    w.pgettext("page", "Recorded by vram record: highest memory and utilization per {duration}.")
    # Translators: {why} is the server's reason, e.g. "no history: run 'vram record', ..."
    w.pgettext("page", "No history chart: {why}.")
    w.pgettext("page", "the server answered HTTP {status}")
    w.pgettext("page", "No history chart: the server did not answer.")
    w.pgettext("page", "Memory used per GPU (GiB)")
    w.pgettext("page", "Utilization per GPU (%)")
    # Translators: the legend's name of the chart's time axis
    w.pgettext("page", "time")
    w.gettext(NO_HISTORY)

    # The other hosts (vram serve --hosts)
    # Translators: what the part of the page showing the other servers is (read by screen readers)
    w.pgettext("page", "Other hosts")
    # Translators: another server's part of the page, before this server has asked it for its reading
    w.pgettext("page", "Not read yet.")
    # Translators: another server that did not answer; {why} is one of the reasons below ("cannot reach it:
    # Connection refused"), {when} a time of day (14:41:44)
    w.pgettext("page", "Down: {why}. Last seen at {when}.")
    w.pgettext("page", "Down: {why}. Not seen since this server started.")
    for why in HOST_DOWN.values():  # sent in English by /api/v1/hosts
        w.gettext(why)


@functools.lru_cache(maxsize=len(i18n.CATALOGS) + 1)
def words(language: str) -> Words:
    """The page's words in `language` (a key of i18n.CATALOGS, or English), collected once."""
    found = Words(i18n.translator(language))
    _table(found)
    return found


def html_lang(language: str) -> str:
    """The BCP 47 tag of a language as i18n names it: zh_CN -> zh-CN."""
    return language.replace("_", "-")


@functools.lru_cache(maxsize=len(i18n.CATALOGS) + 1)
def page(language: str) -> bytes:
    """index.html in `language`, with the translations app.js looks up (made once per language)."""
    template = resources.files("vramkit.serve").joinpath("web").joinpath("index.html").read_text("utf-8")
    found = words(language)

    def translated(marker: re.Match[str]) -> str:
        english = marker.group(1)
        text = html.escape(found.words.get(english, english))
        return PLACEHOLDER.sub(lambda p: MARKUP.get(p.group(1), p.group(0)), text)

    text = MARKER.sub(translated, template).replace(HTML_LANG, f'<html lang="{html_lang(language)}">', 1)
    shown = {english: said for english, said in found.words.items() if said != english}
    plurals = {one: list(forms) for one, forms in found.plurals.items()
               if forms != (one, found.english_plurals[one])}
    if shown or plurals:
        data = json.dumps({"words": shown, "plurals": plurals}, ensure_ascii=False, separators=(",", ":"))
        block = '<script type="application/json" id="words">' + data.replace("<", "\\u003c") + "</script>\n"
        text = text.replace("</body>", block + "</body>", 1)
    return text.encode("utf-8")


def reasons(language: str, texts: Iterable[str]) -> bytes:
    """The translations of a reading's N/A reasons and GPU errors (stored in English, marked N_()
    where the driver layers write them), as a JSON data block for the page; empty where there are
    none (English, or texts the catalog does not have: NVML's own error names)."""
    catalog = words(language).catalog
    said = {text: catalog.gettext(text) for text in texts}
    said = {text: translated for text, translated in said.items() if translated != text}
    if not said:
        return b""
    data = json.dumps(said, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return ('<script type="application/json" id="reasons">' + data + "</script>\n").encode("utf-8")


def reader_language(accept_language: str | None) -> str:
    """The page's language for a request: the first language of its Accept-Language header (by
    q-value, then order) that vram has a catalog for or that is English; else the server's own."""
    wanted: list[tuple[float, int, str]] = []
    for order, item in enumerate((accept_language or "").split(",", MAX_LANGUAGES)[:MAX_LANGUAGES]):
        tag, _sep, params = item.partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _eq, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip()[:8])
                except ValueError:
                    q = 0.0
        if q > 0 and tag.strip():
            wanted.append((-q, order, tag.strip()))
    for _q, _order, tag in sorted(wanted):
        catalog = i18n.catalog_language(tag)
        if catalog is not None:
            return catalog
        if tag.split("-", 1)[0].lower() == "en":
            return i18n.ENGLISH
    return i18n.language()
