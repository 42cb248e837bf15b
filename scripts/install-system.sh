#!/bin/sh
# vramkit for the whole machine, in one command (README, "For admins"):
#
#   sudo scripts/install-system.sh [--extras serve,plot] [--reclaim] [--no-start]
#
# from a checkout of vramkit (vramkit is not on PyPI). It installs
#   /opt/vramkit                         a virtualenv holding vramkit (and the extras asked for)
#   /usr/local/bin/vram                  a link to /opt/vramkit/bin/vram, what the units run
#   /etc/systemd/system/vram-record.service, vram-serve.service   (contrib/systemd)
#   /etc/systemd/system/vram-record.service.d/reclaim.conf         (--reclaim only: CAP_KILL)
#   /etc/tmpfiles.d/vramkit.conf         the root-owned, sticky /tmp/vramkit-leases, made now and at
#                                        every boot, so that every user's leases are in one directory
#   /etc/vramkit/                        for config.toml, policy.toml, protected.conf, serve.env
# and then (unless --no-start, or with --destdir, or without a running systemd) creates the lease
# directory and enables and starts both services. Run again to upgrade: the venv is rebuilt from
# this checkout; files in /etc/vramkit are never overwritten.
#
# Options:
#   --prefix DIR     the virtualenv (default /opt/vramkit)
#   --bindir DIR     where the `vram` link goes (default /usr/local/bin; the units are edited to match)
#   --destdir DIR    install under DIR instead of / (packaging, tests); nothing is started
#   --extras LIST    optional extras: serve (--web-config: TLS, basic auth), plot (PNG reports), torch
#   --from PATH      install vramkit from PATH (a checkout or a wheel; default: this checkout)
#   --pip-args ARGS  more arguments for pip (e.g. "--no-index --find-links /srv/wheels" offline)
#   --python PYTHON  the Python (>= 3.10) the virtualenv is made from (default python3)
#   --reclaim        let the recorder's policy reclaim idle memory (signal other users' processes)
#   --no-start       install only: neither make the lease directory nor enable the services
set -eu

prefix=/opt/vramkit
bindir=/usr/local/bin
destdir=
extras=
from=
pip_args=
python=python3
reclaim=no
start=yes

die() { echo "install-system.sh: error: $*" >&2; exit 2; }
say() { echo "install-system.sh: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
        --bindir) [ $# -ge 2 ] || die "--bindir needs a directory"; bindir=$2; shift 2 ;;
        --destdir) [ $# -ge 2 ] || die "--destdir needs a directory"; destdir=$2; shift 2 ;;
        --extras) [ $# -ge 2 ] || die "--extras needs a list, e.g. serve,plot"; extras=$2; shift 2 ;;
        --from) [ $# -ge 2 ] || die "--from needs a path"; from=$2; shift 2 ;;
        --pip-args) [ $# -ge 2 ] || die "--pip-args needs arguments"; pip_args=$2; shift 2 ;;
        --python) [ $# -ge 2 ] || die "--python needs a program"; python=$2; shift 2 ;;
        --reclaim) reclaim=yes; shift ;;
        --no-start) start=no; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (--help lists them)" ;;
    esac
done

case "$prefix$bindir" in *[!A-Za-z0-9/._-]*) die "--prefix and --bindir: letters, digits, / . _ - only" ;; esac
case "$prefix" in /*) ;; *) die "--prefix must be an absolute path" ;; esac
case "$bindir" in /*) ;; *) die "--bindir must be an absolute path" ;; esac
case "$extras" in *[!a-z,]*) die "--extras: a comma-separated list such as serve,plot" ;; esac
if [ -z "$destdir" ] && [ "$(id -u)" != 0 ]; then
    die "run it as root (sudo $0 ...), or with --destdir DIR"
fi

src=$(cd "$(dirname "$0")/.." && pwd)
[ -n "$from" ] || from=$src
[ -f "$src/contrib/systemd/vram-record.service" ] || die "run it from a checkout of vramkit ($src has no contrib/)"
# The whole command line (tui: vram top, serve: the exporter its unit runs), and the extras asked for.
spec="$from[tui,serve${extras:+,$extras}]"

umask 022
venv=$destdir$prefix
say "virtualenv $venv (from $($python --version 2>&1))"
rm -rf "$venv.new"
"$python" -m venv "$venv.new"
# shellcheck disable=SC2086  # pip_args: several words on purpose
"$venv.new/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir $pip_args "$spec"
# Built beside its place (and, with --destdir, under DESTDIR): its scripts must name the place it
# will run from.
for f in "$venv.new"/bin/*; do
    if [ -f "$f" ] && [ ! -L "$f" ]; then
        sed -i "s|$venv.new|$prefix|g" "$f"
    fi
done
rm -rf "$venv.old"
[ ! -e "$venv" ] || mv "$venv" "$venv.old"
mv "$venv.new" "$venv"
rm -rf "$venv.old"
printf 'installed by scripts/install-system.sh from %s\nextras: %s\n' "$src" "${extras:-none}" > "$venv/INSTALLED"

mkdir -p "$destdir$bindir"
ln -sfn "$prefix/bin/vram" "$destdir$bindir/vram"
say "$bindir/vram -> $prefix/bin/vram"

units=$destdir/etc/systemd/system
mkdir -p "$units"
for unit in vram-record.service vram-serve.service; do
    sed "s|/usr/local/bin/vram|$bindir/vram|g" "$src/contrib/systemd/$unit" > "$units/$unit.tmp"
    chmod 644 "$units/$unit.tmp"
    mv "$units/$unit.tmp" "$units/$unit"
done
if [ "$reclaim" = yes ]; then
    mkdir -p "$units/vram-record.service.d"
    install -m 644 "$src/contrib/systemd/vram-record-reclaim.conf" "$units/vram-record.service.d/reclaim.conf"
else
    rm -f "$units/vram-record.service.d/reclaim.conf"
fi
mkdir -p "$destdir/etc/tmpfiles.d"
install -m 644 "$src/contrib/tmpfiles.d/vramkit.conf" "$destdir/etc/tmpfiles.d/vramkit.conf"
mkdir -p "$destdir/etc/vramkit"
chmod 755 "$destdir/etc/vramkit"
if [ ! -e "$destdir/etc/vramkit/serve.env" ]; then
    cat > "$destdir/etc/vramkit/serve.env" <<'ENV'
# Options for vram serve (vram-serve.service), e.g. for a Prometheus on another machine:
#   VRAM_SERVE_OPTIONS=--listen 0.0.0.0:9787 --web-config /etc/vramkit/web.yml
VRAM_SERVE_OPTIONS=
ENV
    chmod 644 "$destdir/etc/vramkit/serve.env"
fi
say "units, /etc/tmpfiles.d/vramkit.conf and /etc/vramkit/ in ${destdir:-/}"

if [ -n "$destdir" ] || [ "$start" = no ]; then
    say "not started (--destdir or --no-start)"
    exit 0
fi
# The shared lease directory, now: root's and sticky. One another user made first stays theirs
# (vram then writes no lease there): say so rather than take it from under their running jobs.
if command -v systemd-tmpfiles >/dev/null 2>&1; then
    systemd-tmpfiles --create /etc/tmpfiles.d/vramkit.conf || true
else
    [ -e /tmp/vramkit-leases ] || { mkdir -m 1777 /tmp/vramkit-leases && chown root:root /tmp/vramkit-leases; }
fi
owner=$(stat -c %U /tmp/vramkit-leases 2>/dev/null || echo "?")
if [ "$owner" != root ]; then
    say "warning: /tmp/vramkit-leases belongs to $owner, not root: once its leases are done, run"
    say "  sudo rm -r /tmp/vramkit-leases && sudo systemd-tmpfiles --create /etc/tmpfiles.d/vramkit.conf"
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable --now vram-record.service vram-serve.service
    systemctl restart vram-record.service vram-serve.service
    say "vram-record and vram-serve are running (systemctl status vram-record vram-serve)"
else
    say "systemd is not running here: start the services yourself (vram record; vram serve)"
fi
