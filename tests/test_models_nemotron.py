"""Nemotron-H and Nemotron 3: hybrid Mamba2 + attention + MLP/MoE stacks, checked against facts
from outside the engine.

Every number below is derived by hand from the published config.json (kept byte for byte in
corpus/snapshots/) following transformers' modeling_nemotron_h.py (5.24):

* a layer is ONE mixer with its own RMSNorm (NemotronHBlock), picked by hybrid_override_pattern:
  ``M`` NemotronHMamba2Mixer, ``*`` NemotronHAttention, ``-`` NemotronHMLP, ``E`` NemotronHMoE;
* Mamba2 (intermediate I = heads x head_dim, conv_dim = I + 2 groups N): in_proj
  [I + conv_dim + heads, hidden] without bias, conv1d [conv_dim, 1, K] with bias, dt_bias, A_log
  and D of heads each, the gated norm's weight [I], out_proj [hidden, I];
* attention: q/k/v/o without bias, no rotary embedding;
* MLP and experts: up and down only (squared ReLU, no gate); MoE: router weight [E, hidden] and a
  correction-bias buffer (not a parameter), E experts of up/down in moe_latent_size (else hidden),
  fc1/fc2_latent_proj when moe_latent_size is set, one shared expert of
  moe_shared_expert_intermediate_size at full width;
* per request, each Mamba2 layer keeps a conv state [conv_dim, K - 1] (activation dtype, BF16) and
  an SSM state [heads, head_dim, N] in the config's mamba_ssm_cache_dtype (NemotronHConfig's
  default "float32" when the config omits it); each attention layer caches 2 x kv_heads x head_dim
  per token in the deployment's KV dtype.
"""
from __future__ import annotations

import pytest

from engine.api import evaluate_spec
from engine.language import kv, quantities
from engine.language.corpus import load_corpus
from engine.language.errors import SpecError
from tests.conftest import hf_config, hf_config_path
from tests.test_guards import mutate

NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"
SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
H56 = "nvidia/Nemotron-H-56B-Base-8K"
MODELS = [H56, NANO, SUPER]
LENGTHS = (1024, 32 * 1024, 128 * 1024, 1024 * 1024)


def counts(c: dict) -> dict[str, int]:
    pattern = c["hybrid_override_pattern"]
    return {kind: pattern.count(ch) for kind, ch in (("mamba", "M"), ("attention", "*"), ("mlp", "-"), ("moe", "E"))}


def layer_params(c: dict) -> dict[str, int]:
    """Parameters of one layer of each kind, its RMSNorm included (module docstring)."""
    h = c["hidden_size"]
    inner = c["mamba_num_heads"] * c["mamba_head_dim"]
    conv_dim = inner + 2 * c["n_groups"] * c["ssm_state_size"]
    heads = c["mamba_num_heads"]
    mamba = h * (inner + conv_dim + heads) + conv_dim * c["conv_kernel"] + conv_dim + 3 * heads + inner + inner * h
    d_head = c.get("head_dim") or c["attention_head_dim"]
    attention = 2 * h * c["num_attention_heads"] * d_head + 2 * h * c["num_key_value_heads"] * d_head
    out = {"mamba": mamba + h, "attention": attention + h, "mlp": 2 * h * c["intermediate_size"] + h}
    if c.get("n_routed_experts"):
        width = c.get("moe_latent_size") or h
        latent = 2 * h * c["moe_latent_size"] if c.get("moe_latent_size") else 0
        out["moe"] = (c["n_routed_experts"] * h + c["n_routed_experts"] * 2 * width * c["moe_intermediate_size"]
                      + latent + 2 * h * c["moe_shared_expert_intermediate_size"] + h)
    return out


def hand_total(c: dict) -> int:
    per = layer_params(c)
    outside = 2 * c["vocab_size"] * c["hidden_size"] + c["hidden_size"]   # untied embedding, head, norm_f
    return outside + sum(n * per[kind] for kind, n in counts(c).items() if n)


def hand_active(c: dict) -> int:
    if not c.get("n_routed_experts"):
        return hand_total(c)
    per_expert = 2 * (c.get("moe_latent_size") or c["hidden_size"]) * c["moe_intermediate_size"]
    idle = (c["n_routed_experts"] - c["num_experts_per_tok"]) * per_expert
    return hand_total(c) - counts(c)["moe"] * idle


# -- parameters -------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_id", MODELS)
def test_params_hand_formula_equals_hf_meta_and_engine(model_id, evaluation):
    hf_oracle = pytest.importorskip("tests.hf_oracle")
    pytest.importorskip("torch")
    c = hf_config(model_id)
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    assert hand_total(c) == report.total_params
    assert int(quantities.params_total(evaluation(model_id).numeric)) == hand_total(c)


# Exact totals (hand formula = transformers meta count = engine), and the sizes the names claim.
EXACT = {H56: (56_324_350_464, None), NANO: (31_577_937_344, 3_580_073_408),
         SUPER: (120_668_687_360, 12_770_216_960)}


@pytest.mark.parametrize("model_id", MODELS)
def test_exact_totals_and_active_params(model_id, evaluation):
    c = hf_config(model_id)
    total, active = EXACT[model_id]
    assert hand_total(c) == total
    ev = evaluation(model_id).numeric
    assert int(quantities.params_total(ev)) == total
    assert int(quantities.params_active(ev)) == hand_active(c) == (active or total)


def test_published_sizes_match_the_names():
    # the model names' sizes: 56B; 30B-A3B (model card: 31.6B total); 120B-A12B
    assert round(hand_total(hf_config(H56)) / 1e9) == 56
    assert round(hand_total(hf_config(NANO)) / 1e9, 1) == 31.6 and round(hand_active(hf_config(NANO)) / 1e9) == 4
    assert int(hand_total(hf_config(SUPER)) / 1e9) == 120 and int(hand_active(hf_config(SUPER)) / 1e9) == 12


@pytest.mark.parametrize("model_id", MODELS)
def test_each_layer_is_the_mixer_its_pattern_character_names(model_id, evaluation):
    """The schedule follows hybrid_override_pattern character by character (read here directly)."""
    c = hf_config(model_id)
    ev = evaluation(model_id).numeric
    layers = {}
    for comp in ev.components.values():
        if comp.template and comp.stack == "main":
            for layer in comp.layers:
                layers[layer] = comp.template
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    assert [layers[i] for i in range(len(layers))] == [names[ch] for ch in c["hybrid_override_pattern"]]
    # NemotronHAttention applies no rotary embedding
    assert not any(r.op == "rope" for r in ev.rows.values())


# -- KV and state per request -----------------------------------------------------------------------

def hand_cache_bytes(c: dict, length: int, kv_bytes: int, ssm_bytes: int = 4) -> tuple[int, int]:
    """(flat Mamba2 state bytes, attention KV bytes) one request holds at ``length`` tokens."""
    n = counts(c)
    inner = c["mamba_num_heads"] * c["mamba_head_dim"]
    conv_dim = inner + 2 * c["n_groups"] * c["ssm_state_size"]
    conv = conv_dim * (c["conv_kernel"] - 1) * 2                       # BF16 activations
    ssm = c["mamba_num_heads"] * c["mamba_head_dim"] * c["ssm_state_size"] * ssm_bytes
    d_head = c.get("head_dim") or c["attention_head_dim"]
    attention = n["attention"] * 2 * c["num_key_value_heads"] * d_head * length * kv_bytes
    return n["mamba"] * (conv + ssm), attention


@pytest.mark.parametrize("model_id", MODELS)
@pytest.mark.parametrize("kv_dtype, kv_bytes", [("bf16", 2), ("fp8", 1)])
def test_state_and_kv_per_request(model_id, kv_dtype, kv_bytes, evaluation):
    c = hf_config(model_id)
    ev = evaluation(model_id).numeric
    assert c.get("mamba_ssm_cache_dtype", "float32") == "float32"   # 56B omits it: the default
    for length in LENGTHS:
        state, attention = hand_cache_bytes(c, length, kv_bytes)
        assert int(kv.bytes_per_request(ev, length, kv_dtype)) == state + attention
    # the state part is flat: what grows is the attention part alone
    assert int(kv.fixed_bytes_per_request(ev, kv_dtype)) == hand_cache_bytes(c, 1, kv_bytes)[0]
    assert int(kv.growing_bytes_per_token(ev, kv_dtype)) == hand_cache_bytes(c, 1, kv_bytes)[1]


# Written out for one model so a reader can check the arithmetic: Nemotron 3 Nano, 23 Mamba2 layers,
# 6 attention layers (GQA 2 KV heads of 128), BF16 KV.
NANO_BYTES = {
    # state: 23 x (64 x 64 x 128 x 4 B + (4096 + 2 x 8 x 128) x 3 x 2 B) = 23 x (2,097,152 + 36,864)
    "state": 49_082_368,
    # KV per token: 6 layers x 2 (K, V) x 2 heads x 128 x 2 B = 6,144 B
    1024: 49_082_368 + 6_291_456,
    32 * 1024: 49_082_368 + 201_326_592,
    128 * 1024: 49_082_368 + 805_306_368,
    1024 * 1024: 49_082_368 + 6_442_450_944,
}


def test_nano_cache_bytes_written_out(evaluation):
    ev = evaluation(NANO).numeric
    assert int(kv.fixed_bytes_per_request(ev, "bf16")) == NANO_BYTES["state"]
    for length in LENGTHS:
        assert int(kv.bytes_per_request(ev, length, "bf16")) == NANO_BYTES[length]


# -- the state dtype comes from the config ------------------------------------------------------------

SNAP_NANO = "snapshots/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.yaml"
SPEC_56B = "models/nvidia--Nemotron-H-56B-Base-8K.yaml"


def _ssm_state_bytes(root, model_id: str) -> tuple[int, int]:
    corpus = load_corpus(root)
    ev = evaluate_spec(corpus, corpus.models[model_id]).numeric
    by_kind: dict[str, int] = {}
    for cache in kv.caches(ev):
        if cache.growth == "state":
            by_kind[cache.kind] = by_kind.get(cache.kind, 0) + int(
                cache.per_token * cache.repeat * kv.cache_element_bytes(cache))
    return by_kind["ssm_state"], by_kind["conv_state"]


@pytest.mark.parametrize("dtype, ssm_bytes", [("float16", 2), ("bfloat16", 2), ("float32", 4)])
def test_config_mamba_ssm_cache_dtype_sets_the_state_bytes(tmp_path, dtype, ssm_bytes):
    c = hf_config(NANO)
    root = mutate(tmp_path, [(SNAP_NANO, "mamba_ssm_cache_dtype: float32", f"mamba_ssm_cache_dtype: {dtype}")])
    ssm, conv = _ssm_state_bytes(root, NANO)
    heads, head_dim, n = c["mamba_num_heads"], c["mamba_head_dim"], c["ssm_state_size"]
    assert ssm == 23 * heads * head_dim * n * ssm_bytes
    assert conv == 23 * (4096 + 2 * 8 * 128) * 3 * 2   # the conv state keeps the activation dtype


def test_config_without_the_field_takes_the_declared_modeling_code_default(tmp_path):
    # Nemotron-H-56B's config has no mamba_ssm_cache_dtype: the spec's config_defaults (float32,
    # NemotronHConfig's default) applies; a different declared default changes the bytes, and
    # without one the spec does not evaluate (the field is read, not guessed)
    c = hf_config(H56)
    assert "mamba_ssm_cache_dtype" not in c
    per_layer = c["mamba_num_heads"] * c["mamba_head_dim"] * c["ssm_state_size"]
    assert _ssm_state_bytes(mutate(tmp_path / "a", []), H56)[0] == 54 * per_layer * 4
    root = mutate(tmp_path / "b", [(SPEC_56B, "    value: float32\n", "    value: bfloat16\n")])
    assert _ssm_state_bytes(root, H56)[0] == 54 * per_layer * 2
    text = (tmp_path / "a" / "corpus" / SPEC_56B).read_text()
    cut = text[text.index("config_defaults:"):text.index("quant_context:")]
    root = mutate(tmp_path / "c", [(SPEC_56B, cut, "")])
    with pytest.raises(SpecError) as info:
        _ssm_state_bytes(root, H56)
    assert "mamba_ssm_cache_dtype" in info.value.one_line()


# -- bad input around the new mechanisms --------------------------------------------------------------

def _load_error(root, model_id: str) -> str:
    with pytest.raises(SpecError) as info:
        corpus = load_corpus(root)
        evaluate_spec(corpus, corpus.models[model_id])
    return info.value.one_line()


def test_a_cache_dtype_option_that_does_not_exist_is_refused_at_load(tmp_path):
    root = mutate(tmp_path, [("components/library/mamba2_mixer.yaml", "dtype: $state_dtype}", "dtype: $ssm_dtype}")])
    text = _load_error(root, NANO)
    assert "mamba2_mixer.yaml:" in text and "cache dtype '$ssm_dtype' names no option" in text, text


def test_a_config_state_dtype_that_is_no_cache_dtype_is_refused(tmp_path):
    root = mutate(tmp_path, [(SNAP_NANO, "mamba_ssm_cache_dtype: float32", "mamba_ssm_cache_dtype: int8")])
    text = _load_error(root, NANO)
    assert "mamba2_mixer.yaml:" in text and "cache 'ssm_state' gets dtype 'int8', not a cache dtype" in text, text


def test_snapshot_records_a_config_with_infinity_in_a_field_nothing_reads(tmp_path, capsys):
    """Nemotron 3 Super's published config has `time_step_limit: [0.0, Infinity]` (Python's json
    writes float('inf') so); no spec or guard reads it, so the snapshot is recorded without it."""
    from engine.cli import main
    root = mutate(tmp_path, [])
    config = root / "snapshots" / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.config.json"
    assert "Infinity" in config.read_text()
    snapshot = root / "snapshots" / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.yaml"
    before = snapshot.read_text()
    snapshot.unlink()
    assert main(["--corpus", str(root), "snapshot", SUPER, "--config", str(config)]) == 0, capsys.readouterr().err
    assert snapshot.read_text() == before and "time_step_limit" not in before


def test_a_string_option_read_from_a_numeric_config_field_is_refused(tmp_path):
    root = mutate(tmp_path, [("models/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.yaml",
                              "state_dtype: config.mamba_ssm_cache_dtype", "state_dtype: config.conv_kernel")])
    text = _load_error(root, NANO)
    assert "Nano-30B-A3B-BF16.yaml:" in text and "config.conv_kernel is 4, not a string this option can take" in text, text
