"""Keep the translation catalogs in step with the code (`make i18n`; needs Babel: the test extra).

    python scripts/i18n.py                     extract, update every catalog, compile
    python scripts/i18n.py --add FILE.po ...   the same, first taking the translations in FILE.po
                                               (a translator's or a helper's part) into zh_CN
    python scripts/i18n.py --pseudo DIR        write the pseudo-locale "en@pseudo" under DIR from
                                               the .pot: VRAM_LOCALEDIR=DIR VRAM_LANG=en@pseudo vram ...
                                               (docs/i18n.md)

Extract: every _(), N_(), ngettext(), N_plural(), pgettext() in src/vramkit (Babel's python extractor) into
src/vramkit/locale/vramkit.pot. Update: each locale/<lang>/LC_MESSAGES/vramkit.po gains the new
messages (untranslated) and loses the ones the code no longer has; a translation is never
guessed from a similar message (no fuzzy matching). Compile: vramkit.mo beside each .po, which
the package ships and reads at run time (the .mo is committed, as the .po is: a checkout runs
without Babel; tests/test_i18n*.py check the two agree).

One run at a time (a lock beside the catalogs): several people updating at once each see the
others' messages and never lose a translation.
"""

from __future__ import annotations

import argparse
import fcntl
import io
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "vramkit"
LOCALE = PACKAGE / "locale"
TEMPLATE = LOCALE / "vramkit.pot"
LANGUAGES = ("zh_CN",)
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2), "N_plural": (1, 2), "pgettext": ((1, "c"), 2)}
HEADER = "vram's messages. The glossary translators follow: docs/glossary.zh_CN.md"
# Fixed: a date that changed on every run would make every update a change to commit.
DATES = {"creation_date": datetime(2026, 12, 1, tzinfo=timezone.utc),
         "revision_date": datetime(2026, 12, 1, tzinfo=timezone.utc)}


# Babel marks a message python-format when anything in it reads as a %-directive, "% of a GPU's
# memory" too (a space is a flag): msgfmt -c would then demand a directive in the translation. Only
# one without that flag is real (%s, %(name)s, %%).
_REAL_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0+]?(?:\*|\d+)?(?:\.(?:\*|\d+))?[diouxXeEfFgGcrsa%]")


def _true_formats(catalog: Catalog) -> Catalog:
    """`catalog` without the python-format flag on messages that hold no real %-directive."""
    for message in catalog:
        ids = message.id if isinstance(message.id, (tuple, list)) else (message.id,)
        if "python-format" in message.flags and not any(_REAL_PERCENT.search(i) for i in ids if i):
            message.flags.discard("python-format")
    return catalog


def extract() -> Catalog:
    catalog = Catalog(project="vramkit", version=_version(), header_comment=f"# {HEADER}", fuzzy=False,
                      **DATES)
    method_map = [("**/tests/**", "ignore"), ("**.py", "python")]
    for filename, lineno, message, comments, context in extract_from_dir(
            str(PACKAGE), method_map=method_map, keywords=KEYWORDS, comment_tags=("Translators:",),
            strip_comment_tags=True):
        catalog.add(message, None, [(f"src/vramkit/{filename}", lineno)], auto_comments=comments, context=context)
    return catalog


def _version() -> str:
    namespace: dict[str, str] = {}
    exec((PACKAGE / "_version.py").read_text(), namespace)
    return namespace["__version__"]


def _read(path: Path, locale: str | None = None) -> Catalog:
    with path.open("rb") as f:
        return read_po(f, locale=locale)


def _write_po(path: Path, catalog: Catalog) -> None:
    buffer = io.BytesIO()
    # File names without line numbers: any edit above a message would otherwise change the catalog
    write_po(buffer, _true_formats(catalog), width=100, sort_output=False, ignore_obsolete=True, include_previous=False,
             include_lineno=False)
    _replace(path, buffer.getvalue())


def _write_mo(path: Path, catalog: Catalog) -> None:
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    _replace(path, buffer.getvalue())


def _replace(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def take(catalog: Catalog, part: Catalog) -> int:
    """Copy into `catalog` the translations `part` has for messages `catalog` has; how many."""
    taken = 0
    for message in part:
        if not message.id or not message.string or not any(message.string if message.pluralizable
                                                              else [message.string]):
            continue
        mine = catalog.get(message.id, context=message.context)
        if mine is not None:
            mine.string = message.string
            mine.flags.discard("fuzzy")
            taken += 1
    return taken


def update(parts: list[Path]) -> None:
    LOCALE.mkdir(exist_ok=True)
    template = extract()
    _write_po(TEMPLATE, template)
    for language in LANGUAGES:
        po = LOCALE / language / "LC_MESSAGES" / "vramkit.po"
        po.parent.mkdir(parents=True, exist_ok=True)
        catalog = _read(po, language) if po.exists() else Catalog(
            locale=language, project="vramkit", version=_version(), header_comment=f"# {HEADER}", fuzzy=False,
            **DATES)
        catalog.update(template, no_fuzzy_matching=True, update_creation_date=False)
        catalog.revision_date = DATES["revision_date"]
        catalog.obsolete.clear()
        for part in parts:
            took = take(catalog, _read(part, language))
            print(f"{part}: {took} translations taken", file=sys.stderr)
        _write_po(po, catalog)
        _write_mo(po.with_suffix(".mo"), catalog)
        missing = sum(1 for m in catalog if m.id and not (all(m.string) if m.pluralizable else m.string))
        print(f"{language}: {len(catalog)} messages, {missing} untranslated", file=sys.stderr)


# The pseudo-locale: every message between markers, its letters accented and a third longer, the
# placeholders, flags, $VARIABLES and line breaks kept. English left outside the markers was never
# marked, or was put together from pieces; a table too narrow for longer words shows too.
PSEUDO = "en@pseudo"
OPEN, CLOSE = "⟦", "⟧"
_KEPT = re.compile(r"%(?:\(\w+\))?[-#0+]?\d*(?:\.\d+)?[diouxXeEfFgGcrsa%]|\{\w*(?:[!:][^{}]*)?\}|\$\w+|--[\w-]+|\n")
_ACCENTED = str.maketrans("aeiouAEIOUcnsyCNSY", "áéíóúÁÉÍÓÚçñšýÇÑŠÝ")


def pseudo(text: str) -> str:
    pieces, at = [], 0
    for kept in _KEPT.finditer(text):
        pieces += [text[at:kept.start()].translate(_ACCENTED), kept.group()]
        at = kept.end()
    pieces.append(text[at:].translate(_ACCENTED))
    return OPEN + "".join(pieces) + "~" * (len(text) // 3) + CLOSE


def write_pseudo(localedir: Path) -> Path:
    """The pseudo-locale's catalog under `localedir`, made from the .pot; its path."""
    catalog = Catalog(locale="en", fuzzy=False)
    for message in _read(TEMPLATE):
        if message.id:
            string = tuple(map(pseudo, message.id)) if message.pluralizable else pseudo(message.id)
            catalog.add(message.id, string, context=message.context)
    path = localedir / PSEUDO / "LC_MESSAGES" / "vramkit.mo"
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_mo(path, catalog)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--add", type=Path, action="append", default=[], metavar="FILE.po",
                        help="take the translations in FILE.po first (may repeat)")
    parser.add_argument("--pseudo", type=Path, metavar="DIR",
                        help=f"only write the pseudo-locale {PSEUDO} under DIR, from the .pot")
    args = parser.parse_args()
    if args.pseudo:
        print(f"{write_pseudo(args.pseudo)}: VRAM_LOCALEDIR={args.pseudo} VRAM_LANG={PSEUDO} vram ...", file=sys.stderr)
        return 0
    LOCALE.mkdir(exist_ok=True)
    with open(LOCALE / ".update.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        update(args.add)
    return 0


if __name__ == "__main__":
    sys.exit(main())
