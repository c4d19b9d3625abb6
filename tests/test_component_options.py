"""Component options that replace copied components (issue 40, item 5), each on one layer.

Each option is switched on in one attention or FFN layer (an attention contract of
corpus/contracts/attention/ with its slot refilled, or a one-layer FFN spec) and the difference
it makes is checked against a hand count of the weights the modeling code adds:

* ``gqa_attention`` ``head_gate`` (Step-3.7-Flash, transformers ``Step3p7Attention``: ``g_proj``
  [hidden -> heads] when ``gating`` is per-head, output times sigmoid per head);
* ``gqa_attention`` ``block_indexer`` (MiniMax-M3, ``MiniMaxM3VLIndexer``: q_proj [hidden ->
  index heads x index dim], k_proj [hidden -> index dim], q_norm and k_norm of index dim; its keys
  cached, one per token);
* ``kda_attention`` ``full_rank_gate`` (Kimi K3's ``use_full_rank_gate``: ``g_proj`` [heads x
  head_dim, hidden] instead of ``g_a_proj`` [head_dim, hidden] + ``g_b_proj`` [heads x head_dim,
  head_dim]);
* ``mla_attention`` ``output_gate`` (Kimi K3's ``mla_use_output_gate``: ``g_proj`` [hidden ->
  heads x v_head_dim]);
* ``moe`` ``shared_fused_gate_up`` (MiniMax-M3's ``shared_experts.gate_up_proj``: the same
  weights in one tensor) and ``latent_norm`` (Kimi K3's ``latent_moe_use_norm``: an RMSNorm of the
  latent width before the up-projection).

The corpus models using them are checked against transformers' modeling code of their
architecture, built on the meta device from the published config's values (a consistency with
external code; both specs stay unverified, see tests/test_unverified.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.language import kv, quantities
from engine.language.api import evaluate_spec
from engine.language.model_load import load_model
from tests.conftest import REPO, SNAPSHOTS

CONTRACTS = REPO / "corpus" / "contracts" / "attention"
_WHY = "the transformers oracle is not installed: pip install -e '.[oracle]' (torch, transformers)"


def _layer(corpus, tmp_path: Path, contract: str, fill, dims: dict | None = None):
    """The contract's one attention layer with its slot filled by ``fill`` (and extra dims)."""
    spec = yaml.safe_load((CONTRACTS / f"{contract}.yaml").read_text())
    spec["slots"] = {"attention": fill}
    spec["dims"].update(dims or {})
    path = tmp_path / f"{contract}-{abs(hash(json.dumps(fill, sort_keys=True)))}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return evaluate_spec(corpus, load_model(path, corpus.root, corpus.roles, corpus.schemes))


def _params(evaluation) -> int:
    return int(quantities.params_total(evaluation.numeric))


def test_gqa_head_gate_adds_one_scalar_gate_per_head(corpus, tmp_path):
    plain = _layer(corpus, tmp_path, "gqa", "gqa_attention")
    gated = _layer(corpus, tmp_path, "gqa", {"component": "gqa_attention", "with": {"head_gate": True}})
    d = yaml.safe_load((CONTRACTS / "gqa.yaml").read_text())["dims"]
    assert _params(gated) - _params(plain) == d["hidden"] * d["n_heads"]


def test_gqa_block_indexer_adds_the_indexer_and_its_key_cache(corpus, tmp_path):
    index = {"n_index_heads": 4, "d_index_head": 128, "index_block": 128, "index_topk_blocks": 16}
    plain = _layer(corpus, tmp_path, "gqa", "gqa_attention", index)
    sparse = _layer(corpus, tmp_path, "gqa", {"component": "gqa_attention", "with": {"block_indexer": True}}, index)
    hidden = yaml.safe_load((CONTRACTS / "gqa.yaml").read_text())["dims"]["hidden"]
    # q_proj, k_proj, q_norm, k_norm
    assert _params(sparse) - _params(plain) == hidden * 4 * 128 + hidden * 128 + 128 + 128
    assert "indexer_key" in {c.kind for c in kv.caches(sparse.numeric)}
    assert "indexer_key" not in {c.kind for c in kv.caches(plain.numeric)}


def test_kda_full_rank_gate_replaces_the_low_rank_pair(corpus, tmp_path):
    low = _layer(corpus, tmp_path, "kda", "kda_attention")
    full = _layer(corpus, tmp_path, "kda", {"component": "kda_attention", "with": {"full_rank_gate": True}})
    d = yaml.safe_load((CONTRACTS / "kda.yaml").read_text())["dims"]
    h, heads, hd = d["hidden"], d["kda_heads"], d["kda_head_dim"]
    assert _params(full) - _params(low) == h * heads * hd - (h * hd + hd * heads * hd)
    # Kimi K3 publishes this setting (its config.json in corpus/snapshots)
    k3 = json.loads((SNAPSHOTS / "moonshotai--Kimi-K3.config.json").read_text())["text_config"]
    assert k3["linear_attn_config"]["use_full_rank_gate"] is True and h == k3["hidden_size"]


def test_mla_output_gate_adds_a_full_width_sigmoid_gate(corpus, tmp_path):
    plain = _layer(corpus, tmp_path, "mla", "mla_attention")
    gated = _layer(corpus, tmp_path, "mla", {"component": "mla_attention", "with": {"output_gate": True}})
    d = yaml.safe_load((CONTRACTS / "mla.yaml").read_text())["dims"]
    assert _params(gated) - _params(plain) == d["hidden"] * d["n_heads"] * d["d_v_head"]


def _ffn(corpus, tmp_path: Path, with_: dict):
    spec = {"model": "contract/ffn", "model_type": "contract", "family": "ffn contract", "snapshot": "contract",
            "dims": {"hidden": 64, "n_experts": 8, "top_k": 2, "d_ff_expert": 32, "n_shared_experts": 1,
                     "moe_latent": 16},
            "max_context": 4096,
            "stacks": {"main": {"inputs": {"x": ["batch", "seq", "hidden"]},
                                "graph": {"ffn": {"slot": "ffn", "in": "x"}}}},
            "slots": {"ffn": {"component": "moe", "with": with_}}}
    path = tmp_path / f"ffn-{abs(hash(json.dumps(with_, sort_keys=True)))}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return evaluate_spec(corpus, load_model(path, corpus.root, corpus.roles, corpus.schemes))


def test_moe_shared_fused_gate_up_stores_the_same_weights_in_one_tensor(corpus, tmp_path):
    two = _ffn(corpus, tmp_path, {"shared_experts": True})
    one = _ffn(corpus, tmp_path, {"shared_experts": True, "shared_fused_gate_up": True})
    assert _params(one) == _params(two)
    assert len(one.tensors()) == len(two.tensors()) - 1
    assert any(t.key.endswith("shared_experts.gate_up_proj.weight") for t in one.tensors())


def test_moe_latent_norm_adds_one_norm_of_the_latent_width(corpus, tmp_path):
    latent = {"latent": True, "latent_dim": "moe_latent"}
    plain = _ffn(corpus, tmp_path, latent)
    normed = _ffn(corpus, tmp_path, {**latent, "latent_norm": True})
    assert _params(normed) - _params(plain) == 16


# -- the corpus models using them, against their architecture's transformers code -------------------

def _meta_count(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def test_minimax_m3_equals_transformers_minimax_m3_vl_text_stack(corpus):
    """MiniMaxM3VLForCausalLM (the text stack) built from MiniMax-M3's published values, mapped to
    MiniMaxM3VLTextConfig's names (experts' width: intermediate_size = moe_intermediate_size)."""
    torch = pytest.importorskip("torch", reason=_WHY)
    pytest.importorskip("transformers", reason=_WHY)
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM
    c = json.loads((SNAPSHOTS / "MiniMaxAI--MiniMax-M3.config.json").read_text())
    keys = ("hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "dense_intermediate_size", "shared_intermediate_size", "num_local_experts",
            "num_experts_per_tok", "rope_theta", "moe_layer_freq", "sparse_attention_config", "rotary_dim",
            "partial_rotary_factor", "max_position_embeddings", "tie_word_embeddings")
    text = MiniMaxM3VLTextConfig(**{k: c[k] for k in keys}, intermediate_size=c["moe_intermediate_size"])
    with torch.device("meta"):
        theirs = _meta_count(MiniMaxM3VLForCausalLM(text))
    ours = _params(evaluate_spec(corpus, corpus.models["MiniMaxAI/MiniMax-M3"]))
    assert ours == theirs == 426_174_565_632


def test_step_3_7_flash_equals_transformers_step3p7_text_stack(corpus):
    """Step3p7ForConditionalGeneration's language model built from Step-3.7-Flash's flat config
    moved under text_config (Step3p7TextConfig's names: n_routed_experts; MoE from layer
    first_k_dense_replace on), vision tower and projector left out."""
    torch = pytest.importorskip("torch", reason=_WHY)
    pytest.importorskip("transformers", reason=_WHY)
    from transformers.models.step3p7.configuration_step3p7 import Step3p7Config
    from transformers.models.step3p7.modeling_step3p7 import Step3p7ForConditionalGeneration
    c = json.loads((SNAPSHOTS / "stepfun-ai--Step-3.7-Flash.config.json").read_text())
    keys = ("hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size", "moe_intermediate_size", "share_expert_dim", "num_experts_per_tok",
            "sliding_window", "layer_types", "max_position_embeddings", "moe_router_scaling_factor")
    text = {k: c[k] for k in keys} | {"n_routed_experts": c["num_experts"],
                                       "moe_layers_enum": list(range(c["first_k_dense_replace"], c["num_hidden_layers"]))}
    with torch.device("meta"):
        model = Step3p7ForConditionalGeneration(Step3p7Config(text_config=text))
    theirs = sum(p.numel() for n, p in model.named_parameters()
                 if n.startswith(("model.language_model.", "lm_head.")))
    ours = _params(evaluate_spec(corpus, corpus.models["stepfun-ai/Step-3.7-Flash"]))
    assert ours == int(theirs) == 195_844_496_640


def test_a_flat_config_of_a_multimodal_model_type_is_refused_not_built_from_defaults():
    """Step-3.7-Flash's flat config under transformers' multimodal step3p7 would build a default
    text stack (vocabulary 128815, all layers full): refused, one line, as an architecture
    transformers lacks (so `new` declares the spec unverified)."""
    pytest.importorskip("transformers", reason=_WHY)
    from engine.verify import modeling_code
    c = json.loads((SNAPSHOTS / "stepfun-ai--Step-3.7-Flash.config.json").read_text())
    with pytest.raises(modeling_code.ArchitectureMissing, match="Step3p7FlashForCausalLM.*from defaults"):
        modeling_code.hf_config(c)
    nested = {"model_type": "step3p7", "architectures": ["Step3p7ForConditionalGeneration"],
              "text_config": {"hidden_size": 64}}
    assert type(modeling_code.hf_config(nested)).__name__ == "Step3p7Config"
