"""The expert all-to-all as DeepEP runs it, by hand (engine.deploy.expert_comm, engine.deploy.transport).

DeepSeek-V3 (corpus/snapshots/deepseek-ai--DeepSeek-V3.config.json): hidden 7168, 256 routed
experts, 8 per token, n_group 8, topk_group 4, 61 layers of which the first 3 are dense: 58 MoE
layers. EP32 over 4 nodes of 8 H100: R = 32 GPUs, N = 4 nodes, 8 experts per GPU, 64 per node,
32 per group (so a node holds 2 whole groups, a GPU a quarter of one).

DeepEP (github.com/deepseek-ai/DeepEP docs/legacy.md): normal kernels (prefill) send a token over
RDMA once per destination node and fan it out over NVLink inside the node; low-latency kernels
(decode) send one message per (token, expert), pure RDMA to other nodes (NVLink to same-node
peers). Dispatch FP8 e4m3 + one fp32 scale per 128 elements: 7168 + 7168 / 128 x 4 = 7392 B per
token copy; combine BF16: 14,336 B per copy. H100: RDMA 50 GB/s per GPU, NVLink 450 GB/s per
direction (gpus/h100-sxm.yaml).

Expected destination nodes of a token, derived without the engine's formula:

* uniform routing (no node limit): a node misses the token iff all 8 experts fall among the other
  192 of 256: the chance of that, drawing 8 without replacement, is the product
  192/256 x 191/255 x ... x 185/249; a node is reached with 1 minus that, and by symmetry the
  expected number of *other* nodes reached is 3 times it;
* node-limited (the token picks 4 of the 8 groups, then its experts inside them; a chosen group
  is counted as reached): a node holds 2 groups; it is missed iff both are among the 4 unchosen,
  C(6, 4) / C(8, 4) = 15 / 70 of the choices; reached with 55/70 = 11/14; expected nodes
  4 x 11/14 = 22/7 = 3.14 (at most topk_group = 4), other nodes 3 x 11/14 = 33/14;
* NVLink (normal kernels): a token reaches each destination GPU once; in each node the GPU of
  the sender's local rank (the RDMA receiver, in the sender's node the sender) forwards to the
  others, so the NVLink copies are the reached GPUs but one per node: (32 - 4) x p(GPU). Without
  the node limit p(GPU) = 1 - 248/256 x ... x 241/249; with it a GPU is reached iff its group is
  chosen (4/8) and one of the 8 experts, drawn from the 128 of the 4 chosen groups, is among its 8:
  p = 1/2 x (1 - 120/128 x ... x 113/121).
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
import sympy

from engine.deploy import Options, Scenario, plan
from engine.deploy.expert_comm import A2APolicy, Routing, copies, link_bytes, p_reached
from engine.deploy.parallel import ParallelConfig
from tests.conftest import _evaluation, hf_config
from tests.deploy_helpers import GPUS, TABLES, close, model_id

C = hf_config("deepseek-ai/DeepSeek-V3")
HIDDEN, E, K = C["hidden_size"], C["n_routed_experts"], C["num_experts_per_tok"]       # 7168, 256, 8
N_GROUP, TOPK_GROUP = C["n_group"], C["topk_group"]                                      # 8, 4
MOE_LAYERS = C["num_hidden_layers"] - C["first_k_dense_replace"]                          # 58
FP8_COPY = HIDDEN + HIDDEN // 128 * 4        # 7392 B: FP8 payload and its fp32 scales
BF16_COPY = HIDDEN * 2                       # 14,336 B
RDMA, NVLINK = 50e9, 900e9 / 2


def miss(total: int, away: int, k: int) -> Fraction:
    """Chance that k experts drawn without replacement from ``total`` all avoid ``away`` of them."""
    out = Fraction(1)
    for i in range(k):
        out *= Fraction(total - away - i, total - i)
    return out


P_NODE_UNIFORM = 1 - miss(E, E // 4, K)          # 0.90...
P_GPU_UNIFORM = 1 - miss(E, E // 32, K)          # 0.226
P_NODE_LIMITED = Fraction(11, 14)                # 1 - C(6,4)/C(8,4)
P_GPU_LIMITED = Fraction(1, 2) * (1 - miss(128, 8, K))


def test_hand_constants():
    assert C["num_hidden_layers"] == 61 and MOE_LAYERS == 58 and (N_GROUP, TOPK_GROUP) == (8, 4)
    assert FP8_COPY == 7392 and P_NODE_LIMITED == 1 - Fraction(15, 70)
    assert 0.90 < P_NODE_UNIFORM < 0.91 and 0.22 < P_GPU_UNIFORM < 0.23


@pytest.mark.parametrize("units,n_group,topk_group,expected", [
    (4, 1, 1, P_NODE_UNIFORM), (32, 1, 1, P_GPU_UNIFORM),
    (4, 8, 4, P_NODE_LIMITED), (32, 8, 4, P_GPU_LIMITED),
    (8, 8, 4, Fraction(1, 2)),       # EP8 in one node: a GPU is one group, chosen 4 times in 8
])
def test_reach_probability(units, n_group, topk_group, expected):
    assert p_reached(E, K, units, n_group, topk_group) == sympy.Rational(expected.numerator, expected.denominator)


def test_reach_probability_by_enumeration():
    """A small layout counted exhaustively: 16 experts in 4 groups of 4, 2 nodes of 2 groups, a
    token picks 2 groups then 2 experts among their 8. Node reached iff a chosen group is on it
    (the group-level rule): of the C(4,2) = 6 group choices, one leaves node 0 out -> 5/6. A GPU
    of 2 experts (8 GPUs, 2 per group): reached iff its group is chosen and one of the 2 experts
    lands on it, counted over every (groups, experts) choice."""
    groups = [list(range(4 * g, 4 * g + 4)) for g in range(4)]
    node_hits = [sum(1 for chosen in itertools.combinations(range(4), 2) if {0, 1} & set(chosen))]
    assert Fraction(node_hits[0], 6) == p_reached(16, 2, 2, 4, 2)
    hits = total = 0
    for chosen in itertools.combinations(range(4), 2):
        pool = [e for g in chosen for e in groups[g]]
        for experts in itertools.combinations(pool, 2):
            total += 1
            hits += any(e in (0, 1) for e in experts)          # GPU 0 holds experts 0 and 1
    assert Fraction(hits, total) == p_reached(16, 2, 8, 4, 2)


# -- the engine: DeepSeek-V3 EP32 over 4 nodes of 8 H100 ------------------------------------------

def v3_plan(framework: str, tokens_per_gpu: int, phase_batch: int, weight_format: str = "checkpoint"):
    ev = _evaluation(model_id("DeepSeek-V3"))
    options = Options(framework=framework, prefill_tokens=tokens_per_gpu * 32, weight_format=weight_format)
    config = ParallelConfig(tp=32, ep=32, dp_attn=32)
    return plan(ev, GPUS["H100"], config, options, TABLES.get(framework), Scenario(phase_batch, 4096, 1))


def a2a_rows(deployment, phase: str) -> dict[str, dict]:
    return {r["op_uid"]: r for r in deployment.ops[phase] if r["op"] == "all_to_all"}


DISPATCH = "main/layers[moe]/post_attention_layernorm>all_to_all[tp]"
COMBINE = "main/layers[moe]/mlp/experts/down_proj>all_to_all[tp]"


@pytest.fixture(scope="module")
def prefill_sglang():
    """Prefill, 128 prompts of 4K over 32 attention replicas: 16,384 tokens per GPU in one step."""
    return v3_plan("sglang", 16384, 128).at(Scenario(128, 4096, 1))


def test_prefill_node_limited_bytes_per_link(prefill_sglang):
    """Normal kernels, node-limited routing (the config's n_group 8 / topk_group 4):
    dispatch RDMA = 58 x 16,384 x 33/14 x 7392 B = 16.56 GB (0.33 s at 50 GB/s),
    dispatch NVLink = 58 x 16,384 x 28 x p(GPU) x 7392 B; combine the same copies at 14,336 B.
    Before (a plain all-to-all): 58 x 16,384 x 8 x 31/32 x 14,336 B = 105.6 GB at 50 GB/s."""
    rows = a2a_rows(prefill_sglang, "prefill")
    tokens = 58 * 16384
    rdma_copies, nvl_copies = 3 * P_NODE_LIMITED, 28 * P_GPU_LIMITED
    assert close(rows[DISPATCH + "~rdma"]["comm_bytes"], tokens * float(rdma_copies) * FP8_COPY)
    assert close(rows[DISPATCH + "~rdma"]["comm_bytes"], 16_557_539_328, rel=1e-6)
    assert rows[DISPATCH + "~rdma"]["link"] == "scale_out"
    assert close(rows[DISPATCH]["comm_bytes"], tokens * float(nvl_copies) * FP8_COPY)
    assert rows[DISPATCH]["link"] == "scale_up"
    # combine: NVLink reduce inside the node first, then one RDMA copy per node, in BF16
    assert close(rows[COMBINE + "~nvlink"]["comm_bytes"], tokens * float(nvl_copies) * BF16_COPY)
    assert close(rows[COMBINE]["comm_bytes"], tokens * float(rdma_copies) * BF16_COPY)
    assert rows[COMBINE]["link"] == "scale_out"
    # time on RDMA: bytes / 50 GB/s plus 58 calls of one network round (6.6 + 2.7 us)
    assert rows[DISPATCH + "~rdma"]["t_comm_s"] == pytest.approx(16_557_539_328 / RDMA + 58 * 9.3e-6, rel=1e-6)


def test_prefill_without_node_limit_bytes_per_link():
    """The same routing without groups (n_group = topk_group = 1): RDMA copies per token
    3 x p(node) = 2.705 instead of 33/14 = 2.357, NVLink 28 x p(GPU) = 6.33 instead of 4.36."""
    policy = TABLES["sglang"].a2a
    r = Routing("dispatch", sympy.Integer(16384), sympy.Integer(HIDDEN), K, E, 1, 1, 32, 4)
    got = link_bytes(r, policy, "prefill", fp8_experts=True)
    assert close(float(got["scale_out"]), 16384 * float(3 * P_NODE_UNIFORM) * FP8_COPY)
    assert close(float(got["scale_up"]), 16384 * float(28 * P_GPU_UNIFORM) * FP8_COPY)
    limited = link_bytes(Routing("dispatch", sympy.Integer(16384), sympy.Integer(HIDDEN), K, E, 8, 4, 32, 4),
                         policy, "prefill", fp8_experts=True)
    assert limited["scale_out"] < got["scale_out"] and limited["scale_up"] < got["scale_up"]


def test_decode_low_latency_bytes_per_link():
    """Decode, 128 requests per GPU (4096 over 32 replicas): low-latency kernels send each token
    once per selected expert, no deduplication, so node-limited routing does not matter: RDMA
    8 x 3/4 = 6 copies (experts on the 3 other nodes), NVLink 8 x (1/4 - 1/32) = 1.75 (experts on
    the 7 other GPUs of the node). Dispatch 58 x 128 x 6 x 7392 B = 329.3 MB on RDMA."""
    d = v3_plan("sglang", 16384, 4096).at(Scenario(4096, 4096, 1))
    rows = a2a_rows(d, "decode")
    tokens = 58 * 128
    assert close(rows[DISPATCH + "~rdma"]["comm_bytes"], tokens * 6 * FP8_COPY)
    assert rows[DISPATCH + "~rdma"]["comm_bytes"] == 329_269_248
    assert close(rows[DISPATCH]["comm_bytes"], tokens * 1.75 * FP8_COPY)
    assert close(rows[COMBINE + "~nvlink"]["comm_bytes"], tokens * 1.75 * BF16_COPY)
    assert close(rows[COMBINE]["comm_bytes"], tokens * 6 * BF16_COPY)


def test_no_framework_keeps_the_plain_all_to_all():
    """Without a framework (no DeepEP) every token goes once per expert, BF16, on the network:
    58 x 16,384 x 8 x 31/32 x 14,336 B = 105.6 GB per all-to-all, the issue's figure."""
    d = v3_plan("none", 16384, 128).at(Scenario(128, 4096, 1))
    rows = a2a_rows(d, "prefill")
    assert set(rows) == {DISPATCH, COMBINE}
    for row in rows.values():
        assert close(row["comm_bytes"], 58 * 16384 * 8 * 31 / 32 * BF16_COPY)
        assert row["link"] == "scale_out"


def test_vllm_dispatches_fp8_only_to_block_fp8_experts():
    """vLLM quantizes before dispatch only for block-quantized FP8 experts: DeepSeek-V3's
    checkpoint experts are FP8 (7392 B per copy); the same policy with BF16 experts sends BF16."""
    policy: A2APolicy = TABLES["vllm"].a2a
    assert policy.bytes_per_element("dispatch", fp8_experts=True) * HIDDEN == FP8_COPY
    assert policy.bytes_per_element("dispatch", fp8_experts=False) * HIDDEN == BF16_COPY
    assert TABLES["sglang"].a2a.bytes_per_element("dispatch", fp8_experts=False) * HIDDEN == FP8_COPY
    assert policy.bytes_per_element("combine", fp8_experts=True) * HIDDEN == BF16_COPY


def test_one_node_normal_kernels_nvlink_only():
    """EP8 in one node (N = 1): intranode kernels, each destination GPU once over NVLink; a GPU
    holds one group of 32 experts, reached iff its group is among the 4 of 8: 7 x 1/2 = 3.5 copies."""
    r = Routing("dispatch", sympy.Integer(1), sympy.Integer(1), K, E, 8, 4, 8, 1)
    assert copies(r, "normal") == {"scale_out": 0, "scale_up": sympy.Rational(7, 2)}


@pytest.mark.parametrize("weight_format,copy", [("checkpoint", FP8_COPY), ("bf16", BF16_COPY)])
def test_vllm_engine_dispatch_dtype_follows_the_experts(weight_format, copy):
    """The engine end to end: vLLM's dispatch RDMA hop is 58 x 16,384 x 33/14 copies of 7392 B
    with the checkpoint's FP8 experts (16.56 GB), of 14,336 B with every matrix in BF16."""
    d = v3_plan("vllm", 16384, 128, weight_format).at(Scenario(128, 4096, 1))
    row = a2a_rows(d, "prefill")[DISPATCH + "~rdma"]
    assert close(row["comm_bytes"], 58 * 16384 * 33 / 14 * copy)


@pytest.mark.parametrize("block,message", [
    ("kernels: {prefill: fast}", "unknown phase or kernel prefill: fast"),
    ("dispatch: {dtype: fp6}", "unknown payload dtype 'fp6'"),
])
def test_bad_policy_is_a_one_line_error(tmp_path, block, message):
    """A table whose expert_all_to_all names an unknown kernel or dtype is refused with the file,
    the field and what to write (engine.language.errors.SpecError)."""
    from engine.deploy.fusion_table import load_table
    from engine.language.errors import SpecError
    fields = {"kernels": "kernels: {prefill: normal}", "dispatch": "dispatch: {dtype: fp8}",
              "combine": "combine: {dtype: bf16}"}
    fields[block.split(":")[0]] = block
    text = ("framework: demo\nversion: \"1\"\ndoc: d\nrules: []\nexpert_all_to_all:\n  library: deepep\n"
            "  doc: d\n  src: [\"x.py: y\"]\n" + "".join(f"  {v}\n" for v in fields.values()))
    path = tmp_path / "demo.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_table(path)
    assert message in str(err.value) and "demo.yaml" in str(err.value)


# -- TensorRT-LLM: all-gather and reduce-scatter under attention DP --------------------------------
#
# CutlassFusedMoE (tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py, corpus/fusion/
# trtllm.yaml) all-gathers every attention rank's tokens to every rank and reduce-scatters the
# output: each token goes to all R - 1 other ranks, whatever its top-k. Mixtral-8x7B (its published
# config): hidden 4096, 8 experts, top-2, 32 layers; TP8 / EP8 / attention DP 8 on one H100 node;
# a decode step at 64 requests per replica = 8 tokens per rank.

MX = hf_config("mistralai/Mixtral-8x7B-v0.1")
MX_HIDDEN, MX_K, MX_LAYERS = MX["hidden_size"], MX["num_experts_per_tok"], MX["num_hidden_layers"]   # 4096, 2, 32
MX_DISPATCH = "main/layers[block]/post_attention_layernorm>all_to_all[tp]"
MX_COMBINE = "main/layers[block]/mlp/experts/down_proj>all_to_all[tp]"


def mixtral_decode(framework: str, **options):
    ev = _evaluation(model_id("Mixtral-8x7B-v0.1"))
    scenario = Scenario(64, 1000, 1)
    p = plan(ev, GPUS["H100"], ParallelConfig(tp=8, ep=8, dp_attn=8), Options(framework=framework, **options),
             TABLES.get(framework), scenario)
    return {r["op_uid"]: r for r in p.at(scenario).ops["decode"] if r["op"] == "all_to_all"}


def test_allgather_copies_every_other_rank():
    """Every other rank once, whatever k: R - 1 copies in one node; over N nodes the ranks of the
    other nodes on the network (R - R/N) and the sender's node-mates on NVLink (R/N - 1)."""
    one_node = Routing("dispatch", sympy.Integer(1), sympy.Integer(1), 2, 8, 1, 1, 8, 1)
    assert copies(one_node, "allgather") == {"scale_out": 0, "scale_up": 7}
    two_nodes = Routing("dispatch", sympy.Integer(1), sympy.Integer(1), 8, 256, 8, 4, 16, 2)
    assert copies(two_nodes, "allgather") == {"scale_out": 8, "scale_up": 7}


def test_trtllm_attention_dp_all_gathers_every_token():
    """BF16 Mixtral: TensorRT-LLM's dispatch sends each of a rank's 8 tokens to the 7 other ranks,
    32 x 8 x 7 x 4096 x 2 B = 14,680,064 B per step, and the reduce-scatter returns as much; the
    plain all-to-all (no framework) sends each token once per selected expert off the rank,
    32 x 8 x 2 x 7/8 x 8192 B = 3,670,016 B. The measured NCCL all-gather / reduce-scatter tables
    price them, at the whole buffer: 8 ranks x 8 tokens x 4096 x 2 B = 524,288 B per call."""
    assert (MX_HIDDEN, MX_K, MX_LAYERS) == (4096, 2, 32)
    trt, plain = mixtral_decode("trtllm"), mixtral_decode("none")
    gathered = MX_LAYERS * 8 * 7 * MX_HIDDEN * 2
    assert gathered == 14_680_064
    for uid, op in ((MX_DISPATCH, "all_gather"), (MX_COMBINE, "reduce_scatter")):
        assert trt[uid]["comm_bytes"] == gathered and trt[uid]["link"] == "scale_up"
        assert trt[uid]["op_name"] == f"{op}(tp)"
        assert f"{op}-nccl.yaml" in trt[uid]["expected_table"] and "bytes=524288" in trt[uid]["expected_src"]
        assert plain[uid]["comm_bytes"] == MX_LAYERS * 8 * MX_K * 7 / 8 * MX_HIDDEN * 2 == 3_670_016


def test_trtllm_gathers_fp8_and_reduce_scatters_bf16():
    """FP8 experts: the tokens are quantized with one per-tensor scale before the all-gather
    (static_quantize_e4m3_per_tensor: 1 B per element, nothing per token), 7,340,032 B; the output
    is reduce-scattered in the hidden states' BF16, 14,680,064 B."""
    trt = mixtral_decode("trtllm", weight_format="fp8_block128", act_dtype="fp8")
    assert trt[MX_DISPATCH]["comm_bytes"] == MX_LAYERS * 8 * 7 * MX_HIDDEN * 1 == 7_340_032
    assert trt[MX_COMBINE]["comm_bytes"] == MX_LAYERS * 8 * 7 * MX_HIDDEN * 2 == 14_680_064
