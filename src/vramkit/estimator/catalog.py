"""Built-in model and GPU catalogs: the Hugging Face config.json values of well-known models
(copied from their published configs, so no download is needed) and current GPUs.
"""

from __future__ import annotations

from typing import Any

_BERT = {"model_type": "bert", "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
         "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
_ROBERTA = {**_BERT, "model_type": "roberta", "vocab_size": 50265, "max_position_embeddings": 514,
            "type_vocab_size": 1}
_GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "resid_pdrop": 0.1,
         "embd_pdrop": 0.1, "attn_pdrop": 0.1, "activation_function": "gelu_new"}
_LLAMA = {"model_type": "llama", "hidden_act": "silu", "tie_word_embeddings": False, "attention_dropout": 0.0}
_T5 = {"model_type": "t5", "vocab_size": 32128, "d_kv": 64, "relative_attention_num_buckets": 32,
       "feed_forward_proj": "relu", "dropout_rate": 0.1, "tie_word_embeddings": True}
_VIT = {"model_type": "vit", "image_size": 224, "patch_size": 16, "num_channels": 3, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "num_labels": 1000}

MODELS: dict[str, dict[str, Any]] = {
    "bert-base-uncased": {**_BERT, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                          "intermediate_size": 3072},
    "bert-base-cased": {**_BERT, "vocab_size": 28996, "hidden_size": 768, "num_hidden_layers": 12,
                        "num_attention_heads": 12, "intermediate_size": 3072},
    "bert-large-uncased": {**_BERT, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                           "intermediate_size": 4096},
    "bert-large-cased": {**_BERT, "vocab_size": 28996, "hidden_size": 1024, "num_hidden_layers": 24,
                         "num_attention_heads": 16, "intermediate_size": 4096},
    "tinybert": {**_BERT, "hidden_size": 312, "num_hidden_layers": 4, "num_attention_heads": 12,
                 "intermediate_size": 1200},
    "distilbert-base-uncased": {"model_type": "distilbert", "vocab_size": 30522, "max_position_embeddings": 512,
                                "dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072, "dropout": 0.1,
                                "attention_dropout": 0.1, "activation": "gelu"},
    "albert-base-v2": {**_BERT, "model_type": "albert", "vocab_size": 30000, "embedding_size": 128,
                       "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                       "intermediate_size": 3072, "num_hidden_groups": 1, "hidden_dropout_prob": 0.0,
                       "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu_new"},
    "roberta-base": {**_ROBERTA, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                     "intermediate_size": 3072},
    "roberta-large": {**_ROBERTA, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                      "intermediate_size": 4096},
    "gpt2": {**_GPT2, "n_embd": 768, "n_layer": 12, "n_head": 12},
    "gpt2-medium": {**_GPT2, "n_embd": 1024, "n_layer": 24, "n_head": 16},
    "gpt2-large": {**_GPT2, "n_embd": 1280, "n_layer": 36, "n_head": 20},
    "gpt2-xl": {**_GPT2, "n_embd": 1600, "n_layer": 48, "n_head": 25},
    "llama-2-7b": {**_LLAMA, "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                   "max_position_embeddings": 4096},
    "llama-2-13b": {**_LLAMA, "vocab_size": 32000, "hidden_size": 5120, "intermediate_size": 13824,
                    "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 40,
                    "max_position_embeddings": 4096},
    "llama-2-70b": {**_LLAMA, "vocab_size": 32000, "hidden_size": 8192, "intermediate_size": 28672,
                    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
                    "max_position_embeddings": 4096},
    "llama-3-8b": {**_LLAMA, "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "max_position_embeddings": 8192},
    "llama-3-70b": {**_LLAMA, "vocab_size": 128256, "hidden_size": 8192, "intermediate_size": 28672,
                    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
                    "max_position_embeddings": 8192},
    "mistral-7b": {**_LLAMA, "model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096,
                   "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "max_position_embeddings": 32768, "sliding_window": 4096},
    "mixtral-8x7b": {**_LLAMA, "model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
                     "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "max_position_embeddings": 32768, "num_local_experts": 8,
                     "num_experts_per_tok": 2, "sliding_window": None},
    "qwen2.5-7b": {**_LLAMA, "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                   "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "max_position_embeddings": 32768, "use_sliding_window": False},
    "qwen3-8b": {**_LLAMA, "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096,
                 "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
                 "attention_bias": False, "use_sliding_window": False},
    "gemma-7b": {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
                 "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
                 "max_position_embeddings": 8192, "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                 "attention_bias": False, "attention_dropout": 0.0},
    "starcoder": {"model_type": "gpt_bigcode", "vocab_size": 49152, "n_embd": 6144, "n_layer": 40, "n_head": 48,
                  "n_inner": 24576, "n_positions": 8192, "multi_query": True,
                  "activation_function": "gelu_pytorch_tanh", "attn_pdrop": 0.1, "resid_pdrop": 0.1,
                  "embd_pdrop": 0.1},
    "gpt-neox-20b": {"model_type": "gpt_neox", "vocab_size": 50432, "hidden_size": 6144, "num_hidden_layers": 44,
                     "num_attention_heads": 64, "intermediate_size": 24576, "max_position_embeddings": 2048,
                     "rotary_pct": 0.25, "use_parallel_residual": True, "tie_word_embeddings": False,
                     "hidden_act": "gelu"},
    "opt-1.3b": {"model_type": "opt", "vocab_size": 50272, "hidden_size": 2048, "num_hidden_layers": 24,
                 "num_attention_heads": 32, "ffn_dim": 8192, "max_position_embeddings": 2048,
                 "word_embed_proj_dim": 2048, "do_layer_norm_before": True, "activation_function": "relu",
                 "dropout": 0.1, "attention_dropout": 0.0, "enable_bias": True},
    "bloom-7b1": {"model_type": "bloom", "vocab_size": 250880, "hidden_size": 4096, "n_layer": 30, "n_head": 32,
                  "attention_dropout": 0.0, "hidden_dropout": 0.0},
    "t5-small": {**_T5, "d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8},
    "t5-base": {**_T5, "d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12},
    "t5-large": {**_T5, "d_model": 1024, "d_ff": 4096, "num_layers": 24, "num_heads": 16},
    "vit-base": {**_VIT, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                 "intermediate_size": 3072},
    "vit-large": {**_VIT, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                  "intermediate_size": 4096},
}

# The checkpoint's dtype (its config's torch_dtype; where the config names none, its weights'): transformers 5
# loads the model in it (dtype="auto"). Checkpoints published in float16 (llama-2, gpt-neox, opt, bloom) are left
# without: the estimate has no pure-fp16 training to map them to.
_BF16 = ("llama-3-8b", "llama-3-70b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen3-8b", "gemma-7b")
_FP32 = ("bert-base-uncased", "bert-base-cased", "bert-large-uncased", "bert-large-cased", "tinybert",
         "distilbert-base-uncased", "albert-base-v2", "roberta-base", "roberta-large", "gpt2", "gpt2-medium",
         "gpt2-large", "gpt2-xl", "t5-small", "t5-base", "t5-large", "vit-base", "vit-large")
for _names, _dtype in ((_BF16, "bfloat16"), (_FP32, "float32")):
    for _name in _names:
        MODELS[_name] = {**MODELS[_name], "torch_dtype": _dtype}

ALIASES = {
    "bert-base": "bert-base-uncased", "bert-large": "bert-large-uncased",
    "distilbert-base": "distilbert-base-uncased", "distilbert": "distilbert-base-uncased",
    "albert-base": "albert-base-v2", "tinybert-4l": "tinybert", "gpt2-small": "gpt2",
    "llama2-7b": "llama-2-7b", "llama2-13b": "llama-2-13b", "llama2-70b": "llama-2-70b",
    "llama3-8b": "llama-3-8b", "llama3-70b": "llama-3-70b", "llama-3.1-8b": "llama-3-8b",
    "mistral-7b-v0.1": "mistral-7b", "qwen2.5-7b-instruct": "qwen2.5-7b",
    "vit-base-patch16-224": "vit-base", "vit-large-patch16-224": "vit-large",
    "google/vit-base-patch16-224": "vit-base", "meta-llama/llama-2-7b-hf": "llama-2-7b",
    "meta-llama/meta-llama-3-8b": "llama-3-8b", "mistralai/mistral-7b-v0.1": "mistral-7b",
    "qwen/qwen2.5-7b": "qwen2.5-7b", "openai-community/gpt2": "gpt2",
    "mixtral-8x7b-v0.1": "mixtral-8x7b", "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b", "qwen/qwen3-8b": "qwen3-8b",
    "google/gemma-7b": "gemma-7b", "bigcode/starcoder": "starcoder", "starcoderbase": "starcoder",
    "eleutherai/gpt-neox-20b": "gpt-neox-20b", "facebook/opt-1.3b": "opt-1.3b", "bigscience/bloom-7b1": "bloom-7b1",
}

# Smaller variants of the same model, for the planner's "smaller model" suggestion.
SMALLER = {
    "bert-large-uncased": "bert-base-uncased", "bert-base-uncased": "distilbert-base-uncased",
    "distilbert-base-uncased": "tinybert", "bert-large-cased": "bert-base-cased",
    "roberta-large": "roberta-base", "gpt2-xl": "gpt2-large", "gpt2-large": "gpt2-medium",
    "gpt2-medium": "gpt2", "llama-2-70b": "llama-2-13b", "llama-2-13b": "llama-2-7b",
    "llama-3-70b": "llama-3-8b", "t5-large": "t5-base", "t5-base": "t5-small", "vit-large": "vit-base",
}

# name -> (memory bytes, bandwidth GB/s, kind). Memory as the product is sold (GB = GiB on
# GPUs, as nvidia-smi reports: an "80GB" A100 shows 81920MiB).
GIB = 1024**3
GPUS: dict[str, tuple[int, int, str]] = {
    "h200": (141 * GIB, 4800, "datacenter"),
    "h100-sxm": (80 * GIB, 3350, "datacenter"),
    "h100-pcie": (80 * GIB, 2000, "datacenter"),
    "h100-nvl": (94 * GIB, 3900, "datacenter"),
    "gh200": (96 * GIB, 4000, "datacenter"),
    "b200": (180 * GIB, 8000, "datacenter"),
    "a100-80gb": (80 * GIB, 2039, "datacenter"),
    "a100-40gb": (40 * GIB, 1555, "datacenter"),
    "l40s": (48 * GIB, 864, "datacenter"),
    "l40": (48 * GIB, 864, "datacenter"),
    "l4": (24 * GIB, 300, "datacenter"),
    "a10": (24 * GIB, 600, "datacenter"),
    "a30": (24 * GIB, 933, "datacenter"),
    "a40": (48 * GIB, 696, "datacenter"),
    "v100-32gb": (32 * GIB, 900, "datacenter"),
    "v100-16gb": (16 * GIB, 900, "datacenter"),
    "t4": (16 * GIB, 320, "datacenter"),
    "rtx-6000-ada": (48 * GIB, 960, "workstation"),
    "rtx-a6000": (48 * GIB, 768, "workstation"),
    "rtx-a5000": (24 * GIB, 768, "workstation"),
    "rtx-a4000": (16 * GIB, 448, "workstation"),
    "rtx-5090": (32 * GIB, 1792, "workstation"),
    "rtx-4090": (24 * GIB, 1008, "workstation"),
    "rtx-4080": (16 * GIB, 717, "workstation"),
    "rtx-3090": (24 * GIB, 936, "workstation"),
    "rtx-3080": (10 * GIB, 760, "workstation"),
    # AMD (published specs: amd.com's product pages)
    "mi325x": (256 * GIB, 6000, "datacenter"),
    "mi300x": (192 * GIB, 5300, "datacenter"),
    "mi250x": (64 * GIB, 1638, "datacenter"),  # one of its two dies: each is a GPU of its own to ROCm (128GB a card)
    "mi210": (64 * GIB, 1638, "datacenter"),
    "radeon-pro-w7900": (48 * GIB, 864, "workstation"),
}
GPU_ALIASES = {"a100": "a100-80gb", "h100": "h100-sxm", "v100": "v100-32gb", "a6000": "rtx-a6000",
               "4090": "rtx-4090", "3090": "rtx-3090", "5090": "rtx-5090", "6000-ada": "rtx-6000-ada",
               "mi300": "mi300x", "mi325": "mi325x", "mi250": "mi250x", "w7900": "radeon-pro-w7900"}
