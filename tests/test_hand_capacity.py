"""Capacity by hand: weights, KV, the prefill working set, ``max_prefill_batch`` and the ``fits`` margin.

From the published configs and docs/deployment.md's definitions, never from the engine:

* usable HBM = 0.9 x capacity, the total the driver reports (H100: nvidia-smi's 81,559 MiB =
  85,520,809,984 B -> 76,968,728,985.6 bytes);
* weights per GPU: every parameter once at BF16 on one GPU (the checkpoint's dtype);
* KV per request at context L: K and V, n_kv_heads x d_head each, every layer, x L x 2 bytes;
* the prefill working set of one prompt: the largest kernel's activations read and written (no
  weights: they are already counted once, resident);
* ``max_prefill_batch`` = floor((usable - weights) / (KV at the prompt + one working set));
* ``max_concurrent_requests`` = dp_attn x floor((usable - weights) / KV per request per GPU at
  the last position);
* ``fits``: weights + batch x KV at the last position + one prompt's working set <= usable;
  otherwise ``shortfall_bytes`` is the excess.
"""
from __future__ import annotations

import math

import pytest

from engine.deploy import Scenario
from tests.conftest import hf_config
from tests.deploy_helpers import deploy

BF16 = 2
USABLE_H100 = 0.9 * 81559 * 2**20            # nvidia-smi: 81559MiB on an H100 80GB; --hbm-fraction 0.9

C8 = hf_config("meta-llama/Meta-Llama-3.1-8B")
HID, FF, L, VOCAB = C8["hidden_size"], C8["intermediate_size"], C8["num_hidden_layers"], C8["vocab_size"]
HEADS, KVH = C8["num_attention_heads"], C8["num_key_value_heads"]
D = HID // HEADS


def llama_8b_params() -> int:
    """q, o: hidden x hidden; k, v: hidden x (8 x 128); gate, up, down: hidden x 14336; two norms
    per layer; embedding and (untied) head: vocab x hidden; final norm.
    = 32 x 218,112,000 + 2 x 525,336,576 + 4,096 = 8,030,261,248 (Meta's "8B")."""
    layer = 2 * HID * HID + 2 * HID * KVH * D + 3 * HID * FF + 2 * HID
    return L * layer + 2 * VOCAB * HID + HID


WEIGHTS = llama_8b_params() * BF16                                # 16,060,522,496 bytes
KV_TOKEN = 2 * L * KVH * D * BF16                                 # 131,072 bytes (128 KiB)
PROMPT, GEN = 1024, 256
#: vLLM's largest prefill kernel for one 1024-token prompt is SiLU-and-mul (the glu op): it reads
#: the gate and up projections and writes their product, 3 x 1024 x 14336 x 2 B = 88,080,384 B.
#: The others are smaller: gate_up_proj reads x (8 MiB) and writes 2 x 28 MiB = 64 MiB; down_proj
#: 28 + 8 MiB; flash attention q + K + V + out = 8 + 2 + 2 + 8 MiB; fused add + RMSNorm 4 x 8 MiB;
#: the head runs on the last token only.
GLU_SET = 3 * PROMPT * FF * BF16


def _vllm(batch: int):
    return deploy("Llama-3.1-8B", "H100", Scenario(batch, PROMPT, GEN), framework="vllm", tp=1).summary


def test_llama_8b_weights_and_kv_on_one_gpu():
    s = _vllm(1)
    assert llama_8b_params() == 8_030_261_248
    assert s["weight_bytes_per_gpu"] == WEIGHTS
    assert s["kv_bytes_per_request"] == KV_TOKEN * (PROMPT + GEN) == 167_772_160
    assert s["kv_bytes_per_request_per_gpu"] == KV_TOKEN * (PROMPT + GEN)
    assert s["kv_budget_bytes_per_gpu"] == USABLE_H100 - WEIGHTS == pytest.approx(60_908_206_489.6, abs=1e-3)


def test_max_prefill_batch_llama_8b_is_273():
    """(76,968,728,985.6 - 16,060,522,496) / (1024 x 131,072 + 88,080,384) = 60,908,206,489.6 /
    222,298,112 = 273.99 -> 273 prompts. Counting the weights in the working set (the head's
    1.05 GB table) would give 51."""
    per_prompt = PROMPT * KV_TOKEN + GLU_SET
    expected = math.floor((USABLE_H100 - WEIGHTS) / per_prompt)
    assert expected == 273
    for batch in (1, 8):
        s = _vllm(batch)
        assert s["max_prefill_batch"] == expected
        # the whole batch's prompts are prefilled in one step: batch x the working set
        assert s["activation_bytes_per_gpu"] == batch * GLU_SET


def test_unfused_working_set_is_the_dense_score_matrix():
    """Without fusion the largest kernel is softmax over the [32 heads, 1024, 1024] scores (BF16),
    read and written: 2 x 32 x 1024^2 x 2 B = 134,217,728 B; 60,908,206,489.6 / (134,217,728 +
    134,217,728) = 226.9 -> 226 prompts."""
    dense = 2 * HEADS * PROMPT * PROMPT * BF16
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, PROMPT, GEN), tp=1).summary
    assert s["activation_bytes_per_gpu"] == dense
    assert s["max_prefill_batch"] == math.floor((USABLE_H100 - WEIGHTS) / (PROMPT * KV_TOKEN + dense)) == 226


def test_fits_margin_includes_one_prefill_working_set():
    """KV capacity at 1280 tokens: floor(60,908,206,489.6 / 167,772,160) = 363 requests. But
    serving also needs one prompt's working set: 362 requests need 16,060,522,496 + 362 x
    167,772,160 + 88,080,384 = 76,882,124,800 <= 76,968,728,985.6 (fit), 363 need 77,049,896,960:
    short by 81,167,974.4."""
    per_request = KV_TOKEN * (PROMPT + GEN)
    capacity = math.floor((USABLE_H100 - WEIGHTS) / per_request)
    assert capacity == 363
    for batch, fits in ((362, True), (363, False)):
        s = _vllm(batch)
        need = WEIGHTS + batch * per_request + GLU_SET
        assert s["max_concurrent_requests"] == capacity
        assert s["fits"] is fits, batch
        assert s["shortfall_bytes"] == max(need - USABLE_H100, 0.0)
        assert s["free_bytes_per_gpu"] == max(USABLE_H100 - WEIGHTS - batch * per_request, 0.0)
    assert WEIGHTS + 363 * per_request + GLU_SET - USABLE_H100 == pytest.approx(81_167_974.4, abs=1e-3)


def test_dp_attention_capacity_qwen3_30b_a3b():
    """Qwen3-30B-A3B on 8 H100, TP8 = 8 attention replicas (DP-attention 8) + EP 8, BF16.

    Each GPU keeps the whole attention, router, norms, embedding and head (attention TP is 1) and
    16 of the 128 experts. Per layer outside the experts: q (2048 x 32 x 128), k and v (2048 x 4 x
    128), o, q/k norms (128 each), router 128 x 2048, two norms; experts 3 x 2048 x 768 each.
    KV per request per GPU: 48 layers x 2 x 4 heads x 128 x 2 B = 98,304 B per token (not split:
    each replica holds its own requests). Requests = 8 x floor((76,968,728,985.6 - weights) /
    (98,304 x 5120))."""
    c = hf_config("Qwen/Qwen3-30B-A3B")
    h, heads, kvh, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    e, ff, layers, vocab = c["num_experts"], c["moe_intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    shared = layers * (2 * h * heads * d + 2 * h * kvh * d + 2 * d + e * h + 2 * h) + 2 * vocab * h + h
    experts = layers * e * 3 * h * ff
    weights = (shared + experts // 8) * BF16
    s = deploy("Qwen3-30B-A3B", "H100", Scenario(64, 4096, 1024), tp=8, dp_attn=8, ep=8).summary
    assert s["weight_bytes_per_gpu"] == weights == 10_329_944_064
    kv_request = layers * 2 * kvh * d * BF16 * (4096 + 1024)
    assert s["kv_bytes_per_request_per_gpu"] == kv_request
    assert s["kv_bytes_per_gpu"] == 64 / 8 * kv_request                 # 8 requests per replica
    assert s["max_concurrent_requests"] == 8 * math.floor((USABLE_H100 - weights) / kv_request) == 1056


def test_dp_attention_rank_holds_whole_requests():
    """Qwen3-30B-A3B on 8 H100 with DP-attention 8 + EP 8, 3 requests of 1000 tokens: three
    replicas each hold one whole request and five idle; TTFT is the busy replica's. Its q_proj runs
    on all 1000 tokens of its request, 48 layers x 2 x 1000 x 2048 x (32 x 128) FLOPs, and the
    same with 8 requests (one per replica); spreading 3/8 of a request over every rank would
    claim 3/8 of that."""
    c = hf_config("Qwen/Qwen3-30B-A3B")
    h, heads, d, layers = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["num_hidden_layers"]
    uid = "main/layers[moe]/self_attn/q_proj"
    per_request = layers * 2 * 1000 * h * heads * d
    for batch in (1, 3, 8):
        d3 = deploy("Qwen3-30B-A3B", "H100", Scenario(batch, 1000, 24), tp=8, dp_attn=8, ep=8)
        row = next(r for r in d3.ops["prefill"] if r["op_uid"] == uid)
        assert row["flops"] == per_request, batch
    nine = deploy("Qwen3-30B-A3B", "H100", Scenario(9, 1000, 24), tp=8, dp_attn=8, ep=8)
    assert next(r for r in nine.ops["prefill"] if r["op_uid"] == uid)["flops"] == 2 * per_request


def test_pipeline_cache_is_the_fullest_stages_in_a_hybrid_stack():
    """Nemotron 3 Super over 16 pipeline stages (88 layers, 8 of them attention: config
    hybrid_override_pattern): most stages hold only Mamba2 and MoE layers, whose states do not grow,
    but the stages holding an attention layer keep its K and V: 2 x 2 KV heads x 128 x 2 B per token
    each. A GPU's cache per request must grow by at least that much per token, whichever stage is
    the weight-heaviest."""
    c = hf_config("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    assert c["hybrid_override_pattern"].count("*") == 8 and len(c["hybrid_override_pattern"]) == 88
    per_token = 2 * c["num_key_value_heads"] * c["head_dim"] * BF16
    s1 = deploy("NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "B200", Scenario(1, 1000, 0), pp=16).summary
    s2 = deploy("NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "B200", Scenario(1, 2000, 0), pp=16).summary
    grown = s2["kv_bytes_per_request_per_gpu"] - s1["kv_bytes_per_request_per_gpu"]
    assert grown >= 1000 * per_token
