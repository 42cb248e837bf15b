"""The history commands' messages in Chinese (VRAM_LANG=zh_CN): what `vram record` says when a
rollup fails, and `vram life`'s bad host pid."""

from __future__ import annotations

import re

from helpers import run_vram, zh_env
from test_record_cli import after_open

# Text left after the names a line may keep in English (paths, flags, SQLite's own error).
_KEPT = re.compile(r"vram record|vram|/\S+|--[\w-]+|refused by a trigger|'[^']*'")


def _chinese_only(line: str) -> None:
    rest = _KEPT.sub("", line)
    assert re.search(r"[\u4e00-\u9fff]", rest), line
    assert not re.search(r"[A-Za-z]{3,}", rest), line


def test_a_failing_rollup_is_said_in_chinese(tmp_path):
    db = tmp_path / "history.db"
    env = zh_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH="1767225600", VRAM_SIM_TIME="0")
    assert run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--duration", "1h",
                    "--quiet", env=env).rc == 0
    # a trigger made once the recorder has the file open (one there before is refused)
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--duration", "1h",
                      "--quiet", env={**env, "VRAM_SIM_TIME": "3600"}, python_flags=after_open(
                          "CREATE TRIGGER IF NOT EXISTS refuse BEFORE INSERT ON proc_hour BEGIN "
                          "SELECT RAISE(ABORT, 'refused by a trigger'); END"))
    assert result.rc == 0 and len(result.err_lines) == 1, result.err
    assert "小时合计" in result.err_lines[0]
    _chinese_only(result.err_lines[0])


def test_a_bad_host_pid_is_said_in_chinese():
    result = run_vram("life", "--host-pid", "-1", env=zh_env())
    assert result.rc == 2 and "--host-pid" in result.err, result.err
    _chinese_only(result.err_lines[0])
