"""Speculative decoding with the model's own MTP modules (docs/deployment.md "Speculative decoding
with MTP"): expected tokens per step by hand, k = 0 is no MTP exactly, and the MTP decode step of a
dense model (Qwen3.5-27B on one H100) derived from its config and published MTP parameter count.
"""
from __future__ import annotations

import json
import math

import pytest

from engine.cli import main
from engine.deploy import Options, ParallelConfig, Scenario, plan
from engine.deploy.hardware import load_gpus
from engine.deploy.structure import TOKENS_PER_STEP, tokens_per_step
from engine.language.errors import SpecError

from tests.conftest import _evaluation

GPUS = load_gpus()
POINT = Scenario(batch=1, input_len=4096, output_len=1024)
# Qwen3.5-27B (corpus/snapshots/Qwen--Qwen3.5-27B.config.json, text_config): hidden 5120, vocab
# 248,320, one MTP layer (mtp_num_hidden_layers 1) of full attention with 4 KV heads of 256; BF16.
HIDDEN, VOCAB, KV_HEADS, HEAD_DIM, BF16 = 5120, 248_320, 4, 256, 2
MTP_PARAMS = 424_699_392          # vLLM's Qwen3_5MultiTokenPredictor (README's table)


def _deploy(model: str, gpu: str = "H100", scenario: Scenario = POINT, **options):
    ev = _evaluation(model)
    return plan(ev, GPUS[gpu], ParallelConfig(), Options(**options), None, scenario).at(scenario)


@pytest.fixture(scope="module")
def qwen():
    """Qwen3.5-27B at batch 1, 4096 + 1024: no MTP, and one draft token at acceptance 0 and 0.8."""
    return {"off": _deploy("Qwen/Qwen3.5-27B"),
            0.0: _deploy("Qwen/Qwen3.5-27B", mtp_tokens=1, mtp_acceptance=0.0),
            0.8: _deploy("Qwen/Qwen3.5-27B", mtp_tokens=1, mtp_acceptance=0.8)}


def test_expected_tokens_per_step_by_hand():
    assert tokens_per_step(0, 0.8) == 1.0                       # no drafts: one token
    assert tokens_per_step(3, 0.0) == 1.0                       # every draft rejected
    assert tokens_per_step(1, 0.8) == pytest.approx(1.8)
    assert tokens_per_step(3, 0.8) == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert tokens_per_step(2, 1.0) == 3.0                       # every draft accepted
    assert str(TOKENS_PER_STEP) == "Sum(mtp_acceptance**i, (i, 0, mtp_tokens))"


def test_zero_draft_tokens_is_no_mtp_exactly(qwen):
    """k = 0 (with any acceptance) leaves every summary field, phase total and op row as without MTP."""
    zero = _deploy("Qwen/Qwen3.5-27B", mtp_tokens=0, mtp_acceptance=0.7)
    off = qwen["off"]
    assert zero.summary == off.summary
    assert zero.phases == off.phases
    assert zero.ops == off.ops


def test_acceptance_zero_is_the_whole_mtp_step(qwen):
    """At acceptance 0 a step emits one token: TPOT is the full MTP decode step (the main stack
    verifying 2 tokens + one draft pass), slower than without MTP."""
    on, off = qwen[0.0], qwen["off"]
    s = on.summary
    assert s["tokens_per_step"] == 1.0 and s["mtp_tokens"] == 1 and s["mtp_acceptance"] == 0.0
    assert s["tpot_s"] == s["decode_step_time_s"] == on.phases["decode"]["step_time_s"]
    assert s["tpot_s"] > off.summary["tpot_s"]
    # batch 1 is memory-bound: the weights read per step are the main model's plus, by hand,
    # the MTP layer's stored weights (its published parameter count in BF16), the main head the
    # draft reads again (vocab x hidden, shared, not stored twice) and one more embedding row
    # (the main stack embeds 2 tokens per request instead of 1)
    assert on.phases["decode"]["bound"] == "memory"
    extra = on.phases["decode"]["weight_bytes"] - off.phases["decode"]["weight_bytes"]
    assert extra == MTP_PARAMS * BF16 + VOCAB * HIDDEN * BF16 + HIDDEN * BF16
    assert s["tpot_s"] >= (off.phases["decode"]["weight_bytes"] + extra) / GPUS["H100"].hbm_bytes_per_s
    # the per-op table is the same step: its rows sum to the phase, draft rows included
    assert sum(r["t_sol_s"] for r in on.ops["decode"]) == pytest.approx(on.phases["decode"]["step_time_s"])
    assert any(r["op_uid"].startswith("mtp/") for r in on.ops["decode"])


def test_acceptance_divides_the_step(qwen):
    """TPOT = decode step / E with E = 1 + a; throughput accordingly; TTFT does not depend on a."""
    on, zero = qwen[0.8], qwen[0.0]
    assert on.summary["decode_step_time_s"] == zero.summary["decode_step_time_s"]
    assert on.summary["tokens_per_step"] == pytest.approx(1.8)
    assert on.summary["tpot_s"] == pytest.approx(on.summary["decode_step_time_s"] / 1.8)
    assert on.summary["tokens_per_s_per_gpu"] == pytest.approx(1.8 / on.summary["decode_step_time_s"])
    assert on.summary["ttft_s"] == zero.summary["ttft_s"]


def test_prefill_runs_the_first_module_over_the_prompt(qwen):
    """The drafter's first pass covers the prompt (its KV cache and the first draft): prefill reads,
    by hand, the MTP layer's weights and the shared head once more (logits of the last position),
    and TTFT grows by at least that read at HBM speed."""
    on, off = qwen[0.0], qwen["off"]
    extra = on.phases["prefill"]["weight_bytes"] - off.phases["prefill"]["weight_bytes"]
    assert extra == MTP_PARAMS * BF16 + VOCAB * HIDDEN * BF16
    assert on.summary["ttft_s"] - off.summary["ttft_s"] >= extra / GPUS["H100"].hbm_bytes_per_s


def test_capacity_loses_the_mtp_weights_and_kv(qwen):
    """The MTP stack's weights come off the KV budget and its KV (one full-attention layer: K and
    V of 4 heads x 256 per token) is added to every request; capacity follows by hand."""
    on, off = qwen[0.0].summary, qwen["off"].summary
    mtp_weights = MTP_PARAMS * BF16
    mtp_kv = 2 * KV_HEADS * HEAD_DIM * BF16 * (4096 + 1024)
    assert on["weight_bytes_per_gpu"] - off["weight_bytes_per_gpu"] == mtp_weights
    assert off["kv_budget_bytes_per_gpu"] - on["kv_budget_bytes_per_gpu"] == mtp_weights
    assert on["kv_bytes_per_request_per_gpu"] - off["kv_bytes_per_request_per_gpu"] == mtp_kv
    assert on["kv_bytes_per_request"] - off["kv_bytes_per_request"] == mtp_kv
    assert on["max_concurrent_requests"] == math.floor(on["kv_budget_bytes_per_gpu"] / on["kv_bytes_per_request_per_gpu"])
    assert on["max_concurrent_requests"] < off["max_concurrent_requests"]


def test_three_modules_three_drafts():
    """MiMo-V2-Flash has three MTP layers: k = 3 is allowed, k = 4 is not; the whole stack is
    deployed whatever k (its weights do not depend on k), the expected tokens follow the chain."""
    one = _deploy("XiaomiMiMo/MiMo-V2-Flash", "B200", mtp_tokens=1, mtp_acceptance=0.8)
    three = _deploy("XiaomiMiMo/MiMo-V2-Flash", "B200", mtp_tokens=3, mtp_acceptance=0.8)
    assert one.summary["weight_bytes_per_gpu"] == three.summary["weight_bytes_per_gpu"]
    assert three.summary["tokens_per_step"] == pytest.approx(2.952)
    assert three.summary["tpot_s"] == pytest.approx(three.summary["decode_step_time_s"] / 2.952)
    assert three.summary["decode_step_time_s"] > one.summary["decode_step_time_s"]
    with pytest.raises(SpecError, match="--mtp.*3 MTP module"):
        _deploy("XiaomiMiMo/MiMo-V2-Flash", "B200", mtp_tokens=4, mtp_acceptance=0.8)


@pytest.mark.parametrize("options, match", [
    ({"mtp_tokens": -1, "mtp_acceptance": 0.5}, "--mtp"),
    ({"mtp_tokens": 1.5, "mtp_acceptance": 0.5}, "--mtp"),
    ({"mtp_tokens": 2, "mtp_acceptance": 0.5}, "--mtp: .*1 MTP module"),
    ({"mtp_tokens": 1, "mtp_acceptance": 1.5}, "--acceptance"),
    ({"mtp_tokens": 1, "mtp_acceptance": -0.1}, "--acceptance"),
    ({"mtp_tokens": 1, "mtp_acceptance": float("nan")}, "--acceptance"),
])
def test_bad_options_are_one_line(options, match):
    with pytest.raises(SpecError, match=match) as err:
        _deploy("Qwen/Qwen3.5-27B", **options)
    assert "\n" not in str(err.value)


def test_a_model_without_mtp_refuses():
    with pytest.raises(SpecError, match="has no MTP stack"):
        _deploy("meta-llama/Meta-Llama-3.1-8B", mtp_tokens=1, mtp_acceptance=0.5)


def test_cli_prints_and_exports_the_mtp_fields(capsys):
    args = ["deploy", "Qwen3.5-27B", "--gpu", "H100", "--framework", "none", "--mtp", "1", "--acceptance", "0.8"]
    assert main(args + ["--phase", "decode"]) == 0
    out = capsys.readouterr().out
    assert "expected tokens per step 1.8 = Sum(mtp_acceptance**i, (i, 0, mtp_tokens))" in out
    assert main(args + ["--json"]) == 0
    dep = json.loads(capsys.readouterr().out)["deployment"]
    assert dep["tokens_per_step"] == pytest.approx(1.8) and dep["mtp_tokens"] == 1
    assert dep["tpot_s"] == pytest.approx(dep["decode_step_time_s"] / 1.8)
    assert dep["tokens_per_step_formula"] == str(TOKENS_PER_STEP)
    # off: no MTP field at all (the output is the one without these options)
    assert main(["deploy", "Qwen3.5-27B", "--gpu", "H100", "--framework", "none", "--json"]) == 0
    assert "tokens_per_step" not in json.loads(capsys.readouterr().out)["deployment"]


@pytest.mark.parametrize("args, match", [
    (["--mtp", "1"], "--acceptance: --mtp 1 needs an acceptance rate"),
    (["--acceptance", "0.8"], "--acceptance without --mtp"),
])
def test_cli_needs_both_options(capsys, args, match):
    assert main(["deploy", "Qwen3.5-27B", "--gpu", "H100"] + args) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_plan_takes_the_mtp_options(capsys):
    """``archledger plan --mtp K --acceptance A`` searches with drafting on: its answer is the point
    ``deploy`` gives with the same options."""
    assert main(["plan", "Qwen3.5-27B", "--input", "4096", "--output", "1024", "--ttft", "2", "--tpot", "0.02",
                 "--gpu", "H100", "--max-gpus", "1", "--framework", "none", "--mtp", "1", "--acceptance", "0.8",
                 "--time", "estimate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mtp_tokens"] == 1 and out["mtp_acceptance"] == 0.8
    answer = out["answer"]
    point = _deploy("Qwen/Qwen3.5-27B", scenario=Scenario(answer["batch"], 4096, 1024),
                    mtp_tokens=1, mtp_acceptance=0.8).summary
    # plan serves by the steady state: its TPOT is deploy's at the output's mean context, per token
    assert answer["tpot_s"] == pytest.approx(point["tpot_mean_s"]) and answer["ttft_s"] == pytest.approx(point["ttft_s"])
    assert answer["tpot_last_s"] == pytest.approx(point["tpot_s"])


@pytest.mark.parametrize("model, config", [("Qwen/Qwen3.5-27B", {"tp": 2}),
                                           ("Qwen/Qwen3.5-27B", {"tp": 1, "pp": 4})])
def test_weight_formula_counts_the_mtp_stack(model, config):
    """The weights-per-GPU formula (over dims and degrees) evaluates to the number, MTP included
    (on the last pipeline stage)."""
    from engine.language import symbols
    ev = _evaluation(model)
    built = plan(ev, GPUS["H200"], ParallelConfig(**config), Options(mtp_tokens=1, mtp_acceptance=0.5))
    off = plan(ev, GPUS["H200"], ParallelConfig(**config))
    subs = {symbols.dim(k): v for k, v in {**ev.bound, **config}.items()}
    value = built.structure.weight_formula.subs(subs)
    assert not value.free_symbols and float(value) == built.structure.weight_bytes_per_gpu
    assert built.structure.weight_bytes_per_gpu > off.structure.weight_bytes_per_gpu
