"""`import vramkit` stays light: the public functions (kill, estimate, ...) import their modules
when called, and calling them works whether or not their module was imported first."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys, vramkit
heavy = [m for m in ("vramkit.killing", "vramkit.protect", "vramkit.estimate", "vramkit.allocate",
                     "vramkit.leases", "textual", "torch") if m in sys.modules]
assert not heavy, heavy
report = vramkit.kill([4242424], dry_run=True, simulate="demo")   # the call loads the module
assert "vramkit.killing" in sys.modules
import vramkit.killing as module
assert module is not vramkit.kill and callable(vramkit.kill)   # a submodule import rebinds nothing public
assert type(vramkit.kill([4242424], dry_run=True, simulate="demo")) is type(report)
assert vramkit.estimate("bert-base-uncased", batch=2, seq=128).total_bytes > 0
assert vramkit.select_gpus is vramkit.allocate.select_gpus
print("ok")
"""


def test_import_is_light_and_callable_modules_work():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
