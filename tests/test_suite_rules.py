"""Rules of the test suite itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

TESTS = Path(__file__).parent


def test_test_modules_import_helpers_not_conftest():
    # conftest.py is pytest's (fixtures, set-up); plain helpers are shared through helpers.py.
    pattern = re.compile(r"^\s*(from\s+\.?conftest\s+import|import\s+conftest)", re.MULTILINE)
    offenders = [p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("*.py"))
                 if "fixtures" not in p.relative_to(TESTS).parts and pattern.search(p.read_text())]
    assert offenders == [], f"use `from helpers import ...` in {offenders}"


# ---------------------------------------------------------------- the uid mark (CI's second run, as a user)

# Asking who runs the test: the helpers for root and for another user, the ids, and the tools that
# run a command as someone else or give a file away.
ASKS_WHO_RUNS = re.compile(r"\b(needs_root|IS_ROOT|run_vram_as|AS_NOBODY|setpriv|chown)\b"
                           r"|\bos\.gete?uid\b|[\"']su[\"' ]")


def test_files_that_ask_who_runs_them_are_marked_uid():
    # CI runs the whole suite as root and then only the `uid` tests as an ordinary user: a test whose
    # result depends on who runs it and is not marked would never run as a user.
    from helpers import UID_FILES

    files = _test_files()
    asking = {p.name for p in files if p.name != Path(__file__).name and ASKS_WHO_RUNS.search(p.read_text())}
    assert sorted(asking - UID_FILES) == [], "add these to helpers.UID_FILES"
    assert sorted(UID_FILES - {p.name for p in files}) == [], "gone: remove from helpers.UID_FILES"


def test_a_test_marked_any_user_does_not_ask_who_runs_it():
    # any_user takes a test of a UID_FILES file out of CI's run as an ordinary user: one that asks
    # who runs it (in its own body or its decorators) would then never run as one.
    import ast

    wrong = []
    for path in _test_files():
        text = path.read_text()
        if "any_user" not in text or path.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_") \
                    and any("any_user" in ast.unparse(d) for d in node.decorator_list) \
                    and (ASKS_WHO_RUNS.search(" ".join([ast.get_source_segment(text, node) or "",
                                                        *map(ast.unparse, node.decorator_list)]))
                         or "shared_dir" in [a.arg for a in node.args.args]):
                wrong.append(f"{path.name}::{node.name}")
    assert wrong == [], "marked any_user but asks who runs it"


def test_the_uid_mark_goes_on_the_listed_files_and_on_tests_that_skip_for_root(tmp_path):
    import shutil
    import subprocess
    import sys

    from helpers import UID_FILES, clean_env

    for name in ("conftest.py", "helpers.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    listed = sorted(UID_FILES)[0]
    (tmp_path / listed).write_text("import pytest\n\n"
                                   "def test_listed():\n    pass\n\n"
                                   "@pytest.mark.any_user\n"
                                   "def test_the_same_for_anyone():\n    pass\n\n"
                                   "@pytest.mark.any_user\n"
                                   "@pytest.mark.skipif(False, reason='root may write anywhere')\n"
                                   "def test_said_any_user_but_skips_for_root():\n    pass\n")
    (tmp_path / "test_scratch.py").write_text(
        "import pytest\n"
        "from helpers import needs_root\n\n"
        "@needs_root('to run vram as another user')\n"
        "def test_needs_root():\n    pass\n\n"
        "@pytest.mark.skipif(False, reason='root may write anywhere')\n"
        "def test_not_as_root():\n    pass\n\n"
        "def test_shared(shared_dir):\n    pass\n\n"
        "def test_anyone():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--collect-only", "-q", "-m", "uid", "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, env=clean_env(), timeout=120, cwd=tmp_path)
    chosen = {line for line in proc.stdout.splitlines() if "::" in line}
    assert chosen == {f"{listed}::test_listed", f"{listed}::test_said_any_user_but_skips_for_root",
                      "test_scratch.py::test_needs_root",
                      "test_scratch.py::test_not_as_root", "test_scratch.py::test_shared"}, proc.stdout + proc.stderr


# ---------------------------------------------------------------- the layout: tests mirror the code (tests/README.md)

SRC = TESTS.parent / "src" / "vramkit"

# The folders for checks that are not about one module, and what each file there must show it is.
FOLDERS: dict[str, str] = {
    "e2e": "the whole product against a real outside program: it names one of tmux, prometheus, promtool, "
           "chromium/webdriver, install-system.sh",
    "redteam": "hostile neighbours and inputs: its docstring says whom or what it stands against",
    "docs": "the docs' claims checked against the code: it reads README or docs/",
    "containers": "vram inside a real PID namespace: it uses the folder's `container` fixture (its conftest.py)",
}
NOT_TESTS = {"fixtures", "__pycache__"}  # data, not tests
E2E_PROGRAMS = re.compile(r"tmux|prometheus|promtool|chromium|webdriver|install-system\.sh", re.IGNORECASE)
ADVERSARY = re.compile(r"red team|hostile|attack|abuse|neighbour|another (local )?user|other users|malformed|"
                       r"forged|fuzz|unbounded", re.IGNORECASE)

# Files about something outside src/vramkit: the file or folder each tests (it must exist).
OUTSIDE_SRC: dict[str, str] = {
    "test_suite_rules.py": "tests/conftest.py",  # the suite itself: these rules
    "test_suite_summary.py": "tests/conftest.py",  # the suite itself: its summary line
    "test_bench_machine.py": "benchmarks/_machine.py",
    "test_validate_published.py": "benchmarks/validate_published.py",
    "test_packaging.py": "MANIFEST.in",  # the sdist and the wheel built from it
    "test_systemd_units.py": "contrib/systemd",
    "test_alert_rules.py": "contrib/prometheus/vram-alerts.yml",
    "test_install_system.py": "scripts/install-system.sh",
}

# NOT YET MOVED: files other helpers were editing while the layout was made. /work/brief/moves_later.sh
# gives each its name and folder; whoever runs it empties this set (then this test holds them too).
NOT_YET_MOVED: frozenset[str] = frozenset()


def _module_names() -> set[str]:
    """What a test file may be named for: every public module and package of src/vramkit, by its
    path with `_` for `/` (history_store) and by its own name (store, text_width), and the package
    itself (vramkit: __init__.py, the public API)."""
    names = {"vramkit"}
    for path in SRC.rglob("*.py"):
        parts = [p for p in path.relative_to(SRC).with_suffix("").parts if p != "__init__"]
        if parts and not any(p.startswith("_") for p in parts):
            names.update({"_".join(parts), parts[-1]})
    return names


def _doc_names() -> set[str]:
    """What a file in tests/docs/ may be named for: a page or folder of docs/ (user-guide.md: user_guide),
    readme, or docs (all of them)."""
    names = {"docs", "readme"}
    for path in (TESTS.parent / "docs").iterdir():
        names.add(path.name.split(".", 1)[0].replace("-", "_").lower())
    return names


def _named_for(stem: str, names: set[str]) -> bool:
    words = stem.removeprefix("test_").split("_")
    return any("_".join(words[:n]) in names for n in range(1, len(words) + 1))


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if not NOT_TESTS & set(p.relative_to(TESTS).parts))


def test_every_test_file_is_named_for_what_it_tests():
    modules, docs = _module_names(), _doc_names()
    wrong = []
    for path in _test_files():
        folder = path.parent.relative_to(TESTS).as_posix()
        if path.name in OUTSIDE_SRC or path.name in NOT_YET_MOVED:
            continue
        if not _named_for(path.stem, docs if folder == "docs" else modules):
            wrong.append(path.relative_to(TESTS).as_posix())
    assert wrong == [], ("name each file test_<module>[_<aspect>].py for the module or package of src/vramkit it "
                         "tests (in tests/docs/: for the docs page), see tests/README.md: " + ", ".join(wrong))


def test_the_exceptions_name_what_exists():
    # An exception whose file is gone, or whose subject is gone, is taken off: the list stays short and true.
    names = {p.name for p in _test_files()}
    assert sorted(n for n in OUTSIDE_SRC if n not in names) == [], "gone: take them off OUTSIDE_SRC"
    assert sorted(n for n, what in OUTSIDE_SRC.items() if not (TESTS.parent / what).exists()) == []
    assert sorted(n for n in NOT_YET_MOVED if n not in names) == [], "moved: take them off NOT_YET_MOVED"
    modules = _module_names()
    assert sorted(n for n in OUTSIDE_SRC if _named_for(n[:-3], modules)) == [], "named for a module: not an exception"


def test_test_files_live_at_the_top_or_in_the_folders_for_them():
    strays = sorted(p.relative_to(TESTS).as_posix() for p in _test_files()
                    if p.parent != TESTS and p.parent.relative_to(TESTS).as_posix() not in FOLDERS)
    assert strays == [], f"tests/ has the folders {sorted(FOLDERS)} (tests/README.md): {strays}"
    for folder in FOLDERS:
        if (TESTS / folder).is_dir():
            others = sorted(p.name for p in (TESTS / folder).iterdir()
                            if p.name not in NOT_TESTS and not (p.name.startswith("test_") and p.suffix == ".py")
                            and p.name != "conftest.py")
            assert others == [], f"tests/{folder}/ holds test files and a conftest.py only: {others}"


def test_the_folders_hold_only_what_they_are_for():
    wrong = []
    for path in _test_files():
        folder = path.parent.relative_to(TESTS).as_posix()
        if folder not in FOLDERS:
            continue
        text = path.read_text()
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if folder == "e2e" and not E2E_PROGRAMS.search(text) \
                or folder == "redteam" and not ADVERSARY.search(docstring) \
                or folder == "docs" and not re.search(r"[\"'/]docs[\"'/]|README", text) \
                or folder == "containers" and not re.search(r"def \w+\([^)]*\b(new_)?container\b", text):
            wrong.append(f"{folder}/{path.name}: {FOLDERS[folder]}")
    assert wrong == [], "\n".join(wrong)


def test_basenames_are_unique_across_the_folders():
    # pytest imports each test file by its basename (no __init__.py: the rootdir-less "prepend"
    # mode), and helpers.UID_FILES, SLOW_TESTS and LONGEST_FIRST in conftest.py name files by it.
    seen: dict[str, list[str]] = {}
    for path in _test_files() + sorted(TESTS.rglob("conftest.py")):
        seen.setdefault(path.name, []).append(path.relative_to(TESTS).as_posix())
    assert {n: where for n, where in seen.items() if len(where) > 1 and n != "conftest.py"} == {}


def test_the_files_and_tests_conftest_names_exist():
    # conftest.py marks tests slow, orders files and groups them by name: a file renamed or a test
    # renamed without its entry would silently lose its mark (read from the source: test modules
    # do not import conftest).
    tree = ast.parse((TESTS / "conftest.py").read_text())
    listed: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("SLOW_TESTS", "LONGEST_FIRST", "XDIST_GROUPS"):
            listed[target.id] = ast.literal_eval(value.args[0] if isinstance(value, ast.Call) else value)
    assert set(listed) == {"SLOW_TESTS", "LONGEST_FIRST", "XDIST_GROUPS"}
    files = {p.name: p for p in _test_files()}
    gone = sorted(n for n in [*listed["LONGEST_FIRST"], *listed["XDIST_GROUPS"]] if n not in files)
    defined: dict[str, set[str]] = {}
    for entry in sorted(listed["SLOW_TESTS"]):
        name, _sep, test = entry.partition("::")
        if name in files and name not in defined:
            defined[name] = set(re.findall(r"^\s*(?:async )?def (test\w*)\(", files[name].read_text(), re.MULTILINE))
        if test.split("[", 1)[0] not in defined.get(name, ()):
            gone.append(entry)
    assert gone == [], "renamed or gone: update tests/conftest.py"


def test_every_test_file_the_project_names_exists():
    # Docs, comments and scripts say which test file checks what, by its path: a
    # file moved or renamed without them leaves a pointer to nothing.
    root = TESTS.parent
    texts = [*root.glob("README*.md"), *(root / "docs").rglob("*.md"), root / "Makefile", root / "pyproject.toml",
             *(p for folder in ("src", "benchmarks", "scripts", "contrib") for p in (root / folder).rglob("*")
               if p.is_file() and p.suffix in (".py", ".md", ".sh", ".service", ".yml", "")),
             *(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)]
    named = {(path.relative_to(root).as_posix(), found) for path in texts if path.is_file()
             for found in re.findall(r"\btests/[\w/]+\.py\b", path.read_text(errors="replace"))}
    assert sorted(f"{where}: {found}" for where, found in named if not (root / found).is_file()) == []
