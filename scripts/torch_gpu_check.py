#!/usr/bin/env python3
"""On a real GPU: the PyTorch helpers and the process tools against real CUDA processes.

    python scripts/torch_gpu_check.py [--report FILE] [--workdir DIR]

1. A real out-of-memory error (tensors allocated until the GPU is full) inside `oom_guard`: what the
   guard prints, and what `vram doctor` makes of the saved traceback.
2. `find_batch_size` on a GPU a neighbour process has filled but for ~10 GiB: the largest batch it
   reports must run, and one more must not.
3. `LeakDetector` on a real CUDA training loop: a loop that keeps each loss (and its graph) is
   flagged; the same loop with `loss.item()` is not.
4. `vram kill` of a real CUDA process: the memory it reports freed, and NVML's used memory after.
5. `vram ps --holders`: a process holding /dev/nvidia* open without a CUDA context is listed.
Prints a markdown report; exit 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
sys.path.insert(0, SRC)
ENV = {**os.environ, "PYTHONPATH": SRC}
VRAM = [sys.executable, "-m", "vramkit"]
GIB = 1024**3

OOM_CHILD = r"""
import torch
from vramkit.torch import oom_guard
held = []
with oom_guard():
    while True:
        held.append(torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda"))
"""
HOLD_CHILD = r"""
import sys, torch
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("held", flush=True)
sys.stdin.read()
"""
OPEN_ONLY_CHILD = r"""
import os, sys
fds = [os.open(p, os.O_RDWR) for p in ("/dev/nvidiactl", "/dev/nvidia0") if os.path.exists(p)]
print("open", len(fds), flush=True)
sys.stdin.read()
"""


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300, **kw)


def block(title: str, text: str) -> list[str]:
    return [f"### {title}", "", "```", text.rstrip()[-6000:], "```", ""]


def check_oom(work: str) -> tuple[bool, list[str]]:
    r = sh([sys.executable, "-c", OOM_CHILD])
    log = os.path.join(work, "oom.log")
    with open(log, "w") as f:
        f.write(r.stderr)
    doctor = sh([*VRAM, "doctor", log])
    doctor_json = sh([*VRAM, "doctor", log, "--json"])
    ok = "OutOfMemoryError" in r.stderr and "vramkit oom_guard" in r.stderr and doctor.returncode in (0, 1)
    out = ["## 1. A real OOM", "", f"child exit {r.returncode}; vram doctor exit {doctor.returncode}", ""]
    out += block("the child's stderr (oom_guard's diagnosis, then the traceback)", r.stderr)
    out += block("vram doctor oom.log", doctor.stdout + doctor.stderr)
    out += block("vram doctor oom.log --json", doctor_json.stdout[:4000] + doctor_json.stderr)
    return ok, out


BATCH_CHILD = r"""
import dataclasses, json, sys, torch
from vramkit.estimator.trace import ReferenceRun
from vramkit.torch import find_batch_size
run = ReferenceRun.plan("gpt2", batch=1, seq=512, precision="fp32")
with torch.device("cuda"):
    net, opt = run.build()
def step(b):
    r = dataclasses.replace(run, setup=dataclasses.replace(run.setup, batch=b))
    r.step(net, opt, device="cuda")
    torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
search = find_batch_size(step, high=4096, model=net)
def fits(b):  # as find_batch_size tries a batch: from an emptied cache, no gradients left over
    import gc
    for p in net.parameters():
        p.grad = None
    gc.collect(); torch.cuda.empty_cache()
    try:
        step(b); return True
    except torch.OutOfMemoryError:
        return False
print(json.dumps({"free_at_start": free, "largest": search.largest, "recommended": search.recommended,
                  "method": search.method, "trials": [[t.batch, t.ok, t.peak_bytes] for t in search.trials],
                  "largest_runs": fits(search.largest), "one_more_runs": fits(search.largest + 1)}))
"""


def check_batch() -> tuple[bool, list[str]]:
    import torch

    free, _ = torch.cuda.mem_get_info()
    neighbour = subprocess.Popen([sys.executable, "-c", HOLD_CHILD, str(max(0.0, free / GIB - 11))],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV)
    assert neighbour.stdout is not None and neighbour.stdin is not None
    neighbour.stdout.readline()
    started = time.perf_counter()
    r = sh([sys.executable, "-c", BATCH_CHILD])
    seconds = time.perf_counter() - started
    neighbour.stdin.close()
    neighbour.wait(timeout=60)
    out = ["## 2. find_batch_size against the real limit", "",
           "GPT-2 small (reference model), seq 512, fp32 AdamW; a neighbour process holds all but ~11 GiB", ""]
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return False, out + block("failed", r.stdout + r.stderr)
    ok = res["largest_runs"] and not res["one_more_runs"]
    out += [f"free at start {res['free_at_start'] / GIB:.2f} GiB; largest {res['largest']}, recommended "
            f"{res['recommended']} ({res['method']}), {len(res['trials'])} trials, {seconds:.1f} s in all",
            f"largest runs again: {res['largest_runs']}; largest + 1 runs: {res['one_more_runs']} -> "
            f"{'exact' if ok else 'NOT the real limit'}", "",
            "trials (batch, ran, peak GiB): " + ", ".join(
                f"({b}, {'ok' if k else 'OOM'}, {'-' if p is None else f'{p / GIB:.2f}'})"
                for b, k, p in res["trials"]),
            ""]
    return ok, out


LEAK_CHILD = r"""
import json, sys, warnings, torch
from vramkit.torch import LeakDetector
keep = sys.argv[1] == "keep"
net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(net.parameters())
losses = []
with warnings.catch_warnings(record=True) as caught, LeakDetector(net) as det:
    warnings.simplefilter("always")
    for i in range(8):
        x = torch.randn(256, 1024, device="cuda")
        loss = net(x).pow(2).mean()
        loss.backward(retain_graph=keep)
        opt.step(); opt.zero_grad()
        losses.append(loss if keep else loss.item())
        det.step()
rep = det.report()
print(json.dumps({"leaks": [str(l) for l in rep.leaks], "growing": rep.growing,
                  "live": rep.live_bytes, "warnings": [str(w.message) for w in caught]}))
"""


def check_leak() -> tuple[bool, list[str]]:
    out = ["## 3. LeakDetector on a real CUDA loop", ""]
    results = {}
    for mode in ("keep", "item"):
        r = sh([sys.executable, "-c", LEAK_CHILD, mode])
        try:
            results[mode] = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, out + block(f"{mode} failed", r.stdout + r.stderr)
        res = results[mode]
        out += [f"- losses kept {'with their graphs' if mode == 'keep' else 'as floats (loss.item())'}: "
                f"{len(res['leaks'])} leak(s), live bytes growing: {res['growing']}; live bytes per step: "
                f"{res['live']}"] + [f"  - {leak}" for leak in res["leaks"]]
    ok = bool(results["keep"]["leaks"]) and not results["item"]["leaks"]
    return ok, out + [""]


def nvml_used_of(pid: int) -> int | None:
    import pynvml

    pynvml.nvmlInit()
    for i in range(pynvml.nvmlDeviceGetCount()):
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)):
            if p.pid == pid:
                return p.usedGpuMemory
    return None


def check_kill() -> tuple[bool, list[str]]:
    child = subprocess.Popen([sys.executable, "-c", HOLD_CHILD, "4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=ENV)
    assert child.stdout is not None
    child.stdout.readline()
    before = nvml_used_of(child.pid)
    status_before = sh([*VRAM, "status", "--json"]).stdout
    plan = sh([*VRAM, "kill", str(child.pid), "--dry-run"])
    killed = sh([*VRAM, "kill", str(child.pid), "--yes", "--json"])
    time.sleep(1)
    after = nvml_used_of(child.pid)
    rc = child.poll()
    status_after = sh([*VRAM, "status", "--json"]).stdout
    used = [sum(g["memory_used"] for g in json.loads(doc)["gpus"]) for doc in (status_before, status_after)]
    ok = killed.returncode == 0 and after is None and rc is not None
    out = ["## 4. vram kill of a real CUDA process", "",
           f"child {child.pid} held {None if before is None else before / GIB:.2f} GiB (NVML); after the kill NVML "
           f"lists it: {after is not None}; child exit {rc}; GPU used {used[0] / GIB:.2f} -> {used[1] / GIB:.2f} GiB",
           ""]
    out += block("vram kill PID --dry-run", plan.stdout + plan.stderr)
    out += block("vram kill PID --yes --json", killed.stdout + killed.stderr)
    return ok, out


def check_holders() -> tuple[bool, list[str]]:
    child = subprocess.Popen([sys.executable, "-c", OPEN_ONLY_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=ENV)
    assert child.stdout is not None and child.stdin is not None
    line = child.stdout.readline()
    text = sh([*VRAM, "ps", "--holders"])
    js = sh([*VRAM, "ps", "--holders", "--json"])
    child.stdin.close()
    child.wait(timeout=30)
    ok = str(child.pid) in js.stdout and nvml_used_of(child.pid) is None
    out = ["## 5. vram ps --holders: /dev/nvidia* open, no context", "", f"child {child.pid}: {line.strip()}", ""]
    out += block("vram ps --holders", text.stdout + text.stderr)
    return ok, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", help="also write the markdown report here")
    ap.add_argument("--workdir", help="where the OOM log is kept (default: a temporary folder)")
    ap.add_argument("--only", help="run only these checks (comma-separated: oom,batch,leak,kill,holders)")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="vram-gpu-")
    lines, failed = [], []
    checks = (("oom", lambda: check_oom(work)), ("batch", check_batch), ("leak", check_leak),
              ("kill", check_kill), ("holders", check_holders))
    for name, check in checks:
        if args.only and name not in args.only.split(","):
            continue
        started = time.perf_counter()
        try:
            ok, out = check()
        except Exception as e:  # report and go on: the other checks still tell something
            ok, out = False, [f"## {name}: failed: {type(e).__name__}: {e}", ""]
        lines += out + [f"{name}: {'ok' if ok else 'FAILED'} ({time.perf_counter() - started:.1f} s)", ""]
        if not ok:
            failed.append(name)
        print(f"{name}: {'ok' if ok else 'FAILED'}", file=sys.stderr, flush=True)
    lines.append(f"result: {'all checks hold' if not failed else 'failed: ' + ', '.join(failed)}")
    report = "\n".join(lines)
    print(report)
    if args.report:
        with open(args.report, "w") as f:
            f.write(report + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
