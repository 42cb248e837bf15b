"""The words vram prints, in the reader's language: gettext, domain "vramkit".

Mark a message where it is written and translate it where it is used:
    _("no GPU {index}").format(index=3)      a whole sentence, named placeholders (a translator may
                                             reorder them; never build a sentence from pieces)
    ngettext("{n} GPU", "{n} GPUs", n).format(n=n)
    N_("...")                                only marks (a module-level table); _() it when shown
    N_plural("{n} GPU", "{n} GPUs")          the same for a plural pair: ngettext(*pair, n)
    pgettext("column", "free")               a short word whose sense the context names

The language, first found: $VRAM_LANG; the config's `ui.language` ($VRAM_UI_LANGUAGE, your file,
the machine's) unless "auto"; then $LANGUAGE, $LC_ALL, $LC_MESSAGES, $LANG as gettext reads them.
Shared servers often run LANG=C.UTF-8 or en_US.UTF-8 for everyone, hence the first two. No locale
needs to be generated on the machine: only the catalog is read (locale/<lang>/LC_MESSAGES/vramkit.mo
beside this file, or under $VRAM_LOCALEDIR for a translator trying a catalog).

Kept in English on purpose: JSON and CSV keys, metric names and labels, flags and command names,
units, the PyTorch messages doctor matches, the audit log and the history database.

The catalog is read on the first message translated, not at import, and then only indexed (Catalog:
each message decoded when asked for); `--json`/`--csv` never read it (force_english: cli/main.py).
The config reader is imported for ui.language only when a config file mentions it (config_paths).
Nothing here imports more than the standard library's gettext (argparse imports it anyway).
docs/i18n.md says it for users and translators.
"""

from __future__ import annotations

import _thread
import gettext as _gettext
import os
from collections.abc import Callable, Iterable, Mapping

DOMAIN = "vramkit"
# os.path, not pathlib: the shim and `vram status` import this module and never need pathlib
LOCALE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "locale")
ENGLISH = "en"
# The catalogs that exist, and the spellings of a language each one answers (lower case, '-' as '_',
# without an encoding or modifier). Chinese written in Traditional characters falls back to English:
# a Simplified catalog is not theirs.
CATALOGS = {"zh_CN": ("zh_cn", "zh", "zh_sg", "zh_hans", "zh_hans_cn")}
_LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")

_active: _gettext.NullTranslations | None = None
_active_language: str | None = None


def N_(message: str) -> str:  # noqa: N802 (gettext's own name for "mark, translate later")
    return message


def N_plural(singular: str, plural: str) -> tuple[str, str]:  # noqa: N802 (as N_)
    """Only marks a plural pair (a module-level table); ngettext(*pair, n) it when shown."""
    return singular, plural


def _(message: str) -> str:
    # "" is the catalog's own key for its header: an empty help or message stays empty.
    return translation().gettext(message) if message else message


def ngettext(singular: str, plural: str, n: int) -> str:
    return translation().ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    return translation().pgettext(context, message)


def join_words(items: Iterable[str]) -> str:
    """Items one after another, as a list is written in the reader's language ("a, b, c"; 甲、乙、丙)."""
    # Translators: what separates the items of a list ("fp32, fused adamw, flash attention")
    return pgettext("list separator", ", ").join(items)


def catalog_language(spelling: str) -> str | None:
    """The catalog that answers a language as people write it (zh_CN.UTF-8, zh-CN, zh_Hans,
    zh_CN@pinyin), or None: English, a language without a catalog, C, POSIX. Under $VRAM_LOCALEDIR
    any language with a catalog there answers too (a translator's new one, the pseudo-locale)."""
    localedir = os.environ.get("VRAM_LOCALEDIR")
    if localedir:  # a translator's catalog (or the pseudo-locale) answers its own name, modifier kept
        name, at, modifier = spelling.strip().partition("@")
        name = name.split(".", 1)[0] + at + modifier
        if name and "/" not in name and os.path.isfile(os.path.join(localedir, name, "LC_MESSAGES",
                                                                    f"{DOMAIN}.mo")):
            return name
    base = spelling.strip().split(".", 1)[0].split("@", 1)[0].replace("-", "_").lower()
    for catalog, spellings in CATALOGS.items():
        if base in spellings:
            return catalog
    return None


def chosen_language(environ: Mapping[str, str] | None = None, configured: str | None = None) -> str:
    """The language vram speaks: a key of CATALOGS (or a catalog's under $VRAM_LOCALEDIR), or
    ENGLISH. `configured` is the config's
    ui.language ("auto" or None: the locale variables decide)."""
    environ = os.environ if environ is None else environ
    for explicit in (environ.get("VRAM_LANG", ""), configured or ""):
        if explicit.strip() and explicit.strip().lower() != "auto":
            return catalog_language(explicit) or ENGLISH
    for variable in _LOCALE_VARIABLES:
        value = environ.get(variable, "")
        if not value:
            continue
        # LANGUAGE is a priority list (zh_CN:en); the first of the other three that is set decides.
        for spelling in value.split(":") if variable == "LANGUAGE" else [value]:
            language = catalog_language(spelling)
            if language:
                return language
            if spelling.split(".", 1)[0].split("_", 1)[0].lower() in ("en", "c", "posix"):
                return ENGLISH
        if variable != "LANGUAGE":
            return ENGLISH
    return ENGLISH


def _configured_language() -> str | None:
    """The config's ui.language, or None when no file sets it or a file cannot be read (the
    command itself reports a bad config file when it reads it; a message's language never fails)."""
    from .config_paths import may_mention

    # Neither $VRAM_UI_LANGUAGE (config.py's name for the key) nor a file that mentions it, as on most
    # machines: the config reader (~15 ms that `vram status` piped does not otherwise pay) stays out.
    if "VRAM_UI_LANGUAGE" not in os.environ and not may_mention(b"language"):
        return None
    from .config import load  # here: the config reads files, and most messages never need it
    from .errors import VramkitError

    try:
        value = load()["ui.language"]
    except (VramkitError, OSError, KeyError):
        return None
    return str(value)


def translator(language: str) -> _gettext.NullTranslations:
    """The catalog of one language (a key of CATALOGS), or English: for a reader whose language is
    not the process's (the web page follows its request's Accept-Language)."""
    if language == ENGLISH or language not in CATALOGS and not os.environ.get("VRAM_LOCALEDIR"):
        return _gettext.NullTranslations()
    path = os.path.join(os.environ.get("VRAM_LOCALEDIR") or LOCALE_DIR, language, "LC_MESSAGES", f"{DOMAIN}.mo")
    try:
        with open(path, "rb") as f:
            return Catalog(f.read())
    except FileNotFoundError:
        return _gettext.NullTranslations()


class Catalog(_gettext.NullTranslations):
    """A compiled catalog (.mo) whose messages are decoded when asked for. gettext.GNUTranslations
    decodes and splits all of them as it loads (~2,000: ~4 ms of every `vram status` in Chinese, which
    says some thirty); here loading is a C-speed index of the raw bytes. OSError: not a catalog."""

    def __init__(self, data: bytes) -> None:
        import struct

        super().__init__()
        try:
            order = {0x950412DE: "<", 0xDE120495: ">"}[struct.unpack("<I", data[:4])[0]]
            version, count, originals, translations = struct.unpack(order + "4I", data[4:20])
            if version >> 16 > 1:
                raise OSError(f"catalog version {version >> 16}: not one gettext writes")
            o = struct.unpack(f"{order}{2 * count}I", data[originals:originals + 8 * count])
            t = struct.unpack(f"{order}{2 * count}I", data[translations:translations + 8 * count])
        except (KeyError, struct.error):
            raise OSError("not a gettext catalog") from None
        # {msgid as stored (context\x04msgid, singular\x00plural): (offset, length) of its translation}
        self._index = dict(zip([data[at:at + n] for n, at in zip(o[0::2], o[1::2])], zip(t[1::2], t[0::2])))
        self._data = data
        self._charset = "utf-8"  # the header's (ASCII) says which: Babel and msgfmt write UTF-8
        self._plural: Callable[[int], int] = lambda n: int(n != 1)
        for line in (self._found(b"") or "").splitlines():
            name, _colon, value = line.partition(":")
            if name.strip().lower() == "content-type" and "charset=" in value:
                self._charset = value.split("charset=", 1)[1].strip() or "utf-8"
            elif name.strip().lower() == "plural-forms" and "plural=" in value:
                rule = value.split("plural=", 1)[1].strip().rstrip(";").strip()
                self._plural = (lambda n: 0) if rule == "0" else _gettext.c2py(rule)

    def _found(self, key: bytes) -> str | None:
        where = self._index.get(key)
        if where is None:
            return None
        at, length = where
        return self._data[at:at + length].decode(self._charset)

    def _key(self, text: str) -> bytes:
        return text.encode(self._charset)

    def gettext(self, message: str) -> str:
        found = self._found(self._key(message))
        return message if found is None else found

    def ngettext(self, msgid1: str, msgid2: str, n: int) -> str:
        found = self._found(self._key(f"{msgid1}\0{msgid2}"))
        if found is None:
            return msgid1 if n == 1 else msgid2
        forms = found.split("\0")
        return forms[min(self._plural(n), len(forms) - 1)]

    def pgettext(self, context: str, message: str) -> str:
        found = self._found(self._key(f"{context}\x04{message}"))
        return message if found is None else found

    def npgettext(self, context: str, msgid1: str, msgid2: str, n: int) -> str:
        found = self._found(self._key(f"{context}\x04{msgid1}\0{msgid2}"))
        if found is None:
            return msgid1 if n == 1 else msgid2
        forms = found.split("\0")
        return forms[min(self._plural(n), len(forms) - 1)]


_NONE = _gettext.NullTranslations()
_this_thread = _thread._local()  # (the C module's thread-local: threading is not imported for it)


class english:  # noqa: N801 (used as `with i18n.english():`, as a function would be)
    """English for what this thread words meanwhile, whatever the process's language: an answer a
    program reads (vram serve's JSON API) in a server that speaks the reader's language elsewhere."""

    def __enter__(self) -> None:
        self._before = getattr(_this_thread, "english", False)
        _this_thread.english = True

    def __exit__(self, *exc: object) -> None:
        _this_thread.english = self._before


def translation() -> _gettext.NullTranslations:
    """The process's catalog, read once (none in a thread inside `english()`)."""
    global _active, _active_language
    if getattr(_this_thread, "english", False):
        return _NONE
    if _active is None:
        # English while the language is chosen: reading the config may word an error (a bad file),
        # which would otherwise come back here for the language it is still choosing.
        _active, _active_language = _gettext.NullTranslations(), ENGLISH
        environ = os.environ
        configured = None if environ.get("VRAM_LANG", "").strip() else _configured_language()
        chosen = chosen_language(environ, configured)
        try:
            _active = translator(chosen)
        except OSError:  # a catalog cut short or not a catalog (a translator's): English, not a crash
            return _active
        _active_language = chosen
    return _active


def language() -> str:
    """The language of the process's messages: a key of CATALOGS (or a catalog's under
    $VRAM_LOCALEDIR), or ENGLISH."""
    translation()
    return _active_language or ENGLISH


def force_english() -> None:
    """English from now on, whatever the reader's language: the process prints JSON or CSV, which a
    program reads (its keys are English anyway, and so must be every sentence in it and on stderr).
    Reads no catalog and no config file."""
    global _active, _active_language
    _active, _active_language = _gettext.NullTranslations(), ENGLISH


def reset() -> None:
    """Choose the language again on the next message (tests; a process that changed its environment)."""
    global _active, _active_language
    _active = _active_language = None
