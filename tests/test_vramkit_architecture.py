"""The architecture's seams hold: only the backends and the simulator know a machine is simulated.

The views may say so (the SIMULATED banner, the `simulated` field of JSON/CSV); machine.py copies
the backend's label into the Snapshot. Nothing else branches on it: a second backend must not
need edits across the library (docs/architecture.md, "The backend seam").
"""

from __future__ import annotations

import re
from pathlib import Path

import vramkit

SRC = Path(vramkit.__file__).parent
# Where knowing about simulation belongs: the backends, the NVML layer with its simulator, the
# views that print the banner (and serve's metrics, which label it: vram_host_info{simulated}),
# and the one line of machine.py that labels the Snapshot.
ALLOWED = ("backends/", "nvml/", "amd/", "render/", "serve/metrics.py", "machine.py", "cli/sim.py")
SIM_BRANCH = re.compile(r"\.sim\b|\bsim\.|\.simulated\b|host_process\(|SimulatedNvml|SimulatedBackend")


def _code_lines(path: Path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.strip() and not code.strip().startswith(('"', "'")):
            yield number, code


def test_no_simulation_branch_outside_the_backends():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(ALLOWED):
            continue
        found += [f"{rel}:{n}: {code.strip()}" for n, code in _code_lines(path) if SIM_BRANCH.search(code)]
    assert found == []


def test_the_grep_finds_a_branch():
    """The pattern above is not vacuous: the branches this test removed would be found."""
    for line in ("described = machine.sim.host_process(p.pid) if machine.sim else None",
                 "trusted = machine.simulated or procs.in_initial_pid_namespace() is not False",
                 "if snap.simulated:"):
        assert SIM_BRANCH.search(line)


def test_backends_implement_the_protocol():
    """Every method of the Backend protocol exists on each backend, with the same parameters."""
    import inspect

    from vramkit.backends import Backend
    from vramkit.backends.amd import AmdBackend, SimulatedAmdBackend
    from vramkit.backends.combined import CombinedBackend
    from vramkit.backends.nvidia import NvidiaBackend
    from vramkit.backends.simulated import SimulatedBackend

    wanted = {name: inspect.signature(fn) for name, fn in vars(Backend).items()
              if callable(fn) and not name.startswith("_")}
    assert {"read_devices", "host", "is_real", "pids_visible", "device_nodes", "node_gpus",
            "audit_context", "forget_all_but", "close"} <= set(wanted)
    for cls in (NvidiaBackend, SimulatedBackend, AmdBackend, SimulatedAmdBackend, CombinedBackend):
        for name, sig in wanted.items():
            have = inspect.signature(getattr(cls, name))
            assert list(have.parameters) == list(sig.parameters), (cls.__name__, name)
        for attr in ("simulated", "scenario", "driver_version", "cuda_version"):
            assert hasattr(cls, attr), (cls.__name__, attr)


HISTORY_IMPORT = re.compile(r"^\s*(from\s+(\.+|vramkit\.)history\b|import\s+vramkit\.history\b)")
ABOVE_HISTORY = ("cli/", "tui/", "render/", "serve/", "history/")


def test_history_stands_on_the_library_and_nothing_below_imports_it():
    """history/ is a layer above the collector, kill and snapshot (docs/architecture.md): only the
    commands, the live view and the views import it, and it imports none of them."""
    below = []
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for n, code in _code_lines(path):
            if HISTORY_IMPORT.search(code) and not rel.startswith(ABOVE_HISTORY):
                below.append(f"{rel}:{n}: {code.strip()}")
            if rel.startswith("history/") and re.search(r"^\s*from\s+\.\.(cli|tui|render)\b", code):
                upward.append(f"{rel}:{n}: {code.strip()}")
    assert below == [] and upward == []


# Every /proc read is in procs/ (issue 27): one stat parser, one identity, bounded reads of other
# users' text. The modules below read /proc outside it, each for a reason of its own.
PROC_READS_ALLOWED = {
    "holders.py": "the fd scan (/proc/*/fd links): one listing of every process, its own concern",
    "backends/nvidia.py": "/proc/driver/nvidia: the NVIDIA driver's own files, the backend's to read",
    "protect.py": "/proc/PID/exe under a root that tests replace with a fixture tree",
    "launch.py": "the job's stopped state while vram run passes job control on (owned by the CLI's launcher)",
    "torch/_hostmem.py": "this process's own resident memory (/proc/self/statm), inside the torch helpers",
}


def _proc_paths(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string in the module's code that names a /proc path: a literal or an
    f-string starting with /proc (docstrings and comments do not count)."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    parts = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for value in node.values}
    found = []
    for node in ast.walk(tree):
        if id(node) in parts:
            continue
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith("/proc"):
                found.append((node.lineno, head.value))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and node.value.startswith("/proc")):
            found.append((node.lineno, node.value))
    return sorted(found)


def test_proc_is_read_in_procs_only():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("procs/") or rel in PROC_READS_ALLOWED:
            continue
        found += [f"{rel}:{n}: {text}" for n, text in _proc_paths(path)]
    assert found == [], "read /proc through vramkit.procs (or add the module to PROC_READS_ALLOWED, with why)"


def test_the_proc_grep_finds_a_read(tmp_path):
    """Not vacuous: the reads this rule moved into procs/ would be found; text that only mentions
    /proc would not."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""Reads /proc/PID/stat."""\n'
                      'def f(pid):\n'
                      '    """From /proc/locks."""\n'
                      '    msg = "host: /proc/stat cannot be read"\n'
                      '    open(f"/proc/{pid}/comm")\n'
                      '    return open("/proc/locks"), os.stat(f"/proc/{pid}").st_uid\n')
    assert [n for n, _ in _proc_paths(sample)] == [5, 6, 6]


def test_every_allowed_proc_reader_still_reads_proc():
    """An entry whose module no longer reads /proc is stale: remove it."""
    assert [rel for rel in PROC_READS_ALLOWED if not _proc_paths(SRC / rel)] == []


# A vendor's variables and device nodes are named by its backend and its visible-devices rule only
# (docs/architecture.md, "The backend seam"): everything above asks visible.py and Backend.
VENDOR_NAMES = {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                "GPU_DEVICE_ORDINAL"}
VENDOR_NODES = ("/dev/nvidia", "/dev/kfd", "/dev/dri")
BELOW_THE_SEAM = {
    "backends/": "the backends own their device nodes",
    "nvml/": "NVIDIA's library layer",
    "amd/": "AMD's library layer",
    "cuda_env.py": "NVIDIA's visible-devices rule",
    "hip_env.py": "AMD's visible-devices rule",
    "torch/": "torch's own runtime inside the user's process (torch.cuda), not a machine's backend",
}


def _vendor_names(path: Path) -> list[str]:
    """(line, text) of each string constant that is a vendor's variable or names a device node;
    docstrings, comments and words inside messages do not count."""
    import ast

    text = path.read_text()
    if not any(word in text for word in (*VENDOR_NAMES, *VENDOR_NODES, "nvidia(")):
        return []  # (parsing only the modules that could hold one keeps the test fast)
    tree = ast.parse(text)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [f"{node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and (node.value in VENDOR_NAMES or node.value.startswith(VENDOR_NODES) or "nvidia(\\d" in node.value)]


def test_no_module_above_the_seam_names_a_vendors_variables_or_device_nodes():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if not rel.startswith(tuple(BELOW_THE_SEAM)):
            found += [f"{rel}:{hit}" for hit in _vendor_names(path)]
    assert found == [], "ask visible.py (a process's variables) or the Backend (device nodes)"


def test_the_vendor_name_check_finds_a_read(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text('"""Reads CUDA_VISIBLE_DEVICES."""\n'
                      'import os\n'
                      'msg = "set CUDA_VISIBLE_DEVICES=0 first"\n'
                      'value = os.environ.get("HIP_VISIBLE_DEVICES")\n'
                      'NODES = ("/dev/kfd", r"^nvidia(\\d+)$")\n')
    assert [hit.split(":")[0] for hit in _vendor_names(sample)] == ["4", "5", "5"]
