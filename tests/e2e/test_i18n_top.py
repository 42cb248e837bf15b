"""`vram top` in Chinese (VRAM_LANG=zh_CN) in a real terminal, tmux at 80x24: the help screen and
the kill dialog are Chinese but for what stays English (key and signal names, flags, commands,
numbers, units, user names), every line fits, and the table's columns line up by display width."""

from __future__ import annotations

import getpass
import json
import re
import shlex
import shutil
import subprocess
import sys
import threading
import uuid

import pytest
from helpers import in_demo_view, scenario_data, wait_for, zh_env

from vramkit.render.text_width import cells

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

WIDTH, HEIGHT = 80, 24
# Latin words that stay English in the Chinese view: keys, signals, flags, names of things
KEPT = {"PgUp", "PgDn", "Home", "End", "Enter", "Esc", "Ctrl", "SIGTERM", "SIGINT", "SIGKILL", "TERM", "KILL",
        "PID", "GPU", "GiB", "MiB", "vram", "top", "record", "readonly", "kernel", "Python"}


def _english(text: str, also: set[str] = frozenset()) -> list[str]:
    """The words of 3+ Latin letters in `text` that are not kept in English (flags are)."""
    return [w for w in re.findall(r"[A-Za-z]{3,}", re.sub(r"--[\w-]+", "", text)) if w not in KEPT | also]


class Top:
    """`vram top ARGS` in its own tmux server at 80x24, as a person runs it."""

    def __init__(self, tmp_path, *args: str, env: dict[str, str]):
        self.env = {**env, "TMUX_TMPDIR": str(tmp_path)}
        self.env.pop("TMUX", None)
        self.name = f"vramzh-{uuid.uuid4().hex[:8]}"
        self.rc_file = tmp_path / "rc"
        command = shlex.join([sys.executable, "-m", "vramkit", "top", *args])
        script = f"{command}; echo rc=$? > {shlex.quote(str(self.rc_file))}"
        started = self.tmux("new-session", "-d", "-s", self.name, "-x", str(WIDTH), "-y", str(HEIGHT), "sh", "-c",
                            script)
        assert started.returncode == 0, started.stderr

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20, env=self.env)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name).stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def close(self) -> None:
        self.tmux("kill-server")


def _box(screen: str, strip: bool = True) -> list[str]:
    """The lines inside the pop-up's border (between its ╭ and ╰ lines, inside its │s)."""
    lines = screen.splitlines()
    top = next(i for i, line in enumerate(lines) if "╭" in line)
    bottom = next(i for i, line in enumerate(lines) if "╰" in line and i > top)
    inside = [line[line.index("│") + 1:line.rindex("│")] for line in lines[top + 1:bottom]]
    return [line.strip() for line in inside] if strip else inside


def _fits(screen: str) -> None:
    wide = [line for line in screen.splitlines() if cells(line) > WIDTH]
    assert not wide, wide


@pytest.fixture
def sleeper():
    """A real process of this user's that the view may end; reaped by a thread (never a zombie)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL)
    threading.Thread(target=proc.wait, daemon=True).start()
    yield proc
    if proc.poll() is None:
        proc.kill()


def test_help_screen_table_and_refusal_are_chinese_and_line_up_at_80x24(tmp_path):
    top = Top(tmp_path, "--simulate", "demo", "--interval", "3600", env=zh_env(HOME=str(tmp_path)))
    try:
        # the table and the footer (drawn in a later frame than the table, under load)
        assert wait_for(lambda: all(w in top.screen() for w in ("个 GPU 进程", "train_dp.py", "q 退出")), timeout=30), \
            top.screen()
        screen = top.screen()
        _fits(screen)
        lines = screen.rstrip("\n").splitlines()
        # the footer's keys, the view line
        assert "q 退出" in lines[-1] and "? 帮助" in lines[-1] and "k 结束进程" in lines[-1], lines[-1]
        assert any(line.strip().startswith("9 个 GPU 进程  ·  排序：显存  ·  ? 帮助") for line in lines), screen
        # the table: Chinese headers, and each row's cells under their header by display width
        [header] = [line for line in lines if "用户" in line and "显存" in line and "命令" in line]
        memory_end, command_at = cells(header[:header.index("显存") + 2]), cells(header[:header.index("命令")])
        rows = [line for line in lines if re.match(r"\s+\d+\s+\d+\s+\w+\s+[\d.]+GiB", line)]
        assert len(rows) >= 5, screen
        for row in rows:
            used = re.search(r"[\d.]+GiB", row)
            assert cells(row[:used.end()]) == memory_end, (header, row)
            assert cells(row[:re.search(r"%\s+", row).end()]) == command_at, (header, row)  # after SM%

        top.keys("?")
        assert wait_for(lambda: "╭" in top.screen() and "进程表" in top.screen(), timeout=20), top.screen()
        screen = top.screen()
        _fits(screen)
        assert "vram top：本机 GPU 的实时视图" in screen  # the title, on the border
        box = _box(screen)
        assert box[0] == "进程表" and "操作" in box and "视图" in box, box
        # every entry of a section starts under its section (nothing folded to the border), and the
        # paragraph after them is whole: the help fits 80x24 without scrolling
        about = box.index("")
        titles = {"进程表", "操作", "视图"}
        entries = _box(screen, strip=False)[:about]
        assert all(line.strip() in titles or line.startswith("   ") for line in entries), entries
        assert box[about + 1].startswith("显存是") and box[-1].endswith("估算。"), box
        for key, words in (("s", "换下一个排序键"), ("k", "结束进程"), ("h", "历史范围"), ("q", "退出")):
            assert any(re.search(rf"(^|\s){re.escape(key)}\s+{words}", line) for line in box), (key, box)
        assert not _english(" ".join(box)), _english(" ".join(box))

        # the kill dialog of another user's process: refused, in Chinese, nothing signalled
        top.keys("Escape")
        assert wait_for(lambda: "╭" not in top.screen(), timeout=20), top.screen()
        top.keys("Home", "k")
        assert wait_for(lambda: "没有发送任何信号" in top.screen(), timeout=20), top.screen()
        screen = top.screen()
        _fits(screen)
        box = _box(screen)
        assert box[0] == "结束进程 60112" and box[2].startswith("进程 60112   用户 dave   已运行 "), box
        assert "占用 GPU 6：78.2GiB" in box
        assert any(line.startswith("已拒绝（ownership）：") for line in box), box
        text = " ".join(line for line in box if "sft.py" not in line and "--bf16" not in line)  # dave's command
        names = {"dave", "root", getpass.getuser(), "ownership"}  # the refusal names who runs vram
        assert not _english(text, names), _english(text, names)
        assert box[-1] == "没有发送任何信号  ·  Esc 关闭", box
        top.keys("Escape")
        assert wait_for(lambda: "╭" not in top.screen(), timeout=20), top.screen()
        top.keys("q")
        assert wait_for(top.rc_file.exists, timeout=20), top.screen()
        assert top.rc_file.read_text().strip() == "rc=0"
    finally:
        top.close()


def test_kill_dialog_asks_and_reports_in_chinese(tmp_path, sleeper, write_scenario):
    data = scenario_data("demo")
    data["processes"].append({"pid": sleeper.pid, "source": "real", "gpus": {"7": "1GiB"}})
    path = write_scenario(json.dumps(data))
    env = zh_env(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
                 VRAM_AUDIT_LOG=str(tmp_path / "audit.log"))
    top = Top(tmp_path, "--simulate", str(path), "--interval", "3600", "--pid", str(sleeper.pid), env=env)
    try:
        assert wait_for(lambda: "个 GPU 进程中的 1 个" in top.screen(), timeout=30), top.screen()
        top.keys("k")
        assert wait_for(lambda: "让它退出？" in top.screen(), timeout=20), top.screen()
        screen = top.screen()
        _fits(screen)
        box = _box(screen)
        assert box[0] == f"结束进程 {sleeper.pid}", box
        assert box[2].startswith(f"进程 {sleeper.pid}   用户 "), box
        assert "发送 SIGTERM，并最多等待 10s 让它退出？" in box, box
        user = box[2].split()[3]
        # The command is the process's own, and wraps where the box does (a long interpreter path puts
        # `time.sleep(120)` on a line of its own): a word that is a piece of it is not the view's.
        command = " ".join(sleeper.args)
        words = [w for w in _english(" ".join(box), {user}) if w not in command]
        assert not words, words
        assert "n/Esc：否" in " ".join(box), box

        top.keys("y")
        assert wait_for(lambda: "后退出（SIGTERM）" in top.screen(), timeout=30), top.screen()
        box = _box(top.screen())
        assert any(re.fullmatch(rf"进程 {sleeper.pid} 在 [\d.]+s 后退出（SIGTERM）", line) for line in box), box
        assert "已记录到" in box and box[-1] == "Esc 关闭", box  # the audit log's path, folded, after it
        assert wait_for(lambda: sleeper.poll() is not None, timeout=10)
    finally:
        top.close()


def test_top_help_is_chinese_and_fits_80_columns():
    proc = subprocess.run([sys.executable, "-m", "vramkit", "top", "--help"], capture_output=True, text=True,
                          env=zh_env(COLUMNS="80"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if cells(line) > WIDTH], [line for line in lines if cells(line) > WIDTH]
    text = proc.stdout
    assert "vram top：本机 GPU 的实时视图。" in text and "示例：" in text
    assert "  vram top --readonly              只看，不提供操作" in lines  # an example, its command kept
    [readonly] = [line for line in lines if line.startswith("  --readonly ")]
    assert readonly.split(None, 1)[1] == "只看：不提供结束进程操作", readonly
    # the description and this command's options have no English left but names, flags and values
    own = text[text.index("vram top："):text.index("  --container")]
    kept = {"CPU", "CUDA", "VISIBLE", "DEVICES", "VRAM", "NVML", "MIG", "Kubernetes", "Pod", "Slurm", "Unicode",
            "DURATION", "LIST", "NAMES", "root", "shell", "kill", "record", "config", "docs", "interval", "idle",
            "after", "demo", "tmp", "alice", "bob", "nlp", "train", "light"}  # names, metavars, config keys, values
    assert not _english(own, kept), _english(own, kept)


def _in_chinese_app(monkeypatch, size, body):
    """The live view in-process (Textual's test pilot) under VRAM_LANG=zh_CN, on the demo scenario."""
    from vramkit import i18n

    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()
    in_demo_view(body, size)


def test_detail_dialog_says_the_state_in_words_and_keeps_min_max_on_the_sparkline(sim_env, monkeypatch):
    from vramkit.tui.screens import DetailScreen

    async def body(app, pilot):
        await pilot.press("s", "s")  # sort by pid: 29044, 38817, 41234 x4, ...
        await pilot.press("home", "down", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen) and app.screen.pid == 41234
        static = app.screen.query_one("#detail")
        text = static.content.plain
        state = re.search(r"状态 (\S+)", text)
        assert state and re.search(r"[\u4e00-\u9fff]", state.group(1)), text[:300]  # not /proc's "running"
        room = static.content_region.width
        sparks = [line for line in text.splitlines() if re.search(r"范围 \S+ ~ \S+$", line)]
        assert sparks and all(cells(line) <= room for line in sparks), (room, sparks)
    _in_chinese_app(monkeypatch, (80, 24), body)


def test_command_palette_is_chinese(sim_env, monkeypatch):
    from textual.command import CommandPalette
    from textual.widgets import Input, OptionList

    async def body(app, pilot):
        await pilot.press("ctrl+p")
        await pilot.pause(0.5)
        assert isinstance(app.screen, CommandPalette)
        assert app.screen.query_one(Input).placeholder == "搜索命令…"
        options = app.screen.query_one(OptionList)
        prompts = " ".join(str(options.get_option_at_index(i).prompt) for i in range(options.option_count))
        for words in ("主题", "退出", "按键", "截图"):
            assert words in prompts, prompts
        assert not re.search(r"\b(Theme|Quit|Keys|Screenshot)\b", prompts), prompts
    _in_chinese_app(monkeypatch, (100, 30), body)
