"""The systemd units (contrib/systemd): the recorder's command line is one `vram` accepts, and the
install commands in it are the ones docs/history.md gives; both units pass `systemd-analyze
verify` and run with the least they need (issue 31 item 4): `systemd-analyze security` rates the
network-facing exporter at most 4.0 and the recorder at most 6.0 (both were 9.0-9.1, "UNSAFE")."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "contrib" / "systemd" / "vram-record.service"
SERVE = ROOT / "contrib" / "systemd" / "vram-serve.service"
RECLAIM = ROOT / "contrib" / "systemd" / "vram-record-reclaim.conf"
ANALYZE = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")


def _unit(path: Path = UNIT) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def _values(path: Path, key: str) -> list[str]:
    """Every value of `key` in the unit's [Service] (configparser keeps only the last)."""
    return [line.split("=", 1)[1] for line in path.read_text().splitlines() if line.startswith(f"{key}=")]


def _runnable(tmp_path: Path, unit: Path) -> Path:
    """The unit with ExecStart on a program that exists here (systemd-analyze checks it)."""
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace("/usr/local/bin/vram", shutil.which("true") or "/bin/true"))
    return copy


def test_the_service_runs_a_command_line_vram_accepts():
    from vramkit.cli.main import build_parser

    argv = shlex.split(_unit()["Service"]["ExecStart"])
    assert Path(argv[0]).name == "vram" and argv[1] == "record"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "record"


def test_it_stops_with_sigterm_and_keeps_its_state_where_root_s_recorder_writes(monkeypatch):
    from vramkit.history import store

    service = _unit()["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["RestartPreventExitStatus"] == "2"
    monkeypatch.delenv("VRAM_DB", raising=False)
    monkeypatch.setattr(store.os, "geteuid", lambda: 0)  # the service runs as root
    assert store.default_path().parent == Path("/var/lib") / service["StateDirectory"]


def test_the_install_commands_are_the_documented_ones():
    commands = [line.strip("# ").strip() for line in UNIT.read_text().splitlines() if line.startswith("#   sudo")]
    assert commands == ["sudo install -m 644 contrib/systemd/vram-record.service /etc/systemd/system/",
                        "sudo systemctl enable --now vram-record"]
    docs = (ROOT / "docs" / "history.md").read_text()
    for command in commands:
        assert command in docs


@ANALYZE
@pytest.mark.parametrize("unit", [UNIT, SERVE], ids=lambda p: p.name)
def test_systemd_accepts_the_unit(tmp_path, unit):
    copy = _runnable(tmp_path, unit)
    dropins = tmp_path / f"{unit.name}.d"
    if unit == UNIT:  # with the reclaim drop-in too
        dropins.mkdir()
        (dropins / "reclaim.conf").write_text(RECLAIM.read_text())
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True)
    # systemd exits 0 on unknown keys and bad values, and names the unit file in a warning.
    assert done.returncode == 0 and str(copy) not in done.stderr and "reclaim.conf" not in done.stderr, done.stderr


@ANALYZE
@pytest.mark.parametrize("unit, most", [(SERVE, 4.0), (UNIT, 6.0)], ids=["serve", "record"])
def test_each_service_runs_with_the_least_it_needs(tmp_path, unit, most):
    copy = _runnable(tmp_path, unit)
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(copy)],
                          capture_output=True, text=True)
    if "--offline" in done.stderr and "unrecognized" in done.stderr:
        pytest.skip("this systemd-analyze cannot rate a unit file offline (systemd < 250)")
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert found, done.stdout + done.stderr
    assert float(found.group(1)) <= most, done.stdout


def test_the_exporter_has_no_privilege_and_the_recorder_no_power_to_signal():
    serve = _unit(SERVE)["Service"]
    assert serve["DynamicUser"] == "yes" and serve["CapabilityBoundingSet"] == "" and "User" not in serve
    # Other users' processes must stay visible to both: no hidepid, no user namespace.
    for path in (SERVE, UNIT):
        service = _unit(path)["Service"]
        assert service.get("ProtectProc", "default") == "default" and service.get("PrivateUsers", "no") == "no"
    caps = " ".join(_values(UNIT, "CapabilityBoundingSet")).split()
    assert sorted(caps) == ["CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"]  # reading /proc; no CAP_KILL, no CAP_SYS_ADMIN
    assert _values(RECLAIM, "CapabilityBoundingSet") == ["CAP_KILL"]  # reclaim: a drop-in of its own
