"""A real process whose main thread exited ('Z' in /proc/PID/stat) but whose other threads
still run keeps its GPU memory in the simulator, as it does on a real driver."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from helpers import minimal_scenario, proc_state, run_vram, wait_for

MAIN_THREAD_EXITS = textwrap.dedent("""
    import ctypes, sys, threading, time
    threading.Thread(target=time.sleep, args=(600,)).start()
    print("ready", flush=True)
    ctypes.CDLL(None).pthread_exit(None)  # end the main thread only
""")


def test_a_process_whose_main_thread_exited_still_holds_memory(children, write_scenario):
    child = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_EXITS], stdout=subprocess.PIPE)
    children.procs.append(child)  # killed and reaped at teardown
    assert child.stdout.readline().strip() == b"ready"
    assert wait_for(lambda: proc_state(child.pid) == "Z")
    data = minimal_scenario()
    data["processes"].append({"pid": child.pid, "source": "real", "gpus": {"1": "3GiB"}})
    result = run_vram("status", "--json", "--simulate", str(write_scenario(data)))
    assert result.rc == 0, result.err
    pids = [p["pid"] for p in result.json()["gpus"][1]["processes"]]
    assert child.pid in pids
    child.kill()
    child.wait()
    result = run_vram("status", "--json", "--simulate", str(write_scenario(data)))
    assert child.pid not in [p["pid"] for p in result.json()["gpus"][1]["processes"]]
