"""The grid's expected times with a program's GPU-independent work shared by its GPUs and KV dtypes
(issue 42, sixth pass), and the memos and shortcuts that came with it.

* ``plan.expected_phase_times_many`` evaluates a program's columns and its lookups' coordinates once
  over the points of every GPU type of one KV size (``plan._program_points``), then divides by each
  GPU's rates (``CompiledProgram.step_sol``): consistency tests, bit for bit against each plan on
  its own GPU by the path before the pass (``CompiledProgram.evaluate`` and
  ``measured.expected_steps``, which evaluates its own coordinates), and ``step_sol`` against
  ``evaluate``'s ``t_sol``;
* ``measured.resolve`` interpolates a table at its distinct points only: hand values of a hand-made
  table, and a consistency test against each point interpolated alone;
* ``measured.SharedCoordinates`` (by object, then by value), ``kernel_spec._linear_uids`` (per
  member-ops object), and the deploy export's GPUs without measured tables (every step's tree the
  fallback, as ``step_spec`` would say): inputs that differ only in what they read give their own
  answers.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import sympy
import yaml

from engine.deploy import kernel_spec
from engine.deploy.kernel_spec import DEFAULT_EFFICIENCY, kernel_of
from engine.deploy.measured import Ask, SharedCoordinates, expected_steps, resolve
from engine.deploy.measured_tables import Table, load_measured
from engine.deploy.plan import Plan, expected_phase_times_many
from engine.deploy.hardware import load_gpus
from engine.deploy.interpolation import interpolate_many, _roof
from engine.deploy.sol import phase_inputs
from engine.language import symbols
from tests.deploy_helpers import make_plan

BATCH, SEQ, CTX = (symbols.dim(d) for d in symbols.SCENARIO_DIMS)
GPUS = load_gpus()


@pytest.fixture(scope="module")
def h100_plan():
    return make_plan("Llama-3.1-8B", "H100", "vllm", None, "bf16", tp=2)


def _on(plan, gpu: str, kv_dtype: str) -> Plan:
    """The plan's structure on another GPU type and KV dtype (as the grid's buckets ask it)."""
    return Plan(plan.structure, GPUS[gpu], kv_dtype)


def _alone(plan, batch, inp, out, tables) -> dict:
    """Each phase input's expected step time by the path before the pass, one GPU at a time: the
    program evaluated on this plan's GPU (CompiledProgram.evaluate), its lookups gathered with their
    own coordinates (measured.expected_steps), each point's steps summed (point-major rows)."""
    mine, measured = {}, False
    for name, (compiled, b, seq, ctx) in phase_inputs(plan.structure, batch, inp, out,
                                                      plan.options.prefill_tokens, mean=True).items():
        shape = np.broadcast_shapes(*(np.shape(x) for x in (b, seq, ctx)))
        b, seq, ctx = (np.broadcast_to(np.asarray(x, dtype=float), shape).reshape(-1) for x in (b, seq, ctx))
        phase = "decode" if name.startswith("decode") else "prefill"
        values = compiled.evaluate(plan.gpu, b, seq, ctx, plan.kv_bytes)
        times, flags, _ = expected_steps(plan, phase, b, seq, ctx, tables, values)
        mine[name] = times.reshape(len(b), -1).sum(axis=1)
        measured |= bool(flags.any())
    return mine, measured


def test_all_gpu_evaluation_equals_per_gpu_evaluation_bit_for_bit(h100_plan):
    """Consistency test: one structure on four GPU types (three with measured tables, A100 without)
    and both KV dtypes, asked together (the columns and coordinates evaluated once per KV size over
    every GPU's points), gives each plan the floats of its own GPU's evaluation, point by point."""
    batch, inp, out = np.array([1, 8, 64, 256]), np.array([1024, 4096, 4096, 16384]), np.full(4, 1024)
    asked = []
    for gpu in ("H100", "H200", "B200", "A100"):
        for kv_dtype in ("bf16", "fp8"):
            plan = _on(h100_plan, gpu, kv_dtype)
            # the GPUs ask overlapping points (the grid's batches fit each GPU's memory differently)
            cut = slice(0, 4) if gpu != "A100" else slice(1, 3)
            asked.append((plan, batch[cut], inp[cut], out[cut], load_measured(gpu=gpu, framework="vllm")))
    together = expected_phase_times_many(asked)
    for (plan, b, i, o, tables), got in zip(asked, together):
        alone, measured = _alone(plan, b, i, o, tables)
        assert got.keys() == alone.keys()
        for name in alone:
            assert got[name].tolist() == alone[name].tolist(), (plan.gpu.key, plan.kv_dtype, name)
        assert measured == (plan.gpu.key != "A100"), plan.gpu.key    # the tables were read where they exist
    # the GPUs differ (their rates and tables), the KV dtypes too (the KV bytes the columns read)
    by = {(p.gpu.key, p.kv_dtype): t for (p, *_), t in zip(asked, together)}
    assert by[("H100", "bf16")]["decode"].tolist() != by[("B200", "bf16")]["decode"].tolist()
    assert by[("H100", "bf16")]["decode"].tolist() != by[("H100", "fp8")]["decode"].tolist()


def test_step_sol_consistency_with_evaluate(h100_plan):
    """Consistency test: t_sol from the shared columns (point_columns, then step_sol on a gather of
    some of their points) is evaluate()'s t_sol on each GPU, bit for bit; GPUs differ."""
    compiled = h100_plan.structure.compiled["decode"]
    b, seq, ctx = np.array([1.0, 4.0, 64.0, 512.0]), np.ones(4), np.array([2048.0, 5120.0, 5120.0, 131072.0])
    columns = compiled.point_columns(b, seq, ctx, 2.0)
    assert columns.shape == (4, len(compiled.program.steps), 4)
    pick = np.array([0, 2, 3])
    sols = {}
    for gpu in ("H100", "B200", "MI300X"):
        got = compiled.step_sol(GPUS[gpu], columns.take(pick, axis=2))
        want = compiled.evaluate(GPUS[gpu], b[pick], seq[pick], ctx[pick], 2.0)["t_sol"]
        assert got.tolist() == want.tolist(), gpu
        sols[gpu] = got.tolist()
    assert sols["H100"] != sols["B200"] != sols["MI300X"]


def _gemm_table() -> Table:
    """A hand-made 3-axis GEMM table: m 1, 16, 256, 4096; n 1024, 4096; k 1024, 4096; seconds 1..16
    us in row-major order (m slowest)."""
    values = (np.array([1.0, 16.0, 256.0, 4096.0]), np.array([1024.0, 4096.0]), np.array([1024.0, 4096.0]))
    seconds = np.arange(1, 17, dtype=float).reshape(4, 2, 2) * 1e-6
    return Table("gemm", "bf16", "H100", "vllm", "0.1", ("m", "n", "k"), values, seconds, "x/gemm.yaml", "pkg 1.0")


def _ask(row, points, table, roof) -> Ask:
    points = np.array(points, dtype=float)
    return Ask(row, np.arange(len(points)), points, [table], roof, 1.0, "")


def test_resolve_distinct_points_hand_values():
    """Measured grid points read their measured times, however often and by however many asks
    they are asked: (16, 1024, 4096) is the table's [1, 0, 1] entry, 6 us; (256, 4096, 1024) its
    [2, 1, 0], 11 us; between m = 16 and 256 at n = 1024, k = 4096, m = 64 lies halfway in log m, so
    log-linear: sqrt(6 x 10) us."""
    table, roof = _gemm_table(), ("gemm", 989e12, 3.35e12, 2.0)
    a = _ask(0, [[16, 1024, 4096], [256, 4096, 1024], [16, 1024, 4096]], table, roof)
    b = _ask(1, [[16, 1024, 4096], [64, 1024, 4096]], table, roof)
    resolve([a, b])
    assert a.found[0][0] == pytest.approx([6e-6, 11e-6, 6e-6], rel=1e-12)
    assert b.found[0][0] == pytest.approx([6e-6, (6e-6 * 10e-6) ** 0.5], rel=1e-12)
    assert not a.found[0][1].any() and not b.found[0][1].any()      # all inside the measured range


def test_resolve_distinct_points_consistency():
    """Consistency test: asks with repeated points, inside and outside the measured range, resolved
    together get each point's floats of that point interpolated alone."""
    table, roof = _gemm_table(), ("gemm", 989e12, 3.35e12, 2.0)
    pts = [[16, 1024, 4096], [8192, 4096, 1024], [3, 2000, 1500], [16, 1024, 4096], [8192, 4096, 1024]]
    asks = [_ask(0, pts, table, roof), _ask(1, pts[::-1], table, roof), _ask(2, pts[2:3], table, roof)]
    resolve(asks)
    for a in asks:
        for p, t, out in zip(a.points, *a.found[0]):
            want_t, want_out = interpolate_many(table, p[None, :], _roof(roof))
            assert (t, out) == (want_t[0], want_out[0])
    assert asks[0].found[0][1].tolist() == [False, True, False, False, True]     # m = 8192: beyond 4096


def test_shared_coordinates_by_object_and_value():
    """A coordinate's values at the picked points; other expressions (batch, seq, their product,
    a constant) give their own, and an equal expression of another object the same values."""
    shared = SharedCoordinates(np.array([1.0, 2.0, 8.0]), np.array([3.0, 1.0, 5.0]), np.array([10.0, 20.0, 30.0]), 2)
    at = shared.at(np.array([2, 0]))
    assert at(BATCH).tolist() == [8.0, 1.0]
    assert at(SEQ).tolist() == [5.0, 3.0]
    assert at(BATCH * SEQ).tolist() == [40.0, 3.0]
    assert at(sympy.Mul(SEQ, BATCH)).tolist() == [40.0, 3.0]          # equal by value, another object
    assert at(sympy.Integer(7)).tolist() == [7.0, 7.0]
    assert at(CTX - BATCH).tolist() == [22.0, 9.0]
    assert shared.at(np.array([1]))(BATCH).tolist() == [2.0]            # another pick of the same set
    # a spec's point over the whole set and where it applies there (every coordinate positive and
    # the condition true): seq - 2 is 1, -1, 3 at the three points; ctx > 15 holds at the last two
    spec = SimpleNamespace(point=(BATCH, SEQ - 2), applies=sympy.true)
    picked, points, ok = shared.at(np.array([2, 1])).point(spec)
    assert picked.tolist() == [2, 1] and points.tolist() == [[1.0, 1.0], [2.0, -1.0], [8.0, 3.0]]
    assert ok.tolist() == [True, False]
    cond = SimpleNamespace(point=(BATCH, SEQ - 2), applies=sympy.Gt(CTX, 15))
    assert shared.at(np.array([0, 2])).point(cond)[2].tolist() == [False, True]


def test_linear_members_per_member_ops_object():
    """A fused step is a GEMM exactly when every member is linear, by its own program's member ops:
    two member-op maps differing in one op give their own answers."""
    step = SimpleNamespace(op="fused", kind="fused", collective="", parts=("a", "b"), dims={}, nodes=1)
    linear = {"a": "linear", "b": "linear", "c": "rms_norm"}
    mixed = {"a": "linear", "b": "silu", "c": "rms_norm"}
    assert kernel_of(step, linear) == "gemm"
    assert kernel_of(step, mixed) == ""
    assert kernel_of(step, linear) == "gemm"
    assert kernel_of(SimpleNamespace(**{**vars(step), "parts": ("a", "z")}), linear) == ""   # a member it lacks
    assert kernel_spec._linear_uids(mixed) == {"a"}


GRID = {
    "doc": "Tiny grid for tests/test_grid_gpu_shared.py.",
    "gpus": ["H100", "A100"], "gpu_counts": [1, 2], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [4096], "beyond_max_context": 1, "output_lengths": [256], "batches": [1, 64]},
    "ops": {"kv_dtypes": [], "points": []},
}


def test_export_gpu_without_tables_takes_the_fallback_tree(tmp_path):
    """The deploy page's expected-time trees: on A100 (no measured tables) every step's tree is the
    fallback, bound / 0.7 (what step_spec's None writes); on H100 some step reads a lookup."""
    from engine.batch.grid_eval import evaluate_model
    from engine.language.api import evaluate
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(GRID, sort_keys=False))
    doc: dict = {}
    evaluate_model(evaluate("Qwen/Qwen3-0.6B"), path, export=doc)
    trees = {gpu: [doc["trees"][t] for o in doc["options"] if o["gpu"] == gpu
                   for lists in o["expected"].values() for p in ("prefill", "decode") for i in lists[p]
                   for t in doc["expected"][i]] for gpu in ("H100", "A100")}
    assert trees["A100"] and all(t == ["/", "t_sol", DEFAULT_EFFICIENCY] for t in trees["A100"])
    assert any(t[0] == "pw" for t in trees["H100"])
