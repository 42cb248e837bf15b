"""Hostile numbers in a model's config.json (issue 26 item 9): `vram estimate` and `vram plan` on a
config holding a 5,000-digit integer (Python refuses to turn more than 4,300 digits into an int, and
json.loads itself raises on one), 1e309 (JSON's infinity), NaN, or a zero or negative size that a
formula divides by or builds a shape or a range from (n_positions, relative_attention_num_buckets,
num_labels, ...). Each is a one-line error naming the key and the file, exit 2; never an internal
error.

The fuzz takes every bundled config (the catalog) and replaces each of its numeric keys, and each
key the parser reads from it, with hostile values, written as JSON text. Fixed seeds, bounded counts.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator import catalog
from vramkit.estimator.specs import EstimateError, from_config

HUGE_DIGITS = "1" + "0" * 5000  # 10**5000: past Python's int-str conversion limit (4,300 digits)
HOSTILE = ["0", "-1", HUGE_DIGITS, "-" + "9" * 5000, "1e309", "-1e309", "NaN", "1e20", "100000000000000000000",
           "99999999999999", "0.5", "2.5", '"0"', '"-1"', '"' + "9" * 5000 + '"', "true"]

GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}
T5 = {"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 128, "d_kv": 16, "vocab_size": 100}


class _Spy(dict):  # type: ignore[type-arg]
    """A config that records every key the parser asks for."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.asked: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        self.asked.add(key)
        return super().__getitem__(key)


def keys_of(cfg: dict[str, Any]) -> list[str]:
    """The config's numeric keys and every key the parser reads from it (optional ones too)."""
    spy = _Spy(cfg)
    from_config(spy, name="spy")
    numeric = {k for k, v in cfg.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return sorted((numeric | spy.asked) - {"model_type"})


def with_text(cfg: dict[str, Any], key: str, text: str) -> str:
    """The config as JSON text, `key` holding `text` verbatim (10**5000 and 1e309 as JSON writes them)."""
    marker = "\x00HOSTILE\x00"
    return json.dumps({**cfg, key: marker}).replace(json.dumps(marker), text)


def check(argv: list[str], rc: int, err: str, key: str, path: str) -> None:
    what = f"vram {' '.join(a[:60] for a in argv)} ({key})"
    assert rc in (0, 1, 2), f"{what}: exit {rc}; {err[:500]!r}"
    assert "Traceback" not in err and "internal error" not in err, f"{what}: {err[:500]!r}"
    if rc == 2:
        lines = err.splitlines()
        assert len(lines) == 1, f"{what}: {err[:500]!r}"
        assert len(lines[0]) < 400, f"{what}: {lines[0][:500]!r}"  # a 5,000-digit number is not echoed
        assert path in lines[0], f"{what}: the file is not named: {lines[0]!r}"


# one config of each model_type (every key of each, every hostile value)
REPRESENTATIVES = sorted({cfg["model_type"]: name for name, cfg in reversed(list(catalog.MODELS.items()))}.values())


@pytest.mark.parametrize("model", REPRESENTATIVES)
def test_every_key_of_each_kind_of_config_with_every_hostile_value(cli, tmp_path, model):
    cfg = catalog.MODELS[model]
    path = tmp_path / "config.json"
    mode = random.Random(f"hostile-{model}-26").choice(["--train", "--infer"])
    for key in keys_of(cfg):
        for text in HOSTILE:
            path.write_text(with_text(cfg, key, text))
            argv = ["estimate", str(path), mode, "--seq", "64"]
            rc, _out, err = cli(*argv)
            check(argv, rc, err, key, str(path))


def test_plan_on_random_keys_of_every_bundled_config(cli, tmp_path):
    rng = random.Random("hostile-plan-26")
    path = tmp_path / "config.json"
    for name in sorted(catalog.MODELS):
        cfg = catalog.MODELS[name]
        keys = keys_of(cfg)
        for _ in range(4):
            key, text = rng.choice(keys), rng.choice(HOSTILE)
            path.write_text(with_text(cfg, key, text))
            argv = ["plan", str(path), "--card", rng.choice(["a100-80gb", "rtx-4090"]), "--seq", "128"]
            rc, _out, err = cli(*argv)
            check(argv, rc, err, key, str(path))


@pytest.mark.parametrize("cfg, key, text", [
    (GPT2, "n_positions", "0"),  # the learned position table: 0 rows
    (T5, "relative_attention_num_buckets", "0"),  # the relative bias table: 0 rows
    (T5, "relative_attention_num_buckets", "-1"),
    ({**GPT2, "model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128}, "num_labels", "0"),  # the classifier: 0 outputs
    (GPT2, "n_inner", "0"),
    (GPT2, "n_embd", HUGE_DIGITS),  # a required key
    (GPT2, "n_positions", HUGE_DIGITS),  # an optional one
    (GPT2, "n_positions", "1e309"),
    (GPT2, "n_positions", '"' + "9" * 5000 + '"'),
    (GPT2, "attn_pdrop", "NaN"),
    (GPT2, "attn_pdrop", "1e309"),
])
@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_a_zero_or_huge_size_names_the_key_and_the_file(tmp_path, cfg, key, text, command):
    path = tmp_path / "config.json"
    path.write_text(with_text(cfg, key, text))
    line = assert_one_line_error(run_vram(command, str(path)), 2, str(path), key)
    assert "internal error" not in line and len(line) < 300


def test_a_huge_number_in_a_key_nobody_reads_is_no_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(with_text(GPT2, "eos_token_id", HUGE_DIGITS))
    assert run_vram("estimate", str(path)).rc == 0


def test_a_config_dict_given_to_the_library_is_checked_the_same_way():
    with pytest.raises(EstimateError, match="relative_attention_num_buckets"):
        from_config({**T5, "relative_attention_num_buckets": 0}, name="t5.json")
    with pytest.raises(EstimateError, match="n_positions") as e:
        from_config({**GPT2, "n_positions": 10**5000}, name="gpt2.json")
    assert len(str(e.value)) < 300
