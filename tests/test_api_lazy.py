"""`import vramkit` stays light: the callable modules (kill, estimate) and the allocator load on
first use, and calling them works whether or not their module was imported first."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys, vramkit
heavy = [m for m in ("vramkit.kill", "vramkit.protect", "vramkit.estimate", "vramkit.allocate",
                     "vramkit.leases", "textual", "torch") if m in sys.modules]
assert not heavy, heavy
report = vramkit.kill([4242424], dry_run=True, simulate="demo")   # first use loads the module
import vramkit.kill as module
assert module is vramkit.kill and callable(vramkit.kill)
assert type(vramkit.kill([4242424], dry_run=True, simulate="demo")) is type(report)
assert vramkit.estimate("bert-base-uncased", batch=2, seq=128).total_bytes > 0
assert vramkit.select_gpus is vramkit.allocate.select_gpus
print("ok")
"""


def test_import_is_light_and_callable_modules_work():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
