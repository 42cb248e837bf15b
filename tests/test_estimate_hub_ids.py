"""`vram estimate` reads a Hugging Face id by the part after the slash, case-insensitively, from
the catalog; a model it does not know is named as not in the catalog, with near names and a bare
parameter count to try (issue 31, item 14)."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_vram

from vramkit.estimator import EstimateError, resolve


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    """The catalog's reading of an id, whatever this machine's Hugging Face cache holds (a cached config
    comes first: tests/test_estimate_hub_cache.py)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "no-hf-cache"))


@pytest.mark.parametrize("hub_id, key", [("meta-llama/Llama-3.1-8B", "llama-3-8b"),
                                         ("my-org/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
                                         ("a-mirror/Mistral-7B-v0.1", "mistral-7b"),
                                         ("someone/GPT2", "gpt2")])
def test_a_hub_id_is_the_catalog_model_after_its_slash(hub_id, key):
    spec = resolve(hub_id)
    assert spec.name == key and spec.source == "catalog"
    assert any(hub_id in note and key in note for note in spec.notes)


def test_the_command_estimates_a_hub_id_of_a_catalog_model():
    result = run_vram("estimate", "meta-llama/Llama-3.1-8B")
    assert result.rc == 0, result.err
    assert result.out.startswith("llama-3-8b") and "read as the catalog's llama-3-8b" in result.out


def test_an_unknown_hub_id_is_not_in_the_catalog_with_near_names_and_a_count_to_try():
    line = assert_one_line_error(run_vram("estimate", "meta-llama/Llama-3.1-70B-Instruct"), 2,
                                 "not in the catalog", "llama-3-70b", "vram estimate 70B")
    assert "no such file" not in line


def test_an_unknown_name_hints_a_bare_count():
    with pytest.raises(EstimateError, match="did you mean bert-large") as info:
        resolve("bert-lage")
    assert "not in the catalog" in str(info.value) and "vram estimate 8B" in str(info.value)


def test_an_unsupported_model_type_hints_a_bare_count(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "mamba"}')
    with pytest.raises(EstimateError, match="not supported") as info:
        resolve(str(tmp_path))
    assert "vram estimate 8B" in str(info.value)


def test_a_path_that_does_not_exist_is_still_no_such_file(tmp_path):
    for path in (str(tmp_path / "nope" / "config.json"), "./org/model", "/abs/model"):
        with pytest.raises(EstimateError, match="no such file"):
            resolve(path)
