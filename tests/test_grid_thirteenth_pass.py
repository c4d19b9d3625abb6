"""The grid's thirteenth pass (issue 42): the expected times of GPU types without measured tables
taken from the summaries' phase sums instead of evaluating the same step bounds a second time.

Where nothing is looked up, a phase input's expected step time is the sum of its steps' bounds over
the default efficiency, written point-major and summed per point (engine.deploy.plan,
engine.deploy.measured.unmeasured_times). The summaries' stacked totals hold those very step
bounds at every (GPU, point) pair, so ``CompiledProgram.totals(..., unmeasured=)`` adds that sum
there (``t_unmeasured``) and the grid's ``_expected`` writes it for such groups
(``grid_eval._known_times``). Held here:

* by hand: :func:`point_major_divided` and its row sums on a small array; ``_known_times``' three
  refusals (tables to look up, a two-batch schedule, no sums) and its write;
* consistency: ``t_unmeasured`` against the expected times' own path (``point_columns``,
  ``step_sol``, ``unmeasured_times``, row sums) on real compiled programs, bit for bit; a program
  whose totals go step by step gives none, and the grid then asks as before;
* consistency, end to end: a real model's grid rows (GPU types with and without tables, two
  frameworks, two KV dtypes) with the sums taken against every group asked (the path before this
  pass), every deployment and op column bit for bit, and the sums taken for most groups.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from engine.batch import grid_eval
from engine.deploy import PHASES
from engine.deploy import compiled_totals
from engine.deploy.compiled_totals import point_major_divided
from engine.deploy.hardware import load_gpus
from engine.deploy.measured import DEFAULT_EFFICIENCY, unmeasured_times
from engine.deploy.measured_tables import load_measured
from engine.deploy.plan import Plan
from engine.deploy.sol import phase_times
from tests.conftest import REPO, _evaluation
from tests.deploy_helpers import make_plan
from tests.test_grid_eighth_pass import _same

GPUS = load_gpus()


def test_point_major_divided_by_hand():
    """(steps, points) [[1, 2], [3, 4]] over 0.5: point-major [[2, 6], [4, 8]], rows summing to 8
    and 12; a C-ordered array of its own (the caller may write into it)."""
    out = point_major_divided(np.array([[1.0, 2.0], [3.0, 4.0]]), 0.5)
    assert out.tolist() == [[2.0, 6.0], [4.0, 8.0]] and out.flags.c_contiguous and out.flags.writeable
    assert out.sum(axis=1).tolist() == [8.0, 12.0]


def _expected_path(compiled, gpu, b, seq, ctx, kv_bytes) -> np.ndarray:
    """The expected times' own sums where nothing is looked up (engine.deploy.plan: the columns at
    the points, the GPU's step bounds, unmeasured_times, each point's row summed)."""
    t_sol = compiled.step_sol(gpu, compiled.point_columns(b, seq, ctx, kv_bytes))
    return unmeasured_times(t_sol).sum(axis=1)


@pytest.mark.parametrize("model, gpu, config", [
    ("Llama-3.1-8B", "A100", {"tp": 2}),
    ("Qwen3-30B-A3B", "MI300X", {"tp": 4, "ep": 4, "dp_attn": 4}),
])
def test_stacked_sums_are_the_expected_paths(model, gpu, config):
    """Consistency: ``t_unmeasured`` of the stacked totals (at picked points, as the grid's
    phases_many asks, and at the points themselves) equals the expected times' own sums, bit for
    bit, in both phases; the other sums are unchanged by asking for it."""
    plan = make_plan(model, gpu, "vllm", None, "bf16", **config)
    rng = np.random.default_rng(13)
    b = rng.choice([1.0, 3.0, 8.0, 64.0, 256.0], 60)
    seq = rng.choice([1.0, 512.0, 4096.0], 60)
    ctx = seq + rng.choice([0.0, 1024.0, 8191.0], 60)
    kv_bytes = np.full(60, 2.0)
    at = rng.integers(0, 60, 45)
    for phase in PHASES:
        compiled = plan.structure.compiled[phase]
        rates = compiled.rates_for([plan.gpu], np.zeros(len(at), dtype=np.int64))
        got = compiled.totals(rates, b, seq, ctx, kv_bytes, at=at, unmeasured=DEFAULT_EFFICIENCY)
        want = _expected_path(compiled, plan.gpu, b[at], seq[at], ctx[at], kv_bytes[at])
        assert _same(got["t_unmeasured"], want)
        plain = compiled.totals(rates, b, seq, ctx, kv_bytes, at=at)
        assert "t_unmeasured" not in plain
        assert all(_same(plain[k], got[k]) for k in plain)
        whole = compiled.totals(plan.gpu, b, seq, ctx, kv_bytes, unmeasured=DEFAULT_EFFICIENCY)
        assert _same(whole["t_unmeasured"], _expected_path(compiled, plan.gpu, b, seq, ctx, kv_bytes))


def test_step_by_step_totals_give_no_sums(monkeypatch):
    """A program whose totals go step by step (above STACKED_ELEMENTS) gives no ``unmeasured_s``,
    and a call missing one input's sums is asked whole (``_unmeasured_sums`` is None)."""
    plan = make_plan("Llama-3.1-8B", "A100", "vllm", None, "bf16", tp=2)
    compiled = plan.structure.compiled["decode"]
    points = (np.array([1.0, 8.0]), np.array([1.0, 1.0]), np.array([1024.0, 4096.0]), np.array([2.0, 2.0]))
    assert "unmeasured_s" in phase_times(compiled, plan.gpu, *points, unmeasured=DEFAULT_EFFICIENCY)
    monkeypatch.setattr(compiled_totals, "STACKED_ELEMENTS", 1)
    assert "unmeasured_s" not in phase_times(compiled, plan.gpu, *points, unmeasured=DEFAULT_EFFICIENCY)
    some = {"prefill": {"unmeasured_s": np.ones(2), "step_time_s": np.ones(2)}, "decode": {"step_time_s": np.ones(2)}}
    assert grid_eval._unmeasured_sums(some) is None
    assert "unmeasured_s" not in some["prefill"]          # taken out either way: the summaries read the rest


def test_known_times_by_hand():
    """Written only on a GPU type without tables, without a two-batch schedule, with sums: each
    input's sums at the group's points, into arrays over the call's points."""
    plan = make_plan("Llama-3.1-8B", "A100", "vllm", None, "bf16", tp=2)
    sums = {"prefill": np.array([1.0, 2.0, 3.0, 4.0]), "decode": np.array([5.0, 6.0, 7.0, 8.0])}
    into: dict = {}
    assert grid_eval._known_times(plan, {}, sums, slice(1, 3), into, 4)
    assert {k: v.tolist() for k, v in into.items()} == {"prefill": [0.0, 2.0, 3.0, 0.0], "decode": [0.0, 6.0, 7.0, 0.0]}
    h100 = Plan(plan.structure, GPUS["H100"], "bf16")
    assert not grid_eval._known_times(h100, load_measured(gpu="H100", framework="vllm"), sums, slice(0, 4), {}, 4)
    two = Plan(replace(plan.structure, options=replace(plan.structure.options, overlap="two_batch")), plan.gpu, "bf16")
    assert not grid_eval._known_times(two, {}, sums, slice(0, 4), {}, 4)
    assert not grid_eval._known_times(plan, {}, None, slice(0, 4), {}, 4)


@pytest.fixture(scope="module")
def grid_path(tmp_path_factory):
    """A small grid of GPU types with measured tables (H100, B200) and without (A100, MI300X), both
    frameworks, both KV dtypes, two prompts."""
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid.update(gpus=["A100", "H100", "B200", "MI300X"], gpu_counts=[1, 2, 4, 8], frameworks=["vllm", "sglang"],
                kv_dtypes=["bf16", "fp8"])
    grid["scenarios"].update(input_lengths=[1024, 8192], batches=[1, 8, 64])
    path = tmp_path_factory.mktemp("grid13") / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-8B"])
def test_grid_rows_are_those_of_every_group_asked(grid_path, model_id, monkeypatch):
    """Consistency on a real model: the grid's deployment and op columns with the sums taken equal,
    bit for bit, those with every group asked (``_unmeasured_sums`` giving None: the path before
    this pass), and the sums were taken for groups of the GPU types without tables."""
    ev = _evaluation(model_id)
    taken = []
    known_times = grid_eval._known_times

    def spy(plan, *args):
        wrote = known_times(plan, *args)
        taken.append((plan.gpu.key, wrote))
        return wrote
    monkeypatch.setattr(grid_eval, "_known_times", spy)
    new = grid_eval.evaluate_model(ev, grid_path)
    assert {g for g, wrote in taken if wrote} == {"A100", "MI300X"}
    assert not any(wrote for g, wrote in taken if g in ("H100", "B200"))
    monkeypatch.setattr(grid_eval, "_unmeasured_sums", lambda phases: None)
    old = grid_eval.evaluate_model(ev, grid_path)
    assert new[2] == old[2] and new[0].keys() == old[0].keys() and new[1].keys() == old[1].keys()
    for new_columns, old_columns in zip(new[:2], old[:2]):
        for name in old_columns:
            a, b = new_columns[name], old_columns[name]
            assert (a == b) if isinstance(b, list) else _same(np.asarray(a), np.asarray(b)), name
