#!/usr/bin/env python3
"""`vram estimate` against published measurements.

Source: Hugging Face Transformers docs, "Model training anatomy" and "Methods and tools for
efficient training on a single GPU" (perf_train_gpu_one): bert-large-uncased for sequence
classification, seq 512, HF Trainer, on a Tesla V100-SXM2-16GB, driver 460.91.03 (CUDA 11.2).
"GPU memory occupied" there is NVML's used memory after training, in MiB (printed as "MB"); the
same page measures 1343 MiB for the CUDA context and kernels alone (torch.ones(1).cuda()), which
is what we pass as the context overhead. Those runs (2022: transformers 4.2x on PyTorch 1.x) call
`model.zero_grad()`, which in PyTorch < 2.0 zeroes the gradients in place instead of freeing them,
so we pass zero_grad_to_none=False.

    python benchmarks/validate_published.py
"""

from __future__ import annotations

import vramkit

CONTEXT = 1343 * 2**20
BASE = {"batch": 4, "seq": 512, "precision": "fp32", "optimizer": "adamw", "attention": "eager",
        "context_overhead": CONTEXT, "zero_grad_to_none": False}
# (setting, the Trainer arguments, our options, published MiB)
CASES = [
    ("batch 4, fp32, AdamW", "per_device_train_batch_size=4", {}, 14949),
    ("batch 1 x accum 4", "per_device_train_batch_size=1, gradient_accumulation_steps=4",
     {"batch": 1, "grad_accum": 4}, 8681),
    ("batch 4, fp16 mixed", "fp16=True", {"precision": "fp16"}, 13939),
    ("batch 1 x 4, checkpointing, fp16", "bs 1, accum 4, gradient_checkpointing, fp16",
     {"batch": 1, "grad_accum": 4, "checkpointing": True, "precision": "fp16"}, 7275),
    ("batch 4, Adafactor", "optim='adafactor'", {"optimizer": "adafactor"}, 12295),
    ("batch 1 x 4, checkpointing, fp16, Adafactor", "... optim='adafactor'",
     {"batch": 1, "grad_accum": 4, "checkpointing": True, "precision": "fp16", "optimizer": "adafactor"}, 4847),
    ("batch 4, 8-bit Adam", "bnb.optim.Adam8bit", {"optimizer": "adamw-8bit"}, 13085),
    ("batch 1 x 4, checkpointing, fp16, 8-bit Adam", "... Adam8bit",
     {"batch": 1, "grad_accum": 4, "checkpointing": True, "precision": "fp16", "optimizer": "adamw-8bit"}, 5363),
]


def main() -> None:
    print("bert-large-uncased, seq 512, V100-16GB (HF docs) vs `vram estimate` (nvidia-smi view)\n")
    print(f"{'setting':<46} {'published':>10} {'ours':>10} {'error':>7}")
    errors = []
    for label, _, options, published in CASES:
        ours = vramkit.estimate("bert-large-uncased", **{**BASE, **options}).total_bytes / 2**20
        error = (ours - published) / published
        errors.append(abs(error))
        print(f"{label:<46} {published:>7} MiB {ours:>6.0f} MiB {100 * error:>+6.1f}%")
    print(f"\nmean absolute error {100 * sum(errors) / len(errors):.1f}%, worst {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
