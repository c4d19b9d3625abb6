"""Llama 4 Scout and Maverick (text stack): external facts, hand-derived from the published configs.

Each expectation below is written out from config.json numbers and the transformers modeling
code (models/llama4), never copied from the engine: parameters (equal to the meta-device count),
active parameters per token, the NoPE/chunked/MoE layer pattern, KV per request with the chunked
layers' caches bounded by one chunk, and the chunked attention FLOPs of a long prompt.
"""
from __future__ import annotations

import pytest
import sympy

from engine.language import kv as kv_mod
from engine.language import quantities, symbols
from tests.conftest import hf_config

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"


def text(model_id: str) -> dict:
    return hf_config(model_id)["text_config"]


def hand_params(c: dict) -> tuple[int, int]:
    """(total, active) from Llama4TextConfig: per layer q/o [H, nh*dh], k/v [nkv*dh, H], two norms;
    MoE layers (every interleave_moe_layer_step-th) a router [E, H], E experts gate_up [H, 2 ff] +
    down [ff, H] and a shared expert of 3 H ff; dense layers 3 H ff_mlp; embedding, head, final norm.
    The L2 QK norm has no weight. Active: one routed expert of E (top_k = 1)."""
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, nkv, dh = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    ff, ff_mlp, E, k = c["intermediate_size"], c["intermediate_size_mlp"], c["num_local_experts"], c["num_experts_per_tok"]
    step = c["interleave_moe_layer_step"]
    moe_layers = len(range(step - 1, L, step))
    attn = 2 * H * nh * dh + 2 * H * nkv * dh + 2 * H
    moe = E * H + E * 3 * H * ff + 3 * H * ff
    dense = 3 * H * ff_mlp
    total = L * attn + moe_layers * moe + (L - moe_layers) * dense + 2 * V * H + H
    active = total - moe_layers * (E - k) * 3 * H * ff
    return total, active


@pytest.mark.parametrize("model_id,total,active", [
    (SCOUT, 107_769_861_120, 17_172_894_720),
    (MAVERICK, 400_711_848_960, 17_184_691_200),
])
def test_params_equal_the_hand_formula(model_id, total, active, evaluation):
    # the totals are transformers' meta-device counts (Llama4ForCausalLM, text stack); the hand
    # formula from config.json reproduces them, and the engine equals both
    assert hand_params(text(model_id)) == (total, active)
    ev = evaluation(model_id).numeric
    assert int(quantities.params_total(ev)) == total
    assert int(quantities.params_active(ev)) == active   # the "17B" of both names


def test_params_equal_the_transformers_meta_count(evaluation):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import hf_oracle
    from tests.conftest import hf_config_path
    for model_id in (SCOUT, MAVERICK):
        report = hf_oracle.hf_meta_report(hf_config_path(model_id))
        assert report.model_class == "Llama4ForCausalLM"
        assert report.total_params == hand_params(text(model_id))[0]
        assert int(quantities.params_total(evaluation(model_id).numeric)) == report.total_params


def test_moe_and_nope_layer_pattern(evaluation):
    """Llama4TextConfig: no_rope_layers[i] = int((i + 1) % 4 != 0) (interval 4, a default the
    configs omit), moe_layers = range(step - 1, L, step)."""
    layers = {u.split("[")[1].rstrip("]"): list(c.layers)
              for u, c in evaluation(MAVERICK).numeric.components.items() if c.template}
    assert layers["nope_moe"] == list(range(3, 48, 4))
    assert sorted(layers["nope_moe"] + layers["chunked_moe"]) == list(range(1, 48, 2))
    assert layers["chunked_dense"] == list(range(0, 48, 2))
    scout = {u.split("[")[1].rstrip("]"): list(c.layers)
             for u, c in evaluation(SCOUT).numeric.components.items() if c.template}
    assert scout["nope"] == list(range(3, 48, 4)) and len(scout["chunked"]) == 36


def test_moe_layer_names_and_shapes_match_hf(evaluation):
    """Maverick's layer 1 (MoE) and Scout's layer 3 (NoPE): every HF parameter name and shape,
    the stacked experts [E, in, out] as transformers keeps them (no fake quant scheme)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import hf_oracle
    from tests.conftest import hf_config_path
    from tests.test_hf_oracle import _layer_leaves
    for model_id, layer in ((MAVERICK, 1), (SCOUT, 3)):
        report = hf_oracle.hf_meta_report(hf_config_path(model_id))
        theirs = {k: v for k, v in report.params.items() if k.startswith(f"model.layers.{layer}.")}
        assert _layer_leaves(evaluation(model_id).numeric, layer) == theirs


@pytest.mark.parametrize("model_id", [SCOUT, MAVERICK])
@pytest.mark.parametrize("length", [4096, 131072])
def test_kv_per_request_with_chunk_bounded_caches(model_id, length, evaluation):
    """K and V of 8 heads x 128 per token and layer, BF16: 2 x 8 x 128 x 2 = 4,096 B. The 36
    chunked layers keep at most one chunk (8,192 tokens); the 12 NoPE layers keep every token."""
    c = text(model_id)
    per_token_layer = 2 * c["num_key_value_heads"] * c["head_dim"] * 2
    chunk = c["attention_chunk_size"]
    nope = c["num_hidden_layers"] // 4
    chunked = c["num_hidden_layers"] - nope
    want = chunked * min(length, chunk) * per_token_layer + nope * length * per_token_layer
    assert want == {4096: 805_306_368, 131072: 7_650_410_496}[length]
    got = kv_mod.bytes_per_request(evaluation(model_id).numeric, length, "bf16")
    assert int(got) == want
    # fp8 KV halves it (no entry keeps its own dtype)
    assert int(kv_mod.bytes_per_request(evaluation(model_id).numeric, length, "fp8")) == want // 2


def test_chunked_prefill_attention_flops_hand_derived(evaluation):
    """A 131,072-token prompt: a chunked layer's queries see 16 chunks x 8192 x 8193 / 2 pairs per
    head; q k^T costs 2 x d_head per pair and head (40 heads). A NoPE layer sees S(S+1)/2."""
    rows = evaluation(SCOUT).symbolic.rows
    S = 131072
    subs = {symbols.dim(symbols.BATCH): 1, symbols.dim(symbols.SEQ): S, symbols.dim(symbols.CTX): S,
            symbols.dim("n_heads"): 40, symbols.dim("d_head"): 128, symbols.dim("window"): 8192}
    chunked = rows["main/layers[chunked]/self_attn/scores"].flops.subs(subs)
    nope = rows["main/layers[nope]/self_attn/scores"].flops.subs(subs)
    assert int(chunked) == 2 * 128 * 40 * 16 * 8192 * 8193 // 2
    assert int(nope) == 2 * 128 * 40 * S * (S + 1) // 2


def test_temperature_tuning_costs_one_multiply_per_query_element(evaluation):
    """NoPE layers scale each query by a per-position factor (attn_temperature_tuning, default
    true): b x s x 40 x 128 FLOPs, no parameters; chunked layers do not."""
    rows = evaluation(SCOUT).symbolic.rows
    temp = rows["main/layers[nope]/self_attn/q_temp"]
    B, S = symbols.dim(symbols.BATCH), symbols.dim(symbols.SEQ)
    assert sympy.simplify(temp.flops.subs({symbols.dim("n_heads"): 40, symbols.dim("d_head"): 128}) - B * S * 40 * 128) == 0
    assert temp.params == 0
    assert "main/layers[chunked]/self_attn/q_temp" not in rows
