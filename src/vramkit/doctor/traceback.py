"""Where an out-of-memory error happened: the traceback around it, read into a training phase.

The same OOM message means different things in different places: in `loss.backward()` the
activations are the problem, in DataParallel's gather GPU 0 collects every replica's output, in
the HF Trainer's evaluation loop the predictions of the whole evaluation set pile up on the GPU.
`phase_of(frames)` names the phase from the frames' files, functions and source lines:

    forward, backward, optimizer, eval_gather, dataparallel, pin_memory, checkpoint_load, generate

Frames come from a log (`frames_before(text, offset)`, robust to tqdm bars, "[rank0]:" prefixes,
ANSI colour, Windows paths, chained exceptions and DataParallel's re-raised replica errors) or from
a live exception (`frames_of_exception(exc)`, used by oom_guard). Pure text: no torch import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..procs import sanitize
from .oom import ANSI_ESCAPE

_RANK = re.compile(r"^\s*(\[(?:rank|default)\d+\]:)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]{1,1000})", line (?P<line>\d{1,9}), in (?P<func>[^\s]+)')
_HEADER = "Traceback (most recent call last):"
_ORIGINAL = "Original Traceback (most recent call last):"  # torch._utils.ExceptionWrapper (DataParallel, DataLoader)
_CHAINED = ("The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:")
TRACEBACK_WINDOW = 64 * 1024  # characters before the message: the longest real tracebacks are ~20 KB
MAX_FRAMES = 400
# Tracebacks read up a chain ("During handling...", "Original Traceback"): real chains are a few
# deep; a log of thousands would push the message's own frames out of MAX_FRAMES.
MAX_CHAINED = 16


@dataclass(frozen=True)
class Frame:
    """One traceback frame: `File "file", line N, in func` and the source line under it."""

    file: str
    line: int
    func: str
    code: str = ""

    @property
    def path(self) -> str:
        """The file with forward slashes (Windows paths too), for matching library files."""
        return self.file.replace("\\", "/")

    @property
    def in_library(self) -> bool:
        p = self.path
        return "/site-packages/" in p or "/dist-packages/" in p or "/lib/python3" in p or p.startswith("<frozen")

    def short(self) -> str:
        """`code` at name:line, for one line of output."""
        name = self.path.rsplit("/", 1)[-1]
        where = f"{name}:{self.line}"
        code = self.code.split("  # ", 1)[0]  # a trailing comment is not the call
        code = code if len(code) <= 80 else code[:79] + "…"
        return f"{code} ({where})" if code else f"{self.func} ({where})"


@dataclass(frozen=True)
class Phase:
    """Where the allocation failed: the phase, what in the frames says so, and the user's own line."""

    id: str  # one of PHASES
    detail: str | None  # e.g. "gather to GPU 0", "multi-tensor Adam"
    evidence: Frame  # the innermost frame that names the phase
    user_frame: Frame | None  # the innermost frame of the user's own code
    evaluating: bool = False  # inside an evaluation loop (HF Trainer evaluate / prediction_step)
    grad_off: bool = False  # that loop runs under torch.no_grad() (HF's prediction_step, Lightning's loops)

    @property
    def title(self) -> str:
        text = PHASES[self.id]
        return f"{text} ({self.detail})" if self.detail else text

    def sentence(self) -> str:
        """Where the allocation failed and the user's own line that led there (text from a log:
        sanitized)."""
        text = f"Failed in the {self.title}: {sanitize(self.evidence.short())}"
        if self.user_frame is not None and self.user_frame != self.evidence:
            text += f", from {sanitize(self.user_frame.short())}"
        return text


PHASES = {
    "forward": "forward pass",
    "backward": "backward pass",
    "optimizer": "optimizer step",
    "eval_gather": "evaluation loop's gather of predictions",
    "dataparallel": "DataParallel scatter/gather",
    "pin_memory": "DataLoader pin-memory thread",
    "checkpoint_load": "checkpoint load",
    "generate": "generation",
}


def _clean(line: str) -> str:
    return ANSI_ESCAPE.sub("", line)


def _lines(text: str) -> list[str]:
    """Lines as a terminal would end them: tqdm's \\r redraws split like newlines, colour removed."""
    return [_clean(part) for part in re.split(r"\r\n|\r|\n", text)]


def _frames_in(lines: list[str]) -> list[Frame]:
    """The frames among `lines` (outermost first), with the source line after each."""
    frames: list[Frame] = []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if not m:
            continue
        code = ""
        if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) and lines[i + 1].startswith("    "):
            code = lines[i + 1].strip()[:300]
        frames.append(Frame(m.group("file"), int(m.group("line")), m.group("func")[:200], code))
    return frames[-MAX_FRAMES:]


def _strip_prefix(line: str, prefix: str | None) -> str | None:
    """The line without the rank prefix of the message's own rank; None: another rank's line."""
    m = _RANK.match(line)
    if prefix is None:
        return line[m.end():] if m else line
    if not m or m.group(1) != prefix:
        return None
    return line[m.end():]


def frames_before(text: str, offset: int) -> list[Frame]:
    """The frames of the traceback that ends with the message at `offset` (outermost first).

    Chained exceptions above it ("The above exception was the direct cause...") and the outer
    traceback of an error re-raised from a DataParallel replica or a DataLoader thread ("Original
    Traceback") are read too: their frames are where the allocation happened. Only the message's
    own rank's lines count when a launcher prefixed them ("[rank1]: ...").
    """
    start = max(0, offset - TRACEBACK_WINDOW)
    line_start = text.rfind("\n", start, offset) + 1
    head = _clean(text[line_start:offset])
    m = _RANK.match(head)
    prefix = m.group(1) if m else None
    lines = _lines(text[start:line_start])
    current: list[str] = []  # lines of the traceback being read, bottom-up
    groups: list[list[str]] = []  # tracebacks, in the order they were read
    # Right above the message only frames and their source lines may stand: anything else means the
    # message has no traceback of its own (a logged, caught error), and one further up is another's.
    # Above a chained separator or a re-raise, the other exception's message comes first.
    in_frames = True
    i = len(lines) - 1
    while i >= 0:
        line = _strip_prefix(lines[i], prefix)
        i -= 1
        if line is None or not line.strip():
            continue
        if _HEADER in line:  # `in`: a tqdm bar may stand in front of it on the same line
            groups.append([line.strip(), *reversed(current)])
            current = []
            if len(groups) >= MAX_CHAINED:
                break
            nxt = _previous_text(lines, i, prefix)
            if nxt is not None and nxt[1].strip() in _CHAINED:
                i, in_frames = nxt[0] - 1, False  # the chained exception's traceback is above the separator
                continue
            if _ORIGINAL in line:
                in_frames = False  # keep reading up: the outer traceback of the re-raised error
                continue
            break
        framed = bool(_FRAME.match(line)) or line.startswith("    ")
        if in_frames and not framed:
            break
        in_frames = in_frames or framed
        current.append(line)
    if not groups:
        return []  # no traceback header: frames of unrelated output are no evidence
    return _frames_in(_order(groups))


def _previous_text(lines: list[str], i: int, prefix: str | None) -> tuple[int, str] | None:
    """The nearest non-blank line at or above i (of the message's rank)."""
    while i >= 0:
        line = _strip_prefix(lines[i], prefix)
        if line is not None and line.strip():
            return i, line
        i -= 1
    return None


def _order(groups: list[list[str]]) -> list[str]:
    """Groups were found bottom-up. Above an "Original Traceback" is the outer traceback of the
    re-raise (outermost); above a chained traceback is its cause, raised inside the handler's try
    block (innermost)."""
    out = groups[0]
    for lower, upper in zip(groups, groups[1:]):
        out = upper + out if _ORIGINAL in lower[0] else out + upper
    return out


def frames_of_exception(exc: BaseException) -> list[Frame]:
    """The frames of a live exception and of the exceptions it chains (the causes innermost)."""
    import traceback

    frames: list[Frame] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(frames) < MAX_FRAMES:
        seen.add(id(current))
        summary = traceback.extract_tb(current.__traceback__, limit=MAX_FRAMES)
        frames += [Frame(s.filename, s.lineno or 0, s.name, (s.line or "").strip()[:300]) for s in summary]
        current = current.__cause__ or current.__context__
    return frames


# (path suffix, function names or None for any) -> phase, detail; matched innermost frame first
_LIBRARY_MARKERS: tuple[tuple[str, tuple[str, ...] | None, str, str | None], ...] = (
    ("torch/nn/parallel/comm.py", ("gather",), "dataparallel", "gather to GPU 0"),
    ("torch/nn/parallel/comm.py", ("scatter", "broadcast_coalesced", "broadcast"), "dataparallel", "scatter"),
    ("torch/nn/parallel/_functions.py", None, "dataparallel", None),
    ("torch/nn/parallel/scatter_gather.py", ("gather", "gather_map"), "dataparallel", "gather to GPU 0"),
    ("torch/nn/parallel/scatter_gather.py", None, "dataparallel", "scatter"),
    ("torch/nn/parallel/replicate.py", None, "dataparallel", "replicate"),
    ("torch/nn/parallel/parallel_apply.py", None, "dataparallel", "a replica's forward"),
    ("torch/nn/parallel/data_parallel.py", ("gather",), "dataparallel", "gather to GPU 0"),
    ("torch/nn/parallel/data_parallel.py", ("scatter",), "dataparallel", "scatter"),
    ("torch/nn/parallel/data_parallel.py", ("replicate",), "dataparallel", "replicate"),
    ("torch/utils/data/_utils/pin_memory.py", None, "pin_memory", None),
    ("transformers/trainer_pt_utils.py", ("nested_concat", "torch_pad_and_concatenate", "add",
                                          "distributed_concat", "nested_numpify", "to_cpu_and_numpy"),
     "eval_gather", "nested_concat"),
    ("accelerate/accelerator.py", ("gather_for_metrics", "gather", "pad_across_processes"), "eval_gather",
     "gather_for_metrics"),
    ("transformers/cache_utils.py", None, "generate", "KV cache update"),
    ("transformers/generation/utils.py", None, "generate", None),
    ("torch/_tensor.py", ("backward",), "backward", None),
    ("torch/autograd/__init__.py", ("backward", "grad"), "backward", None),
    ("torch/autograd/graph.py", ("_engine_run_backward",), "backward", None),
    ("accelerate/accelerator.py", ("backward",), "backward", None),
    ("torch/optim/", ("_multi_tensor_adam", "_multi_tensor_adamw", "_multi_tensor_sgd"), "optimizer",
     "multi-tensor (foreach) update"),
    ("torch/optim/", ("_init_group",), "optimizer", "creating the optimizer state"),
    ("torch/optim/", None, "optimizer", None),
    ("accelerate/optimizer.py", ("step",), "optimizer", None),
    ("torch/serialization.py", None, "checkpoint_load", "torch.load"),
    ("safetensors/torch.py", None, "checkpoint_load", "safetensors"),
    ("torch/nn/modules/module.py", ("load_state_dict", "_load_from_state_dict"), "checkpoint_load",
     "load_state_dict"),
    ("transformers/modeling_utils.py", ("from_pretrained", "_load_pretrained_model", "load_state_dict",
                                        "_load_state_dict_into_meta_model", "load_shard_file"),
     "checkpoint_load", "from_pretrained"),
)
# The user's own source lines, for frames in their code (no library frame below them).
_CODE_MARKERS: tuple[tuple[re.Pattern[str], str, str | None], ...] = (
    (re.compile(r"\.backward\(|accelerator\.backward\(|scaler\.scale\([^)]*\)\.backward"), "backward", None),
    (re.compile(r"\boptim\w*\.step\(|\bopt\.step\(|scaler\.step\("), "optimizer", None),
    (re.compile(r"torch\.load\(|\.load_state_dict\(|\bload_file\(|from_pretrained\("), "checkpoint_load", None),
    (re.compile(r"\.generate\(|past_key_values"), "generate", None),
    (re.compile(r"torch\.cat\(.*\b(logits|preds|predictions|outputs|all_)"), "eval_gather", "torch.cat of outputs"),
)
_FORWARD_FUNCS = ("_call_impl", "_wrapped_call_impl", "forward")
# Library evaluation code known to run the model under torch.no_grad() / inference_mode(): a user's
# own evaluate() is not (it may be the very reason for the OOM).
_GRAD_OFF = (("/transformers/trainer.py", "prediction_step"),
             ("/lightning/pytorch/loops/evaluation_loop.py", None),
             ("/pytorch_lightning/loops/evaluation_loop.py", None))
_EVAL_FUNCS = ("evaluation_loop", "prediction_step", "evaluate", "predict", "validation_step", "test_step")


def _library_phase(frame: Frame) -> tuple[str, str | None] | None:
    path = frame.path
    for suffix, funcs, phase, detail in _LIBRARY_MARKERS:
        found = path.endswith(suffix) if suffix.endswith(".py") else f"/{suffix}" in path
        if found and (funcs is None or frame.func in funcs):
            return phase, detail
    return None


def _code_phase(frame: Frame) -> tuple[str, str | None] | None:
    for pattern, phase, detail in _CODE_MARKERS:
        if pattern.search(frame.code):
            return phase, detail
    return None


def _runs_closure(frame: Frame) -> bool:
    """An optimizer's `loss = closure()`: what failed below it is the step's forward or backward."""
    return "/torch/optim/" in frame.path and "closure(" in frame.code


def phase_of(frames: list[Frame]) -> Phase | None:
    """The phase the frames (outermost first) were in when the allocation failed; None: no frames
    say. The innermost frame that names a phase decides; a module's forward counts only when no
    frame names anything more specific."""
    if not frames:
        return None
    user = next((f for f in reversed(frames) if not f.in_library), None)
    evaluating = any(f.func in _EVAL_FUNCS for f in frames)
    grad_off = any(f.path.endswith(suffix) and func in (None, f.func) for f in frames for suffix, func in _GRAD_OFF)
    in_forward = False
    for frame in reversed(frames):
        if _runs_closure(frame):  # Lightning, LBFGS: forward and backward run inside optimizer.step(closure)
            break
        found = _library_phase(frame) or (_code_phase(frame) if not frame.in_library else None)
        if found is not None:
            return Phase(found[0], found[1], frame, user, evaluating, grad_off)
        in_forward = in_forward or frame.func in _FORWARD_FUNCS
    if in_forward:  # the innermost frame is where it allocated (an attention matmul, a layer's output)
        return Phase("forward", "in evaluation" if evaluating else None, frames[-1], user, evaluating, grad_off)
    return None
