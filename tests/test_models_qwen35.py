"""Qwen3.5 hybrid MoE stacks (35B-A3B, 122B-A10B, 397B-A17B) and the Qwen3.5 MTP modules.

Every expectation is derived here from the published config.json (text_config) by reading the
modeling code, never from the engine: transformers' models/qwen3_5_moe/modeling_qwen3_5_moe.py for
the main stack (Qwen3_5MoeGatedDeltaNet, Qwen3_5MoeAttention, Qwen3_5MoeSparseMoeBlock: router
Linear(hidden, E), E experts of 3 [I, hidden] matrices, shared_expert of
shared_expert_intermediate_size and shared_expert_gate Linear(hidden, 1)); vLLM's
vllm/model_executor/models/qwen3_5_mtp.py (Qwen3_5MultiTokenPredictor) for the MTP module, which
transformers does not build: fc Linear(2 hidden, hidden), pre_fc_norm_embedding,
pre_fc_norm_hidden and norm RMSNorms, and mtp_num_hidden_layers decoder layers of type
full_attention; embed_tokens and lm_head are the main model's (mtp_use_dedicated_embeddings is
false), so the checkpoint stores them once.
"""
from __future__ import annotations

import dataclasses

import pytest

from engine.language import kv, quantities, storage
from tests.conftest import hf_config, hf_config_path

MOE = ["Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-397B-A17B"]
ALL = ["Qwen/Qwen3.5-27B"] + MOE


def text(model_id: str) -> dict:
    return hf_config(model_id)["text_config"]


def gdn_layer_mixer(c: dict) -> int:
    """Qwen3_5MoeGatedDeltaNet: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d [C, 1, K]
    (no bias), dt_bias, A_log, the gated RMSNorm over d_v, out_proj."""
    h, nk, nv, dk, dv = (c["hidden_size"], c["linear_num_key_heads"], c["linear_num_value_heads"],
                         c["linear_key_head_dim"], c["linear_value_head_dim"])
    conv_dim = 2 * nk * dk + nv * dv
    return conv_dim * h + nv * dv * h + 2 * nv * h + conv_dim * c["linear_conv_kernel_dim"] + 2 * nv + dv + h * nv * dv


def full_layer_mixer(c: dict) -> int:
    """Qwen3_5MoeAttention with attn_output_gate: q_proj emits queries and gates (2 H D), k/v_proj,
    o_proj, q_norm and k_norm over head_dim."""
    h, H, KV, D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    return 2 * H * D * h + 2 * KV * D * h + h * H * D + 2 * D


def ffn(c: dict) -> int:
    """Qwen3_5MoeSparseMoeBlock (router, experts, shared expert, shared_expert_gate), or the dense
    Qwen3_5MLP of the 27B."""
    h = c["hidden_size"]
    if "num_experts" not in c:
        return 3 * h * c["intermediate_size"]
    E, I, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    return E * h + E * 3 * h * I + 3 * h * Is + h


def main_params(c: dict) -> int:
    h, V = c["hidden_size"], c["vocab_size"]
    assert c["tie_word_embeddings"] is False if "tie_word_embeddings" in c else True
    types = c["layer_types"]
    layers = sum((gdn_layer_mixer(c) if t == "linear_attention" else full_layer_mixer(c)) + ffn(c) + 2 * h
                 for t in types)
    return 2 * V * h + h + layers                     # embed_tokens, lm_head, norm, layers


def mtp_params(c: dict) -> int:
    """fc [hidden, 2 hidden], three RMSNorms, then full-attention decoder layers."""
    h = c["hidden_size"]
    return 2 * h * h + 3 * h + c["mtp_num_hidden_layers"] * (full_layer_mixer(c) + ffn(c) + 2 * h)


# Exact counts, written out so a reader can check them against the formulas above.
MAIN = {"Qwen/Qwen3.5-27B": 26_895_998_464, "Qwen/Qwen3.5-35B-A3B": 34_660_610_688,
        "Qwen/Qwen3.5-122B-A10B": 122_111_526_912, "Qwen/Qwen3.5-397B-A17B": 396_346_350_336}
ACTIVE = {"Qwen/Qwen3.5-35B-A3B": 3_454_988_928, "Qwen/Qwen3.5-122B-A10B": 9_771_288_576,
          "Qwen/Qwen3.5-397B-A17B": 17_349_040_896}
MTP = {"Qwen/Qwen3.5-27B": 424_699_392, "Qwen/Qwen3.5-35B-A3B": 844_640_768,
       "Qwen/Qwen3.5-122B-A10B": 2_523_679_232, "Qwen/Qwen3.5-397B-A17B": 6_595_568_128}


@pytest.mark.parametrize("model_id", ALL)
def test_main_params_hand_formula_equals_engine(model_id, evaluation):
    c = text(model_id)
    assert hf_config(model_id).get("tie_word_embeddings") is False
    assert main_params(c) == MAIN[model_id]
    assert int(quantities.params_total(evaluation(model_id).numeric)) == MAIN[model_id]


@pytest.mark.parametrize("model_id", MOE)
def test_main_params_equal_transformers_meta_count(model_id):
    """The hand count equals what transformers builds on the meta device (Qwen3_5MoeForCausalLM)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import hf_oracle
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    assert report.model_class == "Qwen3_5MoeForCausalLM"
    assert report.total_params == main_params(text(model_id)) == MAIN[model_id]
    h = text(model_id)["hidden_size"]
    assert report.params["model.layers.0.mlp.shared_expert_gate.weight"] == (1, h)
    assert report.params["model.layers.0.mlp.shared_expert.up_proj.weight"] == \
        (text(model_id)["shared_expert_intermediate_size"], h)


@pytest.mark.parametrize("model_id", MOE)
def test_active_params(model_id, evaluation):
    """A token uses top_k of the E routed experts in every layer (all layers are MoE:
    mlp_only_layers is empty); the shared expert and its gate are always active."""
    c = text(model_id)
    assert c["mlp_only_layers"] == []
    idle = (c["num_experts"] - c["num_experts_per_tok"]) * 3 * c["hidden_size"] * c["moe_intermediate_size"]
    assert MAIN[model_id] - c["num_hidden_layers"] * idle == ACTIVE[model_id]
    assert int(quantities.params_active(evaluation(model_id).numeric)) == ACTIVE[model_id]


@pytest.mark.parametrize("model_id, total_b, active_b", [
    ("Qwen/Qwen3.5-35B-A3B", 35, 3), ("Qwen/Qwen3.5-122B-A10B", 122, 10), ("Qwen/Qwen3.5-397B-A17B", 397, 17),
])
def test_params_round_to_the_published_names(model_id, total_b, active_b):
    """The names state total and active parameters in billions: the active count rounds to the
    name; the total (the name counts the vision tower too, about 0.45B, and rounds loosely:
    122.56B with it is "122B") is within 1B of it."""
    assert abs(MAIN[model_id] / 1e9 - total_b) < 1
    assert round(ACTIVE[model_id] / 1e9) == active_b


@pytest.mark.parametrize("model_id", ALL)
def test_mtp_params_hand_derivation(model_id, evaluation):
    c = text(model_id)
    assert c["mtp_num_hidden_layers"] == 1 and c["mtp_use_dedicated_embeddings"] is False
    assert mtp_params(c) == MTP[model_id]
    a = evaluation(model_id).numeric
    assert int(quantities.params_total(a, "mtp")) == MTP[model_id]
    assert int(quantities.params_total(a, None)) == MAIN[model_id] + MTP[model_id]


@pytest.mark.parametrize("model_id", ALL)
def test_mtp_checkpoint_tensors(model_id, evaluation):
    """The MTP tensors under the checkpoint's names (vLLM's Qwen3_5MTP.load_weights maps `mtp.`
    to its predictor; embed_tokens and lm_head come from the main model): fc, three norms and the
    decoder layer mtp.layers.0 (15 tensors for the dense 27B; the MoE layer adds the router,
    3 x E experts, 3 shared-expert matrices and the shared-expert gate)."""
    c = text(model_id)
    h = c["hidden_size"]
    ev = evaluation(model_id)
    tensors = [t for t in storage.checkpoint_tensors(ev.numeric, ev.model, ev.corpus) if t.stack == "mtp"]
    shapes = {t.key: t.shape for t in tensors}
    assert shapes["mtp.fc.weight"] == (h, 2 * h)
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        assert shapes[f"mtp.{norm}.weight"] == (h,)
    layer = "mtp.layers.{layer}."
    assert shapes[layer + "self_attn.q_proj.weight"] == (2 * c["num_attention_heads"] * c["head_dim"], h)
    assert not [k for k in shapes if "embed_tokens" in k or "lm_head" in k or "linear_attn" in k]
    count = sum(t.count for t in tensors)
    if "num_experts" in c:
        assert shapes[layer + "mlp.shared_expert_gate.weight"] == (1, h)
        assert count == 4 + 6 + 2 + 1 + 3 * c["num_experts"] + 3 + 1
    else:
        assert count == 15


@pytest.mark.parametrize("model_id", MOE)
def test_layer_plan_follows_layer_types(model_id, evaluation):
    c = text(model_id)
    ev = evaluation(model_id)
    layers = {comp.template: set(comp.layers) for comp in ev.numeric.components.values()
              if comp.template and comp.stack == "main"}
    assert layers["linear"] == {i for i, t in enumerate(c["layer_types"]) if t == "linear_attention"}
    assert layers["full"] == {i for i, t in enumerate(c["layer_types"]) if t == "full_attention"}


@pytest.mark.parametrize("length", [1024, 32 * 1024, 128 * 1024, 1024 * 1024])
@pytest.mark.parametrize("kv_dtype, kv_bytes", [("bf16", 2), ("fp8", 1)])
@pytest.mark.parametrize("model_id", MOE)
def test_state_and_kv_per_request(model_id, length, kv_dtype, kv_bytes, evaluation):
    """Full-attention layers cache K and V (num_key_value_heads x head_dim each) per token at the
    KV dtype; each linear-attention layer keeps, whatever the context, one [d_k, d_v] delta-rule
    state per value head in float32 (mamba_ssm_dtype) and the convolution's last kernel - 1 inputs
    over its q/k/v channels in BF16 (the activations' dtype, as transformers' cache keeps it)."""
    c = text(model_id)
    assert c["mamba_ssm_dtype"] == "float32"
    full = c["layer_types"].count("full_attention")
    linear = c["layer_types"].count("linear_attention")
    assert full + linear == c["num_hidden_layers"] and linear == 3 * full
    per_token = full * 2 * c["num_key_value_heads"] * c["head_dim"] * kv_bytes
    delta = linear * c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"] * 4
    channels = 2 * c["linear_num_key_heads"] * c["linear_key_head_dim"] + c["linear_num_value_heads"] * c["linear_value_head_dim"]
    conv = linear * channels * (c["linear_conv_kernel_dim"] - 1) * 2
    a = evaluation(model_id).numeric
    assert kv.bytes_per_request(a, length, kv_dtype) == length * per_token + delta + conv
    assert kv.fixed_bytes_per_request(a, kv_dtype) == delta + conv          # flat: no context term
    assert kv.growing_bytes_per_token(a, kv_dtype) == per_token
    kinds = {(x.kind, x.growth, x.dtype, int(x.repeat)) for x in kv.caches(a)}
    assert kinds == {("kv", "every_token", None, full), ("conv_state", "state", "bf16", linear),
                     ("delta_state", "state", "f32", linear)}


# The per-request numbers above, written out for the reader (35B-A3B: 10 full layers x 2 x 2 KV
# heads x 256 x 2 bytes = 20,480 B per token at BF16; 30 GDN layers x (32 x 128 x 128 x 4 +
# 8192 x 3 x 2) = 62,914,560 + 1,474,560 B flat).
STATE = {"Qwen/Qwen3.5-35B-A3B": (20_480, 62_914_560 + 1_474_560),
         "Qwen/Qwen3.5-122B-A10B": (24_576, 150_994_944 + 2_654_208),
         "Qwen/Qwen3.5-397B-A17B": (30_720, 188_743_680 + 3_317_760)}


@pytest.mark.parametrize("model_id", MOE)
def test_state_and_kv_figures(model_id, evaluation):
    per_token, flat = STATE[model_id]
    a = evaluation(model_id).numeric
    for length in (1024, 32 * 1024, 128 * 1024, 1024 * 1024):
        assert kv.bytes_per_request(a, length, "bf16") == length * per_token + flat
        assert kv.bytes_per_request(a, length, "fp8") == length * per_token // 2 + flat


# -- the gated shared expert on a tensor-parallel deployment ---------------------------------------

def test_gated_shared_expert_reduces_once_under_tp():
    """vLLM's Qwen2-MoE/Qwen3-Next shared expert keeps its output unreduced, scales it by the
    replicated sigmoid gate and reduces it with the routed experts in one all-reduce: the gated
    mul carries the partial sum and each GPU multiplies its whole [tokens, hidden] partial."""
    from engine.deploy import Scenario
    from tests.deploy_helpers import close, deploy, op
    c = text("Qwen/Qwen3.5-35B-A3B")
    B, h, full = 4, c["hidden_size"], c["layer_types"].count("full_attention")
    d = deploy("Qwen3.5-35B-A3B", "H100", Scenario(B, 1000, 24), tp=2)
    base = "main/layers[full]/mlp"
    reduces = [r["op_uid"] for r in d.ops["decode"] if r["op"] == "all_reduce" and r["op_uid"].startswith(base + "/")]
    assert reduces == [f"{base}/out>all_reduce[tp]"]
    assert close(op(d, "decode", f"{base}/shared_gated")["flops"], full * B * h)
    assert close(op(d, "decode", f"{base}/shared_expert_gate")["flops"], full * 2 * B * h)


def test_broadcast_operand_axis_is_never_split():
    """Placement of `mul` with a [.., 1] operand: when the full operand's hidden axis is split over
    TP, the gate is not split along its size-1 axis (no reshard of it), and the output follows the
    full operand."""
    from engine.deploy.parallel import Mesh, ParallelConfig
    from engine.deploy.placement import Placer
    from engine.deploy.device_program import DeviceTypes, Layout
    from tests.conftest import _evaluation
    ev = _evaluation("Qwen/Qwen3.5-35B-A3B")
    a = ev.numeric
    row = a.rows["main/layers[full]/mlp/shared_gated"]
    mesh = Mesh(ParallelConfig(tp=2), 8)
    tp = mesh.world_group("tp", "default")
    placer = Placer(a, mesh, "decode", ev.corpus.dims, lambda r: [], DeviceTypes(), lambda e: None)
    placer.consumers = {}
    full, gate = (placer.source(uid, t) for uid, t in zip(row.inputs, row.in_shapes))
    assert row.in_shapes[1].sizes[-1] == 1 and row.out.sizes[-1] == c_hidden()
    full = dataclasses.replace(full, layout=Layout(((), (), (tp,))))
    placer.place_axis_map(row, [full, gate])
    step = placer.out[row.uid]
    assert step.layout == Layout(((), (), (tp,)))
    assert [s.op for s in placer.steps] == ["mul"]                     # no collective on either operand
    assert not [key for key in placer.redist if key[0] == gate.uid]    # the gate is used as it is, whole
    assert step.inputs == (full.uid, gate.uid)


def c_hidden() -> int:
    return text("Qwen/Qwen3.5-35B-A3B")["hidden_size"]
