"""vramkit.procs is a package of one concern per module whose names load on first use (issue 27)."""

from __future__ import annotations

import subprocess
import sys

from helpers import clean_env

import vramkit.procs as procs


def test_every_public_name_resolves_to_its_module():
    assert procs.__all__ == sorted(procs._WHERE)
    for name, module in procs._WHERE.items():
        value = getattr(procs, name)
        assert getattr(__import__(f"vramkit.procs.{module}", fromlist=[name]), name) is value


def test_an_unknown_name_is_an_attribute_error():
    try:
        procs.no_such_thing  # noqa: B018
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("no AttributeError")


def test_what_status_needs_loads_neither_signalling_nor_environ():
    code = ("import sys; from vramkit.procs import HostProcess, ProcessTable, sanitize, in_initial_pid_namespace; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('vramkit.procs'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(),
                         timeout=60, check=True).stdout.split()
    assert "vramkit.procs.table" in out
    assert not {"vramkit.procs.signals", "vramkit.procs.environ", "vramkit.procs.identities",
                "vramkit.procs.locks", "vramkit.procs.load"} & set(out)
