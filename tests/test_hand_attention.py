"""Attention FLOPs and the fused attention kernel, derived by hand from the published configs.

Every expectation below is written from the model's config.json (``tests.conftest.hf_config``)
and these first principles, never read back from the engine:

* scores ``q k^T``: one multiply-add (2 FLOPs) per (query, key) pair, head and head-dim element:
  ``2 x batch x heads x pairs x d_head``;
* softmax: 5 FLOPs per computed score (max, subtract, exp, sum, divide):
  ``5 x batch x heads x pairs``;
* apply ``probabilities x values``: again one multiply-add per pair, head and value element:
  ``2 x batch x heads x pairs x d_v`` (the factor 2 is the one a bug once dropped);
* pairs of a causal prompt of n tokens: query i sees keys 1..i, so ``n (n + 1) / 2``; a sliding
  window of w: ``w (w + 1) / 2 + (n - w) w`` for n >= w; one decode token at context C sees C keys
  (``min(C, w)`` with a window);
* the fused attention kernel (``flash_attention`` in vLLM's table) keeps scores and probabilities
  on chip: its FLOPs are the three above, its HBM bytes only its boundary: the queries read, the
  K and V history read from the cache (``kv_bytes`` per element) and the output written;
* SOL time: FLOPs / BF16 peak (H100: 989 TFLOPS dense), bytes / HBM bandwidth (3.35 TB/s), as the
  GPU file ``gpus/h100-sxm.yaml`` states.
"""
from __future__ import annotations

import pytest

from engine.deploy import Scenario
from tests.conftest import hf_config
from tests.deploy_helpers import close, deploy, op

LLAMA = hf_config("meta-llama/Meta-Llama-3.1-8B")
L = LLAMA["num_hidden_layers"]                                   # 32
HEADS = LLAMA["num_attention_heads"]                             # 32
KV = LLAMA["num_key_value_heads"]                                # 8
D = LLAMA["hidden_size"] // HEADS                                # 128
BF16 = 2
H100_BF16_FLOPS = 989e12
H100_HBM = 3.35e12

B, PROMPT, GEN = 2, 1024, 256
C = PROMPT + GEN                                                 # decode runs at the last position
ATTN = "main/layers[block]/self_attn"


def causal_pairs(n: int) -> int:
    return n * (n + 1) // 2


def window_pairs(n: int, w: int) -> int:
    m = min(n, w)
    return m * (m + 1) // 2 + (n - m) * w


@pytest.fixture(scope="module")
def unfused():
    return deploy("Llama-3.1-8B", "H100", Scenario(B, PROMPT, GEN), tp=1)


@pytest.fixture(scope="module")
def fused():
    return deploy("Llama-3.1-8B", "H100", Scenario(B, PROMPT, GEN), framework="vllm", tp=1)


def test_causal_pair_count_of_a_prompt():
    """The formula the tests below rely on, spelled out: 1024 queries see 1 + 2 + ... + 1024 keys."""
    assert causal_pairs(PROMPT) == sum(range(1, PROMPT + 1)) == 524_800
    assert window_pairs(1024, 128) == 8_256 + 896 * 128 == 122_944


def test_prefill_scores_softmax_apply_flops(unfused):
    """Llama-3.1-8B, one GPU, a 1024-token prompt for 2 requests: 524,800 causal pairs per head.

    scores = 32 layers x 2 x 2 req x 32 heads x 524,800 x 128 = 275,146,342,400
    softmax = 32 x 5 x 2 x 32 x 524,800 = 5,373,952,000
    apply = scores (d_v = d_head = 128: a multiply-add per element, 2 FLOPs)"""
    pairs = causal_pairs(PROMPT)
    scores = L * 2 * B * HEADS * pairs * D
    assert scores == 275_146_342_400
    assert close(op(unfused, "prefill", f"{ATTN}/scores")["flops"], scores)
    assert close(op(unfused, "prefill", f"{ATTN}/probs")["flops"], L * 5 * B * HEADS * pairs)
    assert close(op(unfused, "prefill", f"{ATTN}/attn")["flops"], L * 2 * B * HEADS * pairs * D)


def test_decode_scores_softmax_apply_flops(unfused):
    """One new token per request at context 1280 sees 1280 keys per head."""
    assert close(op(unfused, "decode", f"{ATTN}/scores")["flops"], L * 2 * B * HEADS * C * D)
    assert close(op(unfused, "decode", f"{ATTN}/probs")["flops"], L * 5 * B * HEADS * C)
    assert close(op(unfused, "decode", f"{ATTN}/attn")["flops"], L * 2 * B * HEADS * C * D)


def test_fused_attention_kernel_prefill(fused):
    """vLLM's flash_attention: FLOPs = scores + softmax + apply = 32 x 2 x 32 x 524,800 x
    (256 + 5 + 256) = 555,666,636,800; bytes per layer = q (2 x 1024 x 32 x 128 x 2 B = 16 MiB)
    + K and V history (2 x 1024 x 8 x 128 x 2 B = 4 MiB each) + output (16 MiB) = 40 MiB."""
    row = op(fused, "prefill", f"flash_attention@{ATTN}/scores")
    assert row["kind"] == "fused" and row["parts"] == [f"{ATTN}/scores", f"{ATTN}/probs", f"{ATTN}/attn"]
    flops = L * B * HEADS * causal_pairs(PROMPT) * (2 * D + 5 + 2 * D)
    assert flops == 555_666_636_800
    q = out = B * PROMPT * HEADS * D * BF16
    k = v = B * PROMPT * KV * D * BF16
    assert close(row["flops"], flops)
    assert close(row["bytes"], L * (q + k + v + out))
    assert row["weight_bytes"] == 0 and row["comm_bytes"] == 0
    assert close(row["t_compute_s"], flops / H100_BF16_FLOPS)
    assert close(row["t_memory_s"], L * (q + k + v + out) / H100_HBM)
    assert row["bound"] == "compute"          # 555.7 GFLOP / 989 TFLOPS = 562 us > 1.34 GB / 3.35 TB/s = 401 us


def test_fused_attention_kernel_decode(fused):
    """Decode at context 1280: FLOPs = 32 x 2 x 32 x 1280 x 517 = 1,355,284,480; bytes per layer
    = q + out (2 x 32 x 128 x 2 B each) + K and V history (2 x 1280 x 8 x 128 x 2 B each)."""
    row = op(fused, "decode", f"flash_attention@{ATTN}/scores")
    flops = L * B * HEADS * C * (2 * D + 5 + 2 * D)
    assert flops == 1_355_284_480
    per_layer = 2 * (B * HEADS * D * BF16) + 2 * (B * C * KV * D * BF16)
    assert close(row["flops"], flops)
    assert close(row["bytes"], L * per_layer)
    assert close(row["t_memory_s"], L * per_layer / H100_HBM)
    assert row["bound"] == "memory"


def test_unfused_attention_writes_the_score_matrix(unfused):
    """Without fusion the [heads, queries, keys] scores are written to HBM (the dense matrix a
    non-flash kernel materialises: 32 heads x 1024 x 1024 per request) and read back by softmax."""
    dense = B * HEADS * PROMPT * PROMPT * BF16
    q = B * PROMPT * HEADS * D * BF16
    k = B * PROMPT * KV * D * BF16
    assert close(op(unfused, "prefill", f"{ATTN}/scores")["bytes"], L * (q + k + dense))
    assert close(op(unfused, "prefill", f"{ATTN}/probs")["bytes"], L * 2 * dense)


def test_sliding_window_pairs_gpt_oss():
    """gpt-oss-20b: 12 sliding layers (window 128) and 12 full ones, 64 heads of 64, one request.
    Prompt 1024: sliding pairs 128 x 129 / 2 + 896 x 128 = 122,944, full pairs 524,800;
    decode at 1280: 128 keys in a sliding layer, 1280 in a full one."""
    c = hf_config("openai/gpt-oss-20b")
    heads, d, w = c["num_attention_heads"], c["head_dim"], c["sliding_window"]
    layers = {kind: c["layer_types"].count(f"{kind}_attention") for kind in ("sliding", "full")}
    d20 = deploy("gpt-oss-20b", "H100", Scenario(1, PROMPT, GEN), tp=1)
    pairs = {"prefill": {"sliding": window_pairs(PROMPT, w), "full": causal_pairs(PROMPT)},
             "decode": {"sliding": min(C, w), "full": C}}
    for phase in ("prefill", "decode"):
        for kind in ("sliding", "full"):
            p = pairs[phase][kind]
            uid = f"main/layers[{kind}]/self_attn"
            assert close(op(d20, phase, f"{uid}/scores")["flops"], layers[kind] * 2 * heads * p * d), (phase, kind)
            assert close(op(d20, phase, f"{uid}/probs")["flops"], layers[kind] * 5 * heads * p), (phase, kind)
            assert close(op(d20, phase, f"{uid}/attn")["flops"], layers[kind] * 2 * heads * p * d), (phase, kind)


def test_long_context_prefill_attention_share():
    """A 32K prompt (one request, one H100): the fused kernel's FLOPs are 32 layers x 32 heads x
    32768 x 32769 / 2 pairs x 517 = 2.84e14, compute bound, so its SOL time is FLOPs / 989 TFLOPS
    = 287 ms. The apply term is 256 / 517 of it: without its factor 2 the kernel
    would be 25% faster. Chunked prefill (8,192 tokens per step, docs/deployment.md) runs the
    prompt in 32768 / 8192 = 4 steps; the op table is one (mean) step, a quarter of it."""
    n = 32768
    d = deploy("Llama-3.1-8B", "H100", Scenario(1, n, 16), framework="vllm", tp=1)
    row = op(d, "prefill", f"flash_attention@{ATTN}/scores")
    steps = n // 8192
    assert d.summary["prefill_steps"] == steps
    attention = L * HEADS * causal_pairs(n) * (2 * D + 5 + 2 * D)
    assert close(row["flops"] * steps, attention)
    assert close(row["t_sol_s"] * steps, attention / H100_BF16_FLOPS)
