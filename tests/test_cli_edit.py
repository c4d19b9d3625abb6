"""``archledger edit``: a swap from the command line, old -> new, the same numbers as the saved variant.

External facts: DeepSeek-V3 with DSA is DeepSeek-V3.2 (main-stack parameters from the transformers
modeling code, tests/test_streams.py); the indexer key adds index_head_dim values per token and
layer (V3.2's config), the only cache DSA adds to MLA.
"""
from __future__ import annotations

import json

import yaml

from engine.cli import main
from tests.conftest import hf_config
from tests.test_streams import HF_PARAMS, V32

DSA = ["edit", "DeepSeek-V3", "--swap", "layers[dense,moe].attention=dsa_attention",
       "--bind", "index_n_heads=64", "--bind", "index_head_dim=128", "--bind", "index_topk=2048",
       "--gpu", "H200", "--config", "tp8-ep8", "--context", "16384"]


def _json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_edit_v3_dsa_is_v32(capsys, tmp_path):
    saved = tmp_path / "v3-dsa.yaml"
    out = _json(capsys, DSA + ["--save", str(saved), "--name", "v3-dsa"])
    assert out["label"] == "what-if" and out["variant_of"] == "deepseek-ai/DeepSeek-V3"
    new, old = out["model"]["new"], out["model"]["old"]
    assert new["params"] == HF_PARAMS[V32]
    c = hf_config(V32)
    # the indexer key: 128 FP8 values + one f32 scale per 128 (132 B), whatever the KV dtype
    key = c["index_head_dim"] + c["index_head_dim"] // 128 * 4
    assert new["kv_bytes_per_token"] - old["kv_bytes_per_token"] == c["num_hidden_layers"] * key == 61 * 132
    assert new["kv_bytes_per_request"] - old["kv_bytes_per_request"] == 16384 * c["num_hidden_layers"] * key
    groups = {g["group"]: g for g in out["groups"]}
    assert set(groups) == {"layers[dense]", "layers[moe]"}
    assert sum(g["new"]["params"] for g in groups.values()) < new["params"]      # embedding/head outside
    for key in ("prefill_flops", "decode_bytes", "prefill_sol_s", "decode_sol_s"):
        assert new[key] > 0 and old[key] > 0
    # the saved YAML is a corpus variant: the file gives the same numbers
    data = yaml.safe_load(saved.read_text())
    assert data["bind"]["n_index_heads"]["value"] == 64 and data["swaps"][0]["templates"] == ["dense", "moe"]
    again = _json(capsys, ["edit", str(saved), "--gpu", "H200", "--config", "tp8-ep8", "--context", "16384"])
    assert again["model"] == out["model"] and again["groups"] == out["groups"]


def test_edit_text_and_shipped_variant(capsys):
    assert main(["edit", "--variant", "Qwen3-32B-GDN", "--config", "tp2"]) == 0
    text = capsys.readouterr().out
    assert "what-if/Qwen3-32B-GDN  [what-if: not a published model]" in text
    assert "layers[block]  (64 -> 16 layers)" in text and "layers[block_gated_deltanet]  (0 -> 48 layers)" in text
    assert "KV per token" in text and "-75.0%" in text          # 16 of 64 layers keep a growing KV cache


def test_edit_missing_binding_names_dims(capsys):
    assert main(DSA[:4] + ["--bind", "index_topk=2048"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unbound dims" in err
    assert "--bind d_index_head=N --bind n_index_heads=N" in err


def test_edit_incompatible_swap_says_why(capsys):
    assert main(["edit", "Qwen3-32B", "--swap", "layers[block].attention=swiglu_mlp"]) == 2
    err = capsys.readouterr().err
    assert "swiglu_mlp does not fit slot 'attention': it is a ffn component" in err and err.count("\n") == 1
    assert main(["edit", "Qwen3-32B", "--swap", "layers[moe].attention=mla_attention"]) == 2
    assert "has no layer template 'moe'" in capsys.readouterr().err
    assert main(["edit", "Qwen3-32B", "--swap", "attention"]) == 2
    assert "is not a swap" in capsys.readouterr().err


def test_a_variant_deploys_with_the_same_planner(capsys):
    """`deploy` takes what-if/<name>: 16 GQA layers of KV per token instead of 64 (8 KV heads of 128, BF16)."""
    args = ["deploy", "what-if/Qwen3-32B-GDN", "--gpu", "H100", "--tp", "2", "--input", "8191", "--output", "1", "--json"]
    assert main(args) == 0
    s = json.loads(capsys.readouterr().out)["deployment"]
    c = hf_config("Qwen/Qwen3-32B")
    assert s["model_id"] == "what-if/Qwen3-32B-GDN"
    assert s["kv_growing_bytes_per_request"] == 8192 * 16 * 2 * c["num_key_value_heads"] * c["head_dim"] * 2
    # recurrent states by hand (the variant's bind: Qwen3.5-27B's GDN dims): 48 GDN layers, each a
    # float32 [128, 128] state per value head (48) and the convolution's last 3 inputs of its
    # 2 x 16 x 128 + 48 x 128 = 10,240 channels in BF16
    gdn = 48 * (48 * 128 * 128 * 4 + (2 * 16 * 128 + 48 * 128) * 3 * 2)
    assert s["kv_state_bytes_per_request"] == gdn == 153_944_064 and s["fits"]
