"""contrib/prometheus/vram-alerts.yml: promtool accepts the rules, and its unit tests
(vram-alerts.test.yml) pass: every rule has a case where it fires and one where it stays quiet.
The rules only name series vram serve exports (docs/metrics.md lists them)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "contrib" / "prometheus" / "vram-alerts.yml"
TESTS = ROOT / "contrib" / "prometheus" / "vram-alerts.test.yml"
needs_promtool = pytest.mark.skipif(not shutil.which("promtool"), reason="needs promtool (Debian package 'prometheus')")


@needs_promtool
def test_promtool_checks_the_rules():
    result = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_pass():
    result = subprocess.run(["promtool", "test", "rules", TESTS.name], capture_output=True, text=True, cwd=TESTS.parent)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_rule_fires_once_and_stays_quiet_once_in_the_unit_tests():
    alerts = re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.M)
    assert len(alerts) >= 9
    cases = re.findall(r"alertname: (\w+), exp_alerts: (\[\]|\[\{)", TESTS.read_text())
    for alert in alerts:
        kinds = {kind for name, kind in cases if name == alert}
        assert kinds == {"[]", "[{"}, f"{alert}: needs a firing and a quiet case in {TESTS.name}"


def test_the_rules_name_only_documented_series():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"\b(vram_[a-z_]+)", RULES.read_text()))
    assert names and not sorted(n for n in names if f"`{n}`" not in doc)
    fleet = (ROOT / "docs" / "fleet.md").read_text()
    assert "contrib/prometheus/vram-alerts.yml" in fleet
