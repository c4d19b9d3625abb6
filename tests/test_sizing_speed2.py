"""Consistency tests for the sizing step's speed paths (engine/serving/sizing.py, engine/batch/):
each fast path gives the plain path's numbers, bit for bit, on real corpus models.

* :func:`engine.deploy.sol.summarize` with ``prefill_only`` (a prefill-pool point's TTFT, fit and
  capacity without the decode step) equals its full serving fields at the same points,
  on configs with pipeline stages (the pipeline fill), DP-attention and expert parallelism, over
  GPU types of several archs, both prompt-only (output 1) and full-length points.
* the search with pools (where pool points take ``prefill_only``) gives the same served and
  pool points as the search evaluating every point with summarize.
* :func:`engine.serving.pairing.prefill_choice` (no gathered copies when every point has a point of
  a config within its bound) gives each point what it gets alone, on a mix of bounds where some
  points have no prefill point of some configs within theirs and some of none at all.
* :func:`engine.serving.fronts.staircase` (points cheaply dominated dropped before its loop) keeps
  the points the plain loop over every point keeps, on a real search's points and on random
  points with many ties.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options
from engine.serving import sizing
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.serving.disagg import links
from engine.serving.sizing import SLA, search
from engine.serving.pairing import prefill_choice, prefill_staircases
from engine.deploy.sol import summarize
from engine.serving.fronts import preference, staircase

from tests.conftest import _evaluation
from tests.deploy_helpers import structure_cache

MOE = "Qwen/Qwen3-30B-A3B"
CONFIGS = [ParallelConfig(tp=1), ParallelConfig(tp=4, ep=4, dp_attn=4), ParallelConfig(tp=2, pp=2),
           ParallelConfig(tp=2, ep=2, dp_attn=2, pp=2), ParallelConfig(pp=4)]
GPUS = ["H100", "B200", "MI300X"]


@pytest.fixture(scope="module")
def cache():
    return structure_cache(MOE)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
def test_prefill_only_consistency_with_summarize(cache, config):
    gpus = [find_gpu(load_gpus(), name) for name in GPUS]
    s = cache.live_structure(config, 8, "vllm", gpus[0], (0, 0))
    batch = np.concatenate([np.arange(1, 90), np.arange(1, 3000, 37), np.arange(5, 41)])
    index = np.concatenate([np.zeros(89, int), np.ones(82, int), np.full(36, 2)])
    for out_len in (np.ones(len(batch), dtype=int), np.where(np.arange(len(batch)) % 3 == 0, 1, 1024)):
        for kv_bytes in (2.0, 1.0):
            want = summarize(s, gpus, index, kv_bytes, batch, 8192, out_len, 0.9, 8192, serving_only=True)
            got = summarize(s, gpus, index, kv_bytes, batch, 8192, out_len, 0.9, 8192, serving_only=True,
                            prefill_only=True)
            assert set(got) == set(want)
            assert np.isnan(got["tpot_s"]).all() and np.isnan(got["tokens_per_s_per_gpu"]).all()
            for name in ("ttft_s", "fits", "max_concurrent_requests"):
                value = got[name]
                a, b = np.asarray(value), np.asarray(want[name])
                assert a.dtype == b.dtype and a.shape == b.shape, name
                assert np.array_equal(a, b), (config.label(), name)


def pooled_search(gpus):
    ev = _evaluation("Qwen/Qwen3-8B")
    tables = load_tables(ev.corpus.root / "fusion")
    return search(ev, gpus, 8192, 1024, SLA(1e30, 1e30), max_gpus=4, options=Options(framework="vllm"),
                  fusion=tables["vllm"], pools=True)


def test_pooled_search_consistency_with_summarize_everywhere(monkeypatch):
    gpus = [find_gpu(load_gpus(), name) for name in ("H100", "B200")]

    def run():
        return pooled_search(gpus)

    fast = run()
    plain_evaluate = sizing._Evaluator.evaluate
    # the plain path: every point (pool ones too) through summarize, as before prefill_only
    monkeypatch.setattr(sizing._Evaluator, "evaluate",
                        lambda self, gpus, work, input_len, pool_start=None: plain_evaluate(self, gpus, work, input_len))
    plain = run()
    assert len(fast) == len(plain)
    for a, b in zip(fast, plain):
        assert a.configs == b.configs and a.pool_configs == b.pool_configs and a.kv_share == b.kv_share
        assert a.points.keys() == b.points.keys() and a.prefill.keys() == b.prefill.keys()
        for name in a.points:
            assert np.array_equal(a.points[name], b.points[name]), name
        for name in a.prefill:
            assert np.array_equal(a.prefill[name], b.prefill[name]), name
        assert len(a.prefill["batch"]) > 0


def plain_staircase(order, ttft, tpot) -> list[int]:
    """The rule written out: a point is kept when no earlier point has TTFT <= and TPOT <= its own."""
    order = np.asarray(order, dtype=int)
    x, y = np.asarray(ttft, dtype=float)[order], np.asarray(tpot, dtype=float)[order]
    return [int(order[i]) for i in range(len(order)) if not np.any((x[:i] <= x[i]) & (y[:i] <= y[i]))]


def test_staircase_consistency_on_search_points():
    ev = _evaluation("Qwen/Qwen3-8B")
    tables = load_tables(ev.corpus.root / "fusion")
    gpus = [find_gpu(load_gpus(), "H100")]
    res, = search(ev, gpus, 8192, 1024, SLA(1e30, 1e30), max_gpus=4, options=Options(framework="sglang"),
                  fusion=tables["sglang"])
    p = res.points
    order = preference(p)
    assert len(order) > 1000
    got = staircase(order, p["ttft_s"], p["tpot_s"])
    assert got == plain_staircase(order, p["ttft_s"], p["tpot_s"]) and len(got) > 3


def test_staircase_consistency_on_ties():
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 50, 400):
        ttft = rng.integers(0, 12, n).astype(float)
        tpot = rng.integers(0, 12, n).astype(float)
        order = rng.permutation(n)
        assert staircase(order, ttft, tpot) == plain_staircase(order, ttft, tpot)


def test_prefill_choice_consistency_alone_and_together():
    gpu = find_gpu(load_gpus(), "H100")
    res, = pooled_search([gpu])
    share_d = np.array([res.kv_share[c] for c in res.configs])
    share_p = np.array([res.kv_share[c] for c in res.pool_configs])
    n_p = np.array([c.n_gpus for c in res.pool_configs])
    _, out = links(gpu, gpu)
    stairs = prefill_staircases(res, lambda c: out.time(np.maximum(share_p[c], share_d)))
    rng = np.random.default_rng(3)
    t = res.prefill["ttft_s"]
    # below every prefill point, between the configs' first points, and above most of them
    bounds = np.concatenate([[t.min() / 2], np.quantile(t, [0.001, 0.01, 0.05, 0.3, 0.9])])
    n = 400
    kd = rng.integers(0, len(res.configs), n)
    demand = rng.uniform(0.01, 50, n)
    which = rng.integers(0, len(bounds), n)
    together = prefill_choice(stairs, bounds, kd, demand, n_p, which)
    assert np.isinf(together[1]).any() and np.isfinite(together[1]).any()
    for i in range(n):
        alone = prefill_choice(stairs, bounds[which[i]], kd[i:i + 1], demand[i:i + 1], n_p)
        for a, b in zip(together, alone):
            assert a[i] == b[0] and a.dtype == b.dtype
