"""vram serve: Prometheus metrics, a live web page and a JSON API, from one sampling process."""

from __future__ import annotations

import argparse
import errno
import signal
import sys
import threading
from typing import TYPE_CHECKING

from ..i18n import N_, _
from .commands import COMMANDS
from .common import Failure, HelpFormatter, UsageError, add_duration, open_for

if TYPE_CHECKING:
    from ..serve.hosts import OtherHosts
    from .common import Subparsers

DEFAULT_PORT = 9787  # not dcgm-exporter's 9400, nvidia_gpu_exporter's 9835, nvitop-exporter's 8000
HOSTS_TIMEOUT = "5s"
HELP = COMMANDS["serve"]
DESCRIPTION = N_("""\
Sample this machine's GPUs every INTERVAL and serve, on http://127.0.0.1:9787/:
  /metrics            for Prometheus (names and units: docs/metrics.md)
  /                   a live web page: what 'vram status' shows, with history charts
                      when 'vram record' keeps a history
  /api/v1/snapshot    the newest reading, as 'vram status --json' prints it
  /api/v1/events      the same, then what changed after every reading (server-sent
                      events; docs/serve-page.md)
  /api/v1/history     recorded memory and utilization per GPU (?range=5m|1h|24h|7d)
  /api/v1/hosts       with --hosts: the other hosts' readings, which the page shows
                      below this machine's (docs/serve-page.md)

It listens on 127.0.0.1 only, unless --listen says otherwise; elsewhere, give it TLS and basic
auth with --web-config (Prometheus' web config format; docs/fleet.md). It is read-only: nothing
can be killed through it. Per-process series carry pid and user, never the command line unless
--process-commands. docs/fleet.md: from one server to many with Prometheus and Grafana.

examples:
  vram serve                                  http://127.0.0.1:9787/
  vram serve --listen 0.0.0.0:9787 --web-config /etc/vramkit/web.yml
                                              for a Prometheus on another machine, with
                                              TLS and basic auth
  vram serve --dcgm-names                     also DCGM_FI_DEV_FB_USED and its siblings
  vram serve --compat dcgm,nvitop             also dcgm-exporter's and nvitop-exporter's names
  vram serve --simulate demo                  the bundled simulated server
  vram serve --hosts gpu-b:9787,gpu-c:9787    the page shows those hosts' vram serve too
""")  # 9787: DEFAULT_PORT


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("--listen", metavar="ADDR:PORT", default=f"127.0.0.1:{DEFAULT_PORT}",
                   help=N_("where to listen (default %(default)s; [::1]:PORT for IPv6)"))
    add_duration(p, "--interval", default="2s", low=0.1, high=3600, bounds=N_("must be 0.1s to 1h"),
                 help=N_("time between readings (default %(default)s)"))
    p.add_argument("--db", metavar="PATH", help=N_("the history /api/v1/history and the page read (default: the "
                   "recorder's, when there is one; also $VRAM_DB)"))
    p.add_argument("--process-commands", choices=("name", "full"), nargs="?", const="full", default="name",
                   help=N_("what is exported of each process's command line: the program name (default: a command "
                        "line can hold secrets), or full, the whole line as a label too (bare "
                        "--process-commands: full)"))
    p.add_argument("--max-process-series", metavar="N", type=int, default=2000,
                   help=N_("at most N (process, GPU) series, the largest holders first (default 2000)"))
    p.add_argument("--dcgm-names", action="store_true",
                   help=N_("also export dcgm-exporter's names, units and labels (DCGM_FI_DEV_FB_USED, ...); "
                   "the same as --compat dcgm"))
    p.add_argument("--compat", metavar="SCHEMES", default="",
                   help=N_("also export other exporters' names and labels, comma-separated: dcgm (dcgm-exporter), "
                   "nvitop (nvitop-exporter), nvidia-smi-exporter (utkuozdemir/nvidia_gpu_exporter), so "
                   "their Grafana dashboards work unchanged (docs/metrics.md)"))
    p.add_argument("--web-config", metavar="FILE", help=N_("TLS and basic auth: tls_server_config (cert_file, "
                   "key_file, client_auth_type, client_ca_file, min_version) and basic_auth_users (user: bcrypt "
                   "hash), as Prometheus' exporters read them; needs pyyaml and bcrypt (vramkit's 'serve' extra)"))
    p.add_argument("--hostname", metavar="NAME", help=N_("the host's name in metrics and on the page "
                   "(default: this machine's)"))
    p.add_argument("--hosts", metavar="LIST", action="append",
                   help=N_("also read these hosts' vram serve every interval and show them on the page, e.g. "
                   "gpu-b:9787,gpu-c (port 9787 unless given; https://host for TLS; repeatable), as vram fleet "
                   "--hosts reads them"))
    p.add_argument("--hosts-config", metavar="FILE",
                   help=N_("basic_auth and tls_config for --hosts, as in a Prometheus scrape config"))
    add_duration(p, "--hosts-timeout", default=HOSTS_TIMEOUT, low=0.1, high=600, bounds=N_("must be 0.1s to 10m"),
                 help=N_("how long to wait for each --hosts host's answer (default %(default)s); a host that "
                 "has not answered by then is shown as down, the others are shown as they answer"))
    p.set_defaults(run=run)


def parse_compat(text: str) -> tuple[str, ...]:
    """'dcgm,nvitop' -> ('dcgm', 'nvitop'); an unknown name is a usage error naming the known ones."""
    from ..serve.metrics import COMPAT_SCHEMES

    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    for name in names:
        if name not in COMPAT_SCHEMES:
            shown = name if len(name) <= 40 else name[:37] + "..."
            raise UsageError(_("--compat: unknown naming scheme {name} (known: {known})").format(
                name=repr(shown), known=", ".join(COMPAT_SCHEMES)))
    return names


def parse_listen(text: str) -> tuple[str, int, bool]:
    """'127.0.0.1:9787', ':9787' (all IPv4 addresses), '[::1]:9787' -> (host, port, IPv6)."""
    ipv6 = text.startswith("[")
    if ipv6:
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536 or len(text) > 300:  # 0: any free port
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise UsageError(_("--listen: expected ADDR:PORT (e.g. 127.0.0.1:{port}), got {text}").format(
            port=DEFAULT_PORT, text=repr(shown)))
    return host or ("::" if ipv6 else "0.0.0.0"), int(port), ipv6


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (a name is resolved)."""
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(str(a[4][0]).split("%")[0]).is_loopback for a in found)


def exposure_warning(host: str, web_config: bool, tls: bool, authenticated: bool) -> str | None:
    """The one line said when vram serve is reachable from other machines without protection."""
    if is_loopback(host):
        return None
    if not web_config:
        return "vram serve: " + _("warning: listening on {host} without --web-config: anyone who can reach this "
                                  "port can read the GPUs' process lists (users, pids); add TLS and basic auth with "
                                  "--web-config").format(host=host)
    if not authenticated:
        return "vram serve: " + _("warning: listening on {host} without basic_auth_users or required client "
                                  "certificates in the web config: anyone who can reach this port can read the "
                                  "process lists").format(host=host)
    if not tls:
        return "vram serve: " + _("warning: listening on {host} with basic auth but no TLS: passwords cross the "
                                  "network in clear text; add tls_server_config to the web config").format(host=host)
    return None


def raise_open_files(want: int) -> None:
    """The soft open-files limit raised towards `want` (within the hard limit), so that the
    server's connection limit, not the descriptor limit, is what a flood meets first."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


def other_hosts(args: argparse.Namespace, interval: float) -> OtherHosts:
    """The hosts of --hosts (addresses and client config checked here: a usage error, exit 2)."""
    from pathlib import Path

    from ..fleet_hosts import load_client_config, parse_hosts
    from ..serve.hosts import OtherHosts
    from .common import duration_flag

    config = load_client_config(Path(args.hosts_config)) if args.hosts_config else None
    urls = parse_hosts(args.hosts, credentials=config is not None and config.authorization is not None)
    timeout = duration_flag(args, "hosts_timeout", 0.1, 600, N_("must be 0.1s to 10m"))
    return OtherHosts(urls, interval, timeout, config)


def run(args: argparse.Namespace) -> int:
    import socket

    from ..install_hint import require

    require("prometheus_client", "serve", "vram serve")
    from ..history.paths import found_path
    from ..serve.http import MAX_CONNECTIONS, VramHTTPServer
    from ..serve.service import Options, Service
    from .common import duration_flag

    host, port, ipv6 = parse_listen(args.listen)
    authorize = tls = None
    users = authenticated = False
    if args.web_config:
        from pathlib import Path

        from ..serve.webconfig import BasicAuth, load, ssl_context

        web = load(Path(args.web_config))
        tls = ssl_context(web) if web.tls is not None else None
        authorize = BasicAuth(web.users) if web.users else None
        users = bool(web.users)
        authenticated = users or (web.tls is not None and web.tls.client_auth_type == "RequireAndVerifyClientCert")
    interval = duration_flag(args, "interval", 0.1, 3600, N_("must be 0.1s to 1h"))
    if not 0 <= args.max_process_series <= 1_000_000:
        raise UsageError(_("--max-process-series: must be 0 to 1000000, got {value}").format(
            value=args.max_process_series))
    options = Options(interval=interval, commands=args.process_commands == "full",
                      max_process_series=args.max_process_series,
                      dcgm_names=args.dcgm_names, history_db=found_path(args.db), hostname=args.hostname or "",
                      compat=parse_compat(args.compat))
    hosts = None
    if args.hosts:
        hosts = other_hosts(args, interval)
    elif args.hosts_config:
        raise UsageError(_("--hosts-config: goes with --hosts"))
    raise_open_files(MAX_CONNECTIONS + 256)
    machine = open_for(args)
    service = Service(machine, options, hosts)
    try:
        server = VramHTTPServer((host, port), service, authorize=authorize, ipv6=ipv6, tls=tls)
    except OSError as e:
        service.close()
        if e.errno == errno.EADDRINUSE:
            raise UsageError(_("--listen: {address} is in use (another vram serve?): choose another port").format(
                address=args.listen)) from None
        if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(e, socket.gaierror):
            raise UsageError(_("--listen: cannot listen on {address}: {why}").format(address=args.listen,
                                                                               why=e.strerror or e)) from None
        raise Failure(_("cannot listen on {address}: {why}").format(address=args.listen, why=e.strerror or e)) from None
    stop = threading.Event()

    def stopping(*_args: object) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stopping)
    service.start()
    shown = f"[{host}]" if ipv6 else host
    scheme = "https" if tls is not None else "http"
    url = f"{scheme}://{shown}:{server.server_address[1]}/"
    if options.history_db:
        line = (_("{url} (metrics at /metrics, history from {db}, basic auth; Ctrl-C stops)") if users else
                _("{url} (metrics at /metrics, history from {db}; Ctrl-C stops)"))
    else:
        line = (_("{url} (metrics at /metrics, basic auth; Ctrl-C stops)") if users else
                _("{url} (metrics at /metrics; Ctrl-C stops)"))
    print("vram serve: " + line.format(url=url, db=options.history_db), file=sys.stderr, flush=True)
    warning = exposure_warning(host, bool(args.web_config), tls is not None, authenticated)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        service.close()
    return 0
