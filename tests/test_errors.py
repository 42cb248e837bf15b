"""One error base: every error vramkit raises on purpose is a VramkitError; library messages name
parameters, and `vram` names the command's flag for them, in one line (a traceback with --debug)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil

import pytest
from helpers import assert_one_line_error, run_vram

import vramkit
from vramkit.cli.main import flag_for, main, one_line
from vramkit.errors import RequestError, VramkitError

# Not vramkit's own errors: mirrors of pynvml's classes, raised to pynvml programs, and of amdsmi's
# (the fake amdsmi module raises what the real one does, for the AMD reader to catch as it would those).
FOREIGN = {"NVMLError", "NVMLLibraryMismatchError", "AmdSmiException", "AmdSmiLibraryException",
           "AmdSmiRetryException", "AmdSmiTimeoutException", "AmdSmiParameterException"}


def _error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(vramkit.__path__, "vramkit."):
        if (info.name.split(".")[1] in ("tui", "torch", "__main__")
                or info.name.endswith(("reference", "callbacks"))):
            continue  # need textual / torch; their errors, if any, are checked where they are imported
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
                    and not name.startswith("_") and not name.startswith("NVMLError_")):
                found[name] = obj
    return found


def test_every_error_is_a_vramkit_error():
    classes = _error_classes()
    assert {"ScenarioError", "ShimError", "LaunchError", "EstimateError", "UsageError", "Failure", "NvmlUnavailable",
            "KillRequestError", "NoGpusAvailable", "LeaseError", "AuditError", "ProtectConfigError"} <= set(classes)
    # A KeyboardInterrupt that carries what was done before Ctrl-C (kill.KillInterrupted) is not an error.
    wrong = [n for n, c in classes.items()
             if n not in FOREIGN and not issubclass(c, (VramkitError, KeyboardInterrupt))]
    assert wrong == []


@pytest.mark.parametrize("path, name, other_base, code", [
    ("vramkit.nvml.scenario", "ScenarioError", ValueError, 2),
    ("vramkit.estimator.specs", "EstimateError", ValueError, 2),
    ("vramkit.estimator.trace", "TraceUnavailable", RuntimeError, 1),
    ("vramkit.nvml.shim", "ShimError", Exception, 2),
    ("vramkit.cli.common", "UsageError", Exception, 2),
    ("vramkit.cli.common", "Failure", Exception, 1),
])
def test_the_old_bases_are_kept(path, name, other_base, code):
    cls = getattr(importlib.import_module(path), name)
    assert issubclass(cls, VramkitError) and issubclass(cls, other_base)  # `except ValueError` still works
    assert cls.exit_code == code


def test_launch_error_exits_as_a_shell_would():
    from vramkit.launch import LaunchError

    e = LaunchError("x: command not found", 127)
    assert isinstance(e, VramkitError) and e.exit_code == e.code == 127


def test_the_message_names_the_parameter_not_a_flag():
    e = RequestError("must be at least 1 (got 0)", param="count")
    assert str(e) == "count: must be at least 1 (got 0)" and e.message == "must be at least 1 (got 0)"
    assert str(RequestError("no GPU fits")) == "no GPU fits"
    assert isinstance(e, ValueError)


def test_library_errors_in_library_terms():
    from vramkit.estimator import estimate
    from vramkit.estimator.specs import EstimateError

    with pytest.raises(EstimateError) as info:
        estimate("gpt2", tp=3, gpus=4)
    assert info.value.param == "tp" and "--" not in str(info.value)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("-n", "--count", type=int)
    p.add_argument("--min-free", "--need", dest="min_free")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--train", dest="mode", action="store_const", const="train")
    mode.add_argument("--infer", dest="mode", action="store_const", const="infer")
    p.add_argument("model", nargs="?")
    return p


@pytest.mark.parametrize("param, flag", [
    ("count", "--count"), ("min_free", "--min-free"), ("mode", None), ("model", None), ("nothing", None),
])
def test_flag_for(param, flag):
    assert flag_for(_parser(), param) == flag


def test_a_command_can_name_the_flag_itself():
    args = argparse.Namespace(param_flags={"gpus": "--gpu"})
    assert flag_for(_parser(), "gpus", args) == "--gpu"


def test_one_line():
    p = _parser()
    assert one_line(RequestError("must be at least 1", param="count"), p) == "error: --count: must be at least 1"
    assert one_line(RequestError("must be one", param="mode"), p) == "error: mode: must be one"
    assert one_line(VramkitError("the lease directory is locked"), p) == "the lease directory is locked"


@pytest.mark.parametrize("args, line", [
    (("estimate", "gpt2", "--tp", "3", "--gpus", "4"), "vram: error: --tp: 3 must divide the number of GPUs (4)"),
    (("estimate", "gpt2", "--grad-accum", "0"), "vram: error: --grad-accum: must be a whole number of at least 1"),
    (("estimate", "gpt2", "--quant", "4bit"), "vram: error: --quant: training a quantized model needs LoRA"),
    (("plan", "gpt2", "--offload"), "vram: error: --offload: needs ZeRO stage 2 or 3"),
    (("estimate", "gpt2", "--batch", "two"), "vram: error: --batch: 'two' is not a whole number"),
    (("estimate", "gpt2", "--cuda", "new"), "vram: error: --cuda: 'new' is not a version"),
    (("estimate", "gpt2", "--head", "cls"), "vram: error: --head: gpt2: only the language-model head (lm)"),
])
def test_the_cli_names_its_flag(capsys, args, line):
    assert main(list(args)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(line), captured.err
    assert len(captured.err.splitlines()) == 1


def test_debug_shows_the_traceback_then_the_line(capsys):
    assert main(["estimate", "gpt2", "--batch", "0", "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "EstimateError" in err
    assert err.splitlines()[-1] == "vram: error: --batch: must be a whole number of at least 1, not 0"


def test_debug_after_the_double_dash_belongs_to_the_command(capsys, monkeypatch):
    # `vram run -- prog --debug`: the flag is prog's; the error stays one line.
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert main(["run", "--simulate", "demo", "--only", "12", "--", "prog", "--debug"]) == 2
    assert capsys.readouterr().err == "vram: error: --only: no GPU 12 (this machine has GPUs 0-7)\n"


def test_a_shim_error_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    result = run_vram("sim", "shim", str(tmp_path / "file"))
    assert_one_line_error(result, 2, "vram: error: ", "exists and is not a directory")
