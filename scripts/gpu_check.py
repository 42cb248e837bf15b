#!/usr/bin/env python3
"""On a real GPU machine: compare `vram status --json` with nvidia-smi (and torch.cuda) field by field.

    python scripts/gpu_check.py [--report FILE] [--torch]

Prints a report (and writes it to FILE, markdown): per GPU and field, vram's value, nvidia-smi's
value and whether they agree within the tolerance that field needs (memory exact to the MiB,
live readings such as utilization and power within a band, since the two tools sample at
different instants). With --torch it also starts a child that allocates memory with torch.cuda
and checks that both tools attribute it to that pid, next to torch's own counters. Then it times
`vram status` against `nvidia-smi`. Exit 0 when everything agrees, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

MIB = 1024**2
QUERY = ["index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used", "memory.free",
         "memory.reserved", "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw",
         "power.limit", "fan.speed", "utilization.encoder", "utilization.decoder"]
# vram JSON key, nvidia-smi column, how to compare
FIELDS = [
    ("uuid", "uuid", "exact"), ("name", "name", "exact"), ("pci_bus_id", "pci.bus_id", "pci"),
    ("memory_total", "memory.total", "mib"), ("memory_used", "memory.used", "mib_live"),
    ("memory_free", "memory.free", "mib_live"), ("memory_reserved", "memory.reserved", "mib"),
    ("utilization", "utilization.gpu", "pct_live"), ("memory_utilization", "utilization.memory", "pct_live"),
    ("temperature", "temperature.gpu", "temp"), ("power_draw", "power.draw", "power"),
    ("power_limit", "power.limit", "float"), ("fan", "fan.speed", "pct_live"),
    ("encoder_utilization", "utilization.encoder", "pct_live"),
    ("decoder_utilization", "utilization.decoder", "pct_live"),
]
VRAM = [sys.executable, "-m", "vramkit"]


def nvidia_smi_gpus() -> tuple[list[str], list[dict]]:
    fields = list(QUERY)
    while True:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            break
        bad = next((f for f in fields if f in r.stdout + r.stderr), None)
        if bad is None or bad == "index":
            raise SystemExit(f"nvidia-smi failed: {r.stdout}{r.stderr}")
        fields.remove(bad)  # a field this nvidia-smi does not know (e.g. memory.reserved before 510)
    rows = [dict(zip(fields, (c.strip() for c in line.split(",")))) for line in r.stdout.strip().splitlines()]
    return fields, rows


def nvidia_smi_apps() -> list[dict]:
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, check=True)
    return [dict(zip(("pid", "gpu_uuid", "used_memory"), (c.strip() for c in line.split(","))))
            for line in r.stdout.strip().splitlines() if line.strip()]


def vram_status() -> dict:
    r = subprocess.run([*VRAM, "status", "--json"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def compare(kind: str, ours, theirs: str) -> tuple[bool, str]:
    missing = theirs in ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "")
    if ours is None or missing:
        return (ours is None and missing), "both N/A" if ours is None and missing else "N/A on one side only"
    if kind == "exact":
        return ours == theirs, ""
    if kind == "pci":
        return ours.upper() == theirs.upper(), ""
    value = float(theirs)
    if kind == "mib":  # nvidia-smi rounds up to the MiB (seen on driver 580: 615.06 MiB printed as 616)
        return math.ceil(ours / MIB) == int(value), f"{math.ceil(ours / MIB)} MiB"
    if kind == "mib_live":
        return abs(ours / MIB - value) <= 64, f"{ours / MIB:.0f} MiB (±64 MiB: sampled apart)"
    if kind == "pct_live":
        return abs(ours - value) <= 15, "±15 points: sampled apart"
    if kind == "temp":
        return abs(ours - value) <= 2, "±2 °C"
    if kind == "power":
        return abs(ours - value) <= max(15.0, 0.15 * value), "±15%: sampled apart"
    return abs(ours - value) < 0.5, ""


def start_torch_child(gib: float) -> tuple[subprocess.Popen, dict]:
    code = (f"import torch,json,sys;x=torch.empty(int({gib}*2**30),dtype=torch.uint8,device='cuda');"
            "torch.cuda.synchronize();print(json.dumps({'allocated':torch.cuda.memory_allocated(),"
            "'reserved':torch.cuda.memory_reserved()}),flush=True);sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    counters = json.loads(child.stdout.readline())
    return child, counters


def median_ms(cmds: dict[str, list[str]], runs: int) -> dict[str, float]:
    """Median wall time of each command, run in interleaved rounds (A B C A B C ...) so that a
    change in the machine's load falls on every command alike."""
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[name].append((time.perf_counter() - t) * 1000)
    return {name: statistics.median(ts) for name, ts in times.items()}


def peers() -> dict[str, list[str]]:
    """The commands to time: vram status, nvidia-smi, and nvitop -1 / gpustat where installed."""
    import importlib.util

    cmds = {"vram status": [*VRAM, "status"], "nvidia-smi": ["nvidia-smi"],
            # the floor for any Python tool: the interpreter, then pynvml and the driver's init
            "python -c pass": [sys.executable, "-c", "pass"],
            "python + nvmlInit": [sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"]}
    if importlib.util.find_spec("nvitop"):
        cmds["nvitop -1"] = [sys.executable, "-m", "nvitop", "-1"]
    if importlib.util.find_spec("gpustat"):
        cmds["gpustat"] = [sys.executable, "-m", "gpustat"]
    return cmds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", help="also write the report (markdown) here")
    ap.add_argument("--torch", action="store_true", help="also check a torch.cuda allocation")
    ap.add_argument("--runs", type=int, default=10, help="runs per command for the timing")
    args = ap.parse_args()
    if not shutil.which("nvidia-smi"):
        print("gpu_check: no nvidia-smi on this machine: run it on a GPU machine", file=sys.stderr)
        return 1
    lines, ok = [f"# vram vs nvidia-smi on {os.uname().nodename}", ""], True
    child = counters = None
    if args.torch:
        child, counters = start_torch_child(2.0)
        time.sleep(1)
    fields, smi = nvidia_smi_gpus()
    ours = vram_status()
    apps = nvidia_smi_apps()
    lines += [f"driver {ours.get('driver_version')}, CUDA {ours.get('cuda_version')}, "
              f"simulated={ours['simulated']}", "", "| GPU | field | vram | nvidia-smi | agree | note |",
              "| --- | --- | --- | --- | --- | --- |"]
    for gpu, row in zip(ours["gpus"], smi):
        for key, col, kind in FIELDS:
            if col not in fields:
                continue
            agree, note = compare(kind, gpu.get(key), row[col])
            ok &= agree
            mark = "yes" if agree else "NO"
            lines.append(f"| {gpu['index']} | {key} | {gpu.get(key)} | {row[col]} | {mark} | {note} |")
    lines += ["", "| pid | GPU | vram MiB | nvidia-smi MiB | agree |", "| --- | --- | --- | --- | --- |"]
    ours_procs = {(p["pid"], g["uuid"]): p["memory"] for g in ours["gpus"] for p in g["processes"]}
    for app in apps:
        mem = ours_procs.get((int(app["pid"]), app["gpu_uuid"]))
        theirs = app["used_memory"]
        agree = mem is not None and theirs.isdigit() and mem // MIB == int(theirs)
        ok &= agree
        lines.append(f"| {app['pid']} | {app['gpu_uuid'][:12]} | {None if mem is None else mem // MIB} | {theirs} | "
                     f"{'yes' if agree else 'NO'} |")
    if child is not None:
        mem = next((m for (pid, _), m in ours_procs.items() if pid == child.pid), None)
        lines += ["", f"torch child pid {child.pid}: torch allocated {counters['allocated'] // MIB} MiB, "
                      f"reserved {counters['reserved'] // MIB} MiB; vram shows "
                      f"{None if mem is None else mem // MIB} MiB (reserved + CUDA context)"]
        ok &= mem is not None and mem >= counters["reserved"]
        child.stdin.close()
        child.wait(timeout=30)
    timing = median_ms(peers(), args.runs)
    vram_ms = timing["vram status"]
    lines += ["", f"timing (median of {args.runs}, interleaved): " + ", ".join(
        f"{name} {ms:.0f} ms" + ("" if name == "vram status" else f" (vram {vram_ms / ms:.2f}x)")
        for name, ms in timing.items()), "", f"result: {'all fields agree' if ok else 'DISAGREEMENTS above'}"]
    report = "\n".join(lines)
    print(report)
    if args.report:
        with open(args.report, "w") as f:
            f.write(report + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
