"""vram plan: will it fit on this GPU, and if not, the cheapest change that makes it fit."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..i18n import N_, _
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, add_old_spelling, open_for
from .estimate import add_setup_options, setup_from_args

if TYPE_CHECKING:
    from .common import Subparsers

HELP = COMMANDS["plan"]
DESCRIPTION = N_("""\
Check whether MODEL fits a GPU as set up (same options as 'vram estimate'), the largest batch
that fits, and, when it does not fit, the changes ranked cheapest first, each with the memory it
would need: micro-batch + gradient accumulation, flash attention, mixed precision, checkpointing,
an 8-bit optimizer, shorter sequences, LoRA/QLoRA, a smaller variant, ZeRO or FSDP, more GPUs (and,
when no one change is enough, them stacked); for inference: a smaller batch, flash attention, a newer
transformers, fewer new tokens, a shorter prompt, 8/4-bit weights, tensor parallel, layers split over
GPUs; and which catalog GPUs fit it unchanged. All numbers are estimates.

--card current uses the free memory of the GPUs here (the one with the most free memory).

examples:
  vram plan bert-large-uncased --card rtx-4090 --batch 32 --seq 512
  vram plan llama-3-8b --card a100-80gb --seq 4096
  vram plan llama-2-7b --card current --simulate demo
  vram plan mistral-7b --card l4 --infer --batch 8 --seq 8192 --json
  vram plan llama-2-13b --card a100-40gb --infer --batch 8 --seq 4096 --new-tokens 4096 --transformers 4.40
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter, usage=_("%(prog)s [options] MODEL"))
    groups = add_setup_options(p)
    card = groups["output"].add_argument(
        "--card", metavar="NAME|current", default="a100-80gb",
        help=N_("the GPU to plan for: a catalog GPU (a100-80gb, h100-sxm, rtx-4090, ...; default %(default)s), or "
             "'current': the free memory of the GPU here with the most"))
    add_old_spelling(p, "--gpu", card)
    groups["output"].add_argument("--json", action="store_true", help=N_("print JSON"))
    p.set_defaults(run=run)


def _current_free(args: argparse.Namespace) -> int:
    machine = open_for(args)
    try:
        snap = machine.snapshot()
    finally:
        machine.close()
    free = [g.memory_free for g in snap.gpus if g.memory_free is not None and not g.lost]
    if not free:
        raise UsageError(_("--card current: no GPU here reports its free memory"))
    return max(free)


def run(args: argparse.Namespace) -> int:
    from ..estimator.planner import plan
    from ..render.plan_view import plan_json, render_plan
    from ..render.style import style_for

    if not args.model:
        raise UsageError(_("plan: give a MODEL (a catalog name, a config.json, or a count like 7b)"))
    from ..estimator.specs import UnknownFamily

    try:
        setup = setup_from_args(args)
    except UnknownFamily as unknown:  # vram estimate traces it; the planner weighs tens of setups by the formulas
        mtype = str(unknown.config.get("model_type"))[:40]
        raise UsageError(_("{where}: model_type {type!r} is not in the formulas the planner weighs its changes "
                           "with; `vram estimate {model}` traces it, one setup at a time (--batch, --seq, "
                           "--checkpointing, --infer ...), or plan with its parameter count: vram plan 8B").format(
            where=unknown.name, type=mtype, model=args.model)) from None
    gpu = _current_free(args) if args.card == "current" else args.card
    result = plan(args.model, gpu, setup, gpu_label=_("the GPU here with the most free memory"))
    if args.json:
        print(plan_json(result))
    else:
        print(render_plan(result, style_for(sys.stdout, getattr(args, "no_color", False))))
    return 0
