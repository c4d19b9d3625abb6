"""Collectives by hand: bytes each GPU sends, the link they cross, and the time that implies.

Expectations come from the published configs, the parallel layout and the collective algorithms
(docs/deployment.md), with S the bytes of the tensor a GPU holds (BF16 activations, 2 B):

* ring all-reduce over n GPUs: 2 (n - 1) / n x S;  reduce-scatter: (n - 1) / n x S (S the whole
  tensor);  all-gather: (n - 1) x S (S the local shard);  all-to-all: (n - 1) / n x S;
* ring context parallelism: every GPU receives the cp - 1 other K (and V) blocks: (cp - 1) x S,
  S the local block. Never divided by cp: the whole history reaches every rank;
* Ulysses: sequence -> heads all-to-all of q, k, v before attention and heads -> sequence of the
  output after it, (cp - 1) / cp x S each;
* link: scale-up when every member of the group sits in one scale-up domain, scale-out otherwise.
  Times use the GPU files' figures: H100/H200 NVLink4 900 GB/s both directions -> 450e9 B/s one
  way, GB200-NVL72 NVLink5 1800 -> 900e9 B/s, and 50e9 B/s scale-out (400 Gb/s per GPU);
* time of a collective = calls x alpha + bytes / bandwidth, alpha the per-call latency NCCL's
  tuner assumes (src/graph/tuning.cc, LL protocol, written out below from NCCL's source).
"""
from __future__ import annotations

import math

import pytest

from engine.deploy import Scenario, rules
from engine.language.formula_tree import run_arrays
from tests.conftest import hf_config
from tests.deploy_helpers import close, deploy, op

BF16 = 2
NVLINK4 = 900e9 / 2          # gpus/h100-sxm.yaml, gpus/h200.yaml: scale_up gb_s 900, one direction
NVLINK5 = 1800e9 / 2         # gpus/gb200-nvl72.yaml
SCALE_OUT = 50e9             # scale_out gb_s 50 (NDR / CX-7 400 Gb/s per GPU)

# NCCL's tuner constants (ncclTunerConstantsDefaults, LL protocol), microseconds: base latency of
# ring / tree, and per step on NVLink (both 0.6) and on the network (ring 2.7, tree 5.0).
US = 1e-6
BASE_RING, BASE_TREE = 6.6 * US, 6.8 * US
NVL, NET_RING, NET_TREE = 0.6 * US, 2.7 * US, 5.0 * US


def alpha_all_reduce(n: int, nodes: int = 1) -> float:
    """ncclTopoTuneModel: ring 2 (n - 1) steps (2 (nodes - 1) of them on the network); tree
    2 (n / nodes - 1) NVLink steps and 2 log2(nodes) network ones; NCCL takes the cheaper."""
    ring = BASE_RING + (2 * (n - 1) - 2 * (nodes - 1)) * NVL + 2 * (nodes - 1) * NET_RING
    tree = BASE_TREE + 2 * ((n // nodes - 1) * NVL + math.log2(nodes) * NET_TREE)
    return min(ring, tree)


def alpha_ring(n: int) -> float:
    """all-gather / reduce-scatter on one node: n - 1 ring steps."""
    return BASE_RING + (n - 1) * NVL


def alpha_round(network: bool) -> float:
    """One point-to-point round (all-to-all, send/recv): one ring step, on the slowest link."""
    return BASE_RING + (NET_RING if network else NVL)

C70 = hf_config("meta-llama/Meta-Llama-3.1-70B")
H70, L70 = C70["hidden_size"], C70["num_hidden_layers"]              # 8192, 80
C8 = hf_config("meta-llama/Meta-Llama-3.1-8B")
H8, L8 = C8["hidden_size"], C8["num_hidden_layers"]                   # 4096, 32
HEADS8, KV8 = C8["num_attention_heads"], C8["num_key_value_heads"]    # 32, 8
D8 = H8 // HEADS8                                                     # 128


def comm_rows(deployment, phase: str) -> dict[str, dict]:
    return {r["op_uid"]: r for r in deployment.ops[phase] if r["kind"] == "comm"}


# -- link choice: one node, two nodes, one rack --------------------------------------------------

@pytest.mark.parametrize("gpu,tp,link,bandwidth,alpha", [
    ("H100", 8, "scale_up", NVLINK4, alpha_all_reduce(8)),            # one HGX node of 8: 15.0 us
    ("H100", 16, "scale_out", SCALE_OUT, alpha_all_reduce(16, 2)),    # two nodes of 8: tree, 25.2 us
    ("GB200-NVL72", 16, "scale_up", NVLINK5, alpha_all_reduce(16)),   # 16 of the rack's 72: 24.6 us
])
def test_tp_all_reduce_link_and_time(gpu, tp, link, bandwidth, alpha):
    """Llama-3.1-70B decode, 4 requests: o_proj and down_proj are row-parallel, their [4, 8192]
    BF16 outputs are all-reduced: 80 layers x 2 (n-1)/n x 4 x 8192 x 2 B; time = 80 calls x alpha
    + bytes / link (latency dominates: a 64 KiB message is 0.15 us of NVLink)."""
    d = deploy("Llama-3.1-70B", gpu, Scenario(4, 1000, 24), tp=tp)
    rows = comm_rows(d, "decode")
    expected = L70 * 2 * (tp - 1) / tp * 4 * H70 * BF16
    for uid in ("main/layers[block]/self_attn/o_proj", "main/layers[block]/mlp/down_proj"):
        row = rows[f"{uid}>all_reduce[tp]"]
        assert close(row["comm_bytes"], expected)
        assert row["link"] == link
        assert close(row["t_comm_s"], L70 * alpha + expected / bandwidth)
        assert row["bound"] == "comm" and close(row["t_sol_s"], L70 * alpha + expected / bandwidth)
    assert d.summary["gpus_per_node"] == (72 if gpu == "GB200-NVL72" else 8)


def test_the_deploy_pages_step_program_prices_each_calls_latency():
    """The step program the deploy page runs (engine.deploy.rules.STEP, shipped in index.json) on the
    TP16 case below: 9,830,400 B over the 50 GB/s network and 80 calls of 25.2 us: 196.6 us +
    2,016 us, and the step's SOL time is that comm time when the kernels are shorter (mutant
    comm-no-alpha: the calls' latency left out, 196.6 us)."""
    env = {"flops": 1e9, "peak": 989e12, "bytes": 1e6, "hbm": 3.35e12, "comm": 9_830_400.0, "link": SCALE_OUT,
           "calls": 80.0, "alpha": 25.2e-6, "weights": 0.0, "repeat": 1.0, "times": 1.0}
    got = run_arrays(rules.STEP, env)
    assert got["t_comm"] == pytest.approx(196.608e-6 + 80 * 25.2e-6, rel=1e-12)
    assert got["t_sol"] == pytest.approx(196.608e-6 + 80 * 25.2e-6, rel=1e-12)


def test_tp16_over_two_nodes_literal():
    """The TP16 H100 case in numbers: 80 x 2 x 15/16 x 65,536 B = 9,830,400 B per GPU per all-reduce
    site, 196.6 us at 50 GB/s where one node's NVLink would take 21.8 us; plus 80 calls of NCCL's
    two-node tree, 6.8 + 2 x (7 x 0.6 + 1 x 5.0) = 25.2 us each: 2,016 us."""
    d = deploy("Llama-3.1-70B", "H100", Scenario(4, 1000, 24), tp=16)
    row = comm_rows(d, "decode")["main/layers[block]/self_attn/o_proj>all_reduce[tp]"]
    assert row["comm_bytes"] == 9_830_400
    assert row["t_comm_s"] == pytest.approx(196.608e-6 + 80 * 25.2e-6, rel=1e-12)


def test_expert_parallel_across_nodes_uses_scale_out():
    """DeepSeek-V3 on 16 H200 (two nodes), DP-attention 16 + EP 16, 32 requests decoding: each
    GPU routes its 2 tokens x 8 experts = 16 token-expert pairs; dispatch and combine each send
    15/16 of 16 x 7168 x 2 B per MoE layer (58 of them) over the network, one round of sends per
    layer at 6.6 + 2.7 us."""
    c = hf_config("deepseek-ai/DeepSeek-V3")
    moe_layers = c["num_hidden_layers"] - c["first_k_dense_replace"]
    pairs = 32 / 16 * c["num_experts_per_tok"]
    d = deploy("DeepSeek-V3", "H200", Scenario(32, 1000, 24), tp=16, dp_attn=16, ep=16)
    a2a = [r for r in d.ops["decode"] if r["op"] == "all_to_all"]
    assert len(a2a) == 2
    expected = moe_layers * pairs * c["hidden_size"] * BF16 * 15 / 16
    assert expected == 12_472_320
    for row in a2a:
        assert close(row["comm_bytes"], expected)
        assert row["link"] == "scale_out"
        assert close(row["t_comm_s"], moe_layers * alpha_round(network=True) + expected / SCALE_OUT)


def test_pipeline_across_nodes_tp_inside():
    """Llama-3.1-70B TP8 x PP2 on 16 H100: each TP group is one node (NVLink), the stage boundary
    crosses the network. Decode, 4 requests in 2 micro-batches of 2: the all-reduce is 80 layers
    (a micro-batch's path through both stages) x 2 x 7/8 x 2 x 8192 x 2 B at 450 GB/s; the hidden
    state [2, 8192] crosses one boundary, 32,768 B at 50 GB/s, one send at 6.6 + 2.7 us."""
    d = deploy("Llama-3.1-70B", "H100", Scenario(4, 1000, 24), tp=8, pp=2)
    rows = comm_rows(d, "decode")
    reduce = rows["main/layers[block]/self_attn/o_proj>all_reduce[tp]"]
    assert close(reduce["comm_bytes"], L70 * 2 * 7 / 8 * 2 * H70 * BF16)
    assert reduce["link"] == "scale_up"
    assert close(reduce["t_comm_s"], L70 * alpha_all_reduce(8) + reduce["comm_bytes"] / NVLINK4)
    (send,) = [r for r in rows.values() if r["op"] == "send_recv"]
    assert send["comm_bytes"] == 2 * H70 * BF16 == 32_768
    assert send["link"] == "scale_out" and close(send["t_comm_s"], alpha_round(True) + 32_768 / SCALE_OUT)


# -- reduce-scatter and all-gather ----------------------------------------------------------------

def test_all_gather_and_reduce_scatter_around_feature_split_experts():
    """Qwen3-30B-A3B on 8 H100, DP-attention 8 without EP: each replica holds 16 / 8 = 2 requests,
    the experts are split by features over all 8 GPUs. Tokens are all-gathered before the experts,
    (8 - 1) x [2, 2048] x 2 B = 57,344 B, and the partial expert sums reduce-scattered back to the
    replicas, 7/8 x [16, 2048] x 2 B = 57,344 B; 48 layers, each call 6.6 + 7 x 0.6 us (a ring of
    8). HBM: each reads its input and writes its output (8,192 + 65,536 B)."""
    c = hf_config("Qwen/Qwen3-30B-A3B")
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    d = deploy("Qwen3-30B-A3B", "H100", Scenario(16, 1000, 24), tp=8, dp_attn=8, ep=1)
    rows = comm_rows(d, "decode")
    gather = rows["main/layers[moe]/post_attention_layernorm>all_gather[dp_attn]"]
    scatter = rows["main/layers[moe]/mlp/combine>reduce_scatter[tp]"]
    local, whole = 2 * h * BF16, 16 * h * BF16
    assert close(gather["comm_bytes"], layers * 7 * local) and gather["comm_bytes"] == 48 * 57_344
    assert close(scatter["comm_bytes"], layers * 7 / 8 * whole)
    for row in (gather, scatter):
        assert close(row["bytes"], layers * (local + whole))
        assert row["link"] == "scale_up"
        assert close(row["t_comm_s"], layers * alpha_ring(8) + row["comm_bytes"] / NVLINK4)
    prefill = comm_rows(d, "prefill")            # 16 prompts of 1000 tokens: 2 per replica
    assert close(prefill["main/layers[moe]/post_attention_layernorm>all_gather[dp_attn]"]["comm_bytes"],
                 layers * 7 * 2 * 1000 * h * BF16)
    assert close(prefill["main/layers[moe]/mlp/combine>reduce_scatter[tp]"]["comm_bytes"],
                 layers * 7 / 8 * 16 * 1000 * h * BF16)


# -- context parallel ------------------------------------------------------------------------------

N = 16384                                        # prompt tokens
ATTN = "main/layers[block]/self_attn"


@pytest.mark.parametrize("cp,kv_dtype,link,bandwidth", [
    (4, "bf16", "scale_up", NVLINK4),            # tp 2 x cp 4 = 8 GPUs: one node
    (4, "fp8", "scale_up", NVLINK4),             # FP8 cache: half the bytes on the ring
    (8, "bf16", "scale_out", SCALE_OUT),         # tp 2 x cp 8 = 16 GPUs: the ring spans two nodes
])
def test_ring_context_parallel_kv_bytes(cp, kv_dtype, link, bandwidth):
    """Llama-3.1-8B, TP 2, ring CP, one 16K prompt: each rank holds N / cp tokens of K (and of V),
    4 of the 8 KV heads (TP 2), 128 wide: S = N / cp x 4 x 128 x kv_bytes. It receives the cp - 1
    other blocks: (cp - 1) x S per layer, e.g. cp 4, BF16: 3 x 4096 x 4 x 128 x 2 = 12,582,912 B,
    in cp - 1 send/recv rounds per layer (each on the network once the ring spans two nodes)."""
    kv_bytes = {"bf16": 2, "fp8": 1}[kv_dtype]
    d = deploy("Llama-3.1-8B", "H100", Scenario(1, N, 16), kv_dtype=kv_dtype, tp=2, cp=cp, cp_kind="ring")
    rows = comm_rows(d, "prefill")
    block = N // cp * (KV8 // 2) * D8 * kv_bytes
    for name in ("k_cache", "v_cache"):
        row = rows[f"{ATTN}/{name}>ring_pass[cp]"]
        assert close(row["comm_bytes"], L8 * (cp - 1) * block)
        assert row["link"] == link
        rounds = L8 * (cp - 1) * alpha_round(network=link == "scale_out")
        assert close(row["t_comm_s"], rounds + L8 * (cp - 1) * block / bandwidth)
    if (cp, kv_dtype) == (4, "bf16"):
        assert rows[f"{ATTN}/k_cache>ring_pass[cp]"]["comm_bytes"] == 32 * 12_582_912
    # each rank scores its N / cp queries against the whole history: 1/cp of the causal pairs
    pairs = N * (N + 1) // 2
    assert close(op(d, "prefill", f"{ATTN}/scores")["flops"], L8 * 2 * (HEADS8 // 2) * pairs / cp * D8)


def test_ulysses_moves_queries_keys_values_to_heads():
    """Ulysses, TP 2 x CP 4: before attention q ([4096 tokens, 16 heads, 128], 16 MiB per rank),
    k and v ([4096, 4 heads, 128], 4 MiB) go sequence -> heads: 3/4 of each per layer."""
    d = deploy("Llama-3.1-8B", "H100", Scenario(1, N, 16), tp=2, cp=4, cp_kind="ulysses")
    rows = comm_rows(d, "prefill")
    q = N // 4 * (HEADS8 // 2) * D8 * BF16
    kv = N // 4 * (KV8 // 2) * D8 * BF16
    assert close(rows[f"{ATTN}/q_rope>all_to_all[cp]"]["comm_bytes"], L8 * 3 / 4 * q)
    assert close(rows[f"{ATTN}/k_cache>all_to_all[cp]"]["comm_bytes"], L8 * 3 / 4 * kv)
    assert close(rows[f"{ATTN}/v_cache>all_to_all[cp]"]["comm_bytes"], L8 * 3 / 4 * kv)
    assert all(r["link"] == "scale_up" for r in rows.values())


def test_ulysses_returns_the_output_to_the_sequence_split():
    """After attention Ulysses moves the output back, heads -> sequence, with one all-to-all:
    [16K tokens, 32 / (2 x 4) = 4 heads, 128] x 2 B = 16 MiB per rank, 3/4 of it sent. o_proj then
    runs row-parallel on the rank's 4096 tokens, exactly as under ring CP: 2 x 4096 x (4096 / 2) x
    4096 FLOPs per layer and an all-reduce over TP 2 of [4096, 4096] x 2 B (2 x 1/2 x 32 MiB).
    docs/deployment.md: "ulysses (all-to-all sequence <-> heads around attention)"."""
    d = deploy("Llama-3.1-8B", "H100", Scenario(1, N, 16), tp=2, cp=4, cp_kind="ulysses")
    o_proj = op(d, "prefill", f"{ATTN}/o_proj")
    assert close(o_proj["flops"], L8 * 2 * (N // 4) * (H8 // 2) * H8), \
        f"o_proj computes {o_proj['flops'] / (L8 * 2 * (N // 4) * (H8 // 2) * H8):g}x the rank's tokens"
    rows = comm_rows(d, "prefill")
    assert close(rows[f"{ATTN}/o_proj>all_reduce[tp]"]["comm_bytes"], L8 * 2 * 1 / 2 * (N // 4) * H8 * BF16)
    out = N * (HEADS8 // 8) * D8 * BF16
    back = [r for uid, r in rows.items() if uid.startswith(f"{ATTN}/attn") and r["op"] == "all_to_all"]
    assert len(back) == 1 and close(back[0]["comm_bytes"], L8 * 3 / 4 * out), sorted(rows)
    assert not [uid for uid, r in rows.items() if r["op"] == "all_gather"], sorted(rows)
