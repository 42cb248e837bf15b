"""vram fleet and the config files of vram serve and fleet in Chinese: the punctuation between the
translated parts is Chinese too (the first line of vram fleet, its lists, WebConfigError's "where:
why"), not the ASCII ":" and "," the English messages put there. What stays ASCII is what came from
outside or names a place: a host's address, a file and the key in it."""

from __future__ import annotations

import re

import pytest
from helpers import free_port, run_vram, zh_env

from vramkit import i18n


@pytest.fixture
def chinese(monkeypatch):
    monkeypatch.setenv("VRAM_LANG", "zh_CN")
    i18n.reset()


def test_vram_fleet_s_first_line_and_pick_are_punctuated_in_chinese(served):
    a = served("--simulate", "demo", "--hostname", "gpu-a")
    b = served("--simulate", "mig", "--hostname", "gpu-b")
    dead = f"127.0.0.1:{free_port()}"
    shown = run_vram("fleet", "--hosts", f"127.0.0.1:{a.port},127.0.0.1:{b.port},{dead}", env=zh_env())
    assert shown.rc == 1, shown.err
    first = shown.out.splitlines()[0]
    assert re.fullmatch(r"vram fleet（经各主机的 vram serve）：3 台主机，\d+ 块 GPU，模拟：gpu-a、gpu-b，1 台宕机",
                        first), first
    picked = run_vram("fleet", "pick", "-n", "2", "--hosts", f"127.0.0.1:{a.port}", env=zh_env())
    assert picked.rc == 0, picked.err
    # the free memory and the utilization of each GPU chosen, listed as Chinese lists them
    assert re.search(r"：空闲 [\d.]+GiB、[\d.]+GiB，利用率 \d+%、\d+%；", picked.out), picked.out


def test_why_no_host_fits_is_punctuated_in_chinese(served):
    a = served("--simulate", "demo", "--hostname", "gpu-a")
    dead = f"127.0.0.1:{free_port()}"
    shown = run_vram("fleet", "pick", "-n", "9", "--hosts", f"127.0.0.1:{a.port},{dead}", env=zh_env())
    assert shown.rc == 1 and not shown.out, shown
    # each host after its name and a full-width colon, one after another with a full-width semicolon
    refusals = rf"gpu-a：无法选出 9 块 GPU：[^;]+；{re.escape(dead)}：宕机：[^;]+"
    assert re.fullmatch(rf"vram: 没有主机符合 [^:;]+：{refusals}\n", shown.err), shown.err


def test_the_english_first_line_is_unchanged(served):
    a = served("--simulate", "demo", "--hostname", "gpu-a")
    shown = run_vram("fleet", "--hosts", f"127.0.0.1:{a.port}")
    assert shown.rc == 0, shown.err
    assert shown.out.splitlines()[0] == "vram fleet via each host's vram serve: 1 host, 8 GPUs, simulated: gpu-a"


@pytest.mark.parametrize(("text", "where", "why"), [
    (b"tls_server_config: yes\n", ": tls_server_config", "应为映射"),
    (b"\xff\xfe", "", "不是 UTF-8 文本"),
    (b"bogus: 1\n", ": bogus", "vram serve 不支持（支持：tls_server_config、basic_auth_users）"),
], ids=["key", "file", "list"])
def test_a_web_config_vram_serve_cannot_use_is_said_in_chinese(tmp_path, text, where, why):
    path = tmp_path / "web.yml"
    path.write_bytes(text)
    shown = run_vram("serve", "--simulate", "demo", "--listen", "127.0.0.1:0", "--web-config", str(path),
                     env=zh_env())
    assert shown.rc == 2 and not shown.out, shown
    # the option, the file and the key as written, then what is wrong, each after a full-width colon
    assert shown.err == f"vram: 错误：--web-config：{path}{where}：{why}\n", shown.err


def test_the_keys_a_hosts_config_takes_are_listed_in_chinese(chinese, tmp_path):
    from vramkit.errors import RequestError
    from vramkit.fleet_hosts import load_client_config

    path = tmp_path / "fleet.yml"
    path.write_bytes(b"proxy_url: http://proxy\n")
    with pytest.raises(RequestError) as refused:
        load_client_config(path)
    assert refused.value.message == f"{path}: proxy_url：不支持（支持的有：basic_auth、tls_config）"
