"""Whom a process works for, read from its cgroup (procs/workload.py): every layout of the
runtimes, Kubernetes and Slurm; names from the runtimes' own state files (never through a symlink,
never blocking on a FIFO); hostile cgroup files; real processes in real cgroups where root may
make them, read once per process by the process table."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
from helpers import IS_ROOT, clean_env, real_gpu_scenario, run_vram, start_sleeper, wait_for

from vramkit.procs import workload
from vramkit.procs.table import ProcessTable
from vramkit.procs.workload import CgroupError, RuntimeNames, describe, from_text, matches, parse

ID = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
UID = "7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
SLICE_UID = UID.replace("-", "_")


# ---------------------------------------------------------------- the layouts

@pytest.mark.parametrize("text, runtime", [
    (f"0::/system.slice/docker-{ID}.scope\n", "docker"),  # v2, systemd driver
    (f"12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/\n", "docker"),  # v1, cgroupfs driver
    (f"0::/docker/{ID}\n", "docker"),  # v2, cgroupfs driver
    (f"0::/machine.slice/libpod-{ID}.scope/container\n", "podman"),
    (f"0::/libpod_parent/libpod-{ID}\n", "podman"),
    (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n", "podman"),
    (f"0::/system.slice/crio-{ID}.scope\n", "cri-o"),
    (f"0::/system.slice/nerdctl-{ID}.scope\n", "containerd"),
])
def test_a_container_is_its_runtime_and_full_id(text, runtime):
    found = parse(text)
    assert found is not None and (found.runtime, found.container_id) == (runtime, ID)
    assert found.pod_uid is None and found.slurm_job is None


@pytest.mark.parametrize("text", [
    # systemd driver: the UID with underscores in the slice name; guaranteed pods have no QoS slice
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_UID}.slice/cri-containerd-{ID}.scope",
    f"0::/kubepods.slice/kubepods-pod{SLICE_UID}.slice/cri-containerd-{ID}.scope",
    f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SLICE_UID}.slice/crio-{ID}.scope",
    # a kubelet with --cgroup-root=/kubelet (kind): its slices' names start with the root's
    f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
    f"kubelet-kubepods-besteffort-pod{SLICE_UID}.slice/cri-containerd-{ID}.scope",
    # cgroupfs driver: /kubepods/<qos>/pod<uid>/<id>, v1 and v2
    f"0::/kubepods/burstable/pod{UID}/{ID}",
    f"11:memory:/kubepods/pod{UID}/{ID}\n0::/",
])
def test_a_pod_is_its_uid_with_dashes_and_its_container(text):
    found = parse(text)
    assert found is not None and found.pod_uid == UID and found.container_id == ID
    assert describe(found) == f"pod uid {UID}"  # no name without the kubelet: nothing guessed


def test_a_static_pod_uid_is_a_hash():
    found = parse(f"0::/kubepods/besteffort/pod{'a1' * 16}/{ID}")
    assert found is not None and found.pod_uid == "a1" * 16


@pytest.mark.parametrize("text, job, step, task, uid", [
    ("4:memory:/slurm/uid_1000/job_48211/step_0/task_3\n0::/", 48211, "0", 3, 1000),  # v1
    ("4:freezer:/slurm_node07/uid_1000/job_48211/step_batch\n", 48211, "batch", None, 1000),  # v1, multiple-slurmd
    ("0::/system.slice/slurmstepd.scope/job_48211/step_0/user/task_0\n", 48211, "0", 0, None),  # v2, Slurm 22+
    ("0::/system.slice/node07_slurmstepd.scope/job_48211/step_extern/user/task_special\n", 48211, "extern", None,
     None),
    ("0::/system.slice/slurmstepd.scope/job_9/step_interactive/user/task_0/mine/deeper\n", 9, "interactive", 0, None),
])
def test_a_slurm_step_is_its_job_step_task_and_user(text, job, step, task, uid):
    found = parse(text)
    assert found is not None
    assert (found.slurm_job, found.slurm_step, found.slurm_task, found.slurm_uid) == (job, step, task, uid)


def test_an_lxc_container_is_named_by_its_path():
    for text in ("0::/lxc.payload.web1\n", "3:pids:/lxc/web1\n"):
        found = parse(text)
        assert found is not None and (found.runtime, found.container_id) == ("lxc", "web1")
        assert describe(found) == "lxc container web1"


@pytest.mark.parametrize("text", [
    "0::/user.slice/user-1000.slice/session-3.scope\n", "0::/\n", "", "0::/init.scope\n",
    "0::/lxc.monitor.web1\n",  # LXC's monitor is not the container
    f"0::/system.slice/crio-conmon-{ID}.scope\n",  # nor CRI-O's conmon
    "0::/slurm/job_5/step_0\n",  # a job_ directory not under uid_N: not Slurm's layout
])
def test_a_process_in_none_of_them_has_no_workload(text):
    assert parse(text) is None


# ---------------------------------------------------------------- hostile cgroup files

def test_a_cgroup_name_with_a_newline_cannot_make_a_line_of_its_own():
    # A user with a delegated subtree can name a cgroup "x\n0::" and nest docker/<id> under it: the
    # kernel prints the path raw, so the file shows a second line for hierarchy 0.
    text = f"0::/user.slice/user-1000.slice/user@1000.service/x\n0::/docker/{ID}\n"
    with pytest.raises(CgroupError, match="hierarchy 0 listed twice"):
        parse(text)
    found = from_text(text)
    assert isinstance(found, str) and "\n" not in found


def test_escapes_and_garbage_lines_are_refused_in_one_line():
    found = from_text(f"0::/a\x1b[31mred\nnot a cgroup line\x07/docker/{ID}\n")
    assert isinstance(found, str) and "\x1b" not in found and "\x07" not in found and "\n" not in found


def test_below_a_users_own_systemd_only_rootless_podman_counts():
    # user@UID.service is the user's: a "docker-<id>.scope" made there is not Docker's
    assert parse(f"0::/user.slice/user-1000.slice/user@1000.service/app.slice/docker-{ID}.scope\n") is None
    assert parse("0::/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope/job_1/step_0\n") is None


def test_the_leftmost_match_wins_over_what_is_nested_below():
    # cgroups a container (or a job's user) makes below its own cannot change whose it is
    found = parse(f"0::/system.slice/docker-{ID}.scope/docker/{'b' * 64}\n")
    assert found is not None and found.container_id == ID
    found = parse("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/slurmstepd.scope/job_8/step_1\n")
    assert found is not None and found.slurm_job == 7


@pytest.mark.parametrize("path", ["/a" * 40_000, "/" + "x" * 70_000, "/job_1" * 12_000, "/kubepods/pod" * 6000])
def test_a_64_kib_path_is_parsed_and_what_lies_past_the_bound_is_never_read(tmp_path, path):
    # A quadratic scan of these would not return (pytest-timeout); the docker line after the
    # bound must not count.
    (tmp_path / "cgroup").write_text(f"0::{path}"[:workload.MAX_CGROUP_BYTES - 1] + f"\n0::/docker/{ID}\n")
    assert workload.read_in(str(tmp_path / "cgroup")) is None


def test_a_pod_deep_in_a_long_path_is_still_found(tmp_path):
    (tmp_path / "cgroup").write_text("0::" + "/kubepods" * 6000 + f"/pod{UID}/{ID}\n")
    found = workload.read_in(str(tmp_path / "cgroup"))
    assert found is not None and not isinstance(found, str) and found.pod_uid == UID


# ---------------------------------------------------------------- names from the runtimes' state

def _docker_state(root: Path, container_id: str = ID, name: str = "/alice-dev", image: str = "pytorch:2.4") -> Path:
    directory = root / "var/lib/docker/containers" / container_id
    directory.mkdir(parents=True)
    path = directory / "config.v2.json"
    path.write_text(json.dumps({"ID": container_id, "Name": name, "Config": {"Image": image, "Env": ["A=1"]}}))
    return path


def test_a_docker_container_is_named_from_its_config(tmp_path):
    _docker_state(tmp_path)
    found = from_text(f"0::/system.slice/docker-{ID}.scope\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str)
    assert (found.container_name, found.image, found.note) == ("alice-dev", "pytorch:2.4", None)
    assert describe(found) == "docker container alice-dev"


def test_a_podman_container_is_named_from_containers_json(tmp_path):
    state = tmp_path / "var/lib/containers/storage/overlay-containers"
    state.mkdir(parents=True)
    (state / "containers.json").write_text(json.dumps([
        {"id": "c" * 64, "names": ["other"]}, {"id": ID, "names": ["bob-notebook"], "image": "i" * 64}]))
    found = from_text(f"0::/machine.slice/libpod-{ID}.scope/container\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str) and found.container_name == "bob-notebook"


def test_podmans_list_is_read_again_for_a_container_started_since(tmp_path, monkeypatch):
    state = tmp_path / "var/lib/containers/storage/overlay-containers"
    state.mkdir(parents=True)
    (state / "containers.json").write_text(json.dumps([{"id": "c" * 64, "names": ["first"]}]))
    names = RuntimeNames(str(tmp_path))
    assert names.name("podman", "c" * 64)[0] == "first"
    (state / "containers.json").write_text(json.dumps([{"id": "c" * 64, "names": ["first"]},
                                                       {"id": ID, "names": ["later"]}]))
    assert names.name("podman", ID)[0] is None  # read a moment ago: not again yet
    monkeypatch.setattr(workload, "PODMAN_REREAD_S", 0.0)
    assert names.name("podman", ID)[0] == "later"


def test_a_name_with_escapes_is_sanitized_and_cut(tmp_path):
    _docker_state(tmp_path, name="/evil\x1b]0;pwned\x07" + "n" * 500)
    found = from_text(f"0::/docker/{ID}\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str) and found.container_name is not None
    assert "\x1b" not in found.container_name and len(found.container_name) <= workload.MAX_NAME_CHARS


def test_a_state_file_that_is_a_fifo_is_refused_at_once(tmp_path):
    directory = tmp_path / "var/lib/docker/containers" / ID
    directory.mkdir(parents=True)
    os.mkfifo(directory / "config.v2.json")  # no writer: a blocking open would wait forever
    found = from_text(f"0::/docker/{ID}\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str)
    assert found.container_id == ID and found.container_name is None  # nothing lost: the id stays
    assert found.note is not None and "not a regular file" in found.note and "\n" not in found.note


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_state_file_behind_a_symlink_is_not_followed(tmp_path, where):
    elsewhere = tmp_path / "elsewhere"
    real = _docker_state(elsewhere)
    directory = tmp_path / "var/lib/docker/containers"
    directory.mkdir(parents=True)
    if where == "file":
        (directory / ID).mkdir()
        (directory / ID / "config.v2.json").symlink_to(real)
    else:
        (directory / ID).symlink_to(real.parent)
    found = from_text(f"0::/docker/{ID}\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str)
    assert found.container_id == ID and found.container_name is None
    assert found.note is not None and "symbolic link" in found.note


def test_a_state_file_larger_than_the_bound_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(workload, "MAX_STATE_BYTES", 100)
    _docker_state(tmp_path, name="/" + "x" * 200)
    found = from_text(f"0::/docker/{ID}\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str) and found.container_name is None
    assert found.note is not None and "more than the 100 read" in found.note


def test_garbage_in_a_state_file_leaves_the_name_unknown(tmp_path):
    path = _docker_state(tmp_path)
    path.write_bytes(b"\xff\xfe{not json")
    found = from_text(f"0::/docker/{ID}\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str) and found.container_name is None and found.note


def test_no_state_here_is_no_problem(tmp_path):
    found = from_text(f"0::/docker/{ID}\n", RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str) and found.note is None


# ---------------------------------------------------------------- filters

def test_filters_match_names_ids_and_steps():
    w = parse(f"0::/system.slice/docker-{ID}.scope\n")
    assert matches(w, container=ID[:4]) and matches(w, container=ID) and not matches(w, container=ID[:3])
    assert not matches(w, pod="x") and not matches(None, container="x") and matches(None)
    job = parse("0::/system.slice/slurmstepd.scope/job_48211/step_1/user/task_0\n")
    assert matches(job, slurm_job="48211") and matches(job, slurm_job="48211.1")
    assert not matches(job, slurm_job="48211.0") and not matches(job, slurm_job="4821")
    arrayed = workload.with_environment(job, {"SLURM_JOB_ID": "48211", "SLURM_ARRAY_JOB_ID": "48200",
                                              "SLURM_ARRAY_TASK_ID": "11"})
    assert matches(arrayed, slurm_job="48200_11") and matches(arrayed, slurm_job="48200")
    assert describe(arrayed) == "Slurm job 48211 step 1 (array task 48200_11, as its environment says)"
    assert workload.with_environment(job, {"SLURM_ARRAY_JOB_ID": "x", "SLURM_ARRAY_TASK_ID": "1"}) == job



STEP = "0::/system.slice/slurmstepd.scope/job_48211/step_0/user/task_0\n"


@pytest.mark.parametrize("env, gpus, variable", [
    ({"SLURM_STEP_GPUS": "2,3", "SLURM_JOB_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "0,1"}, ("2", "3"),
     "SLURM_STEP_GPUS"),
    ({"SLURM_JOB_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, ("0", "1", "2", "3"), "SLURM_JOB_GPUS"),
    ({"CUDA_VISIBLE_DEVICES": "GPU-5b0e3f2a-1c4d,MIG-11111111-2222-3333-4444-555555555555"},
     ("GPU-5b0e3f2a-1c4d", "MIG-11111111-2222-3333-4444-555555555555"), "CUDA_VISIBLE_DEVICES"),
    ({"SLURM_STEP_GPUS": "", "SLURM_JOB_GPUS": "1"}, ("1",), "SLURM_JOB_GPUS"),  # an empty list says nothing
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, None, None),  # what Slurm sets where a job has no GPU
    ({"SLURM_JOB_GPUS": "0,1\x1b[2J"}, None, None),
    ({"SLURM_JOB_GPUS": ",".join(["1"] * 65)}, None, None),
    ({"SLURM_JOB_GPUS": "0,,1"}, None, None),
])
def test_a_slurm_jobs_gpus_from_its_environment(env, gpus, variable):
    w = workload.with_environment(parse(STEP), {"SLURM_JOB_ID": "48211", **env})
    assert (w.slurm_gpus, w.slurm_gpus_from) == (gpus, variable)


def test_a_slurm_jobs_gpus_are_believed_only_from_its_own_job():
    # Variables inherited from another job (a job started from inside another) name that job's GPUs
    env = {"SLURM_JOB_ID": "500", "SLURM_JOB_GPUS": "0,1", "SLURM_STEP_GPUS": "0"}
    job = parse(STEP)
    assert workload.with_environment(job, env) is job
    assert workload.with_environment(job, {"SLURM_JOB_GPUS": "0,1"}) is job  # no job id at all


# ---------------------------------------------------------------- real processes in real cgroups

def _cgroup2_root() -> Path | None:
    """Where cgroup v2 is mounted here (the unified tree of a hybrid host, else /sys/fs/cgroup)."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if " - cgroup2 " in line:
                    return Path(fields[4])
    except OSError:
        pass
    return None


@pytest.fixture
def cgroup_dirs():
    """make("a/b/c") -> a real cgroup v2 directory under a fresh top-level one, removed (its
    processes moved back to the root first) at teardown; skipped where root cannot make one."""
    root = _cgroup2_root()
    if not IS_ROOT:
        pytest.skip("needs root to make cgroup directories")
    if root is None:
        pytest.skip("no cgroup v2 hierarchy is mounted here")
    top = root / f"vramtest-{uuid.uuid4().hex[:10]}"
    try:
        top.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a cgroup under {root}: {e.strerror}")
    made: list[Path] = [top]

    def make(relative: str) -> Path:
        path = top
        for part in relative.strip("/").split("/"):
            path = path / part
            if not path.exists():
                path.mkdir()
                made.append(path)
        return path
    yield make
    for path in reversed(made):
        try:
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    (root / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # it exited meanwhile
            path.rmdir()
        except OSError:
            pass


def _move(pid: int, cgroup: Path) -> None:
    (cgroup / "cgroup.procs").write_text(str(pid))
    assert wait_for(lambda: cgroup.name in Path(f"/proc/{pid}/cgroup").read_text())


def test_a_real_process_in_a_docker_scope_is_named_from_the_state_once(children, cgroup_dirs, tmp_path,
                                                                          monkeypatch):
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs(f"system.slice/docker-{ID}.scope"))
    state = _docker_state(tmp_path)
    monkeypatch.setenv(workload.STATE_ROOT_ENV, str(tmp_path))
    table = ProcessTable()
    first = table.read(sleeper.pid)
    assert not isinstance(first, str) and first.workload is not None
    assert (first.workload.runtime, first.workload.container_id, first.workload.container_name) == (
        "docker", ID, "alice-dev")
    assert first.container == ID[:12]
    # Kept with the process's identity: the state is not read again on the next reading.
    state.write_text(json.dumps({"Name": "/renamed"}))
    again = table.read(sleeper.pid)
    assert not isinstance(again, str) and again.workload is first.workload


def test_a_real_slurm_v2_step_with_its_array_task(children, cgroup_dirs):
    proc = children.start(["sleep", "600"], env={**os.environ, "SLURM_JOB_ID": "48211",
                                                  "SLURM_ARRAY_JOB_ID": "48200", "SLURM_ARRAY_TASK_ID": "7"})
    assert wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes() == b"sleep\x00600\x00")
    _move(proc.pid, cgroup_dirs("system.slice/slurmstepd.scope/job_48211/step_0/user/task_0"))
    host = ProcessTable().read(proc.pid)
    assert not isinstance(host, str) and host.workload is not None
    w = host.workload
    assert (w.slurm_job, w.slurm_step, w.slurm_task, w.slurm_array_job, w.slurm_array_task) == (
        48211, "0", 0, 48200, 7)


def test_a_real_process_adopted_into_a_slurm_job_shows_its_job_within_the_recheck_bound(children, cgroup_dirs,
                                                                                        monkeypatch):
    # pam_slurm_adopt moves an ssh session's process into the job after vram first read it.
    from vramkit.procs import table as table_module

    later = [0.0]
    monkeypatch.setattr(table_module, "monotonic", lambda: time.monotonic() + later[0])
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs("user.slice/user-1000.slice/session-3.scope"))
    table = ProcessTable()
    first = table.read(sleeper.pid)
    assert not isinstance(first, str) and first.workload is None
    _move(sleeper.pid, cgroup_dirs("system.slice/slurmstepd.scope/job_48211/step_extern/user/task_0"))
    kept = table.read(sleeper.pid)  # kept until its recheck: the cgroup file is not read every tick
    assert not isinstance(kept, str) and kept.workload is None
    later[0] = table_module.WORKLOAD_RECHECK_S
    moved = table.read(sleeper.pid)
    assert not isinstance(moved, str) and moved.workload is not None, moved
    assert (moved.workload.slurm_job, moved.workload.slurm_step) == (48211, "extern")
    later[0] = 2 * table_module.WORKLOAD_RECHECK_S  # checked again, not moved: the same reading
    again = table.read(sleeper.pid)
    assert not isinstance(again, str) and again.workload is moved.workload
    # moved by a container runtime: its container too
    _move(sleeper.pid, cgroup_dirs(f"system.slice/docker-{ID}.scope"))
    later[0] = 3 * table_module.WORKLOAD_RECHECK_S
    boxed = table.read(sleeper.pid)
    assert not isinstance(boxed, str) and boxed.container == ID[:12] and boxed.workload is not None
    assert boxed.workload.slurm_job is None


@pytest.mark.parametrize("job_id, shown", [("48211", ["2", "3"]), ("500", None)])
def test_a_real_slurm_steps_gpus_in_ps_and_status_json(children, cgroup_dirs, write_scenario, job_id, shown):
    proc = children.start(["sleep", "600"], env={**os.environ, "SLURM_JOB_ID": job_id, "SLURM_JOB_GPUS": "0,1,2,3",
                                                  "SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes() == b"sleep\x00600\x00")
    _move(proc.pid, cgroup_dirs("system.slice/slurmstepd.scope/job_48211/step_0/user/task_0"))
    path = str(write_scenario(real_gpu_scenario({proc.pid: {"0": "1GiB"}})))
    [row] = run_vram("ps", "--json", "--simulate", path).json()["processes"]
    status = run_vram("status", "--json", "--simulate", path).json()
    [listed] = [p for g in status["gpus"] for p in g["processes"]]
    for w in (row["workload"], listed["workload"]):
        assert w["slurm_job"] == 48211
        assert (w["slurm_gpus"], w["slurm_gpus_from"]) == (shown, shown and "SLURM_STEP_GPUS")


def test_a_real_hostile_cgroup_name_is_one_line_and_the_process_stays_listed(children, cgroup_dirs, write_scenario):
    sleeper = start_sleeper(children)
    try:
        hostile = cgroup_dirs(f"x\n0::/docker/{ID}")
    except OSError as e:
        pytest.skip(f"this kernel refuses a newline in a cgroup name: {e.strerror}")
    _move(sleeper.pid, hostile)
    started = time.monotonic()
    result = run_vram("ps", "--simulate", str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}}))),
                      env=clean_env(COLUMNS="200"))
    assert result.rc == 0, result.err
    assert time.monotonic() - started < 30  # (run_vram's own timeout: no hang)
    rows = [line for line in result.out.splitlines() if f" {sleeper.pid} " in line]
    assert len(rows) == 1 and "docker" not in rows[0]  # listed, and not as Docker's
    notes = [line for line in result.out.splitlines() if "cannot be read as the kernel's" in line]
    assert len(notes) == 1 and f"pid {sleeper.pid}" in notes[0]


def test_a_real_cgroup_name_with_escapes_below_a_users_systemd_is_not_a_container(children, cgroup_dirs,
                                                                                   write_scenario):
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs(f"user.slice/user-1000.slice/user@1000.service/\x1b[31mred\x07/docker-{ID}.scope"))
    data = run_vram("ps", "--json", "--simulate",
                    str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}})))).json()
    assert [(p["pid"], p["workload"], p["container"]) for p in data["processes"]] == [(sleeper.pid, None, None)]
    text = run_vram("ps", "--simulate", str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}}))))
    assert "\x1b" not in text.out and "OWNER" not in text.out


def test_a_real_process_outside_any_workload_shows_nothing_extra(children, write_scenario):
    sleeper = start_sleeper(children)
    own = Path(f"/proc/{sleeper.pid}/cgroup").read_text()
    if parse(own) is not None:
        pytest.skip(f"the test itself runs in a workload's cgroup ({describe(parse(own))})")
    result = run_vram("ps", "--simulate", str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}}))),
                      env=clean_env(COLUMNS="200"))
    assert result.rc == 0, result.err
    assert "OWNER" not in result.out
    data = run_vram("ps", "--json", "--simulate",
                    str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}}), "again.json"))).json()
    assert [p["workload"] for p in data["processes"]] == [None]
