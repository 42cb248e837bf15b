"""`vram doctor LOGFILE|-`: the last OOM in a log, explained; errors as one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import assert_one_line_error, clean_env, has_nvidia_driver, run_vram, vram_argv

FIXTURES = Path(__file__).parent / "fixtures" / "oom"
LOG = str(FIXTURES / "training_log_two_ooms.txt")


def test_json_has_the_promised_keys_and_names_live_processes():
    data = run_vram("doctor", LOG, "--simulate", "demo", "--json").json()
    assert data["requested_bytes"] == round(1.5 * 1024**3)
    assert data["total_bytes"] == round(79.10 * 1024**3) and data["free_bytes"] == round(626 * 1024**2)
    assert data["cause"] == "other_processes" and data["line"] == 10
    assert data["fixes"][0]["id"] == "free_pid_41234" and data["fixes"][0]["saves_bytes"] == round(60.25 * 1024**3)
    bob = next(p for p in data["processes"] if p["pid"] == 41234)
    assert bob["user"] == "bob" and "train_dp.py" in bob["command"]
    assert data["live"]["available"] is True and data["live"]["simulated"] is True


def test_text_output():
    result = run_vram("doctor", LOG, "--simulate", "demo")
    assert result.rc == 0, result.err
    assert "line 10 of" in result.out and "Cause: other processes" in result.out
    assert "ask bob to free pid 41234" in result.out and "saves 60.2GiB (message) enough" in result.out
    assert "\x1b" not in result.out


def test_stdin_and_no_live_data():
    text = (FIXTURES / "cuda_1_x_reserved_fragmentation.txt").read_text()
    proc = subprocess.run(vram_argv("doctor", "-", "--json", "--no-live"), input=text, capture_output=True,
                          text=True, env=clean_env(), timeout=30)
    assert proc.returncode == 0, proc.stderr
    import json
    data = json.loads(proc.stdout)
    assert data["source"] == "stdin" and data["cause"] == "fragmentation" and data["live"]["available"] is False
    assert data["fixes"][0]["id"] == "alloc_conf"


def test_without_a_driver_the_log_is_still_explained(tmp_path):
    # No NVML here (and no --simulate): the diagnosis stands on the message alone.
    # 243 GiB asked of a 16 GiB card: a shape or size bug, not a memory problem (issue 28).
    result = run_vram("doctor", str(FIXTURES / "cuda_2_0_too_large.txt"), "--json")
    data = result.json()
    assert data["cause"] == "not_memory"
    assert data["live"]["available"] is has_nvidia_driver()


def test_no_oom_in_the_log_is_one_line_exit_1():
    assert_one_line_error(run_vram("doctor", str(FIXTURES / "no_oom.txt"), "--no-live"), 1,
                          "no out-of-memory error found in")


def test_unreadable_file_is_one_line_exit_2(tmp_path):
    assert_one_line_error(run_vram("doctor", str(tmp_path / "missing.log")), 2, "cannot read", "missing.log")
    assert_one_line_error(run_vram("doctor", str(tmp_path)), 2, "is a directory, not a log file")


def test_bad_options_are_one_line_exit_2():
    assert_one_line_error(run_vram("doctor", LOG, "--gpu", "0,1", "--no-live"), 2, "--gpu")
    assert_one_line_error(run_vram("doctor", "--simulate", "demo", "--pid", "3"), 2, "--pid needs a LOGFILE")
    assert_one_line_error(run_vram("doctor", LOG, "--batch-size", "0", "--no-live"), 2, "--batch")
    assert_one_line_error(run_vram("doctor", LOG, "--seq", "0", "--no-live"), 2, "--seq: must be at least 1")
    assert_one_line_error(run_vram("doctor", "--simulate", "demo", "--batch", "4"), 2, "--batch needs a LOGFILE")
    # a precision the estimator does not know is refused even where no savings are computed
    assert_one_line_error(run_vram("doctor", LOG, "--precision", "fp7", "--no-live"), 2, "--precision", "fp7")


def test_batch_and_seq_are_spelled_as_in_estimate_and_the_old_way_too():
    # estimate says --batch/--seq, doctor said --batch-size/--seq-len: each accepts both.
    args = (LOG, "--no-live", "--model", "bert-large-uncased", "--json")
    short = run_vram("doctor", *args, "--batch", "16", "--seq", "512")
    long = run_vram("doctor", *args, "--batch-size", "16", "--seq-len", "512")
    assert short.rc == 0, short.err
    assert short.json() == long.json()
    assert "batch 16" in short.out
    help_text = run_vram("doctor", "--help").out
    assert "[--batch N]" in help_text and "[--seq N]" in help_text


def test_a_fix_left_without_a_number_says_why_and_asks_for_the_model_only_when_missing():
    # an evaluation gather: its fixes (eval_accumulation_steps, ...) are not the estimator's changes
    log = str(Path(__file__).parent / "fixtures" / "docs" / "oom" / "eval_gather_trainer_tqdm.log")
    bare = run_vram("doctor", log, "--no-live")
    assert bare.rc == 0, bare.err
    assert "give --model and --batch" in bare.out
    given = run_vram("doctor", log, "--no-live", "--model", "bert-large-uncased", "--batch", "16")
    assert given.rc == 0, given.err
    assert "give --model and --batch" not in given.out  # they were given
    assert "(a fix without a number: one the estimator does not model" in given.out


def test_gpu_option_points_live_data_at_the_right_gpu():
    # The 1.x message has no pids: --gpu says which NVML GPU the job ran on.
    data = run_vram("doctor", str(FIXTURES / "cuda_1_x_runtimeerror.txt"), "--simulate", "demo", "--gpu", "5",
                    "--json").json()
    assert data["live"]["gpu"] == 5
    assert {p["pid"] for p in data["processes"]} == {29044, 52001}


def test_help_has_examples():
    result = run_vram("doctor", "--help")
    assert result.rc == 0 and "examples:" in result.out and "vram doctor train.log" in result.out


def test_doctor_imports_nothing_heavy():
    result = run_vram("doctor", LOG, "--simulate", "demo", python_flags=("-X", "importtime"))
    assert result.rc == 0
    names = {line.rsplit("|", 1)[1].strip() for line in result.err.splitlines() if line.startswith("import time:")}
    assert "vramkit.doctor.oom" in names
    assert not {n.split(".")[0] for n in names} & {"torch", "textual", "psutil", "pynvml"}
    assert "vramkit.torch" not in names


def test_status_does_not_load_the_doctor():
    result = run_vram("status", "--simulate", "demo", python_flags=("-X", "importtime"))
    names = {line.rsplit("|", 1)[1].strip() for line in result.err.splitlines() if line.startswith("import time:")}
    # Only the command named is imported (cli/commands.py lists the others by name): neither the
    # doctor command's module nor anything it uses.
    assert "vramkit.cli.status" in names and "vramkit.cli.doctor" not in names
    assert not {n for n in names if n.startswith(("vramkit.doctor", "vramkit.render.doctor_view"))}
