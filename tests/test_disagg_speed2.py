"""engine/serving/disagg_sizing.py's second round of build-speed changes (issue 19) against the plain
code they replace, on a corpus model's real search (an MoE model: many pool configs, KV shares and
decode points; up to 4 GPUs, so configs dominate one another):

- :func:`dominated`: one pass per earlier config over the later configs' records not yet dropped
  (was one numpy call per pair of configs) gives the same masks, with and without the slowest link;
- :func:`_breakpoints`: every record per decode share at once gives the same breakpoints and least
  bounds as config by config;
- :func:`decode_side` / :func:`twins`: TPOTs and shares as dense ranks (16-bit radix sorts) give
  ``np.unique``'s inverse, the per-config floors and the twins of the float keys;
- :func:`_plan_order`: the bit-pattern key for tokens/s/GPU and the joint (interval, GPUs) key give
  the plain lexsort's order, also where the joint key does not fit and for a non-positive token rate;
- :func:`_drop_inert`: the bisection finds the same answers with the first level's inert rows kept;
- :func:`_next_ends`: the next level's end columns gathered in place equal take then concatenate;
- ``_Pairing.outcome``'s per-pair transfer-time table: tests/test_disagg_sizing_fast.py compares the
  outcome with ``pair_points`` column for column; here also with join's own expression per row.

Consistency tests: each fast path equals the plain path (written out here as it was) on real data.
No memo is added (the tables live in one ``_Pairing``, built from its own inputs), so nothing can go
stale across calls.
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.serving.disagg_sizing as ds
from engine.serving.disagg import links
from tests.deploy_helpers import pool_pairs, pool_search

MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS = "Qwen/Qwen3-30B-A3B", ["H100", "B200"], 2048, 256, 4


@pytest.fixture(scope="module")
def searched():
    return pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS)


@pytest.fixture(scope="module")
def pairs(searched):
    return pool_pairs(searched)


def _plain_dominated(pres, slowest, recs):
    """dominated as it was: config pair by config pair."""
    out = []
    for c2, cfg2 in enumerate(pres.pool_configs):
        t2, b2 = recs[c2]
        x2 = b2 / t2
        drop = np.zeros(len(t2), dtype=bool)
        for c1 in range(c2):
            cfg1 = pres.pool_configs[c1]
            t1, b1 = recs[c1]
            extra = pres.kv_share[cfg1] - pres.kv_share[cfg2]
            if cfg2.n_gpus % cfg1.n_gpus or not len(t1) or (extra > 0 and slowest is None):
                continue
            reach = t2 if extra <= 0 else t2 * (1 - 1e-9) - extra / slowest
            j = np.searchsorted(t1, reach, side="right") - 1
            drop |= (j >= 0) & ((cfg2.n_gpus // cfg1.n_gpus) * (b1 / t1)[np.maximum(j, 0)] >= x2)
        out.append(drop)
    return out


def test_consistency_dominated_equals_pair_by_pair(searched):
    gpus, res = searched
    slowest = min(g.scale_out_bytes_per_s for g in gpus)
    seen = 0
    for pres in res:
        recs = ds.all_records(pres)
        assert len(pres.pool_configs) > 5
        for bandwidth in (slowest, None):
            fast, plain = ds.dominated(pres, bandwidth, recs), _plain_dominated(pres, bandwidth, recs)
            assert len(fast) == len(plain)
            assert all(np.array_equal(f, p) for f, p in zip(fast, plain))
            seen += sum(int(p.sum()) for p in plain)
    assert seen            # some records are dominated: the comparison is not vacuous


def _plain_breakpoints(pgpu, dgpu, pres, dres):
    """_breakpoints as it was: config by config."""
    _, scale_out = links(pgpu, dgpu)
    shares = sorted({dres.kv_share[c] for c in dres.configs})
    bps, first = [], {s: np.inf for s in shares}
    for c, cfg in enumerate(pres.pool_configs):
        t = pres.prefill["ttft_s"][pres.prefill["config"] == c]
        for s in shares:
            bps.append(t + scale_out.time(max(pres.kv_share[cfg], s)))
            first[s] = min(first[s], float(bps[-1].min()))
    bps = np.unique(np.concatenate(bps))
    return np.unique(np.concatenate([bps, (bps[1:] + bps[:-1]) / 2, [bps[0] / 2, bps[-1] * 2]])), list(first.values())


def test_consistency_breakpoints_equal_config_by_config(pairs):
    for pgpu, dgpu, pres, dres in pairs:
        probes, first = ds._breakpoints(pgpu, dgpu, pres, dres)
        plain_probes, plain_first = _plain_breakpoints(pgpu, dgpu, pres, dres)
        assert np.array_equal(probes, plain_probes) and first == plain_first
        assert len(first) > 1          # several decode shares


def test_consistency_decode_side_ranks_floors_and_twins(searched):
    _, res = searched
    for dres in res:
        p = dres.points
        side = ds.decode_side(dres, OUTPUT)
        assert np.array_equal(side.tp, np.unique(p["tpot_s"], return_inverse=True)[1].ravel())
        # the floors config by config, as they were
        x = p["batch"] / (OUTPUT * p["tpot_s"])
        floor = np.empty(len(x))
        for k in np.unique(p["config"]):
            sel = np.flatnonzero(p["config"] == k)
            order = sel[np.argsort(p["tpot_s"][sel], kind="stable")]
            tp = p["tpot_s"][order]
            low = np.minimum.accumulate(x[order])
            floor[order] = low[np.searchsorted(tp, tp, side="right") - 1]
        assert np.array_equal(side.floor, floor) and np.array_equal(side.demand, x)
        # the twins from the float keys, as they were
        share = np.array([dres.kv_share[c] for c in dres.configs])[p["config"]]
        keys = (p["tpot_s"], p["batch"], p["n_gpus"], share)
        order = np.lexsort(keys)
        differ = np.zeros(len(order), dtype=bool)
        for key in keys:
            differ[1:] |= key[order][1:] != key[order][:-1]
        twin = np.empty(len(order), dtype=np.int64)
        twin[order] = np.cumsum(differ)
        assert np.array_equal(side.twin, twin) and np.array_equal(ds.twins(dres), twin)
        assert len(np.unique(twin)) < len(twin)        # some points are twins


def _plain_plan_order(seg, point, out):
    r = np.flatnonzero(np.isfinite(out.total))
    return r[np.lexsort((point[r], -out.tokens[r], out.total[r], seg[r]))]


def test_consistency_plan_order_equals_the_plain_lexsort(pairs, monkeypatch):
    calls = []
    plan_order = ds._plan_order

    def checking(seg, point, out):
        got = plan_order(seg, point, out)
        assert np.array_equal(got, _plain_plan_order(seg, point, out))
        calls.append(len(got))
        return got

    monkeypatch.setattr(ds, "_plan_order", checking)
    for pgpu, dgpu, pres, dres in pairs[:2]:
        ds.pair_candidates(pgpu, dgpu, pres, dres, OUTPUT)
    assert len(calls) > 5 and max(calls) > 100
    # where (interval, GPUs) do not fit one 16-bit key, ties of tokens/s/GPU, and a zero token rate
    rng = np.random.default_rng(3)
    n = 5000
    seg = np.sort(rng.integers(0, 3000, n))
    point = rng.permutation(n)
    total = rng.integers(1, 40, n).astype(float)
    total[rng.random(n) < 0.1] = np.inf
    tokens = rng.integers(1, 30, n) * 0.37
    for t in (tokens, np.where(rng.random(n) < 0.05, 0.0, tokens)):
        out = ds._Outcomes(total, t, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
        for s in (seg, seg % 3):
            assert np.array_equal(ds._plan_order(s, point, out), _plain_plan_order(s, point, out))


def test_consistency_inert_rows_cut_finds_the_same_answers(pairs, monkeypatch):
    cut = []
    drop_inert = ds._drop_inert

    def counting(seg, *rest):
        kept = drop_inert(seg, *rest)
        cut.append(len(seg) - len(kept[0]))
        return kept

    monkeypatch.setattr(ds, "_drop_inert", counting)
    fast = [ds.pair_candidates(p, d, pres, dres, OUTPUT) for p, d, pres, dres in pairs]
    monkeypatch.setattr(ds, "_drop_inert", lambda *rows: rows)
    plain = [ds.pair_candidates(p, d, pres, dres, OUTPUT) for p, d, pres, dres in pairs]
    assert all(fast) and fast == plain
    assert sum(cut) > 0            # rows were cut


def test_consistency_outcome_transfer_table_is_joins_expression(pairs):
    for pgpu, dgpu, pres, dres in pairs:
        pairing = ds._Pairing(pgpu, dgpu, pres, dres, OUTPUT)
        up, out = links(pgpu, dgpu)
        for c in range(len(pres.pool_configs)):
            for k in range(len(dres.configs)):
                link = max(float(pairing.share_p[c]), float(pairing.share_d[k]))
                assert pairing.seconds_out[c * pairing.n_kd + k] == out.time(link)
                if up is not None:
                    assert pairing.seconds_up[c * pairing.n_kd + k] == up.time(link)


def test_consistency_next_ends_equal_take_then():
    rng = np.random.default_rng(7)
    n = 1000

    def outcomes():
        total = rng.integers(2, 30, n).astype(float)
        total[rng.random(n) < 0.2] = np.inf
        return ds._Outcomes(total, rng.random(n), rng.integers(-1, 9, n), rng.integers(-1, 300, n))

    lo, hi = outcomes(), outcomes()
    for rows in (np.sort(rng.choice(n, 300, replace=False)), np.arange(0), np.arange(n)):
        got_lo, got_hi = ds._next_ends(lo, hi, rows)
        want_lo, want_hi = lo.take(rows).then(lo.take(rows)), lo.take(rows).then(hi.take(rows))
        for got, want in zip((*got_lo, *got_hi), (*want_lo, *want_hi)):
            assert got.dtype == want.dtype and np.array_equal(got, want)
