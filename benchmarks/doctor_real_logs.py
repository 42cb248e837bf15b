"""vram doctor on out-of-memory logs people posted in public issue threads: how often it agrees
with how each thread was resolved (issue 28).

Every fixture in tests/fixtures/oom_real/ is a log (NAME.log, trimmed to the machine's output) with
a sidecar (NAME.json): where it came from, the thread's resolution, and what doctor should say:
`place` (the phase where the allocation failed, only where the log's frames or lines show it),
`cause`, and `fixes` (the fix ids that worked or match the resolution; empty where the thread
gives none). Doctor's library runs on each log as `vram doctor --no-live` does (find_oom, the
frames above the message, explain) and the script prints, per framework and in all:

- place right in N of M logs that show where it failed;
- cause right in N of M logs;
- the fix that worked among the first three in N of M logs whose thread names one.

`--held-out` prints the held-out logs' rows alone (the sidecars marked "held_out": not looked at
while the rules were written). `--list` prints each log's result. Run it against another tree with
PYTHONPATH=OTHER/src (the before of docs/doctor.md was f34eaf4).

    .venv/bin/python benchmarks/doctor_real_logs.py [--list] [--held-out]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "oom_real"
TOP = 3
TARGETS = {"place": 0.90, "cause": 0.90, "fix": 0.75}


@dataclass
class Result:
    name: str
    framework: str
    held_out: bool
    place: bool | None  # None: the log shows no place to name
    cause: bool
    fix: bool | None  # None: the thread names no fix
    said: str  # what doctor said, for --list


def cases() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for side in sorted(FIXTURES.glob("*.json")):
        meta = json.loads(side.read_text(encoding="utf-8"))
        text = side.with_suffix(".log").read_text(encoding="utf-8")
        out.append((side.stem, text, meta))
    return out


def fix_matches(got: str, wanted: str) -> bool:
    return got == wanted or (wanted.endswith("_") and got.startswith(wanted))


def judge(name: str, text: str, meta: dict[str, Any]) -> Result:
    from vramkit.doctor import traceback as tb
    from vramkit.doctor.explain import explain
    from vramkit.doctor.oom import find_oom

    expect = meta["expect"]
    framework = meta["framework"] + (" (notebook)" if meta.get("notebook") else "")
    wants_place = expect.get("place")
    wants_fix = expect.get("fixes") or []
    report = find_oom(text)
    if report is None:
        return Result(name, framework, meta.get("held_out", False), False if wants_place else None, False,
                      False if wants_fix else None, "no OOM found")
    if hasattr(tb, "place_of"):  # the frames above, below, and llama.cpp's log lines (issue 28)
        phase = tb.place_of(text, report.offset, report.kind) if report.offset is not None else None
    else:  # the trees before it: the frames above the message
        phase = tb.phase_of(tb.frames_before(text, report.offset)) if report.offset is not None else None
    ex = explain(report, None, phase=phase)
    place = None
    if wants_place:
        place = phase is not None and phase.id == wants_place
        if place and expect.get("evaluating") is not None:
            place = phase is not None and phase.evaluating == expect["evaluating"]
    top = [f.id for f in ex.fixes[:TOP]]
    fix = any(fix_matches(got, w) for got in top for w in wants_fix) if wants_fix else None
    said = f"{report.kind}, {ex.cause}, {phase.id if phase else '-'}, {', '.join(top)}"
    return Result(name, framework, meta.get("held_out", False), place, ex.cause == expect["cause"], fix, said)


def _count(rows: list[Result], what: str) -> tuple[int, int]:
    values = [getattr(r, what) for r in rows if getattr(r, what) is not None]
    return sum(values), len(values)


def _cell(rows: list[Result], what: str) -> str:
    right, of = _count(rows, what)
    return f"{right} of {of}" if of else "-"


def table(rows: list[Result]) -> list[str]:
    frameworks = sorted({r.framework for r in rows})
    lines = ["| framework | logs | place right | cause right | fix that worked in the first 3 |",
             "| --- | --- | --- | --- | --- |"]
    for fw in frameworks:
        part = [r for r in rows if r.framework == fw]
        lines.append(f"| {fw} | {len(part)} | {_cell(part, 'place')} | {_cell(part, 'cause')} | {_cell(part, 'fix')} |")
    total = []
    for what in ("place", "cause", "fix"):
        right, of = _count(rows, what)
        mark = "met" if of and right / of >= TARGETS[what] else "NOT MET"
        total.append(f"{right} of {of} ({100 * right / of:.0f}%, target {100 * TARGETS[what]:.0f}%: {mark})"
                     if of else "-")
    lines.append(f"| all | {len(rows)} | " + " | ".join(total) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="each log's result")
    parser.add_argument("--held-out", action="store_true", help="only the held-out logs")
    args = parser.parse_args(argv)
    rows = [judge(*case) for case in cases()]
    if args.held_out:
        rows = [r for r in rows if r.held_out]
    if args.list:
        for r in rows:
            marks = "".join("." if v is None else ("+" if v else "x") for v in (r.place, r.cause, r.fix))
            print(f"{marks} {r.name}: {r.said}")
        print()
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
