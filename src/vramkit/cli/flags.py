"""Every long flag of `vram`, its one meaning, and the commands that take it: docs/flags.md,
generated from the parsers (`python -m vramkit.cli.flags > docs/flags.md`; tests/test_flags.py
checks the file is what this writes, and that no flag name means two things).

Not a command: nothing imports it on a command's path.
"""

from __future__ import annotations

import argparse

from .common import expand_help, is_old_spelling

# One meaning per long flag name, whichever command takes it. A new flag needs its line here
# (tests/test_flags.py fails without it); a name that would need a second meaning needs a new name.
MEANINGS: dict[str, str] = {
    "--help": "show the command's help and examples",
    "--version": "print vram's version",
    "--simulate": "use a simulated machine (a bundled scenario or a scenario file)",
    "--no-color": "no colours",
    "--debug": "the full traceback on errors",
    "--json": "print JSON instead of text",
    "--csv": "print CSV instead of text",
    "--gpu": "only these GPUs, by NVML index (0, 0,2 or 0-3)",
    "--gpus": "how many GPUs the model is spread over",
    "--card": "the GPU model to plan for: a catalog name, or 'current'",
    "--health": "also each GPU's health (ECC, remaps, throttling, clocks, PCIe, NVLink)",
    "--watch": "redraw every DURATION until Ctrl-C",
    "--wide": "never cut command lines to the terminal's width",
    "--user": "only these users' processes",
    "--container": "only processes in this container (name or id prefix)",
    "--pod": "only processes of this Kubernetes pod (name, NS/NAME or UID)",
    "--slurm-job": "only processes of this Slurm job (JOB or JOB.STEP)",
    "--sort": "the order of the rows",
    "--holders": "also processes holding /dev/nvidia* open without NVML memory",
    "--env": "one process's own view of the GPUs (its environment)",
    "--interval": "time between samples or refreshes",
    "--readonly": "watch only: no actions",
    "--all-users": "as root, other users' processes too",
    "--idle-after": "alert on a process idle this long",
    "--history": "time the history lines cover",
    "--pid": "only these processes, by pid",
    "--only-visible": "only the GPUs vram's own CUDA_VISIBLE_DEVICES shows",
    "--compute": "only compute processes",
    "--compact": "one line per GPU, its holders per user",
    "--graphics": "only graphics processes",
    "--ascii": "no Unicode blocks, box or tree characters",
    "--theme": "colours for a dark or light background",
    "--db": "the history database to read or write",
    "--idle": "processes that ran no kernels for DURATION",
    "--zombie": "defunct or orphaned processes holding memory",
    "--signal": "the signal to send",
    "--timeout": "how long to wait before giving up",
    "--force": "SIGKILL what is still running after the wait",
    "--yes": "do not ask",
    "--dry-run": "say what would be done; do nothing",
    "--count": "how many GPUs to pick",
    "--min-free": "free memory each picked GPU must have",
    "--need": "free memory each picked GPU must have (as --min-free)",
    "--max-util": "busiest utilization a picked GPU may have",
    "--exclude": "never pick these GPUs",
    "--only": "pick only among these GPUs",
    "--prefer": "spread over the emptiest GPUs, or pack the fullest that fit",
    "--exclusive": "only GPUs with no other user's process",
    "--format": "how the picked GPUs are written (indices, UUIDs, environment)",
    "--explain": "also show how the answer was reached",
    "--hold": "reserve the picked GPUs for DURATION",
    "--wait": "wait in line until GPUs fit, at most DURATION",
    "--lease-timeout": "longest the GPUs stay reserved before the command shows up",
    "--quiet": "say nothing but errors",
    "--train": "estimate training",
    "--infer": "estimate inference",
    "--batch": "the micro-batch per GPU",
    "--batch-size": "the micro-batch per GPU (as --batch)",
    "--seq": "the sequence length",
    "--seq-len": "the sequence length (as --seq)",
    "--decoder-seq": "T5's decoder length",
    "--decoder-seq-len": "T5's decoder length (as --decoder-seq)",
    "--chunked-ce": "chunked lm_head and cross-entropy",
    "--image-size": "ViT input size",
    "--precision": "the precision the model runs in (fp32, fp16, bf16, bf16-pure; estimate also compares a comma "
                   "list, with int8 and int4; doctor, reading a past job, assumes fp32)",
    "--optimizer": "the optimizer",
    "--grad-accum": "gradient-accumulation steps",
    "--checkpointing": "activation checkpointing",
    "--attention": "eager or flash attention",
    "--lora": "LoRA adapters of this rank",
    "--adapter": "bottleneck adapters of this width",
    "--prefix-len": "prefix tuning with this many virtual tokens",
    "--lora-targets": "the linears LoRA adapts",
    "--fused-qkv": "q, k and v as one linear",
    "--keeps-last-graph": "the loop keeps the last micro-step's graph into the next",
    "--lora-dropout": "dropout on each LoRA adapter's input",
    "--adapter-dtype": "the dtype of LoRA weights on a 16-bit base",
    "--quant": "a quantized frozen base (8bit, 4bit)",
    "--quant-compute-dtype": "the dtype 4-bit weights are computed in",
    "--quant-backend": "whose 4-bit linear (bitsandbytes, torchao)",
    "--quant-head": "quantize the output layer too",
    "--double-quant": "4-bit: quantize the block constants too",
    "--head": "the task head (cls, lm)",
    "--zero": "DeepSpeed ZeRO stage",
    "--offload": "DeepSpeed/FSDP offload to CPU memory",
    "--zero-reduce-bucket": "DeepSpeed reduce_bucket_size",
    "--zero-allgather-bucket": "DeepSpeed allgather_bucket_size",
    "--zero-prefetch-bucket": "DeepSpeed stage3_prefetch_bucket_size",
    "--zero-persistence": "DeepSpeed stage3_param_persistence_threshold",
    "--zero-max-live": "DeepSpeed stage3_max_live_parameters",
    "--zero-overlap-comm": "DeepSpeed overlap_comm",
    "--fsdp": "PyTorch FSDP, full shard",
    "--tp": "tensor-parallel degree",
    "--parallel": "ddp or dp",
    "--context-overhead": "the CUDA context's size",
    "--cuda": "the CUDA version",
    "--zero-grad-before-backward": "the loop calls zero_grad() just before backward",
    "--torch": "the PyTorch version whose semantics apply",
    "--stack": "the library versions the run used (torch=2.1,transformers=4.36)",
    "--peft": "the PEFT version whose semantics apply",
    "--bitsandbytes": "the bitsandbytes version whose semantics apply",
    "--deepspeed": "the DeepSpeed version whose semantics apply",
    "--loop": "the training loop whose habits apply (hf-trainer, litgpt, ...)",
    "--fused-optimizer": "AdamW as one fused kernel",
    "--no-fused-optimizer": "AdamW without the fused kernel (foreach)",
    "--compile": "the model runs under torch.compile (the estimate a bound)",
    "--cache-len": "a static KV cache of this many positions",
    "--optimizer-in-backward": "each parameter stepped inside backward (torchtune)",
    "--offload-activations": "saved activations in CPU memory (torchtune)",
    "--loading": "how the model was built and loaded",
    "--new-tokens": "tokens generate() goes on for",
    "--transformers": "the transformers version whose semantics apply",
    "--torchao": "the torchao version whose semantics apply",
    "--torchtune": "the torchtune version whose semantics apply",
    "--trace": "also trace a real step on fake tensors",
    "--list": "list the built-in models",
    "--no-live": "do not read this machine's GPUs",
    "--no-processes": "the GPU lines without their processes",
    "--model": "the model the job ran",
    "--timeline": "draw memory over time into FILE",
    "--by": "what the rows or layers are grouped by",
    "--duration": "stop after this long",
    "--samples": "stop after N samples",
    "--process-commands": "how much of each process's command line is kept (off, name, full)",
    "--keep-raw": "keep raw samples this long",
    "--keep-minute": "keep 1-minute averages this long",
    "--keep-quarter": "keep 15-minute averages this long",
    "--max-size": "the most the database may hold",
    "--publish-every": "how often the copy other users read is refreshed",
    "--policy": "the idle-holder policy file",
    "--since": "start of the time window",
    "--until": "end of the time window",
    "--top": "at most N rows per table",
    "--plot": "also draw memory over time into FILE",
    "--rows": "rows in the table",
    "--every-life": "every recorded life of the pid",
    "--listen": "where to listen",
    "--max-process-series": "at most N process series",
    "--dcgm-names": "also dcgm-exporter's metric names",
    "--compat": "also other exporters' metric names",
    "--web-config": "TLS and basic auth",
    "--host-pid": "the pid given is a host pid NVML listed (a holder outside this container)",
    "--hostname": "the host's name in metrics",
    "--prometheus": "Prometheus' address",
    "--job": "the Prometheus scrape job of vram serve",
    "--hosts": "read these hosts' vram serve directly (fleet: not Prometheus; serve: shown on the page)",
    "--hosts-config": "basic auth and TLS for --hosts (a scrape config's)",
    "--hosts-timeout": "how long serve waits for the --hosts' answers each time",
    "--ignore-down": "exit 0 even when a host is down",
    "--output": "write the result to FILE",
    "--ids": "old spelling of run's --format",
    "--commands": "old spelling of record's --process-commands",
    "--all": "old spelling of status's --health and life's --every-life",
}


def command_parsers(parser: argparse.ArgumentParser, path: str = "vram") -> list[tuple[str, argparse.ArgumentParser]]:
    """(`vram status`, its parser) for vram and every command and subcommand, depth first."""
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.extend(command_parsers(child, f"{path} {name}"))
    return found


def long_names(action: argparse.Action) -> list[str]:
    return [o for o in action.option_strings if o.startswith("--")]


def flag_uses(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.Action]]:
    """(flag, command, action) for every long flag of every command, old spellings included;
    the global options once, as vram's."""
    uses = []
    global_flags = {name for a in parser._actions for name in long_names(a)}
    for path, command in command_parsers(parser):
        for action in command._actions:
            for name in long_names(action):
                if path == "vram" or name not in global_flags:
                    uses.append((name, path.removeprefix("vram").strip() or "(every command)", action))
    return uses


def _default(action: argparse.Action, path: str) -> str:
    if action.default in (None, False, argparse.SUPPRESS, "") or action.nargs == 0:
        return ""
    return f" ({action.default})" if isinstance(action.default, (str, int, float)) else ""


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """docs/flags.md."""
    if parser is None:
        from .main import build_parser

        parser = build_parser()
    uses = flag_uses(parser)
    rows: dict[str, list[str]] = {}
    old: list[tuple[str, str, str]] = []
    for name, command, action in uses:
        if is_old_spelling(action):
            new = next(o for o in action.new.option_strings if o.startswith("--"))  # type: ignore[attr-defined]
            old.append((name, command, new))
        elif action.help != argparse.SUPPRESS:
            rows.setdefault(name, []).append(command + _default(action, command))
    lines = [
        "# Flags",
        "",
        "Every long flag of `vram`, its one meaning, and the commands that take it (with the default",
        "where it has one). A flag name means one thing in every command. Generated from the parsers",
        "by `python -m vramkit.cli.flags > docs/flags.md`; `tests/test_flags.py` checks it.",
        "",
        "| flag | meaning | commands (default) |",
        "|---|---|---|",
    ]
    for name in sorted(rows):
        lines.append(f"| `{name}` | {MEANINGS.get(name, '?')} | {', '.join(sorted(set(rows[name])))} |")
    lines += [
        "",
        "## Old spellings",
        "",
        "Renamed flags keep their old name for one release: hidden from help and completion, they do",
        "what the new name does and say so in one line on stderr.",
        "",
        "| old | command | now |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {command} | `{new}` |" for name, command, new in sorted(old)]
    lines += ["", "Renamed commands and values work the same way: `vram job` runs `vram life` (a process life; "
              "\"job\" is left", "to schedulers such as Slurm) and `vram report --by job` is `--by life` "
              "(docs/history.md, \"Names\").", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def meaning_of(action: argparse.Action) -> str:
    """The help an action shows (its old spelling's: the new flag's)."""
    return expand_help(action.new if is_old_spelling(action) else action)  # type: ignore[attr-defined]


if __name__ == "__main__":
    print(render(), end="")
