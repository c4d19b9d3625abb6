"""Specs of architectures transformers lacks: declared ``unverified:``, listed, never published.

``archledger new`` on a config whose model_type and architectures the installed transformers does
not know writes the spec with ``unverified: <why>`` (and lists, as to-dos, the fields the base
spec does not read whose values changed: nothing else will catch them); ``validate`` reports the
declaration instead of failing; ``build --strict`` lists the model with its reason in
manifest.json instead of failing, publishes none of its rows, and the gallery names it with the
reason. MiMo-7B is the corpus' case: its counts are checked against a hand count from the
published config and the checkpoint's own modeling_mimo.py (remote code).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from site_builder import cli
from tests.conftest import REPO

TINY_GRID = REPO / "tests" / "data" / "grid_tiny.yaml"
MIMO = "XiaomiMiMo/MiMo-7B-Base"

# a small config in MiMo's published layout (Qwen2 fields + num_nextn_predict_layers)
TINY_MIMO = {"architectures": ["MiMoForCausalLM"], "model_type": "mimo", "num_hidden_layers": 2,
             "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
             "rope_theta": 10000, "rms_norm_eps": 1e-05, "hidden_act": "silu", "attention_bias": True,
             "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _copy(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus)
    return corpus


def test_new_declares_a_spec_transformers_cannot_build_unverified(capsys, tmp_path):
    pytest.importorskip("transformers")
    corpus = _copy(tmp_path)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_MIMO))
    code = cli.main(["--corpus", str(corpus), "new", "acme/Tiny-MiMo", "--config", str(config),
                     "--like", "Qwen/Qwen3-8B"])
    out = capsys.readouterr().out
    assert code == 1, out
    spec = (corpus / "models" / "acme--Tiny-MiMo.yaml").read_text()
    declared = [line for line in spec.splitlines() if line.startswith("unverified:")]
    assert len(declared) == 1 and "knows neither model_type 'mimo'" in declared[0], spec
    # Qwen3-8B's spec has no bias: the changed field nothing reads is a to-do, not silence
    assert "config.attention_bias = true (Qwen/Qwen3-8B's: false)" in out
    assert "rms_norm_eps" not in out          # a norm epsilon shapes nothing
    # validate: the declaration is reported, it is not a failure
    code = cli.main(["--corpus", str(corpus), "validate", "acme/Tiny-MiMo"])
    out = capsys.readouterr().out
    assert code == 0 and "1 declared unverified" in out and "0 with errors" in out, out
    code = cli.main(["--corpus", str(corpus), "validate", "acme/Tiny-MiMo", "--json"])
    [report] = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verified"] is False and report["unverified"] == declared[0].split(": ", 1)[1].strip('"')


def test_strict_build_lists_a_declared_spec_with_its_reason_and_publishes_none_of_it(tmp_path):
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder.render import render_staged
    corpus = load_corpus(REPO / "corpus")
    why = corpus.models[MIMO].unverified
    assert why.startswith("transformers 5.25.0 has no mimo model")
    out = tmp_path / "out"
    report = build(corpus, out, models=[MIMO, "Qwen/Qwen3-0.6B"], grid_path=TINY_GRID, jobs=1, strict=True,
                   site=render_staged)
    manifest = json.loads((out / "results" / "manifest.json").read_text())
    assert manifest["unverified"][MIMO] == why and MIMO not in manifest["skipped"]
    assert MIMO not in manifest["models"] and "Qwen/Qwen3-0.6B" in manifest["models"]
    models = pl.read_parquet(out / "results" / "models.parquet")
    assert MIMO not in set(models["model_id"])
    assert report.unverified[MIMO] == why
    gallery = (out / "site" / "index.html").read_text()
    assert "Not in the gallery" in gallery and MIMO in gallery
    assert not (out / "site" / "models" / "XiaomiMiMo--MiMo-7B-Base").exists()


def test_mimo_counts_equal_a_hand_count_of_its_modeling_code(capsys):
    """modeling_mimo.py: Qwen2 layers (q/k/v biases, o_proj none, two RMSNorms, SwiGLU MLP), an
    untied head; MiMoMTPLayers adds token_layernorm, hidden_layernorm, input_proj [2h -> h], one
    Qwen2 layer and final_layernorm. Config: h 4096, 36 layers, 32 heads, 8 KV heads, head 128,
    MLP 11008, vocab 151680, one MTP layer. The model card's 7.83B is main + MTP."""
    h, heads, kv, d, ff, vocab, layers = 4096, 32, 8, 128, 11008, 151680, 36
    attn = h * heads * d + heads * d + 2 * (h * kv * d + kv * d) + heads * d * h
    layer = attn + 3 * h * ff + 2 * h
    main = layers * layer + 2 * vocab * h + h
    mtp = layer + 3 * h + 2 * h * h
    assert cli.main(["show", MIMO, "--json"]) == 0      # show evaluates a declared spec
    data = json.loads(capsys.readouterr().out)
    assert data["unverified"].startswith("transformers 5.25.0 has no mimo model")
    assert data["params_total"]["value"] == main == 7_622_619_136
    assert data["params_mtp"]["value"] == mtp == 210_790_400
    assert round((main + mtp) / 1e9, 2) == 7.83


def test_nemotron_super_49b_counts_equal_a_hand_count_of_its_block_configs(capsys):
    """modeling_decilm.py (remote code): a layer whose attention is no_op keeps only its MLP and
    post_attention_layernorm; otherwise Llama attention with n_heads // n_heads_in_group KV heads
    and input_layernorm; each MLP int(2 x ffn_mult x hidden / 3) rounded up to a multiple of 256
    (_ffn_mult_to_intermediate_size). Counted here layer by layer from the published config."""
    from tests.conftest import SNAPSHOTS
    c = json.loads((SNAPSHOTS / "nvidia--Llama-3_3-Nemotron-Super-49B-v1.config.json").read_text())
    h, heads, vocab = c["hidden_size"], c["num_attention_heads"], c["vocab_size"]
    d = h // heads
    total, kv_bytes = 2 * vocab * h + h, 0
    for block in c["block_configs"]:
        ff = int(2 * block["ffn"]["ffn_mult"] * h / 3)
        ff = ff if ff % 256 == 0 else ff + 256 - ff % 256
        total += 3 * h * ff + h
        if not block["attention"]["no_op"]:
            kv_heads = heads // block["attention"]["n_heads_in_group"]
            total += 2 * h * heads * d + 2 * h * kv_heads * d + h
            kv_bytes += 2 * kv_heads * d * 2          # K and V, BF16
    assert cli.main(["show", "nvidia/Llama-3_3-Nemotron-Super-49B-v1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["params_total"]["value"] == total and round(total / 1e9, 1) == 49.9   # the model card's 49.9B
    assert data["kv_bytes_per_token[kv]"]["value"] == kv_bytes == 49 * 8 * 128 * 2 * 2


def test_declared_specs_stay_out_of_the_playground_and_the_oracle_rerecord(corpus):
    """The playground offers and cites only published models; `snapshot --all --meta` has no
    modeling code to re-record for a declared spec and keeps its evidence as it is."""
    from engine.playground import catalog
    from engine.verify.rerecord import modeling_code_models
    declared = {m for m, spec in corpus.models.items() if spec.unverified}
    assert MIMO in declared
    assert not declared & set(catalog.catalog(corpus))
    cited = {e["model"] for dims in catalog.component_dims(corpus).values() for uses in dims.values() for e in uses}
    assert cited and not declared & cited
    chosen, kept = modeling_code_models(corpus)
    assert declared <= set(kept) and not declared & {m.model_id for m, _ in chosen}


K3 = "moonshotai/Kimi-K3"


def test_kimi_k3_counts_equal_a_hand_count_of_its_published_config(capsys):
    """Kimi K3's text stack, counted from its config.json (text_config) without the engine:
    h 7168, vocab 163840 (untied head), 93 layers: KDA on the 69 of linear_attn_config.kda_layers
    (96 heads of 128: q/k/v, three depthwise convolutions of 4, f_a [h -> 128], f_b [128 -> 12288],
    dt_bias, A_log per head, b_proj [h -> 96], the full-rank g_proj [h -> 12288], o_norm of 128,
    o_proj), MLA on the 24 others (q_a 1536 + its norm, q_b [1536 -> 96 x 192], kv_a [h -> 512 + 64]
    + its norm of 512, kv_b [512 -> 96 x 256], the output gate g_proj [h -> 96 x 128], o_proj), two
    RMSNorms per layer; layer 0 a dense SwiGLU of 33792, the 92 others a router [h -> 896], the latent
    projections [h -> 3584] and [3584 -> h] with a norm of 3584 between, 896 SwiGLU experts of 3072 at
    width 3584 and shared experts 2 x 3072 wide at width h. The routing correction bias (896 per
    layer) is a buffer, not a parameter (it is in the checkpoint bytes, F32). External checks: public
    K3 reimplementations read each routed expert of the release as 33,030,144 parameters in exactly
    17,547,264 bytes of MXFP4, and call the model 2.8T parameters, ~1.56 TB."""
    h, vocab, w = 7168, 163840, 96 * 128
    kda = 3 * h * w + 3 * w * 4 + h * 128 + 128 * w + w + 96 + h * 96 + h * w + 128 + w * h
    mla = h * 1536 + 1536 + 1536 * 96 * 192 + h * 576 + 512 + 512 * 96 * 256 + h * 96 * 128 + 96 * 128 * h
    expert = 3 * 3584 * 3072
    moe = h * 896 + h * 3584 + 3584 + 3584 * h + 3 * h * 6144
    total = 2 * vocab * h + h + 69 * (kda + 2 * h) + 24 * (mla + 2 * h) + 3 * h * 33792 + 92 * (moe + 896 * expert)
    active = total - 92 * (896 - 16) * expert
    assert cli.main(["show", K3, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["unverified"].startswith("transformers 5.25.0 has no kimi_k3 model")
    assert data["params_total"]["value"] == total == 2_779_481_712_736 and round(total / 1e12, 1) == 2.8
    assert data["params_active"]["value"] == active
    assert expert == 33_030_144
    assert data["checkpoint_bytes_by_dtype[U8]"]["value"] == 92 * 896 * 17_547_264
    assert data["checkpoint_bytes_by_dtype[F32]"]["value"] == 92 * 896 * 4
    assert round(data["checkpoint_bytes"]["value"] / 1e12, 2) == 1.56
    # the cache: 512 latent + 64 rope key per MLA layer and token (BF16); per KDA layer a [128, 128]
    # F32 state per head and three convolutions' last 3 columns (BF16)
    assert data["kv_bytes_per_token_growing"]["value"] == 24 * (512 + 64) * 2
    assert data["kv_fixed_bytes"]["value"] == 69 * (96 * 128 * 128 * 4 + 3 * w * 3 * 2)


def test_kimi_k3_reason_names_what_transformers_kimi_linear_lacks():
    """The declaration's claims, checked against the installed transformers: no kimi_k3 model; its
    kimi_linear code (config and modeling) mentions none of the config fields K3 adds, and ACT2FN
    has no "situ" (KimiLinearDecoderLayer looks it up: KeyError)."""
    pytest.importorskip("transformers")
    import inspect
    import transformers
    from transformers.activations import ACT2FN
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.kimi_linear import configuration_kimi_linear, modeling_kimi_linear
    from engine.language.corpus import load_corpus
    why = load_corpus(REPO / "corpus").models[K3].unverified
    assert why.startswith(f"transformers {transformers.__version__} has no kimi_k3 model")
    assert "kimi_k3" not in CONFIG_MAPPING_NAMES and "kimi_linear" in CONFIG_MAPPING_NAMES
    assert "situ" not in ACT2FN and "KeyError 'situ'" in why
    published = json.loads((REPO / "corpus" / "snapshots" / "moonshotai--Kimi-K3.config.json").read_text())["text_config"]
    code = inspect.getsource(configuration_kimi_linear) + inspect.getsource(modeling_kimi_linear)
    added = ["attn_res_block_size", "mla_use_output_gate", "routed_expert_hidden_size", "latent_moe_use_norm"]
    for field in added:
        assert field in published and field not in code and field in why, field
    assert "use_full_rank_gate" in published["linear_attn_config"] and "use_full_rank_gate" not in code


def test_list_shows_each_declared_spec_with_its_reason(capsys, corpus):
    assert cli.main(["list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    for model_id, spec in corpus.models.items():
        assert rows[model_id].endswith(f"(unverified: {spec.unverified})") == bool(spec.unverified), model_id
    assert "(unverified: transformers 5.25.0 has no kimi_k3 model" in rows[K3]
