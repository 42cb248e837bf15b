"""The estimate with activation offloading (`--offload-activations`) against torchtune's own OffloadActivations,
traced on the CPU: torchtune 0.6.1's llama3 builder (bf16) in its recipe's setup (set_activation_checkpointing on
every TransformerSelfAttentionLayer, get_act_offloading_ctx_manager: the output layer under NoOpManager), run on the
tracer's fake CPU tensors, every storage counted by vramkit's TensorTracker. The default suite holds the estimate to
the bytes so measured (below); where torchtune imports (torchao < 0.18 beside it: docs/estimation.md) the slow test
measures them again.

What the trace changes so that the hooks run without CUDA (only names, none of torchtune's logic): the tracer's CPU
tensors stand for the GPU, so the user code's "cuda" is renamed "cpu" (`Tensor.to`) and its "cpu" is made on the
meta device (`empty_like(..., device="cpu")`: host memory, which the tracker does not count); torch.cuda's streams,
events and `record_stream` are no-ops (they order work, they free nothing: each tensor is freed when torchtune drops
its last reference, as the caching allocator counts it)."""

from __future__ import annotations

import contextlib
import importlib.util
from typing import Any

import pytest

from vramkit.estimator import estimate
from vramkit.estimator.specs import EstimateError, from_config, resolve

LAYERS = (3, 6)
BATCH, SEQ, HIDDEN, INTER, HEADS, KV, VOCAB = 2, 256, 256, 688, 4, 2, 256
LAYER_INPUT = BATCH * SEQ * HIDDEN * 2  # bf16
# traced: (layers, checkpointing, offloaded) -> (bytes on the device at the forward's end, less the weights and
# the logits; the most the storages that are not gradients held at once in backward, less the weights)
TRACED = {
    (3, True, False): (2_107_904, 8_967_168), (3, True, True): (1_321_472, 8_442_880),
    (3, False, False): (20_822_528, 22_656_000), (3, False, True): (1_321_472, 4_850_688),
    (6, True, False): (2_894_336, 9_753_600), (6, True, True): (1_321_472, 8_442_880),
    (6, False, False): (40_323_584, 42_157_056), (6, False, True): (1_321_472, 4_850_688),
}


def _config(layers: int) -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": layers,
            "num_attention_heads": HEADS, "num_key_value_heads": KV, "vocab_size": VOCAB,
            "max_position_embeddings": SEQ, "tie_word_embeddings": False}


def _estimate(layers: int, checkpointing: bool, offload: bool) -> Any:
    spec = from_config(_config(layers), name="torchtune-llama3", source="config")
    return estimate(spec, batch=BATCH, seq=SEQ, precision="bf16-pure", optimizer="none", attention="flash",
                    checkpointing=checkpointing, offload_activations=offload)


@pytest.mark.parametrize("layers", LAYERS)
def test_no_layer_input_is_left_on_the_gpu_at_the_forwards_end(layers: int):
    """The stash keeps the last 5 saved tensors, and the final norm saves 5 after the last layer's input: offloading
    takes every layer input off the GPU by the forward's end (traced), not all but the last 5."""
    plain, offloaded = _estimate(layers, True, False), _estimate(layers, True, True)
    traced = TRACED[layers, True, False][0] - TRACED[layers, True, True][0]
    assert traced == layers * LAYER_INPUT
    assert plain.moments["forward end"] - offloaded.moments["forward end"] == traced


@pytest.mark.parametrize("layers", LAYERS)
def test_one_layer_input_is_brought_back_at_a_time(layers: int):
    """In backward, with checkpointing, the input of the layer recomputed is brought back and the one before it
    freed: the recompute holds one layer input where it held all the layers' not yet run (traced, to the byte)."""
    plain, offloaded = _estimate(layers, True, False), _estimate(layers, True, True)
    traced = TRACED[layers, True, False][1] - TRACED[layers, True, True][1]
    assert traced == (layers - 1) * LAYER_INPUT
    assert plain.moments["recompute"] - offloaded.moments["recompute"] == traced


@pytest.mark.parametrize("layers", LAYERS)
def test_without_checkpointing_two_nodes_tensors_are_in_flight(layers: int):
    """Without checkpointing (torchtune's recipes refuse it; the class runs it) every saved tensor is offloaded:
    the forward's end keeps what is saved outside the layers; backward brings two autograd nodes' saved tensors back
    at a time, bounded here by the layer's two largest: the estimate saves at least 80 % of what the trace does
    (it counts torchtune's layer 4 % short), never more."""
    plain, offloaded = _estimate(layers, False, False), _estimate(layers, False, True)
    for i, moment in enumerate(("forward end", "backward start")):
        traced = TRACED[layers, False, False][i] - TRACED[layers, False, True][i]
        saved = plain.moments[moment] - offloaded.moments[moment]
        assert 0.8 * traced < saved <= traced, moment


def test_the_formula_says_what_stays():
    spec = resolve("llama-3-8b")
    plain = estimate(spec, seq=2048, precision="bf16-pure", checkpointing=True)
    offloaded = estimate(spec, seq=2048, precision="bf16-pure", checkpointing=True, offload_activations=True)
    layer_input = 2048 * spec.hidden * 2
    outside = next(t for t in plain.terms if t.name == "activations").bytes - spec.layers * layer_input
    term = next(t for t in offloaded.terms if t.name == "activations")
    assert "pinned CPU memory" in term.formula
    assert term.bytes == outside and term.at("backward start") == outside and term.at("recompute") == layer_input
    with pytest.raises(EstimateError, match="not under DeepSpeed ZeRO or FSDP"):
        estimate(spec, offload_activations=True, zero=3, gpus=8)


# ---- traced again where torchtune imports (not in .venv: a venv of its own with torchao < 0.18)

@contextlib.contextmanager
def _cuda_named_for_the_tracer(torch: Any) -> Any:
    """torch.cuda's streams as no-ops, and the user code's "cuda" the tracer's CPU (see the module docstring)."""
    class Stream:
        def record_event(self) -> object:
            return object()

        def wait_event(self, event: object) -> None:
            pass

        def wait_stream(self, stream: object) -> None:
            pass

    cuda = {name: getattr(torch.cuda, name) for name in ("default_stream", "Stream", "stream")}
    to, record_stream = torch.Tensor.to, torch.Tensor.record_stream

    def to_device(self: Any, *args: Any, **kwargs: Any) -> Any:  # .to("cuda") asks for CUDA before any mode sees it
        if args and isinstance(args[0], (str, torch.device)) and torch.device(args[0]).type == "cuda":
            return to(self, "cpu", *args[1:], copy=True, **kwargs)
        return to(self, *args, **kwargs)

    torch.cuda.default_stream = torch.cuda.Stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda stream: contextlib.nullcontext()
    torch.Tensor.to, torch.Tensor.record_stream = to_device, lambda self, stream: None
    try:
        yield
    finally:
        for name, value in cuda.items():
            setattr(torch.cuda, name, value)
        torch.Tensor.to, torch.Tensor.record_stream = to, record_stream


def _host_on_meta(torch: Any) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class HostOnMeta(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            device = kwargs.get("device")
            if func is torch.ops.aten.empty_like.default and device is not None and torch.device(device).type == "cpu":
                kwargs["device"] = torch.device("meta")
                kwargs.pop("pin_memory", None)
            return func(*args, **kwargs)

    return HostOnMeta()


def _non_gradient_peak(tracker: Any, lo: int, hi: int) -> int:
    live, deltas = 0, {}
    for r in tracker.history:
        if r.label == "gradients" or not r.nbytes:
            continue
        if r.born <= lo and (r.died is None or r.died > lo):
            live += r.nbytes
        elif lo < r.born <= hi:
            deltas[r.born] = deltas.get(r.born, 0) + r.nbytes
        if r.died is not None and lo < r.died <= hi and r.born <= hi:
            deltas[r.died] = deltas.get(r.died, 0) - r.nbytes
    peak = live
    for seq in sorted(deltas):
        live += deltas[seq]
        peak = max(peak, live)
    return peak


def _trace(layers: int, checkpointing: bool, offload: bool) -> tuple[int, int]:
    if importlib.util.find_spec("torchtune") is None:
        pytest.skip("torchtune is not installed (0.6.1 needs torchao < 0.18 beside it: docs/estimation.md)")
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchtune", reason="torchtune does not import (0.6.1 needs torchao < 0.18)")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtune import modules, training
    from torchtune.models.llama3._component_builders import llama3

    from vramkit.torch._tensors import TensorTracker

    fake = FakeTensorMode()
    with fake, training.set_default_dtype(torch.bfloat16):
        model = llama3(vocab_size=VOCAB, num_layers=layers, num_heads=HEADS, num_kv_heads=KV, embed_dim=HIDDEN,
                       max_seq_len=SEQ, intermediate_dim=INTER)
    if checkpointing:
        training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    tracker = TensorTracker(keep=True)
    for t in [*model.parameters(), *model.buffers()]:
        tracker.adopt(t)
    base = tracker.current

    def mark(p: Any) -> None:
        record = tracker.storage_of(p.grad)
        if record is not None:
            record.label = "gradients"

    hooks = [p.register_post_accumulate_grad_hook(mark) for p in model.parameters()]
    result = (0, 0)
    with _cuda_named_for_the_tracer(torch):
        ctx = training.get_act_offloading_ctx_manager(model, offload)
        with fake:
            tracker.start()
            host = _host_on_meta(torch)
            host.__enter__()
            try:
                for _step in range(2):
                    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
                    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
                    with ctx:
                        logits = model(tokens)
                    forward_end = tracker.current - base - logits.untyped_storage().nbytes()
                    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), labels.reshape(-1))
                    del logits
                    lo = tracker.seq
                    loss.backward()
                    result = (forward_end, _non_gradient_peak(tracker, lo, tracker.seq) - base)
                    for p in model.parameters():
                        p.grad = None
            finally:
                host.__exit__(None, None, None)
                tracker.stop()
    for h in hooks:
        h.remove()
    return result


@pytest.mark.slow  # eight traced steps of torchtune's llama: about a minute on a CPU
@pytest.mark.parametrize("case", list(TRACED))
def test_torchtunes_offloading_keeps_what_was_measured(case: tuple[int, bool, bool]):
    assert _trace(*case) == TRACED[case]
