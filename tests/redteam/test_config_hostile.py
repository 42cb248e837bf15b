"""Red team: hostile config files and environment values (vramkit.config, vram config). Each one is
one line naming the file and exit 2, never a traceback; nothing from them reaches the terminal with
a control character in it; as root, no file another user could swap is read."""

from __future__ import annotations

import json
import os
import unicodedata

import pytest
import test_config
from helpers import assert_one_line_error, clean_env, needs_root, run_vram

from vramkit import config as C
from vramkit.errors import RequestError

home = test_config.home  # the fixture: XDG_CONFIG_HOME under tmp_path, the user file's path


def _load(tmp_path, environ=None):
    return C.load(environ or {}, system_file=tmp_path / "none.toml")


def _raw_controls(text: str) -> list[str]:
    """The characters a terminal would act on or that hide text, found independently of procs.sanitize."""
    return [hex(ord(c)) for c in text if c != "\n" and (unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"))]


@pytest.mark.parametrize("text, needle", [
    ("[top]\ninterval = " + "9" * 400 + "\n", "top.interval: must be more than 0"),  # float() overflows
    ("[top]\nidle_after = " + "9" * 5000 + "\n", "4300 digits"),  # int()'s own limit, inside the parser
    ("x = " + "[" * 30000 + "]" * 30000 + "\n", "nested too deeply"),  # the parser recurses
    ("x = " + "{a=" * 10000 + "1" + "}" * 10000 + "\n", "nested too deeply"),
])
def test_numbers_and_nesting_no_parser_survives_are_one_line(home, tmp_path, text, needle):
    home.write_text(text)
    with pytest.raises(RequestError) as e:
        _load(tmp_path)
    assert needle in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(str(home))
    result = run_vram("config", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert_one_line_error(result, 2, str(home), needle)


# Characters float() and the size parser skip as white space, or that only hide themselves.
HIDDEN = ["\x1c", "\x1f", "\x85", "\u2028", "\u200b", "\u202e"]


@pytest.mark.parametrize("ch", HIDDEN)
@pytest.mark.parametrize("key, value", [("pick.max_util", "5{}0"), ("pick.min_free", "5{}0%"),
                                        ("pick.min_free", "10{}GiB")])
def test_a_value_with_a_hidden_character_is_refused(tmp_path, home, key, value, ch):
    env = C.BY_NAME[key].env
    with pytest.raises(RequestError, match=f"{key}: .*control or invisible"):
        _load(tmp_path, {env: value.format(ch)})
    result = run_vram("config", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"), **{env: value.format(ch)}))
    assert result.rc == 2 and "Traceback" not in result.err and not _raw_controls(result.err)
    assert not _raw_controls(result.out)


def test_white_space_around_a_value_is_dropped_not_printed(tmp_path, home):
    home.write_text('[pick]\nmin_free = " 40%\\u2028"\nmax_util = "\\u001f60 "\n')
    cfg = _load(tmp_path)
    assert cfg["pick.min_free"] == "40%" and cfg["pick.max_util"] == "60"
    result = run_vram("config", "--json", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert result.rc == 0, result.err
    keys = json.loads(result.out)["keys"]
    assert keys["pick.min_free"]["value"] == "40%" and keys["pick.max_util"]["value"] == "60"
    result = run_vram("config", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert result.rc == 0 and not _raw_controls(result.out)


def test_keys_and_values_with_escapes_are_named_sanitized(tmp_path, home):
    home.write_text('[top]\n"\\u001b]0;pwned\\u0007" = 1\n')
    result = run_vram("config", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert_one_line_error(result, 2, "unknown key")
    assert not _raw_controls(result.err)


def test_dev_zero_through_a_symlink_and_a_directory_are_refused(tmp_path, home):
    home.symlink_to("/dev/zero")
    with pytest.raises(RequestError, match="symbolic link"):
        _load(tmp_path)
    home.unlink()
    home.mkdir()
    with pytest.raises(RequestError, match="not a regular file"):
        _load(tmp_path)


def test_a_1gib_sparse_file_is_refused_after_64kib(tmp_path, home):
    with open(home, "wb") as f:
        f.truncate(1024**3)  # sparse: costs no disk, reads as NULs
    with pytest.raises(RequestError, match="larger than 64 KiB"):
        _load(tmp_path)


@needs_root("to give the directories above a config file to another user")
@pytest.mark.parametrize("attack", ["other_owner", "group_writable", "world_writable", "symlinked_parent"])
def test_as_root_your_file_in_a_directory_another_user_controls_is_refused(tmp_path, home, attack):
    """$XDG_CONFIG_HOME (or a $HOME sudo kept) leading into another user's directory: they could put
    any root-owned file in its place, or a symlinked directory leading to one."""
    home.write_text("[top]\ninterval = 3\n")
    home.chmod(0o644)
    directory = home.parent
    assert _load(tmp_path)["top.interval"] == 3.0  # root's own file in root's own directories is read
    if attack == "other_owner":
        os.chown(directory, 65534, 65534)
    elif attack == "group_writable":
        directory.chmod(0o775)
    elif attack == "world_writable":
        directory.chmod(0o777)
    else:
        elsewhere = tmp_path / "elsewhere"
        directory.rename(elsewhere)
        directory.symlink_to(elsewhere)
    with pytest.raises(RequestError, match="its directory .* can be changed by a user other than root"):
        _load(tmp_path)
    result = run_vram("config", env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert_one_line_error(result, 2, "chown root and chmod go-w it")


def test_an_ordinary_user_reads_a_file_in_their_own_open_directory(tmp_path, home):
    """The directory rule is root's: an ordinary user's own file in a directory others may write is theirs."""
    home.write_text("[top]\ninterval = 4\n")
    home.parent.chmod(0o777)
    assert C.load({}, system_file=tmp_path / "none.toml", euid=12345)["top.interval"] == 4.0


def test_a_config_path_with_escapes_is_shown_replaced_in_text_and_json(tmp_path):
    xdg = tmp_path / "x\x1b]0;title\x07\u202e"
    (xdg / "vramkit").mkdir(parents=True)
    (xdg / "vramkit" / "config.toml").write_text("[top]\ninterval = 1\n")
    for argv in (["config"], ["config", "--json"]):
        result = run_vram(*argv, env=clean_env(XDG_CONFIG_HOME=str(xdg)))
        assert result.rc == 0, result.err
        assert not _raw_controls(result.out)
        if "--json" in argv:  # the JSON carries the replaced text, not the original escaped
            files = json.loads(result.out)["files"]
            assert not _raw_controls(json.dumps(files, ensure_ascii=False)) and files["~"].endswith("config.toml")
