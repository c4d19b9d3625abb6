"""Parameter counts equal the Hugging Face modeling code's, exactly, for every corpus model.

transformers builds each model on the ``meta`` device from the published config.json (no weights,
no network); the count it reports is an independent external fact. MTP stacks are outside the HF
classes and are checked separately in test_models.py.
"""
from __future__ import annotations

import pytest

from engine.language import quantities
from tests import hf_oracle
from tests.conftest import EVERY_MODEL, MODEL_IDS, hf_config, hf_config_path

#: One pytest-xdist worker runs the whole module with the other every-model tests (conftest.EVERY_MODEL): each model's
#: meta-device build is cached per process (tests/hf_oracle.py) and read by five tests, so tests
#: spread over two workers built most models twice. tests/hf_oracle.py imports torch and
#: transformers lazily (inside the call), so importing it always succeeds: the skip names the
#: packages themselves (conftest.oracle_installed), when the tests run, not when they are collected.
pytestmark = [EVERY_MODEL, pytest.mark.usefixtures("oracle_installed")]


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_total_params_equal_hf_modeling_code(model_id, evaluation):
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    assert int(quantities.params_total(evaluation(model_id).numeric)) == report.total_params


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_active_params_equal_hf_total_minus_idle_experts(model_id, evaluation):
    """Active parameters per token, absolute: the HF modeling code's total minus the experts a
    token does not use, (n_experts - top_k) x per-expert params x MoE layers, from config.json
    (gated MLP: 3 matrices of hidden x expert width; gpt-oss adds gate_up and down biases;
    Nemotron-H: up and down of expert width x moe_latent_size, else hidden, in the "E" layers of
    hybrid_override_pattern).
    A multimodal checkpoint's text settings are under text_config (a top-level field wins)."""
    c = hf_config(model_id)
    c = {**c.get("text_config", {}), **c}
    total = hf_oracle.hf_meta_report(hf_config_path(model_id)).total_params
    active = int(quantities.params_active(evaluation(model_id).numeric))
    n_experts = c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts")
    if not n_experts:
        assert active == total
        return
    width = c.get("moe_intermediate_size") or c["intermediate_size"]
    per_expert = 3 * c["hidden_size"] * width
    if c["model_type"] == "gpt_oss":
        per_expert += 2 * width + c["hidden_size"]
    # Nemotron 3 Ultra / 3.5 list their layers by name (layers_block_type) instead of counting them
    n_layers = c.get("num_hidden_layers") or len(c["layers_block_type"])
    moe_layers = n_layers - c.get("first_k_dense_replace", 0)
    if "interleave_moe_layer_step" in c:   # Llama 4: every step-th layer (Llama4TextConfig.moe_layers)
        moe_layers = len(range(c["interleave_moe_layer_step"] - 1, c["num_hidden_layers"], c["interleave_moe_layer_step"]))
    if isinstance(c.get("moe_layer_freq"), list):   # MiMo-V2-Flash: 1 marks an MoE layer
        moe_layers = sum(c["moe_layer_freq"])
    top_k = c.get("num_experts_per_tok") or c["top_k_experts"]   # Gemma 4: top_k_experts
    if c["model_type"] == "nemotron_h":
        # NemotronHExperts: up and down only, in moe_latent_size when set; MoE layers are the Es
        per_expert = 2 * (c.get("moe_latent_size") or c["hidden_size"]) * width
        moe_layers = (c["hybrid_override_pattern"].count("E") if "hybrid_override_pattern" in c
                      else c["layers_block_type"].count("moe"))
    assert active == total - (n_experts - top_k) * per_expert * moe_layers


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_buffers_are_not_parameters(model_id, evaluation):
    """Checkpoint buffers (DeepSeek's routing bias) are stored but not counted, as in HF."""
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    analysis = evaluation(model_id).numeric
    ours = sum(int(leaf.numel * row.repeat * row.instances)
               for row in analysis.rows.values() if row.stack == "main" and "prefill" in row.phases
               for leaf in row.leaves if leaf.kind == "buffer")
    theirs = sum(int(__import__("math").prod(shape)) for shape in report.buffers.values())
    assert ours == theirs


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_non_layer_parameters_match(model_id, evaluation):
    """Embedding, final norm and head shapes agree with the HF module tree (matched by node: a
    checkpoint may name them differently from transformers' modules, e.g. DeepSeek-V4's head)."""
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    rows = evaluation(model_id).numeric.rows
    # NemotronHModel names them embeddings and norm_f
    embed, norm = (("model.embeddings.weight", "model.norm_f.weight") if hf_config(model_id)["model_type"] == "nemotron_h"
                   else ("model.embed_tokens.weight", "model.norm.weight"))
    pairs = [("main/embed_tokens", embed), ("main/norm", norm)]
    if not report.tied:   # a tied head is the embedding (Gemma 4): no parameter of its own
        pairs.append(("main/lm_head", "lm_head.weight"))
    else:
        assert rows["main/lm_head"].shares == "embed_tokens"
    for uid, name in pairs:
        (leaf,) = rows[uid].leaves
        assert tuple(int(a.size) for a in leaf.axes) == report.params[name]


def _layer_leaves(analysis, layer: int) -> dict[str, tuple[int, ...]]:
    """Our weight leaves of one layer, keyed like HF's named_parameters."""
    out = {}
    for row in analysis.rows.values():
        if row.stack != "main" or "prefill" not in row.phases or row.shares:
            continue
        template = next((c for u, c in analysis.components.items()
                         if c.template and row.uid.startswith(u + "/")), None)
        if template is None or layer not in template.layers:
            continue
        lead = (int(row.instances),) if row.stacked else ()   # stacked experts: [E, ...] (Llama 4)
        for leaf in row.leaves:
            if leaf.kind == "param":
                out[leaf.key.format(layer=layer)] = lead + tuple(int(a.size) for a in leaf.axes)
    return out


# Dense models (and Llama 4, whose experts transformers keeps stacked as the checkpoint does):
# HF's module tree and the checkpoint share names, so every name and shape of a
# layer must agree both ways (MoE experts are fused into 3-D tensors by transformers 5, unlike
# the per-expert checkpoints, and are covered by the totals above).
DENSE = [m for m in MODEL_IDS if "Llama" in m or m in ("Qwen/Qwen3-8B", "Qwen/Qwen3-32B",
                                                       "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-32B-Instruct")]


@pytest.mark.parametrize("model_id", DENSE)
def test_dense_layer_names_and_shapes_match_hf(model_id, evaluation):
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    theirs = {k: v for k, v in report.params.items() if k.startswith("model.layers.0.")}
    assert _layer_leaves(evaluation(model_id).numeric, 0) == theirs
