"""vram kill in a PID namespace that keeps an outer namespace's /proc (`unshare --pid --fork` without
--mount-proc): the pids that /proc shows are not the ones a signal sent from the namespace reaches.
The device-file holders it lists are refused (they were signalled by that number: another process
of the namespace, the decoy here, was ended and the holder reported "exited"), and procs.pin checks
the pidfd's process against that /proc before it lets anything be signalled. The fixtures:
conftest.py here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import vram_argv

from vramkit import procs

# Run in the namespace: pin the holder by its number in that /proc (the decoy's number here), as
# vram kill did, then without the kernel's fdinfo Pid line (older kernels), then without pidfds.
PIN = """
import os, sys
from vramkit.procs import identity, signals
pid = int(sys.argv[1])
ticks = identity(pid).start_ticks
out = [signals.pin(pid, ticks)]
signals.pidfd_pid = lambda fd: None
out.append(signals.pin(pid, ticks))
del os.pidfd_open
out.append(signals.pin(pid, ticks))
lone = int(sys.argv[2])  # a holder whose number in that /proc no process of the namespace has
out.append(signals.pin(lone, identity(lone).start_ticks))
print(*[o if isinstance(o, str) else "pinned" for o in out])
"""


@pytest.mark.slow
def test_a_holder_read_in_an_outer_proc_is_refused_not_its_namesake_signalled(new_container, scenario, dev, env):
    container = new_container(own_proc=False)
    here, host = container.start(dev / "nvidia0")
    holder, holder_host = container.start(dev / "nvidia1")
    decoy, decoy_host = container.start(at=holder_host)  # the holder's number in that /proc is the decoy's here
    path = scenario({(host, here): {"0": "6GiB"}})

    for how in ([str(holder_host)], ["--gpu", "1"]):
        done = container.vram("kill", "--simulate", str(path), "--holders", *how, "--yes", "--timeout", "3", "--json",
                              env=env)
        [target] = [t for t in json.loads(done.out)["targets"] if t["pid"] == holder_host]
        assert done.rc == 1 and (target["status"], target["rule"]) == ("refused", "unmapped"), done.out
        assert "this /proc is an outer PID namespace's" in target["reason"], target
        assert Path(f"/proc/{holder_host}").exists() and Path(f"/proc/{decoy_host}").exists()

    # named without --holders: refused the same, with no hint to add --holders (that selected it)
    plain = container.vram("kill", "--simulate", str(path), str(holder_host), "--yes", env=env)
    assert plain.rc == 1 and "refused by rule 'unmapped'" in plain.out and "--holders" not in plain.out, plain.out
    said = container.vram("kill", "--simulate", str(path), str(holder_host), "--yes", env={**env, "VRAM_LANG": "zh_CN"})
    assert "outer PID namespace" not in said.out and "命名空间" in said.out, said.out
    assert Path(f"/proc/{holder_host}").exists() and Path(f"/proc/{decoy_host}").exists()


def test_pin_refuses_a_pid_this_proc_numbers_as_another_namespace(new_container, dev, env):
    container = new_container(own_proc=False)
    holder, holder_host = container.start(dev / "nvidia1")
    lone, lone_host = container.start(dev / "nvidia0")
    decoy, decoy_host = container.start(at=holder_host)

    inside = subprocess.run(["nsenter", "--target", str(container.init), "--pid", "--mount", "--", sys.executable,
                             "-c", PIN, str(holder_host), str(lone_host)], capture_output=True, text=True, env=env,
                            timeout=60)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["namespace"] * 4, inside.stdout  # the old code pinned the first three
    assert all(Path(f"/proc/{pid}").exists() for pid in (holder_host, decoy_host, lone_host))

    # where /proc numbers as this process does (the host, here) the same holder is pinned
    from vramkit.procs.signals import pidfd_pid

    held = procs.pin(holder_host, procs.identity(holder_host).start_ticks)
    assert isinstance(held, procs.Pinned), held
    try:
        assert held.fd is None or pidfd_pid(held.fd) == holder_host
    finally:
        held.close()


def test_a_containers_proc_entered_without_its_pid_namespace_numbers_no_pid_for_a_signal(container, scenario, dev, env,
                                                                                        children):
    # `nsenter --mount` without --pid: vram runs in the host's PID namespace but reads the container's
    # /proc, where /proc/self dangles. NVML's host pid H is there the number of a container process
    # (the decoy): vram once showed, checked and audited the decoy, then signalled the host's H.
    host = children.start(["sleep", "600"])
    decoy, decoy_host = container.start(dev / "nvidiactl", at=host.pid)
    path = scenario({(host.pid, decoy): {"0": "6GiB"}})
    mount_only = ["nsenter", "--target", str(container.init), "--mount", "--"]

    done = subprocess.run([*mount_only, *vram_argv("kill", "--simulate", str(path), str(host.pid), "--yes", "--json")],
                          capture_output=True, text=True, env=env, timeout=60)
    [target] = json.loads(done.stdout)["targets"]
    assert done.returncode == 1 and (target["status"], target["rule"]) == ("refused", "unmapped"), done.stdout
    assert host.poll() is None and Path(f"/proc/{decoy_host}").exists()  # neither was signalled
    shown = subprocess.run([*mount_only, *vram_argv("ps", "--simulate", str(path))], capture_output=True, text=True,
                           env=env, timeout=60)
    assert shown.returncode == 0 and "of another PID namespace" in shown.stdout, shown.stdout
