"""Storage formats as data: the same geometry stored under each quant scheme."""
from __future__ import annotations

import dataclasses
import math

import pytest

from engine.language import quantities, storage
from engine.api import evaluate_spec


def _tensors(corpus, model_id, quant):
    model = dataclasses.replace(corpus.models[model_id], quant=quant)
    ev = evaluate_spec(corpus, model)
    return ev, {t.key: t for t in storage.checkpoint_tensors(ev.numeric, model, corpus)}


def test_nvfp4_layout_on_llama(corpus):
    """NVFP4: uint8 [rows, cols/2] payload, FP8 scale per 16 elements, two float32 scalars."""
    ev, by_key = _tensors(corpus, "meta-llama/Meta-Llama-3.1-8B",
                          {"*": "nvfp4", "embedding": "bf16", "lm_head": "bf16"})
    q = "model.layers.{layer}.self_attn.q_proj"
    assert by_key[q + ".weight"].dtype == "U8" and by_key[q + ".weight"].shape == (4096, 2048)
    assert by_key[q + ".weight_scale"].dtype == "F8_E4M3" and by_key[q + ".weight_scale"].shape == (4096, 256)
    assert by_key[q + ".weight_scale_2"].shape == () and by_key[q + ".input_scale"].dtype == "F32"
    assert by_key["model.layers.{layer}.input_layernorm.weight"].dtype == "BF16"
    assert by_key["model.embed_tokens.weight"].dtype == "BF16"


@pytest.mark.parametrize("scheme", ["bf16", "fp8_block128"])
def test_every_parameter_is_stored_once(corpus, scheme):
    """Each parameter is stored exactly once: as a 1-byte FP8 element or a 2-byte BF16 one;
    FP8 adds ceil(rows/128) x ceil(cols/128) float32 inverse scales per matrix."""
    ev, by_key = _tensors(corpus, "meta-llama/Meta-Llama-3.1-8B", {"*": scheme})
    fp8 = sum(t.total_bytes for t in by_key.values() if t.dtype == "F8_E4M3")
    bf16 = sum(t.total_bytes for t in by_key.values() if t.dtype == "BF16")
    assert fp8 + bf16 / 2 == quantities.params_total(ev.numeric)
    scales = [t for t in by_key.values() if t.key.endswith("_scale_inv")]
    assert bool(scales) == (scheme == "fp8_block128")
    for t in scales:
        weight = by_key[t.key[: -len("_scale_inv")]]
        assert t.dtype == "F32" and t.shape == tuple(math.ceil(n / 128) for n in weight.shape)


def test_scheme_that_cannot_store_a_matrix_is_an_error(corpus):
    """A scheme whose packed shape is fractional for some matrix fails naming the tensor."""
    from engine.language.errors import SpecError
    model = dataclasses.replace(corpus.models["Qwen/Qwen3-8B"], quant={"*": "mxfp4"})
    ev = evaluate_spec(corpus, model)
    storage.checkpoint_tensors(ev.numeric, model, corpus)   # every Qwen3-8B width divides by 32
    bad = dataclasses.replace(corpus.schemes["mxfp4"], matrix=(
        dataclasses.replace(corpus.schemes["mxfp4"].matrix[0], shape=("rows", "cols / 4097", 16)),))
    corpus2 = dataclasses.replace(corpus, schemes={**corpus.schemes, "mxfp4": bad})
    with pytest.raises(SpecError, match="cannot store model.embed_tokens.weight.*not an integer"):
        storage.checkpoint_tensors(ev.numeric, model, corpus2)


def test_draft_components_are_private_to_their_spec(corpus):
    from engine.language.errors import SpecError
    from engine.language.evaluate import Binding, walk_model
    draft = dataclasses.replace(corpus.components["swiglu_mlp"], draft=True)
    hidden = dataclasses.replace(corpus, components={k: v for k, v in corpus.components.items() if k != "swiglu_mlp"},
                                 drafts={"swiglu_mlp": draft})
    model = corpus.models["meta-llama/Meta-Llama-3.1-8B"]
    with pytest.raises(SpecError, match="is a draft"):
        walk_model(hidden, model, Binding("numeric"))
    listed = dataclasses.replace(model, drafts=("swiglu_mlp",))
    analysis = walk_model(hidden, listed, Binding("numeric"))
    assert quantities.params_total(analysis) == 8_030_261_248


def test_unknown_dtype_in_a_scheme_is_a_one_line_error(tmp_path, capsys):
    """A scheme naming a dtype the engine does not know fails at load with the known ones."""
    import shutil
    from engine.cli import main
    from tests.conftest import REPO
    corpus_copy = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus_copy)
    scheme = corpus_copy / "quant" / "bf16.yaml"
    scheme.write_text(scheme.read_text().replace("dtype: BF16,", "dtype: BF16x,"))
    assert main(["--corpus", str(corpus_copy), "build", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "quant/bf16.yaml:4" in err and "unknown dtype 'BF16x'" in err
    assert "F8_E4M3" in err and not (tmp_path / "out" / "results").exists()
