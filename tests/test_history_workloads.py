"""History by workload (issue 30 item 2): `vram record` keeps each process life's container, pod
and Slurm job; `vram report --by container|pod|namespace|slurm-job` and `vram life` show them.
Recorded on the bundled `workloads` scenario (a docker container, a Kubernetes pod named by the
kubelet's answer, a Slurm job step, a bare process) on the stepped clock, so every number follows
from the scenario. Also: the old names (`vram job`, `--by job`) and databases of schema 2 and 3."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import clean_env, run_vram, vram_argv

from vramkit.gpu_state import Device, GpuProcess, Snapshot, Workload
from vramkit.history import query
from vramkit.history.recorder import Recorder
from vramkit.history.store import SCHEMA_VERSION, WORKLOAD_COLUMNS, Store

EPOCH = 1767225600  # 2026-01-01 00:00 UTC
HOURS = 2
SECONDS = HOURS * 3600
GiB = 1024**3
WINDOW = ("--since", f"@{EPOCH}", "--until", f"@{EPOCH + SECONDS}")
# The scenario's processes: pid -> (GiB held on its one GPU, idle)
DOCKER, POD, SLURM, BARE = 4101, 5230, 6120, 7001
HELD = {DOCKER: 31, POD: 60, SLURM: 40, BARE: 10}
CONTAINER_ID = "3f9a1c2b4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"
POD_CONTAINER_ID = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
POD_UID = "7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


def stepped(**extra: str) -> dict[str, str]:
    return clean_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME=None, TZ="UTC", **extra)


def record(db: Path, hours: int = HOURS, start: float = 0) -> None:
    env = stepped()
    env["VRAM_SIM_TIME"] = f"{start:g}"
    done = run_vram("record", "--simulate", "workloads", "--db", str(db), "--interval", "20s",
                    "--duration", f"{hours}h", "--quiet", env=env)
    assert done.rc == 0, done.err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("workloads") / "history.db"
    record(db)
    return db


def report(db: Path, *args: str) -> dict:
    result = run_vram("report", "--db", str(db), *WINDOW, "--json", *args, env=stepped())
    assert result.rc == 0 and result.err == "", result.err
    return result.json()


def by_key(doc: dict, key: str) -> dict:
    return {row[key]: row for row in doc["rows"]}


def totals(*pids: int) -> tuple[float, float]:
    """(GPU-seconds, memory byte-seconds) the scenario implies for these processes over the window."""
    return len(pids) * SECONDS, sum(HELD[p] for p in pids) * GiB * SECONDS


def check(row: dict, *pids: int) -> None:
    assert (row["gpu_seconds"], row["memory_byte_seconds"]) == totals(*pids), row
    assert row["lives"] == row["jobs"] == len(pids)


# ---------------------------------------------------------------- report --by a workload
def test_by_container(recorded):
    rows = by_key(report(recorded, "--by", "container"), "container")
    assert set(rows) == {"alice-dev", "trainer", None}
    assert (rows["alice-dev"]["runtime"], rows["alice-dev"]["container_id"]) == ("docker", CONTAINER_ID)
    assert (rows["trainer"]["runtime"], rows["trainer"]["container_id"]) == ("containerd", POD_CONTAINER_ID)
    check(rows["alice-dev"], DOCKER)
    check(rows["trainer"], POD)
    check(rows[None], SLURM, BARE)  # a Slurm step and a bare process are in no container
    assert rows[None]["runtime"] is None and rows[None]["container_id"] is None


def test_by_pod_and_namespace(recorded):
    pods = by_key(report(recorded, "--by", "pod"), "pod")
    assert set(pods) == {"train-7f9c", None}
    assert (pods["train-7f9c"]["namespace"], pods["train-7f9c"]["pod_uid"]) == ("nlp", POD_UID)
    check(pods["train-7f9c"], POD)
    check(pods[None], DOCKER, SLURM, BARE)
    namespaces = by_key(report(recorded, "--by", "namespace"), "namespace")
    assert set(namespaces) == {"nlp", None}
    check(namespaces["nlp"], POD)
    check(namespaces[None], DOCKER, SLURM, BARE)


def test_by_slurm_job(recorded):
    doc = report(recorded, "--by", "slurm-job")
    assert doc["by"] == "slurm-job"
    jobs = by_key(doc, "slurm_job")
    assert set(jobs) == {48211, None}
    check(jobs[48211], SLURM)
    check(jobs[None], DOCKER, POD, BARE)


def test_text_groups_the_rest_as_none(recorded):
    result = run_vram("report", "--db", str(recorded), *WINDOW, "--by", "pod", env=stepped())
    assert result.rc == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "usage by pod, 2026-01-01 00:00 to 2026-01-01 02:00 (2h00m)"
    assert lines[3].split() == ["POD", "GPU-HOURS", "GiB-HOURS", "PEAK", "MEM", "IDLE", "HOURS", "PROCESSES"]
    assert lines[4].split() == ["(none)", "6.00", "162.0", "40.0GiB", "2.00", "3"]  # 31+40+10 GiB x 2 h
    assert lines[5].split() == ["nlp/train-7f9c", "2.00", "120.0", "60.0GiB", "0.00", "1"]
    slurm = run_vram("report", "--db", str(recorded), *WINDOW, "--by", "slurm-job", env=stepped()).out
    assert "usage by Slurm job," in slurm and "SLURM JOB" in slurm
    assert next(line for line in slurm.splitlines() if "48211" in line).split()[1:3] == ["2.00", "80.0"]


@pytest.mark.parametrize("by, key", [("container", "container"), ("pod", "pod"), ("namespace", "namespace"),
                                     ("slurm-job", "slurm_job"), ("life", "pid")])
def test_csv_has_the_rows_of_json(recorded, by, key):
    doc = report(recorded, "--by", by)
    result = run_vram("report", "--db", str(recorded), *WINDOW, "--csv", "--by", by, env=stepped())
    assert result.rc == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert [r[key] for r in rows] == ["N/A" if r[key] is None else str(r[key]) for r in doc["rows"]]
    assert [float(r["gpu_seconds"]) for r in rows] == [r["gpu_seconds"] for r in doc["rows"]]


def test_by_life_rows_carry_the_workload(recorded):
    rows = by_key(report(recorded, "--by", "life"), "pid")
    assert set(rows) == set(HELD)
    assert rows[DOCKER]["workload"]["container_name"] == "alice-dev"
    assert rows[POD]["workload"]["pod"] == "train-7f9c" and rows[POD]["workload"]["namespace"] == "nlp"
    assert (rows[SLURM]["workload"]["slurm_job"], rows[SLURM]["workload"]["slurm_step"]) == (48211, "0")
    assert rows[BARE]["workload"] is None
    wide = run_vram("report", "--db", str(recorded), *WINDOW, "--by", "life", env=stepped(COLUMNS="200")).out
    owners = {line.split()[0]: line for line in wide.splitlines()[4:8]}
    assert "Slurm job 48211 step 0" in owners[str(SLURM)] and "pod nlp/train-7f9c" in owners[str(POD)]
    assert "docker container alice-dev" in owners[str(DOCKER)]
    assert "container" not in owners[str(BARE)] and "Slurm" not in owners[str(BARE)]


# ---------------------------------------------------------------- vram life
def test_life_says_whose_the_process_was(recorded):
    def life(pid: int) -> list[str]:
        result = run_vram("life", str(pid), "--db", str(recorded), env=stepped())
        assert result.rc == 0, result.err
        return result.out.splitlines()

    assert life(SLURM)[1] == "  owner   Slurm job 48211 step 0"
    assert life(POD)[1] == "  owner   pod nlp/train-7f9c"
    assert life(DOCKER)[1] == "  owner   docker container alice-dev"
    assert life(BARE)[1].startswith("  held    ")  # in none: nothing extra
    doc = run_vram("life", str(DOCKER), "--db", str(recorded), "--json", env=stepped()).json()
    workload = doc["lives"][0]["workload"]
    assert set(workload) == {column for column, _ in WORKLOAD_COLUMNS}
    assert (workload["runtime"], workload["container_id"], workload["container_name"]) == (
        "docker", CONTAINER_ID, "alice-dev")
    bare = run_vram("life", str(BARE), "--db", str(recorded), "--json", env=stepped()).json()
    assert bare["lives"][0]["workload"] is None


# ---------------------------------------------------------------- the old names
def test_vram_job_is_vram_life_with_a_note(recorded):
    new = run_vram("life", str(SLURM), "--db", str(recorded), env=stepped())
    old = run_vram("job", str(SLURM), "--db", str(recorded), env=stepped())
    assert old.rc == new.rc == 0 and old.out == new.out and new.err == ""
    assert old.err == "vram: note: 'vram job' is now 'vram life' (the old name works until the next release)\n"
    listed = {line.split()[0] for line in run_vram("--help").out.splitlines() if line.startswith("    ")}
    assert "life" in listed and "job" not in listed  # hidden from the listing
    wrong = run_vram("jbo")
    assert wrong.rc == 2 and "'job'" not in wrong.err


def test_by_job_is_by_life_with_a_note(recorded):
    new = run_vram("report", "--db", str(recorded), *WINDOW, "--json", "--by", "life", env=stepped())
    old = run_vram("report", "--db", str(recorded), *WINDOW, "--json", "--by", "job", env=stepped())
    assert old.rc == 0 and old.json() == new.json() and old.json()["by"] == "life"
    assert old.err == "vram: note: --by job is now --by life (the old name works until the next release)\n"


# ---------------------------------------------------------------- older databases
def _downgrade(db: Path, version: int) -> None:
    """Make `db` what a recorder of schema `version` wrote: without the workloads (and, for 2,
    without the day sums)."""
    with sqlite3.connect(db) as c:
        c.execute("DROP VIEW job_totals")
        c.execute("DELETE FROM meta WHERE key = 'jobs_through'")
        c.execute("DROP TABLE quarter_totals")
        c.execute("DROP TABLE hour_totals")
        c.execute("ALTER TABLE proc_day DROP COLUMN first_hour")
        c.execute("ALTER TABLE proc_day DROP COLUMN last_hour")
        c.execute("DROP TABLE local_days")
        c.execute("DROP TABLE proc_local_day")
        c.execute("ALTER TABLE jobs DROP COLUMN nvml_pid")
        c.execute("DROP TABLE workloads")
        if version < 3:
            c.execute("DROP TABLE proc_day")
            c.execute("DROP TABLE gpu_day")
        c.execute(f"PRAGMA user_version = {version}")


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_database_still_reports_and_is_upgraded(recorded, tmp_path, version):
    db = tmp_path / "old.db"
    shutil.copy(recorded, db)
    _downgrade(db, version)
    users = report(db)
    assert {r["user"] for r in users["rows"]} == {"alice", "root", "carol", "dave"}
    result = run_vram("report", "--db", str(db), *WINDOW, "--json", "--by", "pod", env=stepped())
    assert result.rc == 0, result.err
    rows = result.json()["rows"]
    assert [r["pod"] for r in rows] == [None] and rows[0]["lives"] == 4  # nothing kept: every life in none
    text = run_vram("report", "--db", str(db), *WINDOW, "--by", "pod", env=stepped()).out
    assert f"was recorded before workloads were kept (schema {version})" in text
    assert run_vram("life", str(SLURM), "--db", str(db), env=stepped()).out.splitlines()[1].startswith("  held")
    # The recorder upgrades it, and the lives it goes on with get their workload when next seen.
    record(db, hours=1, start=SECONDS)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    later = run_vram("report", "--db", str(db), "--since", f"@{EPOCH}", "--until", f"@{EPOCH + 3 * 3600}",
                     "--json", "--by", "slurm-job", env=stepped())
    assert later.rc == 0, later.err
    jobs = {r["slurm_job"]: r for r in later.json()["rows"]}
    assert set(jobs) == {48211, None} and jobs[48211]["lives"] == 1  # the same life, continued
    assert jobs[48211]["gpu_seconds"] == 3 * 3600  # all of it: before the upgrade too


# ---------------------------------------------------------------- root's published copy
@pytest.fixture
def readable_dir() -> Iterator[Path]:
    """A root-owned directory others may read but not write (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="vramkit-workloads-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to record as root and read as another user")
def test_another_user_reads_workloads_from_the_published_copy(readable_dir):
    db = readable_dir / "history.db"
    record(db, hours=1)
    assert (readable_dir / "private" / "history.db").exists() and oct(db.stat().st_mode & 0o777) == "0o644"
    argv = vram_argv("report", "--db", str(db), "--since", f"@{EPOCH}", "--until", f"@{EPOCH + 3600}",
                     "--json", "--by", "slurm-job")
    other = subprocess.run(["setpriv", "--reuid=1001", "--regid=1001", "--clear-groups", *argv],
                           capture_output=True, text=True, env=stepped(), timeout=120, stdin=subprocess.DEVNULL)
    assert other.returncode == 0, other.stderr
    rows = {r["slurm_job"]: r["lives"] for r in json.loads(other.stdout)["rows"]}
    assert rows == {48211: 1, None: 3}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to record as root and read as other users")
def test_a_log_another_user_planted_beside_the_published_copy_does_not_stop_its_readers(shared_dir):
    # In a shared sticky directory anyone may plant NAME-wal, and only its maker may remove it: the
    # copy is in rollback-journal mode, written whole by the recorder, so such a log is none of it.
    db = shared_dir / "history.db"
    record(db, hours=1)
    planted = Path(f"{db}-wal")
    planted.write_bytes(b"not a log")
    os.chown(planted, 1001, 1001)
    argv = vram_argv("report", "--db", str(db), "--since", f"@{EPOCH}", "--until", f"@{EPOCH + 3600}", "--json")
    other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                           capture_output=True, text=True, env=stepped(), timeout=120, stdin=subprocess.DEVNULL)
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["rows"] and planted.read_bytes() == b"not a log"


# ---------------------------------------------------------------- what becomes known later
def _snapshot(t: float, workload: Workload) -> Snapshot:
    proc = GpuProcess(pid=300, gpu=0, gpu_uuid=None, memory=GiB, start_ticks=42, user="alice",
                      sm_utilization=50, workload=workload)
    return Snapshot(time=t, gpus=[Device(index=0, utilization=50, processes=[proc])], monotonic=t)


def test_a_name_known_later_is_filled_in_and_what_was_written_stays(tmp_path):
    # The kubelet did not answer at first (the pod has its UID only), then named it; later still
    # another name is never written over it (a process does not move to another pod).
    unnamed = Workload(runtime="containerd", container_id=POD_CONTAINER_ID, pod_uid=POD_UID)
    named = Workload(runtime="containerd", container_id=POD_CONTAINER_ID, pod_uid=POD_UID, pod="train-7f9c",
                     namespace="nlp", pod_container="trainer")
    renamed = Workload(runtime="containerd", container_id=POD_CONTAINER_ID, pod_uid=POD_UID, pod="other",
                       namespace="other", pod_container="other")
    db = tmp_path / "h.db"
    store = Store.open(db, write=True)
    recorder = Recorder(store, 10.0)
    for i, w in enumerate([unnamed, unnamed, named, named, renamed]):
        recorder.record(_snapshot(EPOCH + 10 * i, w))
    recorder.close(now_monotonic=EPOCH + 50)
    store = Store.open(db)
    try:
        rows = query.usage(store, EPOCH, EPOCH + 60, "pod")
        lives = query.process_lives(store, 300)
    finally:
        store.close()
    assert [(u.key, u.lives, u.gpu_seconds) for u in rows] == [("nlp/train-7f9c", 1, 50.0)]
    (life,) = lives
    assert life.workload is not None and (life.workload.pod, life.workload.pod_container) == ("train-7f9c", "trainer")


# ---------------------------------------------------------------- hostile values
BAD = [None, "abc", b"\x00\xff", 1e308, float("-inf"), -9223372036854775808, -1, 1.5, "x" * 100_000,
       "evil\x1b[31m\n"]


@pytest.mark.parametrize("bad", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_values_of_the_wrong_kind_in_workloads_are_unknown_never_a_traceback(recorded, tmp_path, cli, bad):
    db = tmp_path / "bad.db"
    shutil.copy(recorded, db)
    with sqlite3.connect(db) as c:
        c.execute(f"UPDATE workloads SET {', '.join(f'{column} = ?' for column, _ in WORKLOAD_COLUMNS)}",
                  (bad,) * len(WORKLOAD_COLUMNS))
    c.close()
    for by in ("container", "pod", "namespace", "slurm-job", "life"):
        for out in ("--json", "--csv", "--no-color"):
            rc, text, err = cli("report", "--db", str(db), *WINDOW, "--by", by, out)
            assert rc == 0 and err == "", (by, out, err)
            assert "\x1b" not in text and "x" * 300 not in text
            if out == "--json":
                assert sum(r["lives"] for r in json.loads(text)["rows"]) == 4
    for pid in HELD:
        rc, text, err = cli("life", str(pid), "--db", str(db), "--json")
        assert rc == 0 and err == "", err
        workload = json.loads(text)["lives"][0]["workload"]
        assert workload is None or all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                       for v in workload.values() if v is not None)


def test_a_container_named_none_is_not_the_group_of_none(recorded, tmp_path, cli):
    db = tmp_path / "named.db"
    shutil.copy(recorded, db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE workloads SET container_name = '(none)' WHERE runtime = 'docker'")
    c.close()
    rc, out, err = cli("report", "--db", str(db), *WINDOW, "--by", "container", "--json")
    assert rc == 0, err
    rows = [(r["container"], r["container_id"], r["lives"]) for r in json.loads(out)["rows"]]
    assert ("(none)", CONTAINER_ID, 1) in rows and (None, None, 2) in rows
