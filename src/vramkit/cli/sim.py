"""vram sim: the bundled simulated machines, scenario checking, and the pynvml shim."""

from __future__ import annotations

import argparse
import json
import os
import shlex
from typing import TYPE_CHECKING

from ..nvml import scenario as scenarios
from .commands import COMMANDS
from .common import HelpFormatter

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["sim"]
DESCRIPTION = """\
vram runs on a simulated NVML when given --simulate NAME|FILE (or $VRAM_SIMULATE):
every command works, and every view says it is simulated. A scenario is a JSON file that
describes GPUs, processes, faults and timelines (format: docs/scenarios.md).

examples:
  vram sim list                    the bundled scenarios
  vram sim validate my.json        check a scenario file; errors name the field
  vram status --simulate my.json   use it
  vram sim shim /tmp/vram-shim     a pynvml for other programs (gpustat, nvitop) on a scenario:
                                   PYTHONPATH=/tmp/vram-shim VRAM_SIMULATE=demo gpustat
"""

SHIM_DESCRIPTION = """\
Write DIR/pynvml.py: a drop-in pynvml that runs nvidia-ml-py's own code on vram's simulated
NVML, so any pynvml program (gpustat, nvitop, your own scripts) sees a simulated machine.
Put DIR first on PYTHONPATH and name the scenario in VRAM_SIMULATE (a bundled name or a JSON
file); no NVIDIA library is loaded. NVML functions the simulator does not provide answer
"Not Supported", as a driver does for a feature the GPU lacks. The program's Python needs
nvidia-ml-py installed; vramkit is found where this vram is installed.
DIR must be yours (or root's), not a symlink, and writable by no one else: whoever can write
there decides what `import pynvml` runs for everyone who uses the shim.

examples:
  vram sim shim /tmp/vram-shim
  PYTHONPATH=/tmp/vram-shim VRAM_SIMULATE=demo gpustat
  PYTHONPATH=/tmp/vram-shim VRAM_SIMULATE=my.json nvitop -1
  vram sim shim /tmp/vram-shim --simulate faulty   also check the scenario, and print its export line
"""

LIST_DESCRIPTION = """\
List the scenarios bundled with vram, each with its GPUs, its processes and what it shows.
Use one with --simulate NAME (or $VRAM_SIMULATE=NAME) on any command.

examples:
  vram sim list
  vram sim list --json | jq -r '.[].name'
  vram status --simulate demo      the bundled busy 8x A100 server
"""

VALIDATE_DESCRIPTION = """\
Load a scenario (a bundled NAME or a JSON FILE) exactly as --simulate would, and say whether it
is valid: "FILE: ok (N GPUs, M processes)" and exit 0, or the first problem, naming the field
(gpus[0].memory_total: not a size: 'x'), and exit 2. The format: docs/scenarios.md.

examples:
  vram sim validate my.json
  vram sim validate demo
  vram sim validate my.json && vram status --simulate my.json
"""


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sim", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    sim_sub = p.add_subparsers(dest="sim_command", metavar="COMMAND", required=True)
    ls = sim_sub.add_parser("list", help="list the bundled scenarios", description=LIST_DESCRIPTION,
                            parents=parents, formatter_class=HelpFormatter)
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(run=run_list)
    val = sim_sub.add_parser("validate", help="check a scenario file", description=VALIDATE_DESCRIPTION,
                             parents=parents, formatter_class=HelpFormatter)
    val.add_argument("scenario", metavar="NAME|FILE", help="a bundled scenario name or a scenario JSON file")
    val.set_defaults(run=run_validate)
    shim = sim_sub.add_parser("shim", help="write a pynvml that other programs can use to see a scenario",
                              description=SHIM_DESCRIPTION, parents=parents,
                              formatter_class=HelpFormatter)
    shim.add_argument("directory", metavar="DIR", help="where to write pynvml.py (created if needed)")
    shim.set_defaults(run=run_shim)
    p.set_defaults(sim_parser=p)


def run_list(args: argparse.Namespace) -> int:
    rows = []
    for name in scenarios.bundled_names():
        s = scenarios.load(name)
        rows.append({"name": name, "gpus": len(s.gpus), "processes": len(s.processes),
                     "description": s.data.get("description", "")})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['name']:<8} {r['gpus']} GPUs, {r['processes']:>2} processes  {r['description']}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    s = scenarios.load(args.scenario)
    print(f"{s.source}: ok ({len(s.gpus)} GPUs, {len(s.processes)} processes)")
    return 0


def run_shim(args: argparse.Namespace) -> int:
    from ..nvml.shim import write_shim

    chosen = getattr(args, "simulate", None) or os.environ.get("VRAM_SIMULATE") or None
    if chosen:
        scenarios.load(chosen)  # a bad scenario fails here, not later inside someone's program
        path = scenarios.resolve(chosen)
        if path.parent != scenarios.SCENARIO_DIR:
            chosen = str(path.absolute())  # the other program may run in another directory
    target = write_shim(args.directory)  # a ShimError is a VramkitError (exit 2): cli/main prints it
    directory = shlex.quote(str(target.parent))
    print(f"wrote {target}")
    print("pynvml programs (gpustat, nvitop, ...) see the simulated machine with:")
    print(f"  export PYTHONPATH={directory}${{PYTHONPATH:+:$PYTHONPATH}}")
    if chosen:
        print(f"  export VRAM_SIMULATE={shlex.quote(chosen)}")
    else:
        print(f"  export VRAM_SIMULATE=demo    # or: {', '.join(scenarios.bundled_names())}, or a scenario JSON file")
    return 0
