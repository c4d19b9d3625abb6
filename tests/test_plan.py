"""``archledger plan`` and engine.deploy.sizing: the front is a true Pareto front of evaluated points,
the SLA answers agree with ``archledger deploy`` at the same config and batch, an SLA nobody meets
is one line and exit 1, and the JSON schema."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.cli import main
from engine.deploy import Options, Scenario, check, tokens_per_device
from engine.deploy.fusion import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.sizing import BATCH_STEP, POINT_FIELDS, SLA, _device_tokens, batch_list, front, search
from engine.spec.errors import SpecError

from tests.conftest import _evaluation
from tests.deploy_helpers import PLAN_FROM_DEPLOY, close, deploy, model_id, served_in_steady_state

MOE = "Qwen3-30B-A3B"
DENSE = "Llama-3.1-8B"
INPUT, OUTPUT = 4096, 1024


@pytest.fixture(scope="module")
def moe_search():
    ev = _evaluation(model_id(MOE))
    res = search(ev, [load_gpus()["H100"]], INPUT, OUTPUT, SLA(1.0, 0.02, users=300), max_gpus=8,
                 options=Options(framework="vllm"), fusion=load_tables()["vllm"])
    return ev, res[0]


def _plan_json(capsys, *args) -> tuple[int, dict]:
    code = main(["plan", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


# -- the front --------------------------------------------------------------------------------------

def test_front_by_hand():
    # (x, y): (1, 3) (2, 2) (3, 1) are non-dominated; (2, 1) is dominated by (2, 2); a duplicate counts once
    x, y = [1, 2, 3, 2, 2], [3, 2, 1, 1, 2]
    keep = sorted(front(x, y).tolist())
    assert keep in ([0, 1, 2], [0, 2, 4])
    assert front([], []).size == 0


def test_front_is_the_pareto_set_of_every_evaluated_point(moe_search):
    """Brute force over every (config, batch) the search evaluated: no point beats a front point,
    and every point is matched or beaten by a front point."""
    _, res = moe_search
    p = res.points
    x, y = p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]
    rows = res.front()
    fx = np.array([r["tokens_per_s_per_user"] for r in rows])
    fy = np.array([r["tokens_per_s_per_gpu"] for r in rows])
    assert len(rows) >= 10
    for a, b in zip(fx, fy):
        dominated = (x >= a) & (y >= b) & ((x > a) | (y > b))
        assert not dominated.any()
    covered = ((fx[:, None] >= x[None, :]) & (fy[:, None] >= y[None, :])).any(axis=0)
    assert covered.all()


def test_front_points_are_legal_points_deploy_reproduces(moe_search):
    """Front points (and a few others) re-evaluated one by one with the public deploy(): legal config,
    served batch, the same TTFT/TPOT/throughput; no re-evaluated point dominates a front point."""
    ev, res = moe_search
    rows = res.front()
    picks = [rows[i] for i in sorted({0, len(rows) // 3, 2 * len(rows) // 3, len(rows) - 1})]
    rng = np.random.default_rng(0)
    others = res.rows(rng.choice(len(res.points["batch"]), 4, replace=False))
    fx = np.array([r["tokens_per_s_per_user"] for r in rows])
    fy = np.array([r["tokens_per_s_per_gpu"] for r in rows])
    for r in picks + others:
        config = dict(tp=r["tp"], ep=r["ep"], dp_attn=r["dp_attn"], pp=r["pp"])
        assert not check(ev, ParallelConfig(**config))
        s = deploy(MOE, "H100", Scenario(r["batch"], INPUT, OUTPUT), "vllm", **config).summary
        assert served_in_steady_state(s, r["batch"])
        for name, field in PLAN_FROM_DEPLOY.items():
            assert close(s[field], r[name]), (r["config"], r["batch"], name, s[field], r[name])
        a, b = 1 / s["tpot_mean_s"], s["tokens_per_s_per_gpu_steady"]
        assert not ((a >= fx) & (b >= fy) & ((a > fx) | (b > fy))).any()


def test_points_across_fusion_token_limits_match_deploy():
    """vLLM's all-reduce fusions hold up to 32 decode tokens per GPU on Hopper (corpus/fusion/vllm.yaml):
    the search evaluates batches on both sides of that limit with different structures; each one
    equals deploy(), whose plan decides fusion at that very batch."""
    ev = _evaluation(model_id(DENSE))
    res = search(ev, [load_gpus()["H100"]], INPUT, OUTPUT, SLA(10.0, 1.0), max_gpus=8,
                 options=Options(framework="vllm"), fusion=load_tables()["vllm"])[0]
    p = res.points
    labels = [c.label() for c in res.configs]
    for label, batches in (("tp8", (1, 32, 33, 64)), ("tp4-dp_attn2", (64, 65, 66))):
        for b in batches:
            i = np.flatnonzero((p["config"] == labels.index(label)) & (p["batch"] == b))
            assert i.size == 1, (label, b)
            r = res.rows(i)[0]
            config = dict(tp=r["tp"], ep=r["ep"], dp_attn=r["dp_attn"], pp=r["pp"])
            s = deploy(DENSE, "H100", Scenario(b, INPUT, OUTPUT), "vllm", **config).summary
            for name in ("ttft_s", "tpot_s", "tpot_last_s"):
                assert close(s[PLAN_FROM_DEPLOY[name]], r[name]), (label, b, name, s[PLAN_FROM_DEPLOY[name]], r[name])


def test_device_tokens_match_tokens_per_device():
    """The vectorized token count that picks fusion regimes is tokens_per_device's."""
    batches = np.arange(1, 200)
    for config in (ParallelConfig(tp=8, dp_attn=8, ep=8), ParallelConfig(tp=4, pp=2), ParallelConfig(tp=2, dp_attn=2)):
        prefill, decode = _device_tokens(config, batches, 8192)
        for b, pre, dec in zip(batches.tolist(), prefill, decode):
            t = tokens_per_device(config, Scenario(b, 8192, 1024))
            assert (t["prefill"], t["decode"]) == (pre, dec), (config, b)


def test_batch_list_is_every_batch_then_steps():
    assert batch_list(5).tolist() == [1, 2, 3, 4, 5]
    big = batch_list(5000)
    assert big[:512].tolist() == list(range(1, 513)) and big[-1] == 5000
    assert (big[513:] / big[512:-1] <= BATCH_STEP + 1 / 512).all()     # whole batches round down
    assert 1234 in batch_list(5000, users=2468)       # ceil(2468 / 2): the exact per-replica load


# -- the SLA answers --------------------------------------------------------------------------------

def test_cheapest_agree_with_archledger_deploy(capsys):
    """Every config printed as meeting the SLA, re-run with `archledger deploy` at its config and
    batch, meets it there with the same numbers; replicas hold the users."""
    users = 300
    code, out = _plan_json(capsys, MOE, "--input", str(INPUT), "--output", str(OUTPUT), "--gpu", "H100",
                           "--ttft", "1", "--tpot", "0.02", "--users", str(users), "--max-gpus", "8", "--top", "3", "--time", "estimate")
    assert code == 0
    rows = out["gpus"][0]["cheapest"]
    assert len(rows) == 3 and {k: out["answer"][k] for k in POINT_FIELDS} == rows[0]
    assert [r["total_gpus"] for r in rows] == sorted(r["total_gpus"] for r in rows)
    for r in rows:
        assert r["meets_sla"] and r["ttft_s"] <= 1 and r["tpot_s"] <= 0.02
        assert r["batch"] == math.ceil(users / r["replicas"]) and r["replicas"] * r["batch"] >= users
        assert r["total_gpus"] == r["replicas"] * r["n_gpus"]
        assert close(r["tokens_per_s_per_user"], 1 / r["tpot_s"])
        args = ["deploy", MOE, "--gpu", "H100", "--input", str(INPUT), "--output", str(OUTPUT),
                "--batch", str(r["batch"]), "--framework", "vllm", "--phase", "decode", "--json"]
        for name in ("tp", "ep", "dp_attn", "pp"):
            args += ["--" + name.replace("_", "-"), str(r[name])]
        assert main(args) == 0
        d = json.loads(capsys.readouterr().out)["deployment"]
        assert d["config"] == r["config"] and served_in_steady_state(d, r["batch"])
        for name, field in PLAN_FROM_DEPLOY.items():
            assert close(d[field], r[name]), (r["config"], name, d[field], r[name])


def test_rate_is_sustained(capsys):
    rate = 20.0
    code, out = _plan_json(capsys, DENSE, "--input", "2048", "--output", "512", "--gpu", "H100", "--ttft", "1",
                           "--tpot", "0.03", "--rate", str(rate), "--max-gpus", "4")
    assert code == 0
    for r in out["gpus"][0]["cheapest"]:
        per_replica = r["batch"] / (r["ttft_s"] + 512 * r["tpot_s"])    # Little's law, by hand
        assert close(r["requests_per_s"], r["replicas"] * per_replica) and r["requests_per_s"] >= rate
        assert (r["replicas"] - 1) * per_replica < rate                   # no spare replica


def test_tighter_tpot_never_needs_fewer_gpus():
    ev = _evaluation(model_id(DENSE))
    gpu, table = load_gpus()["H100"], load_tables()["vllm"]
    gpus = []
    for tpot in (0.03, 0.012, 0.006, 0.003):
        res = search(ev, [gpu], INPUT, OUTPUT, SLA(2.0, tpot, users=100), max_gpus=8,
                     options=Options(framework="vllm"), fusion=table)[0]
        best = res.cheapest(1)
        gpus.append(best[0]["total_gpus"] if best else math.inf)
    assert gpus == sorted(gpus) and gpus[0] < gpus[-1], gpus


# -- no answer and bad input ------------------------------------------------------------------------

def test_unmeetable_sla_is_one_line_and_exit_1(capsys):
    args = ["plan", DENSE, "--input", "8192", "--output", "1024", "--gpu", "H100", "--ttft", "0.001",
            "--tpot", "0.05", "--max-gpus", "2"]
    assert main(args) == 1
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("no config of ") and "TTFT <= 1 ms" in lines[0], lines
    assert "best TTFT" in lines[0] and captured.err == ""
    code, out = _plan_json(capsys, *args[1:])
    assert code == 1 and out["answer"] is None and out["gpus"][0]["cheapest"] == []


@pytest.mark.parametrize("bad, needle", [(["--ttft", "0"], "--ttft"), (["--tpot", "-1"], "--tpot"),
                                         (["--users", "0"], "--users"), (["--ttft", "nan"], "--ttft")])
def test_bad_numbers_are_one_line(capsys, bad, needle):
    args = ["plan", DENSE, "--input", "1024", "--output", "128", "--ttft", "1", "--tpot", "0.05", *bad]
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and needle in err[0]


def test_unknown_gpu_and_both_loads_are_one_line(capsys):
    base = ["plan", DENSE, "--input", "1024", "--output", "128", "--ttft", "1", "--tpot", "0.05"]
    assert main(base + ["--gpu", "H9000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown GPU 'H9000'" in err[0]
    with pytest.raises(SystemExit):
        main(base + ["--users", "4", "--rate", "2"])
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    with pytest.raises(SpecError):
        SLA(1.0, 0.05, users=3, rate=1.0)


# -- JSON schema ------------------------------------------------------------------------------------

def test_json_schema(capsys):
    code, out = _plan_json(capsys, DENSE, "--input", "1024", "--output", "256", "--gpu", "H100", "--gpu", "H200",
                           "--ttft", "0.5", "--tpot", "0.02", "--max-gpus", "2")
    assert code == 0
    assert set(out) == {"model_id", "input_len", "output_len", "sla", "framework", "kv_dtype", "act_dtype",
                        "weight_format", "max_gpus", "extrapolated", "time", "front_basis", "gpus", "answer",
                        "disaggregated", "answer_disaggregated", "prices"}   # the last three: tests/test_disagg.py
    # the fronts say which time and which capacity they use: the schedule estimate, steady state
    assert "schedule estimate" in out["front_basis"] and "steady state" in out["front_basis"]
    assert out["sla"] == {"ttft_s": 0.5, "tpot_s": 0.02, "users": None, "rate_rps": None}
    assert [g["gpu"] for g in out["gpus"]] == ["H100", "H200"]
    for g in out["gpus"]:
        assert set(g) == {"gpu", "time", "measured_tables", "configs", "configs_not_fitting", "points", "cheapest",
                          "front", "answers"}
        assert g["configs"] >= 3 and g["points"] > 0
        for r in g["cheapest"]:                   # the search's rows, on the schedule estimate
            assert list(r) == list(POINT_FIELDS)
        # this GPU type's answer on each time (H100 and H200 have measured tables: expected by default)
        assert g["time"] == "expected" and g["measured_tables"] and set(g["answers"]) == {"estimate", "bound", "expected"}
        for time, r in g["answers"].items():
            assert list(r) == list(POINT_FIELDS) + ["time", "times"] and r["time"] == time and r["meets_sla"]
            assert r["ttft_s"] <= 0.5 and r["tpot_s"] <= 0.02
            t = r["times"]
            assert (t[time]["ttft_s"], t[time]["tpot_s"]) == (r["ttft_s"], r["tpot_s"])
            assert t["bound"]["ttft_s"] <= t["estimate"]["ttft_s"] <= t["expected"]["ttft_s"]
        assert {k: g["answers"]["estimate"][k] for k in POINT_FIELDS} == g["cheapest"][0]
        for r in g["front"]:
            assert list(r) == list(POINT_FIELDS) + ["sla_latency"]
            assert isinstance(r["batch"], int) and isinstance(r["ttft_s"], float) and r["replicas"] == 1
        xs = [r["tokens_per_s_per_user"] for r in g["front"]]
        assert xs == sorted(xs, reverse=True)


def test_plan_text_says_fewest_gpus_not_cheapest_and_counts_one_gpu(capsys):
    """The text ranks by GPUs, so it says so (issue 41: "cheapest" beside a $/M tokens column that
    disagreed); Qwen3-8B in BF16 (16.4 GB of weights) fits one H100, and one is "1 GPU"."""
    code = main(["plan", "Qwen3-8B", "--input", "1024", "--output", "256", "--ttft", "1", "--tpot", "0.05",
                 "--gpu", "H100", "--max-gpus", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "cheapest" not in out and "fewest GPUs that meet the SLA" in out
    assert "H100: 1 GPU (" in out and "1 GPUs" not in out
    assert "fewest GPUs overall: aggregated, 1 GPU" in out
