"""AMD GPUs: the amdsmi import's failure, the two read paths agreeing, fdinfo's clients, a mixed host."""

from __future__ import annotations

import json
import os
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


def test_kill_says_what_lists_an_amd_gpus_processes_and_which_device_files_it_looked_for(children, write_scenario,
                                                                                       tmp_path):
    """A process named to vram kill that KFD does not list: refused in AMD's words (KFD, its render node,
    /dev/kfd and the render nodes), never NVML's or /dev/nvidia*."""
    from helpers import clean_env, start_sleeper

    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ["kfd"] + [f"renderD{128 + n}" for n in range(16)]:
        (dev / name).write_text("")
    worker = subprocess.Popen([sys.executable, "-c", HOLD, str(dev / "renderD129")], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    children.procs.append(worker)
    assert worker.stdout.readline().strip() == b"ready"
    bystander = start_sleeper(children)
    data = scenario_data("mi300x")
    data["device_nodes"] = f"{dev}/*"
    scenario = write_scenario(data)
    env = clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit.log"), HOME=str(tmp_path), COLUMNS="300")
    result = run_vram("kill", "--simulate", str(scenario), str(worker.pid), str(bystander.pid), "--dry-run", env=env)
    assert "KFD lists no GPU memory for it, but it holds renderD129 open" in result.out, result.out
    assert f"it holds no GPU memory KFD reports and no {dev}/* open" in result.out
    assert "NVML" not in result.out and "nvidia" not in result.out
    result = run_vram("kill", "--simulate", str(scenario), "--holders", "--gpu", "1", "--dry-run", env=env)
    assert "KFD lists no memory for it; it holds renderD129 open" in result.out, result.out
    assert "NVML" not in result.out


def test_a_graphics_only_client_is_a_graphics_process_on_the_sysfs_path(write_scenario, monkeypatch):
    """A process with VRAM in its render node's fdinfo that never opened /dev/kfd (KFD has no entry for it):
    listed as a graphics process from fdinfo, as NVML lists them; amdsmi lists KFD's compute processes only,
    as the real library does. Its engine share comes from fdinfo over two readings, as a compute one's."""
    from helpers import clean_env

    from vramkit.backends.amd import SimulatedAmdBackend
    from vramkit.nvml.scenario import load

    scenario = write_scenario({
        "vendor": "amd", "name": "amd-graphics",
        "gpus": [{"uuid": f"GPU-00000000000000a{i}", "pci_bus_id": f"0000:0{i + 1}:00.0",
                  "name": "AMD Radeon Pro W7900", "memory_total": "48GiB", "utilization": 40} for i in range(2)],
        "processes": [{"pid": 4242, "gpus": {"0": "10GiB"}, "command": "python train.py", "user": "alice"},
                      {"pid": 4343, "type": "graphics", "gpus": {"1": "2GiB"}, "command": "blender", "user": "bob",
                       "sm_util": 20}]})
    listed = {}
    for path in ("sysfs", "amdsmi"):
        result = run_vram("status", "--simulate", str(scenario), "--json", env=clean_env(VRAM_SIM_AMD=path))
        assert result.rc == 0, result.err
        listed[path] = [(g["index"], p["pid"], p["memory"], p["types"]) for g in result.json()["gpus"]
                        for p in g["processes"]]
    assert listed["sysfs"] == [(0, 4242, 10 << 30, ["compute"]), (1, 4343, 2 << 30, ["graphics"])]
    assert listed["amdsmi"] == [(0, 4242, 10 << 30, ["compute"])]
    ps = run_vram("ps", "--simulate", str(scenario), env=clean_env(VRAM_SIM_AMD="sysfs", COLUMNS="200"))
    assert any(line.split()[:2] == ["1", "4343"] and "graphics" in line.split() for line in ps.out.splitlines())
    monkeypatch.setenv("VRAM_SIM_CLOCK", "stepped")
    backend = SimulatedAmdBackend.load(load(str(scenario)), "sysfs")
    try:
        backend.read_devices()
        backend.sim.advance(10)
        gpu = backend.read_devices()[1]
        assert [(p.pid, p.types, p.sm_utilization) for p in gpu.processes] == [(4343, ("graphics",), 20)]
    finally:
        backend.close()


def test_metrics_label_each_gpu_with_its_vendor_on_a_mixed_host():
    """/metrics has the same names on AMD GPUs; vram_gpu_info says whose each GPU is."""
    from prometheus_client.parser import text_string_to_metric_families

    from vramkit.machine import snapshot
    from vramkit.serve.metrics import ExportState, render

    body = render(snapshot(simulate="mixed"), ExportState(hostname="h", version="t")).decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    info = {s.labels["gpu"]: s.labels["vendor"] for s in families["vram_gpu_info"].samples}
    assert info == {"0": "nvidia", "1": "nvidia", "2": "amd", "3": "amd"}
    used = {s.labels["gpu"]: s.value for s in families["vram_gpu_memory_used_bytes"].samples}
    assert used["2"] == 40 * 2**30 and used["3"] == 0
    held = {(s.labels["gpu"], s.labels["pid"]) for s in families["vram_process_memory_bytes"].samples}
    assert held == {("0", "81234"), ("2", "82345")}


@pytest.mark.parametrize("path", ["amdsmi", "sysfs"])
def test_kill_frees_an_amd_gpu_and_finds_the_worker_still_holding_its_render_node(children, write_scenario,
                                                                                  tmp_path, path):
    """A ROCm job listed by the driver is terminated and its memory shows freed; a worker that inherited
    its render node (KFD lists no memory for it) is named as still holding the GPU's files."""
    from helpers import clean_env, start_sleeper

    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("kfd", "renderD128", "renderD129"):
        (dev / name).write_text("")
    job = start_sleeper(children)
    worker = subprocess.Popen([sys.executable, "-c", HOLD, str(dev / "kfd"), str(dev / "renderD129")],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    children.procs.append(worker)
    assert worker.stdout.readline().strip() == b"ready"
    scenario = write_scenario({
        "vendor": "amd", "name": "amd-kill", "device_nodes": f"{dev}/*",
        "gpus": [{"uuid": f"GPU-00000000000000a{i}", "pci_bus_id": f"0000:0{i + 1}:00.0", "name": "AMD Instinct MI210",
                  "memory_total": "64GiB", "utilization": 40} for i in range(2)],
        "processes": [{"pid": job.pid, "source": "real", "gpus": {"1": "6GiB"}}]})
    env = clean_env(VRAM_AUDIT_LOG=str(tmp_path / "audit" / "audit.log"), HOME=str(tmp_path), XDG_CONFIG_HOME=None,
                    XDG_STATE_HOME=None, VRAM_SIM_AMD=path)
    result = run_vram("kill", "--simulate", str(scenario), str(job.pid), "--yes", "--timeout", "5", "--json", env=env)
    assert result.rc == 0, result.err
    data = result.json()
    assert [t["status"] for t in data["targets"]] == ["exited"] and data["targets"][0]["memory"] == 6 * 2**30
    gpu = data["gpus"][0]
    assert gpu["index"] == 1 and gpu["memory_used_before"] == 6 * 2**30 and gpu["memory_used_after"] == 0
    assert [(h["pid"], h["gpus"]) for h in data["holders_after"]] == [(worker.pid, [1])]
    assert job.wait(5) < 0 and worker.poll() is None


def test_doctor_reads_a_hip_oom_and_names_rocms_variable(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                   "of 191.98 GiB of which 512.00 MiB is free. Of the allocated memory 20.00 GiB is allocated by "
                   "PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
                   "is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")
    result = run_vram("doctor", str(log), "--simulate", "mi300x", env={"COLUMNS": "300"})
    assert result.rc == 0, result.err
    assert result.out.startswith("HIP (ROCm) out of memory on GPU 0")
    assert "e.g. HIP_VISIBLE_DEVICES=5 (or vram pick)" in result.out
    assert "pass --gpu if the job ran with HIP_VISIBLE_DEVICES set" in result.out
    assert "CUDA_VISIBLE_DEVICES" not in result.out


@pytest.mark.parametrize("message, said", [
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 191.98 GiB "
     "of which 10.00 GiB is free. Including non-PyTorch memory, this process has 181.00 GiB memory in use. Of the "
     "allocated memory 150.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.",
     "30.0GiB of this process's memory is outside PyTorch (HIP runtime, hipBLAS/rocBLAS/MIOpen workspaces, "
     "RCCL buffers)"),
    ("RuntimeError: HIP out of memory. Tried to allocate 40.00 GiB (GPU 0; 191.98 GiB total capacity; 150.00 GiB "
     "already allocated; 1.00 GiB free; 152.00 GiB reserved in total by PyTorch)",
     "outside PyTorch  38.98GiB (other processes + this job's HIP runtime)"),
])
def test_doctor_names_the_memory_rocms_runtime_holds_in_its_own_words(tmp_path, message, said):
    log = tmp_path / "train.log"
    log.write_text(message + "\n")
    from helpers import clean_env

    result = run_vram("doctor", str(log), "--simulate", "mi300x", env=clean_env(COLUMNS="300"))
    assert result.rc == 0, result.err
    assert said in result.out and "CUDA context" not in result.out and "cuBLAS" not in result.out
    cuda = log.with_name("cuda.log")  # the same message from CUDA, on the same (AMD) machine: CUDA's words
    cuda.write_text(message.replace("HIP", "CUDA") + "\n")
    result = run_vram("doctor", str(cuda), "--simulate", "mi300x", env=clean_env(COLUMNS="300"))
    assert result.rc == 0, result.err
    assert "HIP runtime" not in result.out and ("CUDA context" in result.out)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["amdsmi", "sysfs"])
def test_record_and_report_an_amd_machine_on_the_stepped_clock(tmp_path, path):
    """Ten minutes of mi300x recorded at 60 s: each user's memory-hours follow from the scenario,
    partitions (GPU 7's six sweep trials) included."""
    from helpers import clean_env

    env = clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH="1767225600", VRAM_SIM_TIME="0", VRAM_SIM_AMD=path)
    db = tmp_path / "h.db"
    rec = run_vram("record", "--simulate", "mi300x", "--db", str(db), "--duration", "10m", "--interval", "60s",
                   env=env, timeout=120)
    assert rec.rc == 0, rec.err
    report = run_vram("report", "--db", str(db), "--by", "user", "--since", "2026-01-01", "--until", "2026-01-02",
                      "--json", env=env)
    assert report.rc == 0, report.err
    rows = {r["user"]: r for r in report.json()["rows"]}
    assert set(rows) == {"mei", "raj", "svc-vllm", "ana", "lin"}
    assert rows["mei"]["gpu_seconds"] == 4 * 600 and rows["lin"]["gpu_seconds"] == 6 * 600  # six partitions
    assert rows["mei"]["peak_memory"] == 171520 * 2**20
    assert rows["lin"]["jobs"] == 6 and rows["lin"]["peak_memory"] == 19 * 2**30
    assert rows["svc-vllm"]["memory_byte_seconds"] == 88064 * 2**20 * 600


def test_the_pynvml_shim_refuses_an_amd_only_scenario_and_serves_a_mixed_hosts_nvidia_part(tmp_path):
    refused = run_vram("sim", "shim", str(tmp_path / "a"), "--simulate", "mi300x")
    assert refused.rc == 2 and "pynvml programs would see no GPU" in refused.err and len(refused.err.splitlines()) == 1
    assert run_vram("sim", "shim", str(tmp_path / "b"), "--simulate", "mixed").rc == 0
    code = "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "b"), "VRAM_SIMULATE": "mixed"})
    assert out.stdout.strip() == "2", out.stderr  # the two A100s; the MI210s are not NVML's


@pytest.mark.parametrize("path", ["amdsmi", "sysfs"])
def test_health_reads_ecc_and_the_pcie_link_and_says_what_an_amd_gpu_lacks(write_scenario, monkeypatch, path):
    monkeypatch.setenv("VRAM_SIM_AMD", path)
    from vramkit.machine import open_machine

    gpu = {"name": "AMD Instinct MI210", "memory_total": "64GiB", "unsupported": ["fan"],
           "health": {"ecc_corrected_volatile": 12, "ecc_uncorrected_volatile": 1, "pcie_gen": 3, "pcie_width": 8,
                      "pcie_gen_max": 4, "pcie_width_max": 16}}
    scenario = write_scenario({"vendor": "amd", "gpus": [gpu, {**gpu, "health": {"ecc_enabled": False},
                                                               "unsupported": ["fan", "pcie"]}]})
    machine = open_machine(str(scenario))
    try:
        snap = machine.snapshot()
        machine.read_health(snap, settle=0)
    finally:
        machine.close()
    h, off = snap.gpus[0].health, snap.gpus[1].health
    assert (h.ecc_enabled, h.ecc_corrected_volatile, h.ecc_uncorrected_volatile) == (True, 12, 1)
    assert (h.pcie_gen, h.pcie_width, h.pcie_gen_max, h.pcie_width_max) == (3, 8, 4, 16)
    assert h.ecc_corrected_aggregate is None and "since" in h.na["ecc_corrected_aggregate"]
    assert h.nvlink_links is None and "xGMI" in h.na["nvlink_links"]
    assert h.persistence_mode is None and "NVIDIA" in h.na["persistence_mode"]
    assert off.ecc_corrected_volatile is None and off.na["ecc_corrected_volatile"]
    assert off.pcie_gen is None and off.na["pcie_gen"]


def test_amdsmi_uuid_is_the_real_librarys_form_and_reads_back_as_rocms_name():
    """amdsmi_get_gpu_device_uuid writes amdsmi_uuid_gen's form (the unique id around the PCI device id and
    function 0xff); before ROCm 6.4 (no enumeration info) it is the only id: the reader turns it into the
    GPU-<unique id> HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES take."""
    from vramkit.amd.fake_amdsmi import FakeAmdSmi
    from vramkit.amd.sim import SimulatedAmd
    from vramkit.amd.smi import AmdSmi, rocm_uuid
    from vramkit.nvml.scenario import load

    fake = FakeAmdSmi(SimulatedAmd(load("mi300x")))
    fake.amdsmi_init()
    first = fake.amdsmi_get_processor_handles()[0]
    assert fake.amdsmi_get_gpu_device_uuid(first) == "4bff74a1-0000-1000-80a1-c0de7e570000"
    assert fake.amdsmi_get_gpu_asic_info(first)["asic_serial"] == "0x4BA1C0DE7E570000"
    assert rocm_uuid("8EFF74A1-0000-1000-80A9-D8E2B0D45C29") == "GPU-8ea9d8e2b0d45c29"
    assert rocm_uuid("not-an-amdsmi-uuid") == "not-an-amdsmi-uuid"

    class BeforeRocm64:  # amdsmi without amdsmi_get_gpu_enumeration_info
        def __getattr__(self, name):
            if name == "amdsmi_get_gpu_enumeration_info":
                raise AttributeError(name)
            return getattr(fake, name)

    gpus = AmdSmi(BeforeRocm64()).open().read(10.0)
    assert [g.uuid for g in gpus] == [f"GPU-4ba1c0de7e57{d * 4}" for d in "01234567"]
