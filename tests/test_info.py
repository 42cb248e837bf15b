"""vram info (issue 17): a page per GPU as nvidia-smi -q lists it, on the bundled 'unhealthy' and
'faulty' scenarios and a scenario with a topology; --json as vram status --all's; bad input."""

from __future__ import annotations

import json
import re

import pytest
from helpers import clean_env, run_vram, run_vram_tty

COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def _page(out: str, index: int) -> list[str]:
    """The lines of GPU `index`'s page (from its heading to the next blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"GPU {index}"))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _field(page: list[str], label: str) -> str:
    return next(line[20:] for line in page if line[6:20].rstrip() == label)


def test_unhealthy_pages_show_health_and_own_utilization():
    r = run_vram("info", "--simulate", "unhealthy")
    assert r.rc == 0, r.err
    assert "SIMULATED machine (scenario 'unhealthy')" in r.out
    gpu1, gpu2, gpu3 = (_page(r.out, i) for i in (1, 2, 3))
    assert _field(gpu1, "throttled by") == "sw power cap"
    assert _field(gpu1, "clocks").startswith("sm 1095/1410 MHz")
    assert _field(gpu2, "ecc") == "on  uncorrected 2 (life 3)  corrected 1520 (life 4810)"
    assert _field(gpu2, "rows remapped").endswith("PENDING (reset the GPU)")
    assert _field(gpu2, "nvlink").startswith("10/12 links up")
    assert _field(gpu3, "clocks") == "sm 705/1410 MHz  mem 405/1593 MHz  P8"
    assert _field(gpu3, "modes") == "persistence off  compute exclusive process"
    assert _field(gpu3, "pcie").startswith("gen 1/4  x8/16")
    assert _field(gpu2, "memory used") == "24.0/80.0GiB (30%)"
    assert _field(gpu2, "utilization") == "gpu 35%  memory 20%"
    assert _field(gpu2, "fan") == "N/A (not supported)"
    # the process's own utilization, under a header
    header = next(i for i, line in enumerate(gpu2) if "SM%" in line)
    assert gpu2[header].split() == ["PID", "USER", "MEMORY", "SM%", "MBW%", "ENC%", "DEC%", "COMMAND"]
    assert gpu2[header + 1].split()[:7] == ["91002", "judy", "24.0GiB", "35%", "20%", "0%", "0%"]


def test_gpu_arguments_choose_pages_and_bad_ones_are_one_line():
    r = run_vram("info", "2", "0", "--simulate", "unhealthy")
    assert r.rc == 0, r.err
    assert [line.split()[1] for line in r.out.splitlines() if line.startswith("GPU ")] == ["0", "2"]
    assert "2 of 4 GPUs" in r.out
    for args, message in ((["9"], "vram: error: GPU: no GPU 9 (this machine has GPUs 0-3)"),
                          (["x"], "vram: error: GPU: 'x' is not a GPU list")):
        bad = run_vram("info", *args, "--simulate", "unhealthy")
        assert bad.rc == 2 and bad.out == ""
        assert bad.err.startswith(message) and bad.err.count("\n") == 1, bad.err


def test_json_gpu_objects_are_status_all_json():
    env = clean_env()
    info = run_vram("info", "--simulate", "unhealthy", "--json", env=env).json()
    status = run_vram("status", "--simulate", "unhealthy", "--all", "--json", env=env).json()
    assert set(info) - set(status) == {"topology"}
    for a, b in zip(info["gpus"], status["gpus"], strict=True):
        assert a.keys() == b.keys() and a["health"].keys() == b["health"].keys()
        # the NVLink rate is measured over the 0.2 s between two readings, and a made-up process's
        # start time is reckoned from the wall clock: the rest is equal
        for g in (a, b):
            g["health"].pop("nvlink_tx"), g["health"].pop("nvlink_rx")
            for p in g["processes"]:
                p.pop("start_time")
        assert a == b
    assert info["gpus"][2]["health"]["remap_pending"] is True
    assert info["topology"]["na"] == {"numa_node": "not supported", "pcie": "not supported"}


def test_faulty_fields_are_na_with_the_reason_and_a_lost_gpu_is_said():
    r = run_vram("info", "--simulate", "faulty")
    assert r.rc == 0, r.err
    assert "GPU 1  LOST  GPU is lost (fell off the bus or needs a reset)" in r.out.splitlines()
    gpu2, gpu3 = _page(r.out, 2), _page(r.out, 3)
    assert _field(gpu2, "ecc") == "N/A (no permission)"
    assert _field(gpu2, "temperature") == "N/A (not supported)"
    assert _field(gpu2, "power") == "N/A (not supported)"
    assert _field(gpu3, "utilization") == "gpu N/A (not supported)  memory N/A (not supported)"
    assert _field(gpu3, "reserved").startswith("N/A (not reported by this driver")
    assert "own utilization N/A (not supported)" in "\n".join(gpu3)
    assert re.search(r"80005\s+henry\s+8\.0GiB\s+N/A\s+N/A\s+N/A\s+N/A", "\n".join(gpu3))
    # another user's command is printed without its escape sequences
    assert "\x1b" not in r.out


def test_topology_links_and_numa_node(tmp_path):
    matrix = ["X    NV4  SYS", "NV4  X    SYS", "SYS  SYS  X"]
    scenario = {"name": "topo", "topology": matrix,
                "gpus": [{"memory_total": "80GiB", "numa_node": i // 2} for i in range(3)], "processes": []}
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(scenario))
    r = run_vram("info", "--simulate", str(path))
    assert r.rc == 0, r.err
    assert _field(_page(r.out, 0), "links") == "GPU 1 NV4, GPU 2 SYS"
    assert _field(_page(r.out, 2), "numa node") == "1"
    assert _field(_page(r.out, 2), "processes") == "none"
    # with one GPU chosen, its links to the others are still shown
    assert _field(_page(run_vram("info", "1", "--simulate", str(path)).out, 1), "links") == "GPU 0 NV4, GPU 2 SYS"
    data = run_vram("info", "--simulate", str(path), "--json").json()
    assert data["topology"]["links"] == {"0-1": "NV4", "0-2": "SYS", "1-2": "SYS"}
    assert data["topology"]["numa_node"] == {"0": 0, "1": 0, "2": 1}


@pytest.mark.parametrize("index, label", [(1, "throttled by"), (2, "ecc"), (2, "rows remapped"), (3, "clocks")])
def test_what_doctor_flags_is_painted_on_a_terminal(index, label):
    r = run_vram_tty("info", str(index), "--simulate", "unhealthy", columns=120)
    line = next(line for line in r.out.splitlines() if COLOUR.sub("", line)[6:20].rstrip() == label)
    assert line.lstrip().startswith("\x1b[33m"), repr(line)
    healthy = run_vram_tty("info", "0", "--simulate", "unhealthy", columns=120)
    assert not any(line.lstrip().startswith("\x1b[33m") for line in healthy.out.splitlines())


def test_mig_mode_not_supported_and_refused_read_differently(monkeypatch):
    """A GPU without MIG reads 'not supported' (null in JSON, as documented); a refused reading
    keeps its reason in na, so vram info says why."""
    import json as _json

    from helpers import clean_env as _clean_env

    from vramkit.cli.main import main
    from vramkit.nvml.sim import SimulatedNvml

    def refused(self, handle):
        raise self._error(self.api.NVML_ERROR_NO_PERMISSION)

    monkeypatch.setattr(SimulatedNvml, "nvmlDeviceGetMigMode", refused)
    for key, value in _clean_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["info", "0", "--simulate", "demo", "--json"]) == 0
    gpu = _json.loads(out.getvalue())["gpus"][0]
    assert gpu["mig_enabled"] is None and gpu["na"]["mig_enabled"] == "no permission"
