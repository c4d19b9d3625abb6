"""engine.serving.pairing.prefill_choice evaluates a prefill config only at the decode points whose
best key so far is above the config's GPU count (issue 42): the config's key is at least its GPUs
(one replica or more, plus TTFT / 2 bound >= 0 where the bound is positive), and only a key below
the best so far replaces it, so skipping the others changes no choice.

Hand values: two prefill configs, A on 1 GPU (TTFTs 1 s and 2 s at batches 1 and 4: 1 and 2
requests/s) and B on 2 GPUs (TTFT 1 s at batch 8: 8 requests/s), no transfer time, a 10 s bound
(keys add TTFT / 20 s).

* demand 1.5 requests/s: A needs one replica (2 requests/s at its 2 s point; its 1 s point's
  1 request/s does not carry 1.5), key 1 + 2/20 = 1.1; B's key is at least 2: not evaluated.
* demand 5: A needs ceil(5 / 2) = 3 replicas, key 3.1; B one replica of 2 GPUs at its 1 s point,
  key 2 + 1/20 = 2.05: B.
* demand 2: A's one replica at 2 requests/s carries it exactly (the ceiling's 1e-12 margin),
  key 1.1: B not evaluated.
"""
from __future__ import annotations

import numpy as np

import engine.serving.pairing as pairing
import engine.serving.rules as rules
from engine.serving.pairing import prefill_choice
from engine.serving.staircase import staircase


def configs():
    a = (*staircase(np.array([1.0, 2.0]), np.array([1, 4])), np.array([0.0]))
    b = (*staircase(np.array([1.0]), np.array([8])), np.array([0.0]))
    return [a, b], np.array([1, 2])


def test_hand_choices_and_the_rows_a_config_is_evaluated_at(monkeypatch):
    rows = []
    plain = pairing.run_arrays

    def spy(program, env, only=None):
        if program is rules.CHOICE:
            rows.append(len(np.atleast_1d(env["demand"])))
        return plain(program, env, only)

    monkeypatch.setattr(pairing, "run_arrays", spy)
    stairs, n_p = configs()
    demand = np.array([1.5, 5.0, 2.0])
    choice, cost, ttft, batch = prefill_choice(stairs, 10.0, np.zeros(3, dtype=int), demand, n_p)
    assert choice.tolist() == [0, 1, 0]
    assert cost.tolist() == [1.0, 2.0, 1.0]
    assert ttft.tolist() == [2.0, 1.0, 2.0]
    assert batch.tolist() == [4, 8, 4]
    # A at every point, B only where A's key (3.1) is above B's 2 GPUs
    assert rows == [3, 1]


def test_same_choices_as_every_config_at_every_point_consistency():
    """Many points and bounds: the choice equals the rule applied by hand over each config's own
    outcome (each config alone through prefill_choice: its key per point), the fewest key first,
    the first config on a tie."""
    rng = np.random.default_rng(7)
    stairs, n_p = [], []
    for n in (1, 2, 2, 4, 8):
        t = np.sort(rng.uniform(0.2, 6.0, 6))
        stairs.append((*staircase(t, rng.integers(1, 64, 6)), rng.uniform(0.0, 0.5, 3)))
        n_p.append(n)
    n_p = np.array(n_p)
    points = 400
    kd = rng.integers(0, 3, points)
    demand = rng.uniform(0.1, 200.0, points)
    bounds = np.array([0.5, 2.0, 4.0, 9.0])
    which = rng.integers(0, len(bounds), points)
    got = prefill_choice(stairs, bounds, kd, demand, n_p, which)
    keys = []
    for c in range(len(stairs)):
        _, cost, ttft, _ = prefill_choice([stairs[c]], bounds, kd, demand, n_p[c:c + 1], which)
        keys.append(np.where(np.isfinite(cost), cost + ttft / (2 * bounds[which]), np.inf))
    keys = np.array(keys)
    best = np.argmin(keys, axis=0)          # the first on a tie
    found = np.isfinite(keys.min(axis=0))
    assert found.any() and (~found).any() and len(set(best[found].tolist())) > 2
    assert np.array_equal(got[0][found], best[found])
    assert np.all(np.isinf(got[1][~found]))


def test_candidates_gathered_as_arrays_hand_values():
    """engine.serving.disagg_sizing gathers the answers' (pool config, batch) of every pair as
    arrays (``_picked``): config -> the set of its batches, each config once, none for no pair."""
    from engine.serving.disagg_sizing import _picked
    pairs = [(np.array([2, 0, 2]), np.array([64, 8, 16])), (np.array([2, 5]), np.array([64, 1])),
             (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))]
    assert _picked(pairs) == {0: {8}, 2: {16, 64}, 5: {1}}
    assert _picked([]) == {}


def test_candidate_arrays_are_the_set_once_each_in_order_consistency():
    from engine.serving import disagg_sizing as ds
    from tests.deploy_helpers import pool_pairs, pool_search
    found = 0
    for pgpu, dgpu, pres, dres in pool_pairs(pool_search("Qwen/Qwen3-8B", ["H100", "B200"], 4096, 512, 4)):
        d, c, b = ds.candidate_arrays(pgpu, dgpu, pres, dres, 512)
        triples = list(zip(d.tolist(), c.tolist(), b.tolist()))
        assert triples == sorted(set(triples))               # each once, by point, config, batch
        assert set(triples) == ds.pair_candidates(pgpu, dgpu, pres, dres, 512)
        found += len(triples)
    assert found > 4
