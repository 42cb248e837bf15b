"""vram sim: the bundled simulated machines, scenario checking, and the pynvml shim."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import TYPE_CHECKING

from ..i18n import N_, _, ngettext
from ..nvml import scenario as scenarios
from .commands import COMMANDS
from .common import HelpFormatter, UsageError

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["sim"]
DESCRIPTION = N_("""\
vram runs on a simulated NVML when given --simulate NAME|FILE (or $VRAM_SIMULATE):
every command works, and every view says it is simulated. A scenario is a JSON file that
describes GPUs, processes, faults and timelines (format: docs/scenarios.md).

examples:
  vram sim list                    the bundled scenarios
  vram sim validate my.json        check a scenario file; errors name the field
  vram status --simulate my.json   use it
  vram sim shim /tmp/vram-shim     a pynvml for other programs (gpustat, nvitop) on a scenario:
                                   PYTHONPATH=/tmp/vram-shim VRAM_SIMULATE=demo gpustat
  vram sim spawn --simulate demo -- gpustat
                                   the same with real processes, which gpustat and nvitop list
""")

SPAWN_DESCRIPTION = N_("""\
Start a real placeholder process for every made-up process of a scenario, write the scenario with
their pids, and keep them running until CMD exits (or, without CMD, until Ctrl-C or SIGTERM). A
bundled scenario's pids belong to no process, and gpustat and nvitop drop a pid they cannot find
in /proc: through the shim (vram sim shim) they list no processes. With the placeholders they
list them, with the scenario's memory, GPUs and timelines; the user, command, age, CPU and RSS
are the placeholders' own (sleep, started by you), as every program reads them from /proc. A
zombie in the scenario is a real zombie, a stopped one is stopped.

CMD runs with VRAM_SIMULATE set to the written scenario; vram exits with its exit code. The file's
pids mean nothing once this command has ended.

examples:
  vram sim shim /tmp/shim
  PYTHONPATH=/tmp/shim vram sim spawn --simulate demo -- gpustat
  PYTHONPATH=/tmp/shim vram sim spawn --simulate demo -- nvitop -1
  vram sim spawn --simulate demo -o /tmp/demo-real.json    until Ctrl-C; meanwhile, elsewhere:
                                   VRAM_SIMULATE=/tmp/demo-real.json vram ps
""")

SHIM_DESCRIPTION = N_("""\
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
""")

LIST_DESCRIPTION = N_("""\
List the scenarios bundled with vram, each with its GPUs, its processes and what it shows.
Use one with --simulate NAME (or $VRAM_SIMULATE=NAME) on any command.

examples:
  vram sim list
  vram sim list --json | jq -r '.[].name'
  vram status --simulate demo      the bundled busy 8x A100 server
""")

VALIDATE_DESCRIPTION = N_("""\
Load a scenario (a bundled NAME or a JSON FILE) exactly as --simulate would, and say whether it
is valid: "FILE: ok (N GPUs, M processes)" and exit 0, or the first problem, naming the field
(gpus[0].memory_total: not a size: 'x'), and exit 2. The format: docs/scenarios.md.

examples:
  vram sim validate my.json
  vram sim validate demo
  vram sim validate my.json && vram status --simulate my.json
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sim", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    sim_sub = p.add_subparsers(dest="sim_command", metavar="COMMAND", required=True)
    ls = sim_sub.add_parser("list", help=N_("list the bundled scenarios"), description=LIST_DESCRIPTION,
                            parents=parents, formatter_class=HelpFormatter)
    ls.add_argument("--json", action="store_true", help=N_("print JSON"))
    ls.set_defaults(run=run_list)
    val = sim_sub.add_parser("validate", help=N_("check a scenario file"), description=VALIDATE_DESCRIPTION,
                             parents=parents, formatter_class=HelpFormatter)
    val.add_argument("scenario", metavar="NAME|FILE", help=N_("a bundled scenario name or a scenario JSON file"))
    val.set_defaults(run=run_validate)
    shim = sim_sub.add_parser("shim", help=N_("write a pynvml that other programs can use to see a scenario"),
                              description=SHIM_DESCRIPTION, parents=parents,
                              formatter_class=HelpFormatter)
    shim.add_argument("directory", metavar="DIR", help=N_("where to write pynvml.py (created if needed)"))
    shim.set_defaults(run=run_shim)
    spawn = sim_sub.add_parser("spawn", help=N_("real placeholder processes for a scenario's, for gpustat and nvitop"),
                               description=SPAWN_DESCRIPTION, parents=parents, formatter_class=HelpFormatter,
                               usage="vram sim spawn [--simulate NAME|FILE] [-o FILE] [-- CMD [ARGS...]]")
    spawn.add_argument("-o", "--output", metavar="FILE",
                       help=N_("write the scenario with the placeholders' pids here (default: a private "
                            "temporary file, removed when this command ends)"))
    spawn.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                       help=N_("a command to run while the placeholders live (with VRAM_SIMULATE set to the file)"))
    spawn.set_defaults(run=run_spawn)
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
    from ..render.text_width import pad

    width = max(len(r["name"]) for r in rows)
    for r in rows:  # the descriptions are the scenarios' own text (English)
        gpus = _("{gpus},").format(gpus=ngettext("{n} GPU", "{n} GPUs", r["gpus"]).format(n=r["gpus"]))
        processes = ngettext("{n} process", "{n} processes", r["processes"]).format(n=r["processes"])
        print(f"{r['name']:<{width}} {pad(gpus, 7)} {pad(processes, 12, right=True)}  {r['description']}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    s = scenarios.load(args.scenario)
    gpus = ngettext("{n} GPU", "{n} GPUs", len(s.gpus)).format(n=len(s.gpus))
    processes = ngettext("{n} process", "{n} processes", len(s.processes)).format(n=len(s.processes))
    print(_("{source}: ok ({gpus}, {processes})").format(source=s.source, gpus=gpus, processes=processes))
    return 0


def run_shim(args: argparse.Namespace) -> int:
    from ..nvml.shim import write_shim

    if not args.directory.strip():  # not "here": the shim decides what `import pynvml` runs where it lies
        raise UsageError(_("DIR: which directory? (an empty name would be the current one; give '.' for that)"))
    chosen = getattr(args, "simulate", None) or os.environ.get("VRAM_SIMULATE") or None
    if chosen:
        scenario = scenarios.load(chosen)  # a bad scenario fails here, not later inside someone's program
        if scenario.for_vendor("nvidia") is None:  # the shim is NVML's: pynvml programs see NVIDIA GPUs only
            raise scenarios.ScenarioError(_("{source}: a scenario of {vendor} GPUs: pynvml programs would see no "
                                            "GPU through the shim (it serves NVIDIA's NVML)").format(
                source=scenario.source, vendor=scenario.vendor))
        path = scenarios.resolve(chosen)
        if path.parent != scenarios.SCENARIO_DIR:
            chosen = str(path.absolute())  # the other program may run in another directory
    target = write_shim(args.directory)  # a ShimError is a VramkitError (exit 2): cli/main prints it
    directory = shlex.quote(str(target.parent))
    print(_("wrote {path}").format(path=target))
    print(_("pynvml programs (gpustat, nvitop, ...) see the simulated machine with:"))
    print(f"  export PYTHONPATH={directory}${{PYTHONPATH:+:$PYTHONPATH}}")
    if chosen:
        print(f"  export VRAM_SIMULATE={shlex.quote(chosen)}")
    else:
        print("  export VRAM_SIMULATE=demo    # " + _("or: {names}, or a scenario JSON file").format(
            names=", ".join(scenarios.bundled_names())))
    return 0


def run_spawn(args: argparse.Namespace) -> int:
    import signal
    import tempfile

    from .. import launch
    from ..nvml.placeholders import Placeholders

    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    chosen = getattr(args, "simulate", None) or os.environ.get("VRAM_SIMULATE") or None
    if not chosen:
        raise UsageError(_("--simulate: which scenario? (a bundled name such as demo, or a scenario JSON file)"))
    scenario, data = scenarios.load_whole(chosen)  # a bad scenario fails here, before anything is started
    from ..output_files import check_output, write_new

    if args.output:
        check_output(os.path.abspath(args.output))  # so is an output we would refuse
    with tempfile.TemporaryDirectory(prefix="vram-spawn-") as private, Placeholders(data) as placeholders:
        output = os.path.abspath(args.output) if args.output else os.path.join(private, f"{scenario.name}-real.json")
        write_new(output, (json.dumps(placeholders.scenario, indent=1) + "\n").encode())
        scenarios.load(output)  # what we wrote must load as the scenario did
        say = sys.stderr if command else sys.stdout
        print("vram: " + ngettext("{n} placeholder process stands in for those of scenario '{scenario}' in {path}",
                                  "{n} placeholder processes stand in for those of scenario '{scenario}' in {path}",
                                  len(placeholders.pids)).format(n=len(placeholders.pids), scenario=scenario.name,
                                                                 path=output), file=say, flush=True)
        if command:
            return launch.run(command, {**os.environ, "VRAM_SIMULATE": output})
        print(f"  export VRAM_SIMULATE={shlex.quote(output)}", file=say)
        print("vram: " + _("they run until Ctrl-C (or SIGTERM)"), file=say, flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwind, ending the placeholders
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        return 0


