"""`vram estimate ORG/NAME` reads the model's config.json from the local Hugging Face cache
(HF_HUB_CACHE, HF_HOME), never from the network (issue 29, item 5). The cache is laid out as
huggingface_hub writes it: models--org--name/refs/main, snapshots/<commit>/config.json a symlink
into blobs/. A cache on a shared server is other users' files: only that one link is followed,
and only into the same model's blobs/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, run_vram

from vramkit.estimator import EstimateError, resolve
from vramkit.estimator.hub_cache import hub_cache_dir

# a small LLaMA that is not in the catalog: its numbers can only come from the cached config
TINY = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 2048,
        "tie_word_embeddings": False}
TINY_PARAMS = 2 * 32000 * 512 + 4 * (2 * 512 + 512 * 512 * 2 + 2 * 512 * 128 + 3 * 512 * 1376) + 512


def cache_model(hub: Path, repo_id: str, config: dict | bytes, revision: str = "0123abcd" * 5,
                refs: bool = True, link: bool = True) -> Path:
    """A model in the cache as huggingface_hub lays it out; returns its folder."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / revision).mkdir(parents=True)
    data = config if isinstance(config, bytes) else json.dumps(config).encode()
    blob = "9f" * 32
    if link:
        (repo / "blobs" / blob).write_bytes(data)
        (repo / "snapshots" / revision / "config.json").symlink_to(f"../../blobs/{blob}")
    else:
        (repo / "snapshots" / revision / "config.json").write_bytes(data)
    if refs:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
    return repo


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


def test_the_command_reads_a_hub_id_from_hf_home(hf_home):
    cache_model(hf_home / "hub", "my-org/tiny-llama", TINY)
    result = run_vram("estimate", "my-org/tiny-llama", "--json", env=clean_env(HF_HOME=str(hf_home)))
    assert result.rc == 0, result.err
    data = json.loads(result.out)
    assert data["model"] == "my-org/tiny-llama" and data["family"] == "llama"
    assert data["params"] == TINY_PARAMS
    assert any("local Hugging Face cache" in note and "models--my-org--tiny-llama" in note for note in data["notes"])


def test_the_cached_config_wins_over_the_catalogs_near_name(hf_home):
    """meta-llama/Llama-3.1-8B is the catalog's llama-3-8b only where the cache does not have it."""
    cfg = {**TINY, "num_hidden_layers": 3}
    cache_model(hf_home / "hub", "meta-llama/Llama-3.1-8B", cfg)
    spec = resolve("meta-llama/Llama-3.1-8B")
    assert spec.source == "hub cache" and spec.layers == 3 and spec.hidden == 512


def test_hf_hub_cache_comes_before_hf_home(hf_home, tmp_path, monkeypatch):
    cache_model(hf_home / "hub", "org/m", TINY)
    cache_model(tmp_path / "elsewhere", "org/m", {**TINY, "num_hidden_layers": 2})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub_cache_dir() == tmp_path / "elsewhere"
    assert resolve("org/m").layers == 2


def test_refs_main_names_the_snapshot_read(hf_home):
    repo = cache_model(hf_home / "hub", "org/m", TINY, revision="a" * 40)
    old = repo / "snapshots" / ("b" * 40)
    old.mkdir()
    (old / "config.json").write_text(json.dumps({**TINY, "num_hidden_layers": 9}))
    assert resolve("org/m").layers == 4
    (repo / "refs" / "main").write_text("b" * 40 + "\n")
    assert resolve("org/m").layers == 9


def test_without_refs_main_the_only_snapshot_is_read_and_copies_serve_as_links(hf_home):
    cache_model(hf_home / "hub", "org/m", TINY, refs=False, link=False)
    assert resolve("org/m").layers == 4


def test_a_bare_hub_name_not_in_the_catalog_is_read_from_the_cache(hf_home):
    cache_model(hf_home / "hub", "tiny-llama-base", TINY)
    assert resolve("tiny-llama-base").source == "hub cache"


def test_a_snapshot_linking_out_of_its_blobs_is_refused(hf_home, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(TINY))
    repo = cache_model(hf_home / "hub", "org/m", TINY)
    link = repo / "snapshots" / ("0123abcd" * 5) / "config.json"
    for target in (str(secret), "../../../models--other--m/blobs/" + "9f" * 32, "../../blobs/../../x"):
        link.unlink()
        link.symlink_to(target)
        with pytest.raises(EstimateError, match="links outside its model's blobs/ folder: not followed"):
            resolve("org/m")
    line = assert_one_line_error(run_vram("estimate", "org/m", env=clean_env(HF_HOME=str(hf_home))), 2,
                                 "not followed")
    assert "Traceback" not in line


def test_a_blob_that_is_itself_a_link_is_not_followed(hf_home, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(TINY))
    repo = cache_model(hf_home / "hub", "org/m", TINY)
    blob = repo / "blobs" / ("9f" * 32)
    blob.unlink()
    blob.symlink_to(secret)
    with pytest.raises(EstimateError, match="symlink or not a folder: not followed"):
        resolve("org/m")


def test_a_model_folder_that_is_a_link_is_not_followed(hf_home, tmp_path):
    real = cache_model(tmp_path / "other", "org/m", TINY)
    (hf_home / "hub").mkdir(parents=True)
    (hf_home / "hub" / "models--org--m").symlink_to(real)
    with pytest.raises(EstimateError, match="symlink or not a folder: not followed"):
        resolve("org/m")


def test_a_fifo_in_the_cache_does_not_block(hf_home):
    repo = cache_model(hf_home / "hub", "org/m", TINY)
    blob = repo / "blobs" / ("9f" * 32)
    blob.unlink()
    os.mkfifo(blob)
    with pytest.raises(EstimateError, match="not a regular file"):
        resolve("org/m")
    (repo / "refs" / "main").unlink()
    os.mkfifo(repo / "refs" / "main")
    with pytest.raises(EstimateError, match="not a regular file"):
        resolve("org/m")


def test_a_huge_config_or_a_ref_that_is_no_commit_is_refused(hf_home):
    cache_model(hf_home / "hub", "org/big", b"{" + b" " * (5 << 20) + b"}")
    with pytest.raises(EstimateError, match="larger than"):
        resolve("org/big")
    repo = cache_model(hf_home / "hub", "org/m", TINY)
    (repo / "refs" / "main").write_text("../../../etc")
    with pytest.raises(EstimateError, match="does not hold a commit hash"):
        resolve("org/m")


def test_a_hub_id_in_neither_the_cache_nor_the_catalog_names_where_it_looked(hf_home):
    line = assert_one_line_error(run_vram("estimate", "org/unknown-7b", env=clean_env(HF_HOME=str(hf_home))), 2,
                                 "not in the catalog", "nor in the local Hugging Face cache",
                                 str(hf_home / "hub"), "vram estimate 7B")
    assert "no such file" not in line


def test_reading_the_cache_imports_neither_torch_nor_transformers_nor_huggingface_hub(hf_home):
    cache_model(hf_home / "hub", "org/m", TINY)
    result = run_vram("estimate", "org/m", "--json", env=clean_env(HF_HOME=str(hf_home)),
                      python_flags=("-X", "importtime"))
    assert result.rc == 0, result.err
    names = {line.rsplit("|", 1)[1].strip() for line in result.err.splitlines() if line.startswith("import time:")}
    assert "vramkit.estimator.hub_cache" in names
    assert not {n.split(".")[0] for n in names} & {"torch", "transformers", "huggingface_hub"}
