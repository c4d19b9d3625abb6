"""Serving rules by hand, where two candidate rules give different numbers (issue 36).

Each test sits at the point where the rule and its plausible misreading part: more than one MTP
module, a batch that is not a multiple of the DP-attention degree, two different GPU types, four
nodes under a tree all-reduce, pipeline and context parallelism under the runtime reserve. The
expectations come from the published config.json files (corpus/snapshots/), the GPU files'
figures (gpus/*.yaml, gpus/collectives/nccl.yaml) and the fusion tables' cited reserves, worked
out in each docstring; never from the engine's own output.
"""
from __future__ import annotations

import math

import pytest

from engine.deploy import Scenario
from tests.conftest import hf_config
from tests.deploy_helpers import close, deploy, op
from tests.test_disagg import _split
from tests.test_mtp_decoding import _deploy as mtp_deploy

BF16 = 2
MIB, GIB = 2 ** 20, 2 ** 30
US = 1e-6
# gpus/collectives/nccl.yaml (NCCL's tuner, LL): base latency ring / tree, one hop on NVLink, on the network
BASE_RING, BASE_TREE, NVL, NET_RING, NET_TREE = 6.6 * US, 6.8 * US, 0.6 * US, 2.7 * US, 5.0 * US
H100_NVLINK = 900e9 / 2      # gpus/h100-sxm.yaml scale_up gb_s 900 (both directions), domain 8
H100_NIC = 50e9              # gpus/h100-sxm.yaml scale_out gb_s 50 (NDR 400 Gb/s)
B300_NIC = 100e9             # gpus/b300.yaml scale_out gb_s 100 (ConnectX-8 800 Gb/s)


# -- MTP drafting with several modules ---------------------------------------------------------------

MIMO = hf_config("XiaomiMiMo/MiMo-V2-Flash")
MIMO_H, MIMO_VOCAB = MIMO["hidden_size"], MIMO["vocab_size"]        # 4096, 152,576
MIMO_MTP_MODULES = 3     # vLLM's / SGLang's MiMo-V2-Flash MTP code (the config does not count them)


@pytest.mark.parametrize("k", [1, 3])
def test_a_draft_pass_runs_one_mtp_module(k):
    """MiMo-V2-Flash has three MTP modules; drafting k tokens runs k passes of ONE module each
    (draft i uses module i, as vLLM's and SGLang's drafters do), not k passes of all three. One
    request (batch 1), so per decode step:

    * eh_proj (a BF16 [2h -> h] linear per module): k x 2 x (2 x 4096) x 4096 = k x 67,108,864 FLOPs
      and k x 2 x 4096 x 4096 x 2 B = k x 67,108,864 B of weights read;
    * the shared head (h -> vocab, BF16), once per draft: k x 2 x 4096 x 152,576 FLOPs.

    Running every module per pass would triple each (the issue's 20% on TPOT)."""
    assert MIMO_H == 4096 and MIMO_VOCAB == 152_576
    d = mtp_deploy("XiaomiMiMo/MiMo-V2-Flash", "B200", mtp_tokens=k, mtp_acceptance=0.8)
    eh = op(d, "decode", "mtp/layers[mtp]/eh_proj")
    assert eh["flops"] == k * 2 * (2 * MIMO_H) * MIMO_H == k * 67_108_864
    assert eh["weight_bytes"] == k * (2 * MIMO_H) * MIMO_H * BF16
    head = op(d, "decode", "mtp/layers[mtp]/lm_head")
    assert head["flops"] == k * 2 * MIMO_H * MIMO_VOCAB
    assert head["weight_bytes"] == k * MIMO_H * MIMO_VOCAB * BF16
    # at k = 3 the drafts read each of the three modules' eh_proj once: the whole stack's, not 3 x it
    assert k <= MIMO_MTP_MODULES


# -- DP-attention in decode: whole requests per rank -----------------------------------------------------

DSV3 = hf_config("deepseek-ai/DeepSeek-V3")
DS_LAYERS, DS_DENSE = DSV3["num_hidden_layers"], DSV3["first_k_dense_replace"]          # 61, 3
DS_HEADS = DSV3["num_attention_heads"]                                                  # 128
DS_LATENT = DSV3["kv_lora_rank"] + DSV3["qk_rope_head_dim"]                             # 512 + 64


@pytest.mark.parametrize("batch,per_rank", [(1, 1), (9, 2)])
def test_dp_attention_decode_holds_whole_requests_per_rank(batch, per_rank):
    """DeepSeek-V3 on 8 H200, TP 8 with DP-attention 8 (attention TP 1) and EP 8, decoding at
    8192 + 1024 = 9216 tokens of context. Each attention replica holds whole requests: with
    ``batch`` requests the fullest holds ceil(batch / 8) of them (1 at batch 1, 2 at batch 9), and
    the step takes as long as that rank. Spreading the batch evenly (batch / 8 = 0.125 or 1.125
    requests per rank) is the misreading.

    * absorbed MLA scores on the fullest rank, per MoE layer (61 - 3 = 58 of them): all 128 heads
      against the 576-wide latent + rope key of every context token:
      per_rank x 2 x 128 x 576 x 9216 FLOPs;
    * KV per GPU: per_rank x 61 layers x 576 x 2 B x 9216 (the MLA latent is not split over
      attention TP, so the rank keeps its requests' whole cache)."""
    ctx = 8192 + 1024
    d = deploy("DeepSeek-V3", "H200", Scenario(batch, 8192, 1024), tp=8, ep=8, dp_attn=8)
    scores = op(d, "decode", "main/layers[moe]/self_attn/scores@decode")
    assert scores["flops"] == (DS_LAYERS - DS_DENSE) * per_rank * 2 * DS_HEADS * DS_LATENT * ctx
    assert per_rank == -(-batch // 8)          # whole requests: the fullest of 8 ranks holds ceil(B / 8)
    s = d.summary
    assert s["kv_bytes_per_gpu"] == per_rank * DS_LAYERS * DS_LATENT * BF16 * ctx
    assert s["kv_bytes_per_gpu"] == per_rank * 647_626_752


# -- heterogeneous disaggregation: the slower NIC ----------------------------------------------------

L8 = hf_config("meta-llama/Meta-Llama-3.1-8B")
L8_KV_PER_TOKEN = (L8["num_hidden_layers"] * L8["num_key_value_heads"]
                   * (L8["hidden_size"] // L8["num_attention_heads"]) * 2 * BF16)   # 32 x 8 x 128 x K,V x 2 B


@pytest.mark.parametrize("prefill,decode", [("H100 tp1", "B300 tp1"), ("B300 tp1", "H100 tp1")])
def test_kv_transfer_between_two_gpu_types_takes_the_slower_nic(prefill, decode):
    """Llama-3.1-8B, one H100 prefilling and one B300 decoding (and the other way round), 2048-token
    prompts. Two GPU types never share a scale-up domain, so the KV crosses the network, and a
    send is as fast as the slower end: the H100's 50 GB/s NIC, not the B300's 100 GB/s.
    KV of a request: 32 x 8 x 128 x 2 x 2 B x 2048 = 268,435,456 B (TP 1: one GPU sends it all);
    time = base + one network hop + bytes / 50e9 = 9.3 us + 5.36871 ms."""
    r = _split("Llama-3.1-8B", prefill, decode, 1, 8, 2048, 256)
    assert r["kv_link_bytes"] == L8_KV_PER_TOKEN * 2048 == 268_435_456
    assert r["total_gpus"] == 2 and r["kv_link"] == "scale_out"
    assert close(r["kv_transfer_s"], BASE_RING + NET_RING + 268_435_456 / min(H100_NIC, B300_NIC))
    assert close(r["kv_transfer_s"], 0.00537800912)


# -- boundaries: exactly one scale-up domain -----------------------------------------------------------

def test_pools_filling_exactly_one_domain_stay_on_nvlink():
    """Llama-3.1-8B, an H100 TP4 prefill replica (8 prompts of 2048 at once) and an H100 TP4 decode
    replica (1 request, 256 tokens): one prefill replica out-runs the decode one, so 4 + 4 = 8 GPUs,
    exactly the H100's NVLink domain of 8. "Fits in one domain" is total <= domain, so the KV moves
    over NVLink: each GPU sends its 2 of the 8 KV heads, 268,435,456 / 4 = 67,108,864 B, in
    base + one NVLink hop + bytes / 450e9 = 7.2 us + 149.13 us."""
    r = _split("Llama-3.1-8B", "H100 tp4", "H100 tp4", 8, 1, 2048, 256)
    assert r["prefill_replicas"] == r["decode_replicas"] == 1 and r["total_gpus"] == 8
    assert r["kv_link"] == "scale_up"
    assert r["kv_link_bytes"] == L8_KV_PER_TOKEN * 2048 / 4 == 67_108_864
    assert close(r["kv_transfer_s"], BASE_RING + NVL + 67_108_864 / H100_NVLINK)


def test_an_sla_met_exactly_is_met():
    """sizing's rule: a point meets the SLA when ttft <= bound and tpot <= bound. Three points
    (1 GPU each, batch 4, output 100): exactly at both bounds (met), 1 ulp over the TPOT bound,
    1 ulp over the TTFT bound (not met). requests/s of one replica = 4 / (ttft + 100 x tpot)."""
    import numpy as np
    from engine.serving.sizing import SLA, _load
    ttft, tpot = 0.5, 0.02
    p = {"batch": np.array([4, 4, 4]), "n_gpus": np.array([1, 1, 1]),
         "ttft_s": np.array([ttft, ttft, math.nextafter(ttft, 1)]),
         "tpot_s": np.array([tpot, math.nextafter(tpot, 1), tpot])}
    out = _load(p, SLA(ttft, tpot), 100)
    assert out["meets_sla"].tolist() == [True, False, False]
    assert out["requests_per_s"][0] == pytest.approx(4 / (0.5 + 100 * 0.02))          # 1.6


# -- beyond two nodes: the tree all-reduce ---------------------------------------------------------------

def test_tree_all_reduce_latency_over_four_nodes():
    """Llama-3.1-70B TP 32 on H100: four 8-GPU nodes. NCCL's tree all-reduce climbs log2(nodes) = 2
    network levels up and 2 down (N - 1 = 3 would be a chain, not a tree; the two agree at 2 nodes
    only): tree = 6.8 + 2 x ((32 / 4 - 1) x 0.6 + log2(4) x 5.0) = 35.2 us, cheaper than the ring
    6.6 + (2 x 31 - 2 x 3) x 0.6 + 2 x 3 x 2.7 = 56.4 us. Decode of 4 requests: per layer the
    o_proj all-reduce moves 2 x 31/32 x 4 x 8192 x 2 B; 80 layers over the 50 GB/s NIC."""
    c = hf_config("meta-llama/Meta-Llama-3.1-70B")
    layers, hidden = c["num_hidden_layers"], c["hidden_size"]
    tree = BASE_TREE + 2 * ((32 // 4 - 1) * NVL + math.log2(4) * NET_TREE)
    ring = BASE_RING + (2 * 31 - 2 * 3) * NVL + 2 * 3 * NET_RING
    assert tree == pytest.approx(35.2 * US) and ring == pytest.approx(56.4 * US)
    d = deploy("Llama-3.1-70B", "H100", Scenario(4, 1000, 24), tp=32)
    row = op(d, "decode", "main/layers[block]/self_attn/o_proj>all_reduce[tp]")
    nbytes = layers * 2 * 31 / 32 * 4 * hidden * BF16
    assert row["comm_bytes"] == nbytes == 10_158_080 and row["link"] == "scale_out"
    assert close(row["t_comm_s"], layers * min(tree, ring) + nbytes / H100_NIC)
    assert close(row["t_comm_s"], 80 * 35.2e-6 + 203.1616e-6)


# -- the runtime reserve under pipeline and context parallelism ------------------------------------------

@pytest.mark.parametrize("framework,config,mib", [
    # vLLM (corpus/fusion/vllm.yaml): 0.13 GiB non-torch + 0.42 GiB collective buffers once a replica
    # spans two GPUs, whatever the split: TP 1 x PP 2 and TP 1 x CP 2 are two-GPU replicas
    ("vllm", dict(tp=1, pp=2), 0.55 * 1024),
    ("vllm", dict(tp=1, cp=2), 0.55 * 1024),
    # SGLang (corpus/fusion/sglang.yaml): 512 + 512 + tp x pp / 8 x 1024 MiB (server_args.py's
    # reserved_mem): tp 2 x pp 2 -> 512 MiB of parallel buffers; tp 1 x pp 2 -> 256; CP is not in it
    ("sglang", dict(tp=2, pp=2), 512 + 512 + 2 * 2 * 128),
    ("sglang", dict(tp=1, pp=2), 512 + 512 + 1 * 2 * 128),
    ("sglang", dict(tp=1, cp=2), 512 + 512 + 1 * 1 * 128),
])
def test_runtime_reserve_under_pipeline_and_context_parallelism(framework, config, mib):
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, 4096, 1024), framework=framework, **config).summary
    assert s["reserve_bytes_per_gpu"] == pytest.approx(mib * MIB, rel=1e-12)


# -- on_front: the steady state's front, rows it does not serve ignored -----------------------------------

def test_grid_front_is_the_steady_states_and_ignores_rows_it_does_not_serve():
    """A grid of one (GPU, framework, KV dtype, prompt, output) group, by hand. The front is the
    steady state's (engine.serving.steady.FRONT_BASIS): tokens/s/user = 1 / tpot_mean_s, tokens/s/GPU
    = batch / tpot_mean_s / n_gpus, over the decode rows fits_steady serves; the worst case (fits,
    tpot_s at the last token) decides nothing. Rows (phase, batch, GPUs, tpot_mean_s, tpot_s,
    fits_steady, fits) -> steady (user, GPU):

    0  decode   10 x 1  0.1    0.1    served      fits      -> (10,  100)
    1  decode    5 x 2  0.05   0.05   served      fits      -> (20,   50)
    2  decode   80 x 1  0.025  0.025  NOT served  fits      -> (40, 3200): it would dominate all
       were it served (a short output's page rounding can make the steady capacity the smaller)
    3  decode   12 x 1  0.2    0.2    served      fits      -> ( 5,   60)
    4  prefill 100 x 1  0.02   0.02   served      fits      -> a prefill row: never on the front
    5  decode  300 x 1  0.1    0.3    served      NOT fits  -> (10, 3000): past the worst-case
       capacity, served by the steady state: on the front (the most tokens/s/GPU)
    6  decode   10 x 1  0.01   0.5    served      fits      -> (100, 1000): the fastest user; at
       its last-token TPOT it would be (2, 20), dominated by every row above
    7  decode, other output length: its own group, alone, so on its front.

    Served rows of the first group: 0 (10, 100), 1 (20, 50), 3 (5, 60), 5 (10, 3000), 6 (100,
    1000). Row 6 is the fastest user, row 5 the most tokens/s/GPU; 0 and 3 are dominated by 5, 1 by
    6. So the flags are 5, 6 and 7. Planted bugs caught: the front served by ``fits`` (row 5 drops,
    row 2 comes on), or timed by ``tpot_s`` (row 6 falls off, rows 0 and 1 come on)."""
    import polars as pl
    from engine.serving.fronts import grid_front
    base = {"gpu": "H100", "framework": "vllm", "kv_dtype": "bf16", "input_len": 1024, "output_len": 256}
    rows = [("decode", 10, 1, 0.1, 0.1, True, True), ("decode", 5, 2, 0.05, 0.05, True, True),
            ("decode", 80, 1, 0.025, 0.025, False, True), ("decode", 12, 1, 0.2, 0.2, True, True),
            ("prefill", 100, 1, 0.02, 0.02, True, True), ("decode", 300, 1, 0.1, 0.3, True, False),
            ("decode", 10, 1, 0.01, 0.5, True, True)]
    table = [{**base, "phase": ph, "batch": b, "n_gpus": n, "tpot_mean_s": mean, "tpot_s": last,
              "fits_steady": steady, "fits": worst} for ph, b, n, mean, last, steady, worst in rows]
    table.append({**base, "output_len": 512, "phase": "decode", "batch": 1, "n_gpus": 1, "tpot_mean_s": 1.0,
                  "tpot_s": 1.0, "fits_steady": True, "fits": True})
    # by hand, (user, GPU) of the served decode rows of the first group: 0 (10, 100), 1 (20, 50),
    # 3 (5, 60), 5 (10, 3000), 6 (100, 1000). Row 6 is the fastest user; row 5 the most tokens/s/GPU
    # (3000 > 1000); 0 is dominated by 5 (same user speed, 100 < 3000); 1 (20, 50) by 6; 3 by 5.
    flags = grid_front(pl.DataFrame(table)).to_list()
    assert flags == [False, False, False, False, False, True, True, True]


# -- the formula interpreter on negative operands ---------------------------------------------------------

@pytest.mark.parametrize("a,b,value", [(-7, 3, 2), (7, -3, -2), (-7, -3, -1), (7, 3, 1), (-6, 3, 0)])
def test_formula_mod_is_floor_mod(a, b, value):
    """sympy's Mod (and Python's %) takes the sign of the divisor: -7 mod 3 = -7 - 3 x floor(-7/3)
    = -7 + 9 = 2, where C's fmod and JavaScript's % give -1."""
    import sympy
    from engine.language import formula_tree as ft
    x = sympy.Symbol("x")
    assert ft.evaluate(["mod", a, b], {}) == value
    assert ft.evaluate(ft.to_tree(sympy.Mod(x, b)), {"x": a}) == value == sympy.Mod(a, b) == a % b


@pytest.mark.parametrize("ttft_bound,tpot_bound,met", [
    (1.0, 2.0 ** -6, True),                                   # both bounds met exactly
    (1.0, math.nextafter(2.0 ** -6, 0), False),               # TPOT 1 ulp over its bound
])
def test_a_disaggregated_split_meeting_the_bounds_exactly_is_met(ttft_bound, tpot_bound, met):
    """pair_points on made-up pools with round figures: GPU types "P" (50 GB/s NIC) and "D" (100 GB/s),
    no latency model (alpha 0). One prefill point: TP 1, 4 prompts in 0.5 s (8 requests/s); one
    decode point: TP 1, 2 requests at TPOT 2**-6 s over 64 tokens (2 / (64 x 2**-6) = 2 requests/s),
    so one replica of each. KV share 25e9 B per GPU over the slower NIC: 25e9 / 50e9 = 0.5 s, TTFT
    0.5 + 0.5 = 1.0 s. Bounds are ``<=``: TTFT 1.0 and TPOT 2**-6 meet them."""
    import dataclasses

    import numpy as np
    from engine.deploy.hardware import Figure, load_gpus
    from engine.deploy.parallel import ParallelConfig
    from engine.serving.sizing import SLA, GPUSearch
    from engine.serving.pairing import pair_points
    h100 = load_gpus()["H100"]
    pgpu = dataclasses.replace(h100, key="P", scale_out=Figure(50), collectives=None, price_usd_per_hour=None)
    dgpu = dataclasses.replace(h100, key="D", scale_out=Figure(100), collectives=None, price_usd_per_hour=None)
    one = ParallelConfig()
    pres = GPUSearch("P", pool_configs=[one], kv_share={one: 25e9},
                     prefill={"config": np.array([0]), "batch": np.array([4]), "ttft_s": np.array([0.5])})
    dres = GPUSearch("D", configs=[one], kv_share={one: 25e9},
                     points={"config": np.array([0]), "batch": np.array([2]), "tpot_s": np.array([2.0 ** -6]),
                             "n_gpus": np.array([1])})
    p = pair_points(pgpu, dgpu, pres, dres, 25e9, 64, SLA(ttft_bound, tpot_bound))
    assert p["kv_link"].tolist() == ["scale_out"] and p["kv_transfer_s"].tolist() == [0.5]
    assert p["ttft_s"].tolist() == [1.0] and p["tpot_s"].tolist() == [2.0 ** -6]
    assert p["total_gpus"].tolist() == [2] and p["requests_per_s"].tolist() == [2.0]
    assert p["meets_sla"].tolist() == [met]
