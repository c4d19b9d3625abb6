"""Consistency (the engine with itself): the numeric hot path's fast forms give the slow forms' floats.

engine.deploy.cost assembles a column from a table of its distinct constants and functions (spread
by one gather, gathered at picked points first), keeps one GPU's rates as a (steps, 1) column,
writes the sums' terms over their own columns, and sums a single point's steps by a running sum;
engine.deploy.sol cuts distinct rows per sorted column. Each is checked here against the plain
form written out in the test (every step function called, the rates gathered per point, the
step-by-step loop, numpy.unique), bit for bit. A planted bug this catches: a table row off by one
or a constant merged with -0.0, a gather on the wrong axis, a single point summed pairwise, a
rate column aligned on the points, two distinct rows merged.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options, cost, plan
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.sol import distinct_rows
from engine.deploy.structure import PHASES
from tests.deploy_helpers import direct_column

MODEL = "Qwen/Qwen3-30B-A3B"          # MoE with expert parallelism: collectives, weight reads, zeros


@pytest.fixture(scope="module")
def structure(evaluation):
    return plan(evaluation(MODEL), load_gpus()["H100"], ParallelConfig(tp=2, ep=2, dp_attn=2), Options()).structure


def test_table_columns_consistency_with_each_step_called(structure):
    batch, ctx = np.array([1.0, 3.0, 64.0, 7.0]), np.array([1024.0, 5000.0, 9000.0, 77.0])
    at = np.array([3, 0, 0, 2, 1, 3])
    for phase in PHASES:
        compiled = structure.compiled[phase]
        seq = ctx.copy() if phase == "prefill" else np.ones(4)
        args = [batch, seq, ctx, np.array(2.0)]
        for index in range(5):
            want = direct_column(compiled, index, args, (4,))
            assert compiled.column(index, args, (4,)).tobytes() == want.tobytes(), (phase, index)
            picked = compiled.column(index, args, (4,), at=at)
            assert picked.flags.c_contiguous and picked.tobytes() == np.ascontiguousarray(want[:, at]).tobytes()
            # a grid (two axes): row by row, the same floats
            grid = [batch[:, None], seq[None, :], ctx[None, :], np.array(2.0)]
            assert compiled.column(index, grid, (4, 4)).tobytes() == direct_column(compiled, index, grid, (4, 4)).tobytes()


def test_table_keeps_negative_zero_apart_consistency():
    # the table merges equal constants by their exact float: 0.0 and -0.0 stay two rows
    from engine.deploy.device_program import Program
    compiled = cost.CompiledProgram(Program(phase="decode", steps=(), layouts={}))
    compiled._columns = [[0.0, -0.0, 2.5, 0.0, 2.5]] * 4
    compiled._calls = [0.0] * 5
    rows, constants, functions, _ = compiled._table_layout((0,))
    rows = rows[0]
    assert functions == [] and len(constants) == 3
    assert np.signbit(constants[rows]).tolist() == [False, True, False, False, False]
    assert constants[rows].tolist() == [0.0, -0.0, 2.5, 0.0, 2.5]


def test_one_gpu_rate_column_consistency_with_gathered_rates(structure):
    gpus = load_gpus()
    gpu, other = gpus["H100"], gpus["B200"]
    batch, ctx = np.array([1.0, 3.0, 64.0, 200.0]), np.array([1024.0, 5000.0, 131072.0, 8.0])
    for phase in PHASES:
        compiled = structure.compiled[phase]
        seq = ctx if phase == "prefill" else np.ones(4)
        index = np.zeros(4, dtype=np.intp)
        column = compiled.rates_for([gpu, other], index)
        assert column[0].shape == (len(compiled.program.steps), 1)
        # the plain form: every rate gathered per point
        peaks, links, hbm, alphas = (np.stack([r[k] for r in (compiled.rates(gpu), compiled.rates(other))], axis=-1)
                                     for k in range(4))
        gathered = (peaks[:, index], links[:, index], hbm[index], alphas[:, index])
        for rates in (column, gathered):
            assert np.array_equal(np.broadcast_to(rates[0], gathered[0].shape), gathered[0])
        fast = compiled.totals(column, batch, seq, ctx, np.array(2.0))
        slow = compiled._totals_by_step(*gathered, [batch, seq, ctx, np.array(2.0)], (4,))
        for key in slow:
            assert fast[key].tobytes() == slow[key].tobytes(), (phase, key)
        assert compiled.step_time(column, batch, seq, ctx, np.array(2.0)).tobytes() == slow["t_sol"].tobytes()


@pytest.mark.parametrize("point", [(np.array(7.0), np.array(3000.0)), (np.array([64.0]), np.array([8192.0]))])
def test_single_point_running_sum_consistency_with_step_loop(structure, point):
    gpu = load_gpus()["H100"]
    batch, ctx = point
    for phase in PHASES:
        compiled = structure.compiled[phase]
        seq = ctx if phase == "prefill" else np.ones_like(ctx)
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, np.array(2.0))]
        assert compiled._stacks(ctx.shape)                    # the stacked path takes a single point
        slow = compiled._totals_by_step(*compiled.rates(gpu), args, ctx.shape)
        fast = compiled.totals(gpu, *args)
        for key in slow:
            assert np.asarray(fast[key]).tobytes() == np.asarray(slow[key]).tobytes(), (phase, key)
        assert np.asarray(compiled.step_time(gpu, *args)).tobytes() == slow["t_sol"].tobytes()


def test_distinct_rows_consistency_with_numpy_unique():
    rng = np.random.default_rng(7)
    n = 500
    columns = [rng.integers(1, 9, n).astype(float), np.array(8192.0), rng.integers(0, 3, n).astype(float) * 1000,
               rng.integers(0, 2, n)]
    keys, inverse = distinct_rows(columns, n)
    full = np.stack([np.broadcast_to(np.asarray(c, dtype=float), (n,)) for c in columns])
    assert np.array_equal(keys[:, inverse], full)
    # numpy.unique on the rows (sorted on the first column first): the same set, and lexsort's
    # order (the last column the first key) of the varying columns
    unique = np.unique(full.T, axis=0)
    assert keys.shape[1] == len(unique)
    order = np.lexsort(unique.T[[0, 2, 3]])
    assert np.array_equal(keys, unique[order].T)
    # nothing varies: one row
    keys, inverse = distinct_rows([np.array(1.0), np.array(2.0)], 4)
    assert keys.tolist() == [[1.0], [2.0]] and inverse.tolist() == [0, 0, 0, 0]
