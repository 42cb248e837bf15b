"""--container, --pod and --slurm-job: the processes of one workload (procs/workload.py), for
`vram ps` and `vram status`."""

from __future__ import annotations

import argparse
import dataclasses
import re

from ..gpu_state import GpuProcess, Snapshot
from ..i18n import N_, _
from ..procs.workload import matches


def add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--container", metavar="NAME|ID",
                   help=N_("only processes in this container: its name (as docker or podman names it, or the "
                        "pod's container name) or an id prefix of 4+ digits"))
    p.add_argument("--pod", metavar="NAME|NS/NAME|UID",
                   help=N_("only processes of this Kubernetes pod (its name from the kubelet, or its UID)"))
    p.add_argument("--slurm-job", metavar="JOB[.STEP]",
                   help=N_("only processes of this Slurm job (JOB, JOB.STEP, or an array task ARRAYJOB_TASK)"))


# JOB, JOB.STEP (a number, or Slurm's batch/extern/interactive step), ARRAYJOB_TASK, in ASCII digits
_SLURM_JOB = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,12})?(?:\.(?:[0-9]{1,12}|batch|extern|interactive))?", re.ASCII)


def wanted(args: argparse.Namespace) -> dict[str, str] | None:
    """The filters given, or None; a UsageError for one given empty (it would select every process)
    or a Slurm job that no job id can be."""
    from .common import UsageError

    given = {key: value for key in ("container", "pod", "slurm_job") if (value := getattr(args, key, None)) is not None}
    for key, value in given.items():
        if not value.strip():
            raise UsageError(_("give a value (an empty one would match every process)"), param=key)
    job = given.get("slurm_job")
    if job is not None and not _SLURM_JOB.fullmatch(job.strip()):
        raise UsageError(_("{value} is not a Slurm job (JOB, JOB.STEP or ARRAYJOB_TASK, e.g. 4242 or 4242.0)").format(
            value=repr(job[:40])), param="slurm_job")
    return given or None


def select(procs: list[GpuProcess], filters: dict[str, str] | None) -> list[GpuProcess]:
    if filters is None:
        return procs
    return [p for p in procs if matches(p.workload, **filters)]


def only(snap: Snapshot, filters: dict[str, str] | None) -> Snapshot:
    """A copy of the snapshot with only the GPUs a matching process holds, each listing only those
    processes (the snapshot may sit in a collector's ring: not changed)."""
    if filters is None:
        return snap
    gpus = [dataclasses.replace(g, processes=mine) for g in snap.gpus if (mine := select(g.processes, filters))]
    return dataclasses.replace(snap, gpus=gpus)
