"""Two times per deployment point: the lower bound and the schedule estimate (docs/deployment.md
"Two times per point"), by hand.

* Llama-3.1-8B prefill and decode on one H100: the compute and memory sums from the config
  (corpus/snapshots/meta-llama--Meta-Llama-3.1-8B.config.json) and the GPU's datasheet
  (gpus/h100-sxm.yaml: 989 TFLOP/s BF16 dense, 3.35 TB/s), the bound = the larger sum, the
  estimate = the sum of the per-op maxima, at least the bound.
* gpt-oss-20b on 2 H100 with expert parallelism under SGLang's two-batch overlap: the step is two
  half-batches, max(2 x kernels, 2 x collectives of a half, the full batch's bound), the halves'
  figures summed by hand from the per-op rows of ``archledger deploy`` at half the batch.
"""
from __future__ import annotations

import pytest

from tests.deploy_helpers import deploy_json

LLAMA = "meta-llama/Meta-Llama-3.1-8B"
GPT = "openai/gpt-oss-20b"
# config.json of Llama-3.1-8B
D, FFN, LAYERS, HEADS, KV_HEADS, VOCAB = 4096, 14336, 32, 32, 8, 128256
D_HEAD = D // HEADS
PEAK_BF16, HBM_BW = 989e12, 3.35e12          # gpus/h100-sxm.yaml
# weights of one layer's matmuls: q, k, v, o and the gated MLP's gate, up, down
LAYER_MATMUL = D * HEADS * D_HEAD + 2 * D * KV_HEADS * D_HEAD + HEADS * D_HEAD * D + 3 * D * FFN


@pytest.fixture(scope="module")
def llama():
    return deploy_json(LLAMA, "H100", {}, "vllm", "bf16", 4096, 1, 1)     # vLLM's fused attention: no L x L scores


def test_prefill_bound_is_the_busier_resource_and_the_estimate_the_sum_of_maxima(llama):
    prefill, ops = llama["phases"]["prefill"], llama["ops"]["prefill"]
    t = 4096
    # FLOPs by hand: 2 per weight per token in the matmuls; causal attention: scores and the
    # weighted sum, each 2 x d_head per (query, key) pair and head, t (t + 1) / 2 pairs; the LM head
    # at the last token only. Norms, RoPE, SiLU and softmax add well under 0.1 %.
    flops = 2 * t * LAYERS * LAYER_MATMUL + LAYERS * 2 * (2 * D_HEAD * HEADS * t * (t + 1) / 2) + 2 * D * VOCAB
    compute = flops / PEAK_BF16                                     # 0.0623 s
    assert prefill["compute_time_s"] == pytest.approx(compute, rel=1e-3)
    # memory by hand, an upper estimate far below the compute: 16.1 GB of BF16 weights, the prompt's
    # KV (32 layers x 2 x 1024 x 2 B x 4096 = 0.54 GB), and every activation of 4096 tokens written and
    # read a few times (each layer moves < 12 x 4096 x 14336 x 2 B = 1.4 GB): < 62 GB, < 19 ms
    assert prefill["memory_time_s"] < 62e9 / HBM_BW < compute
    # the bound: the busier of the two resources (no link: one GPU), i.e. the compute sum
    assert prefill["step_bound_s"] == pytest.approx(compute, rel=1e-3)
    assert prefill["step_bound_s"] == max(prefill["compute_time_s"], prefill["memory_time_s"])
    # the per-op table, summed here: bound = max of the sums, estimate = sum of the maxima
    sum_c, sum_m = sum(r["t_compute_s"] for r in ops), sum(r["t_memory_s"] for r in ops)
    assert prefill["step_bound_s"] == pytest.approx(max(sum_c, sum_m), rel=1e-12)
    assert prefill["step_time_s"] == pytest.approx(sum(max(r["t_compute_s"], r["t_memory_s"]) for r in ops), rel=1e-12)
    # the gap is the memory-bound ops' excess (norms, elementwise), which overlap would hide: > 5 ms here
    excess = sum(max(0.0, r["t_memory_s"] - r["t_compute_s"]) for r in ops)
    assert prefill["step_time_s"] - prefill["step_bound_s"] == pytest.approx(excess, rel=1e-9)
    assert excess > 5e-3
    s = llama["deployment"]
    assert s["overlap"] == "none"
    assert s["ttft_bound_s"] == pytest.approx(prefill["step_bound_s"], rel=1e-12)    # one step (4096 <= 8192)
    assert s["ttft_s"] == pytest.approx(prefill["step_time_s"], rel=1e-12) and s["ttft_s"] > s["ttft_bound_s"]


def test_decode_bound_is_the_weight_and_kv_read(llama):
    decode = llama["phases"]["decode"]
    # one token at context 4097: every weight but the embedding table (one row read) and the KV
    # of 4097 positions: 2 x (8,030,261,248 - 128256 x 4096) + 32 x 2 x 1024 x 2 x 4097 bytes
    params = 8_030_261_248
    hand = (2 * (params - VOCAB * D) + LAYERS * 2 * KV_HEADS * D_HEAD * 2 * 4097) / HBM_BW      # 4.64 ms
    assert decode["step_bound_s"] == pytest.approx(hand, rel=2e-3)
    assert decode["step_bound_s"] == decode["memory_time_s"] > 100 * decode["compute_time_s"]
    assert llama["deployment"]["tpot_bound_s"] == decode["step_bound_s"] <= llama["deployment"]["tpot_s"]


def _gpt(batch: int, overlap: str | None):
    extra = ("--overlap", overlap) if overlap else ()
    return deploy_json(GPT, "H100", dict(tp=2, ep=2, dp_attn=2), "sglang", "bf16", 4096, 1024, batch, extra)


@pytest.fixture(scope="module")
def gpt_half():
    """The half-batch: 8 requests over 2 attention replicas split in two halves of 2 per replica
    (decode's program batch 4, as ``--batch 4`` gives it without overlap)."""
    return _gpt(4, None)


def test_two_batch_decode_composes_the_half_batch(gpt_half):
    """Consistency test (the engine's own half-batch op rows, composed by the schedule's rule by hand):
    the two streams' step is max(2 x kernels, 2 x collectives, the full batch's bound)."""
    ops = gpt_half["ops"]["decode"]
    # one half-batch: its collectives (the inserted comm steps) and everything else, summed by hand
    collectives = sum(r["t_sol_s"] for r in ops if r["kind"] == "comm")
    kernels = sum(r["t_sol_s"] for r in ops if r["kind"] != "comm")
    assert collectives > 0 and kernels > 0
    assert gpt_half["phases"]["decode"]["comm_stream_s"] == pytest.approx(collectives, rel=1e-9)
    full_none, full = _gpt(8, None), _gpt(8, "two_batch")
    assert full["deployment"]["overlap"] == "two_batch"
    bound = full["phases"]["decode"]["step_bound_s"]
    assert bound == full_none["phases"]["decode"]["step_bound_s"]       # the bound does not depend on the schedule
    # the two streams: both halves' kernels on one, both halves' collectives on the other
    want = max(2 * kernels, 2 * collectives, bound)
    assert full["phases"]["decode"]["step_time_s"] == pytest.approx(want, rel=1e-9)
    assert full["deployment"]["tpot_s"] == pytest.approx(want, rel=1e-9)
    assert full["deployment"]["tpot_bound_s"] == bound <= full["deployment"]["tpot_s"]
    # without overlap the step is one kernel after another: the sum of its ops' SOL
    assert full_none["phases"]["decode"]["step_time_s"] == pytest.approx(
        sum(r["t_sol_s"] for r in full_none["ops"]["decode"]), rel=1e-9)


def test_two_batch_leaves_one_request_per_replica_unsplit():
    # 2 requests over 2 replicas: a half would be empty (SGLang's compute_split_seq_index gives None)
    one, none = _gpt(2, "two_batch"), _gpt(2, None)
    assert one["deployment"]["tpot_s"] == none["deployment"]["tpot_s"]


def test_overlap_a_framework_does_not_declare_is_one_line(capsys):
    from engine.cli import main
    assert main(["deploy", GPT, "--gpu", "H100", "--framework", "vllm", "--overlap", "two_batch"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--overlap" in err and "declares no two_batch overlap" in err and len(err.splitlines()) == 1


def test_plan_answers_with_the_estimate_and_shows_the_bound(llama):
    import contextlib
    import io
    import json

    from engine.cli import main
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["plan", LLAMA, "--gpu", "H100", "--ttft", "10", "--tpot", "1", "--input", "4096", "--output", "1",
                     "--max-gpus", "1", "--no-disagg", "--framework", "vllm", "--time", "estimate", "--json"]) == 0
    answer = json.loads(buffer.getvalue())["answer"]
    # the answer point, evaluated by archledger deploy: the same estimate, and its bound beside it (plan's
    # TPOT is the steady state's, deploy's tpot_mean_s, so its bound is deploy's tpot_mean_bound_s)
    point = deploy_json(LLAMA, "H100", {}, "vllm", "bf16", 4096, 1, answer["batch"])["deployment"]
    assert answer["ttft_s"] == pytest.approx(point["ttft_s"], rel=1e-9)
    assert answer["tpot_s"] == pytest.approx(point["tpot_mean_s"], rel=1e-9)
    bound = answer["times"]["bound"]
    assert bound["ttft_s"] == pytest.approx(point["ttft_bound_s"], rel=1e-12)
    assert bound["tpot_s"] == pytest.approx(point["tpot_mean_bound_s"], rel=1e-12)
    assert bound["ttft_s"] < answer["ttft_s"]      # compute-bound prefill: the elementwise ops' excess
