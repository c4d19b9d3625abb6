"""Consistency tests for the sizing search's speed paths (engine/serving/sizing.py, third round):
each fast path gives the plain path's numbers, bit for bit, on real corpus models.

* :func:`engine.deploy.sol.phases_many` as the search calls it (every compiled program's step times
  evaluated once over the points of all the summarize() calls and phases that run it) gives the search the
  points it gets when each summarize() call evaluates its own phases, on a MoE model with
  pipeline, DP-attention and expert-parallel configs, GPU types of several archs, and pool
  (prefill-only) points.
* :meth:`engine.serving.sizing._Evaluator.limits` (once per config and GPU arch),
  :meth:`engine.serving.sizing._Evaluator.first` (batch 1's regimes once per config and live
  limits) and :meth:`engine.serving.sizing._Evaluator.capacity` (capacity()'s GPU-free terms once per
  structure and lengths) give what the plain calls give for every GPU type, of several archs and
  memory sizes, and configs; a GPU of another arch or other lengths are not served a memo's answer.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options
from engine.serving import sizing
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.fusion_table import live_token_limits
from engine.deploy.parallel import ParallelConfig
from engine.serving.sizing import SLA, search
from engine.deploy.sol import capacity
from engine.deploy.structure import PHASES

from tests.deploy_helpers import structure_cache

MOE = "Qwen/Qwen3-30B-A3B"
GPUS = ["H100", "B200", "MI300X"]


@pytest.fixture(scope="module")
def cache():
    return structure_cache(MOE)


def run_search(cache, framework: str, gpus=GPUS, max_gpus: int = 4):
    """The search a build runs (through the model's structure cache: a second search reuses the
    structures and evaluates every point again)."""
    return search(cache.ev, [find_gpu(load_gpus(), g) for g in gpus], 8192, 1024, SLA(1e30, 1e30),
                  max_gpus=max_gpus, options=Options(framework=framework), fusion=cache.tables[framework],
                  pools=True, cache=cache)


def assert_same(fast, plain):
    assert len(fast) == len(plain)
    for a, b in zip(fast, plain):
        assert a.configs == b.configs and a.pool_configs == b.pool_configs and a.kv_share == b.kv_share
        assert a.rejected == b.rejected
        assert a.points.keys() == b.points.keys() and a.prefill.keys() == b.prefill.keys()
        for name in a.points:
            assert a.points[name].dtype == b.points[name].dtype, name
            assert np.array_equal(a.points[name], b.points[name]), name
        for name in a.prefill:
            assert np.array_equal(a.prefill[name], b.prefill[name]), name


@pytest.mark.parametrize("framework", ["vllm", "sglang"])
def test_batched_phases_consistency_with_summarize_alone(monkeypatch, cache, framework):
    shared = []
    batched = sizing.phases_many

    def spy(gpus, asked, times_only=False):
        # how many calls hold a program another call holds too (the batching has work to do)
        # (each call's own programs once: a pipeline's fill runs its prefill program again)
        programs = [p for inputs, *_ in asked for p in {id(compiled) for compiled, *_ in inputs.values()}]
        shared.append(len(programs) - len(set(programs)))
        return batched(gpus, asked, times_only)

    monkeypatch.setattr(sizing, "phases_many", spy)
    fast = run_search(cache, framework)
    assert shared and max(shared) > 0
    # the plain path: each summarize() call evaluates its own phases (phases=None)
    monkeypatch.setattr(sizing, "phases_many", lambda gpus, asked, times_only=False: [None] * len(asked))
    plain = run_search(cache, framework)
    assert_same(fast, plain)
    assert sum(len(r.points.get("batch", ())) for r in fast) > 1000
    assert any(c.pp > 1 for r in fast for c in r.configs)


CONFIGS = [ParallelConfig(tp=1), ParallelConfig(tp=4, ep=4, dp_attn=4), ParallelConfig(tp=2, pp=2),
           ParallelConfig(tp=2, ep=2, dp_attn=2, pp=2)]


@pytest.mark.parametrize("framework", ["vllm", "sglang"])
def test_memoized_limits_regimes_and_capacity_consistency(cache, framework):
    from engine.deploy.structure import Options as Opts
    options = Opts(framework=framework)
    gpus = [find_gpu(load_gpus(), g) for g in ("H100", "H200", "B200", "GB200-NVL72", "MI300X", "A100")]
    table = cache.tables[framework]
    evaluator = sizing._Evaluator(cache.ev, options, table, cache)
    seen_limits = set()
    for config in CONFIGS:
        for input_len in (8192, 1024):
            for outs in ([1024, 1], [1024], [7, 1]):
                for gpu in gpus:
                    limits = tuple(live_token_limits(table, gpu, config, p) for p in PHASES)
                    assert tuple(map(tuple, evaluator.limits(config, gpu))) == tuple(map(tuple, limits))
                    seen_limits.add((config, tuple(map(tuple, limits))))
                    # the plain path: batch 1's regimes from this GPU's limits, its structure, capacity()
                    regimes = tuple(int(np.searchsorted(np.asarray(lim, dtype=float), t[0], side="left"))
                                    for lim, t in zip(limits, sizing._device_tokens(
                                        config, np.array([1]), input_len, options.prefill_tokens,
                                        options.decode_seq)))
                    s = cache.live_structure(config, gpu.scale_up_domain, framework, gpu, regimes, options)
                    assert evaluator.first(config, gpu, input_len) is s
                    want = capacity(s, gpu.hbm_bytes * options.hbm_fraction, input_len, np.asarray(outs),
                                    evaluator.kv_bytes, options.prefill_tokens)
                    got = evaluator.capacity(config, gpu, input_len, outs)
                    assert got.dtype == want.dtype and np.array_equal(got, want), (config.label(), gpu.key)
    # the GPUs' archs give more than one set of live limits for some config (the memo keys on arch)
    assert len(seen_limits) > len(CONFIGS)
