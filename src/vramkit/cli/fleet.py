"""vram fleet: every host's GPUs through Prometheus, and which host to run on (vram fleet pick)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..errors import VramkitError
from ..i18n import N_, _, pgettext
from .commands import COMMANDS
from .common import HelpFormatter, UsageError, add_duration

if TYPE_CHECKING:
    from ..fleet import Fleet, Prometheus
    from .common import Subparsers

HELP = COMMANDS["fleet"]
DESCRIPTION = N_("""\
Ask Prometheus, which scrapes 'vram serve' on every host, for the newest numbers of every GPU:
one table with host, GPU, name, memory used/total, utilization, processes and the user holding
the most memory. A host whose scrape is down (up == 0) or whose answer is partial is said so, on
its own line. docs/fleet.md sets this up, from one server to many.

The Prometheus address comes from --prometheus or $VRAM_PROMETHEUS. Hosts are the targets of the
scrape job 'vram' (--job), and every target that exported vram's metrics within a day.

Without Prometheus, --hosts reads each host's own 'vram serve' (its /api/v1/snapshot) at once,
within --timeout for all of them; --hosts-config gives basic auth and TLS in the format of a
Prometheus scrape config's basic_auth and tls_config (docs/fleet.md).

'vram fleet' exits 1 when a host is down (after showing the others); --ignore-down exits 0.

'vram fleet pick' judges each host's GPUs as 'vram pick' does (the same policy options) and names
the host and the CUDA_VISIBLE_DEVICES to use there. It reserves nothing: 'vram run' on that host
does.

examples:
  vram fleet --prometheus http://prometheus:9090
  vram fleet --prometheus http://prometheus:9090 --json | jq '.hosts[] | select(.state != "up")'
  vram fleet pick -n 2 --min-free 40GiB --prometheus http://prometheus:9090
  export VRAM_PROMETHEUS=http://prometheus:9090; vram fleet pick --json
  vram fleet --hosts gpu-a:9787,gpu-b:9787,gpu-c:9787
  vram fleet pick -n 1 --hosts https://gpu-a:9787,https://gpu-b:9787 --hosts-config fleet.yml
""")


TIMEOUT = "10s"  # fleet's --timeout when not given


def _connection_options(p: argparse.ArgumentParser, suppress: bool) -> None:
    # On both `fleet` and `fleet pick`: either place works; the subcommand's copy only sets what is given.
    default = argparse.SUPPRESS if suppress else None
    g = p.add_argument_group("Prometheus")
    g.add_argument("--prometheus", metavar="URL", default=default,
                   help=N_("Prometheus' address, e.g. http://prometheus:9090 (default $VRAM_PROMETHEUS)"))
    g.add_argument("--job", metavar="NAME", action="append", default=default,
                   help=N_("the scrape job(s) of vram serve (default 'vram'; repeat for several)"))
    g.add_argument("--hosts", metavar="LIST", action="append", default=default,
                   help=N_("read these hosts' vram serve directly instead of Prometheus, e.g. gpu-a:9787,gpu-b "
                   "(port 9787 unless given; https://host for TLS; repeatable)"))
    g.add_argument("--hosts-config", metavar="FILE", default=default,
                   help=N_("basic_auth and tls_config for --hosts, as in a Prometheus scrape config"))
    add_duration(g, "--timeout", default=argparse.SUPPRESS if suppress else TIMEOUT, low=0.1, high=600,
                 bounds=N_("must be 0.1s to 10m"), help=N_("how long to wait for the answers (Prometheus' or the "
                 "hosts'), all of them together: connecting, headers and body (default 10s)"))  # TIMEOUT
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help=N_("print JSON"))


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    from .pick import add_policy_options

    p = sub.add_parser("fleet", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    _connection_options(p, suppress=False)
    p.add_argument("--ignore-down", action="store_true",
                   help=N_("exit 0 even when a host is down (it is still shown as down)"))
    p.set_defaults(run=run)
    actions = p.add_subparsers(dest="fleet_command", metavar="pick", parser_class=type(p))
    pick = actions.add_parser("pick", help=N_("name the host and the CUDA_VISIBLE_DEVICES to use there"),
                              description=N_("Name the host whose GPUs fit the policy best, and the "
                              "CUDA_VISIBLE_DEVICES to use there.\n\nexamples:\n"
                              "  vram fleet pick -n 2 --min-free 40GiB --prometheus http://prometheus:9090\n"),
                              parents=parents, formatter_class=HelpFormatter)
    _connection_options(pick, suppress=True)
    add_policy_options(pick)
    for unsupported in ("exclude", "only", "exclusive"):  # names GPUs of one machine, or needs uids: refused
        pick.set_defaults(**{unsupported: None})
    pick.set_defaults(run=run_pick)


def _client(args: argparse.Namespace) -> tuple[Prometheus, tuple[str, ...]]:
    from ..fleet import Prometheus
    from .common import duration_flag

    url = args.prometheus or os.environ.get("VRAM_PROMETHEUS")
    if not url:
        raise UsageError(_("--prometheus: Prometheus' address is needed (or set $VRAM_PROMETHEUS), "
                           "e.g. --prometheus http://prometheus:9090"))
    timeout = duration_flag(args, "timeout", 0.1, 600, N_("must be 0.1s to 10m"))
    try:
        prom = Prometheus(url, timeout=timeout)
    except VramkitError as e:
        raise UsageError(f"--prometheus: {e.message}") from None
    return prom, tuple(args.job or ("vram",))


def _read(args: argparse.Namespace) -> Fleet:
    from ..fleet import read_fleet

    if args.hosts:
        return _read_hosts(args)
    if args.hosts_config:
        raise UsageError(_("--hosts-config: goes with --hosts (Prometheus' own settings are its own)"))
    prom, jobs = _client(args)
    return read_fleet(prom, jobs)


def _read_hosts(args: argparse.Namespace) -> Fleet:
    from pathlib import Path

    from ..fleet_hosts import load_client_config, parse_hosts, read_hosts
    from .common import duration_flag

    if args.prometheus or args.job:
        raise UsageError(_("--hosts: reads the hosts without Prometheus; leave out --prometheus and --job"))
    config = load_client_config(Path(args.hosts_config)) if args.hosts_config else None
    urls = parse_hosts(args.hosts, credentials=config is not None and config.authorization is not None)
    return read_hosts(urls, duration_flag(args, "timeout", 0.1, 600, N_("must be 0.1s to 10m")), config)


def run(args: argparse.Namespace) -> int:
    from ..render.fleet_view import fleet_json, render_fleet
    from ..render.style import style_for, terminal_width

    fleet = _read(args)
    if args.json:
        print(fleet_json(fleet))
    else:
        print(render_fleet(fleet, style_for(no_color=getattr(args, "no_color", False)), terminal_width()))
    return 1 if fleet.down and not args.ignore_down else 0


def run_pick(args: argparse.Namespace) -> int:
    from ..allocate import build_policy
    from ..fleet import pick_host
    from ..render.fleet_view import choice_json, choice_line
    from .pick import apply_config_defaults

    for flag, why in (("only", N_("its GPU numbers are one machine's")),
                      ("exclude", N_("its GPU numbers are one machine's")),
                      ("exclusive", N_("whose processes are yours is known on each host, not here"))):
        if getattr(args, flag, None) is not None:  # refused, never ignored (config defaults come after)
            raise UsageError(_("not for fleet pick, which chooses a host: {why} (use it with vram pick there)").format(
                why=_(why)), param=flag)
    apply_config_defaults(args)
    try:  # no local CUDA_VISIBLE_DEVICES: it is about this machine, not the host chosen
        policy, _unused = build_policy([], count=args.count, min_free=args.min_free, max_util=args.max_util,
                                 prefer=args.prefer, env={})
    except VramkitError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from e
    fleet = _read(args)
    choice, refusals = pick_host(fleet, policy)
    if choice is None:
        why = pgettext("clause separator", "; ").join(refusals) if refusals else _("Prometheus knows no vram host")
        print("vram: " + _("no host fits {policy}: {why}").format(policy=policy.describe(), why=why), file=sys.stderr)
        return 1
    print(choice_json(choice, policy, refusals) if args.json else choice_line(choice, policy))
    return 0
