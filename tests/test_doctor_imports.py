"""`vram doctor LOG --no-live` imports what reading and explaining a log needs and nothing else
(issue 36: a log-only run had paid ~20 ms for the machine checklist, the snapshot model and
NVML, which it never uses). benchmarks/bench_doctor.py measures the time."""

from __future__ import annotations

from pathlib import Path

from helpers import run_vram

LOG = Path(__file__).resolve().parent / "fixtures" / "oom" / "cuda_2_2_two_processes_private_pools.txt"

# Loaded by the machine checklist (doctor with no log), by a live reading or by --json only.
UNUSED_ON_A_LOG = {
    "vramkit.doctor.checklist", "statistics", "vramkit.cuda_env", "vramkit.process_view",  # the checklist
    "vramkit.gpu_state", "vramkit.machine", "vramkit.nvml", "vramkit.nvml.backend", "threading",  # live data
    "vramkit.render.banner", "vramkit.estimator", "typing", "datetime",
}


def _imports(*args: str) -> tuple[set[str], str]:
    """Every module `vram ARGS` imports (python -X importtime), and what it printed."""
    result = run_vram(*args, python_flags=("-X", "importtime"))
    assert result.rc == 0, result.err
    names = {line.rsplit("|", 1)[1].strip() for line in result.err.splitlines()
             if line.startswith("import time:") and "|" in line}
    assert "vramkit.doctor.explain" in names  # the log was read and explained
    return names, result.out


def test_a_log_read_without_live_data_imports_neither_the_checklist_nor_the_machine():
    names, out = _imports("doctor", str(LOG), "--no-live")
    assert "CUDA out of memory" in out or "out of memory" in out.lower()
    assert not names & UNUSED_ON_A_LOG, sorted(names & UNUSED_ON_A_LOG)
    assert "json" not in names  # text output


def test_its_json_needs_json_and_still_not_the_checklist():
    names, out = _imports("doctor", str(LOG), "--no-live", "--json")
    assert out.lstrip().startswith("{")
    assert "json" in names
    assert not names & (UNUSED_ON_A_LOG - {"datetime"}), sorted(names & UNUSED_ON_A_LOG)
