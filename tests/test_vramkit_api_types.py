"""The public API type-checks for its users: every Python example of README.md and docs/api.md,
taken from the documents themselves (so this cannot go stale), passes `mypy --strict` against the
installed package (py.typed), and nothing public is `Any`."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import vramkit

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "api.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What an example leaves to the reader: their own model class. torch is Any, as in the project's
# own configuration (an optional extra, not analysed).
PRELUDE = "from typing import Any\n\nimport vramkit\n\nModel: Any\n\n"
CONFIG = "[mypy]\nstrict = True\n\n[mypy-torch.*]\nignore_missing_imports = True\nfollow_imports = skip\n"


def _examples() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for n, block in enumerate(BLOCK.findall(doc.read_text()), 1):
            found.append((f"{doc.name}#{n}", textwrap.dedent(block)))
    return found


def _mypy(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    argv = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(tmp_path / "cache"),
            "--no-error-summary", "--show-error-codes", *files]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_docs_have_api_examples():
    names = [name for name, _ in _examples()]
    assert any(n.startswith("README.md") for n in names) and sum(n.startswith("api.md") for n in names) >= 5


def test_every_documented_example_passes_mypy_strict(tmp_path):
    examples = _examples()
    files = {f"example_{i}.py": PRELUDE + code for i, (_, code) in enumerate(examples)}
    result = _mypy(tmp_path, files)
    where = {f"example_{i}.py": name for i, (name, _) in enumerate(examples)}
    report = "\n".join(re.sub(r"^(example_\d+\.py)", lambda m: where[m.group(1)], line)
                       for line in result.stdout.splitlines())
    assert result.returncode == 0, report + result.stderr


def test_nothing_public_is_any(tmp_path):
    names = [n for n in vramkit.__all__ if n != "__version__"]
    code = "import vramkit\n\n" + "".join(f"reveal_type(vramkit.{n})\n" for n in names) + textwrap.dedent("""
        reveal_type(vramkit.estimate("bert-base-uncased", batch=4))
        reveal_type(vramkit.snapshot(simulate="demo"))
        reveal_type(vramkit.kill([1], dry_run=True))
        reveal_type(vramkit.plan("gpt2"))
        """)
    result = _mypy(tmp_path, {"reveal.py": code})
    assert result.returncode == 0, result.stdout + result.stderr
    revealed = re.findall(r'Revealed type is "(.*)"', result.stdout)
    assert len(revealed) == len(names) + 4, result.stdout
    for name, kind in zip([*names, "estimate()", "snapshot()", "kill()", "plan()"], revealed):
        assert "Any" not in kind.replace("typing.Any", "Any").split("->")[-1], (name, kind)
    assert revealed[-4:] == ["vramkit.estimator.analytic.Estimate", "vramkit.gpu_state.Snapshot",
                             "vramkit.killing.model.KillReport", "vramkit.estimator.planner.Plan"]
    assert revealed[names.index("VramkitError")].endswith("-> vramkit.errors.VramkitError")


IMPLEMENTATIONS = {"snapshot": "machine", "open_machine": "machine", "kill": "killing",
                   "estimate": "estimator.analytic", "plan": "estimator.planner", "trace_memory": "estimator.trace",
                   "select_gpus": "allocate", "use_gpus": "allocate"}


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_a_public_function_has_its_implementation_s_signature(name):
    from importlib import import_module

    implementation = getattr(import_module(f"vramkit.{IMPLEMENTATIONS[name]}"), name)
    assert inspect.signature(getattr(vramkit, name)) == inspect.signature(implementation)


def test_the_error_base_is_at_the_top():
    from vramkit.errors import VramkitError

    assert vramkit.VramkitError is VramkitError
    for name in ("RequestError", "NvmlUnavailable", "ScenarioError", "KillRequestError", "EstimateError",
                 "ProtectConfigError", "AuditError", "NoGpusAvailable", "WaitTimedOut", "CudaAlreadyInitialized"):
        assert issubclass(getattr(vramkit, name), VramkitError), name
