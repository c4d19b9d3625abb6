"""``archledger plan --time estimate|expected|bound`` (issue 39): the answer names the time it is on
and prints the other two beside it; its numbers are ``archledger deploy``'s at the answer point.

Expectations from outside the code under test: deploy's own summary at the point plan names; and
a hand derivation: pointwise bound <= estimate <= expected (each op's expected time is at least its
bound, and so is the estimate's), so a point within the SLA on the expected time is within it on
the estimate and on the bound, and the fewest GPUs can only grow from bound to estimate to expected.
"""
from __future__ import annotations

import json
import re

import pytest

from engine.cli import main
from engine.deploy import Options
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.measured import load_measured
from engine.serving.retime import PointReader, answer_on
from engine.serving.sizing import POINT_FIELDS, SLA, search

from tests.conftest import _evaluation
from tests.deploy_helpers import model_id

#: The issue's example.
EXAMPLE = ["plan", "DeepSeek-V3", "--input", "8192", "--output", "1024", "--ttft", "2", "--tpot", "0.05",
           "--gpu", "H200", "--gpu", "B200"]


def _degrees(label: str) -> list[str]:
    """``tp4-ep2-pp2`` -> deploy's ``--tp 4 --ep 2 --pp 2``."""
    out = []
    for part in label.split("-"):
        name, n = re.fullmatch(r"([a-z_]+?)(\d+)", part).groups()
        out += [f"--{name.replace('_', '-')}", n]
    return out


def _deploy(capsys, gpu: str, row: dict, fitting: bool = True) -> dict:
    """deploy --json's summary at the row's config and batch (exit 1: the batch does not fit,
    allowed unless ``fitting``)."""
    code = main(["deploy", "DeepSeek-V3", "--gpu", gpu, *_degrees(row["config"]), "--batch", str(row["batch"]),
                 "--input", "8192", "--output", "1024", "--json"])
    assert code == 0 or (code == 1 and not fitting)
    return json.loads(capsys.readouterr().out)["deployment"]


def test_issue_example_answers_on_expected_times_with_the_bound_answer_beside(capsys):
    assert main(EXAMPLE + ["--detail"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    # the answer table: each row names the time it is on, the lower bound's TTFT and TPOT beside it
    for gpu in ("H200", "B200"):
        row = next(line for line in lines if line.startswith(f"  {gpu} "))
        assert re.match(rf"  {gpu} +\d+  \d+ x \S+ +\d+ +\S+ m?s +\S+ m?s +[\d,]+ +\S+  expected +\S+ [mµ]?s +\S+ [mµ]?s$", row), row
    said = next(line for line in lines if line.startswith("answers on the"))
    assert "expected time (measured kernels) for H200, B200" in said and "--time estimate|expected|bound" in said
    at = lines.index("answer, aggregated, on each time:")
    for gpu, line in zip(("H200", "B200"), lines[at + 1:at + 3]):   # each answer names its time, the other two beside
        assert re.match(rf"  {gpu}: \d+ GPUs? \(aggregated: .*\(expected time \(measured kernels\); TPOT in the "
                        r"steady state.*; schedule estimate TTFT .*, TPOT .*; lower bound TTFT .*, TPOT ", line), line
    bound = [line for line in lines if " on the lower bound instead: " in line]
    assert re.match(r"  H200 on the lower bound instead: \d+ GPUs? \(1 x \S+, batch \d+, TTFT .*\)$", bound[0])
    assert re.match(r"  B200 on the lower bound instead: \d+ GPUs? \(", bound[1])
    assert any(line.startswith("  H200 on the schedule estimate instead: ") for line in lines)

    assert main(EXAMPLE + ["--no-disagg", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time"] == "default" and out["answer"]["time"] == "expected"
    for g in out["gpus"]:
        assert g["time"] == "expected" and g["measured_tables"]
        answers = g["answers"]
        a = answers["expected"]
        assert a is not None and a["meets_sla"] and a["ttft_s"] <= 2 and a["tpot_s"] <= 0.05
        # deploy's own summary at the answer point: the answer is its expected time, and expected >= estimate >= bound
        point = _deploy(capsys, g["gpu"], a)
        assert a["ttft_s"] == pytest.approx(point["ttft_expected_s"], rel=1e-9)
        assert a["tpot_s"] == pytest.approx(point["tpot_mean_expected_s"], rel=1e-9)
        assert a["tpot_last_s"] == pytest.approx(point["tpot_expected_s"], rel=1e-9)
        assert point["ttft_expected_s"] >= point["ttft_s"] >= point["ttft_bound_s"]
        assert point["tpot_mean_expected_s"] >= point["tpot_mean_s"] >= point["tpot_mean_bound_s"]
        assert a["times"]["estimate"]["ttft_s"] == pytest.approx(point["ttft_s"], rel=1e-9)
        assert a["times"]["bound"]["tpot_s"] == pytest.approx(point["tpot_mean_bound_s"], rel=1e-9)
        # the config's largest batch within the SLA: one more request, where the steady state holds
        # it, is outside the SLA on the expected time (a bisection that stopped short fails here)
        more = _deploy(capsys, g["gpu"], dict(a, batch=a["batch"] + 1), fitting=False)
        if more["fits_steady"] and a["batch"] + 1 <= more["max_concurrent_requests_steady"]:
            assert more["ttft_expected_s"] > 2 or more["tpot_mean_expected_s"] > 0.05
        # the bound-based answer, beside it, is deploy's too at its own point
        b = answers["bound"]
        at = _deploy(capsys, g["gpu"], b)
        assert (b["ttft_s"], b["tpot_s"]) == (pytest.approx(at["ttft_bound_s"], rel=1e-9),
                                              pytest.approx(at["tpot_mean_bound_s"], rel=1e-9))
        # nested SLA sets (module doc): the fewest GPUs grow from bound to estimate to expected
        assert b["total_gpus"] <= answers["estimate"]["total_gpus"] <= a["total_gpus"]


def test_time_bound_answers_on_the_lower_bound(capsys):
    assert main(["plan", "Llama-3.1-8B", "--input", "4096", "--output", "512", "--ttft", "0.3", "--tpot", "0.01",
                 "--gpu", "H100", "--max-gpus", "4", "--no-disagg", "--time", "bound", "--detail"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("answers on the lower bound (--time bound)") for line in lines)
    assert re.match(r"  H100 +\d+  .*  bound ", next(line for line in lines if line.startswith("  H100 ")))
    answer = lines[lines.index("answer, aggregated, on each time:") + 1]
    assert "(lower bound; TPOT in the steady state" in answer and "; schedule estimate TTFT " in answer \
        and "; expected time (measured kernels) TTFT " in answer
    assert any(line.startswith("  H100 on the expected time (measured kernels) instead: ") for line in lines)


@pytest.mark.parametrize("users", [None, 300])
def test_answer_on_the_estimate_is_the_searchs_answer(users):
    """Consistency test (engine vs engine): the bisection of engine.serving.retime, run on the
    schedule estimate, finds the point the exhaustive search ranks first (its reading of the time
    as non-decreasing in the batch, and of the largest batch as a config's best, hold here), with
    and without a user load."""
    ev = _evaluation(model_id("Qwen3-30B-A3B"))
    gpu = load_gpus()["H100"]
    options, fusion = Options(framework="vllm"), load_tables()["vllm"]
    sla = SLA(1.0, 0.02, users=users)
    res = search(ev, [gpu], 4096, 1024, sla, max_gpus=8, options=options, fusion=fusion)[0]
    read = PointReader(ev, gpu, options, fusion, 4096, 1024, load_measured(gpu="H100", framework="vllm"))
    mine = answer_on("estimate", res, read, sla)
    theirs = res.cheapest(1)[0]
    assert {k: mine[k] for k in ("config", "batch", "replicas", "total_gpus")} == \
        {k: theirs[k] for k in ("config", "batch", "replicas", "total_gpus")}
    for k in POINT_FIELDS:
        if isinstance(theirs[k], float):
            assert mine[k] == pytest.approx(theirs[k], rel=1e-9), k
    # each config's served batches read in one vectorized summary per plan, not one per point
    assert read.calls <= len(read._plans) < len(read.read) / 10
