"""vram in the reader's language (issue 34): the command line's core (argparse's own words, the
error lines, the help), the language choice, --json/--csv in English, and the catalog itself.

The areas' own Chinese output is tested in tests/test_i18n_<area>.py.
"""

from __future__ import annotations

import gettext
import importlib.util
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, run_vram, zh_env

from vramkit import i18n

HAN = re.compile(r"[\u4e00-\u9fff]")


def chinese(text: str) -> bool:
    return bool(HAN.search(text))


# ---------------------------------------------------------------- the command line's core

def test_vram_help_in_chinese_has_argparse_words_and_the_command_lines():
    out = run_vram("--help", env=zh_env(COLUMNS="100")).out
    assert out.startswith("用法：vram ")
    assert "\n位置参数：\n" in out and "\n选项：\n" in out and "\n全局选项：\n" in out
    assert "显示此帮助信息并退出" in out and "显示版本号并退出" in out
    assert "显示每块 GPU 的显存和利用率" in out  # `status`'s line, from cli/commands.py
    assert "\n示例：\n" in out
    for english in ("usage:", "options:", "positional arguments", "show this help", "global options",
                    "examples:", "show every GPU"):
        assert english not in out


def test_help_lines_fold_by_display_width():
    """Chinese has no spaces: a help line folds between characters, within the terminal's width."""
    out = run_vram("--help", env=zh_env(COLUMNS="60")).out
    from vramkit.render.text_width import cells

    prose = [line for line in out.splitlines() if chinese(line) and not line.startswith("  vram ")]  # not examples
    assert max(map(cells, prose)) <= 58
    assert any(chinese(line) and line.startswith(" " * 24) for line in out.splitlines())  # a folded help line


def test_a_misspelt_command_or_option_still_gets_its_suggestion_in_chinese():
    line = assert_one_line_error(run_vram("stauts", env=zh_env()), 2, "错误：", "无效的选择：'stauts'")
    assert "是不是要用 'status'？" in line and "（见 'vram --help'）" in line
    line = assert_one_line_error(run_vram("status", "--gpuu", "1", env=zh_env()), 2, "无法识别的参数：--gpuu 1")
    assert "是不是要用 --gpu？" in line and "vram status --help" in line


def test_english_suggestions_are_unchanged():
    line = assert_one_line_error(run_vram("stauts"), 2)
    assert line.startswith("vram: error: argument COMMAND: invalid choice: 'stauts' (choose from 'status', ")
    assert line.endswith("; did you mean 'status'? (see 'vram --help')")
    assert_one_line_error(run_vram("status", "--gpuu", "1"), 2)
    assert run_vram("status", "--gpuu", "1").err == (
        "vram: error: unrecognized arguments: --gpuu 1; did you mean --gpu? (see 'vram status --help')\n")


def test_errors_of_the_core_in_chinese():
    # the option and its error joined by a full-width colon, as in argparse's own (参数 --watch：)
    assert_one_line_error(run_vram("status", "--simulate", "demo", "--gpu", "9", env=zh_env()), 2,
                          "vram: 错误：--gpu：没有 GPU 9（本机的 GPU 为 0-7）")
    assert_one_line_error(run_vram("status", "--watch", "xx", env=zh_env()), 2,
                          "参数 --watch：不是时长：'xx'（例如 90s、5m、2h）")
    result = run_vram("job", "--help", env=zh_env())
    assert result.err == "vram: 注意：'vram job' 已改名为 'vram life'（旧名称在下一个版本之前仍可使用）\n"


def test_a_bad_config_file_while_the_language_is_chosen_is_one_line(tmp_path):
    """The language is chosen by reading the config (ui.language); a bad file words its error,
    which asks for the language again: English meanwhile, then the error in the reader's language."""
    (tmp_path / "vramkit").mkdir()
    (tmp_path / "vramkit" / "config.toml").write_text("[top\n")
    env = _locale_env(tmp_path, LANG="zh_CN.UTF-8")
    assert_one_line_error(run_vram("config", env=env), 2, "config.toml: 不是有效的 TOML：")


def test_vram_config_in_chinese_lines_up_by_display_width(tmp_path):
    env = zh_env(XDG_CONFIG_HOME=str(tmp_path), COLUMNS="200")
    lines = run_vram("config", env=env).out.splitlines()
    assert lines[0].endswith("config.toml：不存在")
    heading = lines[2]
    assert heading.split() == ["键", "值", "来源", "含义"]
    from vramkit.render.text_width import cells

    row = next(line for line in lines if line.startswith("top.interval "))
    assert cells(heading[:heading.index("来源")]) == row.index("default")
    assert "实时视图两次刷新之间的秒数（--interval）" in row


# ---------------------------------------------------------------- JSON and CSV are English

@pytest.mark.parametrize("flag", ["--json", "--js", "--csv"])
def test_json_and_csv_switch_the_process_to_english(flag):
    """What a program reads is English, and so is every line said with it; without the flag the
    same error is Chinese (--js: argparse's abbreviation, known only once parsed)."""
    args = ("status", "--simulate", "demo", "--gpu", "9")
    assert_one_line_error(run_vram(*args, env=zh_env()), 2, "没有 GPU 9")
    assert run_vram(*args, flag, env=zh_env()).err == "vram: error: --gpu: no GPU 9 (this machine has GPUs 0-7)\n"


@pytest.mark.parametrize("args", [
    ("status", "--json"), ("status", "--csv"), ("ps", "--json"), ("ps", "--csv"), ("pick", "--explain", "--json"),
    ("doctor", "tests/fixtures/oom/cuda_2_2_two_processes_private_pools.txt", "--json"),
    ("estimate", "llama-3-8b", "--batch", "4", "--seq", "2048", "--lora", "16", "--json"), ("config", "--json"),
])
def test_what_a_program_reads_is_the_same_in_every_language(args, tmp_path):
    """JSON and CSV, keys, values and every sentence in them, byte for byte (a stepped simulated
    clock: the same times in both runs; but pick's real seconds spent waiting for the lease lock)."""
    env = clean_env(VRAM_SIMULATE="demo", VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH="1767225600", VRAM_SIM_TIME=None,
                    XDG_CONFIG_HOME=str(tmp_path))
    args = tuple(str(Path(__file__).parents[1] / a) if a.startswith("tests/") else a for a in args)
    english, chinese_run = run_vram(*args, env=env), run_vram(*args, env={**env, "VRAM_LANG": "zh_CN"})
    assert english.rc == 0 and english.out, english.err

    def seen(result):
        return result.rc, re.sub(r'"waited": [0-9.e-]+', '"waited": 0', result.out), result.err
    assert seen(chinese_run) == seen(english)


def test_json_help_and_argparse_errors_are_english_too():
    """The flag is seen in argv before the parser is built (its help lines, argparse's errors)."""
    result = run_vram("status", "--json", "--gpuu", "1", env=zh_env())
    assert_one_line_error(result, 2, "vram: error: unrecognized arguments: --gpuu 1; did you mean --gpu?")
    assert run_vram("status", "--json", "--help", env=zh_env()).out.startswith("usage: vram status")


def test_force_english_in_process(monkeypatch):
    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()
    assert i18n._("options") == "选项"
    i18n.force_english()
    assert i18n._("options") == "options" and i18n.language() == "en"


def test_machine_readable_is_read_before_the_command_separator():
    from vramkit.cli.main import machine_readable

    assert machine_readable(["status", "--json"]) and machine_readable(["ps", "--csv", "--gpu", "1"])
    assert not machine_readable(["run", "-n", "1", "--", "python", "x.py", "--json"])
    assert not machine_readable(["status"])


# ---------------------------------------------------------------- the language chosen

def _locale_env(config_home: Path, **variables: str) -> dict[str, str]:
    """clean_env() with the config under `config_home` and only `variables` of VRAM_LANG and the
    locale's (the suite's VRAM_LANG=en and the machine's LANG gone)."""
    env = clean_env(XDG_CONFIG_HOME=str(config_home), **{k: None for k in (
        "VRAM_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")})
    return {**env, **variables}


def _language_of(env: dict[str, str]) -> str:
    """The language a real `vram` speaks in `env`: its help's first word."""
    first = run_vram("--help", env=env).out.split(" ", 1)[0]
    return {"用法：vram": "zh_CN", "usage:": "en"}[first]


@pytest.mark.parametrize("variables,config,language", [
    ({"LANG": "zh_CN.UTF-8"}, None, "zh_CN"),
    ({"LANG": "C.UTF-8"}, None, "en"),
    ({"LANG": "zh_TW.UTF-8"}, None, "en"),  # Traditional: no catalog of its own, and not the Simplified one
    ({"LANGUAGE": "zh_CN:en", "LANG": "en_US.UTF-8"}, None, "zh_CN"),  # LANGUAGE first, a priority list
    ({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, None, "en"),  # LC_ALL over LANG
    ({"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "C"}, None, "zh_CN"),
    ({"LANG": "C.UTF-8"}, "zh_CN", "zh_CN"),  # the shared server's LANG, the user's own ui.language
    ({"LANG": "zh_CN.UTF-8"}, "en", "en"),
    ({"LANG": "zh_CN.UTF-8"}, "auto", "zh_CN"),
    ({"LANG": "C.UTF-8", "VRAM_UI_LANGUAGE": "zh-CN"}, None, "zh_CN"),  # the key from the environment
    ({"LANG": "C.UTF-8", "VRAM_LANG": "zh_CN"}, "en", "zh_CN"),  # VRAM_LANG over everything
    ({"LANG": "zh_CN.UTF-8", "VRAM_LANG": "en"}, "zh_CN", "en"),
])
def test_the_language_comes_from_vram_lang_then_the_config_then_the_locale(tmp_path, variables, config, language):
    if config is not None:
        (tmp_path / "vramkit").mkdir()
        (tmp_path / "vramkit" / "config.toml").write_text(f'[ui]\nlanguage = "{config}"\n')
    assert _language_of(_locale_env(tmp_path, **variables)) == language


def test_the_environment_name_of_ui_language_is_the_one_i18n_checks():
    """i18n.py looks for $VRAM_UI_LANGUAGE (and the files) before it imports the config reader."""
    from vramkit import config, config_paths

    assert config.BY_NAME["ui.language"].env == "VRAM_UI_LANGUAGE"
    assert str(config.SYSTEM_FILE) == config_paths.SYSTEM_PATH and str(config.user_file()) == config_paths.user_path()


def test_a_catalog_that_cannot_be_read_is_english(tmp_path):
    (tmp_path / "xx" / "LC_MESSAGES").mkdir(parents=True)
    (tmp_path / "xx" / "LC_MESSAGES" / "vramkit.mo").write_bytes(b"not a catalog at all")
    result = run_vram("--help", env=clean_env(VRAM_LANG="xx", VRAM_LOCALEDIR=str(tmp_path)))
    assert result.rc == 0 and result.out.startswith("usage: vram")


# ---------------------------------------------------------------- the catalog agrees with the code

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "src" / "vramkit" / "locale"
PO = LOCALE / "zh_CN" / "LC_MESSAGES" / "vramkit.po"
MO = PO.with_suffix(".mo")


def _catalog_tool():
    """scripts/i18n.py (`make i18n`), which needs Babel (the test extra)."""
    pytest.importorskip("babel")
    spec = importlib.util.spec_from_file_location("i18n_script", ROOT / "scripts" / "i18n.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_po(path: Path):
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        return read_po(f)


def _keys(catalog) -> set:
    return {(m.context, m.id if isinstance(m.id, str) else tuple(m.id)) for m in catalog if m.id}


@pytest.mark.slow  # Babel reads every module of the package: ~2 s
def test_the_catalog_has_exactly_the_messages_of_the_code():
    """A message changed, added or removed in the code without `make i18n` fails here."""
    in_code = _keys(_catalog_tool().extract())
    for path in (LOCALE / "vramkit.pot", PO):
        committed = _keys(_read_po(path))
        assert not in_code - committed and not committed - in_code, (
            f"{path.relative_to(ROOT)} is not the code's: run `make i18n` (python scripts/i18n.py). "
            f"In the code only: {sorted(map(str, in_code - committed))[:10]}; "
            f"in the catalog only: {sorted(map(str, committed - in_code))[:10]}")


def test_the_marks_of_argparse_words_are_argparse_s_own():
    """cli/argparse_words.py spells each msgid as argparse does: each is in argparse's source
    (this Python's; the last two: Python 3.13's --version help and 3.14's section title)."""
    import argparse

    from vramkit.cli.argparse_words import PLURALS, WORDS

    source = Path(argparse.__file__).read_text()
    later = {"show program's version number and exit", "%(heading)s:"}
    for word in [*WORDS, *(w for pair in PLURALS for w in pair)]:
        if word not in later:
            assert f"'{word}'" in source or f'"{word}"' in source, word


def test_every_message_has_a_chinese_translation():
    untranslated = [m.id for m in _read_po(PO) if m.id and not (all(m.string) if m.pluralizable else m.string)]
    assert not untranslated, f"{len(untranslated)} untranslated, e.g. {untranslated[:10]}"


_BRACE = re.compile(r"\{(\w*)(?:[!:][^{}]*)?\}")
_NAMED = re.compile(r"%\((\w+)\)[-#0+]?\d*(?:\.\d+)?[diouxXeEfFgGcrsa]")
_POSITIONAL = re.compile(r"%[-#0+]?\d*(?:\.\d+)?([diouxXeEfFgGcrsa%])")


def _placeholders(text: str, python_format: bool) -> tuple:
    named = sorted(set(_NAMED.findall(text)))
    positional = _POSITIONAL.findall(_NAMED.sub("", text)) if python_format else []
    return sorted(set(_BRACE.findall(text))), named, positional


def test_each_translation_keeps_the_placeholders_and_msgfmt_agrees():
    broken = []
    for m in _read_po(PO):
        if not m.id or not m.string:
            continue
        ids = list(m.id) if m.pluralizable else [m.id]
        strings = [s for s in (m.string if m.pluralizable else [m.string]) if s]
        python_format = "python-format" in m.flags and bool(_POSITIONAL.search(" ".join(ids)))
        wanted = _placeholders(ids[-1], python_format)
        broken += [(ids[0], s) for s in strings if _placeholders(s, python_format) != wanted]
    assert not broken, f"translations whose placeholders are not their message's: {broken[:5]}"
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (GNU gettext) not installed")
    result = subprocess.run(["msgfmt", "-c", "-o", os.devnull, str(PO)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_committed_mo_is_the_po_compiled():
    pytest.importorskip("babel")
    from babel.messages.mofile import write_mo

    buffer = io.BytesIO()
    write_mo(buffer, _read_po(PO), use_fuzzy=False)
    buffer.seek(0)
    compiled = gettext.GNUTranslations(buffer)
    with MO.open("rb") as f:
        committed = gettext.GNUTranslations(f)
    # the header ("") names the Babel that wrote it (Generated-By), which may be another release here
    messages = [{k: v for k, v in t._catalog.items() if k != ""} for t in (committed, compiled)]  # type: ignore[attr-defined]
    assert messages[0] == messages[1], "the .mo is not the .po's: run `make i18n`"


# ---------------------------------------------------------------- the pseudo-locale

@pytest.fixture(scope="module")
def pseudo_locale(tmp_path_factory) -> Path:
    """The pseudo-locale "en@pseudo" (scripts/i18n.py --pseudo) under a VRAM_LOCALEDIR of its own."""
    localedir = tmp_path_factory.mktemp("locale")
    _catalog_tool().write_pseudo(localedir)
    return localedir


FIXTURES = Path(__file__).parent / "fixtures"
OOM_LOG = FIXTURES / "oom" / "cuda_2_2_two_processes_private_pools.txt"
PSEUDO_RUNS = [
    ("--help",),
    ("status",),
    ("ps",),
    ("kill", "--zombie", "--dry-run"),
    ("pick", "--explain"),
    ("estimate", "llama-3-8b", "--batch", "4", "--seq", "2048", "--lora", "16"),
    ("doctor", str(OOM_LOG)),
]


EPOCH = 1767225600  # 2026-01-01 00:00 UTC


@pytest.fixture(scope="module")
def history_db(tmp_path_factory) -> Path:
    """Ten minutes of the demo server recorded (a stepped clock: a sample a minute, at once)."""
    db = tmp_path_factory.mktemp("history") / "history.db"
    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=None, TZ="UTC")
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60", "--duration", "600",
                      "--quiet", env=env, timeout=120)
    assert result.rc == 0, result.err
    return db


def _outputs(db: Path, **env: str) -> dict[str, str]:
    """What each of PSEUDO_RUNS, and `vram report` on `db`, prints (stdout, then stderr) on the
    simulated demo server, 80 columns."""
    outputs = {}
    report = ("report", "--db", str(db), "--since", f"@{EPOCH}", "--until", f"@{EPOCH + 600}")
    for args in [*PSEUDO_RUNS, report]:
        result = run_vram(*args, env=clean_env(VRAM_SIMULATE="demo", COLUMNS="80", TZ="UTC", **env))
        assert "Traceback" not in result.err and result.rc in (0, 1), (args, result.err[-2000:])
        outputs[" ".join(args[:1] if args is report else args)] = result.out + result.err
    return outputs


@pytest.fixture(scope="module")
def pseudo_outputs(pseudo_locale, history_db) -> dict[str, str]:
    return _outputs(history_db, VRAM_LANG="en@pseudo", VRAM_LOCALEDIR=str(pseudo_locale))


OPEN, CLOSE = "⟦", "⟧"  # scripts/i18n.py's pseudo-locale markers


def _unmarked(text: str) -> str:
    """`text` without its translated parts, its lines kept where they were (a message may span
    lines: folded help; markers nest: a message in another's placeholder)."""
    while True:
        cut = re.sub(f"{OPEN}[^{OPEN}{CLOSE}]*{CLOSE}", lambda m: " " + "\n" * m.group().count("\n"), text)
        if cut == text:
            return cut
        text = cut


def _kept_words() -> set[str]:
    """Words that stay English: names from the simulated machine (GPUs, users, commands), the
    oom log's own text (doctor quotes it), the parsers' metavars, and the kept-English terms."""
    import argparse
    import json

    from vramkit.cli.main import build_parser

    scenario = json.loads((Path(__file__).parents[1] / "src/vramkit/nvml/scenarios/demo.json").read_text())
    texts = [json.dumps(scenario["gpus"]), json.dumps(scenario["processes"]), OOM_LOG.read_text()]
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            texts.append(str(action.metavar or ""))
            if isinstance(action, argparse._SubParsersAction):
                texts += action.choices  # the commands' names
                parsers += action.choices.values()
    kept = {"vram", "NVIDIA", "CUDA", "PyTorch", "NVML", "GPU", "GPUs", "MIG", "OOM", "LoRA", "SIGTERM",
            "SIGKILL", "Ctrl-C", "GiB", "MiB", "KiB", "TiB", "W", "N/A", "Slurm", "Kubernetes", "Pod", "JSON",
            "CSV", "demo", "llama", "fp16", "bf16", "fp32", "AdamW", "Adam", "KV"}
    return kept | {w for text in texts for w in re.findall(r"[A-Za-z]+", text)}


def _english_words(line: str, kept: set[str]) -> list[str]:
    """The words of an unmarked line that are English and not kept English."""
    words = []
    for token in line.split():
        token = token.strip(",;:()[]'\"`.!?")
        if (not re.search(r"[A-Za-z]", token) or token.startswith("-") or token.endswith("…")
                or re.search(r"[\d_/=.@<>|#]", token) or re.fullmatch("[A-Z]", token)):
            continue  # flags, paths, numbers and sizes, ids, cut cells, bars and their legend's letters
        words += [w for w in re.findall(r"[A-Za-z]+", token) if w not in kept]
    return words


def test_the_pseudo_locale_leaves_no_english_outside_the_messages(pseudo_outputs):
    kept = _kept_words()
    untranslated = [f"vram {command}: {' '.join(words)}: {line.strip()!r}" for command, out in pseudo_outputs.items()
                    for line, unmarked in zip(out.splitlines(), _unmarked(out).splitlines())
                    if (words := _english_words(unmarked, kept))]
    assert not untranslated, "untranslated or assembled text:\n" + "\n".join(untranslated)


def _table_rows(text: str) -> list[str]:
    """The lines of `text` that are table rows: columns two spaces apart (the help excluded)."""
    return [line for line in text.splitlines() if re.search(r"\S  +\S.*\S  +\S", line)]


def test_the_pseudo_locale_keeps_tables_within_80_columns(pseudo_outputs, history_db):
    """Where a command's English table fits 80 columns, it still fits with every message a third
    longer (and its letters two-column wide would fit the same way: display width decides)."""
    from vramkit.render.text_width import cells

    english = _outputs(history_db)
    fitting = [c for c, out in english.items() if c != "--help" and all(cells(r) <= 80 for r in _table_rows(out))]
    assert "status" in fitting and "ps" in fitting
    wide = [f"vram {command}: {row!r}" for command in fitting for row in _table_rows(pseudo_outputs[command])
            if cells(row) > 80]
    assert not wide, "table rows wider than 80 columns:\n" + "\n".join(wide)


def test_the_pseudo_locale_is_spoken(pseudo_outputs):
    """The markers are there at all: the pseudo-locale really was the language of each run."""
    assert all(OPEN in out for out in pseudo_outputs.values()), [c for c, o in pseudo_outputs.items() if OPEN not in o]


def _imports(*args: str, env: dict[str, str]) -> set[str]:
    err = run_vram(*args, env=env, python_flags=("-X", "importtime")).err
    return {line.rsplit("|", 1)[1].strip() for line in err.splitlines() if line.startswith("import time:")}


def test_the_config_reader_loads_for_the_language_only_when_a_file_mentions_it(tmp_path):
    """Piped `vram status` read no config file before it spoke Chinese: now the first message
    asks for ui.language, and only a file that mentions it costs the config reader (~15 ms)."""
    (tmp_path / "vramkit").mkdir()
    config = tmp_path / "vramkit" / "config.toml"
    env = _locale_env(tmp_path, LANG="C.UTF-8")
    config.write_text("[thresholds]\nmemory_warn = 200\n")  # a mistake: said by the commands that use it
    assert "vramkit.config" not in _imports("status", "--simulate", "demo", env=env)
    config.write_text('[ui]\nlanguage = "zh_CN"\n')
    assert "vramkit.config" in _imports("status", "--simulate", "demo", env=env)
    assert _language_of(env) == "zh_CN"
    config.write_text('[ui]\nlanguage = "zh_CN"\n[thresholds]\nmemory_warn = 200\n')  # unusable: $LANG decides
    assert _language_of(env) == "en"


def test_the_catalog_vram_reads_answers_as_gettext_does():
    """i18n.Catalog indexes the .mo's bytes and decodes a message when asked (the whole catalog
    decoded at load was ~4 ms of every Chinese `vram status`): every message, context and plural
    form of the committed catalog reads as gettext.GNUTranslations reads it."""
    pytest.importorskip("babel")
    mine = i18n.Catalog(MO.read_bytes())
    with MO.open("rb") as f:
        theirs = gettext.GNUTranslations(f)
    asked = 0
    for m in _read_po(PO):
        if not m.id:
            continue
        if m.pluralizable:
            for n in (0, 1, 2, 5):
                if m.context:
                    assert mine.npgettext(m.context, *m.id, n) == theirs.npgettext(m.context, *m.id, n)
                else:
                    assert mine.ngettext(*m.id, n) == theirs.ngettext(*m.id, n)
        elif m.context:
            assert mine.pgettext(m.context, m.id) == theirs.pgettext(m.context, m.id)
        else:
            assert mine.gettext(m.id) == theirs.gettext(m.id)
        asked += 1
    assert asked > 100
    assert mine.gettext("no such message") == "no such message" and mine.ngettext("a", "b", 2) == "b"
    with pytest.raises(OSError):
        i18n.Catalog(b"\xde\x12\x04\x95 cut short")
