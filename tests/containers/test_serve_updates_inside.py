"""vram serve's event stream inside a container: rows NVML lists under host pids that no process
here could be told to be (pid null) are told apart by their host pid, so the deltas the page
applies keep each once (keyed by pid alone, two such rows of one GPU were one key, and every
reading added one row more to the page's copy). The fixtures: conftest.py here."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from helpers import wait_for

from vramkit.serve.updates import process_key

READINGS = 6  # the whole JSON, then deltas from the reading before


def events(base: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The first `count` events of /api/v1/events: (kind, data)."""
    out: list[tuple[str, dict[str, Any]]] = []
    kind, data = "message", ""
    with urllib.request.urlopen(base + "/api/v1/events", timeout=30) as stream:
        while len(out) < count:
            line = stream.readline(1 << 24).decode()
            assert line, "the stream ended"
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif line == "\n" and data:
                out.append((kind, json.loads(data)))
                kind, data = "message", ""
    return out


def rows(doc: dict[str, Any]) -> list[list[tuple[str, str]]]:
    """Each GPU's rows as (pid, nvml_pid), as many times as the doc holds them."""
    return [sorted((str(p["pid"]), str(p["nvml_pid"])) for p in g["processes"]) for g in doc["gpus"]]


@pytest.mark.slow
def test_each_row_without_a_pid_here_stays_one_row_on_the_page(container, scenario, dev, env, children):
    first, first_host = container.start(dev / "nvidia1")  # two holders of GPU 1 here, and NVML lists a
    second, second_host = container.start(dev / "nvidia1")  # third pid outside: none can be told apart
    path = scenario({(first_host, first): {"1": "2GiB"}, (second_host, second): {"1": "4GiB"}})
    base = container.serve("--simulate", str(path), env=env, children=children)
    assert wait_for(lambda: _up(base), timeout=30)

    (kind, page), *deltas = events(base, READINGS)
    assert kind == "snapshot"
    want = [[], sorted(("None", str(pid)) for pid in (first_host, second_host, scenario.outside))]
    assert rows(page) == want
    for kind, delta in deltas:  # the rows' membership as the page follows it (app.js' applyDelta)
        assert kind == "delta"
        for i, change in delta.get("gpus", {}).items():
            gpu = page["gpus"][int(i)]
            gone = set(change.get("del", ()))
            gpu["processes"] = [p for p in gpu["processes"] if process_key(p) not in gone] + change.get("add", [])
        assert rows(page) == want, delta
    with urllib.request.urlopen(base + "/api/v1/snapshot", timeout=10) as r:
        assert rows(json.loads(r.read())) == want


def _up(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False
