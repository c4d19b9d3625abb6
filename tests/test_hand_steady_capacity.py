"""Steady-state capacity and decode at the mean context by hand (docs/deployment.md "Steady-state
capacity", engine/deploy/admission.py).

From the published config, first principles and the frameworks' data, never from the engine:

* a request of prompt I and output O emits token j (j = 1..O) with the cache of c_j = I + j - 1
  tokens; under continuous batching the running requests stand at every stage of their output,
  so the cache per request is the mean over j;
* vLLM pages the cache in blocks of 16 tokens (corpus/fusion/vllm.yaml kv_admission, its src:
  vllm/platforms/cuda.py): at context c a request holds 16 x ceil(c / 16) tokens' worth, and its
  V1 scheduler keeps no free-block watermark;
* SGLang pages by the token and reserves, per running request, new_token_ratio x min(remaining
  output, 4096) tokens, the ratio at its floor 0.7 x 0.14 = 0.098 (corpus/fusion/sglang.yaml);
* capacity = floor(KV room / KV per request at those tokens) (the room as in
  tests/test_hand_capacity.py: usable - weights - runtime reserve - prefill working set);
* decode of a steady batch reads every request's cache at its own context: for a cost linear in
  the context that is the step at the mean context I + (O - 1) / 2.

The published point: TensorRT-LLM's perf-overview measures 22,714 output tok/s for
Llama-3.1-8B (FP8) at ISL 128 / OSL 2048 on one H100 (issue 38); the worst-case figure (every
request at its last token, capacity by the last position) sits below it, the steady-state one
must not.
"""
from __future__ import annotations

import math

import pytest

from engine.deploy import Scenario
from engine.deploy.admission import mean_paged_tokens, steady_tokens
from engine.deploy.fusion_table import load_tables
from tests.conftest import hf_config
from tests.deploy_helpers import deploy, deploy_json
from tests.test_hand_capacity import KV_TOKEN, ROOM, llama_8b_params

PROMPT, GEN = 128, 2048
H100_HBM_BYTES_PER_S = 3.35e12                 # H100 SXM datasheet: 3.35 TB/s
TRTLLM_TOK_S = 22_714                          # NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md


def _series_mean(prompt: int, output: int, page: int) -> float:
    """The definition, term by term: the mean over j = 1..O of page x ceil((I + j - 1) / page)."""
    return sum(page * math.ceil((prompt + j - 1) / page) for j in range(1, output + 1)) / output


@pytest.mark.parametrize("prompt,output,page", [(128, 2048, 16), (1, 1, 16), (100, 7, 16), (17, 33, 64),
                                                (4096, 1024, 1), (1000, 8192, 16)])
def test_mean_paged_tokens_is_the_series_mean(prompt, output, page):
    assert float(mean_paged_tokens(prompt, output, page)) == pytest.approx(_series_mean(prompt, output, page),
                                                                         rel=1e-12)


def test_llama_8b_kv_per_token_and_steady_tokens_by_hand():
    """KV per token: K and V, 8 KV heads x 128, 32 layers, BF16 = 2 x 32 x 8 x 128 x 2 = 131,072 B.
    vLLM's mean paged tokens at 128 / 2048: c runs 128..2175; c = 128 holds 8 full pages (128);
    c = 129..2160 fill pages 9..135, 16 contexts each at 16 k tokens; c = 2161..2175 (15 contexts)
    hold 136 pages = 2176. Sum = 128 + 256 x (135 x 136 / 2 - 36) + 15 x 2176 = 128 + 2,340,864
    + 32,640 = 2,373,632 over 2048 tokens = 1159 tokens exactly (unpaged: 128 + 2047 / 2 = 1151.5)."""
    c = hf_config("meta-llama/Meta-Llama-3.1-8B")
    d = c["hidden_size"] // c["num_attention_heads"]
    assert 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * d * 2 == KV_TOKEN == 131_072
    assert 128 + 256 * (135 * 136 // 2 - 36) + 15 * 2176 == 2_373_632
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, PROMPT, GEN), framework="vllm", tp=1).summary
    assert s["kv_steady_tokens_per_request"] == 2_373_632 / 2048 == 1159
    assert s["kv_bytes_per_request_steady_per_gpu"] == KV_TOKEN * 1159 == 151_912_448
    assert s["kv_bytes_per_request_per_gpu"] == KV_TOKEN * (PROMPT + GEN)          # the worst case, unchanged


def test_llama_8b_steady_capacity_by_hand():
    """KV room 60,063,976,980.48 B (tests/test_hand_capacity.py: the prefill working set is one
    step of 8192 prompt tokens whatever the prompt length). Worst case: floor(room / (131,072 x
    2176)) = floor(210.6) = 210. Steady state: floor(room / (131,072 x 1159)) = floor(395.4) = 395
    (no watermark: vLLM V1 keeps none); batch 395 fits the steady state, 396 does not, and 395 is
    past the worst case."""
    assert math.floor(ROOM / (KV_TOKEN * (PROMPT + GEN))) == 210
    assert math.floor(ROOM / (KV_TOKEN * 1159)) == 395
    for batch, fits in ((395, True), (396, False)):
        s = deploy("Llama-3.1-8B", "H100", Scenario(batch, PROMPT, GEN), framework="vllm", tp=1).summary
        assert s["max_concurrent_requests"] == 210 and not s["fits"]
        assert s["max_concurrent_requests_steady"] == 395
        assert s["fits_steady"] is fits, batch


def test_mean_tpot_at_batch_one_reads_the_mean_context():
    """At batch 1 every decode kernel is memory-bound and only attention reads grow with the
    context: 131,072 B per token of context (K and V of every layer). The last token is priced at
    128 + 2048 = 2176, the mean over the output at 128 + 2047 / 2 = 1151.5, so the two TPOTs differ
    by 131,072 x 1024.5 B / 3.35 TB/s = 40.09 us."""
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, PROMPT, GEN), framework="vllm", tp=1).summary
    assert s["tpot_s"] - s["tpot_mean_s"] == pytest.approx(KV_TOKEN * 1024.5 / H100_HBM_BYTES_PER_S, rel=1e-9)
    assert s["tokens_per_s_per_gpu_steady"] == pytest.approx(1 / s["tpot_mean_s"], rel=1e-12)


def test_trtllm_llama_8b_is_under_the_steady_state_throughput():
    """TensorRT-LLM runs Llama-3.1-8B in FP8 (weights and KV): KV per token 65,536 B. Worst case
    (capacity at the last position, decode at the last token) the throughput at capacity is below
    the measured 22,714 tok/s, which a speed of light must not be; the steady state at its own
    capacity is above it. And the steady figure is no more than the HBM floor allows: a step reads
    at least the 8,030,261,248 FP8 weights plus C x 1151.5 tokens x 65,536 B of cache, so
    throughput <= C x 3.35e12 / (8,030,261,248 + C x 1151.5 x 65,536)."""
    extra = ("--weight-format", "fp8_block128", "--act-dtype", "fp8")

    def at(batch: int) -> dict:
        return deploy_json("Llama-3.1-8B", "H100", {"tp": 1}, "vllm", "fp8", PROMPT, GEN, batch, extra)["deployment"]

    one = at(1)
    assert one["kv_bytes_per_request_per_gpu"] == 65_536 * (PROMPT + GEN)
    assert one["kv_bytes_per_request_steady_per_gpu"] == 65_536 * 1159
    worst, steady = one["max_concurrent_requests"], one["max_concurrent_requests_steady"]
    assert steady > 1.8 * worst
    worst_rate = at(worst)["tokens_per_s_per_gpu"]
    top = at(steady)
    assert top["fits_steady"] and not top["fits"]
    assert worst_rate < TRTLLM_TOK_S <= top["tokens_per_s_per_gpu_steady"]
    floor_s = (llama_8b_params() + steady * 1151.5 * 65_536) / H100_HBM_BYTES_PER_S
    assert top["tokens_per_s_per_gpu_steady"] <= steady / floor_s


def test_sglang_reserves_a_share_of_the_remaining_output():
    """SGLang, token pages: the held cache averages 128 + 2047 / 2 = 1151.5 tokens; the scheduler
    reserves 0.098 x the remaining output, whose mean over j = 1..2048 of 2048 - j is 2047 / 2,
    so 0.098 x 1023.5 = 100.303 more: 1251.803. At 8192 output tokens the remaining output is
    clipped at 4096: sum_{k=0..8191} min(k, 4096) = 4096 x 4097 / 2 + 4095 x 4096 = 25,163,776,
    mean 3071.75, reserved 0.098 x 3071.75 = 301.0315, held 128 + 8191 / 2 = 4223.5."""
    table = load_tables()["sglang"]
    assert (table.admission.page_tokens, table.admission.reserve_ratio, table.admission.reserve_clip_tokens) == \
        (1, 0.098, 4096)
    assert float(steady_tokens(table.admission, 128, 2048)) == pytest.approx(1151.5 + 0.098 * 1023.5, rel=1e-12)
    assert 4096 * 4097 // 2 + 4095 * 4096 == 25_163_776
    assert float(steady_tokens(table.admission, 128, 8192)) == pytest.approx(4223.5 + 0.098 * 25_163_776 / 8192,
                                                                          rel=1e-12)
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, PROMPT, GEN), framework="sglang", tp=1).summary
    assert s["kv_steady_tokens_per_request"] == pytest.approx(1251.803, rel=1e-12)
    assert s["kv_bytes_per_request_steady_per_gpu"] == pytest.approx(KV_TOKEN * 1251.803, rel=1e-12)


def test_no_framework_pages_by_the_token():
    """Framework none: token pages, no reservation: 128 + 2047 / 2 = 1151.5 tokens. With no output
    a request holds its prompt, in whole vLLM pages: 16 x ceil(100 / 16) = 112 tokens, and the mean
    context is the prompt's, the last position's too (100 + 0): the two TPOTs are one step."""
    s = deploy("Llama-3.1-8B", "H100", Scenario(1, PROMPT, GEN), tp=1).summary
    assert s["kv_steady_tokens_per_request"] == 1151.5
    s0 = deploy("Llama-3.1-8B", "H100", Scenario(1, 100, 0), framework="vllm", tp=1).summary
    assert s0["kv_steady_tokens_per_request"] == 112
    assert s0["tpot_mean_s"] == s0["tpot_s"]


def test_grid_keeps_and_fronts_the_steady_capacity(tmp_path):
    """The grid and its fronts serve by the steady state (engine.serving.steady.FRONT_BASIS), the worst
    case beside it. Llama-3.1-8B on one H100, vLLM, BF16 KV, prompt 128, output 2048, grid batches
    1, 256 and 512. By hand (test_llama_8b_steady_capacity_by_hand): KV per token 131,072 B, room
    60,063,976,980.48 B; worst case floor(room / (131,072 x 2176)) = 210, steady state floor(room /
    (131,072 x 1159)) = 395. So the grid's batches are 1 and 256 (<= 395, the larger capacity; 512
    is past both), plus that capacity itself: rows 1, 256, 395 (the worst case's 210 is each row's
    max_concurrent_requests, not a row). Batches 256 and 395 do not fit the worst case and the
    steady state serves them.

    The front: the decode step reads the weights once for the whole batch and each request's
    cache, so its time is a + b x B with a > 0 (the 16 GB of weights) and tokens/s per GPU = B / (a
    + b x B) rises with the batch while tokens/s per user = 1 / (a + b x B) falls: every served
    batch is on the front, 395 (the steady capacity) the highest throughput. Under the worst case
    256 and 395 would not be served and 210 would be the front's end. Planted bugs caught: the
    grid's batches cut at the worst-case capacity (rows 1, 210), the steady capacity on the last
    position's KV (395 -> 210), capacity(steady=True) returning bytes (rows up to 512), on_front
    served by ``fits``."""
    import polars as pl
    import yaml
    from engine.serving.fronts import grid_front
    from engine.batch.grid_eval import evaluate_model
    from tests.conftest import _evaluation

    grid = {"doc": "One H100, one config.", "gpus": ["H100"], "gpu_counts": [1], "beyond_fit": 1,
            "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
            "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
            "scenarios": {"input_lengths": [PROMPT], "beyond_max_context": 1, "output_lengths": [GEN],
                          "batches": [1, 256, 512]},
            "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 1, "input": PROMPT, "output": GEN}]}}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    assert math.floor(ROOM / (KV_TOKEN * (PROMPT + GEN))) == 210 and math.floor(ROOM / (KV_TOKEN * 1159)) == 395
    columns, _, _ = evaluate_model(_evaluation("meta-llama/Meta-Llama-3.1-8B"), path)
    rows = pl.DataFrame(columns)
    rows = rows.with_columns(grid_front(rows)).filter(pl.col("phase") == "decode").sort("batch")
    assert rows["batch"].to_list() == [1, 256, 395]
    assert set(rows["max_concurrent_requests"]) == {210} and set(rows["max_concurrent_requests_steady"]) == {395}
    assert rows["fits"].to_list() == [True, False, False]
    assert rows["fits_steady"].to_list() == [True, True, True]
    assert rows["on_front"].to_list() == [True, True, True]


def test_the_sizing_search_serves_up_to_the_steady_capacity():
    """``archledger plan``'s search (engine.serving.sizing.search) tries every batch up to a config's
    steady-state capacity and serves by the steady state, as the grid does. Llama-3.1-8B on one
    H100, vLLM, BF16 KV, prompt 128, output 2048, no SLA bound, one GPU: by hand
    (test_llama_8b_steady_capacity_by_hand) the worst case holds 210 requests and the steady state
    395, so the one config (TP 1) serves batches 1..395, every one of them (the search tries every
    batch up to 512), each point's worst-case capacity 210 beside it. Planted bug caught: the
    search's batches cut at the worst-case capacity (capacity(steady=True) returning the last
    position's fit: served batches 1..210, and plan answers with the smaller batch's throughput)."""
    from engine.deploy.hardware import load_gpus
    from engine.deploy.structure import Options
    from engine.serving.sizing import SLA, search
    from tests.conftest import _evaluation

    assert math.floor(ROOM / (KV_TOKEN * (PROMPT + GEN))) == 210 and math.floor(ROOM / (KV_TOKEN * 1159)) == 395
    ev = _evaluation("meta-llama/Meta-Llama-3.1-8B")
    (found,) = search(ev, [load_gpus()["H100"]], PROMPT, GEN, SLA(1e30, 1e30), max_gpus=1,
                      options=Options(framework="vllm"), fusion=load_tables(ev.corpus.root / "fusion")["vllm"])
    assert [c.label() for c in found.configs] == ["tp1"]
    assert found.points["batch"].tolist() == list(range(1, 396))
    assert set(found.points["max_concurrent_requests_worst"].tolist()) == {210}
    assert set(found.points["max_concurrent_requests"].tolist()) == {395}


def test_front_points_are_the_flagged_rows_by_hand():
    """engine.serving.steady.front_points, what the deploy page's front chart fetches at a grid point:
    per (framework, KV dtype, prompt, output) the decode rows flagged on_front, with steady tokens/s
    per GPU = batch / tpot_mean_s / n_gpus and tokens/s per user = 1 / tpot_mean_s (hand values
    below), tpot_s the steady TPOT and tpot_last_s the worst case, by GPU then fastest user first;
    a (framework, KV dtype, prompt, output) with no flagged row still has its (empty) entry."""
    import polars as pl
    from engine.serving.steady import front_points

    def row(gpu, n, batch, tpot_mean, on, phase="decode", prompt=1024):
        return {"gpu": gpu, "n_gpus": n, "config": f"tp{n}", "batch": batch, "framework": "vllm", "kv_dtype": "bf16",
                "input_len": prompt, "output_len": 256, "phase": phase, "on_front": on, "ttft_s": 0.5,
                "tpot_mean_s": tpot_mean, "tpot_s": tpot_mean * 1.25, "max_concurrent_requests_steady": 40,
                "max_concurrent_requests": 30}
    table = pl.DataFrame([row("H100", 2, 8, 0.02, True), row("B200", 1, 1, 0.004, True), row("H100", 2, 1, 0.01, True),
                          row("H100", 2, 4, 0.015, False), row("H100", 2, 8, 0.02, False, phase="prefill"),
                          row("H100", 2, 1, 0.01, False, prompt=8192)])
    out = front_points(table)
    assert set(out) == {("vllm", "bf16", 1024, 256), ("vllm", "bf16", 8192, 256)}
    assert out[("vllm", "bf16", 8192, 256)]["rows"] == []
    got = [dict(zip(out[("vllm", "bf16", 1024, 256)]["columns"], r)) for r in out[("vllm", "bf16", 1024, 256)]["rows"]]
    assert [(r["gpu"], r["batch"]) for r in got] == [("B200", 1), ("H100", 1), ("H100", 8)]
    # B200, 1 GPU, batch 1 at 4 ms: 1 / 0.004 / 1 = 250 tokens/s per GPU and per user
    # H100, 2 GPUs: batch 1 at 10 ms -> 1 / 0.01 / 2 = 50 per GPU, 100 per user;
    #               batch 8 at 20 ms -> 8 / 0.02 / 2 = 200 per GPU, 50 per user
    assert [round(r["tokens_per_s_per_gpu"], 9) for r in got] == [250.0, 50.0, 200.0]
    assert [round(r["tokens_per_s_per_user"], 9) for r in got] == [250.0, 100.0, 50.0]
    assert [r["tpot_last_s"] for r in got] == [0.004 * 1.25, 0.01 * 1.25, 0.02 * 1.25]
    assert {(r["max_concurrent_requests"], r["max_concurrent_requests_worst"]) for r in got} == {(40, 30)}
