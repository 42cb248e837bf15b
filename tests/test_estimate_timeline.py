"""`vram estimate --trace --timeline FILE` draws the traced steps' memory over time, stacked by
category, as `vram doctor SNAPSHOT --timeline` draws a PyTorch memory snapshot (issue 28, item 4):
the same SVG, its bands at the peak the traced peak's categories."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from helpers import assert_one_line_error, run_vram

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # traces real steps

SVG = "{http://www.w3.org/2000/svg}"
CUBLAS = 64 * 2**20  # the trace's cuBLAS workspaces: in its peak, not among its tensors


def bands(path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    return {g.get("data-name"): int(g.get("data-peak-bytes")) for g in root.iter(f"{SVG}g") if g.get("class") == "band"}


def test_the_timeline_at_the_peak_is_the_traced_peak_by_category(tmp_path):
    svg = tmp_path / "step.svg"
    result = run_vram("estimate", "gpt2", "--batch", "2", "--seq", "128", "--precision", "fp32", "--trace",
                      "--timeline", str(svg), "--json", timeout=300)
    assert result.rc == 0, result.err
    data = result.json()
    trace, drawn = data["trace"], bands(svg)
    assert data["timeline"] == str(svg)
    assert sum(drawn.values()) == trace["peak_bytes"] - CUBLAS
    assert drawn["parameter"] == trace["breakdown"]["parameters"] + trace["breakdown"].get("buffers", 0)
    assert drawn["optimizer_state"] == trace["breakdown"]["optimizer state"]
    assert drawn["gradient"] == trace["breakdown"]["gradients"]
    assert set(drawn) <= {"parameter", "gradient", "optimizer_state", "activation", "temporary"}


def test_activations_are_what_the_forward_made_and_backward_found():
    """Checkpointing keeps few of the forward's tensors for backward: the activation band at its highest
    is far lower; no column is above the peak, and the peak's column is it."""
    from vramkit.estimator.trace import trace_estimate, trace_timeline

    highest = {}
    for checkpointing in (False, True):
        traced = trace_estimate("gpt2", batch=4, seq=256, precision="fp32", checkpointing=checkpointing)
        tl = trace_timeline(traced)
        totals = [sum(values[i] for _, values in tl.bands) for i in range(len(tl.steps))]
        assert max(totals) == totals[tl.peak_column] == traced.peak_bytes - CUBLAS
        highest[checkpointing] = max(dict(tl.bands)["activation"])
    assert highest[True] < 0.5 * highest[False]


# The tests below run vram in this process (the cli fixture): the `vram` process's own part, torch's
# import and --json on stdout, is the first test's; what they add is the file each one draws.

def test_html_holds_the_same_picture(tmp_path, cli):
    page = tmp_path / "step.html"
    rc, _out, err = cli("estimate", "gpt2", "--batch", "2", "--seq", "64", "--trace", "--timeline", str(page))
    assert rc == 0, err
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and 'data-name="parameter"' in text


def test_an_unknown_family_draws_its_traced_class(tmp_path, cli):
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "falcon", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True, "bias": False,
         "vocab_size": 1000}))
    svg = tmp_path / "falcon.svg"
    rc, out, err = cli("estimate", str(tmp_path), "--batch", "2", "--seq", "64", "--trace", "--timeline", str(svg),
                       "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["estimated_by"] == "trace" and sum(bands(svg).values()) == data["trace"]["peak_bytes"] - CUBLAS


@pytest.mark.parametrize("args, needle", [
    (("--timeline", "x.svg"), "add --trace"),
    (("--trace", "--timeline", "x.png"), ".svg or .html"),
])
def test_a_timeline_it_cannot_draw_is_one_line(tmp_path, args, needle):
    assert_one_line_error(run_vram("estimate", "gpt2", *args), 2, needle)
    assert not (tmp_path / "x.svg").exists()
