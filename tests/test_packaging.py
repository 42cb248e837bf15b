"""What a package page and a downloaded sdist give a user: the licence, the docs the README links
to, a test suite that runs (conftest, helpers, fixtures), and a wheel built from the sdist alone."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked_tree(dest: Path) -> Path:
    """A copy of the files git tracks (plus new ones it does not ignore), as a fresh clone has them."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): nothing to build the sdist from")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink() and not name.endswith(".tmp"):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _build(kind: str, tree: Path, out: Path) -> Path:
    code = f"from setuptools import build_meta; print(build_meta.build_{kind}({str(out)!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("sdist")
    return _build("sdist", _tracked_tree(base / "tree"), base / "out")


def test_the_licence_is_the_mit_licence_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
    assert re.search(r'^license = "MIT"$', (ROOT / "pyproject.toml").read_text(), re.M)


def test_the_sdist_carries_the_docs_the_tests_and_the_licence(sdist):
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "README.md", "Makefile", "docs/user-guide.md", "docs/scenarios.md",
                   "tests/conftest.py", "tests/helpers.py", "tests/fixtures/policy_valid.toml",
                   "benchmarks/bench_help.py", "src/vramkit/cli/completion.py",
                   # the catalogs: the compiled one vram reads, and what `make i18n` and the tests need
                   "src/vramkit/locale/zh_CN/LC_MESSAGES/vramkit.mo", "src/vramkit/locale/zh_CN/LC_MESSAGES/vramkit.po",
                   "src/vramkit/locale/vramkit.pot", "scripts/i18n.py"):
        assert needed in names, needed
    # Every doc the README links to is in it (the links were dead on a package page).
    readme = (ROOT / "README.md").read_text()
    for link in set(re.findall(r"\]\((docs/[^)#]+)", readme)):
        assert link in names, link
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".tmp"))]


def test_a_wheel_builds_from_the_sdist_alone_and_names_its_licence(sdist, tmp_path):
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(tmp_path)
    (unpacked,) = tmp_path.iterdir()
    wheel = _build("wheel", unpacked, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names), names
    assert "License-Expression: MIT" in metadata
    assert "vramkit/nvml/scenarios/demo.json" in names and "vramkit/cli/completion.py" in names
    assert "vramkit/locale/zh_CN/LC_MESSAGES/vramkit.mo" in names  # what vram reads to speak Chinese
    assert not any(n.startswith(("tests/", "docs/")) for n in names)  # the wheel is the package only
