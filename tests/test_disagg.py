"""Disaggregated prefill/decode (engine.serving.disagg, ``archledger disagg``) and its place in
``archledger plan``: KV transfer bytes and time by hand from config numbers and link figures, the pool
ratio by hand from each pool's ``deploy`` numbers, TTFT = prefill TTFT + transfer, plan's
disaggregated answers equal ``disagg`` at the same point, the front is a true Pareto front of
evaluated points, $/M tokens by hand from the GPU file's price, one-line errors."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.cli import main
from engine.deploy import Options, Scenario
from engine.serving.disagg import FIELDS, Pool, disaggregate, links, parse_pool, transfer_bytes
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import DEFAULT_ROOT, load_gpu, load_gpus
from engine.serving.sizing import POINT_FIELDS, SLA, search
from engine.serving.pairing import disaggregated, transfer_time
from engine.language.errors import SpecError

from tests.conftest import _evaluation, hf_config
from tests.deploy_helpers import close, deploy, model_id

GPUS = load_gpus()
VLLM = load_tables()["vllm"]
# link figures by hand (gpus/*.yaml, gpus/collectives/nccl.yaml): NCCL base latency (ring, LL) and one hop
BASE_US, NET_HOP_US, NVLINK_HOP_US = 6.6, 2.7, 0.6
H200_NIC = 50e9            # gpus/h200.yaml scale_out gb_s: 50 (one direction)
H100_NVLINK = 900e9 / 2    # gpus/h100-sxm.yaml scale_up gb_s: 900, both directions -> one
GB200_NVLINK = 1800e9 / 2  # gpus/gb200-nvl72.yaml scale_up gb_s: 1800, domain 72


def _split(model, prefill, decode, batch_p, batch_d, input_len, output_len, **load):
    ev = _evaluation(model_id(model))
    gp, cp = parse_pool(prefill, GPUS, "--prefill")
    gd, cd = parse_pool(decode, GPUS, "--decode")
    return disaggregate(ev, Pool(gp, cp, batch_p), Pool(gd, cd, batch_d), input_len, output_len,
                        Options(framework="vllm"), VLLM, **load)


# -- KV bytes and transfer time by hand ---------------------------------------------------------------

def test_kv_transfer_bytes_by_hand_gqa_mla_sliding():
    L = 8192
    c = hf_config(model_id("Llama-3.1-70B"))
    head_dim = c["hidden_size"] // c["num_attention_heads"]                     # 8192 / 64 = 128
    llama = c["num_hidden_layers"] * c["num_key_value_heads"] * head_dim * 2 * 2 * L   # K and V, BF16
    assert llama == 80 * 8 * 128 * 2 * 2 * 8192 == 2_684_354_560
    assert transfer_bytes(_evaluation(model_id("Llama-3.1-70B")), L, 2) == llama
    c = hf_config(model_id("DeepSeek-V3"))
    mla = c["num_hidden_layers"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2 * L   # one latent + rope key
    assert mla == 61 * (512 + 64) * 2 * 8192 == 575_668_224
    assert transfer_bytes(_evaluation(model_id("DeepSeek-V3")), L, 2) == mla
    assert transfer_bytes(_evaluation(model_id("DeepSeek-V3")), L, 1) == mla // 2        # FP8 KV
    # sliding layers send their window only (gpt-oss-20b: 12 of 24 layers slide over 128 tokens)
    c = hf_config(model_id("gpt-oss-20b"))
    sliding = c["layer_types"].count("sliding_attention")
    per_token = c["num_key_value_heads"] * c["head_dim"] * 2 * 2
    expected = (c["num_hidden_layers"] - sliding) * per_token * L + sliding * per_token * c["sliding_window"]
    assert transfer_bytes(_evaluation(model_id("gpt-oss-20b")), L, 2) == expected


def test_transfer_time_by_hand_gqa_split_over_tp():
    """Llama-3.1-70B TP8 -> TP8 on H200: each GPU holds and sends 1/8 of the KV heads over its own
    NIC; scale-out alpha = base + one network hop."""
    r = _split("Llama-3.1-70B", "H200 tp8", "H200 tp8", 1, 16, 8192, 1024)
    assert r["kv_transfer_bytes"] == 2_684_354_560
    assert r["kv_link_bytes"] == 2_684_354_560 / 8 == 335_544_320
    assert r["kv_link"] == "scale_out"                    # 16 GPUs > one 8-GPU NVLink domain
    assert close(r["kv_transfer_s"], (BASE_US + NET_HOP_US) * 1e-6 + 335_544_320 / H200_NIC)   # 6.72 ms
    assert close(r["kv_transfer_s"], 0.0067201864)



def test_kv_crosses_at_the_larger_share_per_gpu():
    """Llama-3.1-70B from a TP8 prefill pool to a TP4 decode pool on H200: a prefill GPU sends 1/8 of
    the 2,684,354,560 B but a decode GPU receives 1/4, 671,088,640 B over its NIC, and the transfer
    takes as long as the larger share (mutant join-smaller-share: the prefill side's 1/8)."""
    r = _split("Llama-3.1-70B", "H200 tp8", "H200 tp4", 1, 16, 8192, 1024)
    assert r["kv_transfer_bytes"] == 2_684_354_560
    assert r["kv_link_bytes"] == 2_684_354_560 / 4 == 671_088_640
    assert r["kv_link"] == "scale_out"                    # 12 GPUs > one 8-GPU NVLink domain
    assert close(r["kv_transfer_s"], (BASE_US + NET_HOP_US) * 1e-6 + 671_088_640 / H200_NIC)


def test_the_prefill_choice_budgets_the_larger_share_per_gpu():
    """The prefill choice leaves a prefill point the TTFT bound less the KV transfer of the larger
    share per GPU over the scale-out link (an upper bound of the pair's link): Llama-3.1-70B's
    2,684,354,560 B at 8192 tokens from TP8 prefill GPUs (1/8 each) to decode pools of TP4, TP8 and
    TP16 (1/4, 1/8, 1/16) take 1/4, 1/8 and 1/8 over H200's NIC (mutant transfer-smaller-share)."""
    _, out = links(GPUS["H200"], GPUS["H200"])
    kv = 2_684_354_560
    seconds = transfer_time(out, kv / 8, [kv / 4, kv / 8, kv / 16])
    alpha = (BASE_US + NET_HOP_US) * 1e-6
    for got, share in zip(seconds, (kv / 4, kv / 8, kv / 8)):
        assert close(got, alpha + share / H200_NIC)

def test_transfer_time_by_hand_mla_latent_and_scale_up():
    """DeepSeek-V3: the MLA latent is not split over attention TP, so a decode GPU of a DP-attention
    replica (attention TP 1) receives the whole 575.7 MB. Both pools in one GB200-NVL72 rack (16 of 72
    GPUs): the scale-up link, alpha = base + one NVLink hop."""
    r = _split("DeepSeek-V3", "GB200-NVL72 tp8", "GB200-NVL72 tp8-ep8-dp_attn8", 1, 64, 8192, 1024)
    assert r["kv_transfer_bytes"] == r["kv_link_bytes"] == 575_668_224
    assert r["total_gpus"] <= 72 and r["kv_link"] == "scale_up"
    assert close(r["kv_transfer_s"], (BASE_US + NVLINK_HOP_US) * 1e-6 + 575_668_224 / GB200_NVLINK)
    # the same split over H200 nodes crosses the network
    r = _split("DeepSeek-V3", "H200 tp8", "H200 tp8-ep8-dp_attn8", 1, 64, 8192, 1024)
    assert r["kv_link"] == "scale_out"
    assert close(r["kv_transfer_s"], (BASE_US + NET_HOP_US) * 1e-6 + 575_668_224 / H200_NIC)    # 11.5 ms


def test_two_small_pools_in_one_node_use_nvlink():
    r = _split("Llama-3.1-8B", "H100 tp1", "H100 tp1", 1, 8, 2048, 256)
    per_token = 32 * 8 * 128 * 2 * 2          # Llama-3.1-8B: 32 layers, 8 KV heads of 128, K and V, BF16
    assert r["kv_link_bytes"] == r["kv_transfer_bytes"] == per_token * 2048
    assert r["total_gpus"] == r["prefill_replicas"] + r["decode_replicas"] <= 8 and r["kv_link"] == "scale_up"
    assert close(r["kv_transfer_s"], (BASE_US + NVLINK_HOP_US) * 1e-6 + per_token * 2048 / H100_NVLINK)


# -- TTFT, TPOT and the pool ratio by hand --------------------------------------------------------------

def test_ttft_tpot_and_pool_ratio_by_hand():
    """Each pool's numbers are deploy's at its own point (prefill: output 1; decode: the output, in
    the steady state of continuous batching: deploy's tpot_mean_s); TTFT adds the transfer; the ratio
    and the replicas follow the documented rule."""
    inp, out, b_p, b_d = 8192, 1024, 1, 64
    r = _split("DeepSeek-V3", "H200 tp8", "H200 tp8-ep8-dp_attn8", b_p, b_d, inp, out)
    pre = deploy("DeepSeek-V3", "H200", Scenario(b_p, inp, 1), "vllm", tp=8).summary
    dec = deploy("DeepSeek-V3", "H200", Scenario(b_d, inp, out), "vllm", tp=8, ep=8, dp_attn=8).summary
    assert close(r["prefill_ttft_s"], pre["ttft_s"]) and close(r["tpot_s"], dec["tpot_mean_s"])
    assert close(r["ttft_s"], pre["ttft_s"] + r["kv_transfer_s"])
    x_p = b_p / pre["ttft_s"]                       # prompts per second of one prefill replica
    x_d = b_d / (out * dec["tpot_mean_s"])          # requests per second of one decode replica
    assert close(r["pool_ratio"], x_d / x_p)
    assert r["decode_replicas"] == 1 and r["prefill_replicas"] == math.ceil(x_d / x_p)
    assert r["total_gpus"] == 8 * r["prefill_replicas"] + 8
    assert close(r["requests_per_s"], min(r["prefill_replicas"] * x_p, x_d))
    assert close(r["tokens_per_s_per_gpu"], r["requests_per_s"] * out / r["total_gpus"])
    assert close(r["tokens_per_s_per_user"], 1 / dec["tpot_mean_s"])
    # a load: 10 requests/s -> ceil(10 / x_d) decode and ceil(10 / x_p) prefill replicas
    r = _split("DeepSeek-V3", "H200 tp8", "H200 tp8-ep8-dp_attn8", b_p, b_d, inp, out, rate=10.0)
    assert (r["decode_replicas"], r["prefill_replicas"]) == (math.ceil(10 / x_d), math.ceil(10 / x_p))
    assert r["total_gpus"] == 8 * (math.ceil(10 / x_d) + math.ceil(10 / x_p)) and r["requests_per_s"] >= 10
    # 300 users at 64 per decode replica: 5 decode replicas, prefill for their demand
    r = _split("DeepSeek-V3", "H200 tp8", "H200 tp8-ep8-dp_attn8", b_p, b_d, inp, out, users=300)
    assert r["decode_replicas"] == 5 and r["prefill_replicas"] == math.ceil(5 * x_d / x_p)
    assert not r["users_held_exactly"]          # ceil(300 / 5) = 60, not 64


# -- plan: disaggregated answers, consistency, the front -------------------------------------------------

MODEL, INPUT, OUTPUT = "Llama-3.1-8B", 4096, 512


@pytest.fixture(scope="module")
def plan_pairs():
    ev = _evaluation(model_id(MODEL))
    gpus = [GPUS["H100"], GPUS["H200"]]
    sla = SLA(0.5, 0.02)
    res = search(ev, gpus, INPUT, OUTPUT, sla, max_gpus=2, options=Options(framework="vllm"), fusion=VLLM, pools=True)
    return ev, res, disaggregated(ev, res, gpus, INPUT, OUTPUT, sla, Options(framework="vllm")), sla


def test_plan_disaggregated_answers_equal_the_disagg_api(plan_pairs):
    """Every printed split meets the SLA, and `disaggregate` at its pools and batches gives the same
    numbers (each pool planned on its own, fusion decided at its own point)."""
    ev, _, pairs, sla = plan_pairs
    assert [(p.prefill_gpu, p.decode_gpu) for p in pairs] == [("H100", "H100"), ("H100", "H200"),
                                                              ("H200", "H100"), ("H200", "H200")]
    checked = 0
    for pair in pairs:
        for row in pair.cheapest(2):
            assert list(row) == list(FIELDS) and row["meets_sla"]
            assert row["ttft_s"] <= sla.ttft_s and row["tpot_s"] <= sla.tpot_s
            got = _split(MODEL, f"{row['prefill_gpu']} {row['prefill_config']}", f"{row['decode_gpu']} "
                         f"{row['decode_config']}", row["prefill_batch"], row["decode_batch"], INPUT, OUTPUT)
            assert got["prefill"]["fits"] and got["decode"]["fits_steady"]
            for name in FIELDS:
                if isinstance(row[name], float):
                    assert close(got[name], row[name]), (name, got[name], row[name])
                elif name != "meets_sla":
                    assert got[name] == row[name], (name, got[name], row[name])
            checked += 1
    assert checked >= 4


def test_plan_cli_marks_both_kinds_and_keeps_the_aggregated_answer(capsys):
    args = ["plan", MODEL, "--input", str(INPUT), "--output", str(OUTPUT), "--gpu", "H100", "--ttft", "0.5",
            "--tpot", "0.02", "--max-gpus", "2", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["answer"]["kind"] == "aggregated" and list(out["answer"]) == list(POINT_FIELDS) + ["time", "times"]
    split = out["answer_disaggregated"]
    assert split["kind"] == "disaggregated" and split["meets_sla"]
    assert split == min((g["cheapest"][0] for g in out["disaggregated"] if g["cheapest"]),
                        key=lambda r: (r["total_gpus"], -r["tokens_per_s_per_gpu"]))
    assert out["prices"]["H100"]["usd_per_hour"] == 3.99 and "lambda.ai" in out["prices"]["H100"]["src"]
    assert main(args + ["--no-disagg"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["answer"] == out["answer"] and plain["disaggregated"] == [] and plain["answer_disaggregated"] is None
    assert main(args[:-1]) == 0
    text = capsys.readouterr().out
    assert "\n  H100 " in text and "\n  H100 -> H100 " in text      # a row in each answer table
    assert main(args[:-1] + ["--detail"]) == 0
    text = capsys.readouterr().out
    assert "answer, aggregated, on each time:\n  H100:" in text and "answer, disaggregated: H100 -> H100:" in text


def test_disaggregated_front_is_pareto_over_evaluated_points(plan_pairs):
    """Brute force: no disaggregated point of the pair beats a front point, every point is matched by
    one, and every front point joins a served prefill point and a served decode point of the search."""
    _, res, pairs, _ = plan_pairs
    by_gpu = {r.gpu: r for r in res}
    pair = pairs[0]
    p = pair.points
    x, y = p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]
    rows = pair.front()
    fx = np.array([r["tokens_per_s_per_user"] for r in rows])
    fy = np.array([r["tokens_per_s_per_gpu"] for r in rows])
    assert len(rows) >= 5
    for a, b in zip(fx, fy):
        assert not ((x >= a) & (y >= b) & ((x > a) | (y > b))).any()
    assert ((fx[:, None] >= x[None, :]) & (fy[:, None] >= y[None, :])).any(axis=0).all()
    pre, dec = by_gpu[pair.prefill_gpu], by_gpu[pair.decode_gpu]
    pre_labels = [c.label() for c in pre.pool_configs]
    dec_labels = [c.label() for c in dec.configs]
    for r in rows:
        i = pre_labels.index(r["prefill_config"])
        hit = (pre.prefill["config"] == i) & (pre.prefill["batch"] == r["prefill_batch"])
        assert hit.sum() == 1 and close(float(pre.prefill["ttft_s"][hit][0]), r["prefill_ttft_s"])
        k = dec_labels.index(r["decode_config"])
        hit = (dec.points["config"] == k) & (dec.points["batch"] == r["decode_batch"])
        assert hit.sum() == 1 and close(float(dec.points["tpot_s"][hit][0]), r["tpot_s"])


# -- prices ---------------------------------------------------------------------------------------------

def test_usd_per_m_tokens_by_hand(plan_pairs):
    """$/M output tokens = GPUs x $/h / (tokens/s x 3600) x 1e6 with the GPU file's price (H100 $3.99
    per GPU-hour, Lambda's on-demand page); a GPU without a price gives none."""
    _, res, pairs, _ = plan_pairs
    h100 = next(r for r in res if r.gpu == "H100")
    row = h100.cheapest(1)[0]
    tokens = row["tokens_per_s_per_gpu"] * row["total_gpus"]
    assert close(row["usd_per_hour"], row["total_gpus"] * 3.99)
    assert close(row["usd_per_m_tokens"], row["total_gpus"] * 3.99 / (tokens * 3600) * 1e6)
    split = next(p for p in pairs if (p.prefill_gpu, p.decode_gpu) == ("H100", "H100")).cheapest(1)[0]
    assert close(split["usd_per_m_tokens"], split["total_gpus"] * 3.99
                 / (split["tokens_per_s_per_gpu"] * split["total_gpus"] * 3600) * 1e6)
    assert next(r for r in res if r.gpu == "H200").cheapest(1)[0]["usd_per_m_tokens"] is None   # H200: no price
    mixed = next(p for p in pairs if (p.prefill_gpu, p.decode_gpu) == ("H100", "H200")).cheapest(1)
    assert all(r["usd_per_m_tokens"] is None for r in mixed)



def test_a_split_over_two_gpu_types_prices_each_pool_at_its_own_gpu():
    """Llama-3.1-8B prefilled on an H100 ($3.99 per GPU-hour) and decoded on B200s ($6.69): at 20
    requests/s the split needs P prefill and D decode replicas of one GPU each (today 1 and 2:
    3.99 + 2 x 6.69 = $17.37 an hour), priced P x 3.99 + D x 6.69 (mutant disagg-price-prefill-only:
    the decode GPUs at the H100's price)."""
    r = _split("Llama-3.1-8B", "H100 tp1", "B200 tp1", 1, 8, 2048, 256, rate=20.0)
    p, d = r["prefill_replicas"], r["decode_replicas"]
    assert p >= 1 and d >= 1 and r["total_gpus"] == p + d
    assert close(r["usd_per_hour"], p * 3.99 + d * 6.69)
    tokens = r["tokens_per_s_per_gpu"] * r["total_gpus"]
    assert close(r["usd_per_m_tokens"], (p * 3.99 + d * 6.69) / (tokens * 3600) * 1e6)

def test_price_needs_its_source(tmp_path):
    src = (DEFAULT_ROOT / "h100-sxm.yaml").read_text()
    assert "price:" in src
    (tmp_path / "x.yaml").write_text(src.replace("src: ", "note: "))
    with pytest.raises(SpecError) as exc:
        load_gpu(tmp_path / "x.yaml", tmp_path)
    assert "price" in str(exc.value) and "\n" not in str(exc.value)


# -- bad input ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prefill, decode, needle", [
    ("H9000 tp8", "H200 tp8", "unknown GPU 'H9000'"),
    ("H200 tp3", "H200 tp8", "tp3 cannot run"),
    ("H200 tp8", "H200 tp8-ep16", "ep 16 does not divide tp 8"),
    ("H200 tp8-dp2", "H200 tp8", "'dp2'"),
    ("H200 tp8 pp2", "H200 tp8", "is not 'GPU CONFIG'"),
])
def test_bad_split_is_one_line(capsys, prefill, decode, needle):
    args = ["disagg", "DeepSeek-V3", "--input", "8192", "--output", "1024", "--prefill", prefill,
            "--decode", decode, "--batch", "8"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_disagg_cli_text_and_json(capsys):
    args = ["disagg", "DeepSeek-V3", "--input", "8192", "--output", "1024", "--prefill", "H200 tp8",
            "--decode", "H200 tp8-ep8-dp_attn8", "--batch", "64"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out)[:len(FIELDS)] == list(FIELDS) and out["prefill_batch"] == 1    # 8192 // 8192 prompts
    assert out["kv_transfer_bytes"] == 575_668_224 and out["prefill"]["fits"] and out["decode"]["fits"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "pool ratio" in text and "TTFT" in text and "transfer" in text


@pytest.mark.parametrize("output_len", [OUTPUT, 1])
def test_prefill_pools_leave_the_aggregated_search_unchanged(output_len):
    """search(..., pools=True) adds prefill-pool points beside the aggregated ones; the aggregated
    points are the same arrays (also when the output is 1 token, the prefill pool's own length)."""
    ev = _evaluation(model_id(MODEL))
    kw = dict(max_gpus=2, options=Options(framework="vllm"), fusion=VLLM)
    plain = search(ev, [GPUS["H100"]], INPUT, output_len, SLA(0.5, 0.02), **kw)[0]
    pooled = search(ev, [GPUS["H100"]], INPUT, output_len, SLA(0.5, 0.02), pools=True, **kw)[0]
    assert [c.label() for c in plain.configs] == [c.label() for c in pooled.configs]
    assert set(plain.points) == set(pooled.points)
    for name in plain.points:
        assert np.array_equal(plain.points[name], pooled.points[name]), name
    assert pooled.prefill and not plain.prefill


def test_disagg_cli_defaults_are_the_engines():
    """The parser stays light and writes its defaults out; they must be engine.deploy.structure's."""
    from engine.cli import parser
    from engine.deploy.structure import HBM_FRACTION, PREFILL_TOKENS
    args = parser().parse_args(["disagg", MODEL, "--input", "1024", "--output", "128", "--prefill", "H100 tp1",
                                "--decode", "H100 tp1", "--batch", "4"])
    assert args.hbm_fraction == HBM_FRACTION and args.prefill_tokens == PREFILL_TOKENS
