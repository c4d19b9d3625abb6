"""A hybrid stack's recurrent states in deployment, by hand: memory per GPU and decode traffic.

Qwen3.5-27B (config text_config): 48 Gated DeltaNet layers, each keeping per request one
[d_k, d_v] float32 state per value head and the causal convolution's last kernel - 1 inputs (BF16),
beside 16 full-attention layers with a K/V cache. Under TP the value heads (and their states) and
the convolution's channels split with their projections; an FP8 KV cache shrinks only the
attention part. A decode step reads and writes each state once per layer (not per context token).
"""
from __future__ import annotations

import pytest

from engine.deploy import Scenario
from tests.conftest import hf_config
from tests.deploy_helpers import close, deploy, op

C = hf_config("Qwen/Qwen3.5-27B")["text_config"]
LINEAR = C["layer_types"].count("linear_attention")
FULL = C["layer_types"].count("full_attention")
HK, HV, DK, DV = (C[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                 "linear_value_head_dim"))
CHANNELS = 2 * HK * DK + HV * DV
KERNEL = C["linear_conv_kernel_dim"]
F32, BF16 = 4, 2
B, PROMPT, GEN = 8, 4096, 512
CTX = PROMPT + GEN
GDN = "main/layers[linear]/self_attn"


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("kv_dtype, kv_bytes", [("bf16", 2), ("fp8", 1)])
def test_state_memory_per_gpu_splits_with_the_heads(tp, kv_dtype, kv_bytes):
    d = deploy("Qwen3.5-27B", "H100", Scenario(B, PROMPT, GEN), kv_dtype=kv_dtype, tp=tp)
    attention = FULL * 2 * C["num_key_value_heads"] * C["head_dim"] * kv_bytes * CTX
    state = LINEAR * (HV * DK * DV * F32 + CHANNELS * (KERNEL - 1) * BF16)
    assert d.summary["kv_bytes_per_request"] == attention + state
    assert close(d.summary["kv_bytes_per_request_per_gpu"], (attention + state) / tp)


@pytest.mark.parametrize("tp", [1, 2])
def test_decode_reads_and_writes_each_state_once(tp):
    """The recurrent step per layer and GPU: q, k (HK/tp heads x DK), v, decay and beta (HV/tp
    heads) read, the output (HV/tp x DV) written, all BF16 activations, plus the float32 state
    read and written: 8 requests x HV/tp x DK x DV x 4 B, twice. Its FLOPs per token and value head
    are the recurrent form's: 7 DK DV + 2 DV + 1, plus L2 norms of q and k (3 DK + 2 each) and the
    query scaling (DK)."""
    d = deploy("Qwen3.5-27B", "H100", Scenario(B, PROMPT, GEN), kv_dtype="fp8", tp=tp)
    row = op(d, "decode", f"{GDN}/core@decode")
    acts = B * (2 * HK * DK + HV * DV + 2 * HV + HV * DV) * BF16 / tp
    state = 2 * B * HV * DK * DV * F32 / tp
    assert close(row["bytes"], LINEAR * (acts + state))
    per_token_head = 7 * DK * DV + 2 * DV + 1 + 2 * (3 * DK + 2) + DK
    assert close(row["flops"], LINEAR * B * HV / tp * per_token_head)
    conv = op(d, "decode", f"{GDN}/conv1d")
    conv_state = 2 * B * CHANNELS * (KERNEL - 1) * BF16 / tp
    conv_weight = CHANNELS * KERNEL * BF16 / tp
    assert close(conv["bytes"], LINEAR * (2 * B * CHANNELS * BF16 / tp + conv_state + conv_weight))


def test_prefill_of_the_linear_layers_grows_linearly_with_the_prompt():
    """The chunked form costs the same per chunk of 64 tokens: 4096 and 8192 token prompts differ
    by exactly a factor of two in the delta rule's FLOPs (attention layers grow quadratically)."""
    a = op(deploy("Qwen3.5-27B", "H100", Scenario(1, 4096, 1)), "prefill", f"{GDN}/core")["flops"]
    b = op(deploy("Qwen3.5-27B", "H100", Scenario(1, 8192, 1)), "prefill", f"{GDN}/core")["flops"]
    assert close(b, 2 * a)
