"""Capacity by hand: weights, KV, the prefill working set, ``max_prefill_batch``, the ``fits`` margin
and the prefill schedule, all from the one rule of docs/deployment.md "Memory and capacity".

From the published configs and that rule, never from the engine:

* usable HBM = 0.9 x capacity, the total the driver reports (H100: nvidia-smi's 81,559 MiB =
  85,520,809,984 B -> 76,968,728,985.6 bytes);
* weights per GPU: every parameter once at BF16 on one GPU (the checkpoint's dtype);
* KV per request at context L: K and V, n_kv_heads x d_head each, every layer, x L x 2 bytes;
* the prefill working set A: the largest kernel's activations read and written (no weights: they
  are resident, counted once) in one chunked-prefill step of 8192 prompt tokens per attention
  replica (vLLM's max_num_batched_tokens on an H100), reserved whatever the batch;
* vLLM's runtime reserve R: its non-torch memory, 0.13 GiB per GPU on one GPU
  (corpus/fusion/vllm.yaml runtime_reserve, with its source);
* capacity C per replica = floor((usable - weights - R - A) / KV per request per GPU at the last
  position); ``max_concurrent_requests`` = dp_attn x C; ``fits`` exactly when
  ceil(batch / dp_attn) <= C, else ``shortfall_bytes`` is the excess;
* ``max_prefill_batch`` = dp_attn x min(max(1, floor(8192 / prompt)), C) whole prompts per step;
* TTFT = one step x (pp + s - 1) / pp, s = ceil(prompt tokens of the fullest replica / 8192)
  steps of equal size.
"""
from __future__ import annotations

import math

import pytest

from engine.deploy import Scenario, rules
from engine.language.formula_tree import run_arrays
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
BUDGET = 8192                                                     # prompt tokens per prefill step
#: vLLM's largest prefill kernel for a step of 8192 prompt tokens (8 prompts of 1024) is
#: SiLU-and-mul (the glu op): it reads the gate and up projections and writes their product,
#: 3 x 8192 x 14336 x 2 B = 704,643,072 B. The others are smaller: gate_up_proj reads x (64 MiB)
#: and writes 2 x 224 MiB = 512 MiB; down_proj 224 + 64 MiB; flash attention q + K + V + out =
#: 64 + 16 + 16 + 64 MiB; fused add + RMSNorm 4 x 64 MiB; the head runs on the last token only.
STEP_SET = 3 * BUDGET * FF * BF16
RESERVE = 0.13 * 2**30                                            # vLLM non-torch memory, 139,586,437.12 B
#: KV room = 76,968,728,985.6 - 16,060,522,496 - 139,586,437.12 - 704,643,072 = 60,063,976,980.48 B
ROOM = USABLE_H100 - WEIGHTS - RESERVE - STEP_SET


def _vllm(batch: int):
    return deploy("Llama-3.1-8B", "H100", Scenario(batch, PROMPT, GEN), framework="vllm", tp=1)


def test_llama_8b_weights_and_kv_on_one_gpu():
    s = _vllm(1).summary
    assert llama_8b_params() == 8_030_261_248
    assert s["weight_bytes_per_gpu"] == WEIGHTS
    assert s["kv_bytes_per_request"] == KV_TOKEN * (PROMPT + GEN) == 167_772_160
    assert s["kv_bytes_per_request_per_gpu"] == KV_TOKEN * (PROMPT + GEN)
    assert STEP_SET == 704_643_072
    assert s["kv_budget_bytes_per_gpu"] == pytest.approx(ROOM, abs=1e-3)
    assert ROOM == pytest.approx(60_063_976_980.48, abs=1e-3)
    assert s["reserve_bytes_per_gpu"] == RESERVE


def test_max_prefill_batch_llama_8b_is_8():
    """A step holds floor(8192 / 1024) = 8 whole prompts, fewer than the capacity (358, below), so
    max_prefill_batch = 8; the working set is one step's, the same at batch 1 and 8 (vLLM reserves
    it by a profiling run at the budget before sizing the KV cache)."""
    for batch in (1, 8):
        s = _vllm(batch).summary
        assert s["max_prefill_batch"] == BUDGET // PROMPT == 8
        assert s["activation_bytes_per_gpu"] == STEP_SET


def test_unfused_working_set_is_the_dense_score_matrix():
    """Without fusion the largest kernel is softmax over the scores of the step's 8 prompts,
    [8, 32 heads, 1024, 1024] in BF16, read and written: 2 x 8 x 32 x 1024^2 x 2 B = 1,073,741,824 B.
    Capacity at 1280 tokens: floor((60,908,206,489.6 - 1,073,741,824) / 167,772,160) = 356.6 -> 356."""
    dense = 2 * (BUDGET // PROMPT) * HEADS * PROMPT * PROMPT * BF16
    assert dense == 1_073_741_824
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, PROMPT, GEN), tp=1).summary
    assert s["activation_bytes_per_gpu"] == dense
    per_request = KV_TOKEN * (PROMPT + GEN)
    assert s["max_concurrent_requests"] == math.floor((USABLE_H100 - WEIGHTS - dense) / per_request) == 356
    assert s["max_prefill_batch"] == 8


def test_fits_exactly_up_to_the_capacity():
    """Capacity at 1280 tokens: floor(60,063,976,980.48 / 167,772,160) = 358.01 -> 358 requests.
    358 fit (358 x 167,772,160 = 60,062,433,280 <= the room); 359 need 60,230,205,440: short by
    166,228,459.52 B. ``fits`` and ``max_concurrent_requests`` are the same inequality."""
    per_request = KV_TOKEN * (PROMPT + GEN)
    capacity = math.floor(ROOM / per_request)
    assert capacity == 358
    for batch, fits in ((358, True), (359, False)):
        s = _vllm(batch).summary
        assert s["max_concurrent_requests"] == capacity
        assert s["fits"] is fits, batch
        assert s["shortfall_bytes"] == pytest.approx(max(batch * per_request - ROOM, 0.0), abs=1e-3)
        assert s["free_bytes_per_gpu"] == pytest.approx(max(ROOM - batch * per_request, 0.0), abs=1e-3)
    assert 359 * per_request - ROOM == pytest.approx(166_228_459.52, abs=1e-3)


def test_prefill_runs_in_steps_of_the_token_budget():
    """8 prompts of 1024 tokens are 8192 tokens: one step. 9 prompts are 9216 tokens: ceil(9216 /
    8192) = 2 steps of 4.5 prompts (4608 tokens) each, so TTFT = 2 x one step, and one step's
    fused QKV projection runs 32 layers x 2 x 4608 x 4096 x (4096 + 2 x 8 x 128) FLOPs."""
    eight, nine = _vllm(8), _vllm(9)
    assert eight.summary["prefill_steps"] == 1 and nine.summary["prefill_steps"] == 2
    assert nine.summary["ttft_s"] == pytest.approx(2 * nine.phases["prefill"]["step_time_s"], rel=1e-12)
    q = next(r for r in nine.ops["prefill"] if r["op_uid"].endswith("self_attn/q_proj"))
    assert q["flops"] == L * 2 * 4608 * HID * (HID + 2 * KVH * D)
    assert nine.summary["ttft_s"] > eight.summary["ttft_s"]


def test_dp_attention_capacity_qwen3_30b_a3b():
    """Qwen3-30B-A3B on 8 H100, TP8 = 8 attention replicas (DP-attention 8) + EP 8, BF16, unfused.

    Each GPU keeps the whole attention, router, norms, embedding and head (attention TP is 1) and
    16 of the 128 experts. Per layer outside the experts: q (2048 x 32 x 128), k and v (2048 x 4 x
    128), o, q/k norms (128 each), router 128 x 2048, two norms; experts 3 x 2048 x 768 each.
    KV per request per GPU: 48 layers x 2 x 4 heads x 128 x 2 B = 98,304 B per token (not split:
    each replica holds its own requests). The working set: a step of 8192 tokens per replica is
    2 prompts of 4096; unfused, the largest kernel is softmax over their [2, 32, 4096, 4096] BF16
    scores, read and written: 4,294,967,296 B. Requests = 8 x floor((76,968,728,985.6 -
    10,329,944,064 - 4,294,967,296) / (98,304 x 5120)) = 8 x floor(123.9) = 984."""
    c = hf_config("Qwen/Qwen3-30B-A3B")
    h, heads, kvh, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    e, ff, layers, vocab = c["num_experts"], c["moe_intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    shared = layers * (2 * h * heads * d + 2 * h * kvh * d + 2 * d + e * h + 2 * h) + 2 * vocab * h + h
    experts = layers * e * 3 * h * ff
    weights = (shared + experts // 8) * BF16
    s = deploy("Qwen3-30B-A3B", "H100", Scenario(64, 4096, 1024), tp=8, dp_attn=8, ep=8).summary
    assert s["weight_bytes_per_gpu"] == weights == 10_329_944_064
    kv_request = layers * 2 * kvh * d * BF16 * (4096 + 1024)
    scores = 2 * (BUDGET // 4096) * heads * 4096 * 4096 * BF16
    assert s["activation_bytes_per_gpu"] == scores == 4_294_967_296
    assert s["kv_bytes_per_request_per_gpu"] == kv_request
    assert s["kv_bytes_per_gpu"] == 64 / 8 * kv_request                 # 8 requests per replica
    assert s["max_concurrent_requests"] == 8 * math.floor((USABLE_H100 - weights - scores) / kv_request) == 984
    # 8 requests per replica x 4096 tokens = 32,768 tokens: 4 steps of 8192
    assert s["prefill_steps"] == 4 and s["fits"]
    over = deploy("Qwen3-30B-A3B", "H100", Scenario(985, 4096, 1024), tp=8, dp_attn=8, ep=8).summary
    assert not over["fits"] and over["shortfall_bytes"] > 0          # ceil(985 / 8) = 124 > 123


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


def test_every_attention_replica_runs_its_own_prefill_step():
    """DeepSeek-V3 on 8 H200s at DP-attention 8 (TP 8, EP 8), 1024-token prompts: each of the 8
    attention replicas runs its own 8192-token step, so a step holds 8 x floor(8192 / 1024) = 64
    whole prompts (each replica's capacity is larger: max_concurrent_requests / 8 >= 8), and 64
    requests (8 per replica) prefill in one step (mutant max-prefill-batch-one-rank: one replica's
    8)."""
    s = deploy("DeepSeek-V3", "H200", Scenario(64, PROMPT, GEN), framework="vllm", tp=8, ep=8, dp_attn=8).summary
    assert s["max_concurrent_requests"] // 8 >= BUDGET // PROMPT
    assert s["max_prefill_batch"] == 8 * (BUDGET // PROMPT) == 64
    assert s["prefill_steps"] == 1


@pytest.mark.parametrize("config", [{"tp": 8}, {"tp": 4, "pp": 2}])
def test_prefill_throughput_is_per_gpu_of_the_replica(config):
    """Prompt tokens per second per GPU: a replica of Llama-3.1-70B on 8 H100s (TP 8, or TP 4 x PP 2)
    prefills 4 prompts of 4096 tokens in TTFT seconds, so 4 x 4096 / TTFT / 8 (mutant
    prefill-tps-per-replica: the replica's whole rate)."""
    s = deploy("Llama-3.1-70B", "H100", Scenario(4, 4096, GEN), framework="vllm", **config).summary
    assert s["prefill_tokens_per_s_per_gpu"] == pytest.approx(4 * 4096 / s["ttft_s"] / 8, rel=1e-12)


def test_the_deploy_pages_capacity_bound_counts_every_attention_replica():
    """The deploy page skips a config whose capacity bound (engine.deploy.rules.SERVING_BOUND: the KV
    room before the working set and the reserve, both >= 0) cannot hold the batch, so the bound must
    never fall below the capacity. DeepSeek-V3 on 8 H200s at DP-attention 8: each replica's GPU holds
    floor((usable - weights) / KV per request per GPU) requests (387 today) and the config 8 times
    that, at least the engine's capacity (2,920 today: the same room less the working set and the
    reserve, over 8 replicas). Mutant serving-bound-one-replica: one replica's 387, and the page would
    list no DP-attention config among those holding a larger batch."""
    s = deploy("DeepSeek-V3", "H200", Scenario(64, PROMPT, GEN), framework="vllm", tp=8, ep=8, dp_attn=8).summary
    per_replica = math.floor((s["usable_bytes_per_gpu"] - s["weight_bytes_per_gpu"]) / s["kv_bytes_per_request_per_gpu"])
    bound = run_arrays(rules.SERVING_BOUND, {"cap": per_replica, "dp_attn": 8})["max_concurrent_requests"]
    assert bound == 8 * per_replica >= s["max_concurrent_requests"] > per_replica
