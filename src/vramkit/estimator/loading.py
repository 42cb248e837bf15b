"""What loading a model leaves reserved on the GPU, for loading paths that allocate far more than
the weights while they run. The caching allocator keeps every segment it took (allocator.py), so a
later `max_memory_reserved` starts from what loading reserved, whatever `reset_peak_memory_stats`
says: the estimate's reserved figure is the larger of that and the training step's.

One path is modelled: torchtune's QLoRA (`loading="torchtune"`), as its single-device LoRA recipe
and llama builders ran it in torchtune 0.1 (April 2024):
- the model is built on the GPU in bf16: each linear that gets LoRA is created as an nn.Linear and
  quantized there with torchao's `to_nf4` (torchtune/modules/peft/lora.py, `_create_weight_and_bias`);
- the builder makes one decoder layer and deep-copies it per layer (`_get_clones`); copying an
  NF4Tensor clones it (torchtune's `clone` override: `to_nf4(get_original_weight())`), then
  deep-copies the original's fields over the clone's;
- the checkpoint's 16-bit weights (CPU) are loaded with `load_state_dict`; copying into an NF4Tensor
  moves the weight to the GPU, casts it to bf16 and quantizes it again (torchtune's `inplace_copy`).
`to_nf4` (torchao/dtypes/nf4tensor.py) finds each element's nearest NF4 level through
`(value - nf4).abs()`: 16 bf16 differences per element. torchao 0.1 does it over the whole tensor at
once (32 bytes an element: 1.4 GB for a 4096 x 11008 matrix, twice, with the subtraction and the
absolute value); from 0.2 on it goes 1,048,576 elements at a time (`nf4_chunk`).
Each function below follows those sources' allocations and frees in order; the sequence is replayed
through the allocator model. Checked against the same code traced on meta tensors (see
docs/estimation.md): the same events; replayed, 9.14 GB reserved after loading Llama-2-7B, where
torchtune's QLoRA tutorial measured 9.13 GB ("Peak memory reserved, model init").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .allocator import Event, replay
from .formulas import lora_targets
from .specs import ModelSpec

if TYPE_CHECKING:
    from .analytic import Setup

LOADING_PATHS = ("torchtune",)
NF4_BLOCK = 64  # torchao's to_nf4 defaults: elements per scale, scales per second-level scale
NF4_SCALER_BLOCK = 256
TORCHAO_CHUNK = 1_048_576  # torchao >= 0.2: CHUNK_SIZE of convert_to_norm_float_weight


class _Program:
    """Allocations and frees, in order, each allocation a new key."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._next = 0

    def new(self, nbytes: int) -> int:
        self._next += 1
        self.events.append((self._next, nbytes))
        return self._next

    def drop(self, *keys: int) -> None:
        self.events.extend((k, None) for k in keys)

    def absmax(self, n: int, block: int, width: int) -> int:
        """get_block_absmax over n elements of `width` bytes: abs(), then max(dim=1) (values and
        int64 indices); returns the values."""
        magnitudes = self.new(width * n)
        values, indices = self.new(width * (n // block)), self.new(8 * (n // block))
        self.drop(magnitudes, indices)
        return values


def _to_nf4(prog: _Program, n: int, chunk: int) -> list[int]:
    """NF4Tensor.from_tensor of a bf16 weight of n elements; returns the keys it keeps (the level
    table, the scales' mean, the quantization factors, the int8 scales, the packed codes)."""
    table = prog.new(32)  # the 16 NF4 levels, bf16
    # double_quantize_scalers
    scalers = prog.absmax(n, NF4_BLOCK, 2)
    mean = prog.new(2)
    centred = prog.new(n // 32)  # scalers - mean: n / 64 bf16
    prog.drop(scalers)
    scaler_absmax = prog.absmax(n // NF4_BLOCK, NF4_SCALER_BLOCK, 2)
    # 256 / (2 * absmax.expand(...)): three full-size results; the factor kept is a view of the last
    doubled, reciprocal = prog.new(n // 32), prog.new(n // 32)
    factor = prog.new(n // 32)
    prog.drop(reciprocal, doubled)
    scaled = prog.new(n // 32)
    rounded = prog.new(n // 32)
    prog.drop(scaled)
    clamped = prog.new(n // 32)
    prog.drop(rounded)
    int8_scales = prog.new(n // 64)
    prog.drop(centred, scaler_absmax, clamped)
    # convert_to_norm_float_weight
    block_scalers = prog.absmax(n, NF4_BLOCK, 2)
    scaled_blocks = prog.new(2 * n)
    if chunk:
        codes = prog.new(n)  # one uint8 per element, filled chunk by chunk
        # every chunk frees all it allocates, so the allocator ends each one as it began: one full chunk
        # and the remainder replay the loop
        for c in (min(chunk, n), n % chunk if n > chunk else 0):
            if not c:
                continue
            nearest = _nearest(prog, c)
            as_uint8 = prog.new(c)
            prog.drop(nearest, as_uint8)
        shifted = prog.new(n // 2)
        packed = prog.new(n // 2)  # .to(torch.uint8) of a uint8 tensor returns it
        prog.drop(shifted, block_scalers, scaled_blocks, codes)
    else:
        codes = _nearest(prog, n)  # int64 indices
        shifted = prog.new(4 * n)  # codes[::2] << 4, int64
        combined = prog.new(4 * n)
        prog.drop(shifted)
        packed = prog.new(n // 2)
        prog.drop(block_scalers, scaled_blocks, codes, combined)
    return [table, mean, factor, int8_scales, packed]


def _nearest(prog: _Program, n: int) -> int:
    """quantize_tensor_nearest over n elements: (value - nf4).abs().min(dim=-1).indices."""
    diff = prog.new(32 * n)
    distance = prog.new(32 * n)
    prog.drop(diff)
    values, indices = prog.new(2 * n), prog.new(8 * n)
    prog.drop(values, distance)
    return indices


def _dequantize(prog: _Program, n: int) -> int:
    """NF4Tensor.get_original_weight of n elements; returns the bf16 weight."""
    high = prog.new(n // 2)
    high_long = prog.new(4 * n)
    prog.drop(high)
    low = prog.new(n // 2)
    low_long = prog.new(4 * n)
    prog.drop(low)
    first, second = prog.new(n), prog.new(n)  # nf4[codes], bf16, n / 2 each
    divided = prog.new(n // 32)
    scalers = prog.new(n // 32)
    prog.drop(divided)
    repeated = prog.new(n)
    scaled_first = prog.new(n)
    prog.drop(repeated)
    repeated = prog.new(n)
    scaled_second = prog.new(n)
    prog.drop(repeated)
    weight = prog.new(2 * n)  # torch.stack
    prog.drop(high_long, low_long, first, second, scalers, scaled_first, scaled_second)
    return weight


def _copy_nf4(prog: _Program, n: int, chunk: int) -> list[int]:
    """copy.deepcopy of an NF4 parameter: clone (dequantize, quantize), then the original's fields
    deep-copied over the clone's (the factor compactly: one per second-level block)."""
    weight = _dequantize(prog, n)
    clone = _to_nf4(prog, n, chunk)
    prog.drop(weight)
    copied = [prog.new(n // 64), prog.new(2 * (n // (NF4_BLOCK * NF4_SCALER_BLOCK))), prog.new(2),
              prog.new(n // 2), prog.new(32)]
    prog.drop(*clone)
    return copied


def _rope(prog: _Program, head_dim: int, max_seq_len: int) -> list[int]:
    """torchtune's RotaryPositionalEmbeddings._rope_init: theta and the fp32 cos/sin cache."""
    half = head_dim // 2
    steps = prog.new(8 * half)  # arange (int64)
    as_float = prog.new(4 * half)
    prog.drop(steps)
    divided = prog.new(4 * half)
    prog.drop(as_float)
    powered = prog.new(4 * half)
    prog.drop(divided)
    reciprocal = prog.new(4 * half)
    theta = prog.new(4 * half)
    prog.drop(reciprocal, powered)
    positions = prog.new(4 * max_seq_len)
    angles = prog.new(4 * max_seq_len * half)
    cos, sin = prog.new(4 * max_seq_len * half), prog.new(4 * max_seq_len * half)
    cache = prog.new(8 * max_seq_len * half)
    prog.drop(sin, cos, positions, angles)
    return [theta, cache]


def _torchtune_linears(spec: ModelSpec, lora_targets: tuple[str, ...]) -> list[tuple[str, int, int, bool]]:
    """(part, out, in, has LoRA) in the order torchtune's llama builders create a layer's linears."""
    kv = spec.kv_heads * spec.head_dim
    order = [("q", spec.inner, spec.hidden), ("k", kv, spec.hidden), ("v", kv, spec.hidden),
             ("o", spec.hidden, spec.inner), ("rope", 0, 0), ("gate", spec.intermediate, spec.hidden),
             ("down", spec.hidden, spec.intermediate), ("up", spec.intermediate, spec.hidden)]
    return [(part, out, inp, part in lora_targets) for part, out, inp in order]


def torchtune_qlora_events(spec: ModelSpec, lora_rank: int, lora_targets: tuple[str, ...],
                           lora_head: bool = False, chunk: int = TORCHAO_CHUNK,
                           fp16_checkpoint: bool = True) -> Iterator[Event]:
    """The allocations and frees of torchtune 0.1's QLoRA model build and checkpoint load (the
    linears with LoRA quantized to NF4 by torchao; `chunk` 0: torchao 0.1's whole-tensor to_nf4).
    `fp16_checkpoint`: the checkpoint is fp16 (Llama-2's HF files), so each weight is cast to bf16
    on the GPU before it is quantized."""
    prog = _Program()
    h, r = spec.hidden, lora_rank
    linears = _torchtune_linears(spec, lora_targets)
    max_seq_len = spec.max_positions or 4096

    def lora(out: int, inp: int) -> list[int]:
        return [prog.new(2 * r * inp), prog.new(2 * out * r)]

    def norm() -> list[int]:
        return [prog.new(2 * h)]

    # lora_llama2: one layer (attention, MLP, then its two norms), the embeddings, the output, the final norm
    layer: list[int] = []
    nf4: dict[str, list[int]] = {}
    for part, out, inp, adapted in linears:
        if part == "rope":
            layer += _rope(prog, spec.head_dim, max_seq_len)
            continue
        weight = prog.new(2 * out * inp)
        if adapted:
            nf4[part] = _to_nf4(prog, out * inp, chunk)
            prog.drop(weight)
            layer += nf4[part] + lora(out, inp)
        else:
            layer.append(weight)
    layer += norm() + norm()
    prog.new(2 * spec.vocab * h)  # tok_embeddings
    prog.new(2 * spec.vocab * h)  # output
    if lora_head:
        lora(spec.vocab, h)
    norm()
    # _get_clones: copy.deepcopy(layer) per layer (sa_norm, attention, mlp_norm, MLP: attribute order)
    clones: list[dict[str, list[int]]] = []
    for _i in range(spec.layers):
        fields: dict[str, list[int]] = {}
        norm()
        for part, out, inp, adapted in linears:
            if part == "gate":
                norm()
            if part == "rope":
                prog.new(2 * spec.head_dim)  # theta, fp32
                prog.new(8 * max_seq_len * (spec.head_dim // 2))
            elif adapted:
                fields[part] = _copy_nf4(prog, out * inp, chunk)
                lora(out, inp)
            else:
                prog.new(2 * out * inp)
        clones.append(fields)
    prog.drop(*layer)  # the builder's own layer is garbage once the model is built
    # load_state_dict: each NF4 weight from the CPU checkpoint, in state-dict order (the rest copy in place)
    for fields in clones:
        for part, out, inp, adapted in linears:
            if not adapted:
                continue
            n = out * inp
            on_gpu = prog.new(2 * n)
            cast = [prog.new(2 * n)] if fp16_checkpoint else []
            fresh = _to_nf4(prog, n, chunk)
            prog.drop(on_gpu, *cast, *fields[part])
            fields[part] = fresh
    yield from prog.events


def torchtune_qlora_reserved(spec: ModelSpec, lora_rank: int, lora_targets: tuple[str, ...],
                             lora_head: bool = False, chunk: int = TORCHAO_CHUNK) -> tuple[int, int]:
    """(reserved, peak allocated) bytes when torchtune's QLoRA build and checkpoint load are done."""
    allocator = replay(torchtune_qlora_events(spec, lora_rank, lora_targets, lora_head, chunk))
    return allocator.reserved, allocator.peak_allocated


def reserved_by_loading(spec: ModelSpec, setup: Setup) -> int:
    """What the setup's loading path leaves reserved (0 when none is given)."""
    if setup.loading != "torchtune":
        return 0
    targets = lora_targets(spec, setup.lora_targets)
    return torchtune_qlora_reserved(spec, setup.lora or 0, targets, "head" in targets, setup.torchao_chunk)[0]


__all__ = ["LOADING_PATHS", "TORCHAO_CHUNK", "reserved_by_loading", "torchtune_qlora_events",
           "torchtune_qlora_reserved"]
