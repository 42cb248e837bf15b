"""Host (CPU) memory an offloaded run needs: what DeepSpeed's ZeRO-Offload and FSDP's CPUOffload keep
in the machine's RAM instead of on the GPUs, for all the --gpus of one node together (the processes
of one machine share its RAM).

- DeepSpeed follows its own estimators (deepspeed/runtime/zero/stage_1_and_2.py
  `estimate_zero2_model_states_mem_needs`, stage3.py `estimate_zero3_model_states_mem_needs`): the
  fp32 master weights, the optimizer states and the fp32 gradients on the CPU, 16 bytes a parameter
  under Adam, 18 with ZeRO-3's 16-bit parameters offloaded too, times DeepSpeed's
  additional_buffer_factor of 1.5; stages 1-2 build the model in every process before it is
  partitioned (no zero.Init), so at least 4 bytes a parameter per GPU.
- FSDP with CPUOffload(offload_params=True) keeps the sharded parameters in their dtype, their
  gradients, and the optimizer states (the step runs on the CPU): no buffer factor is published.
A frozen base (LoRA) has no master weights, gradients or states: those count the trainable
parameters only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..i18n import _

if TYPE_CHECKING:
    from .analytic import Estimate

DEEPSPEED_BUFFER_FACTOR = 1.5  # additional_buffer_factor, the estimators' default
# optimizer state bytes a parameter, fp32 (the GPU formulas' table without the master copy)
STATE_BYTES = {"adamw": 8, "adamw-8bit": 2, "paged-adamw": 8, "sgd": 0, "sgd-momentum": 4, "adafactor": 4,
               "none": 0}


def host_memory(e: Estimate) -> tuple[int, str] | None:
    """(bytes of host RAM, how it is counted) for an estimate with CPU offload; None without."""
    s = e.setup
    if s.mode != "train" or not (s.offload or s.offload_params):
        return None
    total = e.params
    trainable = e.trainable * s.tp
    states = STATE_BYTES.get(s.optimizer, 8)
    if s.fsdp:
        w = 2 if s.precision == "bf16-pure" else 4
        n = total * w + trainable * (w + states)
        return n, _("FSDP CPUOffload: {params:,} params × {bytes} B + {trainable:,} trainable × ({bytes} B gradients + "
                    "{states} B optimizer states), for the {gpus} GPUs' shards together").format(
            params=total, bytes=w, trainable=trainable, states=states, gpus=s.gpus)
    per = 4 + states + 4 if s.offload else 0  # fp32 master + states + fp32 gradients
    params16 = 2 * total if s.offload_params else 0
    n = trainable * per + params16
    parts = ([_("{trainable:,} trainable × {bytes} B (fp32 master, {states} B optimizer states, fp32 gradients)")
              .format(trainable=trainable, bytes=per, states=states)] if per else []) + (
        [_("{params:,} params × 2 B (ZeRO-3 parameter offload)").format(params=total)] if params16 else [])
    offloaded = " + ".join(parts)  # a sum: the same in every language
    if s.zero is not None and s.zero < 3 and 4 * total * s.gpus > n:  # each process holds the model as it loads
        n = 4 * total * s.gpus
        offloaded = _("{offloaded}; at load every process builds the whole fp32 model first: {params:,} × 4 B × "
                      "{gpus} GPUs").format(offloaded=offloaded, params=total, gpus=s.gpus)
    return int(n * DEEPSPEED_BUFFER_FACTOR), _(
        "DeepSpeed offload: {offloaded}, × {factor:g} (DeepSpeed's additional_buffer_factor), for the {gpus} GPUs of "
        "one node together").format(offloaded=offloaded, factor=DEEPSPEED_BUFFER_FACTOR, gpus=s.gpus)


__all__ = ["host_memory"]
