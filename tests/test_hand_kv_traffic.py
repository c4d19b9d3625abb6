"""KV-cache traffic in decode, by hand, for BF16 and FP8 caches: dense GQA and absorbed MLA.

A decode step reads each request's whole cached history once per layer and writes the new
token's entry; with an FP8 cache every cached element is 1 byte instead of 2, while queries,
outputs and other activations stay BF16. Expectations from the published configs:

* GQA (Llama-3.1-8B): K and V, n_kv_heads x d_head each, per token and layer;
* MLA (DeepSeek-V3, absorbed in decode): one kv_lora_rank latent plus one d_qk_rope rotary key per
  token and layer, shared by all heads (DeepSeek-V2 paper, Table 1); the fused FlashMLA kernel reads
  the latent and the rotary key in place, the absorbed queries (heads x (latent + rope)) and writes
  the latent-space output (heads x latent).
"""
from __future__ import annotations

import pytest

from engine.deploy import Scenario
from tests.conftest import hf_config
from tests.deploy_helpers import close, deploy, op

BF16 = 2
KV_BYTES = {"bf16": 2, "fp8": 1}
H100_HBM = 3.35e12
H200_HBM = 4.8e12


# -- dense GQA -------------------------------------------------------------------------------------

C8 = hf_config("meta-llama/Meta-Llama-3.1-8B")
L, HEADS, KVH = C8["num_hidden_layers"], C8["num_attention_heads"], C8["num_key_value_heads"]
D = C8["hidden_size"] // HEADS
B, PROMPT, GEN = 8, 4096, 512
CTX = PROMPT + GEN
ATTN = "main/layers[block]/self_attn"


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_gqa_decode_attention_reads_the_history_at_the_cache_dtype(kv_dtype):
    """Llama-3.1-8B, one H100, vLLM, 8 requests at context 4608. flash_attention per layer reads
    q (8 x 32 x 128 x 2 B), K and V histories (8 x 4608 x 8 x 128 x kv_bytes each) and writes the
    output (8 x 32 x 128 x 2 B): 151,126,016 B in BF16, 75,628,544 B in FP8."""
    kvb = KV_BYTES[kv_dtype]
    d = deploy("Llama-3.1-8B", "H100", Scenario(B, PROMPT, GEN), framework="vllm", kv_dtype=kv_dtype, tp=1)
    row = op(d, "decode", f"flash_attention@{ATTN}/scores")
    per_layer = 2 * B * HEADS * D * BF16 + 2 * B * CTX * KVH * D * kvb
    assert per_layer == {"bf16": 151_126_016, "fp8": 75_628_544}[kv_dtype]
    assert close(row["bytes"], L * per_layer)
    assert close(row["t_memory_s"], L * per_layer / H100_HBM)
    # the cache write: read this token's K (BF16 activation), write it at the cache dtype
    for name in ("k_cache", "v_cache"):
        assert close(op(d, "decode", f"{ATTN}/{name}")["bytes"], L * (B * KVH * D * BF16 + B * KVH * D * kvb))
    assert d.summary["kv_bytes_per_request"] == 2 * L * KVH * D * kvb * CTX


def test_gqa_fp8_cache_under_tp():
    """Qwen3-32B on 4 H100 (TP 4, 2 of the 8 KV heads per GPU), 8 requests, FP8 cache at context
    4608: flash_attention reads 2 x 8 x 4608 x 2 x 128 x 1 B of history per layer (64 layers),
    plus q and out: 8 x 16 heads x 128 x 2 B each."""
    c = hf_config("Qwen/Qwen3-32B")
    layers, heads, kvh, d = c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    dep = deploy("Qwen3-32B", "H100", Scenario(B, PROMPT, GEN), framework="vllm", kv_dtype="fp8", tp=4)
    row = op(dep, "decode", f"flash_attention@{ATTN}/scores")
    per_layer = 2 * B * (heads // 4) * d * BF16 + 2 * B * CTX * (kvh // 4) * d * 1
    assert close(row["bytes"], layers * per_layer)
    s = dep.summary
    assert s["kv_bytes_per_request"] == 2 * layers * kvh * d * 1 * CTX
    assert s["kv_bytes_per_request_per_gpu"] == 2 * layers * (kvh // 4) * d * 1 * CTX


# -- absorbed MLA ----------------------------------------------------------------------------------

DS = hf_config("deepseek-ai/DeepSeek-V3")
MOE_LAYERS = DS["num_hidden_layers"] - DS["first_k_dense_replace"]            # 58
LATENT, ROPE, DS_HEADS = DS["kv_lora_rank"], DS["qk_rope_head_dim"], DS["num_attention_heads"]
DB, DPROMPT, DGEN = 16, 1000, 24
DCTX = DPROMPT + DGEN
MLA = "main/layers[moe]/self_attn"


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_mla_decode_reads_latent_and_rope_key_at_the_cache_dtype(kv_dtype):
    """DeepSeek-V3 on 8 H200, DP-attention 8 + EP 8, vLLM, 16 requests at context 1024: each GPU
    decodes 2 requests with all 128 heads. flash_mla per MoE layer reads the absorbed queries
    (2 x 128 x (512 + 64) x 2 B = 294,912), the latent and rotary-key history (2 x 1024 x
    (512 + 64) x kv_bytes) and writes the latent-space output (2 x 128 x 512 x 2 B = 262,144):
    2,916,352 B in BF16, 1,736,704 B in FP8. FLOPs (MQA over the latent): scores 2 x 2 x 128 x 1024
    x 576, softmax 5 x 2 x 128 x 1024, apply 2 x 2 x 128 x 1024 x 512 = 571,736,064."""
    kvb = KV_BYTES[kv_dtype]
    d = deploy("DeepSeek-V3", "H200", Scenario(DB, DPROMPT, DGEN), framework="vllm", kv_dtype=kv_dtype,
               tp=8, dp_attn=8, ep=8)
    row = op(d, "decode", f"flash_mla@{MLA}/k_latent")
    b = DB // 8
    per_layer = b * DS_HEADS * (LATENT + ROPE) * BF16 + b * DCTX * (LATENT + ROPE) * kvb + b * DS_HEADS * LATENT * BF16
    assert per_layer == {"bf16": 2_916_352, "fp8": 1_736_704}[kv_dtype]
    assert close(row["bytes"], MOE_LAYERS * per_layer)
    assert close(row["t_memory_s"], MOE_LAYERS * per_layer / H200_HBM)
    flops = 2 * b * DS_HEADS * DCTX * (LATENT + ROPE) + 5 * b * DS_HEADS * DCTX + 2 * b * DS_HEADS * DCTX * LATENT
    assert flops == 571_736_064
    assert close(row["flops"], MOE_LAYERS * flops)
    # cache writes: read the new token's normalised latent / rotated key (BF16), write it at kv_bytes
    assert close(op(d, "decode", f"{MLA}/latent_cache")["bytes"], MOE_LAYERS * (b * LATENT * BF16 + b * LATENT * kvb))
    assert close(op(d, "decode", f"{MLA}/rope_key_cache")["bytes"], MOE_LAYERS * (b * ROPE * BF16 + b * ROPE * kvb))
    per_token = DS["num_hidden_layers"] * (LATENT + ROPE) * kvb          # 70,272 B in BF16
    assert d.summary["kv_bytes_per_request"] == per_token * DCTX
    assert d.summary["kv_bytes_per_request_per_gpu"] == per_token * DCTX   # the latent is not split


def test_batch_one_decode_reads_every_weight_and_the_history():
    """Llama-3.1-8B, one H100, one request at context 4608, no fusion. Every matrix is streamed
    once per token except the embedding table, of which one row is read (4096 x 2 B): weights read
    = 8,030,261,248 x 2 - 128,256 x 4096 x 2 + 8,192 = 15,009,857,536 B. The KV history is
    131,072 B/token x 4608 = 603,979,776 B. At batch 1 every kernel is memory bound (intensity
    about 1 FLOP/B against the H100's 295), so TPOT = the phase's HBM bytes / 3.35 TB/s, and those
    bytes are the weights + the history + small activations (under 1% here)."""
    params = L * (2 * C8["hidden_size"] ** 2 + 2 * C8["hidden_size"] * KVH * D + 3 * C8["hidden_size"]
                  * C8["intermediate_size"] + 2 * C8["hidden_size"]) + 2 * C8["vocab_size"] * C8["hidden_size"] \
        + C8["hidden_size"]
    table = C8["vocab_size"] * C8["hidden_size"] * BF16
    weights_read = params * BF16 - table + C8["hidden_size"] * BF16
    assert weights_read == 15_009_857_536
    history = 2 * L * KVH * D * BF16 * CTX
    d = deploy("Llama-3.1-8B", "H100", Scenario(1, PROMPT, GEN), tp=1)
    phase = d.phases["decode"]
    assert phase["weight_bytes"] == weights_read
    assert phase["bound"] == "memory" and {r["bound"] for r in d.ops["decode"]} == {"memory"}
    assert d.summary["tpot_s"] == pytest.approx(phase["bytes"] / H100_HBM, rel=1e-12)
    assert (weights_read + history) / H100_HBM <= d.summary["tpot_s"] <= 1.01 * (weights_read + history) / H100_HBM
