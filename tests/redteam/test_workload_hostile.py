"""Red team, third wave: a hostile neighbour against what names a process's owner
(procs/workload.py): a container name borrowed from root's, a Slurm array task claimed through the
environment, a made-up cgroup hierarchy line, a state directory another user may write. Each test
performs the attack with real processes and files. (The kubelet's: test_kubelet_hostile.py; the
device-file holders: test_holders_hostile.py; vram fleet's peers: test_fleet_hostile_peers.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import clean_env, real_gpu_scenario, run_vram, start_sleeper, wait_for
from test_workload import ID, _move, cgroup_dirs  # noqa: F401 - cgroup_dirs is a fixture

from vramkit.procs.workload import RuntimeNames, describe, from_text

# ---------------------------------------------------------------- a rootless container borrowing root's name

ROOTLESS = f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n"


def _roots_podman(root) -> None:
    """Root's podman list, naming root's container ID 'prod-db'."""
    state = root / "var/lib/containers/storage/overlay-containers"
    state.mkdir(parents=True)
    (state / "containers.json").write_text(json.dumps([{"id": ID, "names": ["prod-db"], "image": "postgres:16"}]))


def test_a_rootless_container_named_with_roots_container_id_does_not_get_its_name(tmp_path):
    # A user names a cgroup under their own systemd libpod-<id of root's container>.scope: the id is
    # theirs to choose, so root's list must not name it.
    _roots_podman(tmp_path)
    found = from_text(ROOTLESS, RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str)
    assert (found.runtime, found.container_id, found.container_name, found.image) == ("podman", ID, None, None)
    assert describe(found) == f"podman container {ID[:12]}"
    # Root's own container of that id is still named.
    rootful = from_text(f"0::/machine.slice/libpod-{ID}.scope/container\n", RuntimeNames(str(tmp_path)))
    assert rootful is not None and not isinstance(rootful, str) and rootful.container_name == "prod-db"


def test_a_real_process_in_a_users_libpod_scope_is_not_shown_as_roots_container(children, cgroup_dirs,  # noqa: F811
                                                                                 tmp_path, write_scenario):
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs(f"user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"))
    _roots_podman(tmp_path)
    path = str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}})))
    env = clean_env(VRAM_STATE_ROOT=str(tmp_path), COLUMNS="200")
    [row] = run_vram("ps", "--json", "--simulate", path, env=env).json()["processes"]
    assert row["workload"]["container_id"] == ID and row["workload"]["container_name"] is None
    shown = run_vram("ps", "--simulate", path, "--container", "prod-db", env=env)
    assert shown.rc == 0 and f" {sleeper.pid} " not in shown.out


# ---------------------------------------------------------------- a Slurm array task by the environment's word

def test_a_job_claiming_another_arrays_task_in_its_environment_still_shows_its_own_job(children, cgroup_dirs,  # noqa: F811
                                                                                       write_scenario):
    # Job 500's process says it is task 3 of array 48200 (someone else's): it sets its environment itself.
    claim = {"SLURM_ARRAY_JOB_ID": "48200", "SLURM_ARRAY_TASK_ID": "3"}
    liar = children.start(["sleep", "600"], env={**os.environ, **claim, "SLURM_JOB_ID": "500"})
    stale = children.start(["sleep", "600"], env={**os.environ, **claim, "SLURM_JOB_ID": "400"})
    for proc, job in ((liar, 500), (stale, 501)):
        assert wait_for(lambda p=proc: Path(f"/proc/{p.pid}/cmdline").read_bytes() == b"sleep\x00600\x00")
        _move(proc.pid, cgroup_dirs(f"system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0"))
    path = str(write_scenario(real_gpu_scenario({liar.pid: {"0": "1GiB"}, stale.pid: {"1": "1GiB"}})))
    shown = run_vram("ps", "--simulate", path, env=clean_env(COLUMNS="200"))
    [row] = [line for line in shown.out.splitlines() if f" {liar.pid} " in line]
    assert "slurm 500.0" in row and "48200" not in row
    rows = {p["pid"]: p["workload"] for p in run_vram("ps", "--json", "--simulate", path).json()["processes"]}
    assert (rows[liar.pid]["slurm_job"], rows[liar.pid]["slurm_array_job"]) == (500, 48200)
    # Variables inherited from another job (SLURM_JOB_ID not this one's) are not believed at all.
    assert (rows[stale.pid]["slurm_job"], rows[stale.pid]["slurm_array_job"]) == (501, None)


# ---------------------------------------------------------------- a line of its own with a digit that is not ASCII

@pytest.mark.parametrize("digit", ["\u00b2", "\u0660", "\u0663"])
def test_a_made_up_hierarchy_line_numbered_in_other_digits_is_refused(digit):
    # Where the kernel lets a cgroup name hold a newline, the rest of the name is a line of its own:
    # '²' crashed the reading (isdigit() but not int()), and '٠' sorted as hierarchy 0 ahead of
    # the kernel's own lines on a cgroup v1 host, past the check that no hierarchy is listed twice.
    text = f"4:memory:/user.slice/x\n{digit}::/docker/{ID}\n3:cpu:/\n"
    found = from_text(text)
    assert isinstance(found, str) and "its cgroup cannot be read as the kernel's" in found


# ---------------------------------------------------------------- a state root another user handed in

def _docker_config(root, name: str):
    directory = root / "var/lib/docker/containers" / ID
    directory.mkdir(parents=True)
    (directory / "config.v2.json").write_text(json.dumps({"Name": f"/{name}", "Config": {"Image": "x"}}))
    return directory


def test_container_names_are_not_read_from_a_state_another_user_may_write(tmp_path, write_scenario, children,
                                                                          cgroup_dirs):  # noqa: F811
    # root's vram run with an environment a user handed it (VRAM_STATE_ROOT=their directory): the
    # user's files must not name root's containers.
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs(f"system.slice/docker-{ID}.scope"))
    directory = _docker_config(tmp_path, "payroll-db")
    path = str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}})))
    env = clean_env(VRAM_STATE_ROOT=str(tmp_path), COLUMNS="200")

    def shown() -> tuple[str | None, str]:
        result = run_vram("ps", "--json", "--simulate", path, env=env).json()
        [row] = result["processes"]
        return row["workload"]["container_name"], row["workload"]["note"] or ""
    assert shown()[0] == "payroll-db"  # root's own state: named
    directory.chmod(0o777)  # anyone could have written it
    name, notes = shown()
    assert name is None and f"{ID} may be changed by any user" in notes
    directory.chmod(0o700)
    os.chown(directory / "config.v2.json", 65534, 65534)  # another user's file
    name, notes = shown()
    assert name is None and "config.v2.json belongs to uid 65534, not to root or you" in notes
