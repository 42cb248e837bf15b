"""A family the formulas do not know (falcon, phi3, gemma2, deepseek_v3, ...): estimated by tracing
transformers' own causal-LM class for its model_type, built from the config on fake tensors (no
weights, no GPU, no arithmetic), through one training step twice or an inference prefill, as
accelerate's estimate-memory builds any model on the meta device. The trace gives the peak and what
it is made of; the caching allocator's rounding and the CUDA context are added as for every estimate.

The config is untrusted: it is built only by a class transformers ships (never a model's own code:
no trust_remote_code), its sizes are bounded before anything is built, and whatever transformers
raises while building or running it is one line naming the class.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import warnings
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any

from ..i18n import N_, _
from .analytic import CUBLAS_WORKSPACES, Estimate, Setup, cublas_workspaces, default_context, round_segments
from .formulas import Term
from .specs import MAX_LAYERS, MAX_PARAMS, EstimateError, ModelSpec, _whole, from_config
from .trace import TraceResult, TraceUnavailable, _torch, fake_mode, make_optimizer, trace_memory

# What the traced step runs: a whole model trained in full on one GPU (or one inference prefill); every
# other option of a setup changes what is built or how it is split, which this path does not model.
TRACED_OPTIONS = {"mode", "batch", "seq", "precision", "optimizer", "grad_accum", "checkpointing", "attention",
                  "head", "context_overhead", "cuda", "fragmentation", "zero_grad_to_none",
                  "zero_grad_before_backward", "foreach", "fused", "stack", "loop", "assumed",
                  # details of an option refused above (LoRA's, 4-bit's, DeepSpeed's, DataParallel's): they
                  # change nothing without it
                  "lora_targets", "lora_dropout", "adapter_dtype", "quant_compute_dtype", "quant_backend",
                  "quant_head", "double_quant", "torchao_chunk", "int8_wo_v1", "parallel", "zero_reduce_bucket",
                  "zero_allgather_bucket", "zero_prefetch_bucket", "zero_persistence", "zero_max_live",
                  "zero_overlap_comm"}
# the setup's flag for each field refused (the CLI's spelling)
_FLAGS = {"lora": "--lora", "adapter": "--adapter", "prefix_len": "--prefix-len", "quant": "--quant",
          "gpus": "--gpus", "zero": "--zero", "fsdp": "--fsdp", "tp": "--tp", "offload": "--offload",
          "offload_params": "--offload", "ce_chunk": "--chunked-ce", "new_tokens": "--new-tokens",
          "loading": "--loading", "keeps_last_graph": "--keeps-last-graph", "fused_qkv": "--fused-qkv",
          "image_size": "--image-size", "decoder_seq": "--decoder-seq", "foreach_denom_copy": "--torch",
          # the installed transformers' class is what runs: another version's behaviour is not reproduced
          "cache_views": "--transformers", "legacy_cache": "--transformers", "all_logits": "--transformers"}
ATTENTION = {"eager": "eager", "flash": "sdpa"}  # transformers' attn_implementation for --attention
_KINDS = {"parameters": "weights", "buffers": "weights", "gradients": "gradients", "optimizer state": "optimizer",
          "activations": "activations", "cuBLAS workspaces": "overhead"}


def _one_line(e: BaseException) -> str:
    """What transformers said, on one line and short (a config's values may be anyone's text)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in str(e)).split())
    return text if len(text) <= 160 else text[:159] + "…"


def _refused(setup: Setup) -> list[str]:
    default = Setup()
    return [_FLAGS.get(f.name, f.name.replace("_", "-")) for f in fields(setup)
            if f.name not in TRACED_OPTIONS and getattr(setup, f.name) != getattr(default, f.name)]


def _transformers() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import transformers
    except ImportError:
        from ..install_hint import install_hint

        raise TraceUnavailable(_("needs transformers: {hint}").format(hint=install_hint("trainers"))) from None
    return transformers


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' warnings about a config (its logger, and Python's warnings) and the fake tensors'
    log of a failed shape kept off stderr: the estimate says what matters, on one line."""
    tf_logging = _transformers().logging
    level = tf_logging.get_verbosity()
    tf_logging.set_verbosity_error()
    fake = logging.getLogger("torch._subclasses.fake_tensor")  # logs the traceback of a shape a config broke
    disabled, fake.disabled = fake.disabled, True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        tf_logging.set_verbosity(level)
        fake.disabled = disabled


def _class_of(model_type: str, name: str) -> tuple[Any, Any]:
    """(config class, causal-LM class name) transformers ships for model_type."""
    tf = _transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING:
        raise EstimateError(_("{where}: model_type {type!r} is neither in the formulas nor in transformers {version} "
                              "(a model with its own code is never run); give its parameter count for weights and "
                              "model states alone: vram estimate 8B").format(where=name, type=model_type[:40],
                                                                            version=tf.__version__))
    cls_name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if cls_name is None:
        raise EstimateError(_("{where}: model_type {type!r} has no causal-LM class in transformers {version}: only "
                              "decoders are traced from a config; give its parameter count for weights and model "
                              "states alone: vram estimate 8B").format(where=name, type=model_type[:40],
                                                                      version=tf.__version__))
    return CONFIG_MAPPING[model_type], getattr(tf, cls_name)


class NotTraceable(EstimateError):
    """A config transformers can build whose class the tracer does not take (no attention heads: a
    state-space model such as mamba steps through its sequence in Python on the CPU, for minutes)."""


# What a trace walks, bounded in time as well as memory: each layer is built and run on fake tensors
# (~0.06 s a dense layer on this CPU, ~2 ms an expert in it; Qwen3-30B-A3B, 48 x 128, in 9 s): at the caps,
# about a minute. Past them, a hostile config took 3 to 5+ minutes (2,048 layers; 1,000 x 65 experts).
TRACED_MAX_LAYERS = 256
TRACED_MAX_EXPERT_LAYERS = 32768


def _bounded(config: Any, name: str) -> int:
    """The config's layer count, after checking the sizes a build walks or multiplies."""
    layers = 0
    for key in ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads"):
        value = getattr(config, key, None)
        if value is None:
            continue
        try:
            number = _whole(key, value, least=1)
        except EstimateError as e:
            raise EstimateError(f"{name}: {e}") from None  # which config said so
        if key == "num_hidden_layers":
            layers = number
            if number > MAX_LAYERS:
                raise EstimateError(_("{where}: {layers:,} layers is more than any model has (at most {most:,})")
                                    .format(where=name, layers=number, most=MAX_LAYERS))
            if number > TRACED_MAX_LAYERS:
                raise EstimateError(_("{where}: {layers:,} layers would take minutes to trace (every layer is built "
                                      "and run; at most {most:,}: Llama 3.1 405B has 126)")
                                    .format(where=name, layers=number, most=TRACED_MAX_LAYERS))
    for key in ("n_routed_experts", "num_local_experts", "num_experts"):
        experts = getattr(config, key, None)
        if isinstance(experts, int) and experts * max(layers, 1) > TRACED_MAX_EXPERT_LAYERS:
            raise EstimateError(_("{where}: {experts:,} experts in each of {layers:,} layers would take minutes to "
                                  "trace (at most {most:,} in all: Kimi K2 has 384 x 61)").format(
                where=name, experts=experts, layers=layers, most=TRACED_MAX_EXPERT_LAYERS))
    return layers


def build(cfg: dict[str, Any], name: str) -> tuple[Any, Any]:
    """(transformers config, model class) for a config dict, its sizes checked before anything is built."""
    model_type = str(cfg.get("model_type", ""))
    config_cls, model_cls = _class_of(model_type, name)
    kwargs = {k: v for k, v in cfg.items() if isinstance(k, str) and k not in ("model_type", "auto_map")}
    try:
        with _quiet():
            config = config_cls(**kwargs)
    except Exception as e:  # noqa: BLE001 - an untrusted config: whatever the class makes of it, one line
        raise EstimateError(_("{where}: transformers' {cls} refused this config ({error})").format(
            where=name, cls=config_cls.__name__, error=_one_line(e))) from None
    if not getattr(config, "num_attention_heads", None):
        raise NotTraceable(_("{where}: tracing takes attention models only, and transformers' {cls} has no attention "
                             "heads").format(where=name, cls=config_cls.__name__))
    _bounded(config, name)
    return config, model_cls


def stand_in(cfg: dict[str, Any], name: str) -> ModelSpec:
    """A decoder spec carrying what the stack and Setup.check read of a model (its checkpoint dtype,
    its vocabulary and positions); the traced model's own shapes come from its class."""
    keys: dict[str, Any] = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 64,
                            "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 2}
    for key in ("vocab_size", "max_position_embeddings", "dtype", "torch_dtype"):
        if cfg.get(key) is not None:
            keys[key] = cfg[key]
    return from_config(keys, name=name, source="config")


def estimate_by_tracing(cfg: dict[str, Any], setup: Setup | None = None, name: str = "config",
                        steps: int = 2, **options: Any) -> tuple[Estimate, TraceResult]:
    """Estimate a config of a family the formulas do not know by tracing transformers' class for it."""
    setup = replace(setup or Setup(), **options)
    refused = _refused(setup)
    if refused:
        raise EstimateError(_("{where}: model_type {type!r} is estimated by tracing its transformers class, whole, on "
                              "one GPU: not with {options}").format(where=name, type=str(cfg.get("model_type"))[:40],
                                                                    options=", ".join(dict.fromkeys(refused))))
    if setup.head not in (None, "lm"):
        raise EstimateError(_("{where}: only the language-model head (lm) is traced for a config").format(where=name),
                            param="head")
    spec = stand_in(cfg, name)
    setup.check(spec)
    config, model_cls = build(cfg, name)
    vocab = _whole("vocab_size", getattr(config, "vocab_size", None) or spec.vocab, least=1)
    torch = _torch()
    train = setup.mode == "train"
    mixed = train and setup.precision in ("fp16", "bf16")
    low = torch.bfloat16 if setup.precision.startswith("bf16") else torch.float16
    pure = setup.precision == "bf16-pure" or (not train and setup.precision != "fp32")
    seq = setup.seq or min(2048, spec.max_positions or 2048)
    attention = ATTENTION.get(setup.attention, "eager")
    said = []
    if attention == "sdpa" and not getattr(model_cls, "_supports_sdpa", False):  # no attention (Mamba), or eager only
        attention = "eager"
        said.append(_("{cls} has no SDPA attention: traced with its eager code").format(cls=model_cls.__name__))
    config._attn_implementation = attention
    fm = fake_mode()
    with _quiet():
        default = torch.get_default_dtype()
        try:
            torch.set_default_dtype(low if pure else torch.float32)  # built in its dtype: no copies
            with fm:
                net = model_cls(config)
        except Exception as e:  # noqa: BLE001 - an untrusted config: one line, whatever transformers raised
            raise EstimateError(_("{where}: transformers could not build {cls} from this config ({error})").format(
                where=name, cls=model_cls.__name__, error=_one_line(e))) from None
        finally:
            torch.set_default_dtype(default)
        params = sum(p.numel() for p in net.parameters())
        if params > MAX_PARAMS:
            raise EstimateError(_("{where}: {params:.3g} parameters is more than any model has (at most {most:.0e})")
                                .format(where=name, params=params, most=MAX_PARAMS))
        net.train(train)
        if train and setup.checkpointing:
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        optimizer = make_optimizer(setup.optimizer, net.parameters(), setup.foreach, setup.fused) if train else None
        keep_logits = "logits_to_keep" in inspect.signature(net.forward).parameters

        def step(_: int) -> None:
            def batch() -> Any:
                return torch.randint(0, vocab, (setup.batch, seq))

            if not train:
                ids = batch()
                with torch.no_grad():  # as generate() prefills: the cache, the last position's logits
                    net(input_ids=ids, use_cache=True, **({"logits_to_keep": 1} if keep_logits else {}))
                return
            for micro in range(setup.grad_accum):
                ids = batch()
                with torch.autocast("cpu", dtype=low, enabled=mixed):
                    loss = net(input_ids=ids, labels=ids).loss
                if optimizer is not None and setup.zero_grad_before_backward and micro == 0:
                    optimizer.zero_grad(set_to_none=setup.zero_grad_to_none)
                loss.backward()
                del loss, ids
            if optimizer is not None:
                optimizer.step()
                if not setup.zero_grad_before_backward:
                    optimizer.zero_grad(set_to_none=setup.zero_grad_to_none)

        try:
            traced = trace_memory(net, step, steps=steps, optimizer=optimizer, fake_mode=fm)
        except EstimateError:
            raise
        except Exception as e:  # noqa: BLE001 - an untrusted config: one line, whatever transformers raised
            raise EstimateError(_("{where}: {cls} failed on a traced step ({error})").format(
                where=name, cls=model_cls.__name__, error=f"{type(e).__name__}: {_one_line(e)}")) from None
    estimated = _as_estimate(traced, setup, name, str(cfg.get("model_type")), model_cls.__name__, params, seq, mixed)
    estimated.notes += said
    return estimated, traced


def _as_estimate(t: TraceResult, setup: Setup, name: str, model_type: str, cls_name: str, params: int, seq: int,
                 mixed: bool) -> Estimate:
    """The trace as an estimate: its peak and what was live there, the cuBLAS workspaces every run
    takes, the caching allocator's overhead and the CUDA context, as analytic estimates add them."""
    import transformers

    pooled, own = cublas_workspaces(setup)
    t.peak_bytes += pooled
    t.steady_bytes += pooled
    t.step_peaks = [p + pooled for p in t.step_peaks]
    t.breakdown["cuBLAS workspaces"] = CUBLAS_WORKSPACES
    where = _("live at the traced peak (step {step}, {phase})").format(step=t.peak_step, phase=t.peak_phase)
    terms = [Term(what, n, where, _KINDS.get(what, "transient")) for what, n in t.breakdown.items()]
    reserved = round_segments(int(t.peak_bytes * (1 + setup.fragmentation)))
    context = setup.context_overhead if setup.context_overhead is not None else default_context(setup.cuda)
    terms += [Term(N_("allocator overhead"), reserved - t.peak_bytes, _(
                  "caching allocator: {share:.0%} fragmentation over the peak, rounded up to 2 MiB segments "
                  "(estimate)").format(share=setup.fragmentation), "overhead"),
              Term(N_("CUDA context"), context, "--context-overhead" if setup.context_overhead is not None else
                   _("default for CUDA {version:g}").format(version=setup.cuda), "overhead")]
    breakdown = {**t.breakdown, "allocator overhead": reserved - t.peak_bytes, "CUDA context": context}
    notes = [(_("model_type {type!r} is not in the formulas: estimated by tracing transformers' {cls} built from the "
                "config on fake tensors, a training step twice") if setup.mode == "train" else
              _("model_type {type!r} is not in the formulas: estimated by tracing transformers' {cls} built from the "
                "config on fake tensors, one prefill")).format(type=model_type, cls=cls_name),
             _("traced with transformers {transformers} and torch {torch}").format(
                 transformers=transformers.__version__, torch=_torch().__version__)]
    if mixed:
        notes.append(_("{precision} mixed precision traced under CPU autocast, which keeps some ops CUDA runs in fp32 "
                       "(norms, softmax) in 16-bit unless the model casts them itself").format(
            precision=setup.precision))
    moment = f"traced {t.peak_phase}"
    return Estimate(model=name, family=model_type, setup=setup, params=params,
                    trainable=params if setup.mode == "train" else 0, seq=seq, terms=terms,
                    moments={moment: t.steady_bytes}, first_step={moment: t.step_peaks[0]}, peak_moment=moment,
                    peak_bytes=t.peak_bytes, steady_bytes=t.steady_bytes, reserved_bytes=reserved,
                    context_bytes=context, total_bytes=reserved + context + own, breakdown=breakdown, notes=notes)


__all__ = ["TRACED_OPTIONS", "build", "estimate_by_tracing", "stand_in"]
