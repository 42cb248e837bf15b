"""Malformed scenarios: each gives one line on stderr naming the file and the field, exit 2,
no traceback. Also `vram sim validate` and `vram sim list`."""

from __future__ import annotations

import json

import pytest
from helpers import SCENARIO_DIR, assert_one_line_error, clean_env, minimal_scenario, run_vram, scenario_data


def _set(path: str, value):
    """A mutation of minimal_scenario(): set a dotted path (list indices as numbers)."""
    def mutate(data):
        *parents, last = path.split(".")
        obj = data
        for key in parents:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        obj[int(last) if isinstance(obj, list) else last] = value
    return mutate


def _duplicate_gpu_uuid(data):
    data["gpus"][1]["uuid"] = data["gpus"][0]["uuid"]


def _duplicate_pid(data):
    data["processes"][1]["pid"] = data["processes"][0]["pid"]


def _oversubscribed(data):
    data["processes"][0]["gpus"]["0"] = "50GiB"
    data["processes"][1]["gpus"] = {"0": "40GiB"}


def _whitespace_command(data):
    data["processes"][0]["command"] = "   "


# (id, mutation, needles the one line must contain)
CASES = [
    ("memory_total-list", _set("gpus.0.memory_total", [80]), ["gpus[0].memory_total", "size"]),
    ("memory_total-missing", lambda d: d["gpus"][0].pop("memory_total"), ["gpus[0].memory_total", "required"]),
    ("memory_total-zero", _set("gpus.0.memory_total", 0), ["gpus[0].memory_total"]),
    ("memory_total-garbage", _set("gpus.0.memory_total", "lots"), ["gpus[0].memory_total", "not a size"]),
    ("utilization-string", _set("gpus.0.utilization", "high"), ["gpus[0].utilization", "number"]),
    ("utilization-over-100", _set("gpus.0.utilization", 101), ["gpus[0].utilization", "at most 100"]),
    ("temperature-bool", _set("gpus.1.temperature", True), ["gpus[1].temperature", "number"]),
    ("negative-memory_total", _set("gpus.0.memory_total", "-80GiB"), ["gpus[0].memory_total", "negative"]),
    ("negative-process-memory", _set("processes.0.gpus", {"0": -5}), ["processes[0].gpus.0", "negative"]),
    ("negative-power", _set("gpus.0.power", -1), ["gpus[0].power", "at least 0"]),
    ("memory_used-over-total", _set("gpus.0.memory_used", "81GiB"),
     ["gpus[0].memory_used", "more than memory_total"]),
    ("memory_used-below-processes", _set("gpus.0.memory_used", "1GiB"), ["gpus[0].memory_used", "processes hold"]),
    ("memory_reserved-over-total", _set("gpus.0.memory_reserved", "100GiB"), ["gpus[0].memory_reserved"]),
    ("unknown-top-level", _set("colour", "red"), ["colour", "unknown field"]),
    ("unknown-in-gpu", _set("gpus.1.colour", "red"), ["gpus[1].colour", "unknown field"]),
    ("unknown-in-process", _set("processes.0.colour", "red"), ["processes[0].colour", "unknown field"]),
    ("duplicate-gpu-uuid", _duplicate_gpu_uuid, ["gpus[1].uuid", "duplicate"]),
    ("duplicate-pci", _set("gpus.1.pci_bus_id", "00000000:07:00.0"), ["gpus[1].pci_bus_id", "duplicate"]),
    ("duplicate-pid", _duplicate_pid, ["processes[1].pid", "duplicate pid 101"]),
    ("process-on-missing-gpu", _set("processes.0.gpus", {"5": "1GiB"}), ["processes[0].gpus.5", "no GPU 5"]),
    ("process-gpu-key-garbage", _set("processes.0.gpus", {"first": "1GiB"}), ["processes[0].gpus.first"]),
    ("processes-over-memory_total", _oversubscribed, ["gpus[0]", "processes hold 90.0GiB", "memory_total"]),
    ("process-over-memory_total", _set("processes.0.gpus", {"0": "81GiB"}), ["gpus[0]", "processes hold"]),
    # Reserved memory is not there for processes (the view would show less used than they hold).
    ("processes-over-total-less-reserved", lambda d: d["gpus"][0].update(memory_reserved="1GiB") or
     d["processes"][0]["gpus"].update({"0": "80GiB"}), ["gpus[0]", "processes hold 80.0GiB", "memory_reserved"]),
    ("memory_used-plus-reserved", lambda d: d["gpus"][0].update(memory_reserved="1GiB", memory_used="80GiB"),
     ["gpus[0].memory_used", "memory_reserved"]),
    ("pid-zero", _set("processes.0.pid", 0), ["processes[0].pid"]),
    ("pid-string", _set("processes.0.pid", "101"), ["processes[0].pid", "integer"]),
    ("pid-missing", lambda d: d["processes"][0].pop("pid"), ["processes[0].pid", "required"]),
    ("bad-state", _set("processes.0.state", "asleep"), ["processes[0].state"]),
    ("bad-source", _set("processes.0.source", "imaginary"), ["processes[0].source"]),
    ("real-with-host-fields", _set("processes.0.source", "real"), ["processes[0].command", "synthetic"]),
    ("bad-uuid", _set("gpus.0.uuid", "1234"), ["gpus[0].uuid", "GPU-"]),
    ("bad-pci", _set("gpus.0.pci_bus_id", "07:00"), ["gpus[0].pci_bus_id"]),
    ("gpus-empty", _set("gpus", []), ["gpus", "non-empty list"]),
    ("gpus-object", _set("gpus", {"0": {}}), ["gpus", "non-empty list"]),
    ("gpu-not-object", _set("gpus.1", "A100"), ["gpus[1]", "object"]),
    ("processes-not-list", _set("processes", {}), ["processes", "list"]),
    ("unsupported-not-list", _set("gpus.0.unsupported", "fan"), ["gpus[0].unsupported"]),
    ("unsupported-unknown", _set("gpus.0.unsupported", ["colour"]), ["gpus[0].unsupported"]),
    ("bad-driver-fault", _set("faults", {"driver": "broken"}), ["faults.driver"]),
    ("bad-nvml-api", _set("nvml_api", {"process_info": "v9"}), ["nvml_api.process_info"]),
    ("bad-age", _set("processes.0.age", "yesterday"), ["processes[0].age", "not a duration"]),
    ("exit-before-start", lambda d: d["processes"][0].update(start_at=10, exit_at=5), ["processes[0].exit_at"]),
    ("timeline-decreasing", _set("gpus.0.utilization", {"timeline": [[5, 1], [2, 3]]}),
     ["gpus[0].utilization.timeline[1]", "decrease"]),
    ("timeline-empty", _set("gpus.0.utilization", {"timeline": []}), ["gpus[0].utilization.timeline"]),
    ("timeline-bad-point", _set("gpus.0.temperature", {"timeline": [[0, 40], [5]]}),
     ["gpus[0].temperature.timeline[1]"]),
    ("timeline-over-total", _set("processes.0.gpus", {"0": {"timeline": [[0, "1GiB"], [9, "99GiB"]]}}),
     ["gpus[0]", "processes hold"]),
    ("mig-over-total", _set("gpus.0.mig", [{"gi": 1, "memory_total": "50GiB"}, {"gi": 2, "memory_total": "50GiB"}]),
     ["gpus[0].mig", "add up"]),
    ("mig-whole-gpu-key", _set("gpus.0.mig", [{"gi": 1, "memory_total": "40GiB"}]),
     ["processes[0].gpus.0", "MIG mode"]),
    # Values that crashed the validator before (internal error instead of one line):
    ("unsupported-nested-list", _set("gpus.0.unsupported", [["fan"]]), ["gpus[0].unsupported"]),
    ("source-list", _set("processes.0.source", ["real"]), ["processes[0].source"]),
    ("type-object", _set("processes.0.type", {"compute": True}), ["processes[0].type"]),
    ("state-list", _set("processes.0.state", ["zombie"]), ["processes[0].state"]),
    ("whitespace-command", _whitespace_command, ["processes[0].command", "non-empty"]),
    ("name-not-string", _set("name", ["tiny"]), ["name", "string"]),
    # Driver-side text is printed as is (the banner, the GPU line): no terminal escapes in it.
    ("name-with-escape", _set("name", "tiny\u001b[2J"), ["name", "control characters"]),
    ("gpu-name-with-escape", _set("gpus.0.name", "A100\u001b]0;pwned\u0007"), ["gpus[0].name", "control"]),
    ("driver_version-newline", _set("driver_version", "550\nfake line"), ["driver_version", "control"]),
    ("container-with-escape", _set("processes.0.container", "\u001b[31mabc"), ["processes[0].container"]),
]


def _bad_file(write_scenario, mutate) -> str:
    data = minimal_scenario()
    mutate(data)
    return str(write_scenario(data))


@pytest.mark.slow
@pytest.mark.parametrize("mutate, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_scenario(write_scenario, mutate, needles):
    path = _bad_file(write_scenario, mutate)
    line = assert_one_line_error(run_vram("status", "--simulate", path), 2, *needles)
    assert line.startswith(f"vram: bad scenario: {path}: ")


@pytest.mark.parametrize("literal, needles", [
    ('{"gpus": [{"memory_total": Infinity}]}', ["gpus[0].memory_total"]),
    ('{"gpus": [{"memory_total": "80GiB", "utilization": NaN}]}', ["gpus[0].utilization"]),
    ('{"gpus": [{"memory_total": "80GiB", "power_limit": Infinity}]}', ["gpus[0].power_limit"]),
    ('{"gpus": [{"memory_total": "80GiB"}], "processes": [{"pid": 5, "age": Infinity, "gpus": {"0": 1}}]}',
     ["processes[0].age"]),
], ids=["memory_total-inf", "utilization-nan", "power_limit-inf", "age-inf"])
def test_non_finite_numbers(write_scenario, literal, needles):
    # Python's json module reads Infinity and NaN; a scenario must not smuggle them in.
    path = str(write_scenario(literal))
    assert_one_line_error(run_vram("status", "--simulate", path), 2, *needles)


def test_the_minimal_scenario_is_valid(write_scenario):
    # Guards the table above: every failure comes from its one mutation.
    path = str(write_scenario(minimal_scenario()))
    snap = run_vram("status", "--simulate", path, "--json").json()
    assert snap["scenario"] == "tiny"
    assert [g["memory_used"] for g in snap["gpus"]] == [10 * 1024**3, 5 * 1024**3]


def test_a_full_gpu_is_valid(write_scenario):
    data = minimal_scenario()
    data["gpus"][0]["memory_reserved"] = "1GiB"
    data["processes"][0]["gpus"]["0"] = "79GiB"
    gpu = run_vram("status", "--simulate", str(write_scenario(data)), "--json").json()["gpus"][0]
    assert gpu["memory_used"] == 79 * 1024**3 == gpu["processes"][0]["memory"]
    assert gpu["memory_free"] == 0


def test_many_gpus_without_pci_ids_get_unique_ones(write_scenario):
    # The generated PCI id once wrapped at the 16th GPU ("duplicate PCI bus id 00000000:10:00.0").
    gpus = 64
    data = {"name": "big", "gpus": [{"memory_total": "80GiB"} for _ in range(gpus)],
            "processes": [{"pid": 100 + i, "user": "ann", "command": "python a.py", "gpus": {str(i): "1GiB"}}
                          for i in range(gpus)]}
    snap = run_vram("status", "--simulate", str(write_scenario(data)), "--json").json()
    ids = [g["pci_bus_id"] for g in snap["gpus"]]
    assert len(set(ids)) == gpus
    assert ids[0] == "00000000:10:00.0" and ids[14] == "00000000:F0:00.0"  # as before for the first 15
    assert ids[15] == "00000001:10:00.0" and ids[63] == "00000004:40:00.0"  # then the next PCI domain
    # NVML looks a GPU up by the last 12 characters of its id: those are unique too.
    assert len({i[-12:] for i in ids}) == gpus


def test_bad_json(write_scenario):
    path = str(write_scenario('{"gpus": [ {"memory_total": "80GiB"},, ]}'))
    assert_one_line_error(run_vram("status", "--simulate", path), 2, path, "not valid JSON", "line 1")


def test_empty_file(write_scenario):
    path = str(write_scenario(""))
    assert_one_line_error(run_vram("status", "--simulate", path), 2, "not valid JSON")


def test_not_utf8(write_scenario, tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"name": "caf\xe9", "gpus": []}')
    assert_one_line_error(run_vram("status", "--simulate", str(path)), 2, "cannot read")


@pytest.mark.parametrize("top", [[], ["gpus"], "gpus", 42, None])
def test_top_level_not_an_object(write_scenario, top):
    path = str(write_scenario(json.dumps(top)))
    assert_one_line_error(run_vram("status", "--simulate", path), 2, "top level must be an object")


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.json")
    assert_one_line_error(run_vram("status", "--simulate", path), 2, "no scenario", "nope.json", "not a file")


def test_unknown_bundled_name():
    line = assert_one_line_error(run_vram("status", "--simulate", "demoo"), 2, "no scenario 'demoo'")
    for name in ("demo", "faulty", "mig"):
        assert name in line  # the names that do exist


def test_a_directory_is_not_a_scenario(tmp_path):
    assert_one_line_error(run_vram("status", "--simulate", str(tmp_path)), 2, "no scenario")


def test_bad_scenario_from_the_environment(write_scenario):
    path = str(write_scenario(json.dumps({"gpus": [{"memory_total": "lots"}]})))
    assert_one_line_error(run_vram("ps", env=clean_env(VRAM_SIMULATE=path)), 2, "gpus[0].memory_total")


def test_debug_adds_the_traceback_for_a_bad_scenario(write_scenario):
    # --debug shows the traceback (as documented), then the same one line and exit code.
    path = str(write_scenario(json.dumps({"gpus": [{"memory_total": "lots"}]})))
    result = run_vram("status", "--simulate", path, "--debug")
    assert result.rc == 2 and result.out == ""
    assert result.err.startswith("Traceback") and "ScenarioError" in result.err
    assert result.err_lines[-1].startswith("vram: bad scenario: ") and "gpus[0].memory_total" in result.err_lines[-1]


# ---------------------------------------------------------------- vram sim validate / list

@pytest.mark.parametrize("name", ["demo", "mig", "faulty"])
def test_validate_bundled(name):
    data = scenario_data(name)
    result = run_vram("sim", "validate", name)
    assert result.rc == 0 and result.err == ""
    assert result.out.strip() == f"{name}: ok ({len(data['gpus'])} GPUs, {len(data['processes'])} processes)"


def test_validate_good_file(write_scenario):
    path = str(write_scenario(minimal_scenario()))
    result = run_vram("sim", "validate", path)
    assert result.rc == 0
    assert result.out.strip() == f"{path}: ok (2 GPUs, 2 processes)"


@pytest.mark.slow
@pytest.mark.parametrize("mutate, needles", [c[1:] for c in CASES[:6]], ids=[c[0] for c in CASES[:6]])
def test_validate_bad_file(write_scenario, mutate, needles):
    path = _bad_file(write_scenario, mutate)
    assert_one_line_error(run_vram("sim", "validate", path), 2, path, *needles)


def test_validate_missing_file(tmp_path):
    assert_one_line_error(run_vram("sim", "validate", str(tmp_path / "x.json")), 2, "no scenario")


def test_validate_needs_a_name():
    assert_one_line_error(run_vram("sim", "validate"), 2)


def _bundled() -> list[str]:
    """The bundled scenarios' names, from the files (another may be added at any time)."""
    names = sorted(p.stem for p in SCENARIO_DIR.glob("*.json"))
    assert {"demo", "faulty", "lab-day", "mig"} <= set(names)
    return names


def _machine(data: dict, key: str) -> list:
    """A scenario's GPUs or processes; a mixed one's are its two vendors' parts together."""
    if data.get("vendor") == "mixed":
        return data["nvidia"].get(key, []) + data["amd"].get(key, [])
    return data.get(key, [])


def test_sim_list():
    result = run_vram("sim", "list")
    assert result.rc == 0 and result.err == ""
    lines = result.out.splitlines()
    assert [line.split()[0] for line in lines] == _bundled()
    for line in lines:
        data = scenario_data(line.split()[0])
        assert f"{len(_machine(data, 'gpus'))} GPU" in line  # GPU or GPUs
        assert data["description"][:30] in line


def test_sim_list_json():
    rows = run_vram("sim", "list", "--json").json()
    assert [r["name"] for r in rows] == _bundled()
    for r in rows:
        data = scenario_data(r["name"])
        assert r["gpus"] == len(_machine(data, "gpus")) and r["processes"] == len(_machine(data, "processes"))
        assert r["description"] == data["description"]


def test_sim_needs_a_subcommand():
    assert_one_line_error(run_vram("sim"), 2, "COMMAND")
