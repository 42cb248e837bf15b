"""benchmarks/validate_published.py: the published measurements and what the estimator makes of them.

The script runs as a user runs it (a subprocess); its table is parsed back and every number it
prints is recomputed here from the case's quoted setting with vramkit.estimate itself, so the table
can only say what the estimator returns. docs/estimation.md keeps the table verbatim.
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import vramkit
from vramkit.estimator.catalog import MODELS
from vramkit.estimator.specs import EstimateError, from_config

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "validate_published.py"
DOC = ROOT / "docs" / "estimation.md"
BYTES_PER = {"GB": 10**9, "GiB": 2**30, "MiB": 2**20, "MB": 10**6}
# what a source measured -> the Estimate fields whose sum stands for it (docs/estimation.md, "Moments and the
# peak"); optimum's benchmark adds to max_memory_allocated what nvidia-smi shows beyond max_memory_reserved
FIELD_FOR = {"max_memory_allocated": ("peak_bytes",), "max_memory_reserved": ("reserved_bytes",),
             "nvidia-smi": ("total_bytes",), "max_memory_allocated + non-PyTorch": ("peak_bytes", "context_bytes")}
ROW = re.compile(r"^  (?P<label>.{48}) (?P<family>\S+) +(?P<measured>[\d.]+) (?P<unit>GB|GiB|MiB|MB)"
                 r"(?: +(?P<ours>[\d.]+) (?P=unit) +(?P<error>[+-][\d.]+)%| needs (?P<needs>.+))$")


@pytest.fixture(scope="module")
def script() -> ModuleType:
    """The script as a module, for its CASES (dataclasses need it in sys.modules while it loads)."""
    spec = importlib.util.spec_from_file_location("validate_published", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.fixture(scope="module")
def output() -> str:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@pytest.fixture(scope="module")
def table(output: str) -> list[dict[str, Any]]:
    """The rows, each with the source block it stands in."""
    rows: list[dict[str, Any]] = []
    source: dict[str, str] = {}
    lines = output.splitlines()
    for number, line in enumerate(lines):
        if re.match(r"^\[\d+\] ", line):
            source = {"title": line.split("] ", 1)[1], "url": lines[number + 1].strip(),
                      "measured": lines[number + 3].strip().removeprefix("measured: ")}
        elif (match := ROW.match(line)) is not None:
            rows.append({**match.groupdict(), "label": match["label"].rstrip(), "source": source})
        elif line.startswith("  ") and source and not line.startswith("  case "):
            assert line.startswith("    "), f"a row the table's format does not parse: {line!r}"
    return rows


def test_the_table_covers_what_the_issue_asks(table: list[dict[str, Any]]) -> None:
    assert len(table) >= 25
    sources = {row["source"]["url"] for row in table}
    assert len(sources) >= 5
    assert all(re.match(r"https://\S+$", url) for url in sources)
    assert {row["source"]["measured"] for row in table} <= set(FIELD_FOR)
    assert len({row["family"] for row in table}) >= 6


def test_every_case_is_a_quoted_setting_with_its_source(script: ModuleType) -> None:
    module = script
    assert len(module.CASES) >= 25
    for case in module.CASES:
        assert case.source.url.startswith("https://"), case.label
        assert case.source.measured in FIELD_FOR, case.label
        assert case.published > 0, case.label
    labels = [(case.source.url, case.label) for case in module.CASES]
    assert len(labels) == len(set(labels)), "two cases of one source share a label"


def estimate_of(module: ModuleType, case: Any) -> Any:
    """vramkit.estimate for the case's model and options, spelled out here rather than through the
    script's own helpers."""
    if case.model in module.CONFIGS and case.model not in MODELS:
        model: Any = from_config(module.CONFIGS[case.model], name=case.model)
    else:
        model = case.model
    return vramkit.estimate(model, **case.options)


def test_every_printed_number_is_what_the_estimator_returns(table: list[dict[str, Any]], script: ModuleType) -> None:
    module = script
    assert len(table) == len(module.CASES)
    for row, case in zip(table, module.CASES):
        assert row["label"] == case.label
        assert row["source"]["url"] == case.source.url
        decimals = case.source.decimals
        assert row["measured"] == f"{case.published:.{decimals}f}"  # the number quoted, in the source's unit
        measured = case.published * BYTES_PER[row["unit"]]
        if row["needs"] is not None:
            # a case shown as "needs ..." really cannot be estimated yet
            with pytest.raises((TypeError, EstimateError)):
                estimate_of(module, case)
            continue
        result = estimate_of(module, case)
        ours = sum(getattr(result, name) for name in FIELD_FOR[case.source.measured])
        assert row["ours"] == f"{ours / BYTES_PER[row['unit']]:.{decimals}f}", case.label
        assert row["error"] == f"{100 * (ours - measured) / measured:+.1f}", case.label


def summary_numbers(output: str, table: list[dict[str, Any]]) -> tuple[float, float]:
    errors = [abs(float(row["error"])) for row in table if row["error"] is not None]
    match = re.search(r"^median \|error\| ([\d.]+)%, worst ([+-][\d.]+)% ", output, re.M)
    assert match, "no summary line"
    assert float(match[1]) == pytest.approx(statistics.median(errors), abs=0.051)
    assert abs(float(match[2])) == pytest.approx(max(errors), abs=0.051)
    return float(match[1]), abs(float(match[2]))


def test_the_summary_is_the_table_s(output: str, table: list[dict[str, Any]]) -> None:
    computed = [row for row in table if row["error"] is not None]
    counts = re.search(r"^(\d+) cases from (\d+) sources, (\d+) model families .*; (\d+) estimated, (\d+) need",
                       output, re.M)
    assert counts, "no counts line"
    assert [int(n) for n in counts.groups()] == [
        len(table), len({row["source"]["url"] for row in table}), len({row["family"] for row in table}),
        len(computed), len(table) - len(computed)]
    summary_numbers(output, table)


@pytest.mark.xfail(strict=True, reason="the issue's target is not met yet (docs/estimation.md lists the misses); "
                                       "when it is, this passes, fails as strict, and becomes a plain assertion")
def test_the_target_median_5_percent_every_case_within_15(output: str, table: list[dict[str, Any]]) -> None:
    median, worst = summary_numbers(output, table)
    assert median <= 5.0 and worst <= 15.0


def test_the_docs_show_the_table_as_it_is_printed(output: str) -> None:
    text = DOC.read_text()
    section = text.split("## Validation against measurements", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block, "docs/estimation.md: no ```text block in 'Validation against measurements'"
    assert block[1] == output, ("docs/estimation.md's table is not what the script prints now: "
                                "paste the output of python benchmarks/validate_published.py")
