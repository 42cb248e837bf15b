#!/usr/bin/env python3
"""`vram estimate` against memory measurements that others published.

Each case is one published number, quoted from the source named with it (the comment says where),
with the setting that source ran: model and head, batch, sequence, precision, optimizer, LoRA,
quantization, sharding. Each is compared with the estimate's own counterpart of what the source
measured: `torch.cuda.max_memory_allocated` with `peak_bytes`, `max_memory_reserved` with
`reserved_bytes`, nvidia-smi / NVML used memory with `total_bytes`, allocated plus what nvidia-smi shows
beyond the reserved (optimum's benchmark) with `peak_bytes + context_bytes`. Nothing here is fitted: a case
that misses stays in the table and docs/estimation.md says why. A case that needs an option or a
model family the estimator does not have yet is kept and shown as "needs ...", outside the
statistics.

    python benchmarks/validate_published.py
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field, fields
from typing import Any

from vramkit.estimator import Estimate, EstimateError, ModelSpec, Setup, estimate, resolve
from vramkit.estimator.catalog import MODELS
from vramkit.estimator.specs import from_config

UNITS = {"GB": 10**9, "GiB": 2**30, "MiB": 2**20, "MB": 10**6}
# what the source measured -> the Estimate fields whose sum models it
ALLOCATED, RESERVED, NVIDIA_SMI = "max_memory_allocated", "max_memory_reserved", "nvidia-smi"
# optimum's benchmark: max_memory_allocated plus what nvidia-smi showed beyond max_memory_reserved (the CUDA
# context and any memory outside PyTorch's allocator)
ALLOCATED_AND_EXTERNAL = "max_memory_allocated + non-PyTorch"
COUNTERPART = {ALLOCATED: ("peak_bytes",), RESERVED: ("reserved_bytes",), NVIDIA_SMI: ("total_bytes",),
               ALLOCATED_AND_EXTERNAL: ("peak_bytes", "context_bytes")}


@dataclass(frozen=True)
class Source:
    title: str
    url: str
    where: str  # the GPU and software, as the source states them
    measured: str  # ALLOCATED | RESERVED | NVIDIA_SMI | ALLOCATED_AND_EXTERNAL
    unit: str  # the unit the source prints its numbers in (a key of UNITS)
    decimals: int  # as printed there


@dataclass(frozen=True)
class Case:
    source: Source
    label: str
    model: str  # a catalog name or a key of CONFIGS
    published: float  # in source.unit, as printed
    options: dict[str, Any] = field(default_factory=dict)
    needs: str = ""  # what the estimate lacks when an option below is not a Setup field yet


# Configs not in the catalog (copied from the published config.json, adjusted as the source ran them)
CONFIGS: dict[str, dict[str, Any]] = {
    # torchvision's vit_l_16 is ViT-L/16 (h 1024, 24 layers, 16 heads, MLP 4096, no dropout), its
    # head replaced by a 10-class Linear for CIFAR-10
    "vit_l_16 (10 classes)": {**MODELS["vit-large"], "num_labels": 10},
    # bigcode/octocoder = StarCoder's architecture (gpt_bigcode, multi-query attention; 15,517,456,384
    # parameters with the tied lm_head)
    "bigcode/octocoder": {"model_type": "gpt_bigcode", "n_embd": 6144, "n_layer": 40, "n_head": 48,
                          "n_inner": 24576, "n_positions": 8192, "vocab_size": 49152, "multi_query": True,
                          "activation_function": "gelu_pytorch_tanh", "tie_word_embeddings": True},
    # TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T: llama with grouped-query attention 32:4
    "tiny-llama-1.1b": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                        "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                        "max_position_embeddings": 2048, "hidden_act": "silu", "tie_word_embeddings": False},
    # google/gemma-2b: multi-query, head_dim 256, its lm_head tied to the embedding (LitGPT's GPT has its own
    # lm_head all the same: convert_hf_checkpoint copies the embedding into it, which --loop litgpt says)
    "google/gemma-2b": {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
                        "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1,
                        "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
                        "hidden_act": "gelu", "tie_word_embeddings": True},
    # transformers' benchmark docs: PyTorchBenchmark on configs built in the script (BertConfig(), with
    # hidden_size=384, with num_hidden_layers=6): no `architectures`, so MODEL_MAPPING's BertModel (the pooler, no
    # task head; ours adds the 2-label classifier's 1,538 parameters)
    # Qwen/Qwen2.5-{0.5B,1.5B,3B,14B}-Instruct: qwen2 (q/k/v biases, grouped-query attention, SwiGLU) as the
    # catalog's qwen2.5-7b, with their own sizes; the three small ones tie lm_head to the embedding
    **{name: {**MODELS["qwen2.5-7b"], "hidden_size": h, "intermediate_size": i, "num_hidden_layers": n,
              "num_attention_heads": a, "num_key_value_heads": kv, "vocab_size": v, "tie_word_embeddings": tied}
       for name, h, i, n, a, kv, v, tied in (("Qwen2.5-0.5B-Instruct", 896, 4864, 24, 14, 2, 151936, True),
                                             ("Qwen2.5-1.5B-Instruct", 1536, 8960, 28, 12, 2, 151936, True),
                                             ("Qwen2.5-3B-Instruct", 2048, 11008, 36, 16, 2, 151936, True),
                                             ("Qwen2.5-14B-Instruct", 5120, 13824, 48, 40, 8, 152064, False))},
    # LitGPT's stablelm-base-alpha-3b (lit_gpt/config.py at 8641822): GPT-NeoX, n_embd 4096, 16 layers, 32 heads,
    # MLP 4 x 4096, rotary_percentage 0.25, parallel residual, biases, vocab 50254 padded to 50688, own lm_head
    "stablelm-base-alpha-3b": {**MODELS["gpt-neox-20b"], "hidden_size": 4096, "num_hidden_layers": 16,
                               "num_attention_heads": 32, "intermediate_size": 16384, "vocab_size": 50688,
                               "max_position_embeddings": 4096},
    # LitGPT's phi-1_5 (same file): n_embd 2048, 24 layers, 32 heads, MLP 8192, rotary_percentage 0.5, one shared
    # norm (parallel attention and MLP), biases, lm_head bias, vocab padded to 51200; transformers' "phi" the same
    "microsoft/phi-1_5": {"model_type": "phi", "hidden_size": 2048, "intermediate_size": 8192,
                          "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 32,
                          "vocab_size": 51200, "max_position_embeddings": 2048, "partial_rotary_factor": 0.5,
                          "hidden_act": "gelu_new", "tie_word_embeddings": False},
    # aodiniz/bert_uncased_L-10_H-512_A-8_cord19-200616_squad2: Google's BERT miniature L-10 H-512 A-8 (intermediate
    # 4 x 512, BERT's vocabulary), as its name says, with a question-answering head
    "bert L-10 H-512 A-8": {**MODELS["bert-base-uncased"], "hidden_size": 512, "num_hidden_layers": 10,
                            "num_attention_heads": 8, "intermediate_size": 2048},
    # timm/vit_huge_patch14_224.orig_in21k with num_classes=45 (resisc45): ViT-H/14, h 1280, 32 layers, 16 heads, MLP
    # 5120, a class token, no dropout (630M parameters, as torchao's README says)
    "vit-huge-patch14 (45 classes)": {**MODELS["vit-large"], "hidden_size": 1280, "num_hidden_layers": 32,
                                      "num_attention_heads": 16, "intermediate_size": 5120, "patch_size": 14,
                                      "num_labels": 45},
    "bert-base (BertConfig())": dict(MODELS["bert-base-uncased"]),
    "bert-384-hid (BertConfig(hidden_size=384))": {**MODELS["bert-base-uncased"], "hidden_size": 384},
    "bert-6-lay (BertConfig(num_hidden_layers=6))": {**MODELS["bert-base-uncased"], "num_hidden_layers": 6},
}

HF_TRAINING = Source(
    "Hugging Face Transformers docs: Efficient training on a single GPU (perf_train_gpu_one.mdx, 2022)",
    # all eight numbers are on this page at this commit; today's model_memory_anatomy keeps only the first
    "https://github.com/huggingface/transformers/blob/98513dfd0db6dab00d26c1ef3a0e5f7410ce2035/docs/source/en/"
    "perf_train_gpu_one.mdx",
    "Tesla V100-SXM2-16GB, CUDA 11.2; HF Trainer, bert-large-uncased seq-classification, seq 512",
    NVIDIA_SMI, "MiB", 0)  # "GPU memory occupied: N MB" (NVML used; the page's MB are MiB)
RASCHKA = Source(
    "S. Raschka, Optimizing Memory Usage for Training LLMs and Vision Transformers in PyTorch (code, logs.md)",
    "https://github.com/rasbt/pytorch-memory-optim/blob/f6eddcd28c40770a097ffd9f18797a043457a2d0/logs.md",
    "GPU not stated in logs.md; torch 2.1.0.dev20230623+cu118, Lightning Fabric",
    RESERVED, "GB", 2)  # every script prints torch.cuda.max_memory_reserved() / 1e9
HF_LLM = Source(
    "Hugging Face Transformers docs: Optimizing LLMs for Speed and Memory (llm_tutorial_optimization)",
    "https://huggingface.co/docs/transformers/llm_tutorial_optimization",
    "A100 40GB (the page: 'can be run on a single 40 GB A100'); pipeline(), greedy, 60 new tokens",
    ALLOCATED, "GiB", 2)  # bytes_to_giga_bytes(torch.cuda.max_memory_allocated()) = bytes / 1024**3
LITGPT = Source(
    "LitGPT config hub: finetuning benchmarks (config_hub/finetune/README.md)",
    "https://github.com/Lightning-AI/litgpt/blob/26857050fe3ff627cd714fe92f5838f51a3d5efa/config_hub/finetune/README.md",
    "1x A10G 24GB; litgpt finetune, bf16-true, Alpaca2k (longest sample capped at 512 tokens)",
    ALLOCATED, "GB", 2)  # "Peak memory": finetune/lora.py printed torch.cuda.max_memory_allocated() / 1e9
TORCHTUNE = Source(
    "torchtune docs: Fine-Tuning Llama2 with LoRA / with QLoRA (tutorials, April 2024)",
    "https://github.com/pytorch/torchtune/blob/ff594c23113891c99050f730c6be0aeacf511b2f/docs/source/tutorials/lora_finetune.rst",
    "GPU not stated; lora_finetune_single_device, llama2 7B, bf16, batch 2, alpaca (max_seq_len 512)",
    RESERVED, "GB", 2)  # "Peak memory reserved, training" = torch.cuda.max_memory_reserved() / 1e9
OPTIMUM = Source(
    "Hugging Face optimum: GPTQ benchmark (tests/benchmark/README.md, 2023-08-29), its fp16 and bitsandbytes rows",
    "https://github.com/huggingface/optimum/blob/234a427450a7dcc978b227fa627ebcdab1764318/tests/benchmark/README.md",
    "1x A100-SXM4-80GB; PyTorch 2.0.1, transformers 4.32, bitsandbytes 0.41.1; benchmark_gptq.py, prompt 512",
    # benchmark_gptq.py (same commit) benchmark_memory(): allocated_bytes.all.peak * 1e-6 + (peak of nvidia-smi
    # --query-gpu=memory.used in MiB * 1.048576, polled every 0.1 s - reserved_bytes.all.peak * 1e-6)
    ALLOCATED_AND_EXTERNAL, "MB", 2)
PEFT_DEEPSPEED = Source(
    "Hugging Face PEFT docs: DeepSpeed guide (docs/source/accelerate/deepspeed.md, 2024-03-13), 'Memory usage'",
    "https://github.com/huggingface/peft/blob/6008f272a565f56c146c5d9fd78d00cb24392d7b/docs/source/accelerate/"
    "deepspeed.md",
    "8x H100 80GB (LoRA) / 2x 40GB (QLoRA); accelerate + TRL SFTTrainer (examples/sft/train.py), bf16, seq 2048",
    NVIDIA_SMI, "GB", 1)  # "the memory consumed per GPU" (the LoRA figure from a GPU-memory chart of the run)
PEFT_FSDP = Source(
    "Hugging Face PEFT docs: FSDP guide (docs/source/accelerate/fsdp.md, 2024-03-13), QLoRA 'Memory usage'",
    "https://github.com/huggingface/peft/blob/6008f272a565f56c146c5d9fd78d00cb24392d7b/docs/source/accelerate/fsdp.md",
    "2x 24GB GPUs; accelerate FSDP + TRL SFTTrainer (examples/sft/train.py), bf16, seq 2048",
    NVIDIA_SMI, "GB", 1)  # "the memory consumed per GPU"

HF_FORUM_GPT2 = Source(
    "Hugging Face forum: 'GPT 2 finetuning peaks at 8 GiB of VRAM' (2025-12), the Trainer with its defaults",
    "https://discuss.huggingface.co/t/gpt-2-finetuning-peaks-at-8-gib-of-vram/172332",
    "one GPU; torch 2.9.1, transformers 4.57.3, accelerate 1.12.0; the torch profiler's memory timeline",
    ALLOCATED, "GiB", 0)  # "It shows peaks using 8 GiB of VRAM" (the profiler plot: allocated memory)
QWEN_SPEED = Source(
    "Qwen2.5 docs: Speed Benchmark (docs/source/benchmark/speed_benchmark.rst), the Transformers tables, BF16 rows",
    "https://github.com/QwenLM/Qwen2.5/blob/010c37c33b13a1ac59944b349620e13404efe97d/docs/source/benchmark/"
    "speed_benchmark.rst",
    "1x A100 80GB; PyTorch 2.3.1, Transformers 4.46.0, Flash Attention 2.5.8; batch 1, generating 2048 tokens",
    # examples/speed-benchmark/speed_benchmark_transformers.py: the sum over devices of
    # torch.cuda.max_memory_allocated(i) / 1024 / 1024 / 1024 after generate(), printed as "GB"
    ALLOCATED, "GiB", 2)
HF_BENCHMARK = Source(
    "Hugging Face Transformers docs: Benchmarks (benchmarks.rst, 2020-06-29), PyTorchBenchmark on custom configs",
    # the page: "this time for customized configurations of the BertModel class"
    "https://github.com/huggingface/transformers/blob/0decddca1790cce1e23ef109f97f864266b7764b/docs/source/"
    "benchmarks.rst",
    "TITAN RTX 24GB; torch 1.4.0, transformers 2.11.0; PyTorchBenchmark's defaults: fp32, eager, no_grad forward",
    # benchmark.py _measure_memory: NVML's used memory on the device right after the forward (each measurement
    # in a process of its own, use_multiprocessing=True): the CUDA context and what the allocator reserved;
    # printed as bytes >> 20 under "Memory in MB" (max_memory_reserved, which an earlier version printed, could
    # not reach 1,097 MiB for the 6-layer model's 268 MB of weights at 8 tokens)
    NVIDIA_SMI, "MiB", 0)
LITGPT_RESOURCES = Source(
    "LitGPT: Resource Tables (tutorials/resource-tables.md, 2023-10-27), Single-GPU Inference, no quantization",
    "https://github.com/Lightning-AI/litgpt/blob/0cc02afa1dca7434418cf612690da13d38d294fd/tutorials/"
    "resource-tables.md",
    "1x A100-SXM4-40GB; PyTorch 2.1.0+cu121, Lightning 2.1.0.rc0, Lit-GPT commit 8641822; generate/base.py",
    # generate/base.py at 8641822: fabric.print(f"Memory used: {torch.cuda.max_memory_allocated() / 1e9:.02f} GB")
    ALLOCATED, "GB", 2)
HF_PR_4850 = Source(
    "transformers PR #4850 (2020-06-08), 'Baseline GPU results' of PyTorchBenchmark (the benchmark's defaults)",
    "https://github.com/huggingface/transformers/pull/4850",
    "GPU, versions not printed (transformers after 2.11.0, torch >= 1.4); fp32 no_grad forward of the bare model",
    # src/transformers/benchmark/benchmark.py of the PR (torchscript and TPU arguments): _measure_memory empties the
    # cache, torch.cuda.reset_peak_memory_stats(), runs the forward, then Memory(torch.cuda.max_memory_reserved()),
    # printed as bytes >> 20 with " MB"; each (batch, sequence) builds its model anew
    RESERVED, "MiB", 0)
HF_BENCHMARK_NOTEBOOK = Source(
    "transformers notebooks/05-benchmark.ipynb (2020-06-26), 'Inference - Pre-trained Model Comparison'",
    "https://github.com/huggingface/transformers/blob/96459e6259d96cd75523f1464388e563df6f7c75/notebooks/"
    "05-benchmark.ipynb",
    "Tesla P100-PCIE-16GB (Colab); torch 1.5.1+cu101, transformers 2.11.0 (master); run_benchmark.py's defaults",
    # the notebook installs py3nvml "to track GPU memory usage" and its env.csv says use_multiprocessing True: the
    # benchmark of then (as the 2020-06-29 page's) reads NVML's used memory right after the forward, in a process of
    # its own; the CSV's "result" is bytes >> 20
    NVIDIA_SMI, "MiB", 0)

# torchtune's generate recipe (recipes/generate.py): the model built in the config's dtype (bf16) on the GPU,
# model.setup_caches(max_batch_size=1, dtype): each layer's KVCache of the model's max_seq_len (4096 for llama2_7b and,
# then, llama3_8b) with num_heads (the query heads: k and v were expanded before the cache) and the causal_mask of
# max_seq_len^2 bools; logger.info(f"Memory used: {torch.cuda.max_memory_allocated() / 1e9:.02f} GB"). torchtune 0.1's
# rows of stack.BEHAVIOURS (--loop torchtune with torchtune=0.1 in the stack) say all three: the cache of the builder's
# max_seq_len, its causal mask, k and v expanded to the query heads
TUNE_E2E = Source(
    "torchtune docs: End-to-End Workflow (tutorials/e2e_flow.rst, 2024-04-14), generation with the shipped config",
    "https://github.com/pytorch/torchtune/blob/f326b5e95f9fcd8acf66bab23a264d720f8df334/docs/source/tutorials/"
    "e2e_flow.rst",
    "GPU not stated; torchtune 0.1 (torchao 0.1, tested on PyTorch 2.2); tune run generate, bf16, the LoRA-tuned 7B",
    ALLOCATED, "GB", 2)
TUNE_LLAMA3 = Source(
    "torchtune docs: Meta Llama3 in torchtune (tutorials/llama3.rst, 2024-04-18), generation with the shipped config",
    "https://github.com/pytorch/torchtune/blob/90f62682b86fec9027bafedcf53464fd3cddc2dc/docs/source/tutorials/"
    "llama3.rst",
    "GPU not stated; torchtune 0.1 (torchao 0.1, tested on PyTorch 2.2); tune run generate, bf16, the LoRA-tuned 8B",
    ALLOCATED, "GB", 2)
TORCHAO_OPTIM = Source(
    "torchao: Low-bit and specialized optimizers (torchao/optim/README.md), the ViT-H fine-tune table",
    "https://github.com/pytorch/ao/blob/072500abcfbdec15a429eb53160c63fb92534b85/torchao/optim/README.md",
    "4070Ti SUPER; PyTorch 2.4, BF16 AMP, compiled model, batch 8; benchmarks/benchmark_low_bit_adam.py",
    # benchmark_low_bit_adam.py: print(f"Max memory used: {torch.cuda.max_memory_allocated() / 1e9:.02f} GB")
    ALLOCATED, "GB", 2)

# HF Trainer runs of 2022 (transformers 4.2x, PyTorch 1.x): `model.zero_grad()` kept the gradients
# allocated; the page measured the CUDA context alone as 1343 MB (torch.ones((1, 1)).to("cuda")).
# The stack of the day sets the rest (stack.BEHAVIOURS): PyTorch < 2.0 zero_grad() keeps the gradients and the
# optimizers step one parameter at a time (transformers 4.2x's Trainer steps its own AdamW and Adafactor, a Python
# loop over the parameters: optimization.py `for p in group["params"]`); transformers < 4.36 runs eager attention
_BERT = {"stack": "torch=1.12,transformers=4.20", "loop": "hf-trainer", "batch": 4, "seq": 512, "precision": "fp32",
         "optimizer": "adamw", "context_overhead": 1343 * 2**20}
_BERT_SMALL = {**_BERT, "batch": 1, "grad_accum": 4, "checkpointing": True, "precision": "fp16"}
# torchvision's MultiheadAttention calls scaled_dot_product_attention (need_weights=False): the fused
# kernels' saved tensors, hence attention="flash"; Fabric "bf16-true" = the model in bf16, no master copy
# The loops of 01-04 (and the DistilBERT ones) run forward, optimizer.zero_grad(), backward, step: the last
# step's gradients live through the forward; 05-06 call zero_grad() after the step
# torchvision's MultiheadAttention projects q, k and v with one in_proj linear (one autocast cast)
# torch 2.1.0.dev20230623 predates pytorch#104780 (2023-07-07, "[foreach][Adam] Minimize use of intermediates"):
# its foreach Adam keeps sqrt(exp_avg_sq) and `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)` at the update
# (the nightly's foreach Adam is 2.0's: the stack says torch 2.0 for it)
_VIT = {"stack": "torch=2.0", "loop": "lightning", "image_size": 224, "optimizer": "adamw",  # torch.optim.Adam
        "attention": "flash", "zero_grad_before_backward": True, "fused_qkv": True}
_VIT_BF16 = {**_VIT, "precision": "bf16-pure"}
# LitGPT: SDPA attention, bf16-true, AdamW; global batch 8 on one device -> accumulation 8 / micro batch;
# its LoRA weights are created in the model's dtype (bf16), not PEFT's fp32; its 4-bit layers compute in
# that dtype (Lightning's BitsandbytesPrecision sets compute_dtype to it); every model's attention has one
# q/k/v linear (LoRAQKVLinear: one lora_dropout for the three); lora.yaml: lora_dropout 0.05; fit() keeps
# `logits` and `loss` of one micro-step until the next forward has run (the graph's nodes live on);
# finetune/lora.py runs the lm_head and the loss in chunks of 128 tokens (full.py does not)
# (--loop litgpt: the 16-bit LoRA weights, the bf16 compute dtype, one qkv linear and the held graph)
_LIT = {"stack": "torch=2.2", "loop": "litgpt", "precision": "bf16-pure", "seq": 512, "attention": "flash",
        "batch": 2, "grad_accum": 4, "lora": 32, "lora_dropout": 0.05, "ce_chunk": 128}
# LitGPT's QLoRA (qlora.yaml: quantize bnb.nf4): Lightning's BitsandbytesPrecision replaces every nn.Linear,
# lm_head too, and finetune/lora.py then takes bitsandbytes' PagedAdamW (states in unified memory): the loop's own
_LIT_QLORA = {**_LIT, "quant": "4bit"}
# torchtune's llama2: SDPA, bf16 (no master copy, the LoRA weights bf16 too), AdamW, activation
# checkpointing on; torchao's NF4 dequantizes to the input's dtype (bf16); the recipe's loop keeps
# `logits` until the next forward
# (--loop torchtune: the 16-bit LoRA weights, bf16 compute, torchao's NF4 and the held graph)
_TUNE = {"stack": "torch=2.3,torchao=0.1,torchtune=0.1", "loop": "torchtune", "precision": "bf16-pure", "seq": 512,
         "batch": 2, "attention": "flash", "optimizer": "adamw", "checkpointing": True, "lora": 8}
_ALL_LINEAR = "q,k,v,o,gate,up,down"
# torchtune 0.1's generate recipe with generation.yaml: bf16 (the builder's dtype), max_new_tokens 300
_TUNE_GENERATE = {"stack": "torch=2.2,torchao=0.1,torchtune=0.1", "loop": "torchtune", "mode": "infer",
                  "new_tokens": 300}
# optimum's benchmark_gptq.py at 234a4274: daryl149/llama-2-13b-chat-hf (Llama-2-13b's architecture) in fp16,
# built under the GPU device (fp16) or loaded with BitsAndBytesConfig(load_in_4bit, bnb_4bit_quant_type="fp4",
# bnb_4bit_compute_dtype=float16) and torch_dtype float16 (--bitsandbytes); random prompts of 512 tokens,
# greedy generate() with min_new_tokens = max_new_tokens = 512 (or 1 with --prefill), use_cache; transformers
# 4.32's Llama has eager attention only (SDPA came with 4.36); PyTorch 2.0.1's wheels: CUDA 11.7. transformers
# 4.32's semantics, as `--transformers 4.32` sets them: the prefill computes every position's logits and upcasts
# them (< 4.45), generate() holds the previous step's tuple cache beside the next (< 4.42), views in the cache
_OPTIMUM = {"stack": "torch=2.0,transformers=4.32", "mode": "infer", "precision": "fp16", "cuda": 11.7}
_OPTIMUM_BNB = {**_OPTIMUM, "quant": "4bit", "quant_compute_dtype": "fp16"}
# PEFT's examples/sft at 6008f272: llama-2-70b, packed samples of max_seq_len 2048, bf16 mixed precision under
# DeepSpeed (the model itself in bf16), flash_attention_2, gradient checkpointing, LoRA r 8 alpha 16 dropout 0.1
# on "all-linear" (every linear of the layers, not lm_head), HF Trainer's AdamW
_PEFT_SFT = {"stack": "torch=2.2,transformers=4.38,peft=0.10", "loop": "hf-trainer", "seq": 2048, "precision": "bf16",
             "attention": "flash", "checkpointing": True, "lora": 8, "lora_dropout": 0.1, "lora_targets": _ALL_LINEAR,
             "optimizer": "adamw"}
# run_peft_qlora_*.sh: batch 2 x accumulation 2; nf4 (train.py's default bnb_4bit_quant_type) with nested
# (double) quantization, compute and storage dtype bfloat16, the model loaded in that dtype (utils.py:
# torch_dtype=quant_storage_dtype), so PEFT of then created the LoRA weights in bf16 too (tuners/lora/layer.py
# update_layer: self.to(weight.device, dtype=weight.dtype) for a floating-point base weight: peft < 0.12's row)
_PEFT_QLORA = {**_PEFT_SFT, "batch": 2, "grad_accum": 2, "gpus": 2, "quant": "4bit", "double_quant": True,
               "quant_compute_dtype": "bf16"}
# under FSDP nothing recasts the bf16 model (DeepSpeed's bf16 does the same under ZeRO-3): "bfloat16 for pure
# bfloat16 finetuning" (fsdp.md)
_PEFT_QLORA_FSDP = {**_PEFT_QLORA, "precision": "bf16-pure", "fsdp": True}

# Qwen2.5's speed benchmark: transformers 4.46 computes only the last position's logits in the prefill
_QWEN = {"stack": "torch=2.3,transformers=4.46", "mode": "infer", "batch": 1, "new_tokens": 2048,
         "precision": "bf16", "attention": "flash"}

# torchao's benchmark_low_bit_adam.py: timm's ViT-H under torch.autocast("cuda", bfloat16) (bf16 mixed: fp32
# weights), timm's Attention through scaled_dot_product_attention with one qkv linear, images of 224; PyTorch's row
# is AdamW(fused=True); model.compile(fullgraph=True) (not modelled: the estimate is an upper bound, --compile)
_AO_VIT = {"stack": "torch=2.4", "loop": "plain", "batch": 8, "image_size": 224, "precision": "bf16",
           "attention": "flash", "fused_qkv": True, "compiled": True}

CASES = [
    # --- LitGPT's resource tables, "Single-GPU Inference", the rows with Quantization "None": generate/base.py's
    # defaults at 8641822 (prompt "Hello, my name is", max_new_tokens 50, one sample, precision None ->
    # get_default_supported_precision(training=False) = "bf16-true" on an A100; the page: "All experiments were
    # run using ... --precision bf16-true"); the KV cache sized for the prompt + 50 tokens. The Llama 2 prompt is
    # 6 tokens (BOS + 5 of SentencePiece), the GPT-NeoX / phi ones 5
    *(Case(LITGPT_RESOURCES, f"{label} {seq} + 50 new, generate's defaults", model, published,
           {"stack": "torch=2.1", "loop": "litgpt", "mode": "infer", "seq": seq, "new_tokens": 50},
           needs="model family phi with --new-tokens" if model == "microsoft/phi-1_5" else "")
      for label, model, seq, published in (("phi-1.5", "microsoft/phi-1_5", 5, 2.86),
                                           ("StableLM 3B", "stablelm-base-alpha-3b", 5, 7.30),
                                           ("Llama 2 7B", "llama-2-7b", 6, 13.52),
                                           ("Llama 2 13B", "llama-2-13b", 6, 26.21))),
    # --- torchtune's generate recipe with generation.yaml (dtype bf16, max_new_tokens 300, top_k 300, temperature 0.8;
    # only the checkpoint paths and the prompt changed): "[generate.py:99] Memory used: 15.72 GB" after the prompt
    # "What are some interesting sites to visit in the Bay Area?" (BOS + 12 tokens) and 300 tokens at 25.83 tokens/s
    Case(TUNE_E2E, "llama2-7b 13 + 300 new, generate recipe defaults", "llama-2-7b", 15.72,
         {**_TUNE_GENERATE, "seq": 13}),
    # llama3.rst: the same recipe on the LoRA-tuned Llama3 8B, prompt "Hello, my name is" (BOS + 5 tokens):
    # "[generate.py:139] Memory used: 18.31 GB" (it stopped at an end token after about 206 of the 300)
    Case(TUNE_LLAMA3, "llama3-8b 6 + 300 new, generate recipe defaults", "llama-3-8b", 18.31,
         {**_TUNE_GENERATE, "seq": 6}),
    # --- transformers' benchmark notebook: run_benchmark.py --no_speed --save_to_csv, batch 32, sequences 32, 128, 512
    # (1024 is past these models' positions: NaN), plots_pt/required_memory.csv as the notebook shows it; the class of
    # each checkpoint's config.architectures (only_pretrain_model False), fp32, a no_grad forward. Left out: the
    # XLM-R checkpoint (its size not stated) and Longformer (a family the estimator does not have)
    *(Case(HF_BENCHMARK_NOTEBOOK, f"{label} b32 s{seq}, defaults", model, mib,
           {"stack": "torch=1.5,transformers=2.11", "mode": "infer", "batch": 32, "seq": seq})
      for label, model, row in (("a-ware/roberta-large-squad", "roberta-large", (2219, 2455, 3641)),
                                ("aodiniz/bert L-10 H-512", "bert L-10 H-512 A-8", (1025, 1143, 1719)),
                                ("deepset/roberta-base-squad2", "roberta-base", (1373, 1533, 2433)))
      for seq, mib in zip((32, 128, 512), row)),
    # --- transformers PR #4850, "Baseline GPU results", "INFERENCE - MEMORY - RESULT": distilbert-base-uncased and
    # bert-base-cased, batch 8, sequences 8 to 512 (lines "<model>/8/<seq>: N MB")
    *(Case(HF_PR_4850, f"{model} b8 s{seq}, defaults", model, mib,
           {"stack": "torch=1.5,transformers=2.11", "mode": "infer", "batch": 8, "seq": seq})
      for model, row in (("distilbert-base-uncased", (274, 298, 324, 552)), ("bert-base-cased", (458, 462, 488, 728)))
      for seq, mib in zip((8, 32, 128, 512), row)),
    # --- the HF forum: AutoModelForCausalLM.from_pretrained("gpt2") and Trainer(TrainingArguments(...)) with no
    # batch size, precision or optimizer given: per_device_train_batch_size 8 (the default), fp32 (from_pretrained's
    # and the Trainer's defaults), adamw_torch_fused (torch >= 2.8), SDPA; group_texts' block_size 512
    Case(HF_FORUM_GPT2, "gpt2 b8 s512, the Trainer's defaults", "gpt2", 8,
         {"stack": "torch=2.9,transformers=4.57", "batch": 8, "seq": 512}),
    # --- transformers' benchmark docs, "INFERENCE - MEMORY - RESULT" for BertModel from three configs, batch 8,
    # sequences 8 to 512 (the bert-base rows from s32 on repeat those the page prints above for bert-base-uncased)
    *(Case(HF_BENCHMARK, f"{name.split()[0]} b8 s{seq}, the benchmark's defaults", name, mib,
           {"stack": "torch=1.4,transformers=2.11", "mode": "infer", "batch": 8, "seq": seq})
      for name, row in (("bert-base (BertConfig())", (1277, 1281, 1307, 1539)),
                        ("bert-384-hid (BertConfig(hidden_size=384))", (1005, 1027, 1035, 1255)),
                        ("bert-6-lay (BertConfig(num_hidden_layers=6))", (1097, 1101, 1127, 1359)))
      for seq, mib in zip((8, 32, 128, 512), row)),
    # --- HF docs, perf_train_gpu_one: "GPU memory occupied" after trainer.train() in each section
    Case(HF_TRAINING, "bert-large b4, fp32, AdamW", "bert-large-uncased", 14949, _BERT),
    Case(HF_TRAINING, "bert-large b1 x accum 4", "bert-large-uncased", 8681, {**_BERT, "batch": 1, "grad_accum": 4}),
    Case(HF_TRAINING, "bert-large b4, fp16 mixed", "bert-large-uncased", 13939, {**_BERT, "precision": "fp16"}),
    Case(HF_TRAINING, "bert-large b1 x 4, ckpt, fp16", "bert-large-uncased", 7275, _BERT_SMALL),
    Case(HF_TRAINING, "bert-large b4, Adafactor", "bert-large-uncased", 12295, {**_BERT, "optimizer": "adafactor"}),
    Case(HF_TRAINING, "bert-large b1 x 4, ckpt, fp16, Adafactor", "bert-large-uncased", 4847,
         {**_BERT_SMALL, "optimizer": "adafactor"}),
    Case(HF_TRAINING, "bert-large b4, 8-bit Adam", "bert-large-uncased", 13085, {**_BERT, "optimizer": "adamw-8bit"}),
    Case(HF_TRAINING, "bert-large b1 x 4, ckpt, fp16, 8-bit Adam", "bert-large-uncased", 5363,
         {**_BERT_SMALL, "optimizer": "adamw-8bit"}),
    # --- Raschka, logs.md (the sections named by script; batch and precision from the scripts)
    # 01-2_pytorch-fabric.py: batch 64 (703 batches of the 45,000 training images), fp32: 26.84 GB
    Case(RASCHKA, "ViT-L/16 224px b64, fp32, Adam", "vit_l_16 (10 classes)", 26.84,
         {**_VIT, "batch": 64, "precision": "fp32"}),
    # 02_mixed-precision.py: Fabric "16-mixed": 18.21 GB
    Case(RASCHKA, "ViT-L/16 b64, fp16 mixed", "vit_l_16 (10 classes)", 18.21,
         {**_VIT, "batch": 64, "precision": "fp16"}),
    # 03_bfloat16.py: "bf16-true": 13.82 GB
    Case(RASCHKA, "ViT-L/16 b64, bf16-true", "vit_l_16 (10 classes)", 13.82, {**_VIT_BF16, "batch": 64}),
    # 04_lower-batchsize.py: batch 16: 5.69 GB
    Case(RASCHKA, "ViT-L/16 b16, bf16-true", "vit_l_16 (10 classes)", 5.69, {**_VIT_BF16, "batch": 16}),
    # 05_gradient-accum.py: micro-batch 4 x 4 accumulation steps: 3.91 GB
    Case(RASCHKA, "ViT-L/16 b4 x accum 4, bf16-true", "vit_l_16 (10 classes)", 3.91,
         {**_VIT_BF16, "batch": 4, "grad_accum": 4, "zero_grad_before_backward": False}),
    # 06_sgd-with-scheduler.py: as 05 with plain SGD (no momentum): 2.02 GB
    Case(RASCHKA, "ViT-L/16 b4 x 4, bf16-true, SGD", "vit_l_16 (10 classes)", 2.02,
         {**_VIT_BF16, "batch": 4, "grad_accum": 4, "optimizer": "sgd", "zero_grad_before_backward": False}),
    # "bonus: distilbert before" (bonus_distilbert-before.py): DeepSpeed stage 2 on 4 GPUs, "16-mixed",
    # batch 12, IMDB padded to the longest review, truncated at 512, Adam: 3.99 GB. Lightning's
    # DeepSpeedStrategy sets both bucket sizes to 200_000_000 elements (DeepSpeed's own default: 5e8)
    # and overlap_comm=True (lightning/pytorch/strategies/deepspeed.py: `overlap_comm: bool = True`;
    # DeepSpeed's own default is off): stage 2 then keeps two reduce buffers
    Case(RASCHKA, "DistilBERT b12 s512, ZeRO-2 x4 GPUs, fp16", "distilbert-base-uncased", 3.99,
         {"stack": "torch=2.0,transformers=4.30", "loop": "lightning", "batch": 12, "seq": 512, "precision": "fp16",
          "zero": 2, "gpus": 4, "zero_reduce_bucket": 200_000_000, "zero_allgather_bucket": 200_000_000,
          "zero_grad_before_backward": True},
         needs="--zero-bucket sizes"),
    # "bonus distilbert after" (bonus_distilbert-after.py): FSDP on 4 GPUs, cpu_offload=True (parameters
    # and gradients on the CPU, the optimizer steps there), "bf16-true", micro-batch 3 x 4: 1.15 GB
    Case(RASCHKA, "DistilBERT b3 x 4, FSDP x4 + CPU offload, bf16", "distilbert-base-uncased", 1.15,
         {"stack": "torch=2.0,transformers=4.30", "loop": "lightning", "batch": 3, "grad_accum": 4, "seq": 512,
          "precision": "bf16-pure", "fsdp": True, "gpus": 4, "offload_params": True}, needs="--fsdp"),
    # --- HF docs, llm_tutorial_optimization, section 1: prompt "Question: Please write a function in
    # Python that transforms bytes to Giga bytes.\n\nAnswer:" (about 20 tokens) + 60 new tokens; at
    # ~80 tokens the multi-query KV cache is < 2 MB, so the exact count does not matter
    # bf16 (torch_dtype=torch.bfloat16): 29.0260648727417
    Case(HF_LLM, "octocoder 15.5B inference, bf16", "bigcode/octocoder", 29.0260648727417,
         {"mode": "infer", "precision": "bf16", "seq": 80}, needs="model_type gpt_bigcode"),
    # load_in_8bit=True, no torch_dtype: transformers loads the unquantized parts in fp16: 15.219234466552734
    Case(HF_LLM, "octocoder 15.5B inference, int8", "bigcode/octocoder", 15.219234466552734,
         {"mode": "infer", "precision": "fp16", "seq": 80, "quant": "8bit"}, needs="model_type gpt_bigcode"),
    # load_in_4bit=True (BitsAndBytesConfig's defaults: fp4, no double quantization, bnb_4bit_compute_dtype
    # float32; the unquantized parts in fp16): 9.543574333190918
    Case(HF_LLM, "octocoder 15.5B inference, 4-bit", "bigcode/octocoder", 9.543574333190918,
         {"mode": "infer", "precision": "fp16", "seq": 80, "quant": "4bit", "quant_compute_dtype": "fp32"},
         needs="model_type gpt_bigcode"),
    # --- LitGPT config hub table, rows "<model>/lora.yaml" and "qlora.yaml" on 1xA10G (LoRA r 32 on
    # query and value, micro batch 2; qlora.yaml: quantize bnb.nf4, no double quantization)
    Case(LITGPT, "llama-2-7b LoRA r32 q,v, b2 x 4", "llama-2-7b", 19.77, _LIT),
    Case(LITGPT, "llama-2-7b QLoRA nf4 r32 q,v, b2 x 4", "llama-2-7b", 13.68, _LIT_QLORA),
    Case(LITGPT, "mistral-7b LoRA r32 q,v, b2 x 4", "mistral-7b", 20.66, _LIT),
    Case(LITGPT, "mistral-7b QLoRA nf4 r32 q,v, b2 x 4", "mistral-7b", 14.29, _LIT_QLORA),
    # tiny-llama/full.yaml (the README of 2024-04-24, commit 43c44323, has the same rows): full finetune,
    # micro batch 4, global batch 32: 14.10 GB; lora.yaml: r 32 on every linear layer and the head,
    # micro batch 8: 13.50 GB
    Case(LITGPT, "tiny-llama 1.1B full finetune, b4 x 8", "tiny-llama-1.1b", 14.10,
         {**_LIT, "lora": None, "batch": 4, "grad_accum": 8, "ce_chunk": None}),
    Case(LITGPT, "tiny-llama 1.1B LoRA r32 all linear + head, b8", "tiny-llama-1.1b", 13.50,
         {**_LIT, "batch": 8, "grad_accum": 1, "lora_targets": _ALL_LINEAR + ",head"}, needs="--lora-targets"),
    # gemma-2b/lora.yaml: r 8 on every linear layer and the head, micro batch 2, global batch 6: 12.62 GB
    Case(LITGPT, "gemma-2b LoRA r8 all linear + head, b2 x 3", "google/gemma-2b", 12.62,
         {**_LIT, "lora": 8, "grad_accum": 3, "lora_targets": _ALL_LINEAR + ",head"},
         needs="model family gemma, --lora-targets"),
    # --- torchtune: lora_finetune.rst's table (LoRA layers, rank, alpha, peak memory), whose first row
    # qlora_finetune.rst (same tree, commit 0914d5cfb5a34bf14a72e36b9ddebc64904763d1) names "Peak memory
    # reserved, training" (LoRA 15.57 GB, QLoRA 9.29 GB)
    Case(TORCHTUNE, "llama2-7b LoRA r8 q,v", "llama-2-7b", 15.57, _TUNE),
    Case(TORCHTUNE, "llama2-7b LoRA r8 all layers", "llama-2-7b", 15.87,
         {**_TUNE, "lora_targets": _ALL_LINEAR + ",head"}, needs="--lora-targets"),
    Case(TORCHTUNE, "llama2-7b LoRA r64 q,v", "llama-2-7b", 15.86, {**_TUNE, "lora": 64}),
    Case(TORCHTUNE, "llama2-7b LoRA r64 all layers", "llama-2-7b", 17.04,
         {**_TUNE, "lora": 64, "lora_targets": _ALL_LINEAR + ",head"}, needs="--lora-targets"),
    # 7B_qlora_single_device.yaml then: LoRA r 8 on q, k, v, o and the MLP (those linears in torchao's
    # NF4, whose block scales are quantized again: double quantization), batch 2, accumulation 16.
    # The recipe builds the model on the GPU and quantizes each LoRA linear there, then again as the fp16
    # checkpoint loads (lora_finetune_single_device.py _setup_model; modules/peft/lora.py; utils/
    # _register_nf4_dispatch_ops.py), with torchao 0.1 (pyproject.toml: torchao==0.1), whose to_nf4 takes
    # each whole tensor at once; the training figure is max_memory_reserved after reset_peak_memory_stats,
    # which starts from the segments loading left reserved (the same table: 9.13 GB at model init)
    Case(TORCHTUNE, "llama2-7b QLoRA NF4 r8 attn + MLP", "llama-2-7b", 9.29,
         {**_TUNE, "quant": "4bit", "double_quant": True, "quant_backend": "torchao", "lora_targets": _ALL_LINEAR,
          "loading": "torchtune"}, needs="--lora-targets"),
    # --- optimum, "Prefill-only benchmark results": generate() with 1 new token, "Max memory (MB)" per batch size
    *(Case(OPTIMUM, f"llama-2-13b prefill 512, fp16, b{batch}", "llama-2-13b", published,
           {**_OPTIMUM, "batch": batch, "seq": 512})
      for batch, published in ((1, 27999.54), (2, 28524.37), (4, 29574.01), (8, 31673.30), (16, 35871.88))),
    *(Case(OPTIMUM, f"llama-2-13b prefill 512, bnb fp4, b{batch}", "llama-2-13b", published,
           {**_OPTIMUM_BNB, "batch": batch, "seq": 512})
      for batch, published in ((1, 9952.65), (2, 10421.89), (4, 11440.08), (8, 13539.37), (16, 17737.95))),
    # "Generation benchmark results": 512 new tokens, "Peak memory (MB)": generate() over the 512-token prompt
    *(Case(OPTIMUM, f"llama-2-13b 512 + 512 new, fp16, b{batch}", "llama-2-13b", published,
           {**_OPTIMUM, "batch": batch, "seq": 512, "new_tokens": 512})
      for batch, published in ((1, 29152.98), (2, 30831.09), (4, 34187.22), (8, 40327.62), (16, 53986.51))),
    *(Case(OPTIMUM, f"llama-2-13b 512 + 512 new, bnb fp4, b{batch}", "llama-2-13b", published,
           {**_OPTIMUM_BNB, "batch": batch, "seq": 512, "new_tokens": 512})
      for batch, published in ((1, 11018.36), (2, 12834.84), (4, 16187.69), (8, 22894.02), (16, 35532.37))),
    # --- PEFT DeepSpeed guide: run_peft_deepspeed.sh (8 processes, ZeRO-3 without offload, batch 8 x accumulation
    # 4; the model loaded in fp32 and partitioned in bf16 by zero.Init): "64 GB (80%)"
    Case(PEFT_DEEPSPEED, "llama-2-70b LoRA r8 all-linear, ZeRO-3 x8, b8", "llama-2-70b", 64,
         {**_PEFT_SFT, "batch": 8, "grad_accum": 4, "zero": 3, "gpus": 8}),
    # run_peft_qlora_deepspeed_stage3.sh (deepspeed_config_z3_qlora.yaml: 2 processes, ZeRO-3, no offload): 36.6 GB
    Case(PEFT_DEEPSPEED, "llama-2-70b QLoRA r8 all-linear, ZeRO-3 x2, b2", "llama-2-70b", 36.6,
         {**_PEFT_QLORA, "zero": 3}),
    # --- PEFT FSDP guide: run_peft_qlora_fsdp.sh (fsdp_config_qlora.yaml: 2 processes, FULL_SHARD, one unit
    # per decoder layer, fsdp_offload_params true): 19.6 GB; "When disabling CPU offloading": 35.6 GB
    Case(PEFT_FSDP, "llama-2-70b QLoRA r8, FSDP x2 + CPU offload, b2", "llama-2-70b", 19.6,
         {**_PEFT_QLORA_FSDP, "offload_params": True}),
    Case(PEFT_FSDP, "llama-2-70b QLoRA r8, FSDP x2, b2", "llama-2-70b", 35.6,
         _PEFT_QLORA_FSDP),
    # --- Qwen2.5's speed benchmark: from_pretrained(torch_dtype="auto" (the checkpoints' bf16), device_map="auto",
    # attn_implementation="flash_attention_2"), a prompt of N copies of one token, generate() with min_length =
    # N + 2048 and max_new_tokens 2048 (the cache grows to N + 2047 positions); one model per process
    *(Case(QWEN_SPEED, f"{model.split('-')[1]} {seq} + 2048 new, bf16", model if model in CONFIGS else "qwen2.5-7b",
           published, {**_QWEN, "seq": seq})
      for model, row in (("Qwen2.5-0.5B-Instruct", (0.97, 1.23, 1.60, 2.34)),
                         ("Qwen2.5-1.5B-Instruct", (2.95, 3.43, 4.16, 5.62)),
                         ("Qwen2.5-3B-Instruct", (5.95, 6.59, 7.47, 9.30)),
                         ("Qwen2.5-7B-Instruct", (14.38, 15.38, 16.91, 19.97)),
                         ("Qwen2.5-14B-Instruct", (28.08, 29.50, 31.95, 36.85)))
      for seq, published in zip((1, 6144, 14336, 30720), row)),
    # --- torchao's low-bit optimizers, ViT-H fine-tune on resisc45, "Peak memory allocated (GB)"
    *(Case(TORCHAO_OPTIM, f"ViT-H b8, {label}", "vit-huge-patch14 (45 classes)", published,
           {**_AO_VIT, **options})
      for label, options, published in (("AdamW fused", {"optimizer": "adamw", "fused": True}, 12.23),
                                        ("bnb AdamW8bit", {"optimizer": "adamw-8bit"}, 8.32),
                                        ("torchao AdamW8bit", {"optimizer": "adamw-8bit"}, 8.33),
                                        ("torchao AdamWFp8", {"optimizer": "adamw-fp8"}, 8.33),
                                        ("torchao AdamW4bit", {"optimizer": "adamw-4bit"}, 7.72))),
]


@dataclass
class Row:
    case: Case
    family: str
    ours: int | None  # bytes, the estimate's counterpart of what the source measured
    needs: str = ""

    @property
    def measured(self) -> float:
        return self.case.published * UNITS[self.case.source.unit]

    @property
    def error(self) -> float | None:
        return None if self.ours is None else (self.ours - self.measured) / self.measured


# a case whose options are only these ran its libraries' defaults: the estimate's own defaults for that stack
DEFAULTS_ONLY = {"stack", "loop", "mode", "batch", "seq", "new_tokens", "image_size"}


def spec_of(case: Case) -> ModelSpec:
    if case.model in MODELS:
        return resolve(case.model)
    return from_config(CONFIGS[case.model], name=case.model, source="config")


def model_type(case: Case) -> str:
    return str((MODELS.get(case.model) or CONFIGS[case.model])["model_type"])


def run(case: Case) -> Row:
    family = model_type(case)
    missing = sorted(set(case.options) - {f.name for f in fields(Setup)})
    if missing:  # an option the estimator does not have yet
        return Row(case, family, None, case.needs or ", ".join(missing))
    try:
        result: Estimate = estimate(spec_of(case), **case.options)
    except EstimateError:  # a model family it does not read, or a combination it refuses as not modelled, yet
        if not case.needs:
            raise
        return Row(case, family, None, case.needs)
    return Row(case, family, sum(int(getattr(result, name)) for name in COUNTERPART[case.source.measured]))


def amount(n: float, source: Source) -> str:
    return f"{n / UNITS[source.unit]:.{source.decimals}f} {source.unit}"


def main() -> int:
    rows = [run(case) for case in CASES]
    sources = list(dict.fromkeys(case.source for case in CASES))
    print("`vram estimate` against published measurements: each number quoted from its source, compared")
    print("with the estimate's counterpart of what was measured (max_memory_allocated: peak_bytes,")
    print("max_memory_reserved: reserved_bytes, nvidia-smi: total_bytes, max_memory_allocated + non-PyTorch:")
    print("peak_bytes + context_bytes)")
    for number, source in enumerate(sources, 1):
        print(f"\n[{number}] {source.title}")
        print(f"    {source.url}")
        print(f"    {source.where}")
        print(f"    measured: {source.measured}")
        print(f"  {'case':<48} {'family':<12} {'measured':>10} {'ours':>10} {'error':>7}")
        for row in (r for r in rows if r.case.source is source):
            ours = "needs " + row.needs if row.ours is None else f"{amount(row.ours, source):>10} {row.error:>+7.1%}"
            print(f"  {row.case.label:<48} {row.family:<12} {amount(row.measured, source):>10} {ours}")
    done = [r for r in rows if r.error is not None]
    plain = [r for r in done if set(r.case.options) <= DEFAULTS_ONLY]
    families = sorted({r.family for r in rows})
    print(f"\n{len(rows)} cases from {len(sources)} sources, {len(families)} model families "
          f"({', '.join(families)}); {len(done)} estimated, {len(rows) - len(done)} need what the estimator lacks")
    if done:
        errors = [abs(r.error or 0.0) for r in done]
        worst = max(done, key=lambda r: abs(r.error or 0.0))
        print(f"median |error| {statistics.median(errors):.1%}, worst {worst.error:+.1%} ({worst.case.label}); "
              f"within 5%: {sum(e <= 0.05 for e in errors)} of {len(done)}, "
              f"within 15%: {sum(e <= 0.15 for e in errors)} of {len(done)}")
    if plain:
        print(f"with only the model, the task, the batch, the sequence and the stack of the day given (the libraries' "
              f"defaults): {len(plain)} case{'s' if len(plain) > 1 else ''}, within 15%: "
              f"{sum(abs(r.error or 0.0) <= 0.15 for r in plain)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
