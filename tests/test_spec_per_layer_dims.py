"""Per-layer template dims: a fill dim may read `layer` and index a per-layer config list.

A tiny dense model whose config lists each layer's KV heads and MLP width: the per-layer params
the engine reports equal a hand sum over the lists; layers with equal sizes form one group that is
walked once; a list shorter than the stack is a one-line error naming the file, line and field.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sympy

from engine.api import evaluate_spec
from engine.language import quantities
from engine.language.corpus import load_corpus
from engine.language.errors import SpecError
from tests.conftest import REPO

HIDDEN, VOCAB, HEADS, D_HEAD = 64, 100, 4, 16
KV = [1, 2, 1, 4]
FF = [128, 256, 128, 512]

SPEC = """\
model: test/tiny-hetero
model_type: tiny_hetero
family: test
dims:
  hidden: config.hidden_size
  vocab: config.vocab_size
  n_layers: config.num_hidden_layers
  n_heads: config.num_attention_heads
  n_kv_heads: config.num_key_value_heads
  d_head: config.head_dim
  d_ff: config.intermediate_size
max_context: config.max_position_embeddings
templates:
  layer:
    component: prenorm_block
    slots:
      attention: {component: gqa_attention, dims: {n_kv_heads: "config.kv_heads[layer]"}}
      ffn: {component: swiglu_mlp, dims: {d_ff: "FFN_EXPR"}}
stacks:
  main:
    inputs: {tokens: [batch, seq]}
    graph:
      embed_tokens: {op: embedding, in: tokens, dims: {vocab: vocab, dim: hidden}, role: embedding, module: model.embed_tokens}
      layers:
        repeat: n_layers
        streams: {hidden: {carries: true, src: "hidden_states = decoder_layer("}}
        in: embed_tokens
        module: model.layers
        schedule: [{template: layer}]
      norm: {op: rmsnorm, in: layers, dims: {dim: hidden}, role: norm, module: model.norm}
      lm_head: {op: linear, in: norm, dims: {in: hidden, out: vocab}, role: lm_head, module: lm_head}
quant_context: {default: bf16}
"""

SNAPSHOT = f"""\
source: test
fields:
  model_type: tiny_hetero
  hidden_size: {HIDDEN}
  vocab_size: {VOCAB}
  num_hidden_layers: {len(KV)}
  num_attention_heads: {HEADS}
  num_key_value_heads: 1
  head_dim: {D_HEAD}
  intermediate_size: {FF[0]}
  max_position_embeddings: 4096
  kv_heads: {KV}
  intermediate_sizes: FF_LIST
"""


def _evaluate(tmp_path: Path, ffn: str = "config.intermediate_sizes[layer]", ff_list=FF):
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    (root / "models" / "test--tiny-hetero.yaml").write_text(SPEC.replace("FFN_EXPR", ffn))
    (root / "snapshots" / "test--tiny-hetero.yaml").write_text(SNAPSHOT.replace("FF_LIST", str(ff_list)))
    corpus = load_corpus(root)
    return evaluate_spec(corpus, corpus.models["test/tiny-hetero"])


def _layer_params(kv: int, ff: int) -> int:
    norms = 2 * HIDDEN
    attention = 2 * HIDDEN * HEADS * D_HEAD + 2 * HIDDEN * kv * D_HEAD   # q, o; k, v
    return norms + attention + 3 * HIDDEN * ff                           # gate, up, down


def test_per_layer_params_equal_a_hand_sum(tmp_path):
    ev = _evaluate(tmp_path)
    layers = sum(_layer_params(kv, ff) for kv, ff in zip(KV, FF))
    expected = VOCAB * HIDDEN + HIDDEN + HIDDEN * VOCAB + layers          # embed, final norm, head
    assert int(quantities.params_total(ev.numeric)) == expected
    # the formula (symbolic binding) evaluated at the config's numbers is the same number
    formula = quantities.params_total(ev.symbolic)
    assert int(sympy.sympify(formula).subs({s: ev.numeric.values[s.name] for s in formula.free_symbols})) == expected


def test_layers_with_equal_sizes_are_walked_once(tmp_path):
    ev = _evaluate(tmp_path)
    groups = {row.layers: uid for uid, row in ev.numeric.components.items() if row.template == "layer"}
    assert sorted(groups) == [(0, 2), (1,), (3,)]
    assert groups == {(0, 2): "main/layers[layer:L0]", (1,): "main/layers[layer:L1]", (3,): "main/layers[layer:L3]"}
    # one row per op per group: layers 0 and 2 share theirs, counted twice
    k_proj = [r for u, r in ev.numeric.rows.items() if u.endswith("/self_attn/k_proj")]
    assert sorted((int(r.repeat), int(r.params)) for r in k_proj) == sorted(
        [(2, HIDDEN * 1 * D_HEAD), (1, HIDDEN * 2 * D_HEAD), (1, HIDDEN * 4 * D_HEAD)])


def test_equal_sizes_everywhere_keep_one_group(tmp_path):
    ev = _evaluate(tmp_path, ffn="config.intermediate_sizes[layer]", ff_list=[128] * 4)
    assert len([r for r in ev.numeric.components.values() if r.template == "layer"]) == 3   # KV still differs
    ev = _evaluate(tmp_path / "b", ffn="d_ff if layer >= 0 else 1")
    kv_groups = [r.layers for r in ev.numeric.components.values() if r.template == "layer"]
    assert sorted(kv_groups) == [(0, 2), (1,), (3,)]


def test_a_list_shorter_than_the_stack_is_a_one_line_error(tmp_path):
    with pytest.raises(SpecError) as info:
        _evaluate(tmp_path, ff_list=FF[:3])
    message = str(info.value)
    assert "\n" not in message
    assert "test--tiny-hetero.yaml" in message and "dims.d_ff" in message
    assert "config.intermediate_sizes.3 is missing" in message
