"""The attention contract at hidden 7168 (issue 18, item 4): every token mixer of the library bound as
in its source model, by hand, and the components page that compares them.

A small site is built once (one model over a one-point grid; contracts.json is always evaluated)
and everything here reads its results: the numbers per variant in ``results/contracts.json``
against hand derivations from the source models' dims written out below (params per layer; KV or
state per request at 1K and 1M, BF16 KV and float32 recurrent states; the decode step's bytes
growing by the cache read per token of context), the crossing points solved by hand, and the
rendered page (HTML and, in Chromium, the crossing diamonds on the KV chart with their tooltips).

External facts beyond the hand counts: transformers 5.24's layer modules built on the meta device
at hidden 7168 with the source models' configs (published config.json snapshots, or the config
class with the source's dims): LlamaAttention (GQA, MHA, sliding), GPTBigCodeAttention (MQA),
Qwen3_5MoeAttention and Qwen3_5MoeGatedDeltaNet (Qwen3.5-397B-A17B), Gemma4TextAttention (a
global layer of gemma-4-26B-A4B), DeepseekV3Attention, DeepseekV32Attention, DeepseekV4Attention
(DeepSeek-V4-Pro's CSA and HCA layers), KimiLinearDeltaAttention (Kimi K3's KDA dims) and
NemotronHMamba2Mixer (Nemotron-H-56B).
"""
from __future__ import annotations

import json
import math
import re
from fractions import Fraction

import pytest
import yaml

from tests.site_helpers import served
from tests.test_site_browser import _open
from tests.browser_waits import PAGE_WAIT_MS

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its built site twice.
pytestmark = pytest.mark.xdist_group("contract_7168")

_WHY = "the transformers oracle is not installed: pip install -e '.[oracle]' (torch, transformers)"

H = 7168                                     # the contract's hidden size (DeepSeek-V3's)
BF16, F32 = 2, 4
K, M = 1024, 1 << 20
LENGTHS = [1024, 4096, 16384, 65536, 131072, 262144, 1048576]
GRID = {
    "doc": "One-point grid for tests/test_contract_7168.py.",
    "gpus": ["H100"], "gpu_counts": [1], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024], "beyond_max_context": 1, "output_lengths": [256], "batches": [1]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 1, "input": 1024, "output": 256}]},
}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder.render import render_site

    root = tmp_path_factory.mktemp("contract-7168")
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


# -- by hand, from the source models' dims at hidden 7168 --------------------------------------------

# GQA family: query heads of 128 as many as fit the hidden (Llama 2/3, Mistral, StarCoder tie them
# to their hidden): 7168 / 128 = 56; KV heads: MHA 56, GQA and sliding 8 (Llama 3.1, Mistral 7B),
# MQA 1 (StarCoder, with biases on every projection); q, k, v, o, no norms
Q = 56 * 128


def _gqa(kv_heads: int, biases: bool = False) -> int:
    return 2 * H * Q + 2 * H * kv_heads * 128 + ((Q + 2 * kv_heads * 128 + H) if biases else 0)


# Qwen3.5-397B-A17B's full attention: 32 query heads (q_proj doubled for the gate) and 2 KV heads of
# 256, per-head q/k RMSNorm
GATED = H * 2 * 32 * 256 + 2 * H * 2 * 256 + 32 * 256 * H + 2 * 256
# gemma-4-26B-A4B's global layers: 16 query heads, 2 KV heads of 512, no v_proj (K = V), q/k norms
GQA_KV = H * 16 * 512 + H * 2 * 512 + 16 * 512 * H + 2 * 512


def _mla(heads=128, q_rank=1536, kv_rank=512, nope=128, rope=64, v=128) -> int:
    """DeepSeek-V3's MLA."""
    return (H * q_rank + q_rank + q_rank * heads * (nope + rope)          # q_a, its norm, q_b
            + H * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v)  # kv_a, its norm, kv_b
            + heads * v * H)                                              # o_proj


# DeepSeek-V3.2's DSA: MLA plus the indexer (64 heads of 128 from the query latent; one key of 128
# per token with a LayerNorm, weight and bias; per-head weights from x)
DSA = _mla() + 1536 * 64 * 128 + H * 128 + 2 * 128 + H * 64
# DeepSeek-V4-Pro: q latent 1536 (+ norm), 128 heads of 512, one K=V head of 512 (+ norm), a sink per
# head, grouped output 16 groups x 1024 (wo_a: 16 groups of 128 x 512 / 16 -> 1024; wo_b 16384 -> hidden)
V4_BASE = (H * 1536 + 1536 + 1536 * 128 * 512 + H * 512 + 512 + 128
           + 16 * 1024 * (128 * 512 // 16) + 16 * 1024 * H)
# CSA compressor: overlapping windows (2 x 512 for wkv and wgate), position bias [4, 1024], norm;
# its indexer: 64 heads of 128 from the q latent, its own compressor (2 x 128, bias [4, 256], norm),
# per-head weights
V4_CSA = V4_BASE + 2 * H * 1024 + 4 * 1024 + 512 + 1536 * 64 * 128 + 2 * H * 256 + 4 * 256 + 128 + H * 64
# HCA compressor: one window (512), position bias [128, 512], norm; no indexer
V4_HCA = V4_BASE + 2 * H * 512 + 128 * 512 + 512
# Qwen3.5-397B-A17B's Gated DeltaNet: 16 key heads and 64 value heads of 128, kernel 4: qkv, z, b, a,
# the convolution, dt_bias and A_log, the gated norm, out
GDN_CONV = 2 * 16 * 128 + 64 * 128
GDN = H * GDN_CONV + H * 64 * 128 + 2 * H * 64 + GDN_CONV * 4 + 2 * 64 + 128 + 64 * 128 * H
# Kimi K3's KDA: 96 heads of 128 (width 12288), kernel 4, decay and gate ranks 128: q/k/v, their
# convolutions, f_a/f_b and g_a/g_b, dt_bias, A_log, b_proj, o_norm, o_proj
KDA_W = 96 * 128
KDA = (3 * H * KDA_W + 3 * KDA_W * 4 + 2 * (H * 128 + 128 * KDA_W) + KDA_W + 96 + H * 96 + 128
       + KDA_W * H)
# Nemotron-H-56B's Mamba2 at hidden 7168: 224 heads of 64 (expand 2), 8 groups, state 256, kernel 4
# with bias: in_proj (z, xBC, dt), the convolution, dt_bias / A_log / D, the norm, out_proj
MAMBA_CONV = 224 * 64 + 2 * 8 * 256
MAMBA2 = H * (2 * 224 * 64 + 2 * 8 * 256 + 224) + MAMBA_CONV * 5 + 3 * 224 + 224 * 64 + 224 * 64 * H

PARAMS = {"mha": _gqa(56), "gqa": _gqa(8), "mqa": _gqa(1, biases=True), "sliding": _gqa(8), "gated": GATED,
          "gqa_kv": GQA_KV, "mla": _mla(), "dsa": DSA, "v4": V4_CSA, "v4_hca": V4_HCA, "gdn": GDN, "kda": KDA,
          "mamba2": MAMBA2}

# an indexer key: 128 FP8 values + one f32 scale per 128 (vLLM's indexer cache), whatever the KV dtype
INDEX_KEY = 128 + 128 // 128 * F32
# the compressors' F32 kv_state + score_state per request: CSA 2 x (2 x 4) x (2 x 512) and its
# indexer's 2 x (2 x 4) x (2 x 128); HCA 2 x 128 x 512 (DeepSeek-V4 inference/model.py Compressor)
CSA_STATE = 2 * 8 * 1024 * F32 + 2 * 8 * 256 * F32
HCA_STATE = 2 * 128 * 512 * F32
# bytes every token of context adds (BF16 K and V, or the latent and rotary key)
PER_TOKEN = {"mha": 2 * 56 * 128 * BF16, "gqa": 2 * 8 * 128 * BF16, "mqa": 2 * 1 * 128 * BF16,
             "gated": 2 * 2 * 256 * BF16, "gqa_kv": 2 * 2 * 512 * BF16, "mla": (512 + 64) * BF16,
             "dsa": (512 + 64) * BF16 + INDEX_KEY}                         # + the indexer key
GDN_STATE = 64 * 128 * 128 * F32 + GDN_CONV * 3 * BF16
KDA_STATE = 96 * 128 * 128 * F32 + 3 * KDA_W * 3 * BF16
MAMBA2_STATE = 224 * 64 * 256 * F32 + MAMBA_CONV * 3 * BF16


def kv_by_hand(variant: str, n: int) -> int:
    """Bytes one request holds in the layer at context n (whole tokens)."""
    if variant in PER_TOKEN:
        return n * PER_TOKEN[variant]
    return {
        "sliding": min(n, 4096) * 2 * 8 * 128 * BF16,
        "v4": min(n, 128) * 512 * BF16 + n // 4 * (512 * BF16 + INDEX_KEY) + CSA_STATE,   # window + entries
        "v4_hca": min(n, 128) * 512 * BF16 + n // 128 * 512 * BF16 + HCA_STATE,           # + index keys + state
        "gdn": GDN_STATE, "kda": KDA_STATE, "mamba2": MAMBA2_STATE,
    }[variant]


def test_the_contract_is_at_hidden_7168(contract):
    from engine.language.corpus import load_corpus

    corpus = load_corpus()
    text = (corpus.root / "contracts" / "attention" / "contract.yaml").read_text()
    assert "hidden 7168" in yaml.safe_load(text)["doc"]
    for name in PARAMS:
        spec = yaml.safe_load((corpus.root / "contracts" / "attention" / f"{name}.yaml").read_text())
        assert spec["dims"]["hidden"] == H, name
        assert "Source" in spec["notes"], name                   # each names its source model
    assert contract["lengths"] == LENGTHS and contract["decode_at"] == [4096, M]


@pytest.mark.parametrize("variant", sorted(PARAMS))
def test_params_per_layer_by_hand(variants, variant):
    assert variants[variant]["params"]["value"] == PARAMS[variant]


def test_kv_bytes_per_token_of_gqa_and_mla_by_hand(variants):
    # GQA: 8 KV heads x 128, K and V, BF16 = 4096 B; MLA: latent 512 + rotary key 64, BF16 = 1152 B
    assert variants["gqa"]["kv_bytes_per_token"]["value"] == 2 * 8 * 128 * 2 == 4096
    assert variants["mla"]["kv_bytes_per_token"]["value"] == (512 + 64) * 2 == 1152
    assert variants["sliding"]["kv_fixed_bytes"]["value"] == 4096 * 4096
    assert variants["v4"]["kv_bytes_per_token"]["value"] == (512 * 2 + 132) / 4 == 289
    assert INDEX_KEY == 132 and CSA_STATE == 81_920 and HCA_STATE == 524_288 == 2**19   # HCA: 0.5 MiB


@pytest.mark.parametrize("variant", sorted(PARAMS))
def test_kv_or_state_per_request_at_every_length_by_hand(contract, variants, variant):
    assert variants[variant]["kv_bytes_per_request"] == [kv_by_hand(variant, n) for n in LENGTHS]


# -- crossing points, by hand ------------------------------------------------------------------------

def _crossing(contract, a, b):
    found = [c for c in contract["crossings"] if {c["a"], c["b"]} == {a, b}]
    assert len(found) == 1, (a, b, found)
    return found[0]


def test_sliding_window_crosses_full_attention_where_the_window_is_paid_back(contract):
    """Sliding GQA holds 4096 tokens x 4096 B = 16 MiB past its window; MLA adds 1152 B a token, so it
    reaches 16 MiB at 4096 x 4096 / 1152 = 131072 / 9 tokens; MQA (512 B a token) at 32768."""
    c = _crossing(contract, "sliding", "mla")
    assert Fraction(c["length_exact"]) == Fraction(4096 * 4096, 1152) == Fraction(131072, 9)
    assert c["bytes"] == 4096 * 4096 and c["kind"] == "equal" and c["above_after"] == "mla"
    assert math.isclose(c["length"], 14563.555555555556)
    c = _crossing(contract, "sliding", "mqa")
    assert Fraction(c["length_exact"]) == 4096 * 4096 // 512 == 32768 and c["above_after"] == "mqa"


def test_mla_crosses_the_linear_mixers_fixed_states(contract):
    """Gated DeltaNet holds 64 x 128 x 128 float32 + 12288 x 3 BF16 = 4,268,032 B whatever the context;
    MLA passes it at 4268032 / 1152 = 33344 / 9 tokens; Mamba2 (224 x 64 x 256 float32 + 18432 x 3
    BF16 = 14,790,656 B) at 14790656 / 1152 = 115552 / 9."""
    assert GDN_STATE == 4_268_032 and MAMBA2_STATE == 14_790_656
    c = _crossing(contract, "mla", "gdn")
    assert Fraction(c["length_exact"]) == Fraction(GDN_STATE, 1152) == Fraction(33344, 9)
    assert c["bytes"] == c["bytes_a"] == c["bytes_b"] == GDN_STATE and c["above_after"] == "mla"
    c = _crossing(contract, "mla", "mamba2")
    assert Fraction(c["length_exact"]) == Fraction(MAMBA2_STATE, 1152) == Fraction(115552, 9)
    # GQA passes GDN's state on a whole token: 4268032 / 4096 = 1042
    assert Fraction(_crossing(contract, "gqa", "gdn")["length_exact"]) == 1042


def test_compressed_caches_cross_in_whole_entries(contract):
    """V4 CSA holds its 128-token window (128 x 512 x 2 B), its compressors' F32 state (81,920 B) and
    per 4 tokens one 512-wide BF16 entry plus one 132 B FP8 index key (1156 B): it passes sliding
    GQA's 16 MiB when floor(L / 4) x 1156 + 131072 + 81920 > 16777216, i.e. at the 14329th entry,
    L = 57316 (a step: the entry jumps past). HCA (one 512-wide entry per 128 tokens, plus its
    0.5 MiB state) meets Gated DeltaNet's state exactly at (4268032 - 131072 - 524288) / 1024 =
    3528 entries: L = 451584."""
    c = _crossing(contract, "sliding", "v4")
    entries = (16777216 - 131072 - CSA_STATE) // 1156 + 1
    assert entries == 14329 and c["length_exact"] == str(4 * entries) == "57316" and c["kind"] == "step"
    assert c["bytes"] == 16777216 and c["bytes_b" if c["b"] == "v4" else "bytes_a"] == \
        131072 + CSA_STATE + 14329 * 1156
    c = _crossing(contract, "v4_hca", "gdn")
    assert (GDN_STATE - 131072 - HCA_STATE) % 1024 == 0 and (GDN_STATE - 131072 - HCA_STATE) // 1024 == 3528
    assert c["length_exact"] == str(3528 * 128) == "451584" and c["bytes"] == GDN_STATE


def test_every_pair_whose_order_flips_between_1k_and_1m_has_a_crossing(contract):
    """Completeness against the hand curves: a pair whose order at 1K differs from its order at 1M
    crosses an odd number of times, a pair in the same order an even number (here none); identical
    caches (GQA and K = V GQA) and curves that only touch (GQA and its sliding twin up to 4096) never
    cross. Every crossing lies between 1K and 1M, and the hand curves flip there."""
    names = list(PARAMS)
    listed: dict[frozenset, list] = {}
    for c in contract["crossings"]:
        listed.setdefault(frozenset((c["a"], c["b"])), []).append(c)
        assert 1024 < c["length"] <= M
        n = math.floor(c["length"])
        before, after = kv_by_hand(c["a"], n - 1) - kv_by_hand(c["b"], n - 1), \
            kv_by_hand(c["a"], n + 128) - kv_by_hand(c["b"], n + 128)   # past a compressed step's tie
        assert before * after < 0 or (c["kind"] == "equal" and before * after <= 0), c
        assert (after > 0) == (c["above_after"] == c["a"]), c
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            lo, hi = kv_by_hand(a, K) - kv_by_hand(b, K), kv_by_hand(a, M) - kv_by_hand(b, M)
            count = len(listed.get(frozenset((a, b)), []))
            assert count == (1 if lo * hi < 0 else 0), (a, b, count)
    assert frozenset(("gqa", "gqa_kv")) not in listed and frozenset(("gqa", "sliding")) not in listed
    # 33: HCA's 0.5 MiB state puts it above MQA (512 B a token) and CSA at 1K, below both at 1M
    assert len(contract["crossings"]) == 33
    assert ("mqa", "v4_hca") in {(c["a"], c["b"]) for c in contract["crossings"]} | \
        {(c["b"], c["a"]) for c in contract["crossings"]}


# -- decode bytes per token ---------------------------------------------------------------------------

def test_decode_bytes_grow_by_the_cache_read_per_token_of_context(variants):
    """One decode step at batch 1 reads the weights (2 B a parameter) and the request's cache: from
    64K to 1M tokens of context the step's bytes grow by exactly (1M - 64K) x the bytes a token adds
    (GQA 4096, MLA 1152, MHA 28672, MQA 512); the linear mixers read the same state at every length
    and sliding GQA stops growing at its window."""
    grow = M - 65536
    for name in ("gqa", "mla", "mha", "mqa", "gated"):
        d = variants[name]["decode_bytes"]
        assert d[-1] - d[LENGTHS.index(65536)] == grow * PER_TOKEN[name], name
    for name in ("gdn", "kda", "mamba2"):
        assert len(set(variants[name]["decode_bytes"])) == 1, name
    sliding = variants["sliding"]["decode_bytes"]
    assert len(set(sliding[1:])) == 1 and sliding[0] < sliding[1]       # one token past 4096 is capped
    for name, v in variants.items():
        assert min(v["decode_bytes"]) > 2 * PARAMS[name], name
        assert v["decode_bytes_at"] == [v["decode_bytes"][LENGTHS.index(4096)], v["decode_bytes"][-1]]


def test_prefill_at_4k_is_the_built_value(contract):
    assert contract["prefill_at"] == 4096
    at = contract["lengths"].index(4096)
    for v in contract["variants"]:
        assert v["prefill_at_s"] == v["prefill_s"][at] > 0


# -- transformers at hidden 7168 ---------------------------------------------------------------------

def _hf_module(variant: str):
    import torch
    from transformers import GPTBigCodeConfig, KimiLinearConfig, LlamaConfig
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention
    from transformers.models.gpt_bigcode.modeling_gpt_bigcode import GPTBigCodeAttention
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeAttention, Qwen3_5MoeGatedDeltaNet

    from tests import hf_oracle
    from tests.conftest import hf_config_path

    def published(model_id):
        return hf_oracle.load_hf_config(hf_config_path(model_id))

    with torch.device("meta"):
        if variant in ("mha", "gqa", "sliding"):
            kv_heads = {"mha": 56, "gqa": 8, "sliding": 8}[variant]
            return LlamaAttention(LlamaConfig(hidden_size=H, num_attention_heads=56, num_key_value_heads=kv_heads,
                                              head_dim=128), layer_idx=0)
        if variant == "mqa":
            return GPTBigCodeAttention(GPTBigCodeConfig(n_embd=H, n_head=56, multi_query=True), layer_idx=0)
        if variant in ("gated", "gdn"):
            c = published("Qwen/Qwen3.5-397B-A17B").text_config
            assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.linear_num_key_heads,
                    c.linear_num_value_heads, c.linear_conv_kernel_dim) == (32, 2, 256, 16, 64, 4)
            c.hidden_size = H
            if variant == "gdn":
                return Qwen3_5MoeGatedDeltaNet(c, layer_idx=0)
            return Qwen3_5MoeAttention(c, layer_idx=c.layer_types.index("full_attention"))
        if variant == "gqa_kv":
            raw = json.loads(hf_config_path("google/gemma-4-26B-A4B").read_text())["text_config"]
            assert (raw["num_attention_heads"], raw["num_global_key_value_heads"], raw["global_head_dim"]) == (16, 2, 512)
            c = published("google/gemma-4-26B-A4B").text_config
            c.hidden_size = H
            return Gemma4TextAttention(c, layer_idx=c.layer_types.index("full_attention"))
        if variant == "mla":
            c = published("deepseek-ai/DeepSeek-V3")
            assert c.hidden_size == H
            return DeepseekV3Attention(c, layer_idx=0)
        if variant == "dsa":
            c = published("deepseek-ai/DeepSeek-V3.2")
            assert c.hidden_size == H
            return DeepseekV32Attention(c, layer_idx=0)
        if variant in ("v4", "v4_hca"):
            c = published("deepseek-ai/DeepSeek-V4-Pro")
            assert c.hidden_size == H
            kind = {"v4": "compressed_sparse_attention", "v4_hca": "heavily_compressed_attention"}[variant]
            return DeepseekV4Attention(c, layer_idx=c.layer_types.index(kind))
        if variant == "kda":
            # Kimi K3's KDA dims (its config's linear_attn_config; transformers has no kimi_k3 config)
            return KimiLinearDeltaAttention(KimiLinearConfig(hidden_size=H, num_hidden_layers=1, linear_attn_config={
                "num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4}), layer_idx=0)
        c = published("nvidia/Nemotron-H-56B-Base-8K")
        assert (c.mamba_head_dim, c.n_groups, c.ssm_state_size, c.conv_kernel, c.mamba_num_heads * c.mamba_head_dim,
                c.hidden_size) == (64, 8, 256, 4, 2 * 8192, 8192)
        c.hidden_size, c.mamba_num_heads = H, 2 * H // 64               # expand 2 at 7168: 224 heads
        return NemotronHMamba2Mixer(c, layer_idx=0)


@pytest.mark.parametrize("variant", sorted(PARAMS))
def test_variants_equal_transformers_at_hidden_7168(variants, variant):
    pytest.importorskip("torch", reason=_WHY)
    pytest.importorskip("transformers", reason=_WHY)
    module = _hf_module(variant)
    assert variants[variant]["params"]["value"] == sum(p.numel() for p in module.parameters())


# -- the page ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def page(out):
    html = (out / "site" / "components" / "index.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S)[1])
    return html, data


def test_components_page_lists_every_mixer_with_its_built_numbers(page, contract):
    from site_builder.templating import human_bytes, seconds, si

    html, _ = page
    table = html.split('<table class="data contract sortable">')[1].split("</table>")[0]
    rows = {m[1]: m[2] for m in re.finditer(r'<tr><th scope="row"[^>]*>(.*?)<br>(.*?)</tr>', table, re.S)}
    assert len(rows) == 13
    for v in contract["variants"]:
        cells = re.findall(r'<span class="num"[^>]*>([^<]*)</span>', rows[v["name"]])
        # params, KV per token, fixed, the 7 lengths, prefill at 4K, decode bytes at 4K and 1M: as built
        assert cells == [si(v["params"]["value"]), human_bytes(v["kv_bytes_per_token"]["value"]),
                         human_bytes(v["kv_fixed_bytes"]["value"])] \
            + [human_bytes(b) for b in v["kv_bytes_per_request"]] + [seconds(v["prefill_at_s"])] \
            + [human_bytes(b) for b in v["decode_bytes_at"]]
    assert '<button type="button">decode bytes per token @4K</button>' in html and '<button type="button">decode bytes per token @1M</button>' in html
    assert '<button type="button">prefill 4K</button>' in html
    # a component only the contract uses has no page of its own: no dead link
    assert '<a href="kda_attention/">' not in html and ">kda_attention<" in html


def test_components_page_lists_the_crossings(page, contract):
    html, _ = page
    table = html.split('<table class="data crossings">')[1].split("</table>")[0]
    rows = re.findall(r'<tr><th scope="row">(.*?) × (.*?)</th>.*?<span class="num"[^>]*>([^<]*)</span>'
                      r'.*?<span class="num"[^>]*>([^<]*)</span>', table, re.S)
    assert len(rows) == len(contract["crossings"]) == 33
    shown = {(a, b): (length, size) for a, b, length, size in rows}
    names = {v["id"]: v["name"] for v in contract["variants"]}
    assert shown[(names["sliding"], names["mla"])] == ("14,563.6", "16.8 MB")
    assert shown[(names["mla"], names["gdn"])] == ("3,704.9", "4.27 MB")
    assert shown[(names["sliding"], names["v4"])] == ("57,316", "16.8 MB")
    assert 'data-d="exactly 131072/9 tokens (equal)"' in table


def test_kv_chart_marks_every_crossing_on_log_scales(page, contract):
    """The KV chart, drawn as small multiples (site_builder.charts.contract_panels): the contract's
    rows given once, log-log axes in every panel, and every crossing the build solved marked as a
    diamond in a panel of one of its two variants."""
    from site_builder.charts import CONTRACT_ROWS
    _, data = page
    specs = data["specs"]["attention"]
    series: dict[str, list] = {}
    for row in specs["datasets"][CONTRACT_ROWS]:
        series.setdefault(row["variant"], []).append((row["context"], row["kv_bytes"]))
    for v in contract["variants"]:
        assert series[v["name"]] == list(zip(LENGTHS, v["kv_bytes_per_request"]))
    points = set()
    for spec in specs["kv"]:
        lines, marks = spec["layer"]
        for line in lines["layer"]:
            assert line["encoding"]["x"]["scale"]["type"] == "log" and line["encoding"]["y"]["scale"]["type"] == "log"
        values = marks["data"]["values"] if "values" in marks["data"] else spec["datasets"][marks["data"]["name"]]
        points |= {(p["pair"], p["context"], p["kv_bytes"]) for p in values}
        assert marks["mark"]["shape"] == "diamond" and "color" not in marks["encoding"]   # no legend entry
    assert points == {(f"{c['a_name']} × {c['b_name']}", c["length"], c["bytes"]) for c in contract["crossings"]}


def test_crossing_diamonds_render_with_a_tooltip_naming_the_pair(out, browser, contract):  # noqa: F811
    """In Chromium: the KV chart draws one diamond per crossing; hovering the sliding x MLA one shows
    the pair, its length and the bytes there."""
    server = served(out / "site")
    base = next(server)
    tab = _open(browser)
    try:
        tab.goto(base + "components/")
        from site_builder.charts import contract_panels
        names = {v["id"]: v["name"] for v in contract["variants"]}
        pair = {names["sliding"], names["mla"]}
        for i, panel in enumerate(contract_panels(contract)):    # small multiples: each panel its crossings
            chart = f'.chart[data-spec="attention.kv.{i}"]'
            tab.page.locator(chart).scroll_into_view_if_needed()      # charts are drawn once in view
            mine = [c for c in contract["crossings"] if c["a_name"] in panel or c["b_name"] in panel]
            if mine:
                tab.page.wait_for_selector(f"{chart} svg g.crossings_marks path", state="attached")
            diamonds = tab.page.locator(f"{chart} svg g.crossings_marks path")
            assert diamonds.count() == len(mine)
            at = next((k for k, c in enumerate(mine) if {c["a_name"], c["b_name"]} == pair), None)
            if at is not None:
                break
        diamonds.nth(at).hover(force=True)
        tip = tab.page.locator("#vg-tooltip-element")
        tip.wait_for(state="visible", timeout=PAGE_WAIT_MS)
        text = tip.inner_text()
        assert names["sliding"] in text and names["mla"] in text and "14,563.6" in text and "131072/9" in text, text
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()
        next(server, None)


# -- the solver's edge cases, on curves written here --------------------------------------------------

class _Curve:
    """A curve as engine.batch.contract.crossings reads one: bytes over a whole-token grid, exact
    bytes at a rational length, the widest compressed step."""

    def __init__(self, fn, period=1):
        self.fn, self.period = fn, period

    def grid(self, lengths):
        return [self.fn(Fraction(int(n))) for n in lengths]

    def exact(self, length):
        return Fraction(self.fn(length))


def test_a_staircase_rippling_around_a_line_crosses_once():
    """A line of 300 B a token over 1000 B against a staircase of 1280 B every 4 tokens (320 a
    token on average): from the 13th step on the staircase jumps above the line and the line climbs
    back over it within the step, until the staircase stays above. One crossing, at the first
    flip: L = 52 (1000 + 300 x 52 = 16600 < 13 x 1280 = 16640; at 51, 16300 > 12 x 1280)."""
    from engine.batch.contract import crossings

    line = _Curve(lambda n: 1000 + 300 * n)
    stairs = _Curve(lambda n: 1280 * math.floor(n / 4), period=4)
    found = crossings({"line": line, "stairs": stairs}, 1, 400)
    assert [(c["length_exact"], c["kind"], c["above_after"]) for c in found] == [("52", "step", "stairs")]
    assert found[0]["bytes"] == 16600


def test_lines_cross_at_their_exact_fraction_and_touching_is_no_crossing():
    from engine.batch.contract import crossings

    flat = _Curve(lambda n: 1000)
    found = crossings({"flat": flat, "steep": _Curve(lambda n: 3 * n)}, 1, 1000)
    assert [(c["length_exact"], c["kind"], c["bytes"]) for c in found] == [("1000/3", "equal", 1000)]
    # equal up to 500, then apart: touching, not crossing
    assert crossings({"a": _Curve(lambda n: 2 * min(n, 500)), "b": _Curve(lambda n: 2 * n)}, 1, 1000) == []


def test_a_decode_at_length_outside_the_lengths_is_one_clear_error(tmp_path):
    import shutil

    from engine.batch.contract import load_contract
    from engine.deploy.hardware import load_gpus
    from engine.language.corpus import load_corpus
    from engine.language.errors import SpecError

    corpus = load_corpus()
    folder = tmp_path / "attention"
    shutil.copytree(corpus.root / "contracts" / "attention", folder)
    text = (folder / "contract.yaml").read_text().replace("decode_at: [4096, 1048576]", "decode_at: [4096, 5000]")
    (folder / "contract.yaml").write_text(text)
    with pytest.raises(SpecError) as err:
        load_contract(folder, corpus, load_gpus())
    assert "decode_at" in str(err.value) and "1048576" in str(err.value)
