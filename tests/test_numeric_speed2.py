"""Consistency (the engine with itself): the numeric hot path's memos and batching give the plain floats.

* :func:`engine.deploy.sol.summarize_many` (the grid: each compiled program evaluated once over the
  points of every structure that holds it) gives, call by call, what :func:`summarize` gives alone,
  bit for bit: sibling structures of a MoE with expert parallelism, DP-attention and a pipeline
  (the ``fill`` phase), on GPU types of several archs mixed point by point.
* :class:`engine.deploy.cost.CompiledProgram` keeps the table of a tuple of columns among a point
  set's values: a table read back, and one of several columns at once, equals every step function
  called; an input changed in place is a new point set; the held-number count follows what is
  dropped.

A planted bug each catches: answers cut back into the wrong call or phase, a ``fill`` evaluated at
the mean step, a table kept under a key two layouts share or read back after its inputs changed,
a size left counted after its point set went.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import point_values, sol
from engine.deploy.fusion_table import load_tables, token_limits
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.structure import PHASES
from engine.deploy.structure_cache import StructureCache
from tests.conftest import _evaluation
from tests.deploy_helpers import direct_column

MOE = "Qwen/Qwen3-30B-A3B"
GPUS = ["H100", "B200", "MI300X"]
CONFIGS = [ParallelConfig(tp=4, ep=4, dp_attn=4), ParallelConfig(tp=2, pp=2), ParallelConfig(tp=2, ep=2, dp_attn=2, pp=2)]


@pytest.fixture(scope="module")
def cache():
    ev = _evaluation(MOE)
    return StructureCache(ev, load_tables(ev.corpus.root / "fusion"))


@pytest.fixture(scope="module")
def gpus():
    return [find_gpu(load_gpus(), name) for name in GPUS]


def _siblings(cache, gpu):
    """The grid's structures of each config: both frameworks, every token regime (they share most
    compiled programs)."""
    out = []
    for config in CONFIGS:
        for framework in ("vllm", "sglang"):
            limits = token_limits(cache.tables.get(framework))
            for regimes in {(len(limits), 0), (0, 0), (len(limits), len(limits))}:
                out.append(cache.structure(config, 8, framework, gpu, regimes))
    return out


def _same(a, b, where):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], (where, k))
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), where


def test_summarize_many_consistency_with_summarize_alone(cache, gpus):
    structures = _siblings(cache, gpus[0])
    shared = len({id(s.compiled[p]) for s in structures for p in PHASES})
    assert shared < 2 * len(structures)            # the case batching is for: programs held twice
    rng = np.random.default_rng(11)
    calls = []
    for s in structures:
        n = int(rng.integers(1, 60))
        calls.append((s, rng.integers(0, len(gpus), n), rng.choice([1.0, 2.0], n), rng.integers(1, 300, n),
                      rng.choice([1024, 8192, 32768], n), rng.choice([1, 1024], n)))
    many = sol.summarize_many(gpus, calls, 0.9, 8192)
    for call, got in zip(calls, many):
        alone = sol.summarize(call[0], gpus, *call[1:], 0.9, 8192)
        _same(got, alone, call[0].config.label())


def test_table_memo_consistency_with_each_step_called(cache, gpus):
    s = cache.structure(CONFIGS[0], 8, "vllm", gpus[0], (0, 0))
    batch, ctx = np.array([1.0, 3.0, 64.0, 7.0]), np.array([1024.0, 5000.0, 9000.0, 77.0])
    for phase in PHASES:
        compiled = s.compiled[phase]
        seq = ctx.copy() if phase == "prefill" else np.ones(4)
        args = [batch, seq, ctx, np.array(2.0)]
        for _ in range(2):                          # cold, then from the kept table
            together = compiled.columns((0, 1, 2, 3, 4), args, (4,))
            for index in range(5):
                want = direct_column(compiled, index, args, (4,))
                assert together[index].tobytes() == want.tobytes(), (phase, index)
                assert compiled.column(index, args, (4,)).tobytes() == want.tobytes(), (phase, index)
            together[:] = -1.0                       # the caller's own array: the table is untouched
        batch_before = batch.copy()
        batch *= 3                                  # changed in place: a new point set
        assert compiled.columns((1, 3), args, (4,))[1].tobytes() == direct_column(compiled, 3, args, (4,)).tobytes()
        assert compiled.column(1, args, (4,)).tobytes() == direct_column(compiled, 1, args, (4,)).tobytes()
        batch[:] = batch_before


def test_values_size_follows_dropped_point_sets(cache, gpus, monkeypatch):
    s = cache.structure(CONFIGS[1], 8, "vllm", gpus[0], (0, 0))
    compiled = s.compiled["decode"]
    monkeypatch.setattr(point_values, "VALUES_ELEMENTS", 2000)     # a few point sets at a time
    point_values._VALUES.clear()
    point_values._VALUES_SIZE[0] = 0
    for b in range(1, 40):
        compiled.columns((0, 1, 2, 3, 4), [np.arange(b, b + 16.0), np.ones(16), np.full(16, 4096.0), np.array(2.0)],
                         (16,))
        held = sum(np.size(v) for values in point_values._VALUES.values() for v in values.values())
        assert point_values._VALUES_SIZE[0] == held == sum(values.size for values in point_values._VALUES.values())
        assert held <= 2000 or len(point_values._VALUES) == 1
    assert len(point_values._VALUES) < 39                          # some were dropped
