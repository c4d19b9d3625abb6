"""The grid's ninth pass (issue 42): its two shortcuts, each held to hand values or, as a
consistency test, to the path it replaces, bit for bit.

* ``point_values._Matrix``: a program's columns picked at some points of a point set are gathered
  out of one matrix of every function's values there, not picked per function: the floats of the
  whole table picked (``columns(at=)`` against ``columns()`` then the picks), on several programs
  sharing one point set (the matrix grows past its first rows) and again once the rows are known;
  the point set's values are views of the matrix rows, equal to evaluating each function;
* ``measured._Picked.applying`` and ``SharedCoordinates.point``: the specs of equal coordinates
  share one array of points (by value: hand-made specs), a step's ask takes the picks its own
  rule gives, and ``resolve`` reading a shared array once gives every ask the floats of reading
  a copy of its own.
"""
from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import sympy

from engine.deploy import measured, point_values
from engine.deploy.hardware import load_gpus
from engine.deploy.measured import SharedCoordinates, resolve
from engine.deploy.measured_tables import load_measured
from engine.deploy.plan import Plan, expected_phase_times_many
from engine.deploy.sol import phase_inputs
from engine.language import symbols
from tests.deploy_helpers import make_plan

GPUS = load_gpus()
BATCH, SEQ, CTX = (symbols.dim(d) for d in symbols.SCENARIO_DIMS)


def _programs():
    """Compiled programs of two structures (decode and prefill of each: hundreds of functions)."""
    out = []
    for model in ("Llama-3.1-8B", "Qwen3-8B"):
        s = make_plan(model, "H100", "vllm", None, "bf16", tp=2).structure
        b, i, o = np.array([1, 8]), np.array([1024, 4096]), np.array([512, 512])
        out += [v[0] for v in phase_inputs(s, b, i, o, s.options.prefill_tokens, mean=True).values()]
    return out


def test_matrix_picks_consistency_with_the_whole_table():
    """Consistency test: columns at picked points, gathered out of the point set's matrix, are the
    whole table's columns picked there, bit for bit; twice (the layout's rows found again) and on
    several programs of one point set; the point set's stored values are read-only views of the
    matrix rows, the floats of calling each function."""
    rng = np.random.default_rng(9)
    n = 300
    every = [rng.integers(1, 512, n).astype(float), rng.integers(1, 8192, n).astype(float),
             rng.integers(1, 16384, n).astype(float), rng.choice([1.0, 2.0], n)]
    point_values._VALUES.clear()
    point_values._VALUES_SIZE[0] = 0
    programs = _programs()
    picks = [np.sort(rng.choice(n, k, replace=False)) for k in (5, 60, 200)]
    for _ in range(2):
        for compiled in programs:
            for at in picks:
                got = compiled.columns((0, 1, 2, 4), every, (n,), at=at)
                want = compiled.columns((0, 1, 2, 4), every, (n,))[..., at]
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.tobytes() == want.tobytes()
    values = point_values._values(every)
    matrix = values[(point_values._Matrix, n)]
    assert matrix.used > 40 and matrix.viewed
    for f in matrix.viewed:
        view = values[f]
        assert view.base is matrix.data and not view.flags.writeable
        assert view.tobytes() == np.broadcast_to(np.asarray(f(*every), dtype=float), (n,)).tobytes()


def test_matrix_rows_hand_values():
    """By hand: 100 functions b + k (k = 0..99) and one of a number (3) over the points b = 1, 2, 5:
    each a row (the number broadcast), the rows of a layout in its order, found again by its token;
    past the first 64 rows the matrix grows (by half) and the point set's values are views of the new
    rows; the point set counts the matrix's rows, not the replaced arrays."""
    args = [np.array([1.0, 2.0, 5.0])]
    values = point_values._PointSet()
    functions = [(lambda b, k=k: b + k) for k in range(100)] + [lambda b: 3.0]
    for f in functions[:10]:
        point_values._value(values, f, args)          # some computed before the matrix knows them
    matrix = point_values._matrix(values, 3)
    rows = matrix.rows(functions[:50], 7, values, args)
    assert rows.tolist() == list(range(50)) and len(matrix.data) == 64
    # the new ones (100 down to 50) take rows 50 to 100 as they come, the known keep theirs
    assert (matrix.rows(list(reversed(functions)), 8, values, args).tolist()
            == [150 - k for k in range(100, 49, -1)] + list(range(49, -1, -1)))
    assert matrix.rows([], 7, values, args) is rows                      # by the token
    assert len(matrix.data) == 144                                       # 64, 96, 144 rows
    # counted: the matrix's 144 rows of 3 and the number 3 held as it is; no function's own array
    # (the arrays, 10 of them computed before the matrix, are views of its rows now)
    assert values.size == 144 * 3 + 1
    for k in (0, 9, 70, 99):
        r = matrix.row[functions[k]]
        assert matrix.data[r].tolist() == [1.0 + k, 2.0 + k, 5.0 + k]
        assert values[functions[k]].base is matrix.data and values[functions[k]].tolist() == [1.0 + k, 2.0 + k, 5.0 + k]
    assert matrix.data[50].tolist() == [3.0, 3.0, 3.0] and values[functions[100]] == 3.0


def test_specs_of_equal_coordinates_share_one_array():
    """By hand: two spec objects of equal expressions (batch x seq built twice) get one array of
    points over the set and one array of picks; another spec its own. Points (1, 3), (2, -1),
    (8, 5): batch x seq - 2 is 1, -4, 38, so the spec applies at points 0 and 2 only."""
    shared = SharedCoordinates(np.array([1.0, 2.0, 8.0]), np.array([3.0, -1.0, 5.0]), np.array([4.0, 2.0, 9.0]), 2)
    one = SimpleNamespace(point=(BATCH, BATCH * SEQ - 2), applies=sympy.true)
    two = SimpleNamespace(point=(BATCH, sympy.Add(sympy.Mul(SEQ, BATCH), -2)), applies=sympy.true)
    other = SimpleNamespace(point=(SEQ,), applies=sympy.true)
    assert shared.point(one)[0] is shared.point(two)[0]
    assert shared.point(one)[0] is not shared.point(other)[0]
    picked = shared.at(np.array([2, 1, 0]))
    at, points = picked.applying(one)
    assert picked.applying(two)[1] is points
    assert at.tolist() == [0, 2] and points.tolist() == [[8.0, 38.0], [1.0, 1.0]]
    assert not points.flags.writeable
    # the step rule's own picks (bound positive everywhere): the same
    _, whole, ok = picked.point(one)
    assert np.flatnonzero(ok).tolist() == at.tolist()


def test_resolve_of_shared_points_consistency():
    """Consistency test: the expected times of a plan (two GPU types, two KV dtypes), whose asks
    share their points arrays, give each ask the floats of resolving a copy of its own points."""
    s = make_plan("Llama-3.1-8B", "H100", "vllm", None, "bf16", tp=2).structure
    tables = load_measured(gpu="H100", framework="vllm")
    asks = []
    original = measured.resolve

    def keep(found):
        asks.extend(found)
        return original(found)
    plan_module = sys.modules["engine.deploy.plan"]         # (engine.deploy.plan: also a function's name)
    plan_module.resolve = keep
    try:
        batch, inp, out = np.array([1, 8, 64, 3]), np.array([1024, 4096, 4096, 100]), np.full(4, 1024)
        expected_phase_times_many([(Plan(s, GPUS["H100"], kv), batch, inp, out, tables) for kv in ("bf16", "fp8")])
    finally:
        plan_module.resolve = original
    assert len({id(a.points) for a in asks}) < len(asks)      # some asks share their points
    copies = [measured.Ask(a.row, a.at.copy(), a.points.copy(), a.tables, a.roof, a.repeat, a.shape) for a in asks]
    resolve(copies)
    for a, c in zip(asks, copies):
        for (t, o), (tc, oc) in zip(a.found, c.found):
            assert t.tobytes() == tc.tobytes() and o.tobytes() == oc.tobytes()
