"""Formatting of single values for people: N/A stays N/A."""

from __future__ import annotations

from ..gpu_state import Device, GpuProcess
from ..i18n import _, pgettext
from ..units import format_duration, format_size

NA = "N/A"
_NVML_ERROR = "NVML error: "  # nvml/backend.py's reason for an error it has no words for


def reason(text: str) -> str:
    """An N/A reason in the reader's words. Reasons are stored in English (the JSON's `na`, the
    history): each is marked where it is written and translated only where it is shown."""
    if text.startswith(_NVML_ERROR):  # NVML's own words stay as NVML wrote them
        return _("NVML error: {error}").format(error=text[len(_NVML_ERROR):])
    return _(text)


def missing(p: GpuProcess) -> str:
    """Why a process's host side is unknown, in the reader's words: a row NVML lists under a host
    pid inside a container is said from what pidmap knows of it (its English is kept for the JSON)."""
    if p.nvml_pid is not None and p.pid_here is None:
        from ..pidmap import why_unmapped  # only inside a container: pidmap reads /proc and device files

        return why_unmapped(p)
    return reason(p.host_missing or "")


def memory_share(p: GpuProcess, dev: Device | None) -> float | None:
    """The percentage of its memory a process holds: of its MIG instance's memory when it runs in
    one (a 10 GiB instance of an 80 GiB GPU, held whole, is 100 %, not 12 %), else of its GPU's."""
    if p.memory is None or dev is None:
        return None
    total = dev.memory_total
    if p.mig_gi is not None:
        total = next((m.memory_total for m in dev.mig_devices if m.gi == p.mig_gi), None)
    return 100 * p.memory / total if total else None


def pct(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}%"


def temp(value: int | None) -> str:
    return NA if value is None else f"{value}°C"


def power(dev: Device) -> str:
    if dev.power_draw is None and dev.power_limit is None:
        return NA
    draw = NA if dev.power_draw is None else f"{dev.power_draw:.0f}"
    limit = NA if dev.power_limit is None else f"{dev.power_limit:.0f}"
    return f"{draw}/{limit}W"


def memory_pair(used: int | None, total: int | None) -> str:
    if used is None or total is None:
        return f"{format_size(used)}/{format_size(total)}"
    return f"{used / 1024**3:.1f}/{total / 1024**3:.1f}GiB"


def mem_fraction(dev: Device) -> float | None:
    if dev.memory_used is None or not dev.memory_total:
        return None
    return dev.memory_used / dev.memory_total


def short_gpu_name(name: str | None) -> str:
    if name is None:
        return NA
    return name.removeprefix("NVIDIA ").removeprefix("Tesla ")


def pid(proc: GpuProcess) -> str:
    """The pid column: this /proc's pid; "-" for a host pid no process here could be told to be
    (inside a container: the row says what is known; never a host pid shown as a pid here)."""
    here = proc.pid_here
    return "-" if here is None else str(here)


def namespace_notes(procs: list[GpuProcess]) -> list[str]:
    """Inside a container: what the rows NVML lists under host pids that no process here could be
    told to be add up to (pidmap.summary); [] elsewhere, without loading it."""
    if all(p.pid_here is not None for p in procs):
        return []
    from ..pidmap import summary

    return summary(procs)


def flags(proc: GpuProcess) -> list[str]:
    out = []
    if proc.zombie:
        out.append("zombie")
    if proc.orphaned:
        out.append("orphan")
    if proc.idle:
        out.append("idle")
    if proc.host_missing:
        out.append("no-host")
    if proc.container and owner(proc) is None:  # a named owner says more (the OWNER column)
        out.append("container")
    if "graphics" in proc.types:
        out.append("graphics")
    return out


def flag_words() -> dict[str, str]:
    """flags()'s words for people (a view asks once per screen, not per row; flags() themselves
    stay English: JSON, top's filter)."""
    return {"zombie": pgettext("flag", "zombie"), "orphan": pgettext("flag", "orphan"),
            "idle": pgettext("flag", "idle"), "no-host": pgettext("flag", "no-host"),
            "container": pgettext("flag", "container"), "graphics": pgettext("flag", "graphics")}


def elapsed(proc: GpuProcess) -> str:
    return format_duration(proc.elapsed)


OWNER_MAX = 32  # display columns of an owner in the text views (--wide, JSON and CSV: whole)


def owner(proc: GpuProcess) -> str | None:
    """Whom the process works for, short: 'pod nlp/train-7f9c', 'slurm 48211.0', 'docker alice-dev'
    (a container without a name: its 12-digit id); None for a process in none of them."""
    w = proc.workload
    if w is None:
        return None
    if w.pod is not None:
        return f"pod {w.namespace}/{w.pod}" if w.namespace else f"pod {w.pod}"
    if w.pod_uid is not None:
        return f"pod {w.pod_uid[:8]}"  # the kubelet did not name it (a note says why)
    if w.slurm_job is not None:  # the job its cgroup names: an array task's id is only its environment's claim
        return f"slurm {w.slurm_job}" + (f".{w.slurm_step}" if w.slurm_step is not None else "")
    if w.container_id is not None:
        name = w.container_name or (w.container_id if w.runtime == "lxc" else w.container_id[:12])
        return f"{w.runtime or 'container'} {name}"
    return None


def workload_notes(procs: list[GpuProcess]) -> list[str]:
    """Why a part of some processes' owners is unknown (a state file refused, the kubelet silent,
    a cgroup file that cannot be the kernel's): each reason once, in the reader's words."""
    notes = list(dict.fromkeys(p.workload.note for p in procs if p.workload is not None and p.workload.note))
    if not notes:
        return notes
    from ..procs.workload import local_note

    return [local_note(note) for note in notes]
