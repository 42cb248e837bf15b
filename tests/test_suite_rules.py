"""Rules of the test suite itself."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent


def test_test_modules_import_helpers_not_conftest():
    # conftest.py is pytest's (fixtures, set-up); plain helpers are shared through helpers.py.
    pattern = re.compile(r"^\s*(from\s+\.?conftest\s+import|import\s+conftest)", re.MULTILINE)
    offenders = [p.name for p in sorted(TESTS.glob("*.py")) if pattern.search(p.read_text())]
    assert offenders == [], f"use `from helpers import ...` in {offenders}"
