"""Every corpus model against external facts: model cards, papers, published checkpoints.

Expectations are written from the publishers' figures or derived here from the config by the
papers' definitions — never read back from the engine.
"""
from __future__ import annotations


import pytest
import sympy

from engine.language import kv, quantities, storage
from tests.conftest import EVERY_MODEL, MODEL_IDS, hf_config as config

GIB = 2**30


def numbers(ev):
    a = ev.numeric
    tensors = storage.checkpoint_tensors(a, ev.model, ev.corpus)
    return a, tensors


# -- active parameters per token (MoE) -------------------------------------------------------------

def test_deepseek_v3_active_params(evaluation):
    """DeepSeek's weight documentation: 36.6B activated parameters (incl. 0.9B output head),
    i.e. without the input embedding."""
    a = evaluation("deepseek-ai/DeepSeek-V3").numeric
    active = quantities.params_active(a) - quantities.params_embedding(a)
    assert round(float(active) / 1e8) == 366
    assert round(float(quantities.params_total(a)) / 1e9) == 671


@pytest.mark.parametrize("model_id, total_b, active_b", [
    ("openai/gpt-oss-120b", 116.83, 5.13),   # OpenAI model card (active excludes the embedding)
    ("openai/gpt-oss-20b", 20.91, 3.61),
])
def test_gpt_oss_params_from_model_card(model_id, total_b, active_b, evaluation):
    a = evaluation(model_id).numeric
    assert round(float(quantities.params_total(a)) / 1e9, 2) == total_b
    assert round(float(quantities.params_active(a) - quantities.params_embedding(a)) / 1e9, 2) == active_b


def test_mixtral_params_from_announcement(evaluation):
    """Mistral: 46.7B total parameters, 12.9B used per token."""
    a = evaluation("mistralai/Mixtral-8x7B-v0.1").numeric
    assert round(float(quantities.params_total(a)) / 1e9, 1) == 46.7
    assert round(float(quantities.params_active(a)) / 1e9, 1) == 12.9


@pytest.mark.parametrize("model_id, total_b, non_embedding_b", [
    ("Qwen/Qwen3-8B", 8.2, 6.95), ("Qwen/Qwen3-32B", 32.8, 31.2),
    ("Qwen/Qwen3-30B-A3B", 30.5, 29.9), ("Qwen/Qwen3-235B-A22B", 235, 234),
])
def test_qwen3_params_from_model_cards(model_id, total_b, non_embedding_b, evaluation):
    """Qwen3 model cards: total and non-embedding (embedding and head excluded) parameters."""
    a = evaluation(model_id).numeric
    total = float(quantities.params_total(a)) / 1e9
    non_embedding = total - float(quantities.params_embedding(a) + quantities.params_by_role(a, "lm_head")) / 1e9
    digits = 2 if non_embedding_b == 6.95 else (0 if total_b == 235 else 1)
    assert round(float(total), 1 if total_b != 235 else 0) == total_b
    assert round(float(non_embedding), digits) == non_embedding_b


@pytest.mark.parametrize("model_id, total_b, non_embedding_b", [("Qwen/Qwen3-0.6B", 0.6, 0.44),
                                                              ("Qwen/Qwen3-1.7B", 1.7, 1.4)])
def test_small_qwen3_params_from_model_cards_with_a_tied_head(model_id, total_b, non_embedding_b, evaluation):
    """Qwen3-0.6B and 1.7B model cards: 0.6B (0.44B non-embedding) and 1.7B (1.4B non-embedding).
    Their config ties the head to the embedding (tie_word_embeddings), so it stores no weights."""
    a = evaluation(model_id).numeric
    total = float(quantities.params_total(a)) / 1e9
    assert float(quantities.params_by_role(a, "lm_head")) == 0
    assert round(total, 1) == total_b
    assert round(total - float(quantities.params_embedding(a)) / 1e9, len(str(non_embedding_b)) - 2) == non_embedding_b


def test_deepseek_r1_params_from_model_card(evaluation):
    """DeepSeek-R1 model card: 671B total, 37B activated (DeepSeek-V3's architecture)."""
    a = evaluation("deepseek-ai/DeepSeek-R1").numeric
    assert round(float(quantities.params_total(a)) / 1e9) == 671
    assert round(float(quantities.params_active(a) - quantities.params_embedding(a)) / 1e9) == 37


@pytest.mark.parametrize("model_id, activated_b", [("Qwen/Qwen3-30B-A3B", 3.3), ("Qwen/Qwen3-235B-A22B", 22)])
def test_qwen3_moe_activated(model_id, activated_b, evaluation):
    """Qwen3 model cards: "3.3B activated" / "22B activated" (figures truncated, not rounded)."""
    a = evaluation(model_id).numeric
    scale = 10 if activated_b < 10 else 1
    assert int(float(quantities.params_active(a)) / 1e9 * scale) / scale == activated_b


@EVERY_MODEL
@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_active_params_from_config(model_id, evaluation):
    """Consistency of active with total: active = total - (n_experts - top_k) x per-expert params
    x MoE layers (gated MLP: 3 matrices). Both sides are the engine's; the absolute version, against
    the HF modeling code's total, is test_hf_oracle.py::test_active_params_equal_hf_total_minus_idle_experts.
    A multimodal checkpoint's text settings are under text_config (a top-level field wins)."""
    c = config(model_id)
    c = {**c.get("text_config", {}), **c}
    a = evaluation(model_id).numeric
    n_experts = c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts")
    if not n_experts:
        assert quantities.params_active(a) == quantities.params_total(a)
        return
    top_k = c.get("num_experts_per_tok") or c["top_k_experts"]   # Gemma 4: top_k_experts
    width = c.get("moe_intermediate_size") or c["intermediate_size"]
    per_expert = 3 * c["hidden_size"] * width
    if c["model_type"] == "gpt_oss":
        per_expert += 2 * width + c["hidden_size"]   # gate_up and down biases
    # Nemotron 3 Ultra / 3.5 list their layers by name (layers_block_type) instead of counting them
    n_layers = c.get("num_hidden_layers") or len(c["layers_block_type"])
    moe_layers = n_layers - c.get("first_k_dense_replace", 0)
    if "interleave_moe_layer_step" in c:   # Llama 4: every step-th layer
        moe_layers = c["num_hidden_layers"] // c["interleave_moe_layer_step"]
    if isinstance(c.get("moe_layer_freq"), list):   # MiMo-V2-Flash: 1 marks an MoE layer
        moe_layers = sum(c["moe_layer_freq"])
    if c["model_type"] == "nemotron_h":   # up/down experts in moe_latent_size (else hidden); the "E" layers
        per_expert = 2 * (c.get("moe_latent_size") or c["hidden_size"]) * width
        moe_layers = (c["hybrid_override_pattern"].count("E") if "hybrid_override_pattern" in c
                      else c["layers_block_type"].count("moe"))
    expected = quantities.params_total(a) - (n_experts - top_k) * per_expert * moe_layers
    assert quantities.params_active(a) == expected


# -- checkpoint storage ------------------------------------------------------------------------------

def test_llama_8b_checkpoint_matches_published_index(evaluation):
    """Meta-Llama-3.1-8B: 291 tensors (9 per layer + embedding, norm, head), all BF16."""
    a, tensors = numbers(evaluation("meta-llama/Meta-Llama-3.1-8B"))
    assert storage.tensor_count(tensors) == 32 * 9 + 3
    assert storage.bytes_by_dtype(tensors) == {"BF16": 2 * quantities.params_total(a)}


@pytest.mark.parametrize("model_id, gib", [("openai/gpt-oss-120b", 60.8), ("openai/gpt-oss-20b", 12.8)])
def test_gpt_oss_checkpoint_size_from_model_card(model_id, gib, evaluation):
    """OpenAI's model card lists checkpoint sizes of 60.8 GiB and 12.8 GiB (MXFP4 experts)."""
    _, tensors = numbers(evaluation(model_id))
    assert round(float(sum(t.total_bytes for t in tensors)) / GIB, 1) == gib


@pytest.mark.parametrize("model_id", ["openai/gpt-oss-120b", "openai/gpt-oss-20b"])
def test_gpt_oss_mxfp4_layout(model_id, evaluation):
    """Experts: uint8 blocks [E, rows, cols/32, 16] and E8M0 scales [E, rows, cols/32]; rest BF16."""
    c = config(model_id)
    _, tensors = numbers(evaluation(model_id))
    e, h, f = c["num_local_experts"], c["hidden_size"], c["intermediate_size"]
    by_key = {t.key: t for t in tensors}
    layer = "model.layers.{layer}.mlp.experts."
    assert by_key[layer + "gate_up_proj_blocks"].shape == (e, 2 * f, h // 32, 16)
    assert by_key[layer + "gate_up_proj_scales"].shape == (e, 2 * f, h // 32)
    assert by_key[layer + "down_proj_blocks"].shape == (e, h, f // 32, 16)
    assert by_key[layer + "gate_up_proj_bias"].dtype == "BF16"
    assert {t.dtype for t in tensors if "experts" not in t.key} == {"BF16"}
    # 19 tensors per layer: attention 4 weights + 4 biases + sinks, 2 norms, router weight + bias,
    # experts 2 x (blocks, scales, bias); plus embedding, final norm, head.
    assert storage.tensor_count(tensors) == 19 * c["num_hidden_layers"] + 3


def test_deepseek_v3_fp8_checkpoint(evaluation):
    """FP8 E4M3 weights with float32 128x128 block inverse scales; 91,991 tensors.

    The published repository's safetensors files total 688,586,727,753 bytes including their
    JSON headers (about 130 bytes per tensor entry), so the tensor data must fall just below.
    """
    c = config("deepseek-ai/DeepSeek-V3")
    _, tensors = numbers(evaluation("deepseek-ai/DeepSeek-V3"))
    by_key = {t.key: t for t in tensors}
    h, q = c["hidden_size"], c["q_lora_rank"]
    q_a = "model.layers.{layer}.self_attn.q_a_proj.weight"
    assert by_key[q_a].dtype == "F8_E4M3" and by_key[q_a].shape == (q, h)
    scale = by_key[q_a + "_scale_inv"]
    assert scale.dtype == "F32" and scale.shape == (-(-q // 128), -(-h // 128))
    assert by_key["model.layers.{layer}.mlp.gate.weight"].dtype == "BF16"
    assert by_key["model.layers.{layer}.mlp.gate.e_score_correction_bias"].dtype == "F32"
    assert by_key["model.embed_tokens.weight"].dtype == "BF16"
    assert by_key["model.layers.{layer}.eh_proj.weight"].dtype == "BF16"
    # per dense layer: 5 MLA projections x (weight + scale) + 2 MLA norms + 3 MLP x 2 + 2 norms = 20
    # per MoE layer: 12 + 2 norms + gate + bias + shared 3 x 2 + 256 experts x 6
    # MTP layer: MoE layer + embed, enorm, hnorm, eh_proj, shared_head norm + head
    e, dense = c["n_routed_experts"], c["first_k_dense_replace"]
    moe_layer = 12 + 2 + 2 + 6 + 6 * e
    expected = dense * 20 + (c["num_hidden_layers"] - dense) * moe_layer + (moe_layer + 6) + 3
    assert storage.tensor_count(tensors) == expected == 91_991
    data = sum(t.total_bytes for t in tensors)
    header = 688_586_727_753 - data
    assert 0 < header < expected * 200


# -- KV cache ------------------------------------------------------------------------------------------

def _gdn_hybrid(model_id: str) -> bool:
    """Whether the published config makes some layers Gated DeltaNet (layer_types), whose state
    is not a KV cache (Qwen3.5 and the Qwen3.6 checkpoints: test_qwen35_27b_state_and_kv_per_request)."""
    c = config(model_id)
    return "linear_attention" in ({**c.get("text_config", {}), **c}.get("layer_types") or [])


@EVERY_MODEL
@pytest.mark.parametrize("model_id", [m for m in MODEL_IDS if ("Llama" in m or "Qwen" in m or "Mixtral" in m)
                                      and not _gdn_hybrid(m)
                                      and "Llama-4" not in m])  # chunked layers: test_models_llama4
def test_gqa_kv_bytes_per_token(model_id, evaluation):
    """GQA: keys and values, n_kv_heads x head_dim each, every layer, 2 bytes in BF16 (a multimodal
    checkpoint's text settings are under text_config)."""
    c = config(model_id)
    c = {**c.get("text_config", {}), **c}
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    expected = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * head_dim * 2
    a = evaluation(model_id).numeric
    assert kv.bytes_per_token(a) == {"kv": expected}
    assert kv.bytes_per_token(a, "fp8") == {"kv": expected // 2}
    assert kv.bytes_per_request(a, 4096) == 4096 * expected


def test_llama_8b_kv_is_128_kib_per_token(evaluation):
    assert kv.growing_bytes_per_token(evaluation("meta-llama/Meta-Llama-3.1-8B").numeric) == 128 * 1024


def test_deepseek_v3_mla_kv(evaluation):
    """MLA caches (d_c + d_h^R) elements per token per layer (DeepSeek-V2 paper, Table 1),
    independent of the head count: the latent and the shared rotary key."""
    c = config("deepseek-ai/DeepSeek-V3")
    a = evaluation("deepseek-ai/DeepSeek-V3").numeric
    layers = c["num_hidden_layers"]
    assert kv.bytes_per_token(a) == {"mla_latent": c["kv_lora_rank"] * layers * 2,
                                     "mla_rope_key": c["qk_rope_head_dim"] * layers * 2}
    assert kv.growing_bytes_per_token(a) == 70_272
    assert kv.bytes_per_request(a, 128 * 1024) == 128 * 1024 * 70_272


@pytest.mark.parametrize("model_id", ["openai/gpt-oss-20b", "openai/gpt-oss-120b"])
def test_gpt_oss_window_capped_kv(model_id, evaluation):
    """Full layers grow every token; sliding layers keep at most `sliding_window` tokens;
    attention sinks are learned logits, not cache."""
    c = config(model_id)
    a = evaluation(model_id).numeric
    per_layer_token = 2 * c["num_key_value_heads"] * c["head_dim"] * 2
    full = c["layer_types"].count("full_attention")
    sliding = c["layer_types"].count("sliding_attention")
    window = c["sliding_window"]
    assert kv.growing_bytes_per_token(a) == full * per_layer_token
    assert kv.fixed_bytes_per_request(a) == sliding * window * per_layer_token
    for length in (100, 128, 4096, 131072):
        expected = (full * length + sliding * min(length, window)) * per_layer_token
        assert kv.bytes_per_request(a, length) == expected


# -- structure -----------------------------------------------------------------------------------------

def deepseek_v3_moe_layer(c: dict) -> int:
    """Parameters of one DeepSeek-V3 MoE decoder layer, from config.json (h = 7168):

    MLA: q_a_proj h x 1536 (11,010,048) + q_a_layernorm 1536 + q_b_proj 1536 x 128 x (128 + 64)
    (37,748,736) + kv_a_proj_with_mqa h x (512 + 64) (4,128,768) + kv_a_layernorm 512 + kv_b_proj
    512 x 128 x (128 + 128) (16,777,216) + o_proj 128 x 128 x h (117,440,512) = 187,107,328;
    MoE: router 256 x h (1,835,008; its correction bias is a buffer) + 256 routed and 1 shared
    expert of 3 x h x 2048 (44,040,192 each) = 11,320,164,352; two RMSNorms 2 x h = 14,336.
    Total 11,507,286,016."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q, kv = c["q_lora_rank"], c["kv_lora_rank"]
    mla = h * q + q + q * heads * (nope + rope) + h * (kv + rope) + kv + kv * heads * (nope + v) + heads * v * h
    experts = c["n_routed_experts"] + c["n_shared_experts"]
    moe = c["n_routed_experts"] * h + experts * 3 * h * c["moe_intermediate_size"]
    return mla + moe + 2 * h


def deepseek_v3_main(c: dict) -> int:
    """The main stack: 3 dense layers (the MLA and norms above + a 3 x h x 18432 MLP = 583,483,392
    each), 58 MoE layers, embedding and head (129,280 x 7168 each, untied), final norm."""
    h = c["hidden_size"]
    moe = deepseek_v3_moe_layer(c)
    routed_and_shared = (c["n_routed_experts"] * h
                         + (c["n_routed_experts"] + c["n_shared_experts"]) * 3 * h * c["moe_intermediate_size"])
    dense = moe - routed_and_shared + 3 * h * c["intermediate_size"]
    n_dense = c["first_k_dense_replace"]
    return n_dense * dense + (c["num_hidden_layers"] - n_dense) * moe + 2 * c["vocab_size"] * h + h


#: deepseek_v3_main(config): 3 x 583,483,392 + 58 x 11,507,286,016 + 2 x 926,679,040 + 7,168
DEEPSEEK_V3_MAIN = 671_026_404_352


def test_deepseek_v3_main_stack_params_by_hand(evaluation):
    """The hand count above ("671B" on DeepSeek's model card) against the engine's total."""
    c = config("deepseek-ai/DeepSeek-V3")
    assert deepseek_v3_main(c) == DEEPSEEK_V3_MAIN
    assert quantities.params_total(evaluation("deepseek-ai/DeepSeek-V3").numeric) == DEEPSEEK_V3_MAIN


def test_deepseek_v3_layer_plan_and_mtp(evaluation):
    """3 dense layers then 58 MoE layers; MTP stored as layer 61, reported outside the main stack."""
    c = config("deepseek-ai/DeepSeek-V3")
    a = evaluation("deepseek-ai/DeepSeek-V3").numeric
    plans = {row.template: row.layers for row in a.components.values() if row.template}
    assert plans["dense"] == tuple(range(c["first_k_dense_replace"]))
    assert plans["moe"] == tuple(range(c["first_k_dense_replace"], c["num_hidden_layers"]))
    assert plans["mtp"] == (c["num_hidden_layers"],)
    h, v = c["hidden_size"], c["vocab_size"]
    mtp = quantities.params_total(a, "mtp")
    assert quantities.params_total(a, None) == DEEPSEEK_V3_MAIN + mtp
    # MTP = one MoE decoder layer (deepseek_v3_moe_layer: 11,507,286,016) + own embedding and head
    # (2 x 129,280 x 7168) + eh_proj (2h x h) + 3 norms (enorm, hnorm, head norm) = 13,463,426,048
    assert deepseek_v3_moe_layer(c) == 11_507_286_016
    assert mtp == deepseek_v3_moe_layer(c) + 2 * v * h + 2 * h * h + 3 * h == 13_463_426_048


def test_mla_decode_uses_absorbed_variant(evaluation):
    """Decode runs MLA as MQA over the latent: scores over kv_lora_rank + rope dims per head,
    with kv_b_proj's halves applied per head (weights shared, not re-counted)."""
    c = config("deepseek-ai/DeepSeek-V3")
    a = evaluation("deepseek-ai/DeepSeek-V3").numeric
    decode = quantities.phase_rows(a, "decode")
    names = {r.name for r in decode}
    assert "q_absorb" in names and "kv_b_proj" not in names
    score = next(r for r in decode if r.op == "attention_score" and "[moe]" in r.uid)
    heads, latent, rope = c["num_attention_heads"], c["kv_lora_rank"], c["qk_rope_head_dim"]
    batch, ctx = sympy.Symbol("batch", integer=True, positive=True), sympy.Symbol("ctx", integer=True, positive=True)
    one_token = score.flops.subs({sympy.Symbol("seq", integer=True, positive=True): 1})
    assert sympy.expand(one_token - 2 * batch * heads * ctx * (latent + rope)) == 0
    # the absorbed path owns no parameters of its own: the decode program (q_absorb and the value
    # head_linear share kv_b_proj's weight) holds exactly the model's parameters, counted by hand
    owned = sum(r.params * r.repeat * r.instances for r in decode if not r.shares)
    assert {(r.name, r.shares) for r in decode if r.shares} == {("q_absorb", "kv_b_proj"), ("attn", "kv_b_proj")}
    kv_b = sum(r.params * r.repeat for r in a.rows.values() if r.stack == "main" and r.name == "kv_b_proj")
    assert kv_b == c["num_hidden_layers"] * latent * heads * (c["qk_nope_head_dim"] + c["v_head_dim"])
    assert owned + kv_b == DEEPSEEK_V3_MAIN


# -- Kimi-K2: the DeepSeek-V3 components at other dims (YAML only) ------------------------------

def test_kimi_k2_is_one_trillion_parameters_32b_active(evaluation):
    """Moonshot's model card: 1T total parameters, 32B activated, 384 experts (8 selected),
    MLA with 64 heads, 61 layers of which the first is dense."""
    c = config("moonshotai/Kimi-K2-Instruct")
    a = evaluation("moonshotai/Kimi-K2-Instruct").numeric
    assert round(float(quantities.params_total(a)) / 1e12, 2) == 1.03
    assert round(float(quantities.params_active(a)) / 1e9) == 33        # "32B activated" on the card
    # the routed experts alone: 60 MoE layers x 384 experts x 3 matrices of hidden x moe_intermediate
    moe_layers = c["num_hidden_layers"] - c["first_k_dense_replace"]
    experts = moe_layers * c["n_routed_experts"] * 3 * c["hidden_size"] * c["moe_intermediate_size"]
    assert quantities.params_by_role(a, "experts") == experts


def test_kimi_k2_mla_kv_matches_deepseek_v3(evaluation):
    """Same latent and rotary widths and layer count as DeepSeek-V3: the same 70,272 B/token,
    whatever the head count (64 here, 128 there)."""
    a = evaluation("moonshotai/Kimi-K2-Instruct").numeric
    assert kv.growing_bytes_per_token(a) == 70_272 == \
        kv.growing_bytes_per_token(evaluation("deepseek-ai/DeepSeek-V3").numeric)


def test_kimi_k2_fp8_checkpoint_layout(evaluation):
    """FP8 128x128 block scales like DeepSeek-V3; no MTP module (num_nextn_predict_layers = 0)."""
    c = config("moonshotai/Kimi-K2-Instruct")
    assert c["num_nextn_predict_layers"] == 0
    _, tensors = numbers(evaluation("moonshotai/Kimi-K2-Instruct"))
    e, dense = c["n_routed_experts"], c["first_k_dense_replace"]
    moe_layer = 12 + 2 + 2 + 6 + 6 * e
    assert storage.tensor_count(tensors) == dense * 20 + (c["num_hidden_layers"] - dense) * moe_layer + 3
    assert not [t for t in tensors if "eh_proj" in t.key]


# -- hybrid stacks: Gated DeltaNet + gated full attention (Qwen3.5) ---------------------------------

@pytest.mark.parametrize("length", [1024, 32 * 1024, 128 * 1024, 1024 * 1024])
@pytest.mark.parametrize("kv_dtype, kv_bytes", [("bf16", 2), ("fp8", 1)])
def test_qwen35_27b_state_and_kv_per_request(length, kv_dtype, kv_bytes, evaluation):
    """Qwen3.5-27B from its config (text_config): the full-attention layers cache K and V
    (num_key_value_heads x head_dim each) per token at the KV dtype; each linear-attention layer
    keeps, whatever the context, one [linear_key_head_dim, linear_value_head_dim] delta-rule state
    per value head in float32 (mamba_ssm_dtype) and the convolution's last kernel - 1 inputs over
    its q/k/v channels in BF16 (the activations' dtype, as transformers' cache keeps it)."""
    c = config("Qwen/Qwen3.5-27B")["text_config"]
    assert c["mamba_ssm_dtype"] == "float32"
    full = c["layer_types"].count("full_attention")
    linear = c["layer_types"].count("linear_attention")
    assert (full, linear) == (16, 48) and full + linear == c["num_hidden_layers"]
    per_token = full * 2 * c["num_key_value_heads"] * c["head_dim"] * kv_bytes
    delta = linear * c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"] * 4
    channels = 2 * c["linear_num_key_heads"] * c["linear_key_head_dim"] + c["linear_num_value_heads"] * c["linear_value_head_dim"]
    conv = linear * channels * (c["linear_conv_kernel_dim"] - 1) * 2
    assert (delta, conv) == (150_994_944, 2_949_120)
    a = evaluation("Qwen/Qwen3.5-27B").numeric
    assert kv.bytes_per_request(a, length, kv_dtype) == length * per_token + delta + conv
    assert kv.fixed_bytes_per_request(a, kv_dtype) == delta + conv          # flat: no context term
    assert kv.growing_bytes_per_token(a, kv_dtype) == per_token
    assert kv.bytes_per_token(a, kv_dtype) == {"kv": per_token}
    kinds = {(x.kind, x.growth, x.dtype, int(x.repeat)) for x in kv.caches(a)}
    assert kinds == {("kv", "every_token", None, full), ("conv_state", "state", "bf16", linear),
                     ("delta_state", "state", "f32", linear)}


def test_qwen35_27b_reads_the_text_config_and_its_layer_plan(evaluation):
    """The text stack of a multimodal checkpoint: every dim from text_config; layer i is a
    Gated DeltaNet layer exactly when layer_types[i] == linear_attention."""
    c = config("Qwen/Qwen3.5-27B")["text_config"]
    ev = evaluation("Qwen/Qwen3.5-27B")
    values = ev.numeric.values
    assert (values["hidden"], values["n_layers"], values["lin_v_heads"], values["rotary"]) == \
        (c["hidden_size"], c["num_hidden_layers"], c["linear_num_value_heads"],
         int(c["head_dim"] * c["rope_parameters"]["partial_rotary_factor"]))
    layers = {comp.template: set(comp.layers) for comp in ev.numeric.components.values() if comp.template}
    assert layers["linear"] == {i for i, t in enumerate(c["layer_types"]) if t == "linear_attention"}
    assert layers["full"] == {i for i, t in enumerate(c["layer_types"]) if t == "full_attention"}
