"""MiniMax-M2.5, Mixtral-8x22B and Qwen3-Coder-480B-A35B against external facts.

Every expectation is written out here from the published config.json numbers (by the modeling
code's definitions: transformers' minimax_m2, mixtral and qwen3_moe modules) or from the model
cards; none is read back from the engine. tests/test_hf_oracle.py adds the transformers
meta-device counts for all three (they are corpus models).
"""
from __future__ import annotations

import math

import pytest

from engine.language import kv, quantities, storage
from tests.conftest import hf_config as config

MINIMAX = "MiniMaxAI/MiniMax-M2.5"
MIXTRAL_22B = "mistralai/Mixtral-8x22B-v0.1"
CODER = "Qwen/Qwen3-Coder-480B-A35B-Instruct"


def _gqa_moe_params(c, *, d_head, d_ff_expert, n_experts, qk_norm_width):
    """Hand count of a GQA + routed-MoE decoder (no shared expert, untied head), from the
    modeling code's modules: q/k/v/o projections without bias, the QK norms (per-head d_head
    for Qwen3, the whole projection width for MiniMax-M2), two RMSNorms per layer, a router
    [n_experts, hidden] and n_experts gated MLPs (gate, up, down: 3 x hidden x d_ff_expert);
    then the embedding, the final norm and the head."""
    h, heads, kv_heads = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    attn = h * heads * d_head + 2 * h * kv_heads * d_head + heads * d_head * h
    if qk_norm_width is True:
        attn += heads * d_head + kv_heads * d_head
    elif qk_norm_width == "head":
        attn += 2 * d_head
    layer = attn + 2 * h + n_experts * h + n_experts * 3 * h * d_ff_expert
    return c["num_hidden_layers"] * layer + 2 * c["vocab_size"] * h + h


def _idle_experts(c, *, d_ff_expert, n_experts):
    return c["num_hidden_layers"] * (n_experts - c["num_experts_per_tok"]) * 3 * c["hidden_size"] * d_ff_expert


CASES = {
    MINIMAX: lambda c: dict(d_head=c["head_dim"], d_ff_expert=c["intermediate_size"],
                            n_experts=c["num_local_experts"], qk_norm_width=True),
    MIXTRAL_22B: lambda c: dict(d_head=c["hidden_size"] // c["num_attention_heads"],
                                d_ff_expert=c["intermediate_size"], n_experts=c["num_local_experts"],
                                qk_norm_width=False),
    CODER: lambda c: dict(d_head=c["head_dim"], d_ff_expert=c["moe_intermediate_size"],
                          n_experts=c["num_experts"], qk_norm_width="head"),
}

# The hand formula evaluated at each config (printed here so a reader sees the figure the oracle
# test also pins: transformers' meta-device count of the same config).
EXPECTED_TOTAL = {MINIMAX: 228_689_748_992, MIXTRAL_22B: 140_620_634_112, CODER: 480_154_875_392}


@pytest.mark.parametrize("model_id", list(CASES))
def test_params_equal_hand_formula_from_config(model_id, evaluation):
    c = config(model_id)
    shape = CASES[model_id](c)
    total = _gqa_moe_params(c, **shape)
    assert total == EXPECTED_TOTAL[model_id]
    a = evaluation(model_id).numeric
    assert int(quantities.params_total(a)) == total
    active = total - _idle_experts(c, d_ff_expert=shape["d_ff_expert"], n_experts=shape["n_experts"])
    assert int(quantities.params_active(a)) == active


@pytest.mark.parametrize("model_id, total_b, active_b", [
    (MIXTRAL_22B, 141, 39),  # Mistral's announcement: 141B total, 39B active
    (CODER, 480, 35),        # Qwen3-Coder model card: 480B total, 35B activated
])
def test_params_from_model_cards(model_id, total_b, active_b, evaluation):
    a = evaluation(model_id).numeric
    assert round(float(quantities.params_total(a)) / 1e9) == total_b
    assert round(float(quantities.params_active(a)) / 1e9) == active_b


def test_minimax_params_near_model_card(evaluation):
    """MiniMax-M2.5 model card: 230B total, 10B activated. The main stack is 228.7B / 11.0B
    (the card's figures are rounded, and the config's MTP modules, which the transformers code
    does not build, are not modeled): within 1.5% of the total, 1.1B of the active count."""
    a = evaluation(MINIMAX).numeric
    assert abs(float(quantities.params_total(a)) - 230e9) < 0.015 * 230e9
    assert abs(float(quantities.params_active(a)) - 10e9) < 1.1e9


@pytest.mark.parametrize("model_id", list(CASES))
def test_kv_per_token_and_request(model_id, evaluation):
    """GQA caches a key and a value of n_kv_heads x head_dim per layer and token (BF16: 2 B)."""
    c = config(model_id)
    d_head = CASES[model_id](c)["d_head"]
    per_token = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * d_head * 2
    assert per_token == {MINIMAX: 253_952, MIXTRAL_22B: 229_376, CODER: 253_952}[model_id]
    a = evaluation(model_id).numeric
    assert kv.bytes_per_token(a) == {"kv": per_token}
    assert kv.bytes_per_token(a, "fp8") == {"kv": per_token // 2}
    for ctx in (4096, 131072, c["max_position_embeddings"]):
        assert kv.bytes_per_request(a, ctx) == ctx * per_token


def test_minimax_fp8_block_checkpoint_bytes(evaluation):
    """quantization_config: fp8 with 128x128 weight blocks; the router (`gate`), the correction
    bias and lm_head are not converted. Every other matrix is F8_E4M3 (1 B) plus one F32 scale per
    128x128 block; vectors and the unconverted tensors are BF16."""
    c = config(MINIMAX)
    q = c["quantization_config"]
    assert q["quant_method"] == "fp8" and q["weight_block_size"] == [128, 128]
    h, heads, kvh, dh = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    ff, e, layers, vocab = c["intermediate_size"], c["num_local_experts"], c["num_hidden_layers"], c["vocab_size"]

    def fp8(rows, cols):
        return rows * cols + 4 * math.ceil(rows / 128) * math.ceil(cols / 128)

    per_layer = (fp8(heads * dh, h) + 2 * fp8(kvh * dh, h) + fp8(h, heads * dh)
                 + e * (2 * fp8(ff, h) + fp8(h, ff))
                 + 2 * (heads * dh + kvh * dh)      # q_norm, k_norm (BF16)
                 + 2 * 2 * h                        # input and post-attention norms (BF16)
                 + 2 * e * h + 2 * e)               # router and correction bias (BF16)
    expected = layers * per_layer + 2 * (2 * vocab * h) + 2 * h
    ev = evaluation(MINIMAX)
    tensors = storage.checkpoint_tensors(ev.numeric, ev.model, ev.corpus)
    assert sum(storage.bytes_by_dtype(tensors).values()) == expected == 230_024_081_408
    assert {t.dtype for t in tensors if ".experts." in t.key and t.key.endswith(".weight")} == {"F8_E4M3"}


def test_minimax_checkpoint_names_and_norm_widths(evaluation):
    """MiniMax-M2's published names: the routing bias sits beside the gate
    (block_sparse_moe.e_score_correction_bias, transformers' conversion mapping), experts are
    w1/w3/w2; q_norm and k_norm span the whole projection (num_heads x head_dim and
    num_kv_heads x head_dim), not one head."""
    c = config(MINIMAX)
    ev = evaluation(MINIMAX)
    tensors = {t.key: t for t in storage.checkpoint_tensors(ev.numeric, ev.model, ev.corpus)}
    bias = tensors["model.layers.{layer}.block_sparse_moe.e_score_correction_bias"]
    assert [int(d) for d in bias.shape] == [c["num_local_experts"]]
    assert "model.layers.{layer}.block_sparse_moe.experts.{expert}.w1.weight" in tensors
    q_norm = tensors["model.layers.{layer}.self_attn.q_norm.weight"]
    k_norm = tensors["model.layers.{layer}.self_attn.k_norm.weight"]
    assert [int(d) for d in q_norm.shape] == [c["num_attention_heads"] * c["head_dim"]]
    assert [int(d) for d in k_norm.shape] == [c["num_key_value_heads"] * c["head_dim"]]


def test_minimax_partial_rope_flops(evaluation):
    """RoPE on rotary_dim = 64 of 128 features per head: 3 FLOPs per rotated element, so the query
    rope of one prefill token costs 3 x heads x 64 per layer (half a full-width rope)."""
    c = config(MINIMAX)
    a = evaluation(MINIMAX).numeric
    (uid,) = [u for u in a.rows if u.endswith("self_attn/q_rope")]
    from engine.language import symbols
    flops = a.rows[uid].flops.subs({symbols.dim("batch"): 1, symbols.dim("seq"): 1, symbols.dim("ctx"): 1})
    assert flops == 3 * c["num_attention_heads"] * c["rotary_dim"]
