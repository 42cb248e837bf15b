"""Red team: hostile logs for `vram doctor LOG` (huge, binary, a million frames, deep exception chains,
terminal escape sequences in frames). Each ends in a diagnosis or one line, never a traceback, and no
control character from the log reaches the terminal or the JSON."""

from __future__ import annotations

import json
import os
import re
import unicodedata

import pytest
from helpers import plant, run_vram

from vramkit.doctor import find_oom
from vramkit.doctor.traceback import MAX_CHAINED, frames_before, phase_of

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
       "of 79.15 GiB of which 3.19 MiB is free. Process 1234 has 79.14 GiB memory in use.\n")
# A frame whose file, function and source line carry a window title, a hyperlink, a clipboard write
# (OSC 52), colour, a cursor save and a right-to-left override.
HOSTILE_FRAME = ('  File "/home/u/train\x1b]0;pwned\x07\x1b[31m.py", line 10, in main\x1b]8;;http://x\x1b\\\n'
                 "    loss.backward()\x1b]52;c;ZXZpbA==\x07\x1b7\u202e\n")


def _raw_controls(text: str) -> list[str]:
    """Characters a terminal acts on or that hide text, found independently of procs.sanitize."""
    return [hex(ord(c)) for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


def _diagnose(path, *flags: str):
    result = run_vram("doctor", str(path), "--no-live", *flags, timeout=120)
    assert "Traceback" not in result.err and result.rc in (0, 1), (result.rc, result.err[-500:])
    assert not _raw_controls(result.out) and not _raw_controls(result.err)
    return result


def test_escape_sequences_in_frames_are_removed_not_just_neutralized(tmp_path):
    """The OSC payloads (a title, a URL, base64 for the clipboard) are no part of the frame: they are
    removed with their escape, not printed as text behind a '?'."""
    log = tmp_path / "osc.log"
    log.write_text("Traceback (most recent call last):\n" + HOSTILE_FRAME + OOM)
    result = _diagnose(log)
    assert result.rc == 0
    line = next(x for x in result.out.splitlines() if x.startswith("Failed in"))
    assert line == "Failed in the backward pass: loss.backward()? (train.py:10)"  # the bidi override as '?'
    data = json.loads(_diagnose(log, "--json").out)
    frame = data["phase"]["frame"]
    assert frame["file"] == "/home/u/train.py" and frame["function"] == "main"
    assert frame["code"] == "loss.backward()?"
    for payload in ("pwned", "ZXZpbA==", "http://x"):
        assert payload not in result.out and payload not in json.dumps(data)


def test_a_deep_during_handling_chain_keeps_the_messages_own_frames(tmp_path):
    """Thousands of chained tracebacks above the message: the chain read is bounded, and the frames
    of the message's own traceback still name the phase."""
    chained = ('Traceback (most recent call last):\n  File "/a.py", line 1, in g\n    x()\nRuntimeError: x\n\n'
               "During handling of the above exception, another exception occurred:\n\n")
    text = chained * 100_000 + "Traceback (most recent call last):\n" + HOSTILE_FRAME + OOM
    report = find_oom(text)
    assert report is not None and report.offset is not None
    frames = frames_before(text, report.offset)
    assert len(frames) <= MAX_CHAINED  # one frame a traceback
    phase = phase_of(frames)
    assert phase is not None and phase.id == "backward" and phase.evidence.line == 10
    log = tmp_path / "nested.log"
    log.write_text(text)
    assert "Failed in the backward pass: loss.backward()" in _diagnose(log).out


def test_a_million_frames(tmp_path):
    log = tmp_path / "million.log"
    with open(log, "w") as f:
        f.write("Traceback (most recent call last):\n")
        f.writelines(f'  File "/x/m{i}.py", line {i}, in f{i}\n    y = f()\n' for i in range(1_000_000))
        f.write(OOM)
    result = _diagnose(log)
    assert result.rc == 0 and re.search(r"asked for +20.00MiB", result.out)


def test_a_1gib_sparse_log_binary_and_invalid_utf8(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "wb") as f:
        f.truncate(1024**3)  # NULs, costing no disk
        f.seek(1024**3)
        f.write(os.urandom(1 << 20) + b"\n" + b"\xff\xfe\xc0\x80\xed\xa0\x80\n" + OOM.encode() + b"\x9b2J\x1b[2J")
    result = _diagnose(log)
    assert result.rc == 0 and re.search(r"asked for +20.00MiB", result.out)


# named ids: an id made of the junk itself would differ between xdist workers (the random bytes) and not
# fit in a child's environment (PYTEST_CURRENT_TEST)
@pytest.mark.parametrize("junk", [b"\x00" * 5_000_000, os.urandom(5_000_000), b"\x1b]0;" * 1_000_000],
                         ids=["nuls", "random-bytes", "terminal-titles"])
def test_logs_without_a_message_are_one_line_exit_1(tmp_path, junk):
    log = tmp_path / "junk.log"
    log.write_bytes(junk)
    result = _diagnose(log)
    assert result.rc == 1 and len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("message", [
    "CUDA out of memory. Tried to allocate " + "9" * 400 + " GiB. GPU 0 has a total capacity of 79.15 GiB of "
    "which 3.19 MiB is free.",
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU " + "9" * 30 + " has a total capacity of " + "9" * 300
    + " GiB of which 3.19 MiB is free. Process " + "9" * 30 + " has 1.00 GiB memory in use.",
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; " + "1" * 500 + ".5 GiB total capacity; 1.00 GiB "
    "already allocated; 0 bytes free; 1.50 GiB reserved in total by PyTorch)",
])
def test_numbers_no_gpu_could_print_are_left_out_not_a_crash(tmp_path, message):
    """Hundreds of digits made an infinite float and then no int (an internal error): such a number is
    no size, GPU or pid PyTorch printed, and is left out as unknown."""
    log = tmp_path / "huge.log"
    log.write_text(f"torch.OutOfMemoryError: {message}\n")
    result = _diagnose(log, "--json")
    assert result.rc == 0
    report = find_oom(message)
    assert report is not None
    assert report.total_bytes is None or report.total_bytes < 10**30
    assert report.device in (0, None) and all(p.pid < 2**63 for p in report.processes)


def test_a_log_whose_last_window_starts_inside_one_long_line_is_still_read(tmp_path):
    """The tail window (4 MiB) starts inside a 6 MiB progress line: the message after it is found,
    not cut away with everything up to the first newline."""
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * (6 * 2**20) + OOM.encode())
    result = run_vram("doctor", str(log), "--no-live")
    assert result.rc == 0, result.err
    assert "CUDA out of memory on GPU 0" in result.out


def test_a_hostile_log_file_name_reaches_no_terminal(tmp_path):
    """A file name is another user's text in a shared directory: its escapes are replaced in the
    diagnosis, in the error for a missing file and for a directory."""
    name = tmp_path / "ev\x1b]0;T\x07il\u202e.log"
    name.write_text(OOM)
    result = run_vram("doctor", str(name), "--no-live")
    assert result.rc == 0 and not _raw_controls(result.out), _raw_controls(result.out)
    missing = run_vram("doctor", str(tmp_path / "no\x1b[2Joom.log"), "--no-live")
    assert missing.rc == 2 and not _raw_controls(missing.err)
    folder = tmp_path / "d\x1b[2J"
    folder.mkdir()
    as_dir = run_vram("doctor", str(folder), "--no-live")
    assert as_dir.rc == 2 and "is a directory" in as_dir.err and not _raw_controls(as_dir.err)


def test_a_fifo_where_a_log_was_is_refused_not_waited_on(tmp_path):
    """Another user can swap a shared log for a FIFO: root's vram must not block in open() waiting for a
    writer. (A stream is read from `-` and a pipe.)"""
    fifo = tmp_path / "job.log"
    os.mkfifo(fifo)
    result = run_vram("doctor", str(fifo), "--no-live", timeout=30)
    assert result.rc == 2 and "is a FIFO, not a log file" in result.err
    assert len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_timeline_path_another_user_planted_is_refused_and_nothing_written_through_it(tmp_path, planted):
    snapshot = os.path.join(os.path.dirname(__file__), "..", "fixtures", "snapshots", "train_step_recorded.pickle")
    out = tmp_path / "tl.svg"
    victim = plant(out, planted)
    result = run_vram("doctor", snapshot, "--no-live", "--timeline", str(out), timeout=30)
    assert result.rc == 2 and "--timeline" in result.err and "cannot write it" in result.err, result.err
    assert victim.read_text() == "keep me\n"
    os.unlink(out)
    result = run_vram("doctor", snapshot, "--no-live", "--timeline", str(out))
    assert result.rc == 0 and out.read_text(encoding="utf-8").startswith("<svg")


def test_a_directory_named_like_a_snapshot_is_one_line(tmp_path):
    (tmp_path / "oom.pickle").mkdir()  # read as a snapshot by its name
    result = run_vram("doctor", str(tmp_path / "oom.pickle"), "--no-live")
    assert result.rc == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert "not a regular file" in result.err


def test_shared_containers_built_from_a_few_bytes_are_refused_as_their_size(tmp_path):
    """A "billion laughs" pickle: 2**30 values from a few hundred bytes of shared lists. Refused for
    its size; each shared list is looked into once (walking them all took ~100 s before)."""
    import pickle

    from vramkit.doctor import snapshot as S

    laughs: list = [0]
    for _ in range(30):
        laughs = [laughs, laughs]
    with pytest.raises(S.SnapshotError, match="more than 200,000,000 values"):
        S.loads(pickle.dumps({"segments": laughs, "device_traces": []}))
    shared = {"filename": "train.py", "line": 1, "name": "f"}  # torch shares its frames between blocks
    snapshot = {"segments": [], "device_traces": [[{"frames": [shared] * 3} for _ in range(1000)]]}
    assert S.loads(pickle.dumps(snapshot)) == snapshot
