"""engine/serving/disagg_sizing.py's build-speed shortcuts (issue 19) against the plain bisection:

- a bisection midpoint probes only the rows whose outcome differs at the interval's two ends (the
  others are copied from its bottom end);
- a decode point equal to a smaller one in everything a probe reads (TPOT, batch, GPUs, KV share)
  is searched once, as the smaller (:func:`_distinct`);
- plan's order sorts its whole-number keys as uint16 where they fit (:func:`_small`);
- every pool config's records from one sort (:func:`all_records`, once per GPU type).

Consistency: with the first two off (every row probed, every point searched) ``pair_candidates``
finds the same answers; a dropped duplicate has its twin's outcome, bit for bit, at every bound
probed; all_records equals records config by config. An MoE model (expert-parallel variants give decode points equal in all a probe reads).
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.serving.disagg_sizing as ds
from tests.deploy_helpers import pool_pairs, pool_search

MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS = "Qwen/Qwen3-30B-A3B", ["H100", "B200"], 2048, 256, 2


@pytest.fixture(scope="module")
def searched():
    return pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS)


@pytest.fixture(scope="module")
def pairs(searched):
    return pool_pairs(searched)


def _share(dres) -> np.ndarray:
    return np.array([dres.kv_share[c] for c in dres.configs])[dres.points["config"]]


def test_consistency_shortcuts_find_the_plain_bisections_answers(pairs, monkeypatch):
    probed = []
    probe = ds._probe

    def counting(pairing, bounds, which, point, opens):
        probed.append(len(point))
        return probe(pairing, bounds, which, point, opens)

    monkeypatch.setattr(ds, "_probe", counting)
    fast = [ds.pair_candidates(p, d, pres, dres, OUTPUT) for p, d, pres, dres in pairs]
    n_fast = sum(probed)
    probed.clear()
    monkeypatch.setattr(ds, "_distinct", lambda twin, every: every)
    monkeypatch.setattr(ds._Outcomes, "differs", lambda self, other: np.ones(len(self.total), dtype=bool))
    slow = [ds.pair_candidates(p, d, pres, dres, OUTPUT) for p, d, pres, dres in pairs]
    assert all(fast) and fast == slow
    assert n_fast < sum(probed)          # the shortcuts did cut probes


def test_consistency_a_dropped_duplicate_has_its_twins_outcome(pairs):
    dropped = 0
    for pgpu, dgpu, pres, dres in pairs:
        share = _share(dres)
        every = np.argsort(dres.points["tpot_s"], kind="stable")
        kept = ds._distinct(ds.twins(dres), every)
        gone = np.setdiff1d(every, kept)
        dropped += len(gone)
        if not len(gone):
            continue
        p = dres.points
        key = {(p["tpot_s"][i], p["batch"][i], p["n_gpus"][i], share[i]): i for i in kept.tolist()}
        twin = np.array([key[(p["tpot_s"][i], p["batch"][i], p["n_gpus"][i], share[i])] for i in gone.tolist()])
        assert (twin < gone).all()
        pairing = ds._Pairing(pgpu, dgpu, pres, dres, OUTPUT)
        bounds, _ = ds._breakpoints(pgpu, dgpu, pres, dres)
        for a in bounds[:: max(1, len(bounds) // 25)]:
            got = pairing.outcome(a, gone)
            want = pairing.outcome(a, twin)
            assert np.array_equal(got[0], want[0])
            for g, w in zip(got[1:], want[1:]):
                assert np.array_equal(g, w) and g.dtype == w.dtype
    assert dropped


def test_consistency_small_keys_sort_as_they_are():
    rng = np.random.default_rng(3)
    point, seg = rng.integers(0, 3000, 5000), np.sort(rng.integers(0, 40, 5000))
    total = rng.integers(1, 9, 5000).astype(float)
    tokens = rng.integers(0, 50, 5000) * 0.5                  # ties, so the point key matters
    want = np.lexsort((point, -tokens, total, seg))
    got = np.lexsort((ds._small(point), -tokens, ds._small(total), ds._small(seg)))
    assert np.array_equal(got, want)
    assert ds._small(point).dtype == np.uint16 and ds._small(point + 2 ** 16).dtype == point.dtype


def test_consistency_all_records_are_each_configs_records(searched):
    for pres in searched[1]:
        got = ds.all_records(pres)
        assert len(got) == len(pres.pool_configs) and sum(len(t) for t, _ in got) < len(pres.prefill["batch"])
        for c, pair in enumerate(got):
            assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(pair, ds.records(pres, c)))
