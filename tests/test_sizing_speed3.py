"""Consistency tests for the sizing search's speed paths (engine/deploy/sizing.py, third round):
each fast path gives the plain path's numbers, bit for bit, on real corpus models.

* :meth:`engine.deploy.sizing._Evaluator.phases` (every compiled program's step times evaluated
  once over the points of all the summarize() calls and phases that run it) gives the search the
  points it gets when each summarize() call evaluates its own phases, on a MoE model with
  pipeline, DP-attention and expert-parallel configs, GPU types of several archs, and pool
  (prefill-only) points.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options
from engine.deploy import sizing
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.sizing import SLA, search

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
    batched = sizing._Evaluator.phases

    def spy(self, gpus, calls, input_len):
        # how many calls hold a program another call holds too (the batching has work to do)
        programs = [id(s.compiled[p]) for s, *_ in calls for p in ("prefill", "decode")]
        shared.append(len(programs) - len(set(programs)))
        return batched(self, gpus, calls, input_len)

    monkeypatch.setattr(sizing._Evaluator, "phases", spy)
    fast = run_search(cache, framework)
    assert shared and max(shared) > 0
    # the plain path: each summarize() call evaluates its own phases (phases=None)
    monkeypatch.setattr(sizing._Evaluator, "phases", lambda self, gpus, calls, input_len: [None] * len(calls))
    plain = run_search(cache, framework)
    assert_same(fast, plain)
    assert sum(len(r.points.get("batch", ())) for r in fast) > 1000
    assert any(c.pp > 1 for r in fast for c in r.configs)
