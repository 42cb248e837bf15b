"""The commands of `vram`, in the order `vram --help` lists them, each with its one-line help.

A name here is a module of this package with `add_parser(sub, parents)` and a `run`. cli/main.py
imports only the module of the command being run (`vram --help` imports none), so this table,
not the modules, is where the top-level help reads each line.
"""

from __future__ import annotations

COMMANDS: dict[str, str] = {
    "status": "show every GPU's memory and utilization, and who holds its memory",
    "ps": "list every process holding GPU memory",
    "info": "every detail of some GPUs: identity, memory, health, clocks, PCIe, NVLink, topology, processes",
    "top": "the live view: GPUs, their history, alerts and every GPU process, refreshed",
    "kill": "free GPU memory: signal GPU processes safely (asks first, logs every action)",
    "pick": "choose free GPUs by policy and print their ids for CUDA_VISIBLE_DEVICES",
    "run": "pick GPUs, reserve them, and run a command on them",
    "estimate": "estimate the GPU memory a model needs to train or run (no GPU needed)",
    "plan": "plan a model on a GPU: largest batch, changes that make it fit, GPUs that fit",
    "doctor": "explain a CUDA out-of-memory error, or check this machine for what causes them",
    "record": "record GPU and process history into a database (foreground, or as a service)",
    "report": "GPU-hours, memory-hours and idle holding per user, GPU, process, day, container, pod or "
              "Slurm job, from recorded history",
    "life": "one process's memory on each GPU over its life (and its container, pod, Slurm job), from "
            "recorded history",
    "serve": "serve Prometheus metrics, a live web page and a JSON API (read-only)",
    "fleet": "every host's GPUs through Prometheus (vram serve on each host); fleet pick: where to run",
    "config": "show the defaults vram uses (config files, environment) and where each came from",
    "sim": "simulated machines: list, check and share them with other programs",
    "completion": "print a shell completion script for bash, zsh or fish",
}

# Renamed commands: the old name still runs the new one for a release, hidden from the help listing,
# completion and suggestions, with a one-line note on stderr (cli/main.py). "job" was the process
# life, a word Slurm users read as their scheduler's job (docs/history.md, "Names").
OLD_COMMANDS: dict[str, str] = {"job": "life"}
