"""``archledger plan`` and engine.serving.sizing: the front is a true Pareto front of evaluated points,
the SLA answers agree with ``archledger deploy`` at the same config and batch, an SLA nobody meets
is one line and exit 1, and the JSON schema."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from engine.cli import main
from engine.deploy import Options, Scenario, check, tokens_per_device
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.serving.pareto import front
from engine.serving.sizing import BATCH_STEP, POINT_FIELDS, SLA, _device_tokens, batch_list, search
from engine.language.errors import SpecError

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


def test_a_load_of_users_is_priced_over_every_replica():
    """With U = 500 concurrent users and no latency bound, Llama-3.1-8B on one H100, vLLM, prompt 128,
    output 2048 (steady capacity 395: tests/test_hand_steady_capacity.py): batch 250 needs
    r = ceil(500 / 250) = 2 replicas of one GPU, and 250 = ceil(500 / 2) is the load each holds, so
    the point meets the load with 2 GPUs in all, priced 2 x $3.99 = $7.98 an hour (gpus/h100-sxm.yaml's
    on-demand price); its $/M tokens is that hour's price over the tokens both replicas emit in an
    hour (2 GPUs x its tokens/s/GPU x 3600) x 1e6. Batch 251 also needs 2 replicas, but they would
    hold ceil(500 / 2) = 250 each: it does not meet the load. Planted bug caught: plan pricing one replica's GPUs
    (the config's n_gpus) instead of every replica's."""
    ev = _evaluation(model_id(DENSE))
    (found,) = search(ev, [load_gpus()["H100"]], 128, 2048, SLA(1e30, 1e30, users=500), max_gpus=1,
                      options=Options(framework="vllm"), fusion=load_tables()["vllm"])
    (row,) = found.rows(np.nonzero(found.points["batch"] == 250)[0])
    (other,) = found.rows(np.nonzero(found.points["batch"] == 251)[0])
    assert row["meets_sla"] and not other["meets_sla"] and other["replicas"] == 2
    assert (row["config"], row["replicas"], row["total_gpus"]) == ("tp1", 2, 2)
    assert row["usd_per_hour"] == pytest.approx(2 * 3.99, rel=1e-12)
    assert row["usd_per_m_tokens"] == pytest.approx(
        2 * 3.99 / (2 * row["tokens_per_s_per_gpu"] * 3600) * 1e6, rel=1e-12)


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
                        "weight_format", "max_gpus", "extrapolated", "time", "front_basis", "pairs", "gpus", "answer",
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
                 "--gpu", "H100", "--max-gpus", "1", "--detail"])
    out = capsys.readouterr().out
    assert code == 0
    assert "cheapest" not in out and "fewest GPUs that meet the SLA" in out
    assert "H100: 1 GPU (" in out and "1 GPUs" not in out
    assert "fewest GPUs overall (then the most tok/s/GPU): H100, aggregated, 1 GPU" in out


# -- the answer first (issue 41 item 12) --------------------------------------------------------------

def _answer_table(text: str, title: str) -> list[list[str]]:
    """The rows of the text table under the line starting with ``title`` (its header line skipped),
    split into columns at two or more spaces."""
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("  ") or line.startswith(("  *", "  (")):      # a note under the table
            break
        rows.append([c for c in line.strip().split("  ") if c.strip()])
    return rows


def _gpus_column(rows: list[list[str]], index: int) -> list[int]:
    return [int(r[index]) for r in rows if r[index].strip().isdigit()]


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"s": 1, "ms": 1e-3, "µs": 1e-6}[unit]


def test_answer_table_is_consistent_with_json(capsys):
    """Consistency test (the text against --json of the same run): one row per GPU type given, in
    the order given, each with the JSON answer's GPUs, config, batch, TTFT, TPOT, tok/s/GPU, $/M
    tokens, the time it is on and the lower bound's TTFT and TPOT; then the 'fewest GPUs overall'
    line names the row whose GPUs are the least of the tables' GPUs columns, and the 'lowest $/M
    tokens' line (when printed) the least of the $/M column."""
    args = ["plan", "Qwen3-8B", "--input", "1024", "--output", "256", "--ttft", "1", "--tpot", "0.05",
            "--gpu", "H200", "--gpu", "H100", "--gpu", "MI300X", "--max-gpus", "1"]
    assert main(args) == 0
    text = capsys.readouterr().out
    code, out = _plan_json(capsys, *args[1:])
    assert code == 0 and out["pairs"] == "same-vendor"
    rows = _answer_table(text, "aggregated (")
    assert [r[0].strip() for r in rows] == ["H200", "H100", "MI300X"]
    for row, g in zip(rows, out["gpus"]):
        a = g["answers"][g["time"]]
        if a is None:
            assert row[1:] == ["-", "none meets the SLA"]
            continue
        gpus, config, batch, ttft, tpot, tokens, usd, on, bttft, btpot = (c.strip() for c in row[1:])
        assert int(gpus) == a["total_gpus"] and config == f"{a['replicas']} x {a['config']}"
        assert int(batch) == a["batch"] and on == g["time"]
        assert _seconds(ttft) == pytest.approx(a["ttft_s"], rel=5e-3)
        assert _seconds(tpot) == pytest.approx(a["tpot_s"], rel=5e-3)
        assert float(tokens.replace(",", "")) == pytest.approx(a["tokens_per_s_per_gpu"], abs=0.5)
        assert usd == "-" if a["usd_per_m_tokens"] is None else float(usd) == pytest.approx(a["usd_per_m_tokens"], rel=5e-3)
        assert _seconds(bttft) == pytest.approx(a["times"]["bound"]["ttft_s"], rel=5e-3)
        assert _seconds(btpot) == pytest.approx(a["times"]["bound"]["tpot_s"], rel=5e-3)
    split = _answer_table(text, "disaggregated (")
    # every disaggregated row is a pair's own answer in --json; the overall answer is among them
    answers = {(g["prefill_gpu"], g["decode_gpu"]): g["cheapest"][0] for g in out["disaggregated"] if g["cheapest"]}
    for row in split:
        pair = tuple(row[0].strip().split(" -> "))
        assert int(row[1]) == answers[pair]["total_gpus"]
    assert any(tuple(r[0].strip().split(" -> ")) == (out["answer_disaggregated"]["prefill_gpu"],
                                                    out["answer_disaggregated"]["decode_gpu"]) for r in split)
    # the words agree with the columns
    column = _gpus_column(rows, 1) + _gpus_column(split, 1)
    fewest = next(line for line in text.splitlines() if line.startswith("fewest GPUs overall"))
    n = int(re.search(r", (\d+) GPUs?\b", fewest).group(1))
    assert n == min(column)
    prices = [float(r[7]) for r in rows if len(r) > 7 and r[7].strip() != "-"] + \
        [float(r[8]) for r in split if r[8].strip() != "-"]
    lowest = [line for line in text.splitlines() if line.startswith("lowest $/M tokens: ")]
    if lowest:
        assert float(re.search(r"\$([\d.]+)/M", lowest[0]).group(1)) == pytest.approx(min(prices), rel=5e-3)
    assert "cheapest" not in text and "1 GPUs" not in text


def test_default_pairs_are_one_vendors(capsys):
    """Hand reasoning from the GPU files: gpus/h100-sxm.yaml says ``vendor: NVIDIA`` and
    gpus/mi300x.yaml ``vendor: AMD``, so by default (same-vendor) the disaggregated search pairs
    H100 with H100 and MI300X with MI300X only (2 of the 4 ordered pairs); ``--pairs all`` adds
    H100 -> MI300X and MI300X -> H100, ``--pairs same-gpu`` is the 2 same-type pairs, and the
    text's disaggregated table names no cross-vendor pair by default."""
    base = ["Qwen3-8B", "--input", "1024", "--output", "256", "--ttft", "1", "--tpot", "0.05",
            "--gpu", "H100", "--gpu", "MI300X", "--max-gpus", "1"]
    pairs = {}
    for policy in (None, "all", "same-gpu"):
        code, out = _plan_json(capsys, *base, *(["--pairs", policy] if policy else []))
        assert code == 0 and out["pairs"] == (policy or "same-vendor")
        pairs[policy] = {(g["prefill_gpu"], g["decode_gpu"]) for g in out["disaggregated"]}
    same = {("H100", "H100"), ("MI300X", "MI300X")}
    assert pairs[None] == same and pairs["same-gpu"] == same
    assert pairs["all"] == same | {("H100", "MI300X"), ("MI300X", "H100")}
    assert main(["plan", *base]) == 0
    text = capsys.readouterr().out
    assert "H100 -> MI300X" not in text and "MI300X -> H100" not in text


def test_parser_pair_policies_are_the_engines():
    """Consistency of the CLI with the engine: the parser stays light, so it writes the policies out."""
    from engine.cli import plan
    from engine.serving import pairing
    assert plan.PAIR_POLICIES == pairing.PAIR_POLICIES and plan.DEFAULT_PAIRS == pairing.DEFAULT_PAIRS


def test_pair_rule_by_hand():
    """engine.serving.pairing.pair_allowed on the GPU files' vendors: H100, H200 NVIDIA; MI300X AMD."""
    from engine.serving.pairing import pair_allowed
    g = load_gpus()
    assert pair_allowed(g["H100"], g["H200"]) and not pair_allowed(g["H100"], g["MI300X"])
    assert pair_allowed(g["H100"], g["MI300X"], "all") and not pair_allowed(g["H100"], g["H200"], "same-gpu")
    assert pair_allowed(g["MI300X"], g["MI300X"], "same-gpu")
    with pytest.raises(ValueError):
        pair_allowed(g["H100"], g["H100"], "any")


#: Lines of the default text for every GPU type of gpus/: the title, 3 lines above the aggregated
#: rows (blank, title, header), one row per GPU type (12), a '*' note, 3 above the disaggregated
#: rows, at most one row per GPU type plus two other pairs (14), a blank, 2 answer lines, a blank,
#: 9 assumption lines and one price line per priced GPU (12 at most): 60 at most; 100 leaves room
#: for a few more GPU files (two lines each) and stays a few screens (today: 930 lines).
MAX_LINES_ALL_GPUS = 100


def test_all_gpus_fit_a_few_screens(capsys):
    code = main(["plan", "Qwen3-8B", "--input", "1024", "--output", "256", "--ttft", "1", "--tpot", "0.05",
                 "--max-gpus", "1"])
    text = capsys.readouterr().out
    assert code == 0
    lines = text.splitlines()
    assert len(lines) <= 2 * len(load_gpus()) + 40 and len(lines) <= MAX_LINES_ALL_GPUS, len(lines)
    assert max(len(line) for line in lines) <= 160
    rows = _answer_table(text, "aggregated (")
    assert [r[0].strip() for r in rows] == sorted(load_gpus())


def test_plan_reads_measured_tables_of_the_checkouts_gpus(capsys, tmp_path, monkeypatch):
    """plan reads gpus/measured/ of the checkout it runs in, as deploy does: a checkout whose gpus/
    has no measured tables answers on the schedule estimate (no expected time); one with H100's
    tables copied in answers on the expected time."""
    import shutil
    from engine.project import PACKAGE_ROOT
    checkout = tmp_path / "checkout"
    (checkout / "corpus" / "models").mkdir(parents=True)
    shutil.copytree(PACKAGE_ROOT / "gpus", checkout / "gpus", ignore=shutil.ignore_patterns("measured"))
    monkeypatch.chdir(checkout)
    args = [DENSE, "--input", "1024", "--output", "128", "--ttft", "1", "--tpot", "0.05", "--gpu", "H100",
            "--max-gpus", "1", "--no-disagg", "--corpus", str(PACKAGE_ROOT / "corpus")]
    code, out = _plan_json(capsys, *args)
    assert code == 0
    g = out["gpus"][0]
    assert not g["measured_tables"] and g["time"] == "estimate" and out["answer"]["time"] == "estimate"
    shutil.copytree(PACKAGE_ROOT / "gpus" / "measured" / "h100", checkout / "gpus" / "measured" / "h100")
    code, out = _plan_json(capsys, *args)
    assert code == 0 and out["gpus"][0]["measured_tables"] and out["answer"]["time"] == "expected"
