"""The commands of `vram`, in the order `vram --help` lists them, each with its one-line help.

A name here is a module of this package with `add_parser(sub, parents)` and a `run`. cli/main.py
imports only the module of the command being run (`vram --help` imports none), so this table,
not the modules, is where the top-level help reads each line. The lines are marked N_(): the
help formatter (common.HelpFormatter) translates them when it shows them.
"""

from __future__ import annotations

from ..i18n import N_

COMMANDS: dict[str, str] = {
    "status": N_("show every GPU's memory and utilization, and who holds its memory"),
    "ps": N_("list every process holding GPU memory"),
    "info": N_("every detail of some GPUs: identity, memory, health, clocks, PCIe, NVLink, topology, processes"),
    "top": N_("the live view: GPUs, their history, alerts and every GPU process, refreshed"),
    "kill": N_("free GPU memory: signal GPU processes safely (asks first, logs every action)"),
    "pick": N_("choose free GPUs by policy and print their ids for CUDA_VISIBLE_DEVICES"),
    "run": N_("pick GPUs, reserve them, and run a command on them"),
    "estimate": N_("estimate the GPU memory a model needs to train or run (no GPU needed)"),
    "plan": N_("plan a model on a GPU: largest batch, changes that make it fit, GPUs that fit"),
    "doctor": N_("explain a CUDA out-of-memory error, or check this machine for what causes them"),
    "record": N_("record GPU and process history into a database (foreground, or as a service)"),
    "report": N_("GPU-hours, memory-hours and idle holding per user, GPU, process, day, container, pod or "
                 "Slurm job, from recorded history"),
    "life": N_("one process's memory on each GPU over its life (and its container, pod, Slurm job), from "
               "recorded history"),
    "serve": N_("serve Prometheus metrics, a live web page and a JSON API (read-only)"),
    "fleet": N_("every host's GPUs through Prometheus (vram serve on each host); fleet pick: where to run"),
    "config": N_("show the defaults vram uses (config files, environment) and where each came from"),
    "sim": N_("simulated machines: list, check and share them with other programs"),
    "completion": N_("print a shell completion script for bash, zsh or fish"),
}

# Renamed commands: the old name still runs the new one for a release, hidden from the help listing,
# completion and suggestions, with a one-line note on stderr (cli/main.py). "job" was the process
# life, a word Slurm users read as their scheduler's job (docs/history.md, "Names").
OLD_COMMANDS: dict[str, str] = {"job": "life"}
