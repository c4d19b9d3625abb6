"""The grouped weight, packing and shape guards give the per-tensor guards' verdicts, finding for finding.

validate() compares each spec tensor family with the manifest's groups (one line of the file)
instead of expanding every tensor into its own object and dict entry. tests/verify_reference.py
keeps the per-tensor code as it was; here both judge real specs and evidence edited to fail in
each way the guards report: tensors missing on either side, a dtype, a size or a shape that
differs, a name listed twice, a canonical prefix that makes two names one, an override that
stores nothing. ``Report.as_dict()`` (what the build publishes) must be equal.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.language.corpus import load_corpus
from engine.verify.manifest import SortedTensors, expand_group, expand_line, load as load_manifest
from engine.verify.validate import validate
from tests.conftest import REPO
from tests.verify_reference import expand_line as reference_expand_line
from tests.verify_reference import load as reference_load, reference_validate

CORPUS = REPO / "corpus"
QWEN_MOE = "Qwen/Qwen3-30B-A3B"
QWEN_TENSORS = "snapshots/Qwen--Qwen3-30B-A3B.tensors.yaml"
GEMMA = "google/gemma-4-26B-A4B"                 # nests the language model (its evidence: the text stack)
GEMMA_TENSORS = "snapshots/google--gemma-4-26B-A4B.tensors.yaml"
GPT = "openai/gpt-oss-20b"


def _same(corpus, model_id: str) -> dict:
    model = corpus.models[model_id]
    ours, theirs = validate(corpus, model).as_dict(), reference_validate(corpus, model).as_dict()
    # the reference judges the spec's own evidence; each published checkpoint the spec lists has a
    # guard of its own after the seven (tests/test_checkpoints.py judges those)
    extra = [g for g in ours["guards"] if g["guard"].startswith("checkpoint ")]
    assert [g["guard"] for g in extra] == [f"checkpoint {c.format}" for c in model.checkpoints]
    rest = [g for g in ours["guards"] if g not in extra]
    ours = dict(ours, guards=rest, verified=not any(g["status"] == "fail" for g in rest))
    assert ours == theirs
    return ours


def _edited(tmp_path: Path, edits: list[tuple[str, str, str]]):
    """A corpus copy with each ``old`` (occurring once) replaced; a manifest's tensor_count goes,
    so an edit that adds or drops tensors is read (and judged) rather than refused."""
    root = tmp_path / "corpus"
    shutil.copytree(CORPUS, root)
    for file, old, new in edits:
        path = root / file
        text = path.read_text()
        assert text.count(old) == 1, f"{file} should contain {old!r} once"
        text = text.replace(old, new)
        if file.endswith(".tensors.yaml"):
            text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("tensor_count:"))
        path.write_text(text)
    return load_corpus(root)


@pytest.mark.parametrize("model_id", [QWEN_MOE, GEMMA, GPT, "Qwen/Qwen3.5-27B"])
def test_corpus_verdicts_are_the_per_tensor_ones(model_id, corpus):
    # Qwen3.5-27B: an MTP stack outside the modeling-code evidence; gemma: prefixes and vision tensors
    assert _same(corpus, model_id)["verified"]


QWEN_EDITS = {
    "experts missing from the checkpoint": ("model.layers.{0..47}.mlp.experts.{0..127}.down_proj.weight BF16",
                                            "model.layers.{0..47}.mlp.experts.{0..119}.down_proj.weight BF16"),
    "a transposed matrix": ("self_attn.o_proj.weight BF16 [2048, 4096]", "self_attn.o_proj.weight BF16 [4096, 2048]"),
    "a dtype and its bytes": ("experts.{0..127}.gate_proj.weight BF16", "experts.{0..127}.gate_proj.weight F32"),
    "a width": ("experts.{0..127}.up_proj.weight BF16 [768, 2048]", "experts.{0..127}.up_proj.weight BF16 [768, 1024]"),
    "unclaimed tensors": ("- model.norm.weight BF16 [2048]\n",
                          "- model.norm.weight BF16 [2048]\n- model.layers.{0..47}.mlp.experts.{0..127}.extra.weight "
                          "BF16 [8]\n- model.layers.{5,7}.mlp.shared.bias BF16 [8]\n"),
    "a name listed twice": ("- model.norm.weight BF16 [2048]\n",
                            "- model.norm.weight BF16 [2048]\n- model.layers.{3..5}.self_attn.k_proj.weight BF16 [512, 1024]\n"),
}


@pytest.mark.parametrize("edits", [[e for e in QWEN_EDITS if e != "a name listed twice"], ["a name listed twice"]],
                         ids=["all at once", "a name listed twice"])
def test_failing_manifest_verdicts_are_the_per_tensor_ones(edits, tmp_path):
    # at once: the findings of every kind, and their order, against the per-tensor guards'
    corpus = _edited(tmp_path, [(QWEN_TENSORS, *QWEN_EDITS[e]) for e in edits])
    assert not _same(corpus, QWEN_MOE)["verified"]


def test_prefix_collisions_and_modalities_are_the_per_tensor_verdicts(tmp_path):
    # a nested and a plain name for the same module (the later in name order is looked up), a
    # vision tensor more, and a registry prefix longer than the names' common head (decided per name)
    corpus = _edited(tmp_path, [
        (GEMMA_TENSORS, "- model.language_model.embed_tokens.weight BF16 [262144, 2816]\n",
         "- model.language_model.embed_tokens.weight BF16 [262144, 2816]\n"
         "- model.layers.{0..2}.self_attn.k_norm.weight BF16 [128]\n- model.vision_tower.extra.weight BF16 [4]\n"),
        ("verification.yaml", '    - {from: "model.language_model.", to: "model."}\n',
         '    - {from: "model.language_model.layers.1", to: "model.layers.2"}\n'
         '    - {from: "model.language_model.", to: "model."}\n')])
    assert not _same(corpus, GEMMA)["verified"]


def test_a_name_the_spec_claims_twice_is_the_per_tensor_verdict(tmp_path):
    # lm_head.weight canonicalises onto the embedding: two spec tensors claim one name
    corpus = _edited(tmp_path, [("verification.yaml", '    - {from: "language_model.lm_head.", to: "lm_head."}\n',
                                 '    - {from: "language_model.lm_head.", to: "lm_head."}\n'
                                 '    - {from: "lm_head.", to: "model.embed_tokens."}\n')])
    verdict = _same(corpus, GPT)
    assert any("claimed twice" in f["message"] for g in verdict["guards"] for f in g["findings"])


def test_an_override_that_stores_nothing_is_the_per_tensor_verdict(tmp_path):
    corpus = _edited(tmp_path, [("models/openai--gpt-oss-20b.yaml", "overrides: {experts: mxfp4}",
                                 "overrides: {experts: mxfp4, compressor: fp8_block128, router.bias: bf16}")])
    assert not _same(corpus, GPT)["verified"]


@pytest.mark.parametrize("line", ["a.{0..2}.b.{4,6..7}.c BF16 [2, 3]", "x.{5..3}.y.{..}.z F32 [1]",
                                  "w.{{1}}.v BF16 []", "plain.name U8 [7]", "a.{1..}.b F8_E4M3 [4]"])
def test_expanded_lines_are_the_stepwise_expansion(line):
    assert expand_line(line) == reference_expand_line(line)
    group = expand_group(line)
    assert list(group.names) == [t.name for t in reference_expand_line(line)]


def test_a_loaded_manifest_lists_the_tensors_it_always_did():
    path = CORPUS / QWEN_TENSORS
    ours, theirs = load_manifest(path, CORPUS), reference_load(path, CORPUS)
    assert isinstance(ours.tensors, SortedTensors) and len(ours.tensors) == len(theirs.tensors)
    assert ours.tensors == theirs.tensors and ours == theirs and ours.tensors[-1] == theirs.tensors[-1]
