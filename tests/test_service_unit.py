"""The recorder's systemd unit (contrib/systemd/vram-record.service): its command line is one
`vram` accepts, and the install commands in it are the ones docs/history.md gives."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "contrib" / "systemd" / "vram-record.service"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


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


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(tmp_path):
    unit = tmp_path / "vram-record.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/vram", shutil.which("true") or "/bin/true"))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    # systemd exits 0 on unknown keys and bad values, and names the unit file in a warning.
    assert done.returncode == 0 and str(unit) not in done.stderr, done.stderr
