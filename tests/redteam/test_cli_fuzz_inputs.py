"""Fuzzers for unbounded and odd inputs (issue 13 item 7), kept as tests: random mutations of the
bundled scenarios (values replaced with huge, negative, NaN, deeply nested or odd-typed ones) run
through `vram sim validate` and `vram status --simulate`, and random arguments for status, ps,
pick, kill --dry-run, doctor and estimate. Fixed seeds, bounded counts.

Whatever the input: exit 0, 1 or 2; never a traceback or an internal error; on exit 2 at most
one line on stderr. Most runs are in-process (vramkit.cli.main.main); a few go through a child
process, as a user runs vram.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from helpers import SCENARIO_DIR, run_vram

SCENARIOS = sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))
DEEP = "\x00DEEP\x00"  # a placeholder replaced by deep nesting once the JSON text is written

ODD_VALUES: list[Any] = [
    10**400, -(10**400), 10**19, -1, -1e300, 1e300, 1.7e308, float("nan"), float("inf"), float("-inf"),
    0, 0.0, True, None, "", " ", "x" * 5000, "9" * 400, "9" * 400 + "GiB", "-5GiB", "1e999", "nan", "inf",
    "\u202e\u0000\x1b[2J", [], {}, [1, 2], {"timeline": []}, {"timeline": [[0, 1], [-1, 2]]},
    {"timeline": [[1e300, 1]], "repeat": "1e-9"}, {"timeline": [[0, "9" * 400]]}, DEEP,
]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside `node` (keys and indices)."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(data: dict, rng: random.Random) -> str:
    """`data` with one to three values replaced by odd ones, as JSON text (NaN, Infinity as
    Python's json writes them; DEEP as 2,000 to 100,000 levels of nesting)."""
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(_paths(data)[1:])
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        value = rng.choice(ODD_VALUES)
        if rng.random() < 0.1 and isinstance(parent, dict):  # an unknown or an extra key
            parent[rng.choice(["x", "timeline", "_points", "9" * 30])] = value
        else:
            parent[path[-1]] = copy.deepcopy(value)
    text = json.dumps(data)
    depth = rng.choice([2_000, 100_000])
    return text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)


def check(argv: list[str], rc: int, err: str) -> None:
    what = f"vram {' '.join(a[:60] for a in argv)}"
    assert rc in (0, 1, 2), f"{what}: exit {rc}; {err[:500]!r}"
    assert "Traceback" not in err and "internal error" not in err, f"{what}: {err[:500]!r}"
    if rc == 2:
        assert len(err.splitlines()) <= 1, f"{what}: {err[:500]!r}"


@pytest.mark.parametrize("name", SCENARIOS)
def test_mutated_scenarios(cli, tmp_path, name):
    rng = random.Random(f"scenario-{name}-7")
    data = json.loads((SCENARIO_DIR / f"{name}.json").read_text())
    for i in range(60):
        path = tmp_path / f"m{i}.json"
        path.write_text(_mutate(data, rng))
        for argv in (["sim", "validate", str(path)], ["status", "--simulate", str(path), "--json"]):
            rc, _out, err = cli(*argv)
            check(argv, rc, err)


# ---------------------------------------------------------------- random arguments

GPU_LISTS = ["0", "0-3", "0-999999999999", "999999999-9999999999", "9" * 5000, "0-" + "9" * 400, "-1", "3-1",
             "", ",", "0,,1", "٣", "²", "0/9", "GPU-", "GPU-9f1c", "MIG-x", "x", "1e3", " 1 ", "0-", "-"]
NUMBERS = ["0", "1", "-1", "1e999", "nan", "inf", "-inf", "1e-9", "9" * 400, "9" * 5000, "abc", "", "0.5", "2"]
SIZES = ["20GiB", "9" * 400 + "GiB", "-5GiB", "1e999", "50%", "nan%", "101%", "", "x", "0"]
DURATIONS = ["1h", "9" * 400 + "s", "-1s", "1e300", "nan", "inf", "", "1h30m", "0"]

OPTIONS: dict[str, dict[str, list[str]]] = {
    "status": {"--gpu": GPU_LISTS, "--watch": ["inf", "nan", "1e-9", "-1", "0", "1e400", "abc"],
               "--json": [], "--csv": []},
    "ps": {"--gpu": GPU_LISTS, "--user": ["root", "", ",", "x" * 5000], "--sort": ["memory", "x", ""],
           "--holders": [], "--json": [], "--csv": []},
    "pick": {"": NUMBERS, "--min-free": SIZES, "--max-util": NUMBERS, "--exclude": GPU_LISTS,
             "--only": GPU_LISTS, "--exclusive": [], "--json": [], "--explain": []},
    "kill": {"": ["1", "0", "-1", "9" * 400, "abc"], "--gpu": GPU_LISTS, "--user": ["root", ""],
             "--idle": DURATIONS, "--zombie": [], "--holders": [], "--signal": ["TERM", "KILL", "99", "x"],
             "--timeout": DURATIONS, "--json": []},
    "doctor": {"--gpu": GPU_LISTS, "--pid": NUMBERS, "--json": [], "--no-live": []},
    "estimate": {"": ["gpt2", "llama2-7b", "7b", "9" * 18 + "b", "9" * 400 + "b", "x", "1e999b", ""],
                 "--batch": NUMBERS, "--seq": NUMBERS, "--gpus": NUMBERS, "--lora": NUMBERS,
                 "--grad-accum": NUMBERS, "--context-overhead": SIZES,
                 "--train": [], "--infer": [], "--json": []},
}


def _random_argv(rng: random.Random, command: str) -> list[str]:
    argv = [command]
    if command == "kill":
        argv.append("--dry-run")  # never a signal
    if command != "estimate":
        argv += ["--simulate", rng.choice(SCENARIOS)]
    options = OPTIONS[command]
    for flag in rng.sample(sorted(options), rng.randint(1, min(4, len(options)))):
        values = options[flag]
        if not values:
            argv.append(flag)
        elif flag == "":
            argv.append(rng.choice(values))
        else:
            argv.append(f"{flag}={rng.choice(values)}")
    return argv


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_random_arguments(cli, command):
    rng = random.Random(f"argv-{command}-7")
    for _ in range(80):
        argv = _random_argv(rng, command)
        rc, _out, err = cli(*argv)
        check(argv, rc, err)


@pytest.mark.parametrize("argv", [
    ["estimate", "9" * 400 + "b", "--infer"],
    ["estimate", "gpt2", "--infer", "--batch", "9" * 400],
    ["estimate", "llama2-7b", "--train", "--seq", "9" * 400],
    ["estimate", "gpt2", "--train", "--lora", "9" * 400],
], ids=["params", "batch", "seq", "lora"])
def test_estimate_with_huge_numbers(cli, argv):
    rc, _out, err = cli(*argv)
    check(argv, rc, err)


def test_random_arguments_through_a_child_process():
    """A few of the same, as a user runs them (the real stdin, stdout and exit)."""
    rng = random.Random("argv-subprocess-7")
    for command in ("status", "pick", "doctor", "estimate"):
        argv = _random_argv(rng, command)
        result = run_vram(*argv, timeout=60)
        check(argv, result.rc, result.err)
    for argv in (["status", "--simulate", "demo", "--gpu", "0-999999999999"],
                 ["doctor", "--simulate", "demo", "--watch", "nan"],
                 ["status", "--simulate", "demo", "--watch", "1e-9"]):
        result = run_vram(*argv, timeout=60)
        check(argv, result.rc, result.err)
        assert result.rc == 2
