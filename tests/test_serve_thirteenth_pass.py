"""The serving side, thirteenth pass (issue 42): the disaggregated candidates' first level builds only
the rows a point can have an outcome in.

engine/serving/disagg_probe.py's ``_first_level`` gives interval ``i`` (from cut ``i`` to cut
``i + 1``) the points open at its top only, and probes each cut at the points open there only; the
pass before built every point at every interval, probed every point at every cut (the closed ones
came back without an outcome) and let ``_drop_inert`` drop the rows with an outcome at neither end.

- a hand-built case (a stub pairing whose outcomes are written out here): the rows, their
  intervals, the outcomes at both ends (none at the bottom for a point opening inside the interval),
  both plan orders, and which points each cut was asked for, all derived by hand;
- consistency on a real search (every pair of a pooled MoE search): the first level through
  ``_drop_inert`` is the old construction's through ``_drop_inert``, array for array and dtype for
  dtype, where the old one had closed rows to drop (so the check is not vacuous); and the
  candidates of every pair are the same with the old construction patched in.
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.serving.disagg_probe as dp
import engine.serving.disagg_sizing as ds
from tests.deploy_helpers import pool_pairs, pool_search

MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS = "Qwen/Qwen3-30B-A3B", ["H100", "B200"], 2048, 256, 4


def plain_first_level(pairing, bounds, every, opens):
    """The first level as the twelfth pass built it: every point of ``every`` at every interval,
    probed at every cut (``_probe`` leaves a closed point without an outcome), in the same layout."""
    n, k = len(every), len(bounds) - 1
    end = np.repeat(np.arange(k + 1), n)
    ends = dp._Outcomes(*dp._probe(pairing, bounds, end, np.tile(every, k + 1), opens))
    by_end = np.concatenate([e * n + dp._plan_order(end[:n], every, ends.take(slice(e * n, (e + 1) * n)))
                             for e in range(k + 1)])
    seg, point = end[:k * n], np.tile(every, k)
    lo, hi = ends.take(slice(0, k * n)), ends.take(slice(n, (k + 1) * n))
    return seg, point, lo, hi, by_end[by_end < k * n], by_end[by_end >= n] - n


class _Stub:
    """A pairing whose outcome at bound ``a`` of decode point ``p`` is written out: total
    ``8 - a + (2 - p)`` GPUs (better as the bound grows, and the larger point first), tokens/s/GPU
    ``p + 1``, TTFT 0, prefill config ``p`` and batch the bound's index; it records what it is asked."""

    def __init__(self):
        self.asked = []

    def outcome(self, a, i, which):
        self.asked.append(sorted(zip(which.tolist(), i.tolist())))
        return (np.arange(len(i)), 8.0 - a[which] + (2 - i), (i + 1).astype(float), np.zeros(len(i)),
                i.copy(), which.copy())


def test_first_level_by_hand():
    # points 0, 1, 2 (by TPOT) open from bounds 0.5, 2 and 3: at cuts 1, 2 and 4, point 0 is open
    # at every cut, point 1 from the second (its bound exactly: within it), point 2 at the last only
    stub = _Stub()
    seg, point, lo, hi, by_lo, by_hi = dp._first_level(stub, np.array([1.0, 2.0, 4.0]), np.array([0, 1, 2]),
                                                       np.array([0.5, 2.0, 3.0]))
    # each cut asked for its open points only: (cut, point)
    assert stub.asked == [[(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]]
    # interval 0 (cuts 0-1) holds points 0 and 1 (open at its top), interval 1 all three
    assert seg.tolist() == [0, 0, 1, 1, 1] and point.tolist() == [0, 1, 0, 1, 2]
    # totals 8 - a + 2 - p: cut 0 (a = 1): point 0 9; cut 1 (a = 2): 8, 7; cut 2 (a = 4): 6, 5, 4;
    # none at a row's bottom for point 1 in interval 0 and point 2 in interval 1 (not yet open)
    assert lo.total.tolist() == [9.0, np.inf, 8.0, 7.0, np.inf]
    assert hi.total.tolist() == [8.0, 7.0, 6.0, 5.0, 4.0]
    assert lo.config.tolist() == [0, -1, 0, 1, -1] and lo.batch.tolist() == [0, -1, 1, 1, -1]
    assert hi.config.tolist() == [0, 1, 0, 1, 2] and hi.batch.tolist() == [1, 1, 2, 2, 2]
    assert lo.tokens.tolist() == [1.0, 0.0, 1.0, 2.0, 0.0]
    # plan's order (fewest GPUs first) within each interval, rows numbered as above: at the bottoms,
    # interval 0 has row 0 only, interval 1 rows 3 (7 GPUs) then 2 (8); at the tops, rows 1 then 0,
    # and 4, 3, 2
    assert by_lo.tolist() == [0, 3, 2] and by_hi.tolist() == [1, 0, 4, 3, 2]
    assert all(c.dtype == np.int64 for c in (lo.config, lo.batch, hi.config, hi.batch))


@pytest.fixture(scope="module")
def pairs():
    return pool_pairs(pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS))


def test_consistency_first_level_equals_every_point_at_every_cut(pairs, monkeypatch):
    first_level, checked, closed = dp._first_level, [], []

    def checking(pairing, bounds, every, opens):
        got = first_level(pairing, bounds, every, opens)
        plain = plain_first_level(pairing, bounds, every, opens)
        closed.append(len(plain[0]) - len(got[0]))
        for new, old in zip(dp._drop_inert(*got), dp._drop_inert(*plain)):
            for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (new, old))):
                assert a.dtype == b.dtype and np.array_equal(a, b)
        checked.append(len(got[0]))
        return got

    monkeypatch.setattr(ds, "_first_level", checking)
    for pgpu, dgpu, pres, dres in pairs:
        ds.candidate_arrays(pgpu, dgpu, pres, dres, OUTPUT)
    assert len(checked) == len(pairs) and min(checked) > 0
    assert sum(closed) > 0           # the old construction had rows of closed points to drop


def test_consistency_candidates_with_the_old_first_level(pairs, monkeypatch):
    new = [ds.pair_candidates(p, d, pres, dres, OUTPUT) for p, d, pres, dres in pairs]
    monkeypatch.setattr(ds, "_first_level", plain_first_level)
    old = [ds.pair_candidates(p, d, pres, dres, OUTPUT) for p, d, pres, dres in pairs]
    assert all(new) and new == old
