"""Red team, third wave: a hostile neighbour against the device-file holders a container's pids are
mapped through (holders.py, pidmap.py): a file of its own at a device node's path, a GPU's node
mounted under another GPU's name. Each test performs the attack with real processes and a real
mount namespace (unshare -rm)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers import clean_env, real_gpu_scenario, run_vram
from test_holders import HOLD, holder

# ---------------------------------------------------------------- a device file of one's own at the node's path

def _in_a_mount_namespace(children, tmp_path, mounts: str, opens: str) -> tuple:
    """A process in a mount namespace of its own (unshare -rm: no privilege needed where user
    namespaces are allowed) that runs `mounts` (sh, over tmp_path/dev's nvidia0, nvidia1 and
    nvidiactl: {dev} in it) and then holds `opens` ({dev} likewise) open: (dev, the process)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).write_text("")
    proc = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c", f'{mounts.format(dev=dev)} && exec "{sys.executable}" -c "$0" '
                                       f'"{opens.format(dev=dev)}"', HOLD],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    children.procs.append(proc)
    if proc.stdout.readline().strip() != b"ready":
        pytest.skip(f"cannot make a mount namespace here: {proc.stderr.read().decode(errors='replace')[:200]}")
    return dev, proc


def test_a_file_of_its_own_at_a_device_nodes_path_is_not_holding_the_gpu(children, write_scenario, tmp_path):
    # In a mount namespace of its own, a tmpfs over the directory of the nodes and a file named
    # nvidia1 there: the link in /proc/PID/fd reads exactly as the real node's path.
    dev, fake = _in_a_mount_namespace(children, tmp_path, 'mount -t tmpfs none "{dev}" && : > "{dev}/nvidia1"',
                                      "{dev}/nvidia1")
    links = {os.readlink(f"/proc/{fake.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{fake.pid}/fd")}
    assert str(dev / "nvidia1") in links  # what /proc shows of its file: the real node's path
    real = holder(children, dev / "nvidia0")
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--json", env=clean_env(COLUMNS="200")).json()
    assert {h["pid"]: h["gpus"] for h in data["holders"]} == {real.pid: [0]}


def test_a_gpu_given_under_another_gpus_name_is_held_as_itself(children, write_scenario, tmp_path):
    # A container given the host's GPU 1 as its own /dev/nvidia0 (docker --device A:B): its link
    # reads .../nvidia0, the file it holds is GPU 1's node.
    dev, remapped = _in_a_mount_namespace(children, tmp_path, 'mount --bind "{dev}/nvidia1" "{dev}/nvidia0"',
                                          "{dev}/nvidia0")
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--json", env=clean_env(COLUMNS="200")).json()
    [held] = [h for h in data["holders"] if h["pid"] == remapped.pid]
    assert held["gpus"] == [1] and held["devices"] == [str(dev / "nvidia1")]
