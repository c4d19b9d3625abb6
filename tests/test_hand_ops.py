"""FLOPs of the ops the other hand tests leave, derived by hand from the published configs.

Each expectation is written from the model's config.json (``tests.conftest.hf_config``) and the
per-element costs of the op registry's doc lines, never read back from the engine:

* gated MLP (``glu``): ``act(gate) x up`` per element, the activation's cost (SiLU: 4) plus the
  product (1): ``5 x tokens x intermediate`` per layer;
* MLA's absorbed decode (``head_linear``, DeepSeek-V3 inference/model.py ``attn_impl ==
  "absorb"``): the query's no-RoPE part times ``W_UK`` per head, ``[heads, qk_nope] x [qk_nope,
  kv_lora]``, and the latent output times ``W_UV``, ``[heads, kv_lora] x [kv_lora, v_head]``: one
  multiply-add (2 FLOPs) per (token, head, in, out);
* DSA's indexer (``weighted_head_sum``, DeepSeek-V3.2): the per-head index scores summed with the
  token's head weights, one multiply-add per (token, key, index head): ``2 x index_n_heads x
  pairs``; its top-k one comparison per score: ``pairs``;
* DeepSeek-V4's compressor (``compress_pool``, inference/model.py ``Compressor``): per token and
  channel of its projected width, the gate plus the position bias (1), the softmax over the
  window (5: max, subtract, exp, sum, divide) and the weighted sum (2): ``8 x tokens x width``,
  the width ``2 x head_dim`` with CSA's overlapping windows (ratio 4).

Each test names the planted bug it catches (benchmarks/mutants.py).
"""
from __future__ import annotations

from engine.deploy import Scenario
from tests.conftest import hf_config
from tests.deploy_helpers import close, deploy, op

B, PROMPT, GEN = 2, 1024, 256


def causal_pairs(n: int) -> int:
    return n * (n + 1) // 2


def test_gated_mlp_counts_the_gate_product():
    """Llama-3.1-8B, a 1024-token prompt for 2 requests: SiLU (4) and the product (1) per element of
    the 14,336-wide intermediate, 32 layers x 2,048 tokens x 14,336 x 5 = 4,697,620,480 FLOPs
    (mutant glu-no-product: the product left out, 4 per element)."""
    c = hf_config("meta-llama/Meta-Llama-3.1-8B")
    d = deploy("Llama-3.1-8B", "H100", Scenario(B, PROMPT, GEN), tp=1)
    want = c["num_hidden_layers"] * B * PROMPT * c["intermediate_size"] * (4 + 1)
    assert want == 4_697_620_480
    assert close(op(d, "prefill", "main/layers[block]/mlp/act")["flops"], want)


def test_mla_absorbed_decode_matmuls_per_head():
    """DeepSeek-V3 decode on one GPU, 2 requests: each of the 3 dense layers multiplies every head's
    128-wide no-RoPE query by W_UK into the 512-wide latent, and the latent output by W_UV back to
    128: 3 x 2 x 2 tokens x 128 heads x 128 x 512 = 100,663,296 FLOPs each (mutant
    head-linear-mac-once: one FLOP per multiply-add)."""
    c = hf_config("deepseek-ai/DeepSeek-V3")
    dense, heads = c["first_k_dense_replace"], c["num_attention_heads"]
    d = deploy("DeepSeek-V3", "H100", Scenario(B, PROMPT, GEN), tp=1)
    q_absorb = dense * 2 * B * heads * c["qk_nope_head_dim"] * c["kv_lora_rank"]
    out_absorb = dense * 2 * B * heads * c["kv_lora_rank"] * c["v_head_dim"]
    assert q_absorb == out_absorb == 100_663_296
    layer = "main/layers[dense]/self_attn/"
    assert close(op(d, "decode", layer + "q_absorb")["flops"], q_absorb)
    assert close(op(d, "decode", layer + "attn@decode")["flops"], out_absorb)


def test_dsa_indexer_head_sum_and_topk():
    """DeepSeek-V3.2, a 1024-token prompt for 2 requests on one GPU: the indexer scores every causal
    pair (524,800 per request) with 64 index heads; the weighted head sum is 3 dense layers x 2 x 2
    x 64 x 524,800 = 403,046,400 FLOPs and the top-k 3 x 2 x 524,800 = 3,148,800 (mutant
    head-sum-mac-once: one FLOP per multiply-add)."""
    c = hf_config("deepseek-ai/DeepSeek-V3.2")
    dense = c["first_k_dense_replace"]
    d = deploy("DeepSeek-V3.2", "H100", Scenario(B, PROMPT, GEN), tp=1)
    pairs = causal_pairs(PROMPT)
    head_sum = dense * 2 * B * c["index_n_heads"] * pairs
    assert head_sum == 403_046_400
    layer = "main/layers[dense]/self_attn/"
    assert close(op(d, "prefill", layer + "index_sum")["flops"], head_sum)
    assert close(op(d, "prefill", layer + "selected")["flops"], dense * B * pairs)


def test_deepseek_v4_compressor_pool_per_token_and_channel():
    """DeepSeek-V4-Flash, a 1024-token prompt for 2 requests: layer 2 is the one CSA layer with hash
    routing (compress_ratios[2] = 4, layer < num_hash_layers = 3), whose compressor pools 2 x
    head_dim = 1,024 channels (overlapping windows) and whose indexer's pools 2 x index_head_dim =
    256: 8 x 2,048 tokens x 1,024 = 16,777,216 and 8 x 2,048 x 256 = 4,194,304 FLOPs (mutant
    compress-pool-no-softmax: the window's softmax left out, 3 per element)."""
    c = hf_config("deepseek-ai/DeepSeek-V4-Flash")
    ratios = c["compress_ratios"][:c["num_hidden_layers"]]
    csa_hash = [i for i, r in enumerate(ratios) if r == 4 and i < c["num_hash_layers"]]
    assert csa_hash == [2]
    d = deploy("DeepSeek-V4-Flash", "H100", Scenario(B, PROMPT, GEN), tp=1)
    tokens = B * PROMPT
    kv_pool = len(csa_hash) * 8 * tokens * 2 * c["head_dim"]
    index_pool = len(csa_hash) * 8 * tokens * 2 * c["index_head_dim"]
    assert (kv_pool, index_pool) == (16_777_216, 4_194_304)
    layer = "main/layers[csa_hash]/attn/"
    assert close(op(d, "prefill", layer + "compressor_pool")["flops"], kv_pool)
    assert close(op(d, "prefill", layer + "index_pool")["flops"], index_pool)
