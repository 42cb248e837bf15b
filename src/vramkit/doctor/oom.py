"""Read out-of-memory errors the way PyTorch (and the libraries under it) printed them.

Every form PyTorch has used is recognised; see docs/doctor.md for the list and the fixtures
under tests/fixtures/oom/ for real examples with their origin. Sizes are read exactly as
printed ("512 bytes", "2.00 KiB", "20.00 MiB", "1.50 GiB"): c10's format_size prints two
decimals, so a parsed size is within 0.005 of its unit of the true value, never invented.

Pure text processing: no torch import, safe for the `vram` command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..procs import sanitize

_UNITS = {"bytes": 1, "byte": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
          "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
# Sizes of at most 20 digits (bytes of a 64-bit count): a longer number is no size PyTorch printed
# (hundreds of digits would make an infinite float, and no int): it is left out as unknown.
_SIZE = r"(?<![0-9.])([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*(bytes|byte|[KMGT]i?B|B)"

# Where a message starts. The last match in a log is the one that killed the job.
_START = re.compile(
    r"(?:CUDA|HIP) out of memory\."
    r"|MPS backend out of memory"
    r"|(?:CUDA|HIP) (?:driver )?error: out of memory"
    r"|cuda runtime error \(2\) : out of memory"
    r"|(?:CUDA error: )?CUBLAS_STATUS_ALLOC_FAILED"
    r"|(?:cuDNN error: )?CUDNN_STATUS_ALLOC_FAILED"
    r"|Unable to find a valid cuDNN algorithm to run convolution"
    r"|DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
    r"|THCudaCheck FAIL file=[^\n]{0,300}? error=2 : out of memory"
    # PaddlePaddle (2.x, then the 1.x allocators)
    r"|Out of memory error on GPU \d{1,9}\."
    r"|Cannot malloc [0-9.]{1,30} ?[KMG]?B GPU memory"
    # TensorFlow (the op's message, and the stream executor's), XLA (JAX)
    r"|OOM when allocating tensor"
    r"|failed to allocate memory \[Op:"  # TensorFlow 2's eager op (ResourceExhaustedError)
    r"|failed to allocate [^\n]{0,80}? from device: (?:CUDA_ERROR_OUT_OF_MEMORY|HIP_ERROR_OutOfMemory)"
    r"|(?:RESOURCE_EXHAUSTED|Resource exhausted): Out\s{1,4}of memory (?:while trying to allocate|allocating)"
    r"|RESOURCE_EXHAUSTED: Failed to allocate request for"
    r"|Allocator \(\w{1,40}\) ran out of memory trying to allocate"
    r"|cuMemAllocAsync failed to allocate \d{1,20} bytes"
    # vLLM: no room left for the KV cache
    r"|No available memory for the cache blocks"
    r"|KV cache is needed, which is larger than the available KV cache memory"
    # llama.cpp / ggml
    r"|ggml_backend_cuda_buffer_type_alloc_buffer: allocating [0-9.]{1,20} MiB on device \d{1,4}: cudaMalloc failed"
    # NCCL's own allocations (its buffers, on a full GPU), as its warnings and torch's DistBackendError say
    r"|Cuda failure '?out of memory'?"
    r"|Failed to CUDA calloc \d{1,20} bytes")
# What every form of _START contains, as plain text: a log is searched for these (str.find, fast)
# and _START is tried only around them, instead of at every character of a multi-MB log.
# Each is a form's own words, not words a training log prints every step ("peak GPU memory: 71 GiB"):
# every hit costs a search of the window around it.
_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
            "Unable to find a valid cuDNN algorithm", "DefaultCPUAllocator: ", "THCudaCheck FAIL",
            "Out of memory error on GPU", "Cannot malloc ", "OOM when allocating", "failed to allocate memory [Op:",
            "from device: ",
            "RESOURCE_EXHAUSTED: Out", "Resource exhausted: Out", "Failed to allocate request", "ran out of memory",
            "cuMemAllocAsync failed", "for the cache blocks", "KV cache is needed", "cudaMalloc failed",
            "Failed to CUDA calloc")
# the most of a match that comes before its marker (THCudaCheck's file path may be long)
_BEFORE_MARKER = 420
_MATCH_SPAN = 500  # characters: longer than any match of _START
# The exception name printed just before the message, when there is one.
# (Or the message in its repr, as a logger prints a caught exception: OutOfMemoryError('CUDA out of ...').)
_EXC = re.compile(r"((?:torch\.(?:cuda\.)?)?OutOfMemoryError|RuntimeError|MemoryError"
                  r"|[A-Za-z_][\w.]{0,80}(?:Error|Exception|EnforceNotMet))(?:\s*:\s*(?:\[[^\]\n]*\][^\n]*?)?|\([\"'])$")
# A message ends at a blank line, a new traceback, or where Python chains exceptions.
_END = re.compile(r"\n\s*\n|\nTraceback \(most recent call last\)|\nDuring handling of|\nThe above exception")
# Colour (Python 3.13's tracebacks, coloured loggers), and the terminal commands a log may carry:
# OSC (window titles, hyperlinks, clipboard writes; ended by BEL or ESC \\, bounded), other ESC pairs.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b\n]{0,4096}(?:\x07|\x1b\\)?|\x1b[()][0-9A-Za-z]"
                         r"|\x1b[=>78cDEHMNOZ]")
_WINDOW = 1600  # characters; the longest real message of a form without its processes is ~700
# PyTorch's, with a "Process P has U memory in use" part (~42 characters) for every process on the GPU
_PYTORCH_WINDOW = 16 * 1024
_WRAP_MIN = 40  # columns: the narrowest terminal a message is taken to have been hard-wrapped by
# How PyTorch's CUDA messages end: 2.1+ with its documentation link, 1.4-2.0 with "... Memory Management
# and PYTORCH_CUDA_ALLOC_CONF" (a terminal may have wrapped it anywhere)
_MESSAGE_TAIL = re.compile("|".join(r"\s*".join(map(re.escape, end)) for end in (
    "#environment-variables)", "Memory Management and PYTORCH_CUDA_ALLOC_CONF")))


def size_bytes(number: str, unit: str) -> int:
    """('20.00', 'MiB') -> 20971520; exactly as printed, rounded to a whole byte."""
    return int(round(float(number) * _UNITS[unit.lower()]))


def printed_rounding(value: int) -> int:
    """How far a size c10 printed may be from the true one: half a hundredth of the unit it was
    printed in (format_size: bytes up to 1 KiB exactly, then KiB, MiB or GiB with two decimals)."""
    for unit in (1024**3, 1024**2, 1024):
        if value >= unit:  # the larger bound at a boundary: "1.00 GiB" may be either
            return unit // 200
    return 0


def _size(pattern: str, text: str) -> int | None:
    m = re.search(pattern.replace("{S}", _SIZE), text)
    return size_bytes(m.group(1), m.group(2)) if m else None


@dataclass
class OomProcess:
    """A "Process P has U memory in use" part: NVML's view of a process on that GPU, at OOM time."""

    pid: int
    bytes: int


@dataclass
class OomReport:
    """One out-of-memory message, parsed. None: the message form does not carry the value."""

    kind: str  # cuda, hip, mps, cuda-runtime, hip-runtime, cublas, cudnn, cpu, and the other frameworks' (FORMS)
    form: str  # which PyTorch form: see FORMS
    message: str  # the message as found, whitespace collapsed, control characters stripped
    exception: str | None = None  # e.g. torch.OutOfMemoryError, RuntimeError
    device: int | None = None  # the CUDA ordinal in the job (after its CUDA_VISIBLE_DEVICES)
    requested_bytes: int | None = None
    total_bytes: int | None = None  # the GPU's total capacity
    free_bytes: int | None = None  # free on the GPU as the driver saw it
    allowed_bytes: int | None = None  # set_per_process_memory_fraction's cap, when set
    allocated_bytes: int | None = None  # allocated by PyTorch (tensors)
    reserved_bytes: int | None = None  # reserved by PyTorch's caching allocator in total
    reserved_unallocated_bytes: int | None = None  # reserved but not handed out: fragmentation
    private_pool_bytes: int | None = None  # allocated in private pools (CUDA Graphs)
    process_bytes: int | None = None  # "Including non-PyTorch memory, this process has ..."
    processes: list[OomProcess] = field(default_factory=list)
    hint: str | None = None  # the allocator setting the message suggests
    framework: str = "pytorch"  # pytorch, paddle, tensorflow, jax, vllm, llama.cpp, deepspeed (from the log around it)
    # the framework's memory share, when printed: FLAGS_fraction_of_gpu_memory_to_use, gpu_memory_utilization
    setting: float | None = None
    thc_storage: bool = False  # old PyTorch's THC said a tensor's storage could not be allocated
    max_length: int | None = None  # vLLM: the longest max_model_len the KV cache memory there is holds, as it says
    rank: int | None = None  # the launcher's rank on the message's line: torchrun's [rank1]:, srun --label's 1:
    # the allocator setting the log shows the job had: "PYTORCH_CUDA_ALLOC_CONF=..." printed before the message
    alloc_conf: str | None = None
    line: int | None = None  # 1-based line in the log where the message starts
    offset: int | None = None  # where the message starts in the text searched (its traceback is above)

    @property
    def non_pytorch_bytes(self) -> int | None:
        """This process's memory outside PyTorch's allocator (CUDA context, cuBLAS/NCCL buffers)."""
        if self.process_bytes is None or self.reserved_bytes is None:
            return None
        return max(0, self.process_bytes - self.reserved_bytes)

    @property
    def shortfall_bytes(self) -> int | None:
        """How much more the request needed than the GPU had free."""
        if self.requested_bytes is None or self.free_bytes is None:
            return None
        return max(0, self.requested_bytes - self.free_bytes)


FORMS = {
    "2.2+": "PyTorch >= 2.2: 'GPU N has a total capacity of T of which F is free', expandable_segments hint",
    "2.1": "PyTorch 2.1: 'total capacty' (sic), max_split_size_mb hint",
    "1.4-2.0": "PyTorch 1.4 to 2.0: '(GPU N; T total capacity; A already allocated; F free; R reserved in "
               "total by PyTorch)'",
    "1.0-1.3": "PyTorch 1.0 to 1.3: '(GPU N; T total capacity; A already allocated; F free; C cached)'",
    "mps": "Apple MPS backend",
    "runtime": "a CUDA call outside the caching allocator failed (context creation, old THC, NCCL's buffers): no sizes",
    "cublas": "cuBLAS could not allocate its handle or workspace",
    "cudnn": "cuDNN could not allocate (or found no algorithm that fits: usually memory)",
    "cpu": "host RAM: PyTorch's CPU allocator",
    "paddle": "PaddlePaddle: 'Out of memory error on GPU N. Cannot allocate X memory on GPU N, Y memory has been "
              "allocated and available memory is only Z' (sizes in 1024 units, printed GB/MB), or 1.x's "
              "'Cannot malloc'",
    "tensorflow": "TensorFlow: 'OOM when allocating tensor with shape[...] and type T' (the size is the shape times "
                  "the type's bytes; the BFC allocator's Limit and InUse above it, when printed)",
    "xla": "XLA (JAX, TensorFlow's stream executor): 'RESOURCE_EXHAUSTED: Out of memory while trying to allocate N "
           "bytes', 'Failed to allocate request for', 'cuMemAllocAsync failed', 'failed to allocate ... from device'",
    "vllm": "vLLM: 'No available memory for the cache blocks' (weights and activations left no room for the KV "
            "cache in gpu_memory_utilization's share of the GPU), or the KV cache a max_model_len needs",
    "ggml": "llama.cpp (ggml): 'ggml_backend_cuda_buffer_type_alloc_buffer: allocating X MiB on device N: "
            "cudaMalloc failed: out of memory' (the model's weights, the KV cache or a compute buffer)",
}
# Bytes of an element of TensorFlow's dtype names, for 'OOM when allocating tensor with shape[...] and type T'.
_TF_TYPES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
             "uint64": 8, "complex64": 8, "complex128": 16}
_PADDLE_SIZE = r"([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*([KMGT]?B)"
_CONTEXT = 16 * 1024  # characters around the message searched for the framework that printed it


def _parse_gpu(text: str, report: OomReport) -> None:
    # A message hard-wrapped at a terminal's width and copied from it breaks words ("unall" / "ocated"):
    # a phrase not found as printed is looked for again with every space left out.
    squashed = "".join(text.split())

    def size(pattern: str) -> int | None:
        found = _size(pattern, text)
        return found if found is not None else _size(pattern.replace(" ", ""), squashed)

    report.requested_bytes = size(r"Tried to allocate {S}")
    if report.requested_bytes is None and "Tried to allocate more than 1EB" in text:
        report.requested_bytes = 1 << 60  # c10's words for a request of 2**60 bytes (1 EiB) or more
    m = re.search(r"GPU (\d{1,9})\b", text)  # an ordinal: more digits are no GPU
    report.device = int(m.group(1)) if m else None
    if re.search(r"has a total capac(?:i)?ty of", text) or re.search(r"hasatotalcapac(?:i)?tyof", squashed):
        report.form = "2.1" if "capacty" in text else "2.2+"
        report.total_bytes = size(r"total capac(?:i)?ty of {S}")
        report.free_bytes = size(r"of which {S} is free")
        report.allowed_bytes = size(r"{S} allowed;")
        report.process_bytes = size(r"this process has {S} memory in use")
        report.processes = [OomProcess(int(m.group(1)), size_bytes(m.group(2), m.group(3)))
                            for m in re.finditer(r"Process (\d{1,19}) has " + _SIZE + r" memory in use", text)]
        report.allocated_bytes = size(r"Of the allocated memory {S} is allocated by PyTorch")
        report.private_pool_bytes = size(r"with {S} allocated in private pools")
        report.reserved_unallocated_bytes = size(r"and {S} is reserved by PyTorch but unallocated")
        if report.allocated_bytes is not None and report.reserved_unallocated_bytes is not None:
            report.reserved_bytes = report.allocated_bytes + report.reserved_unallocated_bytes
    elif re.search(r"total capacity;", text) or "totalcapacity;" in squashed:
        report.total_bytes = size(r"{S} total capacity")
        report.allocated_bytes = size(r"{S} already allocated")
        report.free_bytes = size(r"{S} free")
        report.allowed_bytes = size(r"{S} allowed;")
        report.reserved_bytes = size(r"{S} reserved in total by PyTorch")
        if report.reserved_bytes is not None:
            report.form = "1.4-2.0"
            if report.allocated_bytes is not None:
                report.reserved_unallocated_bytes = max(0, report.reserved_bytes - report.allocated_bytes)
        else:
            # 1.0-1.3 printed what the caching allocator held beyond the allocated tensors as "cached".
            report.form = "1.0-1.3"
            report.reserved_unallocated_bytes = size(r"{S} cached")
            if report.allocated_bytes is not None and report.reserved_unallocated_bytes is not None:
                report.reserved_bytes = report.allocated_bytes + report.reserved_unallocated_bytes
    else:
        report.form = "runtime"  # truncated, or a form without sizes
    if "expandable_segments" in squashed:
        report.hint = "expandable_segments"
    elif "max_split_size_mb" in squashed:
        report.hint = "max_split_size_mb"


def parse_oom(text: str, line: int | None = None) -> OomReport | None:
    """Parse the first out-of-memory message in `text` (None: there is none)."""
    m = _START.search(text)
    if not m:
        return None
    return _parse_at(text, m.start(), m.end(), line)


def _exception_before(before: str) -> re.Match[str] | None:
    """The exception name printed before the message: on its line, or (Paddle's `RuntimeError:
    ResourceExhaustedError:`, a blank line, then the message) on the nearest line above it."""
    lines = before.split("\n")
    exc = _EXC.search(lines[-1])
    if exc or lines[-1].strip():
        return exc
    for prior in reversed(lines[-4:-1]):
        if prior.strip():
            return _EXC.search(prior.rstrip())
    return None


def _unwrapped(text: str, start: int, stop: int) -> str:
    """text[start:stop], with a terminal's hard wrap undone. A message copied from a terminal that
    cut it every W columns (through a word or a number: "14.2" / "1 GiB") comes as lines of exactly
    W characters, its first line's, then a shorter one: those are joined as they were, with nothing
    at the cuts; what follows them stays as it is. Lines of other lengths (as a logger or a word
    wrap leaves them) are not a hard wrap; nor is W under _WRAP_MIN (no terminal is narrower)."""
    line_start = text.rfind("\n", 0, start) + 1
    lines = text[line_start:stop].split("\n")
    width = len(lines[0].rstrip("\r"))
    full = 0
    while full < len(lines) - 1 and len(lines[full].rstrip("\r")) == width:
        full += 1
    if full == 0 or width < _WRAP_MIN or len(lines[full].rstrip("\r")) > width:
        return text[start:stop]
    joined = "".join(line.rstrip("\r") for line in lines[:full + 1])
    return "\n".join([joined, *lines[full + 1:]])[start - line_start:]


def _before(text: str, start: int) -> str:
    """The 200 characters before the message, the line above joined on where a terminal's hard wrap
    cut the exception's name ("...ERROR R" / "untimeError: CUDA out of memory."): two lines of one
    width, at least _WRAP_MIN, the cut between two characters that are not spaces (through a word)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    if line_start > 0:
        above = text[text.rfind("\n", 0, line_start - 1) + 1:line_start - 1]
        if len(above) >= _WRAP_MIN and (line_end if line_end >= 0 else len(text)) - line_start == len(above) \
                and not above[-1].isspace() and not text[line_start].isspace():
            return (above + text[line_start:start])[-200:]
    return text[max(0, start - 200):start]


def _parse_at(text: str, start: int, match_end: int, line: int | None) -> OomReport:
    before = ANSI_ESCAPE.sub("", _before(text, start))
    exc = _exception_before(before)
    pytorch = text.startswith(("CUDA out of memory.", "HIP out of memory."), start)
    # PyTorch's message lists every process on the GPU: on a shared one, tens of them
    rest = text[start:start + (_PYTORCH_WINDOW if pytorch else _WINDOW)]
    nxt = _START.search(rest, match_end - start)  # a second message right after this one
    end = _END.search(rest)
    stop = min(x for x in (len(rest), nxt.start() if nxt else len(rest), end.start() if end else len(rest)))
    tail = _MESSAGE_TAIL.search(rest, 0, stop) if pytorch else None
    if tail is not None:  # PyTorch's message ends there: what follows is the log's next lines
        stop = tail.end()
    message = _unwrapped(text, start, start + stop)
    if pytorch and tail is None and (tail := _MESSAGE_TAIL.search(message)) is not None:  # its end was cut too
        message = message[:tail.end()]
    body = " ".join(ANSI_ESCAPE.sub("", message).split())
    body = sanitize(body)
    head = body[:60]
    if head.startswith(("CUDA out of memory.", "HIP out of memory.")):
        report = OomReport(kind="hip" if head.startswith("HIP") else "cuda", form="runtime", message=body)
        _parse_gpu(body, report)
    elif head.startswith("MPS backend"):
        report = OomReport(kind="mps", form="mps", message=body)
        report.requested_bytes = _size(r"Tried to allocate {S}", body)
        report.allocated_bytes = _size(r"MPS allocated: {S}", body)
        report.allowed_bytes = _size(r"max allowed: {S}", body)
        report.total_bytes = report.allowed_bytes
    elif head.startswith("DefaultCPUAllocator"):
        report = OomReport(kind="cpu", form="cpu", message=body)
        report.requested_bytes = _size(r"you tried to allocate {S}", body)
    elif "CUBLAS" in head:
        report = OomReport(kind="cublas", form="cublas", message=body)
    elif "CUDNN" in head or "cuDNN" in head:
        report = OomReport(kind="cudnn", form="cudnn", message=body)
    elif head.startswith("Failed to CUDA calloc"):  # NCCL: the size its buffer asked for
        report = OomReport(kind="cuda-runtime", form="runtime", message=body)
        report.requested_bytes = _int(r"calloc (\d{1,20}) bytes", body)
    elif head.startswith("THCudaCheck"):
        report = OomReport(kind="cuda-runtime", form="runtime", message=body, thc_storage="THCStorage" in body)
    elif head.startswith("HIP error"):  # ROCm's PyTorch: a HIP call outside the caching allocator
        report = OomReport(kind="hip-runtime", form="runtime", message=body)
    elif head.startswith(("cuda runtime error", "CUDA error", "CUDA driver error", "Cuda failure")) \
            or "out of memory" in head[:30]:
        report = OomReport(kind="cuda-runtime", form="runtime", message=body, thc_storage="THCStorage" in body)
    else:
        report = _parse_other(body, ANSI_ESCAPE.sub("", rest), ANSI_ESCAPE.sub("", text[max(0, start - 4096):start]))
    if exc:
        report.exception = exc.group(1)
    report.line = line
    report.offset = start
    report.framework = framework_of(text, start, report.kind)
    return report


def _paddle_size(pattern: str, text: str) -> int | None:
    m = re.search(pattern.replace("{S}", _PADDLE_SIZE), text)
    if not m:
        return None
    unit = {"B": "bytes", "KB": "KiB", "MB": "MiB", "GB": "GiB", "TB": "TiB"}[m.group(2)]
    return size_bytes(m.group(1), unit)  # Paddle prints 1024 units as GB/MB


def _int(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _parse_other(body: str, rest: str, before: str) -> OomReport:
    """The messages of the frameworks other than PyTorch (FORMS: paddle, tensorflow, xla, vllm, ggml)."""
    if body.startswith(("Out of memory error on GPU", "Cannot malloc")):
        report = OomReport(kind="paddle", form="paddle", message=body)
        report.requested_bytes = (_paddle_size(r"Cannot allocate {S} memory", body)
                                  or _paddle_size(r"Cannot malloc {S} GPU memory", body))
        report.allocated_bytes = _paddle_size(r"{S} memory has been allocated", body)
        report.free_bytes = _paddle_size(r"available memory is only {S}", body)
        m = re.search(r"GPU (\d{1,9})", body)
        report.device = int(m.group(1)) if m else None
        flag = re.search(r"FLAGS_fraction_of_gpu_memory_to_use (?:is|value is) ([0-9]{1,3}(?:\.[0-9]{1,6})?)", rest)
        report.setting = float(flag.group(1)) if flag else None
        return report
    if body.startswith(("OOM when allocating", "failed to allocate memory [Op:")):
        report = OomReport(kind="tensorflow", form="tensorflow", message=body)
        shape = re.search(r"shape ?\[([0-9, ]{0,200})\]", body)
        dtype = re.search(r"\band type (\w+)", body)
        if shape and dtype and dtype.group(1) in _TF_TYPES and shape.group(1).strip():
            count = 1
            for n in shape.group(1).split(","):
                count *= int(n)
            report.requested_bytes = count * _TF_TYPES[dtype.group(1)]
        if report.requested_bytes is None:  # the raised copy cut short: the op logged the same error above it
            logged = re.findall(r"OOM when allocating tensor with shape ?\[([0-9, ]{1,200})\] and type (\w+)", before)
            if logged and logged[-1][1] in _TF_TYPES:
                count = 1
                for n in logged[-1][0].split(","):
                    count *= int(n)
                report.requested_bytes = count * _TF_TYPES[logged[-1][1]]
        if report.requested_bytes is None:  # the eager op's message has no size: the allocator logged it above
            asked = re.findall(r"ran out of memory trying to allocate " + _SIZE, before)
            report.requested_bytes = size_bytes(*asked[-1]) if asked else None
        # on the message's line, before it in the eager op's: "{{function_node ..._device_/job:.../device:GPU:0}}"
        m = re.search(r"device:GPU:(\d{1,9})", body) or re.search(r"device:GPU:(\d{1,9})[^\n]{0,40}$", before)
        report.device = int(m.group(1)) if m else None
        limits = re.findall(r"Limit:\s+(\d{1,20})\s+InUse:\s+(\d{1,20})", before)
        if limits:
            report.total_bytes, report.allocated_bytes = int(limits[-1][0]), int(limits[-1][1])
            report.free_bytes = max(0, report.total_bytes - report.allocated_bytes)
        return report
    if body.startswith(("No available memory for the cache", "KV cache is needed")):
        report = OomReport(kind="vllm", form="vllm", message=body)
        # "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.45 GiB). Based on
        # the available memory, the estimated maximum model length is 77392."
        needed = re.search(_SIZE + r"\s*$", before)
        if body.startswith("KV cache is needed") and needed:
            report.requested_bytes = size_bytes(needed.group(1), needed.group(2))
        report.free_bytes = _size(r"available KV cache memory \({S}\)", body)
        report.max_length = _int(r"estimated maximum model length is (\d{1,12})", body)
        budget = re.findall(r"total_gpu_memory \(([0-9.]{1,10})GiB\) x gpu_memory_utilization \(([0-9.]{1,6})\)",
                            before)
        if budget:
            report.total_bytes = size_bytes(budget[-1][0], "GiB")
            report.setting = float(budget[-1][1])
        return report
    if body.startswith("ggml_backend_cuda_buffer_type_alloc_buffer"):
        report = OomReport(kind="ggml", form="ggml", message=body)
        m = re.search(r"allocating ([0-9.]{1,20}) MiB on device (\d{1,4})", body)
        if m:
            report.requested_bytes, report.device = size_bytes(m.group(1), "MiB"), int(m.group(2))
        return report
    report = OomReport(kind="xla", form="xla", message=body)
    report.requested_bytes = (_int(r"(?:trying to allocate|allocating) (\d{1,20}) bytes", body)
                              or _int(r"\((\d{1,20})B\) on device", body)
                              or _int(r"rounded to (\d{1,20})", body)
                              or _int(r"failed to allocate (\d{1,20}) bytes", body)
                              or _int(r"\((\d{1,20}) bytes\) from device", body)
                              or _size(r"(?:trying to allocate|allocating) {S}", body))  # JAX prints "1.23GiB"
    m = re.search(r"(?:device ordinal |GPU_)(\d{1,9})", body)
    report.device = int(m.group(1)) if m else None
    free_total = re.search(r"Free memory/Total memory: (\d{1,20})/(\d{1,20})", rest)
    if free_total:
        report.free_bytes, report.total_bytes = int(free_total.group(1)), int(free_total.group(2))
    return report


def framework_of(text: str, start: int, kind: str) -> str:
    """Which framework printed the message: its own form says, or (PyTorch's message inside vLLM,
    DeepSpeed or llama.cpp) the log around it."""
    fixed = {"paddle": "paddle", "tensorflow": "tensorflow", "vllm": "vllm", "ggml": "llama.cpp"}
    if kind in fixed:
        return fixed[kind]
    around = text[max(0, start - _CONTEXT):start + 4096].lower()
    if kind == "xla":
        jax = "jax" in around or "xla/python" in around or "xla_python" in around
        return "tensorflow" if "tensorflow" in around and not jax else "jax"
    if "vllm" in around or "enginecore" in around or "error in model execution (input dumped" in around:
        return "vllm"
    if "deepspeed" in around or "param_coordinator" in around or "partition_parameters" in around:
        return "deepspeed"
    if "ggml_" in around or "llama_model_load" in around:
        return "llama.cpp"
    return "pytorch"


def _starts(text: str) -> Iterator[re.Match[str]]:
    """The matches of _START in `text`, the same as _START.finditer(text), found by looking for the
    literal markers and trying the pattern only in a short window around each."""
    upcoming = {marker: text.find(marker) for marker in _MARKERS}
    resume = 0  # where the previous match ended, or before which none starts: the next one starts here or later
    while True:
        found = [at for at in upcoming.values() if at >= 0]
        if not found:
            return
        at = min(found)
        window_start = max(resume, at - _BEFORE_MARKER)
        match = None if window_start > at else (
            _START.search(text, window_start, window_start + _BEFORE_MARKER + _MATCH_SPAN))
        # A match that starts after this marker belongs to a later one (and may be cut off here).
        if match is not None and match.start() <= at:
            yield match
            resume = match.end()
        elif window_start <= at:
            # None starts from the window's start up to the last start whose whole match would have fit
            # in it (nor, if one was found, before that one): a log full of markers is not searched over
            # the same characters again for each of them.
            resume = window_start + _BEFORE_MARKER + 1 if match is None else min(
                match.start(), window_start + _BEFORE_MARKER + 1)
        for marker, where in upcoming.items():
            if where == at or 0 <= where < resume:
                upcoming[marker] = text.find(marker, max(at + 1, resume))


# Quotes before a message: a log line that names the message (a tip, a comment) has not raised it.
_QUOTES = "\"'`\u2018\u201c\u300c\u300e\u00ab"
_FIGURES = re.compile(r"[^\n\"'`]{0,40}?" + _SIZE)
# TensorFlow's BFC allocator logs a failed attempt that it then works around (a slower algorithm): a
# warning in runs that succeed, which says so itself.
_NOT_A_FAILURE = "The caller indicates that this is not a failure"


def _mentioned(text: str, match: re.Match[str]) -> bool:
    """Whether the message at `match` is only mentioned (quoted), or logged as no failure."""
    if match.start() > 0 and text[match.start() - 1] in _QUOTES:
        # a tip naming the message, unless the quoted message goes on with its figures (an exception's
        # repr, OutOfMemoryError('CUDA out of memory. Tried to allocate 20.00 MiB ...'), a JSON log's field)
        return _FIGURES.match(text, match.end(), match.end() + 60) is None
    line_end = text.find("\n", match.end(), match.end() + _WINDOW)
    return _NOT_A_FAILURE in text[match.end():line_end if line_end >= 0 else match.end() + _WINDOW]


def find_oom(text: str, cut: bool = True) -> OomReport | None:
    """The LAST out-of-memory message in a log or traceback (the one that ended the job).

    Messages wrapped over several lines (terminals, notebook output) are joined back together;
    cut=False: not one whose first words a terminal cut (the text was unwrapped there already).
    """
    last = None
    for match in _starts(text):
        if not _mentioned(text, match):
            last = match
    if last is None:
        return _cut_at_start(text) if cut else None
    report = _parse_at(text, last.start(), last.end(), text.count("\n", 0, last.start()) + 1)
    line_start = text.rfind("\n", 0, last.start()) + 1
    rank = RANK_PREFIX.match(text, line_start, last.start())
    report.rank = int(rank.group("rank") or rank.group("label") or rank.group("mpi")) if rank else None
    if report.rank is None:  # after a logger's or a host's prefix: DeepSpeed's "[...] [ERROR] [rank5]: "
        inner = _INNER_RANK.findall(text, line_start, last.start())
        report.rank = int(inner[-1]) if inner else None
    if report.rank is None:  # torchrun's failure summary: the message in the block of the rank that raised it
        block = text.rfind("\n[", max(0, last.start() - _SUMMARY_BLOCK), last.start())
        summary = _SUMMARY_RANK.search(text, block, last.start()) if block >= 0 else None
        report.rank = int(summary.group(1)) if summary else None
    report.alloc_conf = _alloc_conf(text, last.start())
    return report


def _alloc_conf(text: str, end: int) -> str | None:
    """The allocator setting the log shows before `end`: the last, and not PyTorch's own advice in
    an earlier message ("... try setting PYTORCH_CUDA_ALLOC_CONF=...")."""
    settings = [m for m in _ALLOC_CONF.finditer(text, 0, end)
                if "setting" not in text[max(0, m.start() - 12):m.start()]]
    return sanitize("=".join(settings[-1].groups())) if settings else None


def _cut_at_start(text: str) -> OomReport | None:
    """PyTorch's message in a log a terminal hard-wrapped through its first words ("CUDA out of me" /
    "mory."; a logger's prefix put them near the edge): read from the text with the wrap undone."""
    cuts = [m.start() for m in _CUT_START.finditer(text) if "\n" in m.group()]
    if not cuts:
        return None
    line_start = text.rfind("\n", 0, cuts[-1]) + 1
    width = text.find("\n", line_start) - line_start
    for _ in range(4):  # the wrapped lines above it (the exception's name, the logger's prefix): one paragraph
        above = text.rfind("\n", 0, line_start - 1) + 1 if line_start else -1
        if above < 0 or line_start - 1 - above != width:
            break
        line_start = above
    report = find_oom(_unwrapped(text, line_start, min(len(text), line_start + _PYTORCH_WINDOW)), cut=False)
    if report is None:
        return None
    report.offset = line_start + (report.offset or 0)
    report.line = text.count("\n", 0, line_start) + (report.line or 1)
    report.alloc_conf = report.alloc_conf or _alloc_conf(text, line_start)
    return report


# PyTorch's first words with a line break anywhere in them (a terminal's hard wrap)
_CUT_START = re.compile("|".join("".join(re.escape(c) + r"\r?\n?" for c in words[:-1]) + re.escape(words[-1])
                                 for words in ("CUDA out of memory.", "HIP out of memory.")))
_INNER_RANK = re.compile(r"\[rank(\d{1,6})\]: ")
# torchrun's (torchelastic's) summary of a failed run: a block a failed rank, "[1]:", then "  rank : 3
# (local_rank: 3)" and its traceback with the message; the block's own lines are not prefixed
_SUMMARY_RANK = re.compile(r"^ {0,8}rank {0,12}: (\d{1,6}) \(local_rank: \d{1,6}\)", re.M)
_SUMMARY_BLOCK = 64 * 1024  # characters: a block's traceback above its message
# A launcher's prefix on every line of a rank: torchrun's "[rank1]:" / "[default1]:", srun --label's "1: ",
# mpirun --tag-output's "[1,5]<stderr>:" (job, rank)
# (doctor.traceback follows a traceback through it too)
RANK_PREFIX = re.compile(r"\s*(?P<prefix>\[(?:rank|default)(?P<rank>\d{1,6})\]:|(?P<label>\d{1,6}):(?= )"
                         r"|\[\d{1,9},(?P<mpi>\d{1,6})\]<std(?:out|err)>:)")  # OpenMPI's --tag-output (Horovod)
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as a log shows it (an `export` echoed, a launcher's
# environment dump); the last one before the message is the job's
_ALLOC_CONF = re.compile(r"(PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF)[\"']?\s*[=:]\s*[\"']?([\w:,.]{1,200})")
