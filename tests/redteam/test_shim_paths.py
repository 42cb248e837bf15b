"""`vram sim shim DIR` with a hostile DIR (issue 26 item 9): the directory's name must reach the
generated pynvml.py as data, never as code. A name holding `\"\"\"`, quotes, backslashes, newlines,
format braces or bytes that are not UTF-8 still gives a module that `import pynvml` loads (through
the shim, on the simulated machine) and that runs nothing the name says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import clean_env, vram_argv

PAYLOAD = "open('pwned', 'w').close()"
NAMES = [
    f'x"""; {PAYLOAD}; """',  # closes the docstring, runs, reopens a string the template closes
    f'x"""; {PAYLOAD}#',  # the brief's form: the rest of the line a comment
    f"x'''; {PAYLOAD}; '''",
    f"x\n{PAYLOAD}\n",  # newlines: a line of its own
    f'x\\"""\\n{PAYLOAD}\\',  # backslashes: escapes and a line continuation
    "x{directory}{0}{parent!r}%s",  # format braces
    os.fsdecode(b'x\xff\xfe"""; ') + PAYLOAD + '; """',  # not UTF-8: surrogate escapes
]

CHECK = ("import json, pynvml; pynvml.nvmlInit(); "
         "print(json.dumps([pynvml.nvmlDeviceGetCount(), pynvml.__file__, pynvml._VRAM_SHIM_DIRECTORY]))")


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_import_pynvml_through_a_shim_in_a_hostile_directory_runs_no_code(tmp_path, name):
    pytest.importorskip("pynvml")
    shim = tmp_path / name
    # vram prints the path as given (the export line must hold its very bytes): read it as bytes
    result = subprocess.run(vram_argv("sim", "shim", str(shim)), capture_output=True, timeout=60,
                            env=clean_env(), stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr
    text = (shim / "pynvml.py").read_bytes()
    assert PAYLOAD.encode() not in text.split(b"_VRAM_SHIM_DIRECTORY = ", 1)[0]  # not in the docstring
    compile(text, "pynvml.py", "exec")  # it is Python; and the directory is one literal in it:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VRAM_SIMULATE")}
    env.update(PYTHONPATH=str(shim), VRAM_SIMULATE="demo", PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run([sys.executable, "-c", CHECK], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    count, origin, directory = json.loads(run.stdout)
    assert count == 8  # demo's eight GPUs, through the shim
    assert origin == str(shim / "pynvml.py")
    assert directory == str(shim)  # the name, exactly, as data
    assert not (cwd / "pwned").exists() and not (tmp_path / "pwned").exists()  # and nothing ran


def test_the_written_module_holds_the_directory_only_as_a_literal(tmp_path):
    import ast

    from vramkit.nvml.shim import write_shim

    shim = tmp_path / NAMES[0]
    tree = ast.parse(write_shim(shim).read_text(errors="surrogateescape"))
    literal = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
               and getattr(node.targets[0], "id", "") == "_VRAM_SHIM_DIRECTORY"]
    assert literal == [str(shim)]
    # the module's statements are the template's: a docstring, imports, assignments, defs, the exec and try
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "Import", "Assign", "FunctionDef", "Try"}, kinds
    calls = [ast.unparse(node) for node in tree.body if isinstance(node, ast.Expr)]
    assert len(calls) == 3 and calls[1].startswith("exec(_vram_real_pynvml()") and "_vram_install" in calls[2]
