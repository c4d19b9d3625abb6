"""The grid's expected times, seventh pass (issue 42): the shortcuts it added.

* ``measured.unmeasured_times``: a program no table covers (most GPU types) takes its expected
  times point-major at once: hand values, and a consistency test against ``finish(fallback(...))``;
  ``measured.looks_up`` says when ``gather`` may look anything up (tables, or a stored structure);
* ``measured.finish(detail=True)`` writes its texts point-major directly (point p's step r at
  p x steps + r): hand values on three steps at two points, where a step-major index would land
  elsewhere;
* ``plan._every_point``: one point set of every group's (batch, seq, ctx, KV size) points, each
  member's points found in it (hand values); the grid's summaries ask the very same set, so their
  step functions' values are already there (a check of the set's arrays, not of timings); and
  ``plan._program_points`` picking its columns and the lookups' coordinates out of that set gives
  the floats of its own evaluation (consistency test, bit for bit);
* ``op_rows._shared_coordinates``: the per-op tables' lookups read coordinates evaluated once over
  every table's points; each table's expected times and texts are those of its own gather
  (consistency test).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import engine.deploy.point_values as point_values
from engine.deploy import measured
from engine.deploy.hardware import load_gpus
from engine.deploy import op_rows
from engine.deploy.measured import fallback, finish, gather, looks_up, resolve, unmeasured_times
from engine.deploy.op_rows import op_rows_columns_many
from engine.deploy.structure import Scenario
from engine.deploy.measured_tables import Table, load_measured
from engine.deploy import step_functions
from engine.deploy.measured import SharedCoordinates
from engine.deploy.plan import Plan, _Lazy, _every_point, _program_points, expected_phase_times_many
from engine.deploy.sol import distinct_rows, phase_inputs
from engine.language import symbols
from tests.deploy_helpers import finish_one_ask, make_plan

BATCH, SEQ, CTX = (symbols.dim(d) for d in symbols.SCENARIO_DIMS)

GPUS = load_gpus()


def test_unmeasured_times_hand_values():
    """Bounds 0.7 and 1.4 s (step 0) and 0.35 and 0 s (step 1) at two points, / 0.7: point 0's
    steps are 1 s and 0.5 s, point 1's 2 s and 0 s (point-major rows)."""
    t_sol = np.array([[0.7, 1.4], [0.35, 0.0]])
    got = unmeasured_times(t_sol)
    assert got.shape == (2, 2) and got.flags.c_contiguous
    assert got.reshape(-1).tolist() == pytest.approx([1.0, 0.5, 2.0, 0.0], rel=1e-15)
    assert measured.DEFAULT_EFFICIENCY == 0.7


def test_unmeasured_times_consistency_with_finish():
    """Consistency test: the point-major times of a program without lookups are finish's of its
    fallback, bit for bit (three steps at five points of unequal bounds), and the sums over each
    point's steps too (what the grid adds)."""
    rng = np.random.default_rng(7)
    t_sol = rng.random((3, 5)) * 1e-3
    want = finish(fallback(t_sol))[0].reshape(5, 3)
    got = unmeasured_times(t_sol)
    assert got.tolist() == want.tolist()
    assert got.sum(axis=1).tolist() == want.sum(axis=1).tolist()


def test_looks_up():
    """No tables: nothing to look up; tables: look up; a stored structure (its own ``gather``):
    always its own trees."""
    plain = SimpleNamespace(structure=SimpleNamespace())
    stored = SimpleNamespace(structure=SimpleNamespace(gather=lambda *a: None))
    assert not looks_up(plain, {})
    assert looks_up(plain, {("H100", "vllm", "gemm"): object()})
    assert looks_up(stored, {})


def _table() -> Table:
    values = (np.array([16.0, 256.0]), np.array([4096.0]), np.array([1024.0, 4096.0]))
    return Table("gemm", "bf16", "H100", "vllm", "0.1", ("m", "n", "k"), values,
                 np.arange(1, 5, dtype=float).reshape(2, 1, 2) * 1e-6, "x/gemm.yaml", "pkg 1.0")


def test_finish_texts_point_major_three_steps():
    """Three steps at two points; step 0 covered at point 1 only: its texts sit at index
    1 x 3 + 0 = 3 of the point-major lists (step-major would put them at 1), the others are the
    fallback's."""
    t = _table()
    times, covered, text = finish_one_ask(t, 3, 0, 5e-6, True, 1.0)
    fb = f"bound / {measured.DEFAULT_EFFICIENCY:g}"
    src = "gemm-bf16 vllm 0.1 (pkg 1.0) at m=64 n=4096 k=2048, extrapolated"
    assert text["src"] == [fb, fb, fb, src, fb, fb]
    assert text["table"] == ["", "", "", t.path, "", ""]
    assert [bool(n) for n in text["nearest"]] == [False, False, False, True, False, False]
    assert covered.tolist() == [False, False, False, True, False, False]
    assert times[3] == pytest.approx(5e-6)


def _member(kv_bytes: float, *runs):
    """A group as _program_points takes it: (plan, phase, compiled, tables, runs), runs of
    (call, name, half, batch, seq, ctx, shape)."""
    plan = SimpleNamespace(kv_bytes=kv_bytes)
    return (plan, "decode", None, {}, [(0, "decode", False, np.array(b, dtype=float), np.array(s, dtype=float),
                                        np.array(c, dtype=float), (len(b),)) for b, s, c in runs])


def test_every_point_hand_values():
    """Two programs: one with two KV sizes' groups sharing a point, one with a point of its own.
    The set holds each distinct (batch, seq, ctx, KV size) once, sorted by KV size, then ctx,
    seq, batch; each member's points are found at their places."""
    first = [_member(2.0, ([1, 8], [1, 1], [1024, 1024])), _member(1.0, ([1], [1], [1024]))]
    second = [_member(2.0, ([8, 1], [1, 1], [1024, 2048]))]
    every, where = _every_point([first, second])
    assert np.stack(every).T.tolist() == [[1, 1, 1024, 1], [1, 1, 1024, 2], [8, 1, 1024, 2], [1, 1, 2048, 2]]
    for members, places in zip((first, second), where):
        for (plan, *_, runs), at in zip(members, places):
            rows = np.stack(every)[:, at].T.tolist()
            assert rows == [[b, s, c, plan.kv_bytes] for r in runs for b, s, c in zip(r[3], r[4], r[5])]


@pytest.fixture(scope="module")
def plan8b():
    return make_plan("Llama-3.1-8B", "H100", "vllm", None, "bf16", tp=2)


def _asked(plan):
    batch, inp, out = np.array([1, 8, 64]), np.array([1024, 4096, 4096]), np.full(3, 1024)
    return [(Plan(plan.structure, GPUS[g], kv), batch, inp, out, load_measured(gpu=g, framework="vllm"))
            for g in ("H100", "A100") for kv in ("bf16", "fp8")]


def test_program_points_from_every_point_consistency(plan8b):
    """Consistency test: a program's groups with their columns picked out of the whole point set
    get the very floats (t_sol, points, spread) of the program's own evaluation over its points."""
    asked = _asked(plan8b)
    groups: dict = {}
    for plan, b, i, o, tables in asked:
        compiled, pb, seq, ctx = phase_inputs(plan.structure, b, i, o, plan.options.prefill_tokens)["decode"]
        pb, seq, ctx = (np.broadcast_to(np.asarray(x, dtype=float), (3,)).copy() for x in (pb, seq, ctx))
        groups[(plan.gpu.key, plan.kv_dtype)] = (plan, "decode", compiled, tables,
                                                 [(0, "decode", False, pb, seq, ctx, (3,))])
    members = list(groups.values())
    every, where = _every_point([members])
    shared = _Lazy(lambda: SharedCoordinates(*every))
    alone, picked = _program_points(members), _program_points(members, every, where[0], shared)
    kv = step_functions.KV_BYTES
    for a, p in zip(alone, picked):
        assert [x.tolist() for x in a[0]] == [x.tolist() for x in p[0]]
        assert a[1].tolist() == p[1].tolist()
        assert a[2]["t_sol"].tolist() == p[2]["t_sol"].tolist()
        # the lookups' coordinates at the group's points: the same values from the whole set's
        for expr in (BATCH, CTX, kv, BATCH * CTX * kv):
            assert a[3](expr).tolist() == p[3](expr).tolist()
    assert {float(x) for x in picked[0][3](kv)} != {float(x) for x in picked[1][3](kv)}    # KV sizes kept apart


def test_summaries_find_the_expected_times_point_set(plan8b):
    """The point set of the expected times is the one the summaries' phases ask (the same phase
    inputs, points and KV sizes): after expected_phase_times_many its arrays are among the stored
    point sets, and they are those phases_many builds from the same calls."""
    asked = _asked(plan8b)
    point_values._VALUES.clear()
    point_values._VALUES_SIZE[0] = 0
    expected_phase_times_many(asked)
    # phases_many's union of the same calls (sol.summarize_many's inputs: each call's phase inputs
    # with its KV size per point)
    cols: list[list] = [[], [], [], []]
    for plan, b, i, o, _ in asked:
        for compiled, pb, seq, ctx in phase_inputs(plan.structure, b, i, o, plan.options.prefill_tokens,
                                                   mean=True).values():
            for k, x in enumerate((pb, seq, ctx, plan.kv_bytes)):
                cols[k].append(np.broadcast_to(np.asarray(x, dtype=float), (3,)))
    keys, _ = distinct_rows([np.concatenate(c) for c in cols], 3 * len(cols[0]))
    union = list(keys)
    key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in union)
    assert key in point_values._VALUES


def test_op_rows_shared_coordinates_consistency(plan8b):
    """Consistency test: the per-op tables' expected times and texts with the lookups' coordinates
    evaluated once over every table's points (op_rows._shared_coordinates) are those of each table
    gathered with its own coordinates (measured.gather without them), on two KV dtypes (one point
    set holds both KV sizes) and a GPU without tables."""
    points = [Scenario(1, 4096, 1024), Scenario(64, 8192, 1024)]
    asked = [(Plan(plan8b.structure, GPUS[g], kv), phase, points, load_measured(gpu=g, framework="vllm"))
             for g, kv in (("H100", "bf16"), ("H100", "fp8"), ("A100", "bf16")) for phase in ("prefill", "decode")]
    measured_any = False
    for (plan, phase, pts, tables), got in zip(asked, op_rows_columns_many(asked, arrays=True)):
        compiled, (b, seq, ctx), keep, _, _ = op_rows._point_rows(plan, phase, pts)
        values = compiled.evaluate(plan.gpu, b, seq, ctx, plan.kv_bytes, True)
        g = gather(plan, phase, b, seq, ctx, tables, values, keep)
        resolve(g.asks)
        times, flags, text = finish(g, detail=True)
        assert got["t_expected_s"].tolist() == times.tolist(), (plan.gpu.key, plan.kv_dtype, phase)
        assert got["measured"].tolist() == flags.tolist()
        assert (got["expected_src"], got["expected_table"], got["expected_nearest"]) == \
            (text["src"], text["table"], text["nearest"])
        measured_any |= bool(flags.any())
        assert not (plan.gpu.key == "A100" and flags.any())     # no table: nothing measured
    assert measured_any
