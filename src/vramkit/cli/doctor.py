"""vram doctor: explain an out-of-memory error from a log, or check this machine for the usual causes."""

from __future__ import annotations

import argparse
import io
import os
import stat
import sys
from dataclasses import dataclass

from ..i18n import N_, _
from ..render.style import Style, style_for, terminal_width
from ..units import format_size
from .commands import COMMANDS
from .common import (
    PRECISION_HELP,
    PRECISIONS,
    Failure,
    HelpFormatter,
    UsageError,
    check_gpus,
    help_values,
    open_for,
    parse_gpu_list,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, as in cli/common.py
if TYPE_CHECKING:  # a log read with --no-live opens no machine: gpu_state and nvml stay unloaded
    from typing import Any, BinaryIO

    from ..doctor.explain import SavingsHook
    from ..gpu_state import Snapshot
    from .common import Subparsers

HELP = COMMANDS["doctor"]
DESCRIPTION = N_("""\
With a log file (or - for stdin): find the LAST out-of-memory error in it (a traceback, a
training log, notebook output) and explain it: what was asked for, what was free, what this
job held (allocated by PyTorch / reserved but unallocated / outside PyTorch), what other
processes held (named, from this machine's live data when it is the same machine), the main
cause (fragmentation, other processes, the job's own usage, or a single request larger than
the GPU), and fixes ranked with the memory each saves where that is known.

Every form PyTorch has printed is read: >= 2.2, 2.1, 1.4-2.0, 1.0-1.3, HIP, MPS, cuBLAS and
cuDNN allocation failures, and the CPU allocator's messages (docs/doctor.md). The traceback
above the message says where the allocation failed (forward, backward, optimizer step, the
evaluation loop's gather, DataParallel's gather to GPU 0, the pin-memory thread, loading a
checkpoint, generation's KV cache), and the fixes are ranked for that place.

With a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot(), any torch since 1.13; a
pickle is read without running anything in it): what was live at the peak, by category
(parameters, gradients, optimizer state, activations, ...; free space in the allocator's
segments), by your source line, and the largest blocks; --timeline draws it over time.

Without a log: check this machine: GPUs nearly full, defunct or idle processes holding
memory, other users on the GPUs you chose, CUDA_VISIBLE_DEVICES pitfalls, DataParallel
imbalance. Only the GPUs in CUDA_VISIBLE_DEVICES are checked when it is set.

examples:
  vram doctor train.log              why did my job run out of memory?
  python train.py 2>&1 | vram doctor -
  vram doctor train.log --gpu 3      the job ran on NVML GPU 3 (CUDA_VISIBLE_DEVICES=3)
  vram doctor train.log --model llama-3-8b --batch 4 --seq 2048 --precision bf16
  vram doctor train.log --json | jq '.cause, .fixes[0]'
  vram doctor oom.pickle             a PyTorch memory snapshot: what was live at the peak
  vram doctor oom.pickle --timeline mem.svg   memory over time, stacked by category
  vram doctor                        check this machine
  vram doctor --simulate demo        the checklist on the bundled simulated server
""")


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=HelpFormatter)
    p.add_argument("log", nargs="?", metavar="LOGFILE", help=N_("a log or traceback with the error; - reads stdin"))
    p.add_argument("--json", action="store_true", help=N_("print JSON (keys: docs/doctor.md)"))
    p.add_argument("--gpu", metavar="LIST", help=N_("log: the NVML GPU the job ran on; checklist: only these GPUs"))
    p.add_argument("--db", metavar="PATH", help=N_("checklist: the history that says how long processes have been idle "
                   "(default: the recorder's; $VRAM_DB)"))
    p.add_argument("--pid", type=int, metavar="PID", help=N_("log: the job's pid as NVML lists it (containers)"))
    p.add_argument("--no-live", action="store_true", help=N_("log: do not read this machine's GPUs"))
    p.add_argument("--model", metavar="NAME", help=N_("log: the model, for the estimator's savings"))
    # --batch/--seq as in vram estimate and plan (documented); --batch-size/--seq-len still work.
    p.add_argument("--batch", "--batch-size", dest="batch", type=int, metavar="N",
                   help=N_("log: the micro-batch per GPU, for the estimator's savings"))
    p.add_argument("--seq", "--seq-len", dest="seq", type=int, metavar="N",
                   help=N_("log: the sequence length, for the estimator"))
    # the estimator's spellings, as vram estimate's (a wrong one is refused even without --batch)
    help_values(p.add_argument("--precision", metavar="P", choices=PRECISIONS,
                               help=N_("log: how the job ran, for the estimator: %(precisions)s (default "
                                       "%(assumed)s: a log does not say, and a job that ran out of memory most often "
                                       "ran in it; estimate and plan, which plan a new run, assume bf16)")),
                assumed=_assumed_precision, precisions=lambda: _(PRECISION_HELP))
    p.add_argument("--timeline", metavar="FILE", help=N_("snapshot: draw memory over time into FILE (.svg, or .html "
                   "with the SVG inside)"))
    p.add_argument("--by", choices=("category", "line"), default="category",
                   help=N_("snapshot: stack the timeline by category (default) or by your source line"))
    p.set_defaults(run=run, param_flags={"batch": "--batch", "seq": "--seq"})


def _assumed_precision() -> str:
    from ..estimator.savings import DEFAULT_PRECISION

    return DEFAULT_PRECISION


def _current_user() -> str | None:
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return None


# A log is read in chunks, keeping only its last LOG_WINDOW bytes: the error that ended a job is
# near the end of its log, and a multi-GB log (or /dev/stdin that never ends) must not be held in
# memory. What came before the window is counted for line numbers up to COUNT_LIMIT bytes. A
# stream (stdin, a pipe) is read to its end or STREAM_LIMIT bytes, whichever comes first; a
# regular file is read from LOG_WINDOW bytes before its end.
LOG_WINDOW = 4 * 1024**2
LINE_SKIP_LIMIT = 64 * 1024  # the window starts at the first newline only when one is this near
STREAM_LIMIT = 1024**3
COUNT_LIMIT = 256 * 1024**2
_CHUNK = 1024**2


@dataclass
class LogText:
    """The part of a log that was read: its last bytes, decoded."""

    text: str
    source: str
    line_offset: int | None = 0  # lines before `text` (None: not counted)
    skipped: int = 0  # bytes before `text` that were not kept
    total: int = 0  # bytes in the log (read, or the file's size)
    truncated: bool = False  # a stream that was not read to its end

    def note(self) -> str | None:
        """What was skipped, for the output (None: the whole log was read)."""
        if self.truncated:
            return _("{source}: stopped reading after {size} (it may never end); only its last {searched} were "
                     "searched").format(source=self.source, size=format_size(self.total),
                                        searched=format_size(len(self.text.encode("utf-8", "replace"))))
        if self.skipped:
            return _("{source} has {size}: only its last {searched} were searched (the error that ended a job "
                     "is near the end of its log)").format(source=self.source, size=format_size(self.total),
                                                           searched=format_size(self.total - self.skipped))
        return None


def _read_log(path: str) -> LogText:
    """The log's tail; every message names it by its sanitized name (a file name in a shared
    directory is another user's text: escapes in it must not reach the terminal)."""
    if path == "-":
        isatty = getattr(sys.stdin, "isatty", None)  # embedding or tests may give a bare stream
        if isatty is not None and isatty():  # not a pipe: say why nothing happens yet
            print(_("vram doctor: reading the log from the terminal until Ctrl-D (or pipe it: "
                    "python train.py 2>&1 | vram doctor -)"), file=sys.stderr, flush=True)
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream without bytes underneath (tests, embedding)
            return _tail(io.BytesIO(sys.stdin.read(STREAM_LIMIT).encode("utf-8", "replace")), "stdin")
        return _tail(stream, "stdin")
    from ..procs import sanitize

    name = sanitize(path)
    try:
        # Non-blocking: opening a FIFO another user put where a log was must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise UsageError((
                _("{name} is a directory, not a log file (for a stream, use - and a pipe)")
                if stat.S_ISDIR(info.st_mode)
                else _("{name} is a FIFO, not a log file (for a stream, use - and a pipe)")
                if stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode)
                else _("{name} is a device, not a log file (for a stream, use - and a pipe)")).format(name=name))
        with open(fd, "rb") as f:
            return _tail(f, name, size=info.st_size)
    except OSError as e:  # also a read that would block (a special file: /proc/kmsg)
        raise UsageError(_("cannot read {name}: {error}").format(name=name, error=e.strerror or e)) from None


def _tail(f: BinaryIO, source: str, size: int | None = None) -> LogText:
    """The last LOG_WINDOW bytes of `f` (a regular file of `size` bytes, or a stream)."""
    newlines = 0
    skipped = 0
    truncated = False
    if size is not None and size > LOG_WINDOW:
        skipped = size - LOG_WINDOW
        if skipped <= COUNT_LIMIT:
            while (done := f.tell()) < skipped:
                newlines += f.read(min(_CHUNK, skipped - done)).count(b"\n")
        else:
            f.seek(skipped)
        data = f.read(LOG_WINDOW)
        total = size
    else:
        buf = bytearray()
        total = 0
        while chunk := f.read(_CHUNK):
            total += len(chunk)
            buf += chunk
            if len(buf) > 2 * LOG_WINDOW:
                drop = len(buf) - LOG_WINDOW
                if skipped + drop <= COUNT_LIMIT:
                    newlines += buf.count(b"\n", 0, drop)
                skipped += drop
                del buf[:drop]
            if total >= STREAM_LIMIT:
                truncated = True
                break
            if len(chunk) < _CHUNK:  # a short read is the end (a terminal's Ctrl-D: not twice)
                break
        if len(buf) > LOG_WINDOW:
            drop = len(buf) - LOG_WINDOW
            if skipped + drop <= COUNT_LIMIT:
                newlines += buf.count(b"\n", 0, drop)
            skipped += drop
            del buf[:drop]
        data = bytes(buf)
    # Start at a line, not inside a character: at the first newline when it is near the start;
    # a window that begins inside one very long line (a progress bar without newlines) is kept
    # whole, less the continuation bytes of a character cut in two.
    if skipped and 0 <= (cut := data.find(b"\n", 0, LINE_SKIP_LIMIT)):
        newlines += 1
        skipped += cut + 1
        data = data[cut + 1:]
    elif skipped:
        start = 0
        while start < min(len(data), 4) and 0x80 <= data[start] <= 0xBF:
            start += 1
        skipped += start
        data = data[start:]
    return LogText(_unwrap_json_lines(_decode(data)), source, newlines if skipped <= COUNT_LIMIT else None, skipped,
                   total, truncated)


_JSON_LINE = '{"log":'


def _unwrap_json_lines(text: str) -> str:
    """A container's log as Docker's json-file driver keeps it (/var/lib/docker/containers/ID/ID-json.log:
    `{"log": "a line\\n", "stream": "stderr", "time": ...}` a line) as the lines the job printed; any
    other text as it is."""
    if not text[:200].lstrip().startswith(_JSON_LINE):
        return text
    import json

    out = []
    for line in text.splitlines(keepends=True):
        logged = None
        if line.startswith(_JSON_LINE):
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # cut short (the window's first line), or not JSON at all
                record = None
            logged = record.get("log") if isinstance(record, dict) else None
        out.append(logged if isinstance(logged, str) else line)
    return "".join(out)


def _decode(data: bytes) -> str:
    """The log's text: UTF-8, or UTF-16 where it is that (Windows PowerShell 5.1's `python train.py >
    train.log` writes UTF-16LE with a byte-order mark): a BOM, or a NUL in every other byte (the high
    byte of each ASCII character, as in most of a log)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    sample = data[:4096]
    if len(sample) >= 16:
        half = len(sample) // 2
        # the NULs at the odd bytes, or at the even ones where the window starts one byte into a
        # character (after a newline's low byte)
        for skip in (0, 1):
            nuls, others = sample[1 - skip::2], sample[skip::2]
            if nuls.count(0) >= 0.9 * half and others.count(0) <= 0.1 * half:
                body = data[skip:]
                return body[:len(body) // 2 * 2].decode("utf-16-le", errors="replace")
    return data.decode("utf-8", errors="replace")


def _live(args: argparse.Namespace) -> tuple[Snapshot | None, str | None]:
    if args.no_live:
        return None, _("live data not read (--no-live)")
    from ..nvml.backend import NvmlUnavailable

    try:
        machine = open_for(args)
    except NvmlUnavailable as e:
        return None, _("no live data: {reason}").format(reason=e)
    try:
        return machine.snapshot(), None
    finally:
        machine.close()


def _savings_hook(args: argparse.Namespace, context: dict[str, Any]) -> tuple[SavingsHook | None, str | None]:
    """The estimator plugs in here: vramkit.estimator.doctor_savings(fix_id, context) -> bytes | None,
    anchored to the message in `context` (estimator/savings.py)."""
    if not (args.model or args.batch):
        return None, None
    if not (args.model and args.batch):
        return None, _("give both --model and --batch for the estimator's savings of model-dependent fixes")
    from ..estimator import EstimateError, doctor_savings, estimate, resolve
    from ..estimator.savings import anchor_note, baseline

    try:
        spec = resolve(args.model)  # checked now: doctor_savings() answers None for a model it cannot resolve
    except EstimateError as e:
        raise UsageError(e.message, param="model") from e
    estimate(spec, **baseline(context))  # the setup checked as vram estimate checks it (names the flag)
    return doctor_savings, anchor_note(context)


def run(args: argparse.Namespace) -> int:
    style = style_for(sys.stdout, getattr(args, "no_color", False))
    if args.log is None:
        return _checklist(args, style)
    if _is_snapshot(args.log):
        return _snapshot(args, style)
    if args.timeline is not None:
        raise UsageError(_("--timeline needs a PyTorch memory snapshot (a .pickle from _dump_snapshot), not a log"))
    from ..doctor.explain import explain
    from ..doctor.oom import find_oom
    from ..doctor.traceback import place_of
    from ..render.doctor_view import diagnosis_json, render_diagnosis

    for dest, flag in (("batch", "--batch"), ("seq", "--seq")):
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise UsageError(_("{flag}: must be at least 1").format(flag=flag))
    gpu = None
    if args.gpu is not None:
        gpus = parse_gpu_list(args.gpu)
        if len(gpus) != 1:
            raise UsageError(_("--gpu: with a log, give the one GPU the job ran on"))
        gpu = gpus[0]
    log = _read_log(args.log)
    source = log.source
    report = find_oom(log.text)
    skipped_note = log.note()
    if report is None:
        raise Failure(_("no out-of-memory error found in {source} ({note})").format(source=source, note=skipped_note)
                      if skipped_note else _("no out-of-memory error found in {source}").format(source=source))
    if report.line is not None:
        report.line = None if log.line_offset is None else report.line + log.line_offset
    snap, live_note = _live(args)
    if gpu is not None and snap is not None:
        check_gpus(snap, [gpu])
    context = {"model": args.model, "batch_size": args.batch, "seq_len": args.seq,
               "precision": args.precision, "report": report}
    hook, hook_note = _savings_hook(args, context)
    phase = place_of(log.text, report.offset, report.kind) if report.offset is not None else None
    ex = explain(report, snap, gpu=gpu, job_pid=args.pid, me=_current_user(), savings=hook, context=context,
                 phase=phase)
    if hook_note:
        ex.notes.append(hook_note)
    if skipped_note:
        ex.notes.append(skipped_note)
    if args.json:
        print(diagnosis_json(ex, source, snap, live_note))
    else:
        print(render_diagnosis(ex, source, style, terminal_width(), live_note))
    return 0


def _checklist(args: argparse.Namespace, style: Style) -> int:
    from ..doctor.checklist import run_checklist
    from ..render.doctor_view import checklist_json, render_checklist

    for dest, flag in (("pid", "--pid"), ("model", "--model"), ("batch", "--batch"), ("seq", "--seq"),
                       ("precision", "--precision")):
        if getattr(args, dest) is not None:
            raise UsageError(_("{flag} needs a LOGFILE").format(flag=flag))
    from ..doctor.checklist import IDLE_MIN_AGE
    from ..history.recorded_idle import seeded_collector

    machine = open_for(args)
    try:
        # Idle holders are judged by how long they have been idle, where the recorder knows.
        collector, recorded = seeded_collector(machine, args.db)
        snap = collector.snapshot()
        idle_known = recorded.covers(snap.time, IDLE_MIN_AGE)
        machine.read_health(snap, settle=0)  # the checks need no link traffic rate
    finally:
        machine.close()
    wanted = None
    if args.gpu is not None:
        wanted = parse_gpu_list(args.gpu)
        check_gpus(snap, wanted)
    result = run_checklist(snap, only=wanted, idle_known=idle_known, pids_visible=machine.backend.pids_visible())
    if idle_known:
        result.notes.append(recorded.note)
    if args.json:
        print(checklist_json(result, snap))
    else:
        print(render_checklist(result, snap, style, terminal_width()))
    return 0


def _is_snapshot(path: str) -> bool:
    """A pickle by its first bytes, or a .pickle/.pkl name (read without importing pickle: a log costs nothing)."""
    if path == "-":
        return False
    if path.lower().endswith((".pickle", ".pkl")):
        return True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False  # the log reader says why
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 2)
    except OSError:  # a read that would block (a special file: /proc/kmsg): the log reader says why
        return False
    finally:
        os.close(fd)
    return head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")


def _snapshot(args: argparse.Namespace, style: Style) -> int:
    """vram doctor SNAPSHOT: what was live at the peak; --timeline FILE draws it over time."""
    from ..doctor.snapshot import SnapshotError, parse, peak_report, read_file, timeline
    from ..procs import sanitize
    from ..render.snapshot_view import peak_json, render_html, render_peak, render_svg

    name = sanitize(args.log)
    if args.timeline is not None and not args.timeline.lower().endswith((".svg", ".html", ".htm")):
        raise UsageError(_("--timeline: give a .svg or .html file name"))
    try:
        snap = parse(read_file(args.log, name))
    except SnapshotError as e:
        raise UsageError(e.message) from None
    reports = [peak_report(d) for d in snap.devices]
    if args.timeline is not None:
        drawn = [d for d in snap.devices if d.entries] or snap.devices[:1]
        if not drawn:
            raise Failure(_("{name}: nothing to draw (the snapshot is empty)").format(name=name))
        tl = timeline(drawn[0], by="category" if args.by == "category" else "source")
        title = (_("{name}: device {device}, by category") if tl.by == "category"
                 else _("{name}: device {device}, by source line")).format(name=name, device=tl.device)
        text = render_html(tl, title) if args.timeline.lower().endswith((".html", ".htm")) else render_svg(tl, title)
        from ..output_files import write_new

        write_new(os.path.abspath(args.timeline), text.encode("utf-8"), param="timeline")
    if args.json:
        print(peak_json(snap, reports, name))
    else:
        print(render_peak(snap, reports, name, style))
        if args.timeline is not None:
            print("\n" + _("timeline written to {name}").format(name=sanitize(args.timeline)))
    return 0
