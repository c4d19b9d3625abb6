"""Deployment accounting: placement invariants, hand-derived per-op tables, physics, bad input.

Expected values are written here from first principles (model dims from the published configs,
bytes per element, the parallel layout), not read from the code under test.
"""
from __future__ import annotations

import math

import pytest

from engine.language import storage
from engine.deploy import Scenario, configs_for, check
from engine.language.errors import SpecError
from engine.deploy.hardware import find_gpu
from engine.deploy.parallel import ParallelConfig

from tests.conftest import _evaluation
from tests.deploy_helpers import GPUS, close, deploy, make_plan, model_id, op

# Llama-3.1-70B (config.json): hidden 8192, 64 heads, 8 KV heads, head 128, FFN 28672, 80 layers.
H, HEADS, KV, D, FF, L, VOCAB = 8192, 64, 8, 128, 28672, 80, 128256
BF16 = 2


# -- Llama-3.1-70B, TP8, decode, unfused ---------------------------------------------------------

B, PROMPT, GEN = 4, 1000, 24
C = PROMPT + GEN                  # decode runs at the last position
LLAMA_TP8 = dict(model="Llama-3.1-70B", gpu="H100", scenario=Scenario(B, PROMPT, GEN), tp=8)


@pytest.fixture(scope="module")
def llama_tp8():
    return deploy(**LLAMA_TP8)


def test_llama_tp8_column_parallel_q_proj(llama_tp8):
    row = op(llama_tp8, "decode", "main/layers[block]/self_attn/q_proj")
    out = HEADS * D // 8                                         # this device's query features
    assert close(row["flops"], L * 2 * B * H * out)
    assert close(row["weight_bytes"], L * out * H * BF16)
    assert close(row["bytes"], L * (B * H * BF16 + B * out * BF16 + out * H * BF16))
    assert row["comm_bytes"] == 0


def test_llama_tp8_kv_heads_split_evenly(llama_tp8):
    row = op(llama_tp8, "decode", "main/layers[block]/self_attn/k_proj")
    assert close(row["weight_bytes"], L * (KV // 8) * D * H * BF16)          # one KV head per GPU
    scores = op(llama_tp8, "decode", "main/layers[block]/self_attn/scores")
    # q [B, 1, 8 heads, 128] . k [B, C, 1 head, 128]: C pairs per query head at the last position
    assert close(scores["flops"], L * 2 * B * (HEADS // 8) * C * D)
    reads = B * (HEADS // 8) * D * BF16 + B * C * (KV // 8) * D * BF16
    assert close(scores["bytes"], L * (reads + B * (HEADS // 8) * C * BF16))


def test_llama_tp8_all_reduce_after_row_parallel_projections(llama_tp8):
    for uid in ("main/layers[block]/self_attn/o_proj", "main/layers[block]/mlp/down_proj"):
        row = op(llama_tp8, "decode", f"{uid}>all_reduce[tp]")
        # ring all-reduce of [B, 1, hidden] over 8 GPUs: each sends 2 (n-1)/n of the tensor
        assert close(row["comm_bytes"], L * 2 * 7 / 8 * B * H * BF16)
        assert row["link"] == "scale_up" and row["kind"] == "comm"
    reduces = [r["op_uid"] for r in llama_tp8.ops["decode"] if r["op"] == "all_reduce"]
    # o_proj and down_proj per layer, plus the vocab-parallel embedding lookup
    assert sorted(u.split(">")[0] for u in reduces) == [
        "main/embed_tokens", "main/layers[block]/mlp/down_proj", "main/layers[block]/self_attn/o_proj"]


def test_no_communication_on_one_gpu():
    d = deploy("Llama-3.1-70B", "B200", Scenario(2, 512, 16), tp=1)
    for phase in ("prefill", "decode"):
        assert not [r for r in d.ops[phase] if r["kind"] == "comm"]
        assert d.phases[phase]["comm_bytes"] == 0


def test_llama_tp8_decode_weights_and_kv(llama_tp8):
    s = llama_tp8.summary
    params = 70_553_706_496                                     # HF count (tests/test_models.py)
    norms = (2 * L + 1) * H * BF16                              # every GPU keeps whole norm weights
    assert close(s["weight_bytes_per_gpu"], (params * BF16 - norms) / 8 + norms)
    per_token = 2 * L * KV * D * BF16                            # K and V, all layers
    assert s["kv_bytes_per_request"] == per_token * C
    assert s["kv_bytes_per_request_per_gpu"] == per_token * C / 8
    usable = 81559 * 2**20 * 0.9                                # nvidia-smi's H100 total, x 0.9
    # the prefill step's working set (8192 prompt tokens, unfused): a residual add reads two
    # [8192 tokens, hidden 8192] BF16 tensors (replicated under TP) and writes one, 3 x 8192 x H x 2 B;
    # larger than RMSNorm (2 x 8192 x H x 2 B) and softmax over this GPU's scores (8 heads x 8192
    # queries x 1000 keys, read and written: 262,144,000 B)
    step = 3 * 8192 * H * BF16
    assert s["activation_bytes_per_gpu"] == step == 402_653_184
    assert s["max_concurrent_requests"] == math.floor((usable - s["weight_bytes_per_gpu"] - step)
                                                      / (per_token * C / 8))


def test_sum_of_device_weights_is_the_model_plus_replicas():
    ckpt = 70_553_706_496 * BF16                     # the HF parameter count, all BF16
    norms = (2 * L + 1) * H * BF16                   # replicated on every GPU
    tp8 = make_plan("Llama-3.1-70B", "H100", tp=8).weight_bytes_per_gpu
    assert close(8 * tp8, ckpt + 7 * norms)
    # TP16 > 8 KV heads: each KV head lives on two GPUs
    tp16 = make_plan("Llama-3.1-70B", "H100", tp=16).weight_bytes_per_gpu
    kv_proj = 2 * L * KV * D * H * BF16
    assert close(16 * tp16, ckpt + 15 * norms + kv_proj)


# -- DeepSeek-V3, DP-attention 8 + EP 8 on 8 GPUs, decode ---------------------------------------

DS = dict(hidden=7168, heads=128, q_lora=1536, kv_lora=512, nope=128, rope=64, v=128, experts=256,
          k=8, d_ff_expert=2048, layers=61, moe_layers=58)
DB = 16


def fp8_block(rows: int, cols: int) -> int:
    """FP8 payload plus one float32 scale per 128x128 block."""
    return rows * cols + math.ceil(rows / 128) * math.ceil(cols / 128) * 4


@pytest.fixture(scope="module")
def deepseek_dp8():
    return deploy("DeepSeek-V3", "H200", Scenario(DB, PROMPT, GEN), tp=8, dp_attn=8, ep=8)


def test_deepseek_attention_replicated_under_dp_attention(deepseek_dp8):
    row = op(deepseek_dp8, "decode", "main/layers[moe]/self_attn/q_b_proj")
    out = DS["heads"] * (DS["nope"] + DS["rope"])
    assert close(row["weight_bytes"], DS["moe_layers"] * fp8_block(out, DS["q_lora"]))
    assert close(row["flops"], DS["moe_layers"] * 2 * (DB / 8) * DS["q_lora"] * out)   # 2 requests per GPU


def test_deepseek_experts_split_by_ep(deepseek_dp8):
    row = op(deepseek_dp8, "decode", "main/layers[moe]/mlp/experts/gate_proj")
    local = DS["experts"] // 8
    touched = 1 - (1 - DS["k"] / DS["experts"]) ** DB            # expected share of experts hit
    per_expert = fp8_block(DS["d_ff_expert"], DS["hidden"])       # whole expert matrices
    assert close(row["weight_bytes"], DS["moe_layers"] * local * touched * per_expert)
    routed = DB * DS["k"] / 8                                     # token-expert pairs per GPU
    assert close(row["flops"], DS["moe_layers"] * 2 * routed * DS["hidden"] * DS["d_ff_expert"])


def test_deepseek_combine_weighs_each_tokens_k_expert_outputs(deepseek_dp8):
    """moe_combine sums each token's k expert outputs ([hidden] each) weighted by its routing
    scores: a multiply-add per element, 2 x k x hidden FLOPs per token, for the 16 / 8 = 2 tokens of
    this GPU's attention replica, in each of the 58 MoE layers: 58 x 2 x 2 x 8 x 7168 = 13,303,808.
    Planted bug caught: the weighted sum counted as one FLOP per element (half)."""
    row = op(deepseek_dp8, "decode", "main/layers[moe]/mlp/combine")
    assert row["op"] == "moe_combine"
    assert close(row["flops"], DS["moe_layers"] * 2 * (DB / 8) * DS["k"] * DS["hidden"]) and row["flops"] == 13_303_808


def test_deepseek_dispatch_and_combine_are_all_to_all(deepseek_dp8):
    a2a = [r for r in deepseek_dp8.ops["decode"] if r["op"] == "all_to_all"]
    assert len(a2a) == 2
    pairs = DB * DS["k"] / 8
    for row in a2a:
        assert close(row["comm_bytes"], DS["moe_layers"] * pairs * DS["hidden"] * BF16 * 7 / 8)
    assert not [r for r in deepseek_dp8.ops["decode"] if r["op"] == "all_reduce"]


def test_mla_latent_kv_does_not_shrink_with_tp_but_does_with_dp_attention(deepseek_dp8):
    per_token = DS["layers"] * (DS["kv_lora"] + DS["rope"]) * BF16
    tp8 = deploy("DeepSeek-V3", "H200", Scenario(DB, PROMPT, GEN), tp=8, ep=8).summary
    dp8 = deepseek_dp8.summary
    assert tp8["kv_bytes_per_request_per_gpu"] == dp8["kv_bytes_per_request_per_gpu"] == per_token * C
    assert tp8["kv_bytes_per_gpu"] == DB * per_token * C          # every GPU holds every request
    assert dp8["kv_bytes_per_gpu"] == DB / 8 * per_token * C      # each GPU holds its replica's requests
    # GQA for contrast: KV heads do split under TP
    gqa = [deploy("Llama-3.1-70B", "H100", Scenario(1, PROMPT, GEN), tp=t).summary for t in (2, 8)]
    assert gqa[0]["kv_bytes_per_request_per_gpu"] == 4 * gqa[1]["kv_bytes_per_request_per_gpu"]


def test_ep_divides_expert_instances_never_expert_shapes():
    by_ep = {}
    for ep in (1, 2, 8):
        p = make_plan("Qwen3-30B-A3B", "H100", tp=8, ep=ep, dp_attn=8)
        by_ep[ep] = p.unfused["decode"].stored["main/layers[moe]/mlp/experts/gate_proj"]
        step = next(s for s in p.unfused["decode"].steps if s.uid == "main/layers[moe]/mlp/experts/gate_proj")
        assert step.out.axes[-1].size == 768                      # d_ff_expert stays global
    # 128 experts of [768, 2048] BF16: ep=8 keeps 16 whole experts; ep=1 splits each over TP8
    assert by_ep[8] == 16 * 768 * 2048 * BF16
    assert by_ep[2] == 64 * (768 // 4) * 2048 * BF16
    assert by_ep[1] == 128 * (768 // 8) * 2048 * BF16


def test_ring_and_ulysses_hold_the_same_data_per_device():
    """Consistency of ring with Ulysses (the engine against itself): the same KV and weights per
    device and the same attention FLOPs, differing only in how K/V move. The absolute bytes of
    each are derived by hand in tests/test_hand_comm.py."""
    sc = Scenario(1, 16384, 16)
    ring = make_plan("Llama-3.1-8B", "H100", tp=2, cp=4, cp_kind="ring")
    uly = make_plan("Llama-3.1-8B", "H100", tp=2, cp=4, cp_kind="ulysses")
    assert ring.kv_device_per_request == uly.kv_device_per_request
    assert ring.weight_bytes_per_gpu == uly.weight_bytes_per_gpu
    r, u = ring.at(sc), uly.at(sc)
    for name in ("scores", "probs", "attn"):
        a = op(r, "prefill", f"main/layers[block]/self_attn/{name}")
        b = op(u, "prefill", f"main/layers[block]/self_attn/{name}")
        assert close(a["flops"], b["flops"])
    kinds = {x["op"] for x in r.ops["prefill"]} ^ {x["op"] for x in u.ops["prefill"]}
    assert {"ring_pass", "all_to_all"} <= kinds                   # they differ in how data moves


# -- physics ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,gpu,config", [
    ("Llama-3.1-8B", "H100", dict(tp=1)), ("Llama-3.1-70B", "H200", dict(tp=8)),
    ("Qwen3-235B-A22B", "B200", dict(tp=8, ep=8)), ("DeepSeek-V3", "H200", dict(tp=8, dp_attn=8, ep=8)),
    ("gpt-oss-120b", "MI300X", dict(tp=2)), ("Mixtral-8x7B-v0.1", "A100", dict(tp=4, pp=2)),
])
def test_long_prefill_compute_bound_single_decode_memory_bound(model, gpu, config):
    d = deploy(model, gpu, Scenario(1, 32768, 256), framework="vllm", **config)
    assert d.phases["prefill"]["bound"] == "compute"
    # one token: never compute-bound; reading weights and KV outweighs the FLOPs, though on a wide
    # group the collectives' per-call latency can take the lead (then the bound is "comm")
    decode = d.phases["decode"]
    assert decode["bound"] == "memory" or (decode["bound"] == "comm" and config.get("tp", 1) >= 8)
    assert decode["memory_time_s"] > decode["compute_time_s"]
    hbm = GPUS[gpu].hbm_bytes_per_s
    read = d.phases["decode"]["weight_bytes"]
    assert d.summary["tpot_s"] >= read / hbm                      # never faster than reading weights
    ev = _evaluation(model_id(model))
    if not any(r.role == "experts" for r in ev.numeric.rows.values()):
        # a dense model reads every weight each step but the embedding table (one row per token)
        table = sum(t.total_bytes for t in ev.tensors() if t.role == "embedding") / config["tp"]
        assert read >= d.summary["weight_bytes_per_gpu"] - table


def test_decode_time_never_beats_weight_bytes_over_bandwidth():
    for batch in (1, 8, 64):
        d = deploy("Llama-3.1-70B", "H100", Scenario(batch, 2048, 128), framework="sglang", tp=8)
        table = VOCAB * H * BF16 / 8                             # looked up, not streamed
        assert d.summary["tpot_s"] >= (d.summary["weight_bytes_per_gpu"] - table) / GPUS["H100"].hbm_bytes_per_s


# -- configs, bad input ---------------------------------------------------------------------------

def test_enumerator_yields_legal_configs_and_reasons():
    legal, rejected = configs_for(_evaluation(model_id("DeepSeek-V3")), 8)
    labels = {c.label() for c in legal}
    assert {"tp8-ep8-dp_attn8", "tp8", "tp4-pp2"} <= labels
    assert all(c.n_gpus == 8 for c in legal)
    legal, rejected = configs_for(_evaluation(model_id("Qwen3-8B")), 64)
    assert all(c.ep == 1 for c in legal)                          # a dense model has nothing for EP
    reasons = {r for _, problems in rejected for r in problems}
    assert "n_heads = 32 is not divisible by tp = 64" in reasons


@pytest.mark.parametrize("config,needle", [
    (dict(tp=3), "n_heads = 64 is not divisible by tp = 3"),
    (dict(tp=8, ep=2), "ep = 2 but the model has no routed experts"),
    (dict(tp=24, dp_attn=2), "n_heads = 64 is not divisible by attention TP (tp / dp_attn) = 12"),
    (dict(tp=8, dp_attn=3), "dp_attn 3 does not divide tp 8 (attention replicas split the TP group)"),
    (dict(tp=1, pp=128), "pp = 128 is more than the 80 layers"),
])
def test_impossible_configs_say_why(config, needle):
    assert needle in check(_evaluation(model_id("Llama-3.1-70B")), ParallelConfig(**config))
    with pytest.raises(SpecError) as err:
        make_plan("Llama-3.1-70B", "H100", **config)
    assert needle in err.value.one_line() and "\n" not in err.value.one_line()


def test_unknown_gpu_lists_the_known_ones():
    with pytest.raises(SpecError) as err:
        find_gpu(GPUS, "H1000")
    assert "unknown GPU 'H1000'" in str(err.value) and "H100" in str(err.value) and "MI355X" in str(err.value)


def test_context_beyond_max_is_computed_and_flagged():
    d = deploy("Llama-3.1-8B", "H100", Scenario(1, 131072, 8192), tp=1)
    assert d.summary["extrapolated"] and d.summary["max_context"] == 131072
    inside = deploy("Llama-3.1-8B", "H100", Scenario(1, 4096, 1024), tp=1)
    assert not inside.summary["extrapolated"]
    assert d.summary["tpot_s"] > inside.summary["tpot_s"]


def test_batch_that_does_not_fit_says_by_how_much():
    d = deploy("Llama-3.1-70B", "H100", Scenario(1, 1024, 128), tp=1)
    s = d.summary
    assert not s["fits"] and s["max_concurrent_requests"] == 0
    assert s["shortfall_bytes"] >= 70_553_706_496 * BF16 - 81559 * 2**20 * 0.9
    ok = deploy("Llama-3.1-70B", "H100", Scenario(1, 1024, 128), tp=8).summary
    assert ok["fits"] and ok["shortfall_bytes"] == 0
    too_many = ok["max_concurrent_requests"] + 8
    over = deploy("Llama-3.1-70B", "H100", Scenario(too_many, 1024, 128), tp=8).summary
    # KV per GPU of one request (80 layers, 8 KV heads over TP 8: one each, 128 wide, K and V, BF16,
    # 1024 + 128 tokens); capacity = floor(budget / kv), so 8 requests more than it need more than
    # 7 and at most 8 requests' KV beyond the budget
    kv = 80 * 1 * 128 * 2 * BF16 * (1024 + 128)
    assert kv == 47_185_920
    assert not over["fits"] and 7 * kv < over["shortfall_bytes"] <= 8 * kv


def test_fp8_kv_halves_kv_and_raises_capacity():
    bf16 = deploy("Qwen3-32B", "H100", Scenario(8, 4096, 512), tp=4).summary
    fp8 = deploy("Qwen3-32B", "H100", Scenario(8, 4096, 512), kv_dtype="fp8", tp=4).summary
    # Qwen3-32B (config.json): 64 layers, 8 KV heads of 128; K and V per token, 1 byte in FP8
    assert fp8["kv_bytes_per_request"] == 2 * 64 * 8 * 128 * 1 * (4096 + 512)
    assert fp8["kv_bytes_per_request_per_gpu"] == 2 * 64 * (8 // 4) * 128 * 1 * (4096 + 512)
    assert bf16["kv_bytes_per_request"] == 2 * fp8["kv_bytes_per_request"]
    assert fp8["max_concurrent_requests"] >= 2 * bf16["max_concurrent_requests"] - 1


def test_mxfp4_experts_run_at_bf16_weight_only_kernels():
    """gpt-oss's MXFP4 experts take BF16 activations in vLLM's kernels (W4A16: Triton or Marlin on
    Hopper, FlashInfer's MXFP4 x BF16 on Blackwell), so they run at the BF16 peak on both; Hopper
    has no FP4 tensor cores to run them any faster (the FP8 peak would be 2x optimistic)."""
    h100 = deploy("gpt-oss-120b", "H100", Scenario(8, 2048, 128), tp=2)
    b200 = deploy("gpt-oss-120b", "B200", Scenario(8, 2048, 128), tp=2)
    uid = "main/layers[sliding]/mlp/experts/gate_up_proj"
    assert op(h100, "decode", uid)["compute_dtype"] == "bf16"
    assert op(b200, "decode", uid)["compute_dtype"] == "bf16"
    assert op(b200, "decode", "main/layers[sliding]/self_attn/q_proj")["compute_dtype"] == "bf16"
    flops = op(h100, "prefill", uid)["flops"]
    assert op(h100, "prefill", uid)["t_compute_s"] == pytest.approx(flops / 989e12, rel=1e-12)


def test_compute_class_by_architecture_and_activations():
    """The matmul dtype from the weights' and activations' classes and the GPU's tensor cores
    (gpus/*.yaml peak_tflops): W8A8 FP8 at FP8 on Hopper and BF16 on Ampere (no FP8 tensor
    cores: Marlin W8A16); NVFP4 W4A4 at FP4 on Blackwell and BF16 on Hopper (Marlin W4A16); FP4
    experts with FP8 activations (DeepSeek-V4, W4A8) at FP8 on Blackwell."""
    h100, a100, b200 = GPUS["H100"], GPUS["A100"], GPUS["B200"]
    assert (h100.compute_dtype("fp8"), a100.compute_dtype("fp8")) == ("fp8", "bf16")
    assert (b200.compute_dtype("fp4"), h100.compute_dtype("fp4")) == ("fp4", "bf16")
    assert (b200.compute_dtype("fp4/fp8"), h100.compute_dtype("fp4/fp8")) == ("fp8", "bf16")
    assert (b200.compute_dtype("fp4/bf16"), b200.compute_dtype("bf16")) == ("bf16", "bf16")


def test_formulas_evaluate_to_the_numbers():
    """Consistency of the two bindings of one placement (symbolic formulas vs numbers): a bug
    shared by both passes; the absolute numbers are checked by the hand-derived tests."""
    import sympy
    from engine.language import symbols
    from engine.deploy.step_totals import step_totals
    ev = _evaluation(model_id("DeepSeek-V3"))
    config = ParallelConfig(tp=8, dp_attn=2, ep=4)
    p = make_plan("DeepSeek-V3", "H200", "sglang", Scenario(4, 1024, 64), **dict(tp=8, dp_attn=2, ep=4))
    subs = {symbols.dim(k): v for k, v in ev.bound.items()}
    subs.update({symbols.dim(k): getattr(config, k) for k in ("tp", "ep", "dp_attn", "cp", "pp", "dp")})
    for phase in ("prefill", "decode"):
        for num, sym in zip(p.programs[phase].steps, p.formulas[phase].steps):
            assert num.uid == sym.uid
            for a, b in zip(step_totals(num), step_totals(sym)):
                assert sympy.simplify(a - b.subs(subs)) == 0, (num.uid, a, b)
    assert sympy.simplify(p.weight_formula.subs(subs) - p.weight_bytes_per_gpu) == 0


def test_pipeline_stages_split_layers_and_send_the_hidden_state():
    d = deploy("Llama-3.1-70B", "H100", Scenario(B, PROMPT, GEN), tp=4, pp=2)
    s = d.summary
    # each stage holds 40 layers; one GPU keeps 2 of the 8 KV heads (TP4)
    assert s["kv_bytes_per_request_per_gpu"] == (L // 2) * 2 * (KV // 4) * D * BF16 * C
    # two micro-batches of B/2 requests in flight; each crosses pp - 1 = 1 stage boundary
    assert s["micro_batches"] == 2
    hops = [r for r in d.ops["decode"] if r["op"] == "send_recv"]
    assert len(hops) == 1 and close(hops[0]["comm_bytes"], 1 * (B / 2) * H * BF16)
    tp8 = deploy(**LLAMA_TP8).summary
    assert abs(s["weight_bytes_per_gpu"] / tp8["weight_bytes_per_gpu"] - 1) < 0.02
    # memory-bound decode: a round reads every stage's weights once per micro-batch, so the
    # pipeline is no faster than TP8 on the same 8 GPUs; compute-bound prefill overlaps stages
    assert s["tpot_s"] > tp8["tpot_s"]
    path = d.phases["prefill"]["step_time_s"]
    assert close(s["ttft_s"], path * (2 + 2 - 1) / 2)
