"""vram report: who used which GPU, how much and how idly, over a window of recorded history."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..i18n import N_, _
from .commands import COMMANDS
from .common import HelpFormatter, UsageError

if TYPE_CHECKING:
    from ..history.store import Store
    from ..render.report_view import Report
    from .common import Subparsers

HELP = COMMANDS["report"]
DESCRIPTION = N_("""\
Sum what 'vram record' kept over a window: per user (or GPU, process life, day, container,
Kubernetes pod or namespace, Slurm job) the GPU-hours (a process holding memory on a GPU for
an hour is one), memory GiB-hours, peak memory, idle-holding hours (memory held while the
process ran no kernels of its own) and processes; then the processes that held memory idle
longest. A process in no container, pod or Slurm job is counted in the row '(none)'. The
first two lines say the window, how much of it was recorded, and in which database.

WHEN is a duration meaning that long ago (7d, 24h, 90m, 1h30m), 'now', a local date or
time (2026-11-01, '2026-11-01 13:00', 2026-11-01T13:00:05), or @UNIX (unix seconds).
--json and --csv print base units: seconds, bytes, byte-seconds (docs/history.md, "Reports").

examples:
  vram report                               the last 7 days, per user
  vram report --since 24h --by gpu          the last day, per GPU, with average utilization
  vram report --since 2026-11-01 --until 2026-11-08 --by day
  vram report --by life --top 20            the 20 processes with the most GPU-hours
  vram report --by slurm-job --since 30d    GPU-hours per Slurm job (--by pod, container, namespace)
  vram report --json | jq '.rows[] | {user, gpu_seconds}'
  vram report --since 24h --plot gpus.svg   memory per GPU over time, coloured by user
""")

BY = ("user", "gpu", "life", "day", "container", "pod", "namespace", "slurm-job")  # history.query.BY
MAX_TOP = 100_000  # more rows than any report shows; keeps SQLite's LIMIT in range


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("--db", metavar="PATH", help=N_("the database (default: as vram record; also $VRAM_DB)"))
    p.add_argument("--since", metavar="WHEN", default="7d", help=N_("start of the window (default 7d: 7 days ago)"))
    p.add_argument("--until", metavar="WHEN", default="now", help=N_("end of the window (default now)"))
    p.add_argument("--by", choices=BY, type=_by, default="user",
                   help=N_("one row per user (default), GPU, life (a process, from its start to its end), local "
                        "day, container, pod, namespace (Kubernetes) or slurm-job"))
    p.add_argument("--top", metavar="N",
                   help=N_("at most N rows per table (default: every row; 10 process lives; 10 idle holders)"))
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help=N_("print JSON (base units; schema: docs/history.md)"))
    out.add_argument("--csv", action="store_true", help=N_("print CSV, one row per group, with a header"))
    p.add_argument("--plot", metavar="FILE", help=N_("also draw memory per GPU over time, coloured by user, into "
                   "FILE.svg (no extra library) or FILE.png (needs matplotlib: vramkit[plot])"))
    p.set_defaults(run=run)


def _by(text: str) -> str:
    """--by's value; the old name of a grouping ('job': a process life) as its new one, with a note."""
    if text in BY:
        return text
    from ..history.query import OLD_BY

    if text in OLD_BY:
        print("vram: " + _("note: --by {old} is now --by {new} (the old name works until the next release)").format(
            old=text, new=OLD_BY[text]), file=sys.stderr)
        return OLD_BY[text]
    return text


def _window(args: argparse.Namespace, now: float) -> tuple[float, float]:
    from ..units import parse_time_point

    points = []
    for name in ("since", "until"):
        try:
            points.append(parse_time_point(getattr(args, name), now))
        except ValueError as e:
            raise UsageError(f"--{name}: {e}") from None
    since, until = points
    if since >= until:
        raise UsageError(_("--since ({since}) must be before --until ({until})").format(since=args.since,
                                                                                      until=args.until))
    return since, until


def _top(args: argparse.Namespace) -> int | None:
    if args.top is None:
        return None
    text = str(args.top).strip()
    if not text.isdigit() or not 1 <= int(text[:7]) <= MAX_TOP or len(text) > 7:
        shown = text if len(text) <= 20 else text[:17] + "..."
        raise UsageError(_("--top: must be a whole number from 1 to {top}, got {value}").format(
            top=MAX_TOP, value=repr(shown)))
    return int(text)


def _plot_path(args: argparse.Namespace) -> tuple[Path, str] | None:
    if args.plot is None:
        return None
    path = Path(args.plot)
    kind = path.suffix.lower().lstrip(".")
    if kind not in ("svg", "png"):
        raise UsageError(_("--plot: the file must end in .svg or .png, got {value}").format(value=repr(args.plot)))
    return path, kind


def run(args: argparse.Namespace) -> int:
    from ..history import query
    from ..history.store import Store
    from ..render.report_view import Report, render_report, report_csv, report_json
    from ..render.style import style_for, terminal_width

    since, until = _window(args, time.time())
    top = _top(args)
    plot = _plot_path(args)
    if plot is not None and plot[1] == "png":
        _need_matplotlib()  # before the work, not after
    store = Store.open(args.db)
    try:
        # One pass over the window, shared by the rows and the idle holders.
        if args.by == "day":
            sums, rows = query.held_and_days(store, since, until)
        else:
            sums = query.held(store, since, until)
            rows = query.usage(store, since, until, args.by, sums=sums)
        limit = top if top is not None else 10 if args.by == "life" else None
        idle = query.idle_holders(store, since, until, limit=top or 10, sums=sums)
        report = Report(database=str(store.path), since=since, until=until, by=args.by,
                        rows=rows if limit is None else rows[:limit], idle_holders=idle,
                        coverage=query.coverage(store, since, until), total_rows=len(rows))
        if args.by in query.WORKLOADS and not store.workloads:
            report.notes.append(_("{path} was recorded before workloads were kept (schema {schema}): every process "
                                  "is in '{none}' ('vram record' upgrades it when it next starts)").format(
                path=store.path, schema=store.version(), none=query.NONE))
        if plot is not None:
            _draw(store, report, *plot)
            report.notes.append(_("memory per GPU over time drawn into {path}").format(path=plot[0]))
    finally:
        store.close()
    if args.json:
        print(report_json(report))
    elif args.csv:
        sys.stdout.write(report_csv(report))
    else:
        print(render_report(report, style_for(sys.stdout, getattr(args, "no_color", False)), terminal_width()))
    return 0


def _need_matplotlib() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        from ..install_hint import install_hint

        raise UsageError(_("--plot: a PNG needs matplotlib: {hint} (or write an .svg, which needs nothing)").format(
            hint=install_hint("plot")))


def _draw(store: Store, report: Report, path: Path, kind: str) -> None:
    from datetime import datetime

    from ..history.query import memory_series
    from ..render.report_plot import pick_step, render_png, render_svg

    span = report.until - report.since
    series = memory_series(store, report.since, report.until, pick_step(span))
    since, until = (datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") for t in (report.since, report.until))
    title = _("GPU memory by user, {since} to {until}").format(since=since, until=until)
    from ..output_files import write_new

    data = render_svg(series, title).encode("utf-8") if kind == "svg" else render_png(series, title)
    write_new(os.path.abspath(path), data, param="plot")
