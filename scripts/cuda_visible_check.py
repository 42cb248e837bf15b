#!/usr/bin/env python3
"""On a real GPU machine: check vram's reading of CUDA_VISIBLE_DEVICES against CUDA's own, and
that a job started by `vram run` sees exactly the GPU vram chose.

    python scripts/cuda_visible_check.py [--report FILE]

For each value in a table built from this machine's GPUs (indices, out of range, empty, full and
prefix UUIDs, duplicates, malformed entries), a fresh child process calls the CUDA driver API
(libcuda through ctypes: no torch needed) and reports the UUIDs it sees; vramkit.cuda_env predicts
the same from NVML. A mismatch is printed, except where vram is stricter on purpose (it calls an
entry like "0abc" invalid; CUDA may read it as 0). Then `vram run` starts a job that creates a
CUDA context and allocates memory: the job must see the chosen GPU as cuda:0, and its lease must
end once NVML lists the job on the GPU. Exit 0 when everything agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import ctypes, json, sys
cuda = ctypes.CDLL("libcuda.so.1")
rc = cuda.cuInit(0)
out = {"init": rc, "uuids": []}
if rc == 0:
    n = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(n))
    for i in range(n.value):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        raw = (ctypes.c_ubyte * 16)()
        cuda.cuDeviceGetUuid(raw, dev)
        h = bytes(raw).hex()
        out["uuids"].append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
if len(sys.argv) > 1:  # hold a context with memory on cuda:0 for this many seconds
    ctx, ptr = ctypes.c_void_p(), ctypes.c_void_p()
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
    cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(256 << 20))
    print(json.dumps(out), flush=True)
    import time; time.sleep(float(sys.argv[1]))
else:
    print(json.dumps(out))
"""


def cuda_sees(value: str | None, order: str | None = "PCI_BUS_ID") -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    if value is not None:
        env["CUDA_VISIBLE_DEVICES"] = value
    if order is not None:
        env["CUDA_DEVICE_ORDER"] = order
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
    return json.loads(proc.stdout) if proc.returncode == 0 else {"init": None, "uuids": [], "error": proc.stderr}


def cases(devices) -> list[tuple[str | None, bool]]:
    """(value, vram stricter than CUDA on purpose)."""
    gpus = [d for d in devices if not d.is_mig]
    n = len(gpus)
    u0 = gpus[0].uuid
    out = [(None, False), ("", False), ("0", False), (str(n), False), (f"0,{n}", False), (f"{n},0", False),
           ("-1,0", False), ("0,-1", False), ("0,0", False), (f"0,{u0}", False), (u0, False), (u0[:12], False),
           ("GPU-", False), ("gpu-" + u0[4:], False), (" 0 ", False), ("0,,0", False),
           ("0abc", True), ("+0", True), (u0[4:12], True),
           # the same GPU named twice in different forms, and short or odd UUID prefixes (what CUDA
           # does with these was not documented: the first real run showed index+UUID accepted)
           (f"{u0},0", False), (f"{u0},{u0}", False), (f"{u0[:12]},{u0}", False), (f"0,{u0[:12]}", False),
           ("GPU-" + u0[4], False), ("GPU-" + u0[4:6], False), ("GPU-" + u0[4:].upper(), False),
           ("0,GPU-", False), ("GPU-,0", False), (u0 + " ", False), ("1abc", True), ("0,1abc", True),
           ("MIG-", False), (f"0,{u0},1", False)]
    if n > 1:
        out += [("1,0", False), (f"{gpus[1].uuid},0", False), ("1,1", False)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    import vramkit
    from vramkit.cuda_env import devices_of, parse_visible

    snap = vramkit.snapshot()
    devices = devices_of(snap)
    lines = ["| CUDA_VISIBLE_DEVICES | CUDA sees | vram predicts | |", "| --- | --- | --- | --- |"]
    failures = 0
    for value, stricter in cases(devices):
        seen = cuda_sees(value)
        vis = parse_visible(value, devices, "PCI_BUS_ID")
        predicted = [] if vis.error else [d.uuid for d in vis.devices]
        actual = seen["uuids"] if seen["init"] == 0 else []
        ok = actual == predicted
        verdict = "ok" if ok else ("vram stricter (intended)" if stricter else "MISMATCH")
        failures += verdict == "MISMATCH"
        shown = "unset" if value is None else repr(value)
        lines.append(f"| {shown} | {actual} (cuInit {seen['init']}) | {predicted}"
                     f"{' (error: ' + vis.error + ')' if vis.error else ''} | {verdict} |")

    with tempfile.TemporaryDirectory() as leases:
        env = {**os.environ, "VRAM_LEASE_DIR": leases}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        chosen = subprocess.run([sys.executable, "-m", "vramkit", "pick", "--max-util", "any", "--min-free", "1GiB",
                                 "--format", "uuid"], capture_output=True, text=True, env=env).stdout.strip()
        job = subprocess.Popen([sys.executable, "-m", "vramkit", "run", "-q", "--max-util", "any", "--min-free",
                                "1GiB", "--ids", "index", "--", sys.executable, "-c", CHILD, "20"],
                               stdout=subprocess.PIPE, text=True, env=env)
        seen = json.loads(job.stdout.readline() or "{}")
        saw_lease = bool([f for f in os.listdir(leases) if f.startswith("lease-")])
        released_after = None
        start = time.monotonic()
        while time.monotonic() - start < 15:
            if not [f for f in os.listdir(leases) if f.startswith("lease-")]:
                released_after = time.monotonic() - start
                break
            time.sleep(0.2)
        job.terminate()
        rc = job.wait(timeout=30)
    run_ok = seen.get("uuids") == [chosen]
    failures += not run_ok
    lines.append("")
    lines.append(f"vram run: chose {chosen}; the job saw {seen.get('uuids')} as cuda:0..: "
                 f"{'ok' if run_ok else 'MISMATCH'}")
    lines.append(f"lease while the job started: {saw_lease}; ended {released_after:.1f}s after the job held memory"
                 if released_after is not None else
                 "the lease did NOT end while the job held GPU memory (NVML did not list the job: a container "
                 "whose pids differ from the host's?)")
    lines.append(f"job ended by SIGTERM passed on: exit {rc} (expect 143)")
    report = "\n".join(lines)
    print(report)
    if args.report:
        with open(args.report, "w") as f:
            f.write(report + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
