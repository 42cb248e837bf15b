"""The history store: one SQLite file (WAL mode) of GPU and process samples, process lives (jobs)
and their rollups. docs/history.md describes the schema for people; this is its one definition.

Time is split into tiers that never overlap: raw samples for the last day, then 1-minute rollups,
then 15-minute rollups (Retention). Each row says how many seconds it stands for, so a report
sums value x seconds over every tier alike (the views gpu_time and proc_time).

A raw sample stands for the time from it to the next sample, capped (a recorder that was stopped
does not count its downtime): its `span` is written when the next sample is, so a recorder killed
mid-write loses at most the last interval. Writers and readers never wait for each other (WAL).

Hour sums (schema 2): proc_hour and gpu_hour hold, per hour, the sums reports add up (value x
seconds, never averages, so that merging is adding), for every sample up to meta `hour_sample`
(a sample id), from hour meta `hour_since` on. A report reads whole hours there and only the rest
row by row (query.py): a 30-day report reads tens of thousands of rows, not millions.

Day sums (schema 3): proc_day and gpu_day hold the same sums per UTC day, summed from the hour
sums in the transaction that changes an hour of the day, so a day's sums are those of its hours: a year's report reads
a row per day, process life and GPU, and hours and rows only at the edges. A day is usable from
meta `hour_since` on (an older day lost hours to retention); `vram report --by day` reads them
where local days are UTC days.

Workloads (schema 4): the table `workloads` keeps whom a process life (a row of `jobs`, the same
id) worked for, as procs/workload.py found it: its container, Kubernetes pod and Slurm job step
(WORKLOAD_COLUMNS). A life in none, or first seen before schema 4, has no row. A table of its own,
not columns of `jobs`: the recorder updates every life's row of `jobs` each sample, and wider rows
there cost every sample. `vram report --by container|pod|namespace|slurm-job` groups by them.

Local days (schema 5): proc_local_day holds the same sums per day of the recorder's own zone
(time.localtime where it runs), each a row of `local_days`: t .. hi, the whole hours of that day
(a day of 23 or 25 hours across a clock change; in a zone half an hour off UTC the hour local
midnight cuts belongs to neither day and is read row by row). They are kept as the UTC days are:
summed from the hour sums in the transaction that changes an hour of the day, so a local day is
always the sum of its hours [t, hi). A reader uses a day where its own zone's day is the same
span of hours (query._plan): in the recorder's zone, and in any zone whose midnights fall at the
same instants; elsewhere it sums the hour sums per local day. A day some earlier recorder's zone
stored that the hours under it changed, or that overlaps a day summed now, is dropped, never left
stale or overlapping (_sum_local_days).

Holders outside (schema 5): inside a container's PID namespace NVML lists processes by their
host pid, and a row no process here could be told to be (pidmap.py) is a life of its own: `jobs`
holds it with pid 0 (no pid of this /proc: every lookup by pid passes it by) and its host pid in
`nvml_pid`, NVML's number for it in another PID namespace. A life of this /proc has nvml_pid NULL.

Hour totals (schema 6): hour_totals holds per hour the sums and peak over every pair of its hour
sums, and each row of proc_day its pair's first and last hour in the day, both written in the
transaction that changes the hour sums. A reader in a zone that is neither UTC nor the
recorder's sums its days from the totals (a row an hour, not one per hour and pair), and tells
which lives are in the part of a UTC day before or after its local midnight from those hours.

Quarter totals (schema 7): quarter_totals holds the same totals per quarter hour, summed from the
raw samples in the transaction that sums them into the hour sums (so a quarter's totals are of the
same samples as its hour's). In a zone half an hour (or a quarter) off UTC, local midnight cuts an
hour in two: a reader sums each part of it from its quarters (a few rows, not the hour's rows of
every pair), and reads rows only of the lives whose first or last hour of the UTC day it is.

Totals behind (schema 8): a life's totals in `jobs` (gpu_seconds, memory_byte_seconds,
idle_seconds) and its last_seen are written once a rollup interval, not every sample: they hold
every raw sample up to meta `jobs_through` (a sample id). Readers read the view job_totals, which
adds the raw rows after it (JOB_TOTALS_AFTER) in the same statement; a life seen after the mark was
last seen in its newest raw row. Those rows are never rolled up before they are in `jobs`: the
recorder writes the totals in the transaction just before each roll_up (and when it closes), and
a recorder started after a kill adds the killed one's rows with its first totals. A mark that is
not a sample id is refused (check_jobs_through), as is a file whose schema is not, word for word,
what the migrations made (check_schema: job_totals too). A life's peak and GPUs are written in the
sample that changes them.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ..errors import RequestError, VramkitError
from ..i18n import N_, _, pgettext
from ..procs import flock_holders, uid_of
from .paths import default_path, live_path, named_path, reader_path

SCHEMA_VERSION = 8
READS_FROM = 1  # readers also read schema 1 (no hour sums: every row is read), written by an older recorder
HOUR = 3600
DAY = 86400
ROLLUP_TIERS = (60, 900)  # the rollup tables' tiers (a bucket's seconds)
SQLITE_IOERR, SQLITE_FULL, SQLITE_NOTADB = 10, 13, 26  # result codes (sqlite3 names them from Python 3.11 on)
SQLITE_IOERR_SHORT_READ = SQLITE_IOERR | 2 << 8  # a file cut short: damaged, not a failure of the moment
# A full disk or quota, or an I/O error: what a restart once space is freed (or the disk is back) fixes.
MOMENT_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EIO))
MAX_DAY_TIME = 253_402_214_400 - 2 * DAY  # the last hour a local day is looked for (datetime's year 9999)
APPLICATION_ID = 0x7672616D  # "vram": PRAGMA application_id marks the file as ours
WRITER_CACHE_KIB = 512  # the recorder's SQLite page cache (Store._prepare)
# A reader's, SQLite's default: SQLite takes the one the file's header names (another user's
# file: up to 2**31 pages, every page read then held in memory).
READER_CACHE_KIB = 2000

# Hour sums (schema 2). A raw sample is summed into its hour once its span is final (it is not the
# newest sample): every sample id up to meta `hour_sample` is in proc_hour / gpu_hour, and no
# rollup row holds a sample that is not (roll_up sums before it moves raw rows). Sample ids only
# grow (the newest sample is never deleted, so SQLite never hands out a smaller rowid).
def _add_sums(*columns: str) -> str:
    return ", ".join(f"{c} = {c} + excluded.{c}" for c in columns)


def _keep_max(column: str) -> str:
    return f"{column} = max(coalesce({column}, excluded.{column}), coalesce(excluded.{column}, {column}))"


_PROC_HOUR_MERGE = ", ".join([_add_sums("seconds", "memory_byte_seconds", "idle_seconds", "idle_memory_byte_seconds"),
                              _keep_max("memory_max")])
_GPU_HOUR_MERGE = ", ".join([_add_sums("seconds", "occupied_seconds", "lost_seconds", "util_seconds",
                                       "util_known_seconds"), _keep_max("used_max")])
# The samples with :after < id < :upto, summed per hour; ON CONFLICT adds (a wall clock that
# went back, or a roll_up in the middle of an hour, brings more samples into a summed hour).
_RAW_TO_HOURS = (f"""
    INSERT INTO proc_hour (t, job, gpu, seconds, memory_byte_seconds, memory_max, idle_seconds,
                           idle_memory_byte_seconds)
    SELECT CAST(s.t / {HOUR} AS INTEGER) * {HOUR} AS h, p.job, p.gpu, SUM(s.span),
           coalesce(SUM(p.memory * s.span), 0), MAX(p.memory), SUM(p.idle * s.span),
           coalesce(SUM(p.memory * p.idle * s.span), 0)
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.id > :after AND s.id < :upto GROUP BY h, p.job, p.gpu
    ON CONFLICT (t, job, gpu) DO UPDATE SET {_PROC_HOUR_MERGE}""", f"""
    INSERT INTO gpu_hour (t, gpu, seconds, occupied_seconds, lost_seconds, used_max, util_seconds,
                          util_known_seconds)
    SELECT CAST(s.t / {HOUR} AS INTEGER) * {HOUR} AS h, g.gpu, SUM(s.span),
           SUM(CASE WHEN g.procs > 0 THEN s.span ELSE 0 END), SUM(CASE WHEN g.lost THEN s.span ELSE 0 END),
           MAX(g.used), coalesce(SUM(g.util * s.span), 0),
           coalesce(SUM(CASE WHEN g.util IS NOT NULL THEN s.span END), 0)
    FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.id > :after AND s.id < :upto GROUP BY h, g.gpu
    ON CONFLICT (t, gpu) DO UPDATE SET {_GPU_HOUR_MERGE}""")

# A day's sums (schema 3): those of its hours, summed again whenever an hour of it changes (in the
# same transaction), so a day always equals its hours.
# From schema 6 a pair's row also says its first and last hour in the day.
_PROC_HOURS_TO_DAY = """
    INSERT INTO proc_day (t, job, gpu, seconds, memory_byte_seconds, memory_max, idle_seconds,
                          idle_memory_byte_seconds, first_hour, last_hour)
    SELECT {day}, job, gpu, SUM(seconds), SUM(memory_byte_seconds), MAX(memory_max), SUM(idle_seconds),
           SUM(idle_memory_byte_seconds), MIN(t), MAX(t)
    FROM proc_hour WHERE {where} GROUP BY {group}"""
_HOURS_TO_DAY = (_PROC_HOURS_TO_DAY.format(day=":day", where=f"t >= :day AND t < :day + {DAY}", group="job, gpu"),
                 f"""
    INSERT INTO gpu_day (t, gpu, seconds, occupied_seconds, lost_seconds, used_max, util_seconds,
                         util_known_seconds)
    SELECT :day, gpu, SUM(seconds), SUM(occupied_seconds), SUM(lost_seconds), MAX(used_max), SUM(util_seconds),
           SUM(util_known_seconds)
    FROM gpu_hour WHERE t >= :day AND t < :day + {DAY} GROUP BY gpu""")

# A local day's sums (schema 5): those of its whole hours [:day, :hi), as a UTC day's.
_HOURS_TO_LOCAL_DAY = """
    INSERT INTO proc_local_day (t, job, gpu, seconds, memory_byte_seconds, memory_max, idle_seconds,
                                idle_memory_byte_seconds)
    SELECT :day, job, gpu, SUM(seconds), SUM(memory_byte_seconds), MAX(memory_max), SUM(idle_seconds),
           SUM(idle_memory_byte_seconds)
    FROM proc_hour WHERE t >= :day AND t < :hi GROUP BY job, gpu"""

# An hour's totals over every pair (schema 6), summed again whenever the hour's sums change:
# a report in any zone reads a row per hour for its days' sums and peak, not one per hour and pair.
_HOUR_TOTALS = """
    INSERT OR REPLACE INTO hour_totals (t, seconds, memory_byte_seconds, memory_max, idle_seconds)
    SELECT t, SUM(seconds), SUM(memory_byte_seconds), MAX(memory_max), SUM(idle_seconds)
    FROM proc_hour WHERE {where} GROUP BY t"""

# A quarter hour's totals over every pair (schema 7): the samples with :after < id < :upto (those
# _RAW_TO_HOURS sums) added to their quarters, as the hour sums are added to (ON CONFLICT).
_QUARTER_TOTALS_MERGE = ", ".join([_add_sums("seconds", "memory_byte_seconds", "idle_seconds"),
                                   _keep_max("memory_max")])
_RAW_TO_QUARTERS = f"""
    INSERT INTO quarter_totals (t, seconds, memory_byte_seconds, memory_max, idle_seconds)
    SELECT CAST(s.t / 900 AS INTEGER) * 900 AS q, SUM(s.span), coalesce(SUM(p.memory * s.span), 0), MAX(p.memory),
           SUM(p.idle * s.span)
    FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.id > :after AND s.id < :upto GROUP BY q
    ON CONFLICT (t) DO UPDATE SET {_QUARTER_TOTALS_MERGE}"""
# Schema 7's migration: the same from the rows the hour sums are of (the rollups from hour_since on,
# and the raw samples summed); a tier's rows per bucket first, in its key's order (no sort of them all).
_SINCE = "coalesce((SELECT CAST(value AS REAL) FROM meta WHERE key = 'hour_since'), 0)"
_ROLLUP_TO_QUARTERS = f"""
    INSERT INTO quarter_totals (t, seconds, memory_byte_seconds, memory_max, idle_seconds)
    SELECT CAST(b / 900 AS INTEGER) * 900 AS q, SUM(s), SUM(mbs), MAX(peak), SUM(idle) FROM (
        SELECT t AS b, SUM(seconds) AS s, coalesce(SUM(memory * seconds), 0) AS mbs, MAX(memory_max) AS peak,
               SUM(idle_seconds) AS idle
        FROM proc_rollup WHERE tier = {{tier}} AND t BETWEEN {_SINCE} AND {MAX_DAY_TIME} GROUP BY t)
    WHERE true GROUP BY q
    ON CONFLICT (t) DO UPDATE SET {_QUARTER_TOTALS_MERGE}"""

# The columns of `workloads` that keep a life's workload (schema 4): (column, SQL type), each a
# field of gpu_state.Workload of the same name.
WORKLOAD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("runtime", "TEXT"), ("container_id", "TEXT"), ("container_name", "TEXT"), ("image", "TEXT"),
    ("pod_uid", "TEXT"), ("pod", "TEXT"), ("namespace", "TEXT"), ("pod_container", "TEXT"),
    ("slurm_job", "INTEGER"), ("slurm_step", "TEXT"), ("slurm_task", "INTEGER"), ("slurm_uid", "INTEGER"),
    ("slurm_array_job", "INTEGER"), ("slurm_array_task", "INTEGER"))

# Schema 8: per life, what the raw rows after meta `jobs_through` add to its totals in `jobs`
# (job, seconds, memory byte-seconds, idle seconds, the time of its newest row), as the recorder
# adds them: each (sample, GPU) row its sample's span, memory (unknown: 0) x span, span if idle.
# The view job_totals is what readers read: each life's totals and last_seen as of the newest sample
# (one statement: one snapshot). A value of the wrong type is left as it is (readers do not trust it).
JOB_TOTALS_AFTER = """
    SELECT a.job AS job, a.seconds AS seconds, a.memory_byte_seconds AS memory_byte_seconds,
           a.idle_seconds AS idle_seconds, n.t AS last_seen
    FROM (SELECT p.job AS job, SUM(s.span) AS seconds, SUM(coalesce(p.memory, 0) * s.span) AS memory_byte_seconds,
                 SUM(CASE WHEN p.idle THEN s.span ELSE 0 END) AS idle_seconds, MAX(p.sample) AS newest
          FROM proc_raw p JOIN samples s ON s.id = p.sample
          WHERE p.sample > coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'jobs_through'), 0)
          GROUP BY p.job) a JOIN samples n ON n.id = a.newest"""


def _jobs_through_problem(value: object, newest: object) -> str | None:
    """Why meta jobs_through (`value`, None: missing) is not a mark this vram wrote, with the
    newest sample id `newest` (None: no sample): a whole number from 0 to the newest sample."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19 \
            and int(value) <= (newest if isinstance(newest, int) else 0):
        return None
    return _("meta 'jobs_through' is {value}, not a sample id").format(value=repr(str(value)[:40]))


def _plus(column: str, added: str) -> str:
    return (f"CASE WHEN typeof(j.{column}) IN ('integer', 'real') THEN j.{column} + coalesce(a.{added}, 0) "
            f"ELSE j.{column} END AS {column}")


_JOB_TOTALS_VIEW = f"""
    CREATE VIEW job_totals AS
        SELECT j.id AS id, CASE WHEN a.job IS NULL THEN j.last_seen ELSE a.last_seen END AS last_seen,
               {_plus("gpu_seconds", "seconds")}, {_plus("memory_byte_seconds", "memory_byte_seconds")},
               {_plus("idle_seconds", "idle_seconds")}
        FROM jobs j LEFT JOIN ({JOB_TOTALS_AFTER}) a ON a.job = j.id"""
_JOBS_THROUGH_NEWEST = """
    INSERT INTO meta (key, value) SELECT 'jobs_through', coalesce(max(id), 0) FROM samples WHERE true
    ON CONFLICT (key) DO UPDATE SET value = excluded.value"""

# Each migration takes the schema from version N-1 to N (index N-1), in one transaction.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    -- The GPUs as last seen (memory total and name change rarely: not repeated per sample).
    CREATE TABLE gpus (gpu INTEGER PRIMARY KEY, uuid TEXT, name TEXT, memory_total INTEGER);
    -- One row per raw sample: t = unix seconds; span = seconds it stands for (0 until the next).
    CREATE TABLE samples (id INTEGER PRIMARY KEY, t REAL NOT NULL, span REAL NOT NULL DEFAULT 0);
    CREATE INDEX samples_t ON samples (t);
    CREATE TABLE gpu_raw (
        sample INTEGER NOT NULL, gpu INTEGER NOT NULL,
        used INTEGER, reserved INTEGER, util INTEGER, mem_util INTEGER, temp INTEGER, power REAL,
        procs INTEGER NOT NULL, lost INTEGER NOT NULL,
        PRIMARY KEY (sample, gpu)) WITHOUT ROWID;
    -- One row per process life: (pid, start ticks); start_ticks is NULL where the host side is
    -- unknown (another PID namespace, a simulated process). Totals over its whole life.
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_ticks INTEGER, start_time REAL,
        user TEXT, uid INTEGER, command TEXT, container TEXT,
        first_seen REAL NOT NULL, last_seen REAL NOT NULL, gpus TEXT NOT NULL,
        peak_memory INTEGER NOT NULL DEFAULT 0, gpu_seconds REAL NOT NULL DEFAULT 0,
        memory_byte_seconds REAL NOT NULL DEFAULT 0, idle_seconds REAL NOT NULL DEFAULT 0);
    CREATE INDEX jobs_pid ON jobs (pid, start_ticks);
    CREATE INDEX jobs_last_seen ON jobs (last_seen);
    -- idle: 1 when it held memory and ran no kernels of its own (idle.py's rule).
    CREATE TABLE proc_raw (
        sample INTEGER NOT NULL, job INTEGER NOT NULL, gpu INTEGER NOT NULL,
        memory INTEGER, sm_util INTEGER, idle INTEGER NOT NULL,
        PRIMARY KEY (sample, job, gpu)) WITHOUT ROWID;
    -- What each job holds as of the newest sample, and since when it has been idle there without
    -- a break in recording (NULL: busy). Read by kill --idle, doctor and the live view.
    CREATE TABLE holding (
        job INTEGER NOT NULL, gpu INTEGER NOT NULL, idle_since REAL,
        PRIMARY KEY (job, gpu)) WITHOUT ROWID;
    -- Rollups: tier = the bucket's length in seconds (60, 900); t = the bucket's start;
    -- seconds = how much of it was recorded; averages are weighted by time.
    CREATE TABLE gpu_rollup (
        tier INTEGER NOT NULL, t INTEGER NOT NULL, gpu INTEGER NOT NULL, seconds REAL NOT NULL,
        occupied_seconds REAL NOT NULL, lost_seconds REAL NOT NULL,
        used REAL, used_max INTEGER, reserved REAL, util REAL, mem_util REAL, temp REAL, power REAL,
        PRIMARY KEY (tier, t, gpu)) WITHOUT ROWID;
    CREATE TABLE proc_rollup (
        tier INTEGER NOT NULL, t INTEGER NOT NULL, job INTEGER NOT NULL, gpu INTEGER NOT NULL,
        seconds REAL NOT NULL, idle_seconds REAL NOT NULL,
        memory REAL, memory_max INTEGER, sm_util REAL,
        PRIMARY KEY (tier, t, job, gpu)) WITHOUT ROWID;
    -- What reports read: every tier as rows of (t, seconds, ...).
    CREATE VIEW gpu_time AS
        SELECT s.t AS t, s.span AS seconds, g.gpu AS gpu, g.used AS used, g.used AS used_max,
               g.reserved AS reserved, g.util AS util, g.mem_util AS mem_util, g.temp AS temp,
               g.power AS power, CASE WHEN g.procs > 0 THEN s.span ELSE 0 END AS occupied_seconds,
               CASE WHEN g.lost THEN s.span ELSE 0 END AS lost_seconds
        FROM gpu_raw g JOIN samples s ON s.id = g.sample
        UNION ALL
        SELECT t, seconds, gpu, used, used_max, reserved, util, mem_util, temp, power,
               occupied_seconds, lost_seconds FROM gpu_rollup;
    CREATE VIEW proc_time AS
        SELECT s.t AS t, s.span AS seconds, p.job AS job, p.gpu AS gpu, p.memory AS memory,
               p.memory AS memory_max, p.sm_util AS sm_util, p.idle * s.span AS idle_seconds
        FROM proc_raw p JOIN samples s ON s.id = p.sample
        UNION ALL
        SELECT t, seconds, job, gpu, memory, memory_max, sm_util, idle_seconds FROM proc_rollup;
    """,
    # 2: hour sums, filled from every row there is (rollups, and raw samples whose span is final).
    f"""
    CREATE TABLE proc_hour (
        t INTEGER NOT NULL, job INTEGER NOT NULL, gpu INTEGER NOT NULL, seconds REAL NOT NULL,
        memory_byte_seconds REAL NOT NULL, memory_max INTEGER, idle_seconds REAL NOT NULL,
        idle_memory_byte_seconds REAL NOT NULL,
        PRIMARY KEY (t, job, gpu)) WITHOUT ROWID;
    CREATE TABLE gpu_hour (
        t INTEGER NOT NULL, gpu INTEGER NOT NULL, seconds REAL NOT NULL, occupied_seconds REAL NOT NULL,
        lost_seconds REAL NOT NULL, used_max INTEGER, util_seconds REAL NOT NULL,
        util_known_seconds REAL NOT NULL,
        PRIMARY KEY (t, gpu)) WITHOUT ROWID;
    INSERT INTO proc_hour (t, job, gpu, seconds, memory_byte_seconds, memory_max, idle_seconds,
                           idle_memory_byte_seconds)
    SELECT t / 3600 * 3600 AS h, job, gpu, SUM(seconds), coalesce(SUM(memory * seconds), 0), MAX(memory_max),
           SUM(idle_seconds), coalesce(SUM(memory * idle_seconds), 0)
    FROM proc_rollup WHERE true GROUP BY h, job, gpu
    ON CONFLICT (t, job, gpu) DO UPDATE SET {_PROC_HOUR_MERGE};
    INSERT INTO gpu_hour (t, gpu, seconds, occupied_seconds, lost_seconds, used_max, util_seconds,
                          util_known_seconds)
    SELECT t / 3600 * 3600 AS h, gpu, SUM(seconds), SUM(occupied_seconds), SUM(lost_seconds), MAX(used_max),
           coalesce(SUM(util * seconds), 0), coalesce(SUM(CASE WHEN util IS NOT NULL THEN seconds END), 0)
    FROM gpu_rollup WHERE true GROUP BY h, gpu
    ON CONFLICT (t, gpu) DO UPDATE SET {_GPU_HOUR_MERGE};
    {";".join(_RAW_TO_HOURS).replace(":after", "0").replace(":upto", "(SELECT max(id) FROM samples)")};
    INSERT INTO meta (key, value) SELECT 'hour_sample', coalesce(max(id) - 1, 0) FROM samples;
    INSERT INTO meta (key, value) SELECT 'hour_t_last', t FROM (SELECT max(t) AS t FROM (
        SELECT max(t) AS t FROM samples WHERE id < (SELECT max(id) FROM samples)
        UNION ALL SELECT max(t) + tier FROM gpu_rollup GROUP BY tier)) WHERE t IS NOT NULL;
    """,
    # 3: day sums, of the hour sums there are (an hour's sums are whole; a day before hour_since
    # is not read).
    f"""
    CREATE TABLE proc_day (
        t INTEGER NOT NULL, job INTEGER NOT NULL, gpu INTEGER NOT NULL, seconds REAL NOT NULL,
        memory_byte_seconds REAL NOT NULL, memory_max INTEGER, idle_seconds REAL NOT NULL,
        idle_memory_byte_seconds REAL NOT NULL,
        PRIMARY KEY (t, job, gpu)) WITHOUT ROWID;
    CREATE TABLE gpu_day (
        t INTEGER NOT NULL, gpu INTEGER NOT NULL, seconds REAL NOT NULL, occupied_seconds REAL NOT NULL,
        lost_seconds REAL NOT NULL, used_max INTEGER, util_seconds REAL NOT NULL,
        util_known_seconds REAL NOT NULL,
        PRIMARY KEY (t, gpu)) WITHOUT ROWID;
    INSERT INTO proc_day (t, job, gpu, seconds, memory_byte_seconds, memory_max, idle_seconds,
                          idle_memory_byte_seconds)
    SELECT t / {DAY} * {DAY} AS d, job, gpu, SUM(seconds), SUM(memory_byte_seconds), MAX(memory_max),
           SUM(idle_seconds), SUM(idle_memory_byte_seconds)
    FROM proc_hour WHERE true GROUP BY d, job, gpu;
    INSERT INTO gpu_day (t, gpu, seconds, occupied_seconds, lost_seconds, used_max, util_seconds,
                         util_known_seconds)
    SELECT t / {DAY} * {DAY} AS d, gpu, SUM(seconds), SUM(occupied_seconds), SUM(lost_seconds), MAX(used_max),
           SUM(util_seconds), SUM(util_known_seconds)
    FROM gpu_hour WHERE true GROUP BY d, gpu;
    """,
    # 4: each process life's workload (its container, pod, Slurm job), for the lives in one.
    f"""
    CREATE TABLE workloads (
        job INTEGER PRIMARY KEY, {", ".join(f"{column} {kind}" for column, kind in WORKLOAD_COLUMNS)});
    """,
    # 5: the recorder's local days (filled from the hour sums there are by _sum_local_days, in
    # the same transaction), and the host pid of a life NVML listed outside this PID namespace.
    """
    CREATE TABLE local_days (t INTEGER PRIMARY KEY, hi INTEGER NOT NULL);
    CREATE TABLE proc_local_day (
        t INTEGER NOT NULL, job INTEGER NOT NULL, gpu INTEGER NOT NULL, seconds REAL NOT NULL,
        memory_byte_seconds REAL NOT NULL, memory_max INTEGER, idle_seconds REAL NOT NULL,
        idle_memory_byte_seconds REAL NOT NULL,
        PRIMARY KEY (t, job, gpu)) WITHOUT ROWID;
    ALTER TABLE jobs ADD COLUMN nvml_pid INTEGER;
    """,
    # 6: per hour the totals over every pair (hour_totals), and per UTC day and pair its first and
    # last hour (so whether a life is in a part of the day is known from the day's row), from the
    # hour sums there are (a day before hour_since has none: see _forget_hours_before).
    f"""
    CREATE TABLE hour_totals (
        t INTEGER PRIMARY KEY, seconds REAL NOT NULL, memory_byte_seconds REAL NOT NULL, memory_max INTEGER,
        idle_seconds REAL NOT NULL);
    {_HOUR_TOTALS.format(where="true")};
    ALTER TABLE proc_day ADD COLUMN first_hour INTEGER;
    ALTER TABLE proc_day ADD COLUMN last_hour INTEGER;
    DELETE FROM proc_day;
    {_PROC_HOURS_TO_DAY.format(
        day=f"t / {DAY} * {DAY} AS d", group="d, job, gpu",
        where=f"t / {DAY} * {DAY} >= coalesce((SELECT CAST(value AS REAL) FROM meta WHERE key = 'hour_since'), 0)")};
    """,
    # 7: per quarter hour the totals over every pair (quarter_totals), from the rows the hour sums
    # are of: the rollups (each tier per bucket, then per quarter) and the raw samples summed.
    f"""
    CREATE TABLE quarter_totals (
        t INTEGER PRIMARY KEY, seconds REAL NOT NULL, memory_byte_seconds REAL NOT NULL, memory_max INTEGER,
        idle_seconds REAL NOT NULL);
    {_ROLLUP_TO_QUARTERS.format(tier=900)};
    {_ROLLUP_TO_QUARTERS.format(tier=60)};
    {_RAW_TO_QUARTERS.replace(":after", "0").replace(
        ":upto", "coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'hour_sample'), 0) + 1")
     .replace("GROUP BY q", f"AND s.t BETWEEN {_SINCE} AND {MAX_DAY_TIME} GROUP BY q")};
    """,
    # 8: the totals in `jobs` hold every sample so far (each written with its sample until now).
    f"""
    {_JOBS_THROUGH_NEWEST};
    {_JOB_TOTALS_VIEW};
    """,
)


@dataclass(frozen=True)
class Retention:
    """How long each tier is kept, in seconds, and the most the file may hold."""

    raw: float = 86400.0  # raw samples: a day
    minute: float = 30 * 86400.0  # 1-minute rollups: 30 days
    quarter: float = 365 * 86400.0  # 15-minute rollups: a year
    max_bytes: int = 2 * 1024**3  # past this the oldest rows go first


class StoreError(RequestError):
    """The database cannot be used as asked (corrupt, newer schema, locked, not ours): exit 2."""


class StoreBusyError(StoreError):
    """The database is in use by another process of its owner (another recorder, a long
    transaction): a failure of the moment, not bad input. `vram record` exits 1 (the service
    restarts it), not 2."""

    exit_code = 1


class StoreUnavailableError(StoreError):
    """The database cannot be written at the moment (the disk is full, an I/O error) as the
    recorder opens it: a failure of the moment, exit 1, so that the service's unit restarts it
    (RestartPreventExitStatus=2 would keep it down for good once space is freed)."""

    exit_code = 1


def os_failure(e: OSError, line: str) -> StoreError:
    """The StoreError for an OSError while opening: a full disk or an I/O error is of the moment."""
    return (StoreUnavailableError if e.errno in MOMENT_ERRNOS else StoreError)(line, param="db")


class RollupError(VramkitError):
    """A step of Store.roll_up failed with `error`. `sums`: it was the hour sums' (the raw rows
    were rolled up without them and every other step ran); else a step of retention failed, and
    old rows may not have been rolled up or removed."""

    def __init__(self, error: Exception, sums: bool):
        super().__init__(str(error))
        self.error = error
        self.sums = sums


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _walk(directory: Path, create: bool) -> None:
    """Check the way to `directory` one component at a time from / (audit.py's walk), creating
    what is missing when `create` (0755 for root's shared store, 0700 otherwise). A symlink is
    followed only when the directory holding it is root's or the caller's and nobody else may
    write it; each directory on the way must be one no other user can change the next step in
    (root's or the caller's, and writable by nobody else, or sticky with the next step root's or
    the caller's). So nobody else can swap a file or directory in under a path checked here."""
    me = os.geteuid()
    shown = directory
    todo = list(directory.absolute().parts[1:])
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = Path("/")
    links = 0

    def fail(why: str) -> NoReturn:
        raise StoreError(_("{why}; choose a directory of your own (--db or $VRAM_DB)").format(why=why), param="db")
    try:
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                nfd = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd, here = nfd, here.parent
                continue
            holder = os.fstat(fd)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o755 if me == 0 else 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            others_write = holder.st_mode & 0o022
            if holder.st_uid not in (0, me):
                fail(_("{path} can be changed by another user (uid {uid} owns {directory})").format(
                    path=here / name, uid=holder.st_uid, directory=here))
            if others_write and not holder.st_mode & stat.S_ISVTX:
                fail(_("{path} can be changed by another user (others may write {directory})").format(
                    path=here / name, directory=here))
            if others_write and st.st_uid not in (0, me):
                fail(_("{path} belongs to another user (uid {uid}), in {directory}, which others may "
                       "write").format(path=here / name, uid=st.st_uid, directory=here))
            if stat.S_ISLNK(st.st_mode):
                if others_write:
                    fail(_("{path} is a symbolic link in a directory others may write; give the path "
                           "without it").format(path=here / name))
                links += 1
                if links > 40:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                target = os.readlink(name, dir_fd=fd)
                todo[:0] = Path(target).parts
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                    here = Path("/")
                    todo.pop(0)
                continue
            if not stat.S_ISDIR(st.st_mode):
                fail(_("{path} is not a directory").format(path=here / name))
            nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd, here = nfd, here / name
        st = os.fstat(fd)
        if st.st_uid not in (0, me) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            fail(_("{path} can be changed by another user").format(path=shown))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise os_failure(e, _("cannot use {path}: {why}").format(path=shown, why=e.strerror or e)) from None
    finally:
        os.close(fd)


def _lstat(path: Path | str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(_("{path}: {why}").format(path=path, why=e.strerror), param="db") from None


def _check_not_symlink(path: Path) -> None:
    st = _lstat(path)
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode):
        raise StoreError(_("{path} is a symbolic link; vram does not follow links it did not make").format(
            path=path), param="db")
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(_("{path} is not a regular file").format(path=path), param="db")


def _check_trusted(path: Path | str, st: os.stat_result, whose: str) -> None:
    """The rule for a file vram writes (whose = 'the recorder') or reads as root ('root'): it is
    the caller's own, and no one else may write it."""
    if st.st_uid != os.geteuid():
        raise StoreError(_("{path} belongs to another user (uid {uid}), who could have written anything in it; "
                           "{who} uses only a database and companion files of its own").format(
                               path=path, uid=st.st_uid, who=_(whose)), param="db")
    if st.st_mode & 0o022:
        raise StoreError(_("{path} can be written by other users (mode {mode:04o}); {who} "
                           "uses only a database and companion files no one else may write (chmod go-w it)").format(
                               path=path, mode=stat.S_IMODE(st.st_mode), who=_(whose)), param="db")


def _check_companions(path: Path, owner: int, trusted: str | None = None) -> None:
    """SQLite opens PATH-wal, PATH-shm and PATH-journal next to the database and would follow a
    link there or use a file another user planted: each must be missing, or a regular file of the
    database's owner (or root); with `trusted`, of the caller and written by nobody else."""
    for suffix in ("-wal", "-shm", "-journal"):
        companion = Path(f"{path}{suffix}")
        st = _lstat(companion)
        if st is None:
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            raise StoreError(_("{path} is not a regular file (a link?); vram does not follow links").format(
                path=companion),
                             param="db")
        if trusted is not None:
            _check_trusted(companion, st, trusted)
        elif st.st_uid not in (0, owner, os.geteuid()):
            raise StoreError(_("{path} belongs to another user (uid {uid}); remove it if it is not yours").format(
                path=companion, uid=st.st_uid), param="db")


def _check_header(path: Path) -> None:
    """Refuse a database file cut short: its header says how many pages it has (when the count is
    current), and a shorter file has lost data. SQLite only finds out page by page, after the
    recorder has started writing into it. Not while a write-ahead log has pages: a checkpoint
    writes page 1 before the pages that grow the file."""
    try:
        if os.lstat(f"{path}-wal").st_size > 0:
            return
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StoreError(_("cannot read {path}-wal: {why}").format(path=path, why=e.strerror), param="db") from None
    head, size = _head(path)
    if len(head) == 0:
        return  # new, empty: SQLite writes the header
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise StoreError(_("{path} is not a readable vram history database (not an SQLite file)").format(
            path=path), param="db")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    counter, valid_for = head[24:28], head[92:96]
    if counter == valid_for and pages and size < pages * page:
        raise StoreError(_("{path} is not a readable vram history database (corrupt: cut short at {size} of "
                           "{total} bytes)").format(path=path, size=size, total=pages * page), param="db")


def _head(path: Path | str) -> tuple[bytes, int]:
    """The first 100 bytes of a file (SQLite's header) and its size; never waits (a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise StoreError(_("cannot read {path}: {why}").format(path=path, why=e.strerror), param="db") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreError(_("{path} is not a regular file").format(path=path), param="db")
        return os.pread(fd, 100, 0), os.fstat(fd).st_size
    except OSError as e:
        raise StoreError(_("cannot read {path}: {why}").format(path=path, why=e.strerror), param="db") from None
    finally:
        os.close(fd)


def _is_snapshot(path: Path, owner: int) -> bool:
    """A database file nobody writes in place: in rollback-journal mode (a published copy, or a
    history whose recorder has stopped) with no write-ahead log of its owner's beside it. A log of
    another user's is none of the file's (in a shared sticky directory anyone may plant one, and
    no one but its maker may remove it): the copy is read as it is."""
    head, _size = _head(path)
    if len(head) != 100 or head[18:20] != b"\x01\x01":
        return False
    try:
        return os.lstat(f"{path}-wal").st_uid != owner
    except FileNotFoundError:
        return True
    except OSError:  # not to be looked at: as if it were the owner's
        return False


def _private_dir(directory: Path) -> None:
    """The 0700 directory of the live database: the caller's, and entered by nobody else."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise os_failure(e, _("cannot create {directory}: {why}").format(
            directory=directory, why=e.strerror)) from None
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except OSError as e:
        raise StoreError(_("cannot use {directory}: {why} (it must be a directory, not a link)").format(
            directory=directory, why=e.strerror),
                         param="db") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise StoreError(_("{directory} belongs to another user (uid {uid}); the live database goes only "
                               "in a directory of the recorder's own").format(
                                   directory=directory, uid=st.st_uid), param="db")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _copy_file(src: str, dst: str) -> bool:
    """Copy a file byte for byte into a new file (0600); False when there is no `src`."""
    try:
        sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while os.sendfile(dfd, sfd, None, 1 << 24):
                pass
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    return True


def _unlink(path: Path | str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _check_old(old: Path) -> bool:
    """The checks of a database to move private (_migrate); False when there is nothing to move."""
    st = _lstat(old)
    if st is None or (stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == os.geteuid()):
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise StoreError(_("{path} is not a regular file (a link?); vram does not follow links").format(
            path=old), param="db")
    _check_trusted(old, st, N_("the recorder"))
    _check_companions(old, st.st_uid, N_("the recorder"))
    _check_header(old)
    return st.st_size > 0


def _migrate(old: Path, live: Path) -> None:
    """Move the history at `old` (where the live database was before it went private) into
    `live`: copied into a fresh file in the private directory, so that no lock anyone took on
    the old file (which every user could open) reaches it, and checked before it takes the live
    name. A recorder of an older vramkit still writing `old` is waited for by no one: refused."""
    if not _check_old(old):
        return
    import fcntl

    guard = os.open(old, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # A lock another user took cannot be a recorder's (they cannot write the file): only
            # one of the caller's own (or one whose holder cannot be told) stops the move.
            # No holder listed (unreadable /proc/locks) or one without a pid here: unknown, refused.
            holders = flock_holders(os.fstat(guard)) or [0]
            if any(uid_of(pid) in (None, os.geteuid()) for pid in holders):
                raise StoreBusyError(_("{path} is locked: another 'vram record' (of an older vramkit?) is "
                                       "writing to it").format(path=old), param="db") from None
        tmp = live.parent / f".{live.name}.moving"
        for suffix in ("", "-wal", "-journal", "-shm"):
            _unlink(f"{tmp}{suffix}")
        try:
            for suffix in ("", "-wal", "-journal"):  # SQLite finishes (or undoes) what they hold
                _copy_file(f"{old}{suffix}", f"{tmp}{suffix}")
            conn = sqlite3.connect(tmp, isolation_level=None, timeout=0)
            try:
                conn.execute("PRAGMA trusted_schema = OFF")
                _validate(conn, old)
                conn.execute("PRAGMA journal_mode = DELETE")  # folds the copied log in
            finally:
                conn.close()
            os.rename(tmp, live)
        except BaseException:
            for suffix in ("", "-wal", "-journal", "-shm"):
                _unlink(f"{tmp}{suffix}")
            raise
        _fsync_dir(live.parent)
        for suffix in ("-wal", "-shm", "-journal"):  # the old file's: a copy published there has none
            _unlink(f"{old}{suffix}")
        if os.geteuid() != 0:
            _unlink(old)  # nothing is published over it: a user's history is theirs alone
    finally:
        os.close(guard)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _number(value: object) -> bool:
    if isinstance(value, (int, float)):
        return True
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def _newer(path: Path, version: int) -> StoreError:
    return StoreError(_("{path} was written by a newer vramkit (schema {version}; this vram reads up to "
                        "{newest}): upgrade vramkit to read it").format(
                            path=path, version=version, newest=SCHEMA_VERSION), param="db")


def _identify(c: sqlite3.Connection, path: Path) -> bool:
    """Reader's and writer's first checks: a vram history (or empty), of a schema this vram reads.
    True when it is empty."""
    version = c.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise _newer(path, version)
    if version < 0:  # no vram writes one: the migrations would start from the wrong one
        raise StoreError(_("{path} is not a readable vram history database (corrupt: schema version {version}, "
                           "which vram never writes)").format(path=path, version=version), param="db")
    app = c.execute("PRAGMA application_id").fetchone()[0]
    empty: bool = c.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] == 0
    if app != APPLICATION_ID and not empty:
        raise StoreError(_("{path} is an SQLite database, but not a vram history").format(path=path), param="db")
    return empty


def _validate(c: sqlite3.Connection, path: Path) -> bool:
    """A writer's checks of an open database: ours (or empty), not newer, not damaged, its facts
    of the right type. True when it is empty (new)."""
    if _identify(c, path):
        return True
    version = c.execute("PRAGMA user_version").fetchone()[0]
    # First, before any query reads a table (a view in its place would run) and before
    # quick_check evaluates a table's CHECK constraints on every row.
    check_schema(c, path)
    # A damaged page would make every sample fail, found only after writing began; a scan
    # before the first write costs about 10 ms per MB, once per start.
    problem = c.execute("PRAGMA quick_check(1)").fetchone()[0]
    if problem != "ok":
        raise StoreError(_("{path} is not a readable vram history database (corrupt: "
                           "{problem})").format(
                               path=path, problem=' '.join(str(problem).split())[:200]), param="db")
    if version >= 1:
        for key, value in c.execute("SELECT key, value FROM meta WHERE key LIKE 'hour_%'"):
            if not _number(value):
                raise StoreError(_("{path} is not a readable vram history database (meta {key} is "
                                   "{value}, not a number)").format(
                                     path=path, key=repr(str(key)[:40]), value=repr(str(value)[:40])), param="db")
    if version >= 8:
        check_jobs_through(c, path)
    return False


# Objects SQLite makes in a file by itself (ANALYZE's statistics; an AUTOINCREMENT's counters),
# with the text it stores for them: not vram's, but no one else's either.
_SQLITE_OWN = frozenset(("table", name, name, f"CREATE TABLE {name}({columns})") for name, columns in (
    ("sqlite_stat1", "tbl,idx,stat"), ("sqlite_stat4", "tbl,idx,neq,nlt,ndlt,sample"),
    ("sqlite_sequence", "name,seq")))


@functools.cache
def _schema_of(version: int) -> frozenset[tuple[object, ...]]:
    """The rows (type, name, tbl_name, sql) of sqlite_schema in a file vram made at `version`: its
    migrations run on an empty database in memory, so that each text is the one SQLite stores
    (SQLite rewrites the words before an object's name, and ALTER TABLE ADD COLUMN edits the
    table's text). What decides; 2-3 ms of CPU, so tried only when _schema_written differs."""
    c = sqlite3.connect(":memory:", isolation_level=None)
    try:
        c.executescript(f"BEGIN; {';'.join(MIGRATIONS[:max(version, 0)])}; COMMIT;")
        return frozenset(c.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema"))
    finally:
        c.close()


_CREATE = re.compile(r"CREATE\s+(TABLE|VIEW|INDEX)\s+(\w+)(?:\s+ON\s+(\w+))?", re.IGNORECASE)
_ADD_COLUMN = re.compile(r"ALTER\s+TABLE\s+(\w+)\s+ADD\s+(?:COLUMN\s+)?", re.IGNORECASE)
_TABLE_CONSTRAINT = re.compile(r",\s*(?:PRIMARY\s+KEY|UNIQUE|CHECK|FOREIGN\s+KEY|CONSTRAINT)\b", re.IGNORECASE)


@functools.cache
def _schema_written(version: int) -> frozenset[tuple[object, ...]] | None:
    """_schema_of's rows read from the migrations' text as SQLite stores it (each CREATE as written
    from its name on; ADD COLUMN's definition put after the table's last column; an index of its own
    for a rowid table's key that is not an INTEGER PRIMARY KEY), for the checks of every open, in
    about 0.2 ms. None where a statement is not of those kinds. A file that differs is compared
    with _schema_of before it is refused; a test holds the two equal at every version."""
    rows: dict[str, tuple[str, str, str, str | None]] = {}
    for script in MIGRATIONS[:max(version, 0)]:
        statement = ""
        for line in script.splitlines(keepends=True):
            if not statement and (not line.strip() or line.lstrip().startswith("--")):
                continue  # a comment between statements: SQLite does not keep it
            statement += line
            if not sqlite3.complete_statement(statement):
                continue
            text, statement = statement.strip().rstrip(";").rstrip(), ""
            if (create := _CREATE.match(text)) is not None:
                kind, name = create[1].lower(), create[2]
                rows[name] = (kind, name, create[3] if kind == "index" else name,
                              f"CREATE {kind.upper()} {text[create.start(2):]}")
                if kind == "table" and "UNIQUE" in text.upper():
                    return None
                if kind == "table" and "PRIMARY KEY" in text and "INTEGER PRIMARY KEY" not in text \
                        and not text.endswith("WITHOUT ROWID"):
                    index = f"sqlite_autoindex_{name}_1"
                    rows[index] = ("index", index, name, None)
            elif (add := _ADD_COLUMN.match(text)) is not None and add[1] in rows:
                kind, name, table, sql = rows[add[1]]
                old = str(sql)
                constraint = _TABLE_CONSTRAINT.search(old)
                cut = constraint.start() if constraint is not None else old.rindex(")")
                rows[name] = (kind, name, table, f"{old[:cut]}, {text[add.end():]}{old[cut:]}")
            elif text.upper().startswith(("CREATE", "ALTER", "DROP")):
                return None
    return frozenset(rows.values())


def _same(rows: list[tuple[object, ...]], expected: frozenset[tuple[object, ...]] | None) -> bool:
    """The rows are the expected ones, each once."""
    return expected is not None and len(rows) == len(expected) and expected == set(rows)


def _object_kind(kind: object) -> object:
    """SQLite's word for a schema object (sqlite_schema's `type`), in the reader's language: the
    file's own text when it is none of SQLite's four (a file edited by hand)."""
    words = {"table": pgettext("database object", "table"), "view": pgettext("database object", "view"),
             "index": pgettext("database object", "index"), "trigger": pgettext("database object", "trigger")}
    return words.get(kind, kind) if isinstance(kind, str) else kind


def check_schema(c: sqlite3.Connection, path: Path) -> None:
    """Refuse a file (one line naming the object, exit 2) whose sqlite_schema is not, object for
    object and word for word, what vram's migrations made at its version: another user's file
    (`--db`) could swap a table for a view of the same columns that never ends or counts rows
    twice, define job_totals to give any totals, or add a trigger (SQL the recorder would run, often
    as root) or an index on an expression (evaluated on every write). Nothing unknown is allowed,
    an extra table too: vram never makes one, so someone else edited the file."""
    version = c.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise _newer(path, version)
    try:
        rows = [row for row in c.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema")
                if row not in _SQLITE_OWN]
    except sqlite3.OperationalError as e:
        if str(e).startswith("Could not decode to UTF-8"):  # Python's error quotes the text (lines of it)
            raise StoreError(not_utf8(path), param="db") from None
        raise
    if _same(rows, _schema_written(version)):
        return
    expected = _schema_of(version)  # SQLite's own text decides
    if _same(rows, expected):
        return
    want = {row[:2]: row for row in expected}
    have = {row[:2]: row for row in rows}
    keys = [row[:2] for row in rows]
    twice = [key for key in have if keys.count(key) > 1]  # a name twice: a schema edited by hand
    extra = twice + sorted((key for key in have if key not in want), key=repr)
    changed = sorted((key for key in have if key in want and have[key] != want[key]), key=repr)
    missing = sorted((key for key in want if key not in have), key=repr)
    if extra:
        problem, (kind, name) = _("{kind} {name} is not one vram makes"), extra[0]
    elif changed:
        problem, (kind, name) = _("{kind} {name} is not as vram makes it"), changed[0]
    else:
        problem, (kind, name) = _("{kind} {name} is missing"), missing[0]
    kind = _object_kind(kind)
    raise StoreError(_("{path} is not a readable vram history database (corrupt: {problem})").format(
        path=path, problem=problem.format(kind=str(kind)[:20], name=repr(str(name)[:40]))), param="db")


def check_jobs_through(c: sqlite3.Connection, path: Path) -> None:
    """Refuse a file (one line, exit 2) whose meta jobs_through is not a mark vram wrote: totals read
    or written through it would count raw rows twice or not at all. (Its schema, job_totals among
    it, is check_schema's.)"""
    row = c.execute("SELECT value FROM meta WHERE key = 'jobs_through'").fetchone()
    problem = _jobs_through_problem(None if row is None else row[0],
                                   c.execute("SELECT max(id) FROM samples").fetchone()[0])
    if problem is not None:
        raise StoreError(_("{path} is not a readable vram history database (corrupt: "
                           "{problem})").format(path=path, problem=problem), param="db")


def not_utf8(path: Path) -> str:
    return _("{path} is not a readable vram history database (corrupt: text that is not UTF-8)").format(path=path)


def describe(e: sqlite3.Error, path: Path) -> str:
    """One line for an SQLite error on the store."""
    text = str(e)
    code = getattr(e, "sqlite_errorcode", None)
    if code == SQLITE_FULL or "disk is full" in text:
        return _("{path}: the disk is full").format(path=path)
    if code is not None and code & 0xFF == SQLITE_IOERR:  # EFBIG (a file size limit) lands here too
        return _("{path}: cannot write ({error}: the disk failed, or a file size limit was reached)").format(
            path=path, error=text)
    if code == SQLITE_NOTADB or "not a database" in text or "malformed" in text:
        return _("{path} is not a readable vram history database (corrupt, or another kind of file): {error}").format(
            path=path, error=text)
    if "readonly" in text or "read-only" in text:
        return _("{path} is read-only here: {error}").format(path=path, error=text)
    if "locked" in text or "busy" in text:
        return _("{path} is locked by another program: {error}").format(path=path, error=text)
    if "unable to open" in text:
        return _("cannot open {path}: {error} (does its directory exist, and may you read it?)").format(
            path=path, error=text)
    return f"{path}: {text}"


def open_error(e: sqlite3.Error, path: Path) -> StoreError:
    """The StoreError for an SQLite error while opening: busy or locked, a full disk or an I/O
    error is a failure of the moment (exit 1: the service restarts it), anything else a database
    vram cannot use (exit 2)."""
    line = describe(e, path)
    text = str(e)
    code = getattr(e, "sqlite_errorcode", None)
    if "locked" in text or "busy" in text:
        return StoreBusyError(line, param="db")
    if code == SQLITE_FULL or "disk is full" in text or (
            code is not None and code & 0xFF == SQLITE_IOERR and code != SQLITE_IOERR_SHORT_READ):
        return StoreUnavailableError(line, param="db")
    return StoreError(line, param="db")


class Store:
    """An open history database. `Store.open(path, write=True)` for the recorder (creates and
    migrates it); `Store.open(path)` for readers (read-only, never blocks the recorder).

    `path` is the file a writer has open, or the name a reader opened (the live file behind it,
    or the copy); `published` the name a writer copies it to for other users (`publish()`),
    None when nothing is published."""

    def __init__(self, conn: sqlite3.Connection, path: Path, writable: bool, lock_fd: int | None = None,
                 published: Path | None = None):
        self.conn = conn
        self.path = path
        self.writable = writable
        self._lock_fd = lock_fd
        self.published = published
        self.hour_sums = False  # schema 2 or later: proc_hour and gpu_hour (set once open)
        self.day_sums = False  # schema 3 or later: proc_day and gpu_day
        self.workloads = False  # schema 4 or later: the table `workloads`
        self.local_days = False  # schema 5 or later: the recorder's local days, and jobs.nvml_pid
        self.hour_totals = False  # schema 6 or later: hour_totals, and proc_day's first and last hour
        self.quarter_totals = False  # schema 7 or later: quarter_totals
        self.totals_behind = False  # schema 8 or later: jobs' totals hold the samples up to meta jobs_through

    @classmethod
    def open(cls, path: Path | str | None = None, write: bool = False) -> Store:
        """The database at `path`; by default, the recorder's (write) or the one readers find.

        Where root records into a directory others may enter, the live database is PRIVATE/NAME
        beside it (paths.live_path: only its owner can open it, so nobody else can lock it), and
        a root recorder publishes a read-only copy at `path` itself. A reader opens the live file
        when it can reach it (its owner, root), else `path`: read as an immutable file (no locks,
        no -wal or -shm) when it is not the reader's own and nothing writes it in place."""
        path = named_path(path) if path is not None else default_path() if write else reader_path()
        try:
            return cls._open_writer(path) if write else cls._open_reader(path)
        except FileNotFoundError:
            raise StoreError(_("no history at {path}: nothing has been recorded there (start 'vram record', or "
                               "name another database with --db)").format(path=path), param="db") from None
        except UnicodeDecodeError:  # a damaged schema SQLite quotes in its error, not UTF-8
            raise StoreError(not_utf8(path), param="db") from None

    @classmethod
    def _open_writer(cls, path: Path) -> Store:
        _walk(path.parent, create=True)
        live = live_path(path)
        # Root's history in a directory others may enter is read by them: it goes private (and
        # is published). A user's is 0600, which nobody else can open (and so lock) anyway.
        shared = os.path.lexists(live) or (os.geteuid() == 0 and bool(os.stat(path.parent).st_mode & 0o011))
        lock_fd: int | None = None
        try:
            if shared:
                if not os.path.lexists(live):  # refused before anything is made beside it
                    _check_old(path)
                _private_dir(live.parent)
                lock_fd = cls._lock(Path(f"{live}.lock"))
                if not os.path.lexists(live):
                    _migrate(path, live)
                    os.close(os.open(live, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
            else:
                lock_fd = cls._lock(path)
                live = path
            _check_not_symlink(live)
            _check_trusted(live, os.lstat(live), N_("the recorder"))
        except BaseException as e:
            if lock_fd is not None:
                os.close(lock_fd)
            if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
                raise os_failure(e, _("cannot open {path}: {why}").format(path=path, why=e.strerror)) from None
            if isinstance(e, sqlite3.Error):
                raise open_error(e, path) from None
            raise
        return cls._connect(live, True, lock_fd, path if shared and os.geteuid() == 0 else None)

    @classmethod
    def _open_reader(cls, path: Path) -> Store:
        me = os.geteuid()
        live = live_path(path)
        try:
            os.lstat(live)
            target = live  # the owner's (or root's): the live file
        except OSError:
            target = path
        if me == 0:  # root acts on what it reads (kill --idle): nothing another user could change
            _walk(target.parent, create=False)
        _check_not_symlink(target)
        if not target.exists():
            raise FileNotFoundError(target)
        st = os.stat(target)
        if me == 0:
            _check_trusted(target, st, N_("vram as root"))
        snapshot = target == path and st.st_uid != me and _is_snapshot(path, st.st_uid)
        store = cls._connect(target, False, None, None, immutable=snapshot)
        store.path = path  # what the reader named (reports say "in lab.db"), whichever file it is
        return store

    @classmethod
    def _connect(cls, path: Path, write: bool, lock_fd: int | None, published: Path | None,
                 immutable: bool = False) -> Store:
        conn: sqlite3.Connection | None = None
        try:
            if not immutable:
                trusted = N_("the recorder") if write else N_("vram as root") if os.geteuid() == 0 else None
                _check_companions(path, os.stat(path).st_uid, trusted)
            _check_header(path)
            if write:
                conn = sqlite3.connect(path, timeout=0.5, isolation_level=None, check_same_thread=False)
            else:
                # immutable: SQLite takes no lock and opens no -wal or -shm (a published copy,
                # never written in place): nothing this reader does can reach a writer.
                conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}",
                                       uri=True, timeout=5, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA trusted_schema = OFF")  # the file may come from another user
            store = cls(conn, path, write, lock_fd, published)
            store._prepare()
            return store
        except BaseException as e:
            if conn is not None:
                conn.close()
            if lock_fd is not None:
                os.close(lock_fd)
            if isinstance(e, sqlite3.Error):
                raise open_error(e, path) from None
            if isinstance(e, OSError):
                raise os_failure(e, _("cannot open {path}: {why}").format(path=path, why=e.strerror)) from None
            raise

    @staticmethod
    def _lock(path: Path) -> int:
        """One recorder per database: an exclusive flock on the file (held until close; SQLite's
        own locks are fcntl locks, which flock does not touch). A private database's lock is a
        file of its own beside it, which nobody else can open (and so lock)."""
        import fcntl

        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            if e.errno == errno.ELOOP:  # a link was put there
                raise StoreError(_("{path} is a symbolic link; vram does not follow links").format(
                    path=path), param="db") from None
            raise os_failure(e, _("cannot open {path} for writing: {why}").format(
                path=path, why=e.strerror)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StoreError(_("{path} is not a regular file").format(path=path), param="db")
            _check_trusted(path, st, N_("the recorder"))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise StoreBusyError(_("{path} is locked: another 'vram record' is writing to it").format(
                    path=path), param="db") from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _prepare(self) -> None:
        c = self.conn
        c.execute("PRAGMA busy_timeout = 500" if self.writable else "PRAGMA busy_timeout = 5000")
        if not self.writable:
            if _identify(c, self.path):
                raise StoreError(_("{path} holds no history yet").format(path=self.path), param="db")
            version = self.version()
            # The schema first, as the recorder checks it: a version below READS_FROM over vram's
            # tables is a damaged file for both, never one 'vram record' would upgrade.
            check_schema(c, self.path)
            # An older schema is read as it is (a recorder service of the previous version may
            # still be writing it); 'vram record' upgrades it when it next starts.
            if version < READS_FROM:
                raise StoreError(_("{path} has schema {version}; 'vram record' upgrades it to {newest} when it "
                                   "next starts").format(
                                       path=self.path, version=version, newest=SCHEMA_VERSION), param="db")
            self.hour_sums = version >= 2
            self.day_sums = version >= 3
            self.workloads = version >= 4
            self.local_days = version >= 5
            self.hour_totals = version >= 6
            self.quarter_totals = version >= 7
            self.totals_behind = version >= 8
            c.execute(f"PRAGMA cache_size = -{READER_CACHE_KIB}")
            return
        empty = _validate(c, self.path)
        if empty:  # before the first page is written (switching to WAL writes one)
            c.execute("PRAGMA auto_vacuum = INCREMENTAL")
        # Between recorders the file is in rollback-journal mode (close()), where a reader in the
        # middle of a query holds it shared: wait for it rather than refuse to start. Only the
        # owner's own processes can: a database others may read is published, the live one private.
        c.execute("PRAGMA busy_timeout = 10000")
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA busy_timeout = 500")
        c.execute("PRAGMA synchronous = NORMAL")  # WAL: a crash loses at most the last commit
        # SQLite's page cache (2 MiB by default) fills as the file grows and stays full, and a
        # rollup's sorter takes as much again: a recorder's RSS rose ~4.5 MiB after its first
        # samples at 8 x 500 (traced: SQLite's memory 0.97 -> 2.34 MiB, its peak 4.40 at the first
        # rollup). A sample touches a few dozen pages, a rollup reads the rest from the OS's cache:
        # with 512 KiB, SQLite's memory is 0.84 MiB from the first samples, its peak 1.94, and RSS
        # rises ~1 MiB, at the first rollup (minute 1), then stays.
        c.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        self.migrate()
        self.hour_sums = self.day_sums = self.workloads = self.local_days = self.hour_totals = True
        self.quarter_totals = self.totals_behind = True

    def publish(self) -> None:
        """Copy the live database as of its newest commit to `published`, for other users: a fresh
        file made in the private directory (VACUUM INTO, through a connection of its own, so it
        can run beside the recorder's writes), synced, made readable (0644) and renamed over the
        name in one step. A reader with the old copy open goes on reading it; no lock anyone holds
        on the published file or its directory makes this wait."""
        if self.published is None:
            return
        tmp = self.path.parent / f".{self.published.name}.publishing"
        for suffix in ("", "-journal", "-wal", "-shm"):
            _unlink(f"{tmp}{suffix}")
        src = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True, timeout=5,
                              isolation_level=None, check_same_thread=False)
        try:
            src.execute("PRAGMA trusted_schema = OFF")
            src.execute("VACUUM INTO ?", (str(tmp),))
        finally:
            src.close()
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchmod(fd, 0o644)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.published)
        except BaseException:
            _unlink(tmp)
            raise
        _fsync_dir(self.published.parent)

    def version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self) -> None:
        """Bring the schema up to SCHEMA_VERSION, one migration per transaction."""
        while (version := self.version()) < SCHEMA_VERSION:
            # One script (executescript commits whatever transaction is open before it runs).
            try:
                self.conn.executescript(f"BEGIN IMMEDIATE; {MIGRATIONS[version]}; PRAGMA user_version = "
                                        f"{version + 1}; PRAGMA application_id = {APPLICATION_ID};")
                if version + 1 == 5:
                    _fill_local_days(self.conn)
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException:
            # SQLite rolls back by itself after some errors (a full disk); a ROLLBACK then fails
            # with "no transaction is active" and would hide the error that matters.
            if self.conn.in_transaction:
                try:
                    self.conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    # ------------------------------------------------------------ meta
    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                          "SET value = excluded.value", (key, value))

    def size(self) -> int:
        """Bytes in use (pages not on the free list)."""
        page = self.conn.execute("PRAGMA page_size").fetchone()[0]
        count = self.conn.execute("PRAGMA page_count").fetchone()[0]
        free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int(page * (count - free))

    # ------------------------------------------------------------ rollups and retention
    def roll_up(self, now: float, keep: Retention) -> None:
        """Move raw samples older than keep.raw into 1-minute rollups, 1-minute rollups older than
        keep.minute into 15-minute ones, drop 15-minute ones older than keep.quarter, and the
        oldest rows first while the file holds more than keep.max_bytes. Whole buckets only:
        the cut-offs are bucket boundaries, so tiers never overlap.
        A step that fails leaves the others to run, so that retention keeps the file bounded
        whatever else fails each time: while hour sums cannot be written, raw rows older than
        twice keep.raw are rolled up without them, and the hours those rows were in are read row
        by row from then on (hour_since moves past them, and the sums before it go: a failure
        shorter than keep.raw costs none of them). A failure is raised at the end (RollupError):
        retention's if it failed, else the sums'."""
        cut_raw = (now - keep.raw) // 60 * 60
        cut_minute = (now - keep.minute) // 900 * 900
        failed: RollupError | None = None
        try:
            with self.transaction() as c:
                _raw_to_hours(c)  # first: no raw row is rolled up before it is in its hour's sums
                _raw_to_minutes(c, cut_raw)
        except Exception as e:  # noqa: BLE001 - any failure of the sums: retention still runs
            failed = RollupError(e, sums=True)
            cut_late = (now - 2 * keep.raw) // 60 * 60
            try:
                if self.conn.execute("SELECT 1 FROM samples WHERE t < ? LIMIT 1", (cut_late,)).fetchone():
                    with self.transaction() as c:
                        _raw_to_minutes(c, cut_late)
                        _forget_hours_before(c, -(-cut_late // HOUR) * HOUR)
            except Exception as again:  # noqa: BLE001 - the raw rows stay; said as retention's failure
                failed = RollupError(again, sums=False)
        try:
            with self.transaction() as c:
                _minutes_to_quarters(c, cut_minute)
                cut_quarter = now - keep.quarter
                c.execute("DELETE FROM gpu_rollup WHERE tier = 900 AND t < ?", (cut_quarter,))
                c.execute("DELETE FROM proc_rollup WHERE tier = 900 AND t < ?", (cut_quarter,))
                _forget_hours_before(c, -(-cut_quarter // HOUR) * HOUR)  # hours wholly kept stay
                _drop_old_jobs(c)
        except Exception as e:  # noqa: BLE001 - said as the rollup's failure; the size bound still runs
            failed = failed if failed is not None and not failed.sums else RollupError(e, sums=False)
        try:
            while self.size() > keep.max_bytes and self._drop_oldest():
                pass
            # Give the free pages back to the file system. Through execute() it frees one page only
            # (Python steps the statement once, and fetchall() does not finish it); a script runs it out.
            self.conn.executescript("PRAGMA incremental_vacuum;")
        except Exception as e:  # noqa: BLE001 - said as the rollup's failure
            failed = failed if failed is not None and not failed.sums else RollupError(e, sums=False)
        if failed is not None:
            raise failed

    def _drop_oldest(self) -> bool:
        """Delete the oldest tenth of the oldest tier that has rows; False when nothing is left."""
        with self.transaction() as c:
            for tier in (900, 60):
                # The bucket starts of this tier in either table (a GPU without processes has
                # gpu rows only), oldest first: a tenth of them go.
                starts = ("SELECT t FROM gpu_rollup WHERE tier = :tier "
                          "UNION SELECT t FROM proc_rollup WHERE tier = :tier")
                n = c.execute(f"SELECT count(*) FROM ({starts})", {"tier": tier}).fetchone()[0]
                if n:
                    edge = c.execute(f"SELECT t FROM ({starts}) ORDER BY t LIMIT 1 OFFSET :skip",
                                     {"tier": tier, "skip": n // 10}).fetchone()[0]
                    c.execute("DELETE FROM proc_rollup WHERE tier = ? AND t <= ?", (tier, edge))
                    c.execute("DELETE FROM gpu_rollup WHERE tier = ? AND t <= ?", (tier, edge))
                    _forget_hours_before(c, edge // HOUR * HOUR + HOUR)
                    _drop_old_jobs(c)
                    return True
            n = c.execute("SELECT count(*) FROM samples").fetchone()[0]
            if n <= 1:
                return False
            edge = c.execute("SELECT id FROM samples ORDER BY id LIMIT 1 OFFSET ?", (max(1, n // 10),)).fetchone()[0]
            latest = c.execute("SELECT max(t) FROM samples WHERE id < ?", (edge,)).fetchone()[0]
            _forget_hours_before(c, latest // HOUR * HOUR + HOUR)
            c.execute("DELETE FROM proc_raw WHERE sample < ?", (edge,))
            c.execute("DELETE FROM gpu_raw WHERE sample < ?", (edge,))
            c.execute("DELETE FROM samples WHERE id < ?", (edge,))
            _drop_old_jobs(c)
            return True

    def close(self, settle: bool = True) -> None:
        """Close; a recorder's store settles back to a rollback journal (settle=False: leave the
        file exactly as it is, for a store refused after opening)."""
        try:
            if self.writable and settle:
                # Back to a rollback journal while no recorder runs: a reader who may not write
                # the directory (another user reading root's history) cannot create the -wal and
                # -shm files a WAL database needs. Not possible while a reader is in: WAL stays.
                try:
                    self.conn.execute("PRAGMA journal_mode = DELETE")
                except sqlite3.Error:
                    pass
            self.conn.close()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


def _avg(column: str, weight: str) -> str:
    """SQL for the time-weighted average of `column` over the rows where it is known."""
    return (f"SUM({column} * {weight}) / NULLIF(SUM(CASE WHEN {column} IS NOT NULL THEN {weight} END), 0)")


def _total_avg(column: str, weight: str) -> str:
    """SQL for the average of `column` over all of the rows' time, an unknown value counted as 0
    (NULL when none is known): for memory, whose value x seconds is a total that reports sum, so
    that rolling rows up never changes it (an average over the known time alone would credit
    that memory to the unknown time too)."""
    return (f"CASE WHEN COUNT({column}) THEN SUM(coalesce({column}, 0) * {weight}) / "
            f"NULLIF(SUM({weight}), 0) END")


def _merge(column: str, kind: str) -> str:
    """ON CONFLICT: combine an existing rollup row with a new one for the same bucket (a wall
    clock that went back can bring samples into a bucket already rolled up)."""
    if kind == "sum":
        return f"{column} = {column} + excluded.{column}"
    if kind == "max":
        return f"{column} = max(coalesce({column}, excluded.{column}), coalesce(excluded.{column}, {column}))"
    if kind == "total":  # as _total_avg: value x seconds is kept
        return (f"{column} = CASE WHEN {column} IS NULL AND excluded.{column} IS NULL THEN NULL ELSE "
                f"(coalesce({column}, 0) * seconds + coalesce(excluded.{column}, 0) * excluded.seconds) / "
                f"NULLIF(seconds + excluded.seconds, 0) END")
    return (f"{column} = coalesce(({column} * seconds + excluded.{column} * excluded.seconds) / "
            f"NULLIF(seconds + excluded.seconds, 0), {column}, excluded.{column})")


_GPU_MERGE = ", ".join([_merge("used", "total")]
                       + [_merge(c, "avg") for c in ("reserved", "util", "mem_util", "temp", "power")]
                       + [_merge("used_max", "max")]
                       + [_merge(c, "sum") for c in ("occupied_seconds", "lost_seconds", "seconds")])
_PROC_MERGE = ", ".join([_merge("memory", "total"), _merge("sm_util", "avg")] + [_merge("memory_max", "max")]
                        + [_merge(c, "sum") for c in ("idle_seconds", "seconds")])


def _raw_to_minutes(c: sqlite3.Connection, cut: float) -> None:
    # Never the newest sample: its span is written when the next sample comes (after a forward
    # clock jump it can be older than the cut). A bucket it is in later gets merged (ON CONFLICT).
    old = "SELECT id FROM samples WHERE t < :cut AND id < (SELECT max(id) FROM samples)"
    c.execute(f"""
        INSERT INTO gpu_rollup (tier, t, gpu, seconds, occupied_seconds, lost_seconds, used, used_max,
                                reserved, util, mem_util, temp, power)
        SELECT 60, CAST(s.t / 60 AS INTEGER) * 60 AS b, g.gpu, SUM(s.span),
               SUM(CASE WHEN g.procs > 0 THEN s.span ELSE 0 END), SUM(CASE WHEN g.lost THEN s.span ELSE 0 END),
               {_total_avg('g.used', 's.span')}, MAX(g.used), {_avg('g.reserved', 's.span')},
               {_avg('g.util', 's.span')}, {_avg('g.mem_util', 's.span')}, {_avg('g.temp', 's.span')},
               {_avg('g.power', 's.span')}
        FROM samples s JOIN gpu_raw g ON g.sample = s.id WHERE s.id IN ({old}) GROUP BY b, g.gpu
        ON CONFLICT (tier, t, gpu) DO UPDATE SET {_GPU_MERGE}""", {"cut": cut})
    c.execute(f"""
        INSERT INTO proc_rollup (tier, t, job, gpu, seconds, idle_seconds, memory, memory_max, sm_util)
        SELECT 60, CAST(s.t / 60 AS INTEGER) * 60 AS b, p.job, p.gpu, SUM(s.span), SUM(p.idle * s.span),
               {_total_avg('p.memory', 's.span')}, MAX(p.memory), {_avg('p.sm_util', 's.span')}
        FROM samples s JOIN proc_raw p ON p.sample = s.id WHERE s.id IN ({old}) GROUP BY b, p.job, p.gpu
        ON CONFLICT (tier, t, job, gpu) DO UPDATE SET {_PROC_MERGE}""", {"cut": cut})
    c.execute(f"DELETE FROM proc_raw WHERE sample IN ({old})", {"cut": cut})
    c.execute(f"DELETE FROM gpu_raw WHERE sample IN ({old})", {"cut": cut})
    c.execute(f"DELETE FROM samples WHERE id IN ({old})", {"cut": cut})


def _minutes_to_quarters(c: sqlite3.Connection, cut: float) -> None:
    c.execute(f"""
        INSERT INTO gpu_rollup (tier, t, gpu, seconds, occupied_seconds, lost_seconds, used, used_max,
                                reserved, util, mem_util, temp, power)
        SELECT 900, t / 900 * 900 AS b, gpu, SUM(seconds), SUM(occupied_seconds), SUM(lost_seconds),
               {_total_avg('used', 'seconds')}, MAX(used_max), {_avg('reserved', 'seconds')}, {_avg('util', 'seconds')},
               {_avg('mem_util', 'seconds')}, {_avg('temp', 'seconds')}, {_avg('power', 'seconds')}
        FROM gpu_rollup WHERE tier = 60 AND t < :cut GROUP BY b, gpu
        ON CONFLICT (tier, t, gpu) DO UPDATE SET {_GPU_MERGE}""", {"cut": cut})
    c.execute(f"""
        INSERT INTO proc_rollup (tier, t, job, gpu, seconds, idle_seconds, memory, memory_max, sm_util)
        SELECT 900, t / 900 * 900 AS b, job, gpu, SUM(seconds), SUM(idle_seconds),
               {_total_avg('memory', 'seconds')}, MAX(memory_max), {_avg('sm_util', 'seconds')}
        FROM proc_rollup WHERE tier = 60 AND t < :cut GROUP BY b, job, gpu
        ON CONFLICT (tier, t, job, gpu) DO UPDATE SET {_PROC_MERGE}""", {"cut": cut})
    c.execute("DELETE FROM gpu_rollup WHERE tier = 60 AND t < :cut", {"cut": cut})
    c.execute("DELETE FROM proc_rollup WHERE tier = 60 AND t < :cut", {"cut": cut})


def _raw_to_hours(c: sqlite3.Connection) -> None:
    """Sum every raw sample not summed yet whose span is final (all but the newest) into its hour."""
    after = int(c.execute("SELECT coalesce((SELECT value FROM meta WHERE key = 'hour_sample'), 0)").fetchone()[0])
    upto, last = c.execute("SELECT max(id), (SELECT max(t) FROM samples WHERE id > :after AND id < "
                           "(SELECT max(id) FROM samples)) FROM samples", {"after": after}).fetchone()
    if upto is None or last is None:
        return
    hours = [int(h) for (h,) in c.execute(f"SELECT DISTINCT CAST(t / {HOUR} AS INTEGER) * {HOUR} FROM samples "
                                          "WHERE id > :after AND id < :upto", {"after": after, "upto": upto})]
    days = sorted({hour // DAY * DAY for hour in hours})
    for statement in (*_RAW_TO_HOURS, _RAW_TO_QUARTERS):
        c.execute(statement, {"after": after, "upto": upto})
    for hour in hours:
        c.execute(_HOUR_TOTALS.format(where="t = ?"), (hour,))
    for day in days:
        c.execute("DELETE FROM proc_day WHERE t = ?", (day,))
        c.execute("DELETE FROM gpu_day WHERE t = ?", (day,))
        for statement in _HOURS_TO_DAY:
            c.execute(statement, {"day": day})
    _sum_local_days(c, hours)
    c.execute("INSERT INTO meta (key, value) VALUES ('hour_sample', ?) ON CONFLICT(key) DO UPDATE "
              "SET value = excluded.value", (upto - 1,))
    # Every summed sample is at or before hour_t_last: a report ending later can read its last,
    # unfinished hour from the sums too.
    c.execute("INSERT INTO meta (key, value) VALUES ('hour_t_last', ?) ON CONFLICT(key) DO UPDATE "
              "SET value = max(CAST(value AS REAL), CAST(excluded.value AS REAL))", (float(last),))


def _local_day(hour: int) -> tuple[int, int] | None:
    """The whole hours [t, hi) of the local day (this process's zone, time.localtime) that `hour`
    is wholly in, or None when local midnight cuts it. A time belongs to the local day of its
    quarter hour (query._day_sql's rule: its local date), so an hour is whole when its first and
    last quarters are of one day (every zone's offset is a whole number of quarter hours)."""
    import time

    if not 0 <= hour <= MAX_DAY_TIME:
        return None

    def day(t: int) -> int:
        return (t + time.localtime(t).tm_gmtoff + DAY) // DAY

    def whole(h: int) -> int | None:
        first = day(h)
        return first if first == day(h + HOUR - 900) else None

    number = whole(hour)
    if number is None:
        return None
    lo = hi = hour
    for _step in range(48):  # a day has at most 26 hours (a change of up to 2 hours); bounded anyway
        if whole(lo - HOUR) != number:
            break
        lo -= HOUR
    for _step in range(48):
        hi += HOUR
        if whole(hi) != number:
            break
    return lo, hi


def _sum_local_days(c: sqlite3.Connection, hours: list[int]) -> None:
    """The hour sums of `hours` changed: the day of this process's zone each is in is summed again
    from its hours (schema 5), and every stored day over one of these hours or over a day summed
    here goes first, whichever recorder's zone (or tzdata) stored it: one of another zone may start
    at the same hour and end at another (Berlin's 23-hour 29 March and Lagos's 24-hour one), start
    inside a day summed here or end inside it. Stored days are disjoint, each the sum of its hours."""
    spans: dict[int, int] = {}
    for hour in sorted(set(hours)):
        span = _local_day(hour)
        if span is not None:
            spans[span[0]] = span[1]
    for lo, hi in sorted({(hour, hour + HOUR) for hour in hours} | set(spans.items())):
        # (No bound on t below: a day another program stored may be of any length.)
        c.execute("DELETE FROM proc_local_day WHERE t IN (SELECT t FROM local_days WHERE t < ? AND hi > ?)",
                  (hi, lo))
        c.execute("DELETE FROM local_days WHERE t < ? AND hi > ?", (hi, lo))
    for day, hi in spans.items():
        c.execute("DELETE FROM proc_local_day WHERE t = ?", (day,))  # (rows of a day no longer listed)
        c.execute("INSERT INTO local_days (t, hi) VALUES (?, ?)", (day, hi))
        c.execute(_HOURS_TO_LOCAL_DAY, {"day": day, "hi": hi})


def _fill_local_days(c: sqlite3.Connection) -> None:
    """Schema 5's migration: the local days of the hour sums there are, in this process's zone."""
    since = c.execute("SELECT value FROM meta WHERE key = 'hour_since'").fetchone()
    first = float(since[0]) if since is not None and _number(since[0]) else 0.0
    covered = -1  # the hours before this are in a day summed already
    # Only the hours there are (a file's hours are bounded by its size, its times may not be).
    for (hour,) in c.execute(f"SELECT DISTINCT t FROM proc_hour WHERE typeof(t) = 'integer' AND t >= ? "
                             f"AND t <= {MAX_DAY_TIME} AND t % {HOUR} = 0 ORDER BY t", (max(0.0, first),)).fetchall():
        if hour < covered:
            continue
        span = _local_day(hour)
        if span is None or span[0] < first:  # a day that lost hours to retention is not kept (as the recorder)
            continue
        c.execute("INSERT INTO local_days (t, hi) VALUES (?, ?)", span)
        c.execute(_HOURS_TO_LOCAL_DAY, {"day": span[0], "hi": span[1]})
        covered = span[1]


def _forget_hours_before(c: sqlite3.Connection, hour: float) -> None:
    """Rows of the tiers before `hour` were deleted: so go the hour sums; hours from `hour` on
    (meta hour_since) are whole in the sums, those before it are read row by row, if any are left."""
    row = c.execute("SELECT value FROM meta WHERE key = 'hour_since'").fetchone()
    if row is not None and float(row[0]) >= hour:
        return
    c.execute("INSERT INTO meta (key, value) VALUES ('hour_since', ?) ON CONFLICT(key) DO UPDATE "
              "SET value = excluded.value", (float(hour),))
    c.execute("DELETE FROM proc_hour WHERE t < ?", (hour,))
    c.execute("DELETE FROM gpu_hour WHERE t < ?", (hour,))
    c.execute("DELETE FROM hour_totals WHERE t < ?", (hour,))
    c.execute("DELETE FROM quarter_totals WHERE t < ?", (hour,))
    # A day that began before `hour` lost some of its hours: it goes whole.
    c.execute("DELETE FROM proc_day WHERE t < ?", (hour,))
    c.execute("DELETE FROM gpu_day WHERE t < ?", (hour,))
    c.execute("DELETE FROM proc_local_day WHERE t < ?", (hour,))
    c.execute("DELETE FROM local_days WHERE t < ?", (hour,))


def _drop_old_jobs(c: sqlite3.Connection) -> None:
    """A job goes when no row of any tier refers to it any more (it ended over a year ago)."""
    # min(t) per tier: each is one seek in the rollup key (tier, t, ...); min(t) over the whole
    # table would read every row of it.
    per_tier = " UNION ALL ".join(f"SELECT min(t) AS t FROM proc_rollup WHERE tier = {tier}" for tier in ROLLUP_TIERS)
    oldest = c.execute(f"SELECT min(t) FROM ({per_tier} UNION ALL SELECT min(t) FROM samples)").fetchone()[0]
    if oldest is not None:
        c.execute("DELETE FROM jobs WHERE last_seen < ?", (oldest,))
        c.execute("DELETE FROM workloads WHERE job NOT IN (SELECT id FROM jobs)")  # (writers: schema 4)
