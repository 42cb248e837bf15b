"""The pynvml shim (`vram sim shim`) with the real peers: gpustat and nvitop run as programs, on
real processes, and must see the same machine as `vram status`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import reap, scenario_data

from vramkit.nvml.scenario import bundled_names
from vramkit.nvml.shim import MARKER, ShimError, write_shim

MiB = 2**20
GiB = 2**30
BIN = Path(sys.executable).parent


def _program(name: str, module: str) -> list[str]:
    """The peer's own command next to this Python (as a user runs it), else `python -m`."""
    script = BIN / name
    if script.exists():
        return [str(script)]
    pytest.importorskip(module)
    return [sys.executable, "-m", module]


def _run(cmd: list[str], shim: Path | None, scenario: str | Path | None, timeout: float = 60,
         check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VRAM_SIMULATE", "NO_COLOR")}
    if shim is not None:
        env["PYTHONPATH"] = str(shim)
    if scenario is not None:
        env["VRAM_SIMULATE"] = str(scenario)
    env["COLUMNS"] = "120"
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    if check:
        assert result.returncode == 0, f"{cmd} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr, result.stderr
    return result


def _vram(*args: str, scenario: Path | str | None = None) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "vramkit", *args], None, scenario, check=False)


# ---------------------------------------------------------------- the machine

@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """Three GPUs and five real processes (one of them exited before anyone looks)."""
    pytest.importorskip("pynvml")
    base = tmp_path_factory.mktemp("shim")
    children = [subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL) for _ in range(5)]
    try:
        a, b, c, d, gone = (p.pid for p in children)
        scenario = {
            "name": "shim-test",
            "gpus": [
                {"name": "NVIDIA A100-SXM4-80GB", "memory_total": "81920MiB", "memory_reserved": "519MiB",
                 "utilization": 80},
                {"name": "NVIDIA A100-SXM4-40GB", "memory_total": "40960MiB", "utilization": 0},
                # 8 GiB used, of which 2 GiB by the exited process: the rest is held outside any listed
                # process (another container, a leak)
                {"name": "NVIDIA A10", "memory_total": "24576MiB", "memory_used": "8GiB", "utilization": 12},
            ],
            "processes": [
                {"pid": a, "source": "real", "gpus": {"0": "10GiB", "1": "3000MiB"}},
                {"pid": b, "source": "real", "gpus": {"0": "4096MiB"}},
                {"pid": c, "source": "real", "type": "graphics", "gpus": {"2": "1234MiB"}},
                {"pid": d, "source": "real", "type": "both", "gpus": {"1": "20GiB"}},
                {"pid": gone, "source": "real", "gpus": {"0": "6GiB", "2": "2GiB"}},
            ],
        }
        paths = {"new": base / "new-driver.json", "old": base / "old-driver.json"}
        paths["new"].write_text(json.dumps(scenario))
        # A 470 driver: process info v2 (no _v3), memory info v1 (reserved memory counts as used).
        old = {**scenario, "driver_version": "470.223.02", "cuda_version": "11.4",
               "nvml_api": {"process_info": "v2", "memory_info": "v1"}}
        paths["old"].write_text(json.dumps(old))
        shim = write_shim(base / "shim").parent
        # The driver frees the memory of a process that exits: nobody may list it any more.
        children[-1].kill()
        children[-1].wait()
        yield {"scenarios": paths, "shim": shim, "live": {a, b, c, d}, "gone": gone, "graphics": c}
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait()


@pytest.fixture(scope="module", params=["new", "old"])
def driver(request, machine):
    """(scenario file, what vram says: per GPU (used, total, {pid: bytes})), for each driver."""
    path = machine["scenarios"][request.param]
    result = _vram("status", "--json", "--simulate", str(path))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    out = {}
    for g in data["gpus"]:
        procs = {p["pid"]: p["memory"] for p in g["processes"]}
        out[g["index"]] = (g["memory_used"], g["memory_total"], procs)
    # The fixture's own expectations, so that agreeing with vram means agreeing with the scenario.
    reserved = 519 * MiB if request.param == "old" else 0  # memory info v1 counts it as used
    assert out[0][0] == 10 * GiB + 4096 * MiB + reserved and out[0][1] == 81920 * MiB
    assert out[1][0] == 3000 * MiB + 20 * GiB
    assert out[2][0] == 6 * GiB  # the exited process's 2 GiB came free
    assert set(out[0][2]) | set(out[1][2]) | set(out[2][2]) == machine["live"]
    return path, out


# ---------------------------------------------------------------- the peers agree with vram

@pytest.mark.slow
def test_gpustat_sees_the_same_machine(machine, driver):
    # On the old driver gpustat's own v3 -> v2 fallback (a patched _nvmlGetFunctionPointer) must work.
    path, truth = driver
    result = _run([*_program("gpustat", "gpustat"), "--json"], machine["shim"], path)
    gpus = json.loads(result.stdout)["gpus"]
    assert len(gpus) == len(truth)
    for g in gpus:
        used, total, procs = truth[g["index"]]
        # gpustat reports MiB, rounded down
        assert (g["memory.used"], g["memory.total"]) == (used // MiB, total // MiB)
        seen = {p["pid"]: p["gpu_memory_usage"] for p in g["processes"]}
        assert seen == {pid: mem // MiB for pid, mem in procs.items()}
        assert machine["gone"] not in seen


NVITOP_API = textwrap.dedent("""
    import json
    from nvitop import Device
    out = []
    for d in Device.all():
        out.append({"index": d.index, "used": d.memory_used(), "total": d.memory_total(),
                    "procs": {p.pid: [p.gpu_memory(), p.type] for p in d.processes().values()}})
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_nvitop_api_sees_the_same_machine(machine, driver):
    # nvitop calls NVML's C functions itself (_nvmlGetFunctionPointer) for memory and process lists,
    # choosing the struct versions by which symbols the driver has.
    pytest.importorskip("nvitop")
    path, truth = driver
    result = _run([sys.executable, "-c", NVITOP_API], machine["shim"], path)
    devices = json.loads(result.stdout)
    assert len(devices) == len(truth)
    for d in devices:
        used, total, procs = truth[d["index"]]
        assert (d["used"], d["total"]) == (used, total)
        assert {int(pid): mem for pid, (mem, _) in d["procs"].items()} == procs
    types = {int(pid): t for d in devices for pid, (_, t) in d["procs"].items()}
    assert types[machine["graphics"]] == "G"


_SIZE = r"(\d+(?:\.\d+)?)(B|KiB|MiB|GiB|TiB)"
_UNITS = {"B": 1, "KiB": 2**10, "MiB": MiB, "GiB": GiB, "TiB": 2**40}


def _bytes(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit]


def test_nvitop_once_sees_the_same_machine(machine, driver):
    path, truth = driver
    result = _run([*_program("nvitop", "nvitop"), "-1", "--ascii"], machine["shim"], path)
    text = result.stdout
    # Device panel: "| 14336MiB / 80.00GiB |" in GPU order. nvitop rounds to 2 decimals of a GiB.
    memory = re.findall(rf"\|\s+{_SIZE} / {_SIZE}\s+\|", text)
    assert len(memory) == len(truth), text
    for (u, uu, t, tu), (used, total, _) in zip(memory, (truth[i] for i in sorted(truth))):
        assert abs(_bytes(u, uu) - used) <= 0.005 * GiB
        assert abs(_bytes(t, tu) - total) <= 0.005 * GiB
    # Process panel rows: "|   0    4594 C    root 10240MiB ..."
    rows = re.findall(rf"^\|\s+(\d+)\s+(\d+)\s+(C\+G|C|G|X)\s+\S+\s+{_SIZE}", text, re.M)
    seen = {(int(gpu), int(pid)): _bytes(n, unit) for gpu, pid, _, n, unit in rows}
    expected = {(i, pid): mem for i, (_, _, procs) in truth.items() for pid, mem in procs.items()}
    assert seen.keys() == expected.keys(), text
    for key, mem in expected.items():
        assert abs(seen[key] - mem) <= 0.005 * GiB
    assert not re.search(rf"\b{machine['gone']}\b", text)  # as a number of its own: not the 400 of "400W"


def _serves_nvidia(name: str) -> bool:
    return scenario_data(name).get("vendor") != "amd"  # an AMD machine has nothing NVML could show


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in bundled_names() if _serves_nvidia(n)])
def test_peers_run_on_every_bundled_scenario(tmp_path, name):
    shim = write_shim(tmp_path).parent
    _run([*_program("gpustat", "gpustat"), "--json"], shim, name)
    _run([*_program("nvitop", "nvitop"), "-1"], shim, name)


@pytest.mark.parametrize("name", [n for n in bundled_names() if not _serves_nvidia(n)])
def test_a_peer_on_an_amd_scenario_gets_one_line_not_a_traceback(tmp_path, name):
    shim = write_shim(tmp_path).parent
    result = _run([*_program("gpustat", "gpustat"), "--json"], shim, name, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [f"pynvml shim: {name}: a scenario of amd GPUs has no NVIDIA GPU "
                                                  "to serve through NVML"]


# ---------------------------------------------------------------- pynvml's own API through the shim

PYNVML_CHECKS = textwrap.dedent("""
    import json, pynvml as N
    out = {"file": N.__file__}
    try:
        N.nvmlDeviceGetCount()
    except N.NVMLError_Uninitialized:
        out["before_init"] = "uninitialized"
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    try:
        N.nvmlDeviceGetClockInfo(N.nvmlDeviceGetHandleByIndex(3), N.NVML_CLOCK_SM)  # faulty GPU 3: no clocks
    except N.NVMLError_NotSupported as e:
        out["clock"] = ["NotSupported", str(e)]
    try:
        N.nvmlDeviceGetHandleByIndex(1)
    except N.NVMLError_GpuIsLost as e:
        out["lost"] = ["GpuIsLost", str(e), type(e).__module__]
    try:
        N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)  # this old driver has only v1
    except N.NVMLError_FunctionNotFound:
        out["memory_v2"] = "FunctionNotFound"
    m = N.nvmlDeviceGetMemoryInfo(h)
    out["memory"] = [type(m).__name__, m.total, m.free, m.used]
    out["procs"] = sorted(p.pid for p in N.nvmlDeviceGetComputeRunningProcesses_v2(h))
    try:
        N.nvmlDeviceGetComputeRunningProcesses(h)  # pynvml asks for _v3, which a 470 driver lacks
    except N.NVMLLibraryMismatchError:
        out["unversioned"] = "NVMLLibraryMismatchError"
    pci = N.nvmlDeviceGetPciInfo(h)
    out["pci"] = [type(pci).__name__, pci.busId, pci.bus]
    u = N.nvmlDeviceGetUtilizationRates(h)
    out["util"] = [type(u).__name__, u.gpu, u.memory]
    out["lib"] = repr(N.nvmlLib)
    out["maps"] = "libnvidia-ml" in open("/proc/self/maps").read()
    N.nvmlShutdown()
    print(json.dumps(out))
""")


def test_pynvml_errors_and_structs_are_pynvmls_own(tmp_path):
    shim = write_shim(tmp_path).parent
    out = json.loads(_run([sys.executable, "-c", PYNVML_CHECKS], shim, "faulty").stdout)
    assert out["file"] == str(shim / "pynvml.py")
    assert out["before_init"] == "uninitialized"
    assert out["clock"] == ["NotSupported", "Not Supported"]
    assert out["lost"] == ["GpuIsLost", "GPU is lost", "pynvml"]
    assert out["memory_v2"] == "FunctionNotFound"
    # faulty GPU 0: 32 GiB, processes 10 + 4 GiB, memory info v1 (reserved counts as used)
    assert out["memory"] == ["c_nvmlMemory_t", 32 * GiB, 18 * GiB, 14 * GiB]
    assert out["procs"] == [80001, 80002]
    assert out["unversioned"] == "NVMLLibraryMismatchError"
    assert out["pci"] == ["nvmlPciInfo_t", "00000000:18:00.0", 0x18]
    assert out["util"] == ["c_nvmlUtilization_t", 64, 30]
    assert out["lib"] == "None" and out["maps"] is False  # no NVIDIA library was loaded


def test_nvitop_c_calls_on_faulty(tmp_path):
    # faulty's driver has process info v2 and memory info v1: nvitop picks them by symbol lookup.
    pytest.importorskip("nvitop")
    shim = write_shim(tmp_path).parent
    code = ("import json; from nvitop import Device; d = Device(0); "
            "print(json.dumps([d.memory_used(), d.memory_total(), sorted(d.processes())]))")
    used, total, pids = json.loads(_run([sys.executable, "-c", code], shim, "faulty").stdout)
    assert [used, total, pids] == [14 * GiB, 32 * GiB, [80001, 80002]]


def test_vramkit_found_from_a_python_without_it(tmp_path):
    # -S: no site processing, so no editable install of vramkit; only pynvml's own directory.
    import pynvml

    shim = write_shim(tmp_path).parent
    env_path = f"{shim}{os.pathsep}{Path(pynvml.__file__).resolve().parent}"
    code = "import pynvml, vramkit; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount(), vramkit.__file__)"
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": env_path, "VRAM_SIMULATE": "demo"})
    assert result.returncode == 0, result.stderr
    count, where = result.stdout.split()
    assert count == "8" and Path(where).is_file()


# ---------------------------------------------------------------- errors: one line, exit 2

@pytest.mark.parametrize("value, message", [
    (None, "pynvml shim: VRAM_SIMULATE is not set"),
    ("/no/such/scenario.json", "pynvml shim: bad scenario: no scenario '/no/such/scenario.json'"),
])
def test_shim_without_a_usable_scenario(tmp_path, value, message):
    shim = write_shim(tmp_path).parent
    result = _run([sys.executable, "-c", "import pynvml"], shim, value, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr


def test_shim_command_writes_and_explains(tmp_path):
    target = tmp_path / "new" / "dir"
    result = _vram("sim", "shim", str(target))
    assert result.returncode == 0, result.stderr
    assert (target / "pynvml.py").read_text().startswith(MARKER)
    assert f"export PYTHONPATH={target}" in result.stdout
    assert "export VRAM_SIMULATE=demo" in result.stdout
    # a scenario file given is checked and printed as an absolute path; rewriting a shim is fine
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"gpus": [{"memory_total": "16GiB"}]}))
    result = _run([sys.executable, "-m", "vramkit", "sim", "shim", str(target), "--simulate", str(scenario)],
                  None, None)
    assert f"export VRAM_SIMULATE={scenario}" in result.stdout


def test_shim_command_help_has_an_example():
    result = _vram("sim", "shim", "--help")
    assert result.returncode == 0
    assert "examples:" in result.stdout and "VRAM_SIMULATE=demo gpustat" in result.stdout


@pytest.mark.parametrize("setup", ["file", "foreign-pynvml", "bad-scenario"])
def test_shim_command_refuses_unusable_targets(tmp_path, setup):
    args = ["sim", "shim"]
    if setup == "file":
        (tmp_path / "f").write_text("x")
        args.append(str(tmp_path / "f"))
    elif setup == "foreign-pynvml":
        (tmp_path / "pynvml.py").write_text("# someone's own pynvml\n")
        args.append(str(tmp_path))
    else:
        args += [str(tmp_path / "d"), "--simulate", str(tmp_path / "missing.json")]
    result = _vram(*args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    if setup == "foreign-pynvml":
        assert (tmp_path / "pynvml.py").read_text() == "# someone's own pynvml\n"


def test_write_shim_refuses_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ShimError, match="not a directory"):
        write_shim(tmp_path / "f")



def test_bar1_memory_follows_the_large_bar_layout():
    # nvitop shows BAR1 for each MIG instance and cannot do without it; scenarios do not give it.
    from vramkit.nvml import scenario
    from vramkit.nvml.sim import SimHandle, SimulatedNvml

    sim = SimulatedNvml(scenario.load("mig"))
    sim.nvmlInit()
    whole = sim.nvmlDeviceGetBAR1MemoryInfo(SimHandle(1))
    assert whole.bar1Total == 128 * GiB and whole.bar1Used == 2 * MiB  # one process on GPU 1
    part = sim.nvmlDeviceGetBAR1MemoryInfo(SimHandle(0, 1))  # 3g.40gb: 40192 of 81559 MiB
    assert part.bar1Total == 128 * GiB * 40192 // 81559 // MiB * MiB
    assert part.bar1Free + part.bar1Used == part.bar1Total


# ---------------------------------------------------------------- vram sim spawn: real placeholders

DEMO_ZOMBIE = 29044  # carol's defunct process in demo.json


def _scenario_memory(name: str) -> dict[tuple[int, int], int]:
    """(GPU, scenario pid) -> bytes, from the bundled scenario's own JSON (t=0)."""
    from vramkit.units import parse_size

    data = json.loads((Path(__import__("vramkit").__file__).parent / "nvml" / "scenarios" / f"{name}.json").read_text())
    return {(int(gpu), p["pid"]): parse_size(mem) for p in data["processes"] if not p.get("start_at")
            for gpu, mem in p["gpus"].items() if isinstance(mem, str)}


def _spawned(tmp_path: Path, peer: list[str], scenario: str = "demo") -> tuple[str, dict[int, int]]:
    """Run `peer` under `vram sim spawn --simulate SCENARIO`; its stdout, and the placeholders'
    pids keyed by the scenario's (from the written file, which is matched entry by entry)."""
    shim = write_shim(tmp_path / "shim").parent
    out = tmp_path / "real.json"
    result = _run([sys.executable, "-m", "vramkit", "sim", "spawn", "--simulate", scenario, "-o", str(out),
                   "--", *peer], shim, None)
    written = json.loads(out.read_text())
    original = json.loads((Path(__import__("vramkit").__file__).parent / "nvml" / "scenarios"
                           / f"{scenario}.json").read_text())
    pids = {a["pid"]: b["pid"] for a, b in zip(original["processes"], written["processes"])}
    assert all(p["source"] == "real" for p in written["processes"]), written
    return result.stdout, pids


@pytest.mark.slow
def test_gpustat_lists_the_placeholders_of_demo(tmp_path):
    # Through the shim alone gpustat lists none of demo's processes: their pids are in no /proc.
    text, pids = _spawned(tmp_path, [*_program("gpustat", "gpustat"), "--json"])
    seen = {(g["index"], p["pid"]): p["gpu_memory_usage"] for g in json.loads(text)["gpus"] for p in g["processes"]}
    expected = {(gpu, pids[pid]): mem // MiB for (gpu, pid), mem in _scenario_memory("demo").items()}
    assert expected and {key: seen.get(key) for key in expected} == expected, (seen, expected)
    assert any(pid == pids[DEMO_ZOMBIE] for _, pid in seen)  # psutil finds a real zombie in /proc
    assert all(_state(real) is None for real in pids.values())  # all ended once spawn returned


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.mark.slow
def test_nvitop_lists_the_placeholders_of_demo(tmp_path):
    text, pids = _spawned(tmp_path, [*_program("nvitop", "nvitop"), "-1", "--ascii"])
    rows = re.findall(r"^\|\s+(\d+)\s+(\d+)\s+(C\+G|C|G|X)\s", text, re.M)
    seen = {(int(gpu), int(pid)) for gpu, pid, _ in rows}
    # nvitop leaves zombies out of its table (it does with real ones on a real driver too).
    expected = {(gpu, pids[pid]) for gpu, pid in _scenario_memory("demo") if pid != DEMO_ZOMBIE}
    assert expected <= seen, text
    assert all(_state(real) is None for real in pids.values())


def test_spawn_without_a_command_runs_until_sigterm_and_ends_its_placeholders(tmp_path):
    out = tmp_path / "real.json"
    proc = subprocess.Popen([sys.executable, "-m", "vramkit", "sim", "spawn", "--simulate", "demo", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()  # said once the file is written and every placeholder runs
        assert "placeholder processes stand in" in line and str(out) in line, line + proc.stderr.read()
        placeholders = json.loads(out.read_text())["processes"]
        states = {p["pid"]: _state(p["pid"]) for p in placeholders}
        now = {p["pid"] for p in placeholders if not p.get("start_at")}  # one of demo's starts at 20 s
        assert states and all(state in ("S", "Z") for state in states.values()), states
        assert list(states.values()).count("Z") == 1  # demo's one zombie is a real one
        # vram sees the placeholders as it would any real process: ps lists each of them.
        listed = {p["pid"] for p in json.loads(_vram("ps", "--json", scenario=out).stdout)["processes"]}
        assert listed == now
        proc.terminate()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        reap(proc)
    assert all(_state(pid) is None for pid in states), {pid: _state(pid) for pid in states}


def test_a_spawned_zombie_runs_no_kernels_as_the_scenario_s_does():
    # Its placeholder is a real pid, whose state the simulator does not read: it used to get its
    # GPU's utilization (GPU 5: 74%), so a defunct holder looked busy and was never flagged idle.
    def engines(result: subprocess.CompletedProcess) -> tuple[dict, list[dict]]:
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)["processes"]
        zombies = [r for r in rows if r["zombie"]]
        assert len(zombies) == 1 and zombies[0]["gpu"] == 5, rows
        return zombies[0], [r for r in rows if r["gpu"] == 5 and not r["zombie"]]

    keys = ("sm_utilization", "memory_utilization", "encoder_utilization", "decoder_utilization")
    spawned, neighbours = engines(_vram("sim", "spawn", "--simulate", "demo", "--",
                                        sys.executable, "-m", "vramkit", "ps", "--json"))
    assert neighbours and all(r["sm_utilization"] > 0 for r in neighbours)  # its GPU is busy
    assert [spawned[k] for k in keys] == [0, 0, 0, 0], spawned
    synthetic, _ = engines(_vram("ps", "--json", scenario="demo"))
    assert [synthetic[k] for k in keys] == [0, 0, 0, 0]


def test_spawn_needs_a_scenario_and_refuses_a_symlinked_file(tmp_path):
    result = _vram("sim", "spawn", "--", "true")
    assert result.returncode == 2 and result.stderr.startswith("vram: error: --simulate: which scenario?"), \
        result.stderr
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    result = _vram("sim", "spawn", "--simulate", "demo", "-o", str(tmp_path / "link.json"), "--", "true")
    assert result.returncode == 2 and "it is a symlink" in result.stderr, result.stderr
    assert not (tmp_path / "elsewhere.json").exists()


def test_spawn_exits_with_the_command_s_code():
    assert _vram("sim", "spawn", "--simulate", "demo", "--", "sh", "-c", "exit 7").returncode == 7


def test_spawn_runs_every_bundled_scenario_s_placeholders():
    # A synthetic process's host fields (its cgroup text too) are dropped: /proc has the real one's.
    for name in bundled_names():
        result = _vram("sim", "spawn", "--simulate", name, "--", "true")
        assert result.returncode == 0, (name, result.stderr)


# ---------------------------------------------------------------- GPU health through pynvml (issue 17)

HEALTH_CALLS = textwrap.dedent("""
    import json, pynvml as N
    N.nvmlInit()
    def ask(fn, *args):
        try:
            value = fn(*args)
        except N.NVMLError as e:
            return type(e).__name__
        return list(value) if isinstance(value, tuple) else value
    out = {}
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        links = [ask(N.nvmlDeviceGetNvLinkState, h, link) for link in range(13)]
        fields = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0)])
        out[i] = {
            "ecc": [ask(N.nvmlDeviceGetEccMode, h),
                    ask(N.nvmlDeviceGetTotalEccErrors, h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC),
                    ask(N.nvmlDeviceGetTotalEccErrors, h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_AGGREGATE_ECC)],
            "remapped": ask(N.nvmlDeviceGetRemappedRows, h),
            "retired": [ask(N.nvmlDeviceGetRetiredPages, h, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
                        ask(N.nvmlDeviceGetRetiredPagesPendingStatus, h)],
            "throttle": [ask(N.nvmlDeviceGetCurrentClocksEventReasons, h),
                         ask(N.nvmlDeviceGetCurrentClocksThrottleReasons, h)],
            "clocks": [ask(N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_SM),
                       ask(N.nvmlDeviceGetMaxClockInfo, h, N.NVML_CLOCK_SM),
                       ask(N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_MEM)],
            "pstate": ask(N.nvmlDeviceGetPerformanceState, h),
            "pcie": [ask(N.nvmlDeviceGetCurrPcieLinkGeneration, h), ask(N.nvmlDeviceGetMaxPcieLinkGeneration, h),
                     ask(N.nvmlDeviceGetCurrPcieLinkWidth, h), ask(N.nvmlDeviceGetMaxPcieLinkWidth, h),
                     ask(N.nvmlDeviceGetPcieThroughput, h, N.NVML_PCIE_UTIL_TX_BYTES)],
            "modes": [ask(N.nvmlDeviceGetPersistenceMode, h), ask(N.nvmlDeviceGetComputeMode, h)],
            "nvlink": [links.count(1), links.count(0), links[-1]],
            "field": [type(fields[0]).__name__, fields[0].nvmlReturn, fields[0].value.ullVal > 0],
        }
    N.nvmlShutdown()
    print(json.dumps(out))
""")


def _health_json(scenario: str) -> dict[int, dict]:
    result = _vram("status", "--all", "--json", scenario=scenario)
    assert result.returncode == 0, result.stderr
    return {g["index"]: g["health"] for g in json.loads(result.stdout)["gpus"]}


def test_pynvml_health_calls_see_what_vram_sees(tmp_path):
    """Each health call family through the real pynvml on the shim: the same values `vram status
    --all --json` reports, and the scenario's NOT_SUPPORTED / NO_PERMISSION as pynvml's errors."""
    shim = write_shim(tmp_path).parent
    printed = _run([sys.executable, "-c", HEALTH_CALLS], shim, "unhealthy").stdout
    calls = {int(k): v for k, v in json.loads(printed).items()}
    vram = _health_json("unhealthy")
    for i, seen in calls.items():
        h = vram[i]
        assert seen["ecc"] == [[1, 1], h["ecc_uncorrected_volatile"], h["ecc_corrected_aggregate"]]
        assert seen["remapped"] == [h["remapped_rows_correctable"], h["remapped_rows_uncorrectable"],
                                    int(h["remap_pending"]), int(h["remap_failed"])]
        assert seen["retired"] == ["NVMLError_NotSupported"] * 2  # an A100 remaps rows instead
        assert seen["throttle"][0] == seen["throttle"][1]
        assert seen["clocks"] == [h["sm_clock"], h["sm_clock_max"], h["memory_clock"]]
        assert seen["pstate"] == h["performance_state"]
        assert seen["pcie"][:4] == [h["pcie_gen"], h["pcie_gen_max"], h["pcie_width"], h["pcie_width_max"]]
        assert seen["pcie"][4] * 1024 == h["pcie_tx"]  # NVML's KB/s
        assert seen["modes"] == [int(h["persistence_mode"]), {"default": 0, "exclusive process": 3}[h["compute_mode"]]]
        down = h["nvlink_links"] - h["nvlink_links_up"]
        assert seen["nvlink"] == [h["nvlink_links_up"], down, "NVMLError_NotSupported"]
        assert seen["field"][:2] == ["c_nvmlFieldValue_t", 0]
    assert calls[1]["throttle"][0] == 0x4  # sw power cap
    assert vram[1]["throttle_reasons"] == ["sw power cap"]
    assert calls[2]["ecc"][1] == 2 and calls[2]["remapped"][2] == 1
    assert calls[3]["pstate"] == 8


def test_pynvml_health_faults_on_faulty(tmp_path):
    shim = write_shim(tmp_path).parent
    calls = json.loads(_run([sys.executable, "-c", HEALTH_CALLS.replace("range(N.nvmlDeviceGetCount())", "(0, 2, 3)")],
                            shim, "faulty").stdout)
    vram = _health_json("faulty")
    assert calls["0"]["retired"] == [[], 0] and calls["0"]["remapped"] == "NVMLError_NotSupported"  # a V100
    assert calls["2"]["ecc"][0] == "NVMLError_NoPermission" and vram[2]["ecc_enabled"] is None
    assert vram[2]["na"]["ecc_uncorrected_volatile"] == "no permission"
    assert calls["2"]["retired"][0] == "NVMLError_NoPermission"
    assert calls["2"]["pcie"][4] == "NVMLError_NotSupported" and vram[2]["na"]["pcie_tx"] == "not supported"
    assert calls["3"]["clocks"][0] == "NVMLError_NotSupported" and vram[3]["sm_clock"] is None
    assert calls["3"]["pstate"] == "NVMLError_NoPermission" and vram[3]["na"]["performance_state"] == "no permission"
    assert calls["3"]["throttle"] == ["NVMLError_NotSupported"] * 2 and vram[3]["throttle_reasons"] is None


def test_nvitop_sees_the_same_health(tmp_path):
    pytest.importorskip("nvitop")
    shim = write_shim(tmp_path).parent
    code = ("import json; from nvitop import Device; ds = Device.all(); print(json.dumps([[d.sm_clock(), "
            "d.max_sm_clock(), d.memory_clock(), d.performance_state(), d.persistence_mode(), d.compute_mode(), "
            "d.total_volatile_uncorrected_ecc_errors(), d.nvlink_link_count(), d.pcie_tx_throughput()] for d in ds]))")
    seen = json.loads(_run([sys.executable, "-c", code], shim, "unhealthy").stdout)
    vram = _health_json("unhealthy")
    for i, row in enumerate(seen):
        h = vram[i]
        assert row[:4] == [h["sm_clock"], h["sm_clock_max"], h["memory_clock"], f"P{h['performance_state']}"]
        assert row[4] == ("Enabled" if h["persistence_mode"] else "Disabled")
        assert row[6] == h["ecc_uncorrected_volatile"]
        assert row[7] == h["nvlink_links"]
        assert row[8] * 1024 == h["pcie_tx"]
