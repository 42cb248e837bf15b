"""vram pick, and the Python API (select_gpus, use_gpus), run the way users run them."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import ESCAPE, assert_one_line_error, run_vram, scenario_data, wait_for

DEMO_UUID = "GPU-9f1c2a4e-0b7d-4e1a-8c3f-1a2b3c4d5e6{}"  # GPU i of scenario demo
MIG_A = "MIG-1a2b3c4d-000a-5e6f-8a9b-0c1d2e3f4a5a"  # scenario mig: GPU 0, gi 10 (1g.10gb, empty)


def pick(leasing, *args: str, **env: str | None):
    return run_vram("pick", "--simulate", "demo", *args, env=leasing.env(**env))


@pytest.mark.slow
def test_pick_prints_the_chosen_ids(leasing):
    # demo at t=0: GPUs 4 and 7 are the ones at most half busy with half their memory free
    assert pick(leasing).out == "7\n"
    assert pick(leasing, "-n", "2").out == "4,7\n"
    assert pick(leasing, "-n", "2", "--prefer", "pack").out == "4,7\n"
    assert pick(leasing, "--prefer", "pack").out == "4\n"
    assert pick(leasing, "--format", "uuid").out == DEMO_UUID.format(7) + "\n"
    assert pick(leasing, "-n", "2", "--format", "env").out == "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=4,7\n"
    assert pick(leasing, "--max-util", "any", "-n", "5").out == "1,2,3,4,7\n"
    assert pick(leasing, "--exclude", "7").out == "4\n"
    # 1-3 have the same free memory; spread then takes the least busy (GPU 2, 55%)
    assert pick(leasing, "--only", "0-3", "--max-util", "100").out == "2\n"
    assert pick(leasing, "--need", "70GiB").out == "7\n"
    assert leasing.leftovers() == []  # pick only looks


def test_pick_json(leasing):
    data = pick(leasing, "-n", "2", "--json").json()
    demo = scenario_data("demo")
    assert data["simulated"] is True and data["scenario"] == "demo"
    assert data["cuda_visible_devices"] == "4,7"
    assert data["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "4,7"}
    assert [(g["cuda_index"], g["index"], g["uuid"], g["pci_bus_id"]) for g in data["gpus"]] == [
        (0, 4, demo["gpus"][4]["uuid"], demo["gpus"][4]["pci_bus_id"]),
        (1, 7, demo["gpus"][7]["uuid"], demo["gpus"][7]["pci_bus_id"])]
    assert data["gpus"][0]["memory_free"] == (81920 - 519 - 18432) * 2**20
    assert data["policy"]["count"] == 2 and data["lease"] is None


def test_explain_shows_every_verdict_and_the_cuda_numbering_on_stderr(leasing):
    result = pick(leasing, "-n", "2", "--explain")
    assert result.rc == 0 and result.out == "4,7\n"  # the ids stay alone on stdout
    err = result.err
    assert ESCAPE not in err  # not a terminal: no colours
    assert "SIMULATED machine (scenario 'demo')" in err
    assert ("CUDA_VISIBLE_DEVICES=4,7 → your cuda:0 is GPU 4 (PCI 0000:87:00.0), "
            "cuda:1 is GPU 7 (PCI 0000:bd:00.0)") in err
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in err
    rows = {line.split()[0]: line for line in err.splitlines() if line[:5].strip().isdigit()}
    assert sorted(rows) == [str(i) for i in range(8)]
    assert "chosen: cuda:0" in rows["4"] and "chosen: cuda:1" in rows["7"]
    assert "busy (97% utilization; limit 50%)" in rows["0"] and "short of free memory" in rows["6"]
    assert f"leases: {leasing.dir} (shared by all users) · 0 active, 0 waiting" in err


def test_explain_shows_the_environments_cuda_variables_sanitized_and_bounded(leasing):
    # A container image, a pod spec or the scheduler sets them, not the reader: escapes must not
    # reach the terminal, and a 20 kB value is not echoed whole on every GPU's line.
    hostile = "0,\x1b]0;PWNED\x07\x1b[2J"
    result = pick(leasing, "--explain", "--min-free", "1%", "--max-util", "100",
                  CUDA_VISIBLE_DEVICES=hostile, CUDA_DEVICE_ORDER="\x1b[2J")
    assert ESCAPE not in result.err and "\x07" not in result.err, result.err
    assert "CUDA_VISIBLE_DEVICES=0,?]0;PWNED??[2J → your cuda:0 is GPU 0" in result.err
    assert "CUDA_DEVICE_ORDER=?[2J is not a value CUDA knows" in result.err
    huge = pick(leasing, "--explain", "--min-free", "1%", "--max-util", "100",
                CUDA_VISIBLE_DEVICES="0" + ",0" * 10_000)
    assert huge.rc == 2 and "(20,001 characters) names GPU 0 twice" in huge.err, huge.err
    assert max(map(len, huge.err.splitlines())) < 400, huge.err
    long = pick(leasing, "--explain", "--min-free", "1%", "--max-util", "100", CUDA_VISIBLE_DEVICES="0" + " " * 20_000)
    assert long.rc == 0 and "(20,001 characters) → your cuda:0 is GPU 0" in long.err, long.err
    assert max(map(len, long.err.splitlines())) < 400, long.err


def test_explain_counts_gpu_locks_held_by_others_apart_from_leases(leasing):
    """A GPU whose lock someone keeps is reserved by them, but it is not a lease: the note says
    '1 active, ..., 1 GPU lock held by others', not '2 active'."""
    import fcntl
    import os

    held = pick(leasing, "--only", "4", "--hold", "1m")
    assert held.rc == 0, held.err
    fd = os.open(leasing.dir / f"gpu-{DEMO_UUID.format(7)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = pick(leasing, "--max-util", "any", "--explain")
    finally:
        os.close(fd)
    assert result.rc == 0, result.err
    row_7 = next(line for line in result.err.splitlines() if line.startswith("    7  "))
    assert f"reserved by pid {os.getpid()} of user" in row_7, result.err
    assert f"leases: {leasing.dir} (shared by all users) · 1 active, 0 waiting, 1 GPU lock held by others" \
        in result.err, result.err


@pytest.mark.slow
def test_impossible_requests_fail_at_once_and_say_what_is_available(leasing):
    for extra in ((), ("--wait", "60")):
        started = time.monotonic()
        result = pick(leasing, "-n", "9", *extra)
        assert_one_line_error(result, 1, "cannot pick 9 GPUs: this machine has 8 GPUs (0-7)",
                              "fitting now: GPU 4 (61.5GiB free), GPU 7 (77.3GiB free)")
        assert time.monotonic() - started < 20  # not the 60 s of --wait
        result = pick(leasing, "--min-free", "200GiB", *extra)
        assert_one_line_error(result, 1, "no GPU here can ever fit the request (1 GPU, ≥200GiB free",
                              "GPUs 0-7 are too small (79.5GiB usable)", "most free now: GPU 7 (77.3GiB free)")
    assert leasing.leftovers() == []


def test_a_request_that_does_not_fit_now_says_why(leasing):
    result = pick(leasing, "-n", "3")
    assert_one_line_error(result, 1, "too few GPUs fit now (wanted 3 GPUs, ≥50% free, ≤50% busy)",
                          "only GPUs 4, 7 fit", "GPUs 1-3 are busy (58%, 55%, 57% utilization; limit 50%)")


@pytest.mark.parametrize("args,message", [
    (("--min-free", "20"), "--min-free: '20' needs a unit, e.g. 20GiB"),
    (("--only", "12"), "--only: no GPU 12 (this machine has GPUs 0-7)"),
    (("--exclude", "GPU-9f1c"), "matches 8 UUIDs"),
    (("-n", "0"), "at least 1"),
    (("--max-util", "150"), "--max-util"),
    (("--prefer", "fast"), "invalid choice"),
    (("--format", "yaml"), "invalid choice"),
    (("--hold", "25h"), "at most 24h"),
    (("--hold", "soon"), "--hold"),
])
def test_bad_usage_is_exit_2(leasing, args, message):
    assert_one_line_error(pick(leasing, *args), 2, message)


@pytest.mark.slow
def test_the_environments_cuda_visible_devices_is_the_allowed_set(leasing):
    assert pick(leasing, "--max-util", "any", CUDA_VISIBLE_DEVICES="1,3", CUDA_DEVICE_ORDER="PCI_BUS_ID").out == "3\n"
    assert pick(leasing, CUDA_VISIBLE_DEVICES=DEMO_UUID.format(4)).out == "4\n"
    result = pick(leasing, CUDA_VISIBLE_DEVICES="0,1,2,3", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert_one_line_error(result, 1, "GPUs 1-3 are busy", "GPUs 4-7 are outside CUDA_VISIBLE_DEVICES=0,1,2,3")
    result = pick(leasing, CUDA_VISIBLE_DEVICES="")
    assert_one_line_error(result, 1, "no GPU here can ever fit", "outside CUDA_VISIBLE_DEVICES=")
    result = pick(leasing, CUDA_VISIBLE_DEVICES="4,4")
    assert_one_line_error(result, 2, "CUDA_VISIBLE_DEVICES=4,4 names GPU 4 twice")
    # without PCI_BUS_ID order an index is CUDA's "fastest first" guess: said plainly
    result = pick(leasing, "--explain", CUDA_VISIBLE_DEVICES="7,0")
    assert result.out == "7\n"
    assert "your environment's CUDA_VISIBLE_DEVICES=7,0 → your cuda:0 is GPU 7" in result.err
    assert "! CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA numbers GPUs fastest first" in result.err


@pytest.mark.slow
def test_mig_instances_are_picked_by_uuid(leasing):
    env = leasing.env()
    assert run_vram("pick", "--simulate", "mig", env=env).out == MIG_A + "\n"
    assert run_vram("pick", "--simulate", "mig", "--format", "env", env=env).out == (
        f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={MIG_A}\n")
    result = run_vram("pick", "--simulate", "mig", "--explain", env=env)
    assert f"CUDA_VISIBLE_DEVICES={MIG_A} → your cuda:0 is GPU 0 MIG 1g.10gb (gi 10) (PCI 0000:1b:00.0)" in result.err
    result = run_vram("pick", "--simulate", "mig", "-n", "2", "--max-util", "any", "--min-free", "0", env=env)
    assert_one_line_error(result, 1, "only 1 of 5 units here could ever fit", "MIG instances")
    # the whole H100 next to it is index 1 in PCI order, but with a GPU in MIG mode beside it vram
    # names it by UUID unless asked for the index
    whole = ("pick", "--simulate", "mig", "--only", "1", "--max-util", "any", "--min-free", "10GiB")
    assert run_vram(*whole, env=env).out == "GPU-4d1e7c2b-7a3e-4f10-9c21-5b6a7c8d9e01\n"
    assert run_vram(*whole, "--format", "index", env=env).out == "1\n"


@pytest.mark.slow
def test_a_lost_gpu_makes_pick_name_gpus_by_uuid(leasing):
    # faulty: GPU 1 is lost, so whether CUDA counts it among the indices is unknowable
    env = leasing.env()
    assert run_vram("pick", "--simulate", "faulty", env=env).out == "GPU-0badc0de-0000-4000-8000-000000000002\n"
    assert run_vram("pick", "--simulate", "faulty", "--format", "index", env=env).out == "2\n"
    result = run_vram("pick", "--simulate", "faulty", "-n", "4", "--max-util", "any", env=env)
    assert_one_line_error(result, 1, "only 3 of 4 GPUs here could ever fit", "GPU 1 is lost")


@pytest.mark.slow
def test_hold_reserves_what_was_picked(leasing):
    assert pick(leasing, "--hold", "30s").out == "7\n"
    assert len([n for n in leasing.leftovers() if n.endswith(".json")]) == 1
    assert pick(leasing).out == "4\n"  # 7 is held
    assert pick(leasing, "--hold", "1s").out == "4\n"
    result = pick(leasing, "--explain")
    assert result.rc == 1
    assert "GPU 4 is reserved by vram pick --hold of" in result.err and "GPU 7 is reserved by" in result.err
    assert wait_for(lambda: pick(leasing).out == "4\n", timeout=10)  # the 1 s hold ran out
    assert len(leasing.leftovers()) == 1  # and was cleaned up; the 30 s one stays


@pytest.mark.slow
def test_a_running_jobs_lease_is_respected(leasing, groups):
    job = groups.start([sys.executable, "-m", "vramkit", "run", "--simulate", "demo", "--", "sleep", "60"],
                       env=leasing.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for(lambda: any(n.endswith(".json") for n in leasing.leftovers()))
    assert pick(leasing).out == "4\n"
    result = pick(leasing, "--only", "7", "--explain")
    assert result.rc == 1 and "GPU 7 is reserved by a vram run of" in result.err
    assert f"(pid {job.pid}," in result.err


# ---------------------------------------------------------------- the Python API
# (vramkit/__init__.py re-exports these from vramkit.allocate; the tests use the module itself.)

def test_the_api_is_exported_from_the_package():
    import inspect

    import vramkit
    from vramkit import allocate

    for name in ("select_gpus", "use_gpus", "NoGpusAvailable", "CudaAlreadyInitialized", "Selection", "WaitTimedOut"):
        assert hasattr(vramkit, name), f"vramkit/__init__.py does not re-export vramkit.allocate.{name}"
        if name in ("select_gpus", "use_gpus"):  # typed functions calling allocate's (test_vramkit_api_types.py)
            assert inspect.signature(getattr(vramkit, name)) == inspect.signature(getattr(allocate, name))
        else:
            assert getattr(vramkit, name) is getattr(allocate, name)
        assert name in vramkit.__all__


def python(code: str, leasing, **env: str | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=leasing.env(**env), stdin=subprocess.DEVNULL)


def test_select_gpus(leasing):
    code = ("from vramkit.allocate import NoGpusAvailable, select_gpus\n"
            "s = select_gpus(2, min_free='20GiB', simulate='demo')\n"
            "print(s.indices, s.cuda_visible_devices, s.env['CUDA_DEVICE_ORDER'], s.gpus[1].cuda_index)\n"
            "try:\n    select_gpus(9, simulate='demo')\n"
            "except NoGpusAvailable as e:\n    print(e.impossible, e)\n")
    proc = python(code, leasing)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == "[4, 7] 4,7 PCI_BUS_ID 1"
    assert second.startswith("True cannot pick 9 GPUs")


@pytest.mark.slow
def test_use_gpus_sets_the_environment_and_reserves(leasing):
    # The program's own children inherit CUDA_VISIBLE_DEVICES=7: for them GPU 7 is the allowed set.
    code = ("import os, subprocess, sys\nfrom vramkit.allocate import use_gpus\n"
            "s = use_gpus(simulate='demo')\n"
            "print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CUDA_DEVICE_ORDER'], flush=True)\n"
            "pick = [sys.executable, '-m', 'vramkit', 'pick', '--simulate', 'demo']\n"
            "print(subprocess.run(pick, capture_output=True, text=True).stderr.strip())\n"
            "s.release()\n"
            "print(subprocess.run(pick, capture_output=True, text=True).stdout.strip())\n")
    proc = python(code, leasing)
    assert proc.returncode == 0, proc.stderr
    env_line, refused, again = proc.stdout.splitlines()
    assert env_line == "7 PCI_BUS_ID"
    assert "GPU 7 is reserved by a use_gpus() call of" in refused
    assert again == "7"  # released
    assert leasing.leftovers() == []


def test_use_gpus_refuses_once_cuda_is_initialised(leasing):
    fake_torch = ("import sys, types\n"
                  "torch = types.ModuleType('torch'); torch.cuda = types.SimpleNamespace(is_initialized=lambda: {})\n"
                  "sys.modules['torch'] = torch\n")
    code = fake_torch.format("True") + (
        "import os\nfrom vramkit.allocate import CudaAlreadyInitialized, use_gpus\n"
        "try:\n    use_gpus(simulate='demo')\n"
        "except CudaAlreadyInitialized as e:\n    print('refused:', e)\n"
        "print(os.environ.get('CUDA_VISIBLE_DEVICES'))\n")
    proc = python(code, leasing)
    assert proc.returncode == 0, proc.stderr
    assert "refused: CUDA is already initialised in this process" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "None" and leasing.leftovers() == []
    code = "from vramkit.allocate import use_gpus\nprint(use_gpus(simulate='demo').indices)\n"
    proc = python(fake_torch.format("False") + code, leasing)
    assert proc.stdout.strip() == "[7]", proc.stderr


@pytest.mark.slow
def test_a_lease_ends_when_its_process_shows_up_on_the_gpu(leasing, groups, write_scenario):
    """use_gpus() in a real process reserves GPU 1; once the (simulated) driver lists that process
    on GPU 1, the reservation has done its job and NVML's numbers speak for the GPU."""
    scenario = {"name": "two", "processes": [], "gpus": [
        {"uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}", "pci_bus_id": f"00000000:0{i}:00.0",
         "memory_total": "40GiB"} for i in range(2)]}
    path = write_scenario(scenario)
    code = ("import time; from vramkit.allocate import use_gpus; "
            f"print(use_gpus(only='1', simulate={str(path)!r}).indices, flush=True); time.sleep(60)")
    holder = groups.start([sys.executable, "-c", code],
                          env=leasing.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "[1]"
    refused = run_vram("pick", "--simulate", str(path), "--only", "1", env=leasing.env())
    assert refused.rc == 1 and "GPU 1 is reserved by a use_gpus() call" in refused.err
    scenario["processes"] = [{"pid": holder.pid, "source": "real", "gpus": {"1": "4GiB"}}]
    path.write_text(json.dumps(scenario))
    assert run_vram("pick", "--simulate", str(path), "--only", "1", env=leasing.env()).out == "1\n"


# ---------------------------------------------------------------- --explain on a terminal

def pick_with_stderr_on_a_terminal(leasing, *args: str, columns: int, **env: str | None):
    """`vram pick ARGS` with stderr on a pseudo-terminal `columns` wide (stdout piped, as in $(...))."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    from helpers import vram_argv

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(vram_argv("pick", *args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, env=leasing.env(**env))
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        out = proc.stdout.read().decode()
        proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return out, b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 100, 160])
@pytest.mark.parametrize("scenario", ["demo", "mig"])
def test_explain_fits_the_terminal(leasing, columns, scenario):
    from helpers import strip_ansi

    out, err = pick_with_stderr_on_a_terminal(leasing, "--simulate", scenario, "--explain", "-n", "1",
                                              columns=columns, CUDA_VISIBLE_DEVICES=None)
    assert out.strip()
    lines = strip_ansi(err).splitlines()
    assert any("→ your cuda:0 is" in line for line in lines)
    assert [line for line in lines if len(line) > columns] == []
    assert ESCAPE in err  # colour on a terminal ...
    _, plain = pick_with_stderr_on_a_terminal(leasing, "--simulate", scenario, "--explain", columns=columns,
                                              NO_COLOR="1")
    assert ESCAPE not in plain  # ... unless NO_COLOR says otherwise


def test_the_config_file_sets_picks_defaults_and_a_flag_overrides_them(cli, tmp_path):
    """[pick] in ~/.config/vramkit/config.toml is the policy when no flag is given (vram config)."""
    import json as _json

    conf = tmp_path / "config" / "vramkit"
    conf.mkdir(parents=True)
    (conf / "config.toml").write_text('[pick]\nmin_free = "1GiB"\nprefer = "pack"\n')
    rc, out, err = cli("pick", "--simulate", "demo", "--json")
    assert rc == 0, err
    packed = _json.loads(out)
    assert packed["policy"]["prefer"] == "pack"
    rc, out, err = cli("pick", "--simulate", "demo", "--json", "--prefer", "spread")
    assert rc == 0, err
    spread = _json.loads(out)
    assert spread["policy"]["prefer"] == "spread"
    assert packed["gpus"][0]["index"] != spread["gpus"][0]["index"]  # the fullest that fits vs the emptiest
    (conf / "config.toml").write_text('[pick]\nprefer = "sideways"\n')
    rc, out, err = cli("pick", "--simulate", "demo")
    assert rc == 2 and "config.toml" in err and "prefer" in err and "Traceback" not in err
