"""`import vramkit` stays light: the public functions (kill, estimate, ...) import their modules
when called, and calling them works whether or not their module was imported first."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys, vramkit
heavy = [m for m in ("vramkit.killing", "vramkit.protect", "vramkit.estimator", "vramkit.allocate",
                     "vramkit.leases", "textual", "torch") if m in sys.modules]
assert not heavy, heavy
report = vramkit.kill([4242424], dry_run=True, simulate="demo")   # the call loads the module
assert "vramkit.killing" in sys.modules
import vramkit.killing as module
assert module is not vramkit.kill and callable(vramkit.kill)   # a submodule import rebinds nothing public
assert type(vramkit.kill([4242424], dry_run=True, simulate="demo")) is type(report)
assert vramkit.estimate("bert-base-uncased", batch=2, seq=128).total_bytes > 0
import types, vramkit.estimator, vramkit.machine
assert all(isinstance(getattr(vramkit, f), types.FunctionType) for f in
           ("snapshot", "open_machine", "kill", "estimate", "plan", "trace_memory", "select_gpus", "use_gpus"))
assert "vramkit.allocate" not in sys.modules   # nothing loads the allocator before a GPU is chosen
assert issubclass(vramkit.KillRequestError, vramkit.VramkitError)
print("ok")
"""


def test_import_is_light_and_the_functions_load_their_modules():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
