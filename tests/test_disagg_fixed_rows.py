"""engine/serving/disagg_sizing.py's bisection carries only the rows whose outcome moves (issue 42,
eighth pass): a row whose outcome is the same at its interval's two ends is *fixed* there; its
steps are its bottom end's (already recorded) and what it keeps out of a staircase is folded into
each other row's *bound* (:func:`engine.serving.disagg_probe._fold`: the first outcome in plan's
order among the fixed rows of no larger TPOT), so the next levels sort, prune and split only the
moving rows.

Consistency: ``candidate_arrays`` finds, bit for bit, what the bisection before this pass found
(``FOLD_SHARE`` 0: every kept row carried to the next level, an interval done when its two ends'
staircases are the same), folding from the first level on or from the level the build's
``FOLD_SHARE`` picks, on an MoE model's pairs. By hand: a fold's bound, a
fixed row of equal TPOT keeping a moving row out, and a planted case where the bound must not cut:
a fixed row with a larger TPOT (it keeps nothing out of a smaller-TPOT staircase step).
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.serving.disagg_probe as dp
import engine.serving.disagg_sizing as ds
from tests.deploy_helpers import pool_pairs, pool_search

MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS = "Qwen/Qwen3-30B-A3B", ["H100", "B200"], 2048, 256, 2


@pytest.fixture(scope="module")
def pairs():
    return pool_pairs(pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS))


def _candidates(pairs, share: float, monkeypatch) -> list:
    monkeypatch.setattr(ds, "FOLD_SHARE", share)
    return [ds.candidate_arrays(pgpu, dgpu, pres, dres, OUTPUT) for pgpu, dgpu, pres, dres in pairs]


def test_consistency_folding_fixed_rows_finds_the_staircase_bisections_answers(pairs, monkeypatch):
    folded = []
    fold = ds._fold

    def counting(last, seg, point, out, at, bound=None, rows=None):
        folded.append(int((at >= 0).sum()))
        return fold(last, seg, point, out, at, bound, rows)

    monkeypatch.setattr(ds, "_fold", counting)
    build = ds.FOLD_SHARE
    plain = _candidates(pairs, 0.0, monkeypatch)            # never folded: every kept row carried to the end
    assert not folded
    for share in (1e9, build):        # folded from the first level on; as the build does
        got = _candidates(pairs, share, monkeypatch)
        for g, w in zip(got, plain):
            assert len(g) == len(w) == 3
            for a, b in zip(g, w):
                assert a.dtype == b.dtype and np.array_equal(a, b)
    assert sum(len(p[0]) for p in plain) > 100
    assert sum(folded) > 1000          # fixed rows were folded (the shortcut ran)


def _out(total, tokens):
    n = len(total)
    return dp._Outcomes(np.asarray(total, dtype=float), np.asarray(tokens, dtype=float),
                        np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))


def test_fold_takes_the_first_fixed_outcome_of_no_larger_tpot_by_hand():
    # one interval, rows by TPOT rank: 0, 1, 1, 2, 3; fixed rows 0 (8 GPUs), 2 (4 GPUs, 10 tok/s),
    # 4 (2 GPUs); rows 1 and 3 move. Plan's order: fewer GPUs first.
    seg = np.zeros(5, dtype=np.int64)
    tp = np.array([0, 1, 1, 2, 3])
    point = np.array([10, 11, 12, 13, 14])
    out = _out([8, 6, 4, 3, 2], [1.0, 1.0, 10.0, 1.0, 1.0])
    fixed = np.array([True, False, True, False, True])
    # the fixed rows' places in plan's order: row 4 (2 GPUs), row 2 (4), row 0 (8)
    at = np.where(fixed, np.array([2, -1, 1, -1, 0]), -1)
    b = dp._fold(dp._runs(seg, tp)[1], seg, point, out, at)
    # row 0: itself (8 GPUs); rows 1, 2 (TPOT rank 1): row 2's 4 GPUs (a tie of TPOT counts);
    # row 3: still row 2's; row 4: itself (2 GPUs)
    assert b.total.tolist() == [8, 4, 4, 4, 2]
    assert b.point.tolist() == [10, 12, 12, 12, 14]
    # a second interval holding no fixed row: no bound
    seg, tp = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    b = dp._fold(dp._runs(seg, tp)[1], seg, np.arange(4), _out([1, 2, 3, 4], [1] * 4), np.array([0, -1, -1, -1]))
    assert b.total.tolist() == [1, 1, np.inf, np.inf]


def test_a_fixed_row_keeps_out_a_moving_row_of_equal_tpot_and_never_a_smaller_one():
    # a fixed outcome of 4 GPUs at 10 tokens/s/GPU, point 5
    bound = dp._Bound(np.array([4.0, 4.0, 4.0, np.inf]), np.array([10.0, 10.0, 10.0, 0.0]), np.array([5, 5, 5, -1]))
    out = _out([4, 4, 3, np.inf], [10.0, 12.0, 1.0, 0.0])
    # same GPUs and tokens/s/GPU: the smaller point first (point 5 before 7; 3 before 5)
    assert dp._precedes(out, np.array([7, 7, 7, 7]), bound).tolist() == [False, True, True, False]
    assert dp._precedes(out, np.array([3, 3, 3, 3]), bound).tolist() == [True, True, True, False]


def test_planted_a_fixed_row_of_larger_tpot_cuts_nothing():
    # the planted case: the fixed row (TPOT rank 5) is first in plan's order, but every moving row
    # has a smaller TPOT, so no row's bound may hold it: each moving row stays a possible step
    seg = np.zeros(3, dtype=np.int64)
    tp = np.array([1, 2, 5])
    point = np.array([0, 1, 2])
    out = _out([8, 6, 1], [1.0, 1.0, 99.0])
    b = dp._fold(dp._runs(seg, tp)[1], seg, point, out, np.array([-1, -1, 0]))
    assert b.total.tolist() == [np.inf, np.inf, 1.0]
    assert dp._precedes(out.take(slice(0, 2)), point[:2], b.take(slice(0, 2))).all()
