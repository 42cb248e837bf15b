"""docs/safety.md says what the code does: where the audit log of a kill goes (a real and a
simulated machine), and what a user holding the lease directory's locks can do to others."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vramkit import audit
from vramkit import leases as L

DOCS = Path(__file__).parents[2] / "docs"


def section(text: str, heading: str) -> str:
    """The text under `## heading`, up to the next `## `."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def slugs(text: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to '-'."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("simulated", [False, True])
def test_the_audit_log_is_where_the_doc_says(monkeypatch, tmp_path, simulated):
    """As an ordinary user (root's real log is /var/log/vramkit/audit.log, listed too), with the
    default state directory."""
    monkeypatch.delenv("VRAM_AUDIT_LOG", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(audit.os, "geteuid", lambda: 1000)
    where = "~/" + audit.default_path(simulated).relative_to(tmp_path).as_posix()
    assert where == ("~/.local/state/vramkit/audit-simulated.log" if simulated else "~/.local/state/vramkit/audit.log")
    places = section((DOCS / "safety.md").read_text(encoding="utf-8"), "The audit log").split("\n\n")[1]
    assert f"`{where}`" in places
    assert f"`{audit.SYSTEM_LOG}`" in places


def test_the_threat_model_says_what_holding_the_lease_locks_costs_others():
    threat = section((DOCS / "safety.md").read_text(encoding="utf-8"),
                     "Threat model: what another local user can do to you through vram")
    prose = " ".join(threat.split())
    assert "deny a GPU to everyone by holding its lock" in prose
    assert "every GPU only by holding every GPU's lock" in prose
    assert "names the holder" in prose
    # The directory lock: one wait of HOLD_PATIENCE, then vram goes around it.
    wait = re.search(r"Holding the lease directory's own lock costs each `vram run`/`pick` "
                     r"(\d+(?:\.\d+)?) seconds once", prose)
    assert wait and float(wait.group(1)) == L.HOLD_PATIENCE
    link = re.search(r"\(leases\.md#([a-z0-9-]+)\)", prose[wait.end():])
    assert link and link.group(1) == "locks-nobody-can-hold-the-machine-hostage"
    assert link.group(1) in slugs((DOCS / "leases.md").read_text(encoding="utf-8"))


def test_the_threat_model_gives_the_services_and_the_history_their_real_limits():
    from vramkit.history import paths, recorder
    from vramkit.serve import http, webconfig

    threat = " ".join(section((DOCS / "safety.md").read_text(encoding="utf-8"),
                              "Threat model: what another local user can do to you through vram").split())
    assert f"every {recorder.PUBLISH_EVERY:.0f} seconds when something changed" in threat
    published = paths.SYSTEM_DB
    assert f"`{paths.live_path(published)}`" in threat and f"`{published}`, a copy" in threat
    assert f"closed after {http.CLIENT_TIMEOUT:.0f} seconds" in threat
    assert f"with {http.MAX_CONNECTIONS:,} connections open ({http.MAX_PER_ADDRESS} from one address" in threat
    assert f"({http.MAX_STREAMS}, {http.MAX_STREAMS_PER_ADDRESS} from one address)" in threat
    assert f"after {'an hour' if http.STREAM_SECONDS == 3600 else '?'}" in threat
    assert f"last {webconfig.BasicAuth.MAX_FAILURES:,} refused ones" in threat
    anchor = re.search(r"\(\[above\]\(#([a-z0-9-]+)\)\)", threat)
    assert anchor and anchor.group(1) in slugs((DOCS / "safety.md").read_text(encoding="utf-8"))
