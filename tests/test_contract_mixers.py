"""The attention contract's token mixers (DSA, V4 CSA and HCA, Gated DeltaNet, KDA, Mamba2) by
hand, and the components page that compares them with GQA and MLA.

A small site is built once (one model over a one-point grid; contracts.json is always evaluated)
and everything here reads its results: the numbers per variant in ``results/contracts.json``
against hand derivations from the contract dims written out below (params per layer; KV or state
per request at 1K and 1M, BF16 KV and float32 recurrent states), and the rendered page.

External facts beyond the hand counts: transformers 5.24's layer modules built on the meta
device: ``Qwen3_5GatedDeltaNet`` and ``Mamba2Mixer`` from their configs' defaults (the dims the GDN
and Mamba2 variants use, their notes say so), ``DeepseekV4Attention`` from DeepSeek-V4-Flash's
config and ``DeepseekV32Attention`` from DeepSeek-V3.2's at the contract's hidden size and heads.
"""
from __future__ import annotations

import json
import math
import re

import pytest
import yaml

_WHY = "the transformers oracle is not installed: pip install -e '.[oracle]' (torch, transformers)"

H = 4096                                     # the contract's hidden size
BF16, F32 = 2, 4
K, M = 1024, 1 << 20
GRID = {
    "doc": "One-point grid for tests/test_contract_mixers.py.",
    "gpus": ["H100"], "gpu_counts": [1], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024], "beyond_max_context": 1, "output_lengths": [256], "batches": [1]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 1, "input": 1024, "output": 256}]},
}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    from engine.build.results import build
    from engine.spec.corpus import load_corpus
    from site_builder.render import render_site

    root = tmp_path_factory.mktemp("contract-mixers")
    (root / "grid.yaml").write_text(yaml.safe_dump(GRID, sort_keys=False))
    build(load_corpus(), root, ["Qwen3-8B"], root / "grid.yaml", jobs=1)
    render_site(root / "results", root)
    return root


@pytest.fixture(scope="module")
def contract(out):
    return json.loads((out / "results" / "contracts.json").read_text())["attention"]


@pytest.fixture(scope="module")
def variants(contract):
    return {v["id"]: v for v in contract["variants"]}


# -- by hand, from the contract dims ---------------------------------------------------------------

def _mla(heads=32, q_rank=1536, kv_rank=512, nope=128, rope=64, v=128) -> int:
    return (H * q_rank + q_rank + q_rank * heads * (nope + rope)          # q_a, its norm, q_b
            + H * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v)  # kv_a, its norm, kv_b
            + heads * v * H)                                              # o_proj


# DSA: the MLA ranks plus the indexer (64 heads of 128 from the query latent; one key of 128 per
# token with a LayerNorm, weight and bias; per-head weights from x)
DSA = _mla() + 1536 * 64 * 128 + H * 128 + 2 * 128 + H * 64
# V4 (DeepSeek-V4-Flash dims): q latent 1024 (+ norm), 64 heads of 512, one K=V head of 512 (+ norm),
# a sink per head, grouped output 8 x 1024 (wo_a: 8 groups of 4096 -> 1024; wo_b 8192 -> hidden)
V4_BASE = H * 1024 + 1024 + 1024 * 64 * 512 + H * 512 + 512 + 64 + 8 * 1024 * (64 * 512 // 8) + 8 * 1024 * H
# CSA compressor: overlapping windows (2 x 512 for wkv and wgate), position bias [4, 1024], norm;
# its indexer: 64 heads of 128 from the q latent, its own compressor (2 x 128, bias [4, 256], norm),
# per-head weights
V4_CSA = V4_BASE + 2 * H * 1024 + 4 * 1024 + 512 + 1024 * 64 * 128 + 2 * H * 256 + 4 * 256 + 128 + H * 64
# HCA compressor: one window (512), position bias [128, 512], norm; no indexer
V4_HCA = V4_BASE + 2 * H * 512 + 128 * 512 + 512
# Gated DeltaNet: 16 key heads and 32 value heads of 128, kernel 4
GDN_CONV = 2 * 16 * 128 + 32 * 128
GDN = H * GDN_CONV + H * 32 * 128 + 2 * H * 32 + GDN_CONV * 4 + 2 * 32 + 128 + 32 * 128 * H
# KDA: 32 heads of 128, kernel 4, decay and gate ranks 128
KDA = 3 * H * 4096 + 3 * 4096 * 4 + 2 * (H * 128 + 128 * 4096) + 4096 + 32 + H * 32 + 128 + 4096 * H
# Mamba2: 128 heads of 64, 8 groups, state 128, kernel 4 with bias
MAMBA_CONV = 128 * 64 + 2 * 8 * 128
MAMBA2 = H * (2 * 128 * 64 + 2 * 8 * 128 + 128) + MAMBA_CONV * 5 + 3 * 128 + 128 * 64 + 128 * 64 * H

PARAMS = {"gqa": 2 * H * 32 * 128 + 2 * H * 8 * 128, "mla": _mla(), "dsa": DSA, "v4": V4_CSA, "v4_hca": V4_HCA,
          "gdn": GDN, "kda": KDA, "mamba2": MAMBA2}


def kv_by_hand(variant: str, n: int) -> int:
    """Bytes one request holds in the layer at context n."""
    return {
        "gqa": n * 2 * 8 * 128 * BF16,
        "mla": n * (512 + 64) * BF16,
        "dsa": n * (512 + 64 + 128) * BF16,                                # + the indexer key
        "v4": min(n, 128) * 512 * BF16 + n // 4 * (512 + 128) * BF16,      # window + entries + index keys
        "v4_hca": min(n, 128) * 512 * BF16 + n // 128 * 512 * BF16,
        "gdn": 32 * 128 * 128 * F32 + GDN_CONV * 3 * BF16,
        "kda": 32 * 128 * 128 * F32 + 3 * 4096 * 3 * BF16,
        "mamba2": 128 * 64 * 128 * F32 + MAMBA_CONV * 3 * BF16,
    }[variant]


@pytest.mark.parametrize("variant", sorted(PARAMS))
def test_params_per_layer_by_hand(variants, variant):
    assert variants[variant]["params"]["value"] == PARAMS[variant]


@pytest.mark.parametrize("variant", sorted(PARAMS))
def test_kv_or_state_per_request_at_1k_and_1m_by_hand(contract, variants, variant):
    per_request = dict(zip(contract["lengths"], variants[variant]["kv_bytes_per_request"]))
    assert per_request[K] == kv_by_hand(variant, K)
    assert per_request[M] == kv_by_hand(variant, M)


def test_linear_mixers_keep_a_flat_state_that_the_caches_cross(variants):
    """GDN, KDA and Mamba2 hold the same bytes at every length (nothing grows per token); MLA's
    cache is below each of them at 1K and above it at 1M: the lines cross."""
    for name in ("gdn", "kda", "mamba2"):
        v = variants[name]
        assert v["kv_bytes_per_token"]["value"] == 0
        assert set(v["kv_bytes_per_request"]) == {v["kv_fixed_bytes"]["value"]}
        mla = variants["mla"]["kv_bytes_per_request"]
        assert mla[0] < v["kv_bytes_per_request"][0] and mla[-1] > v["kv_bytes_per_request"][-1]


@pytest.mark.parametrize("variant", ["gdn", "mamba2", "dsa", "v4", "v4_hca"])
def test_variants_equal_transformers_at_the_contract_dims(variants, variant):
    """The layer's module built on the meta device: Qwen3_5GatedDeltaNet and Mamba2Mixer from their
    configs' defaults (the contract dims, asserted); DeepseekV4Attention from DeepSeek-V4-Flash's
    config (hidden 4096) at a CSA and an HCA layer; DeepseekV32Attention from DeepSeek-V3.2's
    config with the contract's hidden size and 32 heads."""
    pytest.importorskip("torch", reason=_WHY)
    pytest.importorskip("transformers", reason=_WHY)
    import torch
    from transformers import Mamba2Config, Qwen3_5TextConfig
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

    from tests import hf_oracle
    from tests.conftest import hf_config_path

    with torch.device("meta"):
        if variant == "gdn":
            c = Qwen3_5TextConfig()
            assert (c.hidden_size, c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                    c.linear_value_head_dim, c.linear_conv_kernel_dim) == (H, 16, 32, 128, 128, 4)
            module = Qwen3_5GatedDeltaNet(c, layer_idx=0)
        elif variant == "mamba2":
            c = Mamba2Config()
            assert (c.hidden_size, c.num_heads, c.head_dim, c.n_groups, c.state_size, c.conv_kernel,
                    c.chunk_size) == (H, 128, 64, 8, 128, 4, 256)
            module = Mamba2Mixer(c, layer_idx=0)
        elif variant == "dsa":
            c = hf_oracle.load_hf_config(hf_config_path("deepseek-ai/DeepSeek-V3.2"))
            c.hidden_size, c.num_attention_heads = H, 32
            module = DeepseekV32Attention(c, layer_idx=0)
        else:
            c = hf_oracle.load_hf_config(hf_config_path("deepseek-ai/DeepSeek-V4-Flash"))
            kind = {"v4": "compressed_sparse_attention", "v4_hca": "heavily_compressed_attention"}[variant]
            assert c.hidden_size == H
            module = DeepseekV4Attention(c, layer_idx=c.layer_types.index(kind))
    assert variants[variant]["params"]["value"] == sum(p.numel() for p in module.parameters())


def test_prefill_at_4k_is_the_built_value(contract):
    assert contract["prefill_at"] == 4096
    at = contract["lengths"].index(4096)
    for v in contract["variants"]:
        assert v["prefill_at_s"] == v["prefill_s"][at] > 0


# -- the page ----------------------------------------------------------------------------------

NAMES = {"gqa": "GQA (8 KV heads)", "mla": "MLA (latent 512 + rope 64)", "dsa": "DSA (MLA + indexer, top 2048)",
         "v4": "V4 compressed sparse (CSA, 4 tokens per entry)", "gdn": "Gated DeltaNet (16 key / 32 value heads of 128)",
         "kda": "KDA (32 heads of 128)", "mamba2": "Mamba2 (128 heads of 64, state 128)"}


@pytest.fixture(scope="module")
def page(out):
    html = (out / "site" / "components" / "index.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S)[1])
    return html, data


def test_components_page_lists_the_seven_mixers_with_their_built_numbers(page, variants):
    from site_builder.render import human_bytes, seconds, si

    html, _ = page
    rows = {m[1]: m[2] for m in re.finditer(r'<tr><th scope="row">(.*?)<br>(.*?)</tr>', html, re.S)}
    for variant, name in NAMES.items():
        assert name in rows, name
        cells = re.findall(r'<span class="num"[^>]*>([^<]*)</span>', rows[name])
        v = variants[variant]
        # params, KV per token, fixed, the 7 lengths, prefill at 4K: shown as built
        assert cells == [si(v["params"]["value"]), human_bytes(v["kv_bytes_per_token"]["value"]),
                         human_bytes(v["kv_fixed_bytes"]["value"])] \
            + [human_bytes(b) for b in v["kv_bytes_per_request"]] + [seconds(v["prefill_at_s"])]
    assert '<th scope="col">KV + state per request @1M</th>' in html and '<th scope="col">prefill 4K</th>' in html
    # a component only the contract uses has no page of its own: no dead link
    assert '<a href="kda_attention/">' not in html and ">kda_attention<" in html


def test_kv_chart_has_every_variant_from_1k_to_1m_on_log_scales(page, contract):
    _, data = page
    spec = data["specs"]["attention"]["kv"]
    assert spec["encoding"]["x"]["scale"]["type"] == "log" and spec["encoding"]["y"]["scale"]["type"] == "log"
    series: dict[str, list] = {}
    for row in spec["data"]["values"]:
        series.setdefault(row["variant"], []).append((row["context"], row["kv_bytes"]))
    assert set(NAMES.values()) <= set(series)
    for v in contract["variants"]:
        assert series[v["name"]] == list(zip([1024, 4096, 16384, 65536, 131072, 262144, 1048576],
                                             v["kv_bytes_per_request"]))
    assert math.isclose(dict(series[NAMES["kda"]])[M], kv_by_hand("kda", M))
