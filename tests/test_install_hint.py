"""Install hints name a way that works for the vramkit at hand: it is not on a package index, so
`pip install 'vramkit[serve]'` would fetch nothing (issue 31)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

from vramkit import install_hint as hint


def test_from_this_checkout_the_extra_is_installed_editable(monkeypatch, tmp_path):
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(hint.__file__))))
    monkeypatch.chdir(checkout)
    assert hint.install_hint("serve") == f"{sys.executable} -m pip install -e '.[serve]'"
    monkeypatch.chdir(tmp_path)  # elsewhere: the checkout by its path
    assert hint.install_hint("plot") == f"{sys.executable} -m pip install -e '{checkout}[plot]'"


def test_the_system_wide_install_is_extended_by_its_script(monkeypatch, tmp_path):
    (tmp_path / "INSTALLED").write_text("installed by scripts/install-system.sh\n")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert hint.install_hint("serve").startswith("sudo scripts/install-system.sh --extras serve")
    assert hint.install_hint("nvml") == f"sudo {tmp_path}/bin/pip install nvidia-ml-py"


def test_an_installed_wheel_gets_the_packages_themselves(monkeypatch):
    monkeypatch.setattr(hint, "_checkout", lambda: None)
    assert hint.install_hint("serve") == f"{sys.executable} -m pip install prometheus-client pyyaml bcrypt"
    assert hint.install_hint("torch") == f"{sys.executable} -m pip install torch"


def test_no_message_names_a_package_index_entry_that_does_not_exist():
    src = os.path.dirname(os.path.abspath(hint.__file__))
    offenders = []
    for root, _, files in os.walk(src):
        for name in files:
            if name.endswith(".py") and name != "install_hint.py":
                text = open(os.path.join(root, name), encoding="utf-8").read()
                if "install 'vramkit[" in text or 'install "vramkit[' in text:
                    offenders.append(name)
    assert offenders == []


@pytest.mark.parametrize("argv, module, extra", [
    (["top", "--simulate", "demo"], "textual", "'tui'"),
    (["serve", "--simulate", "demo", "--listen", "127.0.0.1:0"], "prometheus_client", "'serve'"),
])
def test_a_command_whose_extra_is_missing_says_how_to_install_it(argv, module, extra):
    # textual and prometheus-client are extras (issue 27): without them the rest of vram works, and
    # these two commands say so in one line before doing anything.
    code = (f"import sys; sys.modules[{module!r}] = None; from vramkit.cli.main import main; "
            f"sys.exit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(),
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert f"(vramkit's {extra} extra)" in line and "pip install" in line


def test_the_core_needs_only_nvml():
    import tomllib

    project = tomllib.loads((Path(hint.__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0] for d in project["dependencies"] if "python_version" not in d] == ["nvidia-ml-py"]
    extras = project["optional-dependencies"]
    for extra, packages in hint.EXTRAS.items():
        if extra != "nvml":
            names = {d.split(">")[0].split("<")[0].split("[")[0] for d in extras[extra]}
            assert names == set(packages), extra


def test_require_finds_what_importlib_finds_without_importing_importlib_util(monkeypatch, tmp_path):
    """require() asks sys.meta_path's finders as importlib.util.find_spec does (a finder of an
    editable install included), without importing importlib.util into vram top."""
    import importlib.machinery

    from vramkit.errors import RequestError

    class Finder:  # as an editable install's: finds a package outside sys.path
        @staticmethod
        def find_spec(name, path, target=None):
            if name == "only_via_finder":
                return importlib.machinery.ModuleSpec(name, None)
            return None

    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    hint.require("only_via_finder", "tui", "vram top")
    (tmp_path / "on_path_mod.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    hint.require("on_path_mod", "tui", "vram top")
    with pytest.raises(RequestError, match="vram top needs textual"):
        hint.require("no_such_module_anywhere", "tui", "vram top")
    out = subprocess.run([sys.executable, "-c", "import sys; from vramkit.install_hint import require; "
                          "require('json', 'tui', 'x'); print('importlib.util' in sys.modules)"],
                         capture_output=True, text=True, env=clean_env(), check=True).stdout
    assert out.strip() == "False"
