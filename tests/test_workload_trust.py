"""A cgroup name is believed only where root made its directory (procs/workload.py): a delegated
tree other than user@UID.service (a machined container's, a subtree an admin chowned to a user)
can name itself docker/<id>, kubepods/.../pod<uid> or slurm/uid_0/job_1, and must not borrow a
container's, pod's or job's identity. Real processes in real cgroup directories made as root and
handed to another uid (cgroup v2 and a v1 hierarchy), skipped with the reason where the machine
does not allow them; the rest on cgroup files and a mount table of the test's own."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from helpers import IS_ROOT, clean_env, real_gpu_scenario, run_vram, start_sleeper, wait_for, zh_env
from test_workload import ID, SLICE_UID, UID, _cgroup2_root, _move, cgroup_dirs  # noqa: F401 - a fixture

from vramkit.gpu_state import Workload
from vramkit.procs import workload
from vramkit.procs.table import ProcessTable
from vramkit.procs.workload import (
    CONTAINER_NOT_BELIEVED,
    JOB_NOT_BELIEVED,
    POD_NOT_BELIEVED,
    STEP_NOT_BELIEVED,
    CgroupMounts,
    parse,
    parse_path,
)

OTHER_UID = 54321  # a user with no name here: the directories are handed to it


def _hand_over(path: Path, start: str) -> None:
    """chown `path` and the directories above it up to the one named `start` to OTHER_UID, as an
    admin delegating that subtree does."""
    for d in [path, *path.parents]:
        os.chown(d, OTHER_UID, OTHER_UID)
        if d.name == start:
            return
    raise AssertionError(f"{start} is not above {path}")


def _workload(pid: int):
    host = ProcessTable().read(pid)
    assert not isinstance(host, str)
    return host.workload


def _refused(found, note: str) -> bool:
    """No owner, and the note that says a match was not believed."""
    return isinstance(found, Workload) and vars(found) == vars(Workload(note=note))


# ---------------------------------------------------------------- cgroup v2, real directories

@pytest.mark.parametrize("layout, note", [
    (f"mine/docker/{ID}", CONTAINER_NOT_BELIEVED), (f"mine/system.slice/docker-{ID}.scope", CONTAINER_NOT_BELIEVED),
    (f"mine/kubepods/burstable/pod{UID}", POD_NOT_BELIEVED),
    (f"mine/kubepods.slice/kubepods-pod{SLICE_UID}.slice/cri-containerd-{ID}.scope", POD_NOT_BELIEVED),
    ("mine/system.slice/slurmstepd.scope/job_48211/step_0/user/task_0", JOB_NOT_BELIEVED)])
def test_a_tree_handed_to_a_user_names_no_container_pod_or_job(children, cgroup_dirs, layout, note):  # noqa: F811
    sleeper = start_sleeper(children)
    made = cgroup_dirs(layout)
    _move(sleeper.pid, made)
    assert _workload(sleeper.pid) is not None  # root's own tree of that name: believed
    sleeper2 = start_sleeper(children)
    handed = cgroup_dirs(layout.replace("mine/", "theirs/"))
    _hand_over(handed, "theirs")
    assert handed.stat().st_uid == OTHER_UID
    _move(sleeper2.pid, handed)
    assert _refused(_workload(sleeper2.pid), note)


def test_ps_shows_no_owner_for_a_users_docker_named_cgroup(children, cgroup_dirs, write_scenario):  # noqa: F811
    sleeper = start_sleeper(children)
    handed = cgroup_dirs(f"machine.slice/systemd-nspawn@box.service/payload/docker/{ID}")
    _hand_over(handed, "payload")  # the container's payload is its own: a user's
    _move(sleeper.pid, handed)
    data = run_vram("ps", "--json", "--simulate",
                    str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}})))).json()
    [row] = data["processes"]
    assert (row["pid"], row["container"]) == (sleeper.pid, None)
    assert row["workload"] == {**{k: None for k in row["workload"]}, "note": CONTAINER_NOT_BELIEVED}


def test_a_match_not_believed_is_said_once_where_people_look(children, cgroup_dirs, write_scenario):  # noqa: F811
    # Two processes in two users' docker-named cgroups, one in root's: the line comes once, in
    # ps and status, and the JSON says it of each process it concerns
    first, second, ours = start_sleeper(children), start_sleeper(children), start_sleeper(children)
    for sleeper, box in ((first, "one"), (second, "two")):
        handed = cgroup_dirs(f"machine.slice/{box}/payload/docker/{ID}")
        _hand_over(handed, box)
        _move(sleeper.pid, handed)
    _move(ours.pid, cgroup_dirs(f"system.slice/docker-{ID}.scope"))
    scenario = str(write_scenario(real_gpu_scenario({first.pid: {"0": "1GiB"}, second.pid: {"0": "1GiB"},
                                                     ours.pid: {"1": "1GiB"}})))
    line = workload.local_note(CONTAINER_NOT_BELIEVED)
    for command in ("ps", "status"):
        result = run_vram(command, "--simulate", scenario, env=clean_env(COLUMNS="300"))
        assert result.rc == 0, result.err
        assert result.out.splitlines().count(line) == 1, result.out
    data = run_vram("ps", "--json", "--simulate", scenario).json()
    notes = {p["pid"]: (p["workload"] or {}).get("note") for p in data["processes"]}
    assert notes == {first.pid: CONTAINER_NOT_BELIEVED, second.pid: CONTAINER_NOT_BELIEVED, ours.pid: None}
    chinese = run_vram("ps", "--simulate", scenario, env=zh_env(COLUMNS="300"))
    said = "不采信由无法确认属于 root 的 cgroup 目录所指名的容器（该目录的所有者可以随意这样命名）"
    assert chinese.out.splitlines().count(said) == 1, chinese.out
    # Nothing refused, nothing said
    clean = run_vram("ps", "--simulate", str(write_scenario(real_gpu_scenario({ours.pid: {"0": "1GiB"}}))),
                     env=clean_env(COLUMNS="300"))
    assert "not believed" not in clean.out and f"docker {ID[:12]}" in clean.out


def test_a_pod_is_kept_where_only_the_container_below_it_is_a_users(children, cgroup_dirs):  # noqa: F811
    sleeper = start_sleeper(children)
    pod = cgroup_dirs(f"kubepods/burstable/pod{UID}")
    container = cgroup_dirs(f"kubepods/burstable/pod{UID}/{ID}")
    os.chown(container, OTHER_UID, OTHER_UID)
    _move(sleeper.pid, container)
    w = _workload(sleeper.pid)
    assert pod.stat().st_uid == 0
    assert w is not None and (w.pod_uid, w.container_id, w.note) == (UID, None, CONTAINER_NOT_BELIEVED)


def test_a_slurm_step_below_roots_job_is_dropped_when_a_user_made_it(children, cgroup_dirs):  # noqa: F811
    sleeper = start_sleeper(children)
    step = cgroup_dirs("system.slice/slurmstepd.scope/job_48211/step_0/user/task_0")
    for d in (step, step.parent, step.parent.parent):
        os.chown(d, OTHER_UID, OTHER_UID)
    _move(sleeper.pid, step)
    w = _workload(sleeper.pid)
    assert w is not None and (w.slurm_job, w.slurm_step, w.slurm_task) == (48211, None, None)
    assert w.note == STEP_NOT_BELIEVED


def test_the_directory_is_looked_at_once_per_process(children, cgroup_dirs, monkeypatch):  # noqa: F811
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs(f"system.slice/docker-{ID}.scope"))
    looked: list[str] = []
    real = CgroupMounts.owner

    def counted(self, controllers, path):
        looked.append(path)
        return real(self, controllers, path)
    monkeypatch.setattr(CgroupMounts, "owner", counted)
    table = ProcessTable()
    first = table.read(sleeper.pid)
    for _ in range(5):
        assert not isinstance(first, str) and table.read(sleeper.pid).workload is first.workload  # type: ignore[union-attr]
    assert len(looked) == 1 and looked[0].endswith(f"/docker-{ID}.scope")


# ---------------------------------------------------------------- a v1 hierarchy, real directories

def _v1_mount(controller: str) -> Path | None:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mount, _, source = line.partition(" - ")
            about = source.split()
            if len(about) >= 3 and about[0] == "cgroup" and controller in about[2].split(","):
                return Path(mount.split()[4])
    return None


@pytest.fixture
def v1_dirs():
    """make("a/b") -> a real directory at the root of the v1 `pids` hierarchy (Slurm's v1 layout
    is anchored there), removed at teardown with its processes moved back to the root first."""
    if not IS_ROOT:
        pytest.skip("needs root to make cgroup directories")
    root = _v1_mount("pids")
    if root is None:
        pytest.skip("no cgroup v1 pids hierarchy is mounted here (a cgroup v2-only host)")
    made: list[Path] = []

    def make(relative: str) -> Path:
        path = root
        for part in relative.strip("/").split("/"):
            path = path / part
            if not path.exists():
                try:
                    path.mkdir()
                except OSError as e:
                    pytest.skip(f"cannot make a cgroup under {root}: {e.strerror}")
                made.append(path)
        return path
    yield make
    for path in reversed(made):
        try:
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    (root / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
            path.rmdir()
        except OSError:
            pass


def test_a_real_slurm_v1_job_is_roots_and_at_the_hierarchys_root(children, v1_dirs):
    top = f"slurm_vt{uuid.uuid4().hex[:8]}"  # slurm_<name>: Slurm's prefix with several slurmd on one host
    ours, handed, nested = start_sleeper(children), start_sleeper(children), start_sleeper(children)
    step = v1_dirs(f"{top}/uid_0/job_48211/step_0/task_0")
    _move(ours.pid, step)
    w = _workload(ours.pid)
    assert w is not None and (w.slurm_job, w.slurm_step, w.slurm_task, w.slurm_uid) == (48211, "0", 0, 0)
    theirs = v1_dirs(f"{top}/uid_0/job_48212/step_0")
    for d in (theirs, theirs.parent):
        os.chown(d, OTHER_UID, OTHER_UID)
    _move(handed.pid, theirs)
    assert _refused(_workload(handed.pid), JOB_NOT_BELIEVED)
    # slurmd's own layout (no RootOwnedCgroups): step_N and task_N made by root in root's job_N,
    # then given to the job's user. The step's name is root's (its parent is); a task_N in the
    # user's own step_N could be the user's, so it is left out, and nothing is said.
    stock, made = start_sleeper(children), v1_dirs(f"{top}/uid_0/job_48213/step_0/task_0")
    for d in (made, made.parent):
        os.chown(d, OTHER_UID, OTHER_UID)
    _move(stock.pid, made)
    w = _workload(stock.pid)
    assert w is not None and (w.slurm_job, w.slurm_step, w.slurm_task, w.note) == (48213, "0", None, None)
    # Not at the root: a tree anyone was given may hold slurm/uid_0/job_1, made by root or not
    deep = v1_dirs(f"vt{uuid.uuid4().hex[:8]}/slurm/uid_0/job_1/step_0")
    _move(nested.pid, deep)
    assert _workload(nested.pid) is None


# ---------------------------------------------------------------- the rules on files of the test's own

def test_slurms_v1_path_counts_only_at_the_root():
    assert parse_path("/slurm/uid_0/job_1/step_0").slurm_job == 1  # type: ignore[union-attr]
    assert parse_path("/mine/slurm/uid_0/job_1/step_0") is None
    assert parse("4:pids:/user/x/slurm/uid_0/job_1\n0::/mine/slurm/uid_0/job_1\n") is None


def _mounted(tmp_path: Path) -> tuple[CgroupMounts, Path]:
    """A mount table naming tmp_path/cg as the unified hierarchy (root '/'), and a v1 pids one."""
    cg = tmp_path / "cg"
    cg.mkdir()
    table = tmp_path / "mountinfo"
    table.write_text(f"30 1 0:26 / {cg} rw - cgroup2 cgroup2 rw,nsdelegate\n"
                     f"31 1 0:27 / {tmp_path}/pids\\040x rw - cgroup cgroup rw,pids\n")
    return CgroupMounts(str(table)), cg


def test_where_the_hierarchies_are_mounted(tmp_path):
    mounts, cg = _mounted(tmp_path)
    assert mounts.directory("", "/a/b") == f"{cg}/a/b"
    assert mounts.directory("pids", "/a") == f"{tmp_path}/pids x/a"  # \040 is a space
    assert mounts.directory("memory", "/a") is None  # not mounted here
    assert mounts.directory("", "/../../etc") is None  # another cgroup namespace's: never looked up


def test_a_missing_directory_is_believed_only_while_the_process_is_still_in_it(tmp_path, monkeypatch):
    mounts, cg = _mounted(tmp_path)
    cgroup = tmp_path / "cgroup"
    text = f"0::/system.slice/docker-{ID}.scope\n"
    cgroup.write_text(text)
    # Not under the mount (another namespace, a host without it there), still named: as before
    found = workload.read_in(str(cgroup), None, mounts)
    assert found is not None and not isinstance(found, str) and found.container_id == ID
    # The process left the directory and it was removed between the two reads: not believed

    def moved(self, controllers, path):
        cgroup.write_text("0::/user.slice\n")
        return None
    monkeypatch.setattr(CgroupMounts, "owner", moved)
    cgroup.write_text(text)
    assert _refused(workload.read_in(str(cgroup), None, mounts), CONTAINER_NOT_BELIEVED)


def test_a_directory_that_cannot_be_looked_at_is_not_believed(tmp_path, monkeypatch):
    mounts, cg = _mounted(tmp_path)
    cgroup = tmp_path / "cgroup"
    cgroup.write_text(f"0::/mine/docker/{ID}\n")

    def closed(self, controllers, path):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(CgroupMounts, "owner", closed)
    assert _refused(workload.read_in(str(cgroup), None, mounts), CONTAINER_NOT_BELIEVED)


def test_the_unified_hierarchy_is_found_here(children):
    # Real: /proc/self/mountinfo names this machine's unified hierarchy where it has one
    root = _cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy is mounted here")
    sleeper = start_sleeper(children)
    assert wait_for(lambda: Path(f"/proc/{sleeper.pid}/cgroup").exists())
    own = next(line.split(":", 2)[2] for line in Path(f"/proc/{sleeper.pid}/cgroup").read_text().splitlines()
               if line.startswith("0::"))
    where = CgroupMounts().directory("", own)
    assert where is not None and Path(where).is_dir() and (Path(where) / "cgroup.procs").is_file()
