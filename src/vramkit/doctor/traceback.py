"""Where an out-of-memory error happened: the traceback around it, read into a training phase.

The same OOM message means different things in different places: in `loss.backward()` the
activations are the problem, in DataParallel's gather GPU 0 collects every replica's output, in
the HF Trainer's evaluation loop the predictions of the whole evaluation set pile up on the GPU.
`phase_of(frames)` names the phase from the frames' files, functions and source lines:

    forward, backward, optimizer, eval_gather, dataparallel, pin_memory, checkpoint_load, to_device,
    generate

Frames come from a log (`frames_before(text, offset)`, robust to tqdm bars, "[rank0]:" prefixes,
ANSI colour, Windows paths, chained exceptions and DataParallel's re-raised replica errors) or from
a live exception (`frames_of_exception(exc)`, used by oom_guard). Pure text: no torch import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..i18n import N_, _
from ..procs import sanitize
from .oom import ANSI_ESCAPE, RANK_PREFIX

_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]{1,1000})", line (?P<line>\d{1,9}), in (?P<func>[^\s]+)')
_HEADER = "Traceback (most recent call last)"  # IPython prints it without the colon, after the exception's name
# IPython / Jupyter / Colab frames: `FILE in func(args)` (IPython < 8), `File FILE:LINE, in func(args)` (8+),
# `Cell In[5], line 3` / `Input In [5], in <cell line: 3>()` (the notebook cell), then the source with the
# current line marked `---->` / `-->`.
_IPY_FRAME = re.compile(r"^(?:File (?P<file8>[^\n]{1,1000}?):(?P<line8>\d{1,9}), in (?P<func8>[\w.<>]{1,200})"
                        r"|(?P<cell>Cell In ?\[\d{1,9}\], line (?P<cline>\d{1,9}))"
                        r"|(?P<input>Input In ?\[\d{1,9}\], in (?P<ifunc>[^\n]{1,200}))"
                        r"|(?P<file>(?:/|~|<ipython-input-|[A-Za-z]:\\)[^\n]{0,1000}?\.py|<ipython-input-[\w-]{1,80}>)"
                        r" in (?P<func>[\w.<>]{1,200})(?:\(|$))")
_IPY_ARROW = re.compile(r"^-{1,6}> ?\s{0,8}(?P<line>\d{1,9}) ?(?P<code>.*)$")
_IPY_CONTEXT = re.compile(r"^\s{0,8}\d{1,9}( |$)")
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
    detail: str | None  # e.g. "gather to GPU 0", "multi-tensor Adam" (marked N_: translated in title)
    evidence: Frame  # the innermost frame that names the phase
    user_frame: Frame | None  # the innermost frame of the user's own code
    evaluating: bool = False  # inside an evaluation loop (HF Trainer evaluate / prediction_step)
    grad_off: bool = False  # that loop runs under torch.no_grad() (HF's prediction_step, Lightning's loops)
    # an optimizer or a training loop is among the frames (torch.optim's own no_grad wraps a closure that
    # runs a training step with autograd on): a forward under no_grad outside one is inference
    training: bool = False

    @property
    def title(self) -> str:
        text = _(PHASES[self.id])
        return _("{phase} ({detail})").format(phase=text, detail=_(self.detail)) if self.detail else text

    def sentence(self) -> str:
        """Where the allocation failed and the user's own line that led there (text from a log:
        sanitized)."""
        if self.user_frame is not None and self.user_frame != self.evidence:
            return _("Failed in the {phase}: {code}, from {user_code}").format(
                phase=self.title, code=sanitize(self.evidence.short()), user_code=sanitize(self.user_frame.short()))
        return _("Failed in the {phase}: {code}").format(phase=self.title, code=sanitize(self.evidence.short()))


PHASES = {
    "forward": N_("forward pass"),
    "backward": N_("backward pass"),
    "optimizer": N_("optimizer step"),
    "eval_gather": N_("evaluation loop's gather of predictions"),
    "dataparallel": N_("DataParallel scatter/gather"),
    "pin_memory": N_("DataLoader pin-memory thread"),
    "checkpoint_load": N_("checkpoint load"),
    "to_device": N_("model's move to the GPU"),
    "generate": N_("generation"),
    "kv_cache": N_("reservation of the KV cache and compute buffers"),
    "param_gather": N_("gathering of sharded parameters"),  # its detail says whose: ZeRO-3, FSDP, all-gather
}


def _clean(line: str) -> str:
    return ANSI_ESCAPE.sub("", line)


def _lines(text: str) -> list[str]:
    """Lines as a terminal would end them: tqdm's \\r redraws split like newlines, colour removed."""
    return [_clean(part) for part in re.split(r"\r\n|\r|\n", text)]


def _frames_in(lines: list[str]) -> list[Frame]:
    """The frames among `lines` (outermost first), with the source line after each: Python's own
    `File "f", line N, in func` and IPython's (a notebook's) forms."""
    frames: list[Frame] = []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m:
            code = ""
            if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) and lines[i + 1].startswith("    "):
                code = lines[i + 1].strip()[:300]
            frames.append(Frame(m.group("file"), int(m.group("line")), m.group("func")[:200], code))
            continue
        ipy = _IPY_FRAME.match(line.strip())
        if ipy:
            frames.append(_ipython_frame(ipy, lines, i))
    return frames[-MAX_FRAMES:]


def _ipython_frame(m: re.Match[str], lines: list[str], i: int) -> Frame:
    """An IPython frame: the file and function from its heading, the line and code from the arrow
    below it (before the next frame)."""
    if m.group("file8"):
        file, line, func = m.group("file8"), int(m.group("line8")), m.group("func8")
    elif m.group("cell"):
        file, line, func = m.group("cell"), int(m.group("cline")), "<module>"
    elif m.group("input"):
        file, line, func = m.group("input").split(",")[0], 0, "<module>"
    else:
        file, line, func = m.group("file"), 0, m.group("func")
    code = ""
    for below in lines[i + 1:i + 40]:
        if _FRAME.match(below) or _IPY_FRAME.match(below.strip()):
            break
        arrow = _IPY_ARROW.match(below.strip())
        if arrow:
            line, code = int(arrow.group("line")), arrow.group("code").strip()[:300]
            break
    return Frame(file, line, func.rsplit(".", 1)[-1][:200], code)


def _framed(line: str) -> bool:
    """A line that belongs to a traceback's frames: a frame heading, its source, IPython's arrows
    and numbered context lines, the carets under the failing expression."""
    stripped = line.strip()
    return (bool(_FRAME.match(line)) or line.startswith("    ") or bool(_IPY_FRAME.match(stripped))
            or bool(_IPY_ARROW.match(stripped)) or bool(_IPY_CONTEXT.match(line))
            or stripped.startswith("[Previous line repeated"))


def _strip_prefix(line: str, prefix: str | None) -> str | None:
    """The line without the rank prefix of the message's own rank; None: another rank's line."""
    m = RANK_PREFIX.match(line)
    if prefix is None:
        return line[m.end():] if m else line
    if not m or m.group("prefix") != prefix:
        return None
    return line[m.end():]


_EXC_TAIL = re.compile(r"(?:[A-Za-z_][\w.]{0,120}(?:Error|Exception|EnforceNotMet)\s*:\s*)+$")


def _log_prefix(head: str) -> re.Pattern[str] | None:
    """The logger's prefix on the message's line (`ERROR 11-18 18:07:28 engine.py:366] `, `vllm-1  | `,
    Ray's `(RayWorkerWrapper pid=27331, ip=10.0.3.7) `, a CI runner's `2025-03-10T15:07:20.1000296Z `,
    DeepSpeed's `[2024-05-01 12:00:00,123] [ERROR] [rank5]: `, pdsh's host `node003: `),
    as a pattern its other lines match whatever their times: the traceback's lines carry it too."""
    head = _EXC_TAIL.sub("", head)
    if len(head) < 3 or not re.search(r"[\]|>)]:?\s*$|\dZ\s+$|\w:\s+$", head):
        return None
    body = head.rstrip()
    pattern = re.sub(r"\\?\d+", r"\\d+", re.escape(body)).replace("\\ ", r"\s+")
    return re.compile("^" + pattern + (r"\s" if body != head else ""))


def frames_before(text: str, offset: int) -> list[Frame]:
    """The frames of the traceback that ends with the message at `offset` (outermost first).

    Chained exceptions above it ("The above exception was the direct cause...") and the outer
    traceback of an error re-raised from a DataParallel replica or a DataLoader thread ("Original
    Traceback") are read too: their frames are where the allocation happened. Only the message's
    own rank's lines count when a launcher prefixed them ("[rank1]: ..."); a logger's prefix on the
    message's line (vLLM's `ERROR ... engine.py:366] `) is taken off the lines above it. Frames
    pasted without their `Traceback` header count when they stand right above the message.
    """
    start = max(0, offset - TRACEBACK_WINDOW)
    line_start = text.rfind("\n", start, offset) + 1
    head = _clean(text[line_start:offset])
    m = RANK_PREFIX.match(head)
    prefix = m.group("prefix") if m else None
    logged = None if m else _log_prefix(head)
    lines = _lines(text[start:line_start])
    if logged is not None:
        lines = [logged.sub("", line, count=1) for line in lines]
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
        framed = _framed(line)
        if in_frames and not framed:
            break
        in_frames = in_frames or framed
        current.append(line)
    if not groups:
        # No header: frames pasted without it, right above the message, are still its own.
        return _frames_in(list(reversed(current)))
    return _frames_in(_order(groups))


def frames_after(text: str, offset: int) -> list[Frame]:
    """The frames of a traceback printed right below the message at `offset` (a logger that printed
    the error first, then the traceback): only when one starts within the next three lines."""
    lines = _lines(text[offset:offset + TRACEBACK_WINDOW])[1:]  # [0]: the message's own line
    seen = 0
    for j, line in enumerate(lines):
        if _HEADER in line:
            found = []
            for below in lines[j + 1:]:
                if not below.strip():
                    continue
                if not _framed(below):
                    break
                found.append(below)
            return _frames_in(found)
        if line.strip():
            seen += 1
            if seen > 3:
                break
    return []


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
    ("torch/nn/parallel/comm.py", ("gather",), "dataparallel", N_("gather to GPU 0")),
    ("torch/nn/parallel/comm.py", ("scatter", "broadcast_coalesced", "broadcast"), "dataparallel", N_("scatter")),
    ("torch/nn/parallel/_functions.py", None, "dataparallel", None),
    ("torch/nn/parallel/scatter_gather.py", ("gather", "gather_map"), "dataparallel", N_("gather to GPU 0")),
    ("torch/nn/parallel/scatter_gather.py", None, "dataparallel", N_("scatter")),
    ("torch/nn/parallel/replicate.py", None, "dataparallel", N_("replicate")),
    ("torch/nn/parallel/parallel_apply.py", None, "dataparallel", N_("a replica's forward")),
    ("torch/nn/parallel/data_parallel.py", ("gather",), "dataparallel", N_("gather to GPU 0")),
    ("torch/nn/parallel/data_parallel.py", ("scatter",), "dataparallel", N_("scatter")),
    ("torch/nn/parallel/data_parallel.py", ("replicate",), "dataparallel", N_("replicate")),
    ("torch/utils/data/_utils/pin_memory.py", None, "pin_memory", None),
    ("vllm/worker/worker.py", ("raise_if_cache_size_invalid", "determine_num_available_blocks", "initialize_cache",
                               "_init_cache_engine"), "kv_cache", N_("vLLM's KV cache")),
    ("vllm/v1/core/kv_cache_utils.py", None, "kv_cache", N_("vLLM's KV cache")),
    ("vllm/v1/engine/core.py", ("_initialize_kv_caches",), "kv_cache", N_("vLLM's KV cache")),
    ("deepspeed/runtime/zero/partitioned_param_coordinator.py", None, "param_gather", "ZeRO-3"),
    ("deepspeed/runtime/zero/partition_parameters.py", ("all_gather", "_all_gather", "allgather_fn",
                                                        "all_gather_coalesced"), "param_gather", "ZeRO-3"),
    ("torch/distributed/distributed_c10d.py", ("all_gather", "_all_gather_base", "all_gather_into_tensor"),
     "param_gather", "all-gather"),
    ("torch/distributed/fsdp/_flat_param.py", None, "param_gather", "FSDP"),
    ("transformers/trainer_pt_utils.py", ("nested_concat", "torch_pad_and_concatenate", "add",
                                          "distributed_concat", "nested_numpify", "to_cpu_and_numpy"),
     "eval_gather", "nested_concat"),
    ("accelerate/accelerator.py", ("gather_for_metrics", "gather", "pad_across_processes"), "eval_gather",
     "gather_for_metrics"),
    ("transformers/cache_utils.py", None, "generate", N_("KV cache update")),
    ("transformers/generation/utils.py", None, "generate", None),
    ("torch/_tensor.py", ("backward",), "backward", None),
    ("torch/autograd/__init__.py", ("backward", "grad"), "backward", None),
    ("torch/autograd/graph.py", ("_engine_run_backward",), "backward", None),
    ("accelerate/accelerator.py", ("backward",), "backward", None),
    ("torch/optim/", ("_multi_tensor_adam", "_multi_tensor_adamw", "_multi_tensor_sgd"), "optimizer",
     N_("multi-tensor (foreach) update")),
    ("torch/optim/", ("_init_group",), "optimizer", N_("creating the optimizer state")),
    ("torch/optim/", None, "optimizer", None),
    ("accelerate/optimizer.py", ("step",), "optimizer", None),
    ("torch/serialization.py", None, "checkpoint_load", "torch.load"),
    ("safetensors/torch.py", None, "checkpoint_load", "safetensors"),
    ("torch/nn/modules/module.py", ("load_state_dict", "_load_from_state_dict"), "checkpoint_load",
     "load_state_dict"),
    # model.to(device), model.cuda(): each parameter copied to the GPU (_apply, its convert or lambda);
    # not the forward pass its frames' file would otherwise say
    ("torch/nn/modules/module.py", ("to", "cuda", "_apply", "convert", "<lambda>"), "to_device", None),
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
    (re.compile(r"torch\.cat\(.*\b(logits|preds|predictions|outputs|all_)"), "eval_gather", N_("torch.cat of outputs")),
)
_FORWARD_FUNCS = ("_call_impl", "_wrapped_call_impl", "forward")
# The modeling code of the model libraries: a frame there (an attention's helper, not only its forward) runs a
# model forward, as a notebook's traceback shows it (IPython keeps only some frames)
_MODEL_CODE = ("/transformers/models/", "/diffusers/models/", "/timm/models/", "/torchvision/models/",
               "/peft/tuners/")
# Library evaluation code known to run the model under torch.no_grad() / inference_mode(): a user's
# own evaluate() is not (it may be the very reason for the OOM).
_GRAD_OFF = (("/transformers/trainer.py", "prediction_step"),
             ("/lightning/pytorch/loops/evaluation_loop.py", None),
             ("/pytorch_lightning/loops/evaluation_loop.py", None))
# Training loops' own functions (HF Trainer, Lightning, Keras-like and common hand-written names)
_TRAINING_FUNCS = frozenset({"train", "_inner_training_loop", "training_step", "fit", "_fit_impl", "train_step",
                             "train_epoch", "train_one_epoch"})
_EVAL_FUNCS = ("evaluation_loop", "prediction_step", "evaluate", "predict", "validation_step", "test_step")
# The user's own evaluation functions, by name: validate, val_step, evaluate_model, run_validation, do_eval, test.
_EVAL_NAME = re.compile(r"^_*(?:val|valid|validate|validation|eval|evaluate|evaluation|test|testing|predict|inference)"
                        r"(?:_\w*)?$|^\w+_(?:val|valid|validate|validation|eval|evaluate|evaluation|test)$")
# Frames that say the code below them runs without autograd: torch.no_grad() / inference_mode() used as
# a decorator (torch/utils/_contextlib.py, older torch/autograd/grad_mode.py), or a `with` line above.
_NO_GRAD_CODE = re.compile(r"torch\.no_grad\(\)|torch\.inference_mode\(|set_grad_enabled\(False\)")


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
    evaluating = any(f.func in _EVAL_FUNCS or (not f.in_library and _EVAL_NAME.match(f.func)) for f in frames)
    grad_off = any(f.path.endswith(suffix) and func in (None, f.func) for f in frames for suffix, func in _GRAD_OFF)
    grad_off = grad_off or any(f.func == "decorate_context" or _NO_GRAD_CODE.search(f.code) for f in frames)
    training = any("/torch/optim/" in f.path or f.func in _TRAINING_FUNCS for f in frames)
    in_forward = False
    for frame in reversed(frames):
        if _runs_closure(frame):  # Lightning, LBFGS: forward and backward run inside optimizer.step(closure)
            break
        found = _library_phase(frame) or (_code_phase(frame) if not frame.in_library else None)
        if found is not None:
            return Phase(found[0], found[1], frame, user, evaluating, grad_off, training)
        # a module's forward, or the layers' own code (torch/nn/modules/conv.py's _conv_forward, F.conv2d)
        in_forward = (in_forward or frame.func in _FORWARD_FUNCS or "/torch/nn/modules/" in frame.path
                      or frame.path.endswith("/torch/nn/functional.py")
                      or any(place in frame.path for place in _MODEL_CODE))
    if in_forward or (evaluating and user is not None):
        # the innermost frame is where it allocated (an attention matmul, a layer's output); a user's
        # own evaluation function with no library frame below it runs the model forward too
        return Phase("forward", N_("in evaluation") if evaluating else None, frames[-1], user, evaluating, grad_off,
                     training)
    return None


# llama.cpp's log lines around its allocation failure: what it was allocating.
_GGML_PLACES = (("load_tensors", "checkpoint_load", N_("the model's weights")),
                ("llama_model_load", "checkpoint_load", N_("the model's weights")),
                ("alloc_tensor_range", "checkpoint_load", N_("the model's weights")),
                ("llama_kv_cache_init", "kv_cache", N_("the KV cache")),
                ("ggml_gallocr_reserve_n", "kv_cache", N_("a compute buffer")),
                ("compute buffers", "kv_cache", N_("a compute buffer")),
                ("llama_new_context_with_model", "kv_cache", N_("the context")),
                ("llama_init_from_model", "kv_cache", N_("the context")))


def _log_place(text: str, offset: int) -> Phase | None:
    """Where an inference engine that logs instead of raising (llama.cpp) failed: the lines right
    after the message name what it was allocating, or the stage logged just before it."""
    after = _lines(text[offset:offset + 1200])[1:6]
    before = _lines(text[max(0, offset - 600):offset])[-3:]
    for line in after + list(reversed(before)):
        for marker, phase, detail in _GGML_PLACES:
            if marker in line:
                where = Frame("llama.cpp log", 0, marker, line.strip()[:300])
                return Phase(phase, detail, where, None)
    return None


def place_of(text: str, offset: int, kind: str | None = None) -> Phase | None:
    """Where the message at `offset` in a log failed: the traceback above it (or, printed by a
    logger first, below it), and for llama.cpp the log lines around it."""
    phase = phase_of(frames_before(text, offset))
    if phase is None:
        phase = phase_of(frames_after(text, offset))
    if phase is None and kind == "ggml":
        phase = _log_place(text, offset)
    return phase
