"""`vram ps` caps the user column, cut with an ellipsis by display width, so a long LDAP name
leaves the command its room at 80 columns (issue 31, item 8)."""

from __future__ import annotations

from helpers import clean_env, minimal_scenario, run_vram

from vramkit.render.text_width import cells

LDAP = "firstname.lastname.department1"  # 30 characters
CJK = "研究员张三丰李四王五赵六"  # 12 characters, 24 columns


def _scenario(write_scenario, user: str):
    data = minimal_scenario()
    data["processes"][0].update(user=user, command="python train_llama.py --config big.yaml")
    return write_scenario(data)


def _row(out: str, pid: str) -> str:
    return next(line for line in out.splitlines() if f" {pid} " in f" {line} ")


def test_a_long_user_name_is_cut_and_the_command_keeps_its_room(write_scenario):
    result = run_vram("ps", "--simulate", str(_scenario(write_scenario, LDAP)), env=clean_env(COLUMNS="80"))
    assert result.rc == 0, result.err
    row = _row(result.out, "101")
    assert len(row) <= 80
    assert LDAP not in row and LDAP[:11] + "…" in row
    assert "python train_llama.py" in row  # the command, not a lone …


def test_a_wide_character_name_is_cut_by_display_width(write_scenario):
    result = run_vram("ps", "--simulate", str(_scenario(write_scenario, CJK)), env=clean_env(COLUMNS="80"))
    assert result.rc == 0, result.err
    row = _row(result.out, "101")
    assert cells(row) <= 80 and "…" in row and CJK not in row
    assert "python train_llama.py" in row


def test_wide_json_and_csv_keep_the_whole_name(write_scenario):
    path = str(_scenario(write_scenario, LDAP))
    assert LDAP in _row(run_vram("ps", "--simulate", path, "--wide", env=clean_env(COLUMNS="80")).out, "101")
    assert run_vram("ps", "--simulate", path, "--json").json()["processes"][0]["user"] == LDAP
    assert LDAP in run_vram("ps", "--simulate", path, "--csv").out
