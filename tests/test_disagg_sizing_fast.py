"""engine/serving/disagg_sizing.py's shortcuts give plan's own numbers (issue 17's build cost):

- the record cut (:func:`prefill_records` with the slowest link's bandwidth: dominated records and
  configs left out) leaves ``pair_points``' outcome of every decode point as it was (GPUs, tokens/s/GPU,
  TTFT, the prefill config and batch it picks), at bounds around every breakpoint;
- the probes' reduced arithmetic (``_Pairing.outcome``) gives ``pair_points``' doubles, column for
  column;
- a bisection level's probes in one pass (a bound per point) give each probe's own columns.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.serving.disagg_sizing import prefill_records
from engine.serving.disagg_probe import _breakpoints, _Pairing
from engine.serving.sizing import SLA
from engine.serving.pairing import pair_points
from tests.deploy_helpers import pool_search

MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS = "meta-llama/Meta-Llama-3.1-8B", ["H100", "B200"], 2048, 256, 2


@pytest.fixture(scope="module")
def pairs():
    gpus, res = pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS)
    slowest = min(g.scale_out_bytes_per_s for g in gpus)
    by_key = {g.key: g for g in gpus}
    return [(by_key[p.gpu], by_key[d.gpu], p, prefill_records(p, slowest_bytes_per_s=slowest), d)
            for p in res for d in res]


def _bounds(pgpu, dgpu, pres, dres, n: int = 12) -> np.ndarray:
    """Breakpoints (where outcomes change), a hair either side of them, between them."""
    bps, _ = _breakpoints(pgpu, dgpu, pres, dres)
    pick = np.random.default_rng(5).choice(bps, size=min(n, len(bps)), replace=False)
    near = np.concatenate([pick, np.nextafter(pick, 0), np.nextafter(pick, np.inf)])
    return np.unique(near[near > 0])


def test_record_cut_keeps_every_outcome(pairs):
    kv = 1e8
    cut = 0
    for pgpu, dgpu, full, kept, dres in pairs:
        assert len(kept.prefill["batch"]) < len(full.prefill["batch"])
        cut += len(full.prefill["batch"]) - len(kept.prefill["batch"])
        for a in np.concatenate([_bounds(pgpu, dgpu, kept, dres), _bounds(pgpu, dgpu, full, dres, 4)]):
            want = pair_points(pgpu, dgpu, full, dres, kv, OUTPUT, SLA(float(a), 1e30))
            got = pair_points(pgpu, dgpu, kept, dres, kv, OUTPUT, SLA(float(a), 1e30))
            assert bool(want) == bool(got), a
            if not want:
                continue
            for name in ("decode_point", "total_gpus", "tokens_per_s_per_gpu", "ttft_s", "prefill_batch",
                         "prefill_ttft_s"):
                assert np.array_equal(want[name], got[name]), (a, name)
            labels = [full.pool_configs[c].label() for c in want["prefill_config"]]
            assert labels == [kept.pool_configs[c].label() for c in got["prefill_config"]]
    assert cut > 0


def test_probe_arithmetic_is_pair_points(pairs):
    kv = 1e8
    for pgpu, dgpu, _, pres, dres in pairs:
        pairing = _Pairing(pgpu, dgpu, pres, dres, OUTPUT)
        every = np.arange(len(dres.points["batch"]))
        for a in _bounds(pgpu, dgpu, pres, dres):
            want = pair_points(pgpu, dgpu, pres, dres, kv, OUTPUT, SLA(float(a), 1e30))
            at, total, tokens, ttft, c, b = pairing.outcome(float(a), every)
            if not want:
                assert not len(at)
                continue
            for got, name in ((at, "decode_point"), (total, "total_gpus"), (tokens, "tokens_per_s_per_gpu"),
                              (ttft, "ttft_s"), (c, "prefill_config"), (b, "prefill_batch")):
                assert np.array_equal(got, want[name]) and got.dtype.kind == np.asarray(want[name]).dtype.kind, name


def test_probes_of_a_level_are_each_probes_own(pairs):
    """The bisection probes a level's bounds in one pass (a bound per point, points repeated):
    every point's columns are those it has probed alone at its bound."""
    for pgpu, dgpu, _, pres, dres in pairs:
        pairing = _Pairing(pgpu, dgpu, pres, dres, OUTPUT)
        every = np.arange(len(dres.points["batch"]))
        bounds = _bounds(pgpu, dgpu, pres, dres, 6)
        which = np.repeat(np.arange(len(bounds)), len(every))
        at, *cols = pairing.outcome(bounds, np.tile(every, len(bounds)), which)
        for k, a in enumerate(bounds):
            alone = pairing.outcome(float(a), every)
            mine = slice(np.searchsorted(at, k * len(every)), np.searchsorted(at, (k + 1) * len(every)))
            assert np.array_equal(at[mine] - k * len(every), alone[0])
            for got, want in zip(cols, alone[1:]):
                assert np.array_equal(got[mine], want) and got.dtype == want.dtype
