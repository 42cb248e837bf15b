"""AMD GPUs: the amdsmi import's failure, the two read paths agreeing, fdinfo's clients, a mixed host."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import run_vram, scenario_data

from vramkit.amd.smi import AmdSmiUnavailable, load_module
from vramkit.procs.fdinfo import drm_clients


def test_amdsmi_without_its_library_is_unavailable_and_prints_nothing(tmp_path, monkeypatch, capsys):
    """The real package prints two lines and raises KeyError when libamd_smi.so is missing."""
    pkg = tmp_path / "amdsmi"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "print('/opt/rocm/lib/libamd_smi.so: cannot open shared object file: No such file or directory')\n"
        "print('Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager')\n"
        "_libraries = {}\n_libraries['libamd_smi.so']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    try:
        load_module()
    except AmdSmiUnavailable as e:
        assert "KeyError" in str(e)
    else:
        raise AssertionError("an amdsmi without its library loaded")
    assert capsys.readouterr().out == ""


def _numbers(doc):
    return [(g["index"], g["uuid"], g["memory_total"], g["memory_used"], g["temperature"], g["power_limit"],
             [(m["gi"], m["uuid"], m["memory_total"]) for m in g["mig_devices"]],
             sorted((p["pid"], p["memory"], p["mig_gi"], p["user"]) for p in g["processes"])) for g in doc["gpus"]]


def test_amdsmi_and_sysfs_read_the_same_machine():
    env = {"VRAM_SIM_TIME": "10"}
    a = run_vram("status", "--simulate", "mi300x", "--json", env={**env, "VRAM_SIM_AMD": "amdsmi"})
    b = run_vram("status", "--simulate", "mi300x", "--json", env={**env, "VRAM_SIM_AMD": "sysfs"})
    assert a.rc == b.rc == 0, (a.err, b.err)
    assert _numbers(a.json()) == _numbers(b.json())
    gpus = a.json()["gpus"]
    assert len(gpus) == 8 and {g["vendor"] for g in gpus} == {"amd"}
    assert [len(g["mig_devices"]) for g in gpus] == [0] * 6 + [2, 8]  # GPU 6 in DPX, GPU 7 in CPX


def test_a_bad_read_path_is_one_line():
    result = run_vram("status", "--simulate", "mi300x", env={"VRAM_SIM_AMD": "rocm"})
    assert result.rc == 2 and "VRAM_SIM_AMD" in result.err and len(result.err.splitlines()) == 1


def test_fdinfo_counts_a_client_once_and_keeps_its_driver(tmp_path):
    info = ("pos:\t0\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:0C:00.0\ndrm-client-id:\t7\n"
            "drm-memory-vram:\t2048 KiB\ndrm-engine-gfx:\t5000 ns\ndrm-engine-compute:\t7 ns\n")
    fdinfo = tmp_path / "proc" / "42" / "fdinfo"
    fdinfo.mkdir(parents=True)
    (fdinfo / "5").write_text(info)
    (fdinfo / "6").write_text(info)  # a dup'ed descriptor: the same client
    (fdinfo / "7").write_text(info.replace("amdgpu", "i915").replace("\t7\n", "\t8\n"))
    (fdinfo / "8").write_text("pos:\t0\nflags:\t0100002\n")  # not a DRM file
    clients = drm_clients(42, str(tmp_path), "amdgpu")
    assert len(clients) == 1
    c = clients[0]
    assert (c.pdev, c.memory["vram"], c.engines) == ("0000:0c:00.0", 2 << 20, {"gfx": 5000, "compute": 7})
    assert len(drm_clients(42, str(tmp_path))) == 2
    assert drm_clients(43, str(tmp_path)) == []


def test_a_mixed_host_shows_both_vendors_numbered_in_turn():
    result = run_vram("status", "--simulate", "mixed", "--json")
    assert result.rc == 0, result.err
    gpus = result.json()["gpus"]
    assert [(g["index"], g["vendor"]) for g in gpus] == [(0, "nvidia"), (1, "nvidia"), (2, "amd"), (3, "amd")]
    assert [p["pid"] for g in gpus for p in g["processes"]] == [81234, 82345]
    assert json.dumps(gpus)  # plain data


HOLD = "import sys, time; files = [open(p) for p in sys.argv[1:]]; print('ready', flush=True); time.sleep(600)"


@pytest.mark.parametrize("path", ["amdsmi", "sysfs"])
def test_holders_of_kfd_and_render_nodes_are_found_by_gpu(children, write_scenario, tmp_path, path):
    """/dev/kfd serves every GPU, a render node one GPU or partition: ROCm's device N is renderD<128+N>
    (GPU 6's two DPX partitions are devices 6 and 7, so renderD135 is GPU 6)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ["kfd"] + [f"renderD{128 + n}" for n in range(16)]:
        (dev / name).write_text("")
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(dev / "kfd"), str(dev / "renderD129"),
                             str(dev / "renderD135")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    children.procs.append(proc)
    assert proc.stdout.readline().strip() == b"ready"
    data = scenario_data("mi300x")
    data["device_nodes"] = f"{dev}/*"
    scenario = write_scenario(data)
    result = run_vram("ps", "--simulate", str(scenario), "--holders", "--json", env={"VRAM_SIM_AMD": path})
    assert result.rc == 0, result.err
    holders = {h["pid"]: h for h in result.json()["holders"]}
    h = holders[proc.pid]
    assert h["gpus"] == [1, 6]
    assert h["devices"] == [str(dev / "renderD129"), str(dev / "renderD135"), str(dev / "kfd")]
