"""vram sim: the bundled simulated machines, scenario checking, and the pynvml shim."""

from __future__ import annotations

import argparse
import json

from ..nvml import scenario as scenarios

HELP = "simulated machines: list, check and share them with other programs"
DESCRIPTION = """\
vram runs on a simulated NVML when given --simulate NAME|FILE (or $VRAM_SIMULATE):
every command works, and every view says it is simulated. A scenario is a JSON file that
describes GPUs, processes, faults and timelines (format: docs/scenarios.md).

examples:
  vram sim list                    the bundled scenarios
  vram sim validate my.json        check a scenario file; errors name the field
  vram status --simulate my.json   use it
"""


def add_parser(sub, parents) -> None:
    p = sub.add_parser("sim", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    sim_sub = p.add_subparsers(dest="sim_command", metavar="COMMAND", required=True)
    ls = sim_sub.add_parser("list", help="list the bundled scenarios", parents=parents)
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(run=run_list)
    val = sim_sub.add_parser("validate", help="check a scenario file", parents=parents)
    val.add_argument("scenario", metavar="NAME|FILE")
    val.set_defaults(run=run_validate)
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
