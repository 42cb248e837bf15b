"""Red team: hostile values in a scenario's newer fields (health, topology, per-process utilization,
NUMA node). A scenario is another user's text: each bad value is one line naming the field and exit 2,
never a traceback, and text from it never reaches the terminal with a control character in it."""

from __future__ import annotations

import copy
import json
import unicodedata

import pytest
from helpers import assert_one_line_error, minimal_scenario, run_vram

from vramkit.nvml.scenario import ScenarioError, validate

ROWS = ["X NV12", "NV12 X"]


def _raw_controls(text: str) -> list[str]:
    """Characters a terminal acts on or that hide text, found independently of procs.sanitize."""
    return [hex(ord(c)) for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


def _with(path: str, value):
    data = minimal_scenario()
    data["topology"] = list(ROWS)
    *parents, last = path.split(".")
    obj = data
    for key in parents:
        obj = obj[int(key)] if isinstance(obj, list) else obj.setdefault(key, {})
    obj[int(last) if isinstance(obj, list) else last] = copy.deepcopy(value)
    return data


HOSTILE = [
    # numbers: negative, huge, non-finite, of the wrong type
    ("gpus.0.health.ecc_corrected_volatile", -1, "gpus[0].health.ecc_corrected_volatile"),
    ("gpus.0.health.ecc_uncorrected_aggregate", 10**40, "gpus[0].health.ecc_uncorrected_aggregate"),
    ("gpus.0.health.remapped_rows_correctable", float("nan"), "gpus[0].health.remapped_rows_correctable"),
    ("gpus.0.health.sm_clock", float("inf"), "gpus[0].health.sm_clock"),
    ("gpus.0.health.sm_clock", 5000, "gpus[0].health.sm_clock"),  # above its sm_clock_max
    ("gpus.0.health.performance_state", 16, "gpus[0].health.performance_state"),
    ("gpus.0.health.performance_state", {"timeline": [[0, 0], [float("nan"), 3]]}, "performance_state.timeline"),
    ("gpus.0.health.pcie_width", "16", "gpus[0].health.pcie_width"),
    ("gpus.0.health.pcie_tx", -5, "gpus[0].health.pcie_tx"),
    ("gpus.0.health.pcie_tx", "1e999GiB", "gpus[0].health.pcie_tx"),
    ("gpus.0.health.nvlink_links_up", 13, "gpus[0].health.nvlink_links_up"),  # more than its 12 links
    ("gpus.0.health.nvlink_links", 4, "gpus[0].health.nvlink_links"),  # fewer than the topology's NV12
    ("gpus.0.health.remap_pending", "yes", "gpus[0].health.remap_pending"),
    ("gpus.0.health.compute_mode", "exclusive thread", "gpus[0].health.compute_mode"),
    ("gpus.0.health.memory_errors", ["row_remapping"], "gpus[0].health.memory_errors"),
    ("gpus.0.health.voltage", 1, "gpus[0].health"),  # an unknown field
    # throttle reasons: unknown words, wrong types
    ("gpus.0.health.throttle_reasons", ["sw power cap", "made up"], "gpus[0].health.throttle_reasons"),
    ("gpus.0.health.throttle_reasons", "sw power cap", "gpus[0].health.throttle_reasons"),
    ("gpus.0.health.throttle_reasons", [4], "gpus[0].health.throttle_reasons"),
    ("gpus.0.health.throttle_reasons", ["sw power cap\x1b[2J"], "gpus[0].health.throttle_reasons"),
    ("gpus.0.health", [], "gpus[0].health"),
    # utilization and NUMA node
    ("gpus.0.memory_utilization", 101, "gpus[0].memory_utilization"),
    ("gpus.0.memory_utilization", float("nan"), "gpus[0].memory_utilization"),
    ("gpus.0.numa_node", -2, "gpus[0].numa_node"),
    ("gpus.0.numa_node", 2.5, "gpus[0].numa_node"),
    ("processes.0.mem_util", -1, "processes[0].mem_util"),
    ("processes.0.enc_util", 1e300, "processes[0].enc_util"),
    ("processes.0.dec_util", [50], "processes[0].dec_util"),
    # topology: inconsistent, asymmetric, oversized, self-links, wrong words and types
    ("topology", ["X NV12 SYS", "NV12 X SYS", "SYS SYS X"], "topology"),  # a row per GPU: 2, not 3
    ("topology", ["X NV12", "NV4 X"], "topology[1][0]"),  # asymmetric
    ("topology", ["X SYS", "PIX X"], "topology[1][0]"),
    ("topology", ["NV12 NV12", "NV12 X"], "topology[0][0]"),  # a link to itself
    ("topology", ["X X", "X X"], "topology[0][1]"),
    ("topology", ["X NV0", "NV0 X"], "topology[0][1]"),
    ("topology", ["X NV100", "NV100 X"], "topology[0][1]"),
    ("topology", ["X nv12", "nv12 X"], "topology[0][1]"),
    ("topology", ["X NV12 SYS", "NV12 X"], "topology[0]"),  # a row too long
    ("topology", ["X \u202eSYS", "SYS X"], "topology[0][1]"),
    ("topology", [["X", 12], ["NV12", "X"]], "topology[0]"),
    ("topology", [["X", ["NV12"]], ["NV12", "X"]], "topology[0]"),
    ("topology", ["X SYS"] * 100_000, "topology"),  # oversized
    ("topology", "X NV12 NV12 X", "topology"),
]


@pytest.mark.parametrize("path, value, field", HOSTILE, ids=[f"{p}={str(v)[:30]}" for p, v, _ in HOSTILE])
def test_a_hostile_value_is_one_line_naming_its_field(path, value, field):
    with pytest.raises(ScenarioError) as e:
        validate(_with(path, value), "s.json")
    message = str(e.value)
    assert field in message and "\n" not in message and len(message) < 600
    assert not _raw_controls(message)


@pytest.mark.parametrize("path, value, field", [HOSTILE[i] for i in (2, 17, 30, 33, 39)])
def test_the_cli_says_it_in_one_line_and_exits_2(write_scenario, path, value, field):
    text = json.dumps(_with(path, value))  # NaN as JSON's NaN literal, as a hostile file would have it
    result = run_vram("--simulate", str(write_scenario(text)), "status", "--health")
    assert_one_line_error(result, 2, field)
    assert not _raw_controls(result.err)


def test_the_good_topology_and_health_are_accepted():
    """The base every hostile case changes one thing of is valid: the refusals are the values' doing."""
    data = _with("gpus.0.health.throttle_reasons", ["sw power cap", "hw slowdown"])
    scenario = validate(data, "s.json")
    assert scenario.gpus[0]["topology"] == ["X", "NV12"] and scenario.gpus[0]["health"]["nvlink_links"] == 12


@pytest.mark.parametrize("path, text", [
    ("name", "evil\x1b]0;title\x07\u202e"),
    ("description", "\x1b[2J\x9b31m\u2028"),
    ("gpus.0.name", "A100\x1b[31m\u200b"),
    ("processes.0.command", "python\x1b]52;c;ZXZpbA==\x07 train.py"),
    ("processes.0.user", "\x1b[31mroot"),
])
def test_text_with_escapes_is_refused_or_printed_sanitized(write_scenario, path, text):
    """Either the scenario is refused in one line (the text escaped in it), or every view prints it
    with the control characters replaced."""
    scenario = str(write_scenario(_with(path, text)))
    for argv in (["status", "--health"], ["ps"], ["info"], ["pick"], ["doctor"]):
        result = run_vram("--simulate", scenario, *argv)
        assert "Traceback" not in result.err and not _raw_controls(result.out + result.err), (argv, result.err)
        if result.rc == 2:
            assert_one_line_error(result, 2, path.rsplit(".", 1)[-1])
            break
        assert result.rc in (0, 1), (argv, result.err)
