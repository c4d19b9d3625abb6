"""No published measurement beats ArchLedger's lower bound (benchmarks/data/published.yaml).

The measured tokens/s per GPU are external facts: SGLang's and DeepSeek's reports of DeepSeek-V3
served with wide expert parallelism, and TensorRT-LLM's perf-overview table (each with its source in
the data file). ``ttft_bound_s`` / ``tpot_bound_s`` / ``tpot_mean_bound_s`` claim that no schedule
beats them, so a published throughput above the bound's throughput at the same setup means the
bound is wrong (a link priced too slow, a dtype too wide, overlap not allowed for). This is the
check issue 38 was filed for: before the lower bound, five DeepSeek-V3 points measured 1.02x to
2.46x *above* the then speed of light. ``benchmarks/published.py --check`` prints the same table.

Planted bugs this catches (benchmarks/mutants.py runs both): a lower bound that lets no collective
overlap a kernel (DeepSeek's published EP32 prefill, 7,839 tok/s/GPU, then beats it), and the steady
decode step priced at the last position instead of the output's mean context (TensorRT-LLM's
Llama-3.1-8B 128/2048 and 128/4096 on one H100 then beat it). A bound read more than 1/0.78 too
slow anywhere (an HBM or link bandwidth a quarter low) fails here too.
"""
from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("benchmarks_published", REPO / "benchmarks" / "published.py")
published = sys.modules.setdefault("benchmarks_published", importlib.util.module_from_spec(_spec))
if not hasattr(published, "load_points"):
    _spec.loader.exec_module(published)


@pytest.fixture(scope="module")
def rows():
    _, points = published.load_points()
    return published.evaluate_points(points)


def test_no_published_measurement_beats_the_lower_bound(rows):
    over = [(r["point"].id, r["point"].measured, round(r["bound"])) for r in rows if r["point"].measured > r["bound"]]
    assert not over, f"published tokens/s/GPU above the lower bound: {over}"
    # the bound is read from the bound columns, never from the headline estimate
    assert {r["keys"]["bound"][0] for r in rows} == {"ttft_bound_s"}
    assert {r["keys"]["bound"][1] for r in rows} <= {"tpot_bound_s", "tpot_mean_bound_s"}


def test_the_deepseek_points_run_where_the_issue_found_them_above_the_old_speed_of_light(rows):
    """The frontier points are the ones that broke the old figure: all eight DeepSeek-V3 rows are
    here, evaluated with the two-batch overlap their sources describe, at 32 to 128 GPUs."""
    ds = [r for r in rows if r["point"].model == "deepseek-ai/DeepSeek-V3"]
    assert len(ds) == 8
    assert all(r["point"].options.get("overlap") == "two_batch" for r in ds)
    assert {r["point"].evaluated["ep"] for r in ds} == {32, 64, 128}


def test_consistency_the_schedule_estimate_is_never_faster_than_the_bound(rows):
    """Consistency (engine against itself): an estimate under a real schedule cannot beat what no
    schedule beats."""
    for r in rows:
        assert r["estimate"] <= r["bound"] * (1 + 1e-12), r["point"].id
