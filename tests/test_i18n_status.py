"""vram status, ps, info, report and life in Chinese (issue 34): every word a person reads is in
zh_CN except what stays English on purpose (GPU models, users, commands, units, field names of the
JSON, NVML's names), and the columns still line up by display width at 80 columns."""

from __future__ import annotations

import re

import pytest
from helpers import run_vram, scenario_data, strip_ansi, zh_env

from vramkit.render.text_width import cells

EPOCH = 1764547200  # the stepped clock's start: the recorded window is known
# Kept in English on purpose: names and abbreviations, units, what NVML calls things, the JSON's
# field names on the N/A line, the time units of format_duration.
KEPT = {"GPU", "CUDA", "SM", "PID", "MIG", "ECC", "PCIe", "NVLink", "UUID", "NUMA", "NVML", "N", "A", "GiB", "MiB",
        "KiB", "MHz", "W", "C", "tx", "rx", "gen", "x16", "P0", "default", "pid", "h", "m", "s", "d", "gi",
        "memory_utilization", "process_utilization", "utilization", "power_limit", "power_draw", "temperature",
        "fan", "proc", "PCI", "ID", "AF", "P", "state", "SXM2", "SXM4", "HBM3", "Tesla", "NVIDIA", "V100", "A100",
        "H100", "db", "zh", "status"}
WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9_]*")  # 4m00s, x16, 1g: not words


def _scenario_words(*names: str) -> set[str]:
    """The words of what the scenarios name (users, commands, GPU models): other people's text, kept."""
    words: set[str] = set()
    for name in names:
        data = scenario_data(name)
        for p in data["processes"]:
            words |= set(WORD.findall(f"{p.get('user', '')} {p.get('command', '')} {p.get('name', '')}"))
        for g in data["gpus"]:
            words |= set(WORD.findall(g.get("name", "")))
        words |= set(WORD.findall(data["name"]))
    return words


def _english_left(text: str, kept: set[str]) -> list[str]:
    """The lines that still hold an English word that is not kept (a word cut short with … is the
    end of a command: other people's text)."""
    return [line for line in text.splitlines()
            if any(w not in kept for w in WORD.findall(re.sub(r"\S*…", "", line.replace("N/A", ""))))]


def _zh(*args: str, **env: str) -> str:
    result = run_vram(*args, env=zh_env(COLUMNS="80", **env))
    assert result.rc == 0, result.err
    return strip_ansi(result.out)


def _ends(lines: list[str], pattern: str) -> set[int]:
    """The display column where the first match of `pattern` ends, on each line that has one."""
    out = set()
    for line in lines:
        m = re.search(pattern, line)
        if m:
            out.add(cells(line[:m.end()]))
    return out


def test_status_in_chinese_lines_up_at_80_columns():
    out = _zh("status", "--simulate", "demo")
    assert "模拟服务器（场景 'demo'），不是真实 GPU" in out and "8 块 GPU" in out
    assert "显存" in out and "利用率" in out and "[僵尸,孤儿]" in out and "[空闲]" in out
    assert "由 6 个进程占用" in out.splitlines()[-1]
    assert not _english_left(out, KEPT | _scenario_words("demo"))
    lines = out.splitlines()
    assert max(map(cells, lines)) <= 80
    gpu_lines = [line for line in lines if re.match(r" \d  A100", line)]
    assert len(gpu_lines) == 8
    # the memory pair, the utilization and the power end in one column on every GPU's line
    assert len(_ends(gpu_lines, r"\d+\.\d/80\.0GiB")) == 1
    assert len(_ends(gpu_lines, r"利用率 +\d+%")) == 1
    assert len(_ends(gpu_lines, r"/400W")) == 1


def test_status_of_a_faulty_machine_says_why_in_chinese():
    out = _zh("status", "--simulate", "faulty", "--health")
    assert "丢失  GPU 已丢失（从总线上掉线或需要重置）" in out
    assert "N/A（无权限）" in out and "N/A（不支持）" in out and "[不可见]" in out
    assert "；1 块 GPU 丢失" in out
    # commands are other people's text, the JSON's field names on the N/A line stay as they are
    assert not _english_left(out, KEPT | _scenario_words("faulty") | {"python", "evil", "py"})
    assert max(map(cells, out.splitlines())) <= 80


def test_ps_in_chinese_lines_up_at_80_columns():
    out = _zh("ps", "--simulate", "demo")
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("GPU"))
    assert header.split()[:4] == ["GPU", "PID", "用户", "显存"] and "运行时长" in header.split()
    assert not _english_left(out, KEPT | _scenario_words("demo"))
    assert max(map(cells, lines)) <= 80
    rows = [line for line in lines if re.match(r" +\d +\d+ ", line)]
    assert len(rows) == 9
    # right-aligned columns: each heading ends where its values end (display columns, not len())
    assert _ends([header], "显存") == _ends(rows, r"GiB")
    assert _ends([header], "运行时长") == _ends(rows, r"\d+[dhm]\d+[hms]")
    assert "僵尸,孤儿" in out and "空闲" in out


def test_info_in_chinese():
    out = _zh("info", "--simulate", "faulty")
    for words in ("已用显存", "空闲显存", "温度", "功耗", "降频原因", "持久模式", "NUMA 节点", "进程",
                  "在 /proc 中不可见", "此驱动不报告（memory info v1）"):
        assert words in out, words
    assert not _english_left(out, KEPT | _scenario_words("faulty") | {"python", "evil", "py", "memory", "info",
                                                                        "v1", "P", "state"})
    lines = out.splitlines()
    assert max(map(cells, lines)) <= 80
    # the field labels are padded by display width: every value starts in one column
    labels = ("UUID", "PCI 总线 ID", "已用显存", "空闲显存", "温度", "功耗", "降频原因", "时钟", "NUMA 节点", "进程")
    starts = {cells(m.group(0)) for line in lines if (m := re.match(r" {6}(.+?) +(?=\S)", line))
              and m.group(1) in labels}
    assert starts == {20}


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    db = tmp_path_factory.mktemp("zh-history") / "history.db"
    env = zh_env(VRAM_SIM_CLOCK="stepped", VRAM_SIM_EPOCH=str(EPOCH), VRAM_SIM_TIME="0")
    result = run_vram("record", "--simulate", "demo", "--db", str(db), "--interval", "60s", "--samples", "5",
                      env=env)
    assert result.rc == 0, result.err
    return db


def test_report_in_chinese_lines_up_at_80_columns(history):
    env = {"VRAM_SIM_CLOCK": "stepped", "VRAM_SIM_EPOCH": str(EPOCH), "VRAM_SIM_TIME": "0"}
    for by in ("user", "gpu", "life"):
        out = _zh("report", "--db", str(history), "--since", "2025-11-01", "--by", by, **env)
        assert "已记录：其中 4m00s" in out and "空闲占用大户" in out
        assert not _english_left(out, KEPT | _scenario_words("demo") | set(WORD.findall(str(history)))), by
        lines = out.splitlines()
        header = next(line for line in lines if "GPU 小时" in line)
        rows = [line for line in lines[lines.index(header) + 1:] if line.strip()][:5]
        # the table fits (the notes around it are prose, wrapped by the terminal as in English)
        assert max(map(cells, [header, *rows])) <= 80
        assert _ends([header], "GPU 小时") == _ends(rows, r"\d\.\d\d"), by


def test_life_in_chinese(history):
    out = _zh("life", "38817", "--db", str(history))
    assert "用量" in out and "GPU 小时" in out and "峰值 18.0GiB" in out and "起始时间" in out
    assert not _english_left(out, KEPT | _scenario_words("demo") | set(WORD.findall(str(history))))


def test_a_workload_note_kept_in_english_is_shown_in_chinese(monkeypatch):
    # The note stays English where it is kept (ps --json, the serve API); the views say it translated.
    from vramkit import i18n
    from vramkit.procs.workload import CGROUP_UNREADABLE, PID_NOTE, POD_SHARED, local_note

    note = PID_NOTE.format(pid=42, why=CGROUP_UNREADABLE.format(error="hierarchy 3 listed twice"))
    assert note == "pid 42: its cgroup cannot be read as the kernel's: hierarchy 3 listed twice"
    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()
    try:
        assert local_note(note) == "pid 42：它的 cgroup 不像内核写出的，无法采信：hierarchy 3 listed twice"
        shared = POD_SHARED.format(uid="0f3c", n=2, gpus="GPU-a")
        assert local_note(shared) == "Pod 0f3c：2 个 Pod 共享 GPU-a：不猜测它的名字"
        assert local_note("a note of no known form") == "a note of no known form"
    finally:
        monkeypatch.delenv("VRAM_LANG")
        i18n.reset()
