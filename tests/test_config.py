"""Defaults in config files (vramkit.config, vram config): precedence and sources, bad files as one
line naming the file and key, and the files a hostile neighbour could plant or change."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import AS_NOBODY, IS_ROOT, assert_one_line_error, clean_env, needs_root, run_vram_as

from vramkit import config as C
from vramkit.errors import RequestError
from vramkit.tui.rows import COLUMNS


@pytest.fixture
def home(tmp_path, monkeypatch):
    """XDG_CONFIG_HOME under tmp_path, no VRAM_* in the environment (but the suite's VRAM_LANG);
    returns the user file's path."""
    for key in list(os.environ):
        if key.startswith("VRAM_") and key != "VRAM_LANG":
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "xdg" / "vramkit" / "config.toml"
    path.parent.mkdir(parents=True)
    return path


def _system(tmp_path, text: str, mode: int = 0o644):
    path = tmp_path / "etc" / "config.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_defaults_then_etc_then_home_then_env_then_flag(home, tmp_path):
    system = _system(tmp_path, '[top]\ninterval = 5\ntheme = "light"\n[pick]\nprefer = "pack"\n')
    home.write_text('[top]\ninterval = "1s"\n[thresholds]\nmemory_warn = 60\n')
    cfg = C.load({"VRAM_PICK_PREFER": "spread", "VRAM_TOP_ASCII": "yes"}, system_file=system)
    assert (cfg["top.interval"], cfg.sources["top.interval"]) == (1.0, C.USER)
    assert (cfg["top.theme"], cfg.sources["top.theme"]) == ("light", C.SYSTEM)
    assert (cfg["pick.prefer"], cfg.sources["pick.prefer"]) == ("spread", C.ENV)
    assert (cfg["top.ascii"], cfg.sources["top.ascii"]) == (True, C.ENV)
    assert (cfg["thresholds.memory_warn"], cfg.sources["thresholds.memory_warn"]) == (60.0, C.USER)
    assert (cfg["top.history"], cfg.sources["top.history"]) == (300.0, C.DEFAULT)
    cfg.flag("top.interval", 0.5)
    cfg.flag("top.theme", None)  # a flag not given changes nothing
    assert cfg.sources["top.interval"] == C.FLAG and cfg.sources["top.theme"] == C.SYSTEM
    assert C.pick_defaults(cfg) == {"prefer": "spread", "min_free": "50%", "max_util": "50", "exclusive": False}


def test_the_columns_key_knows_the_live_views_columns():
    # all but OWNER, which is not chosen: it comes with the processes that have one (rows.columns_for)
    assert C.TOP_COLUMNS == tuple(k for k, _ in COLUMNS if k != "owner")


@pytest.mark.parametrize("text, needle", [
    ("[top]\nintervl = 1\n", "top.intervl: unknown key"),
    ("[top]\ninterval = 0\n", "top.interval: must be more than 0"),
    ("[top]\ninterval = true\n", "top.interval: must be a number"),
    ('[top]\ntheme = "blue"\n', "top.theme: must be one of dark, light"),
    ('[top]\ncolumns = ["gpu", "nope"]\n', "top.columns: unknown column 'nope'"),
    ('[top]\ncolumns = ["gpu", "gpu"]\n', "top.columns: names a column twice"),
    ("[thresholds]\nmemory_warn = 120\n", "thresholds.memory_warn: must be a number from 0 to 100"),
    ("[thresholds]\nmemory_warn = 95\nmemory_critical = 80\n", "memory_warn (95, from ~) is above"),
    ('[pick]\nmin_free = "lots"\n', "pick.min_free:"),
    ("top = 3\n", "top: must be a [table]"),
    ("[top\n", "not valid TOML"),
])
def test_a_bad_file_names_the_file_and_the_key(home, tmp_path, text, needle):
    home.write_text(text)
    with pytest.raises(RequestError) as e:
        C.load({}, system_file=tmp_path / "none.toml")
    assert needle in str(e.value) and "\n" not in str(e.value)
    if "above" not in needle:
        assert str(e.value).startswith(str(home))


def test_vram_config_exits_2_with_one_line(tmp_path):
    path = tmp_path / "xdg" / "vramkit" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text("[top]\ninterval = -1\n\x1b[2J")
    from helpers import run_vram
    result = run_vram("config", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert_one_line_error(result, 2, str(path))


def test_vram_config_shows_values_and_sources(tmp_path, cli, monkeypatch):
    home = tmp_path / "config" / "vramkit" / "config.toml"  # the cli fixture's XDG_CONFIG_HOME
    home.parent.mkdir(parents=True)
    home.write_text('[top]\ncolumns = ["gpu", "pid", "command"]\n')
    monkeypatch.setattr(C, "SYSTEM_FILE", tmp_path / "none.toml")  # whatever this machine's /etc holds
    rc, out, _ = cli("config", "--json")
    assert rc == 0
    monkeypatch.setenv("VRAM_TOP_THEME", "light")
    rc, out, _ = cli("config", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["keys"]["top.columns"] == {"value": ["gpu", "pid", "command"], "source": "~",
                                           "env": "VRAM_TOP_COLUMNS"}
    assert data["keys"]["top.theme"]["source"] == "env" and data["keys"]["top.interval"]["source"] == "default"
    rc, out, _ = cli("config")
    line = next(x for x in out.splitlines() if x.startswith("top.columns"))
    assert '["gpu", "pid", "command"]' in line and " ~ " in line


def test_a_symlink_and_a_fifo_are_refused(home, tmp_path):
    real = tmp_path / "elsewhere.toml"
    real.write_text("[top]\ninterval = 1\n")
    home.symlink_to(real)
    with pytest.raises(RequestError, match="symbolic link"):
        C.load({}, system_file=tmp_path / "none.toml")
    home.unlink()
    os.mkfifo(home)  # opened without blocking, then refused
    with pytest.raises(RequestError, match="not a regular file"):
        C.load({}, system_file=tmp_path / "none.toml")


def test_a_big_file_is_refused_unread(home, tmp_path):
    home.write_text("# " + "x" * C.MAX_BYTES + "\n")
    with pytest.raises(RequestError, match="larger than 64 KiB"):
        C.load({}, system_file=tmp_path / "none.toml")


@needs_root("for files owned by another user")
def test_as_root_a_file_another_user_can_change_is_refused(home, tmp_path):
    system = _system(tmp_path, "[top]\ninterval = 1\n", mode=0o666)
    with pytest.raises(RequestError, match="another user can change it"):
        C.load({}, system_file=system)
    system.chmod(0o644)
    os.chown(system, 65534, 65534)  # nobody's file in root's /etc
    with pytest.raises(RequestError, match="another user can change it"):
        C.load({}, system_file=system)
    os.chown(system, 0, 0)
    os.chown(system.parent, 65534, 65534)  # nobody may replace root's file
    with pytest.raises(RequestError, match="its directory .* can be changed"):
        C.load({}, system_file=system)
    os.chown(system.parent, 0, 0)
    assert C.load({}, system_file=system)["top.interval"] == 1.0
    home.write_text("[top]\ninterval = 3\n")
    os.chown(home, 65534, 65534)  # sudo kept $HOME: a user's file does not steer root
    with pytest.raises(RequestError, match="another user can change it"):
        C.load({}, system_file=system)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to run vram as another user")
def test_an_ordinary_user_reads_the_defaults(shared_dir):
    result = run_vram_as(AS_NOBODY, "config", "--json", env=clean_env(XDG_CONFIG_HOME=str(shared_dir / "none")))
    assert result.rc == 0, result.err
    assert all(v["source"] == "default" for v in json.loads(result.out)["keys"].values())


def test_the_documented_example_file_loads(home, tmp_path):
    doc = (Path(__file__).parent.parent / "docs" / "config.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    home.write_text(example)
    cfg = C.load({}, system_file=tmp_path / "none.toml")
    assert all(cfg.sources[k.name] == C.USER for k in C.KEYS), [k.name for k in C.KEYS if cfg.sources[k.name] != "~"]
    assert cfg["top.history"] == 3600.0 and cfg["pick.max_util"] == "any"


@pytest.mark.parametrize("value, expected", [("80", 80.0), ("62.5", 62.5), ("0", 0.0)])
def test_a_threshold_from_the_environment_is_a_number(home, tmp_path, value, expected):
    cfg = C.load({"VRAM_THRESHOLDS_MEMORY_WARN": value}, system_file=tmp_path / "none.toml")
    assert (cfg["thresholds.memory_warn"], cfg.sources["thresholds.memory_warn"]) == (expected, C.ENV)


@pytest.mark.parametrize("value", ["101", "5x", "-1", " 80", "8\u200b0", "1e2"])
def test_a_bad_threshold_in_the_environment_is_refused(home, tmp_path, value):
    with pytest.raises(RequestError):
        C.load({"VRAM_THRESHOLDS_MEMORY_WARN": value}, system_file=tmp_path / "none.toml")


@needs_root("to run vram as nobody")
def test_a_config_behind_a_directory_the_user_cannot_enter_is_none_of_theirs(tmp_path):
    """`sudo -u nobody vram pick` keeps the caller's $HOME: ~/.config/vramkit/config.toml is behind a
    directory nobody cannot enter. That is no file of theirs: the defaults apply, no error."""
    private = tmp_path / "home"
    (private / ".config" / "vramkit").mkdir(parents=True)
    (private / ".config" / "vramkit" / "config.toml").write_text('[pick]\nprefer = "pack"\n')
    private.chmod(0o700)
    env = clean_env(XDG_CONFIG_HOME=None, HOME=str(private))
    result = run_vram_as(AS_NOBODY, "config", "--json", env=env)
    assert result.rc == 0, result.err
    assert json.loads(result.out)["keys"]["pick.prefer"]["source"] == "default"
    result = run_vram_as(AS_NOBODY, "pick", "--simulate", "demo", "--min-free", "1GiB", env=env)
    assert result.rc == 0, result.err
