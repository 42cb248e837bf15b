"""vram kill and vram pick in Chinese (issue 34): the plan, the refusals and the --explain table are
zh_CN except what stays English on purpose (signal names, flags, variables, pids, units, commands,
user names, rule ids), and the columns still line up by display width."""

from __future__ import annotations

import getpass
import json
import os
import re

from helpers import clean_env, needs_root, real_gpu_scenario, run_vram, run_vram_answering, start_sleeper

from vramkit.render.text_width import cells

ZH = clean_env(VRAM_LANG="zh_CN")
# Words that stay English inside Chinese text: names of things, not words of a sentence.
KEPT = {"GPU", "PID", "PCI", "CUDA", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PCI_BUS_ID", "NVML", "SIGTERM",
        "SIGKILL", "init", "pid", "vram", "ps", "run", "kernel", "nvidia-smi", "cuda", "spread", "GiB", "MiB",
        "N/A", "demo", "carol", "root", "shell", "SXM4-80GB", "A100-SXM4-80GB", "defunct", "python", "SIMULATED",
        getpass.getuser()}  # who runs the tests: the report names the user of the processes they start


def english_left(line: str, commands: tuple[str, ...] = ()) -> list[str]:
    """The English words of a sentence left in `line`, after what stays English is taken out:
    quoted names ('zombie', 'demo'), flags, paths, numbers with units, process commands."""
    for command in commands:
        line = line.replace(command, " ")
    line = re.sub(r"'[^']*'", " ", line)  # rule ids and scenario names are quoted
    line = re.sub(r"--[\w-]+|/[\w./-]+|\b[\w.]+=[\w.,]+", " ", line)  # flags, paths, VAR=value
    line = re.sub(r"\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d\b", " ", line)  # PCI bus ids
    words = re.findall(r"[A-Za-z][A-Za-z0-9_/-]*[A-Za-z0-9]", line)
    return [w for w in words if w not in KEPT and not re.fullmatch(r"\d*[A-Za-z]?\d+[a-z]*", w)]


def assert_chinese(text: str, commands: tuple[str, ...] = ()) -> None:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines
    left = {line: english_left(line, commands) for line in lines}
    assert not {line: words for line, words in left.items() if words}, left


def after_banner(text: str, first: str) -> str:
    """`text` from its line that holds `first` on: the banner above it is vram status's, tested there."""
    lines = text.splitlines()
    return "\n".join(lines[next(i for i, line in enumerate(lines) if first in line):])


def assert_columns_line_up(header: str, rows: list[str], columns: int) -> None:
    """Each of the first `columns` columns: its value starts or ends (left or right aligned) in the
    same terminal column as its heading, counted by display width (a CJK character is two)."""
    def spans(line: str) -> list[tuple[int, int]]:
        out = []
        for m in re.finditer(r"\S+", line):
            start = cells(line[:m.start()])
            out.append((start, start + cells(m.group())))
        return out

    heads = spans(header)[:columns]
    assert len(heads) == columns, header
    for row in rows:
        values = spans(row)[:columns]
        for (h0, h1), (v0, v1) in zip(heads, values):
            assert h0 == v0 or h1 == v1, (header, row)


@needs_root("the demo's zombie is carol's: only root's --all-users puts it in the plan, for the zombie rule to refuse")
def test_kill_zombie_dry_run_is_chinese():
    # As root without --all-users the demo's zombie (carol's) is not selected: a note says why.
    result = run_vram("kill", "--zombie", "--dry-run", "--simulate", "demo", env=ZH)
    assert result.rc == 0, result.err
    assert "没有要发送信号的进程" in result.out and "--all-users" in result.out
    assert_chinese(after_banner(result.out, "没有要发送信号的进程"))

    # With --all-users it is in the plan, refused by the zombie rule, in a table
    result = run_vram("kill", "--zombie", "--all-users", "--dry-run", "--simulate", "demo", "--no-color",
                      env={**ZH, "COLUMNS": "100"})
    assert result.rc == 1, result.err
    body = after_banner(result.out, "演练")
    assert_chinese(body, commands=("[python] <defunct>",))
    assert "僵尸进程" in body and "'zombie'" in body
    header, row = body.splitlines()[1:3]
    assert "29044" in row and "carol" in row
    assert_columns_line_up(header, [row], 6)
    assert max(cells(line) for line in body.splitlines()) <= 100


def test_kill_refusals_are_chinese(tmp_path):
    """A protected process (pid 1) and the caller's own parent, named by pid: each refusal in
    Chinese, the rule id kept."""
    path = tmp_path / "scenario.json"
    me = os.getpid()  # vram's parent: the rule that protects the caller's shell and its parents
    path.write_text(json.dumps(real_gpu_scenario({1: {"0": "1GiB"}, me: {"1": "2GiB"}})))
    env = {**ZH, "COLUMNS": "120", "VRAM_AUDIT_LOG": str(tmp_path / "audit.log")}
    result = run_vram("kill", "--simulate", str(path), "1", str(me), "--dry-run", "--no-color", env=env)
    assert result.rc == 1, result.err
    body = after_banner(result.out, "演练")
    commands = tuple(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()[:40]
                     for pid in (1, me))
    lines = [line for line in body.splitlines() if not re.match(r"\s*\d+\s", line)]  # rows: a pid and a command
    assert_chinese("\n".join(lines), commands)
    assert "被规则 'pid-1' 拒绝" in body and "被规则 'caller' 拒绝" in body
    assert "pid 1 是系统（或容器）的 init" in body and "调用者自己的 shell" in body

    # --json and the audit log stay English whatever the language (programs read them)
    result = run_vram("kill", "--simulate", str(path), "1", "--yes", "--json", env=env)
    assert result.rc == 1, result.err
    (target,) = json.loads(result.out)["targets"]
    assert target["rule"] == "pid-1" and target["reason"].startswith("pid 1 is the system's")
    assert target["status"] == "refused"
    (record,) = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert record["reason"].startswith("pid 1 is the system's")


def test_kill_asks_and_reports_in_chinese(children, write_scenario, tmp_path):
    """The question, a yes in Chinese, and the report: what exited and what each GPU freed."""
    child = start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "3GiB"}}))
    env = {**ZH, "VRAM_AUDIT_LOG": str(tmp_path / "audit.log"), "HOME": str(tmp_path)}
    result = run_vram_answering("kill", "--simulate", str(path), str(child.pid), "--timeout", "5", "--no-color",
                                answer="是\n", env=env)
    assert result.rc == 0, result.err
    assert "向 1 个进程发送 SIGTERM？[y/N]" in result.err
    assert child.wait(5) < 0  # it got the signal: the Chinese yes was a yes
    report = after_banner(result.out, "结果")
    assert_chinese(report, commands=("sleep 600",))
    assert "已退出" in report and "释放了 3.0GiB" in report
    (record,) = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()
                 if json.loads(line)["event"] == "outcome"]
    assert record["result"] == "exited"  # the audit log's words stay English


def test_pick_explain_is_chinese():
    result = run_vram("pick", "--explain", "--simulate", "demo", "--no-color", env=ZH)
    assert result.rc == 0, result.err
    assert result.out == "7\n"  # what scripts capture stays as it is
    body = after_banner(result.err, "请求")
    assert_chinese(body)
    assert "请求：1 块 GPU" in body and "选中：cuda:0" in body and "空闲显存不足" in body
    lines = body.splitlines()
    header = next(line for line in lines if "结论" in line)
    rows = [line for line in lines if re.match(r"\s+\d+\s+0000:", line)]
    assert len(rows) == 8
    assert_columns_line_up(header, rows, 6)


def test_wrap_folds_chinese_by_display_width():
    from vramkit.render.text_width import wrap

    text = ("它已经退出（僵尸进程），无法接收信号；它的父进程是 init（pid 1），本应回收它；在容器中这说明容器的 "
            "init 不回收子进程（请用 --init 运行容器）。")
    lines = wrap(text, 30)
    assert len(lines) > 2 and all(cells(line) <= 30 for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost, only folded
    assert not any(line[0] in "，。；：）" for line in lines)  # closing punctuation stays on its line
    for width in (20, 29):  # widths where a line would end just after "init（"
        assert not any(line[-1] == "（" for line in wrap(text, width))  # a bracket goes with what it opens
    assert "--init" in " ".join(lines).split()  # a Latin word is never cut
    assert wrap("plain ascii text folds as textwrap does", 12) == ["plain ascii", "text folds", "as textwrap",
                                                                  "does"]


def test_pick_explain_names_the_gpu_model_not_an_ml_model():
    # pick's MODEL column is the GPU's model (型号); estimate --list's is a neural network's (模型)
    result = run_vram("pick", "--explain", "--simulate", "demo", "--no-color", env=clean_env(VRAM_LANG="zh_CN",
                                                                                           COLUMNS="120"))
    header = next(line for line in after_banner(result.err, "请求").splitlines() if "结论" in line)
    assert "型号" in header.split() and "模型" not in header, header


def test_impossible_pick_says_the_most_free_gpus_in_chinese():
    result = run_vram("pick", "--min-free", "200GiB", "--simulate", "demo", env=ZH)
    assert result.rc == 1
    assert "当前空闲最多：GPU 7（空闲 77.3GiB）" in result.err, result.err


def test_gpu_numbers_are_listed_with_the_chinese_separator():
    result = run_vram("pick", "--count", "3", "--need", "60G", "--simulate", "demo", env=ZH)
    assert result.rc == 1
    assert "只有 GPU 4、7 满足条件；GPU 0-3、5、6 空闲显存不足" in result.err, result.err  # was "GPU 4, 7"


@needs_root("which GPUs other users hold depends on who asks: as root, the demo's alice and erin")
def test_impossible_exclusive_pick_names_other_users_with_the_chinese_separator():
    result = run_vram("pick", "-n", "3", "--exclusive", "--simulate", "demo", env=ZH)
    assert "正被其他用户使用（alice、erin）" in result.err, result.err  # the list separator is Chinese


@needs_root("as root the demo's processes are all other users': the note names them at once (a user's "
            "own --idle selection is watched for the minute)")
def test_kill_names_other_users_with_the_chinese_separator():
    result = run_vram("kill", "--idle", "1m", "--dry-run", "--simulate", "demo", env=ZH)
    assert "（alice、bob、carol、dave、erin）" in result.out + result.err, result.out + result.err


def test_run_usage_line_is_chinese():
    result = run_vram("run", "--help", env=ZH)
    assert result.rc == 0, result.err
    assert result.out.splitlines()[0] == "用法：vram run [选项] [--wait [DURATION]] -- CMD [ARGS...]", result.out[:200]
    english = run_vram("run", "--help")
    assert english.out.splitlines()[0] == "usage: vram run [options] [--wait [DURATION]] -- CMD [ARGS...]"


def test_kill_report_says_what_is_still_held_in_chinese(children, write_scenario, tmp_path):
    child, keep = start_sleeper(children), start_sleeper(children)
    path = write_scenario(real_gpu_scenario({child.pid: {"0": "3GiB"}, keep.pid: {"0": "2GiB"}}))
    env = {**ZH, "VRAM_AUDIT_LOG": str(tmp_path / "audit.log"), "HOME": str(tmp_path), "COLUMNS": "200"}
    result = run_vram("kill", "--simulate", str(path), str(child.pid), "--yes", "--timeout", "5", "--no-color",
                      env=env)
    assert result.rc == 0, result.err
    (held,) = [line for line in result.out.splitlines() if str(keep.pid) in line and "GiB" in line
               and "释放" not in line]
    assert held.lstrip().startswith("仍占用：") and "2.0GiB" in held, result.out
    assert_chinese(held, commands=("sleep 600",))
