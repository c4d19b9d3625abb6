"""The serving side, eleventh pass (issue 42): first-time work the sizing search and the
disaggregated candidates no longer repeat per point.

- engine/serving/sizing.py's ``_one_length``: a summarize() call's output lengths are passed as one
  number exactly when they are all one (hand values); in a real search every call gets one number
  (a call's points are all serving points or all prefill-pool points), and the search's every
  column, serving and prefill-pool, is the same bit for bit and dtype for dtype as with the
  per-point lengths (consistency: the old path, the lengths left as arrays, on the same inputs);
- engine/serving/disagg_sizing.py's ``prefill_records(..., picked=True)``: what :func:`_picks`
  picks is undominated without a bandwidth too, so skipping :func:`dominated` there changes no
  record (consistency on a real search's picks); the containment it rests on, checked on every
  record of the search (what :func:`dominated` drops without a bandwidth it drops at the slowest
  link); and the flag is not a no-op: a record dominated without a bandwidth, named in ``keep``,
  stays with it (hand-picked from the same search), so it is for picks only.
"""
from __future__ import annotations

import numpy as np
import pytest

import engine.serving.disagg_sizing as ds
import engine.serving.sizing as sizing
from tests.deploy_helpers import pool_search

MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS = "Qwen/Qwen3-30B-A3B", ["H100", "B200"], 2048, 256, 2


def test_one_length_is_one_number_only_where_all_agree():
    one = sizing._one_length(np.array([1024, 1024, 1024]))
    assert np.ndim(one) == 0 and one == 1024 and np.asarray(one).dtype == np.int64
    mixed = np.array([1024, 1, 1024])
    assert sizing._one_length(mixed) is mixed
    single = sizing._one_length(np.array([1]))
    assert np.ndim(single) == 0 and single == 1


def _searched(monkeypatch, per_point: bool):
    """The pooled search (every summarize() call's output lengths recorded), with the lengths as
    one number per call (this pass) or, ``per_point``, as the per-point arrays (the path before)."""
    if per_point:
        monkeypatch.setattr(sizing, "_one_length", lambda lengths: lengths)
    seen = []
    real = sizing.summarize

    def spy(structure, gpus, index, kv_bytes, batch, input_len, output_len, *args, **kwargs):
        seen.append(np.shape(output_len))
        return real(structure, gpus, index, kv_bytes, batch, input_len, output_len, *args, **kwargs)
    monkeypatch.setattr(sizing, "summarize", spy)
    gpus, results = pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS)
    monkeypatch.undo()
    return results, seen


def _same_columns(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


def test_consistency_one_length_per_call_gives_the_per_point_search(monkeypatch):
    new, shapes = _searched(monkeypatch, per_point=False)
    old, old_shapes = _searched(monkeypatch, per_point=True)
    assert shapes and all(s == () for s in shapes)             # every call: one number
    assert all(len(s) == 1 for s in old_shapes)                # the old path: one per point
    assert len(new) == len(old)
    for x, y in zip(new, old):
        assert (x.gpu, x.configs, x.pool_configs, x.rejected, x.kv_share) == \
               (y.gpu, y.configs, y.pool_configs, y.rejected, y.kv_share)
        assert x.points and x.prefill                          # both kinds of point are compared
        _same_columns(x.points, y.points)
        _same_columns(x.prefill, y.prefill)


@pytest.fixture(scope="module")
def searched():
    return pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS)


def test_dominated_without_a_bandwidth_is_within_the_slowest_links(searched):
    """The containment ``picked`` rests on, on every record of the search."""
    gpus, results = searched
    slowest = min(float(g.scale_out_bytes_per_s) for g in gpus)
    dropped = 0
    for r in results:
        recs = ds.all_records(r)
        for without, at_slowest in zip(ds.dominated(r, None, recs), ds.dominated(r, slowest, recs)):
            assert not (without & ~at_slowest).any()
            dropped += int(without.sum())
    assert dropped                                  # the search has records dominated without a bandwidth


def test_consistency_picked_records_skip_dominated(searched):
    gpus, results = searched
    recs = {r.gpu: ds.all_records(r) for r in results}
    picked, _ = ds._picks(results, gpus, OUTPUT, "same-vendor", recs)
    assert any(picked.values())
    for r in results:
        fast = ds.prefill_records(r, picked[r.gpu], recs=recs[r.gpu], picked=True)
        full = ds.prefill_records(r, picked[r.gpu], recs=recs[r.gpu])
        assert fast.pool_configs == full.pool_configs and fast.kv_share == full.kv_share
        _same_columns(fast.prefill, full.prefill)


def test_picked_is_for_picks_only(searched):
    """A record dominated without a bandwidth, named in ``keep``: the flag keeps it, the full path
    drops it (so the flag must only carry what _picks picked)."""
    _, results = searched
    for r in results:
        recs = ds.all_records(r)
        for c, drop in enumerate(ds.dominated(r, None, recs)):
            if drop.any():
                batch = int(recs[c][1][np.flatnonzero(drop)[0]])
                keep = {c: {batch}}
                assert len(ds.prefill_records(r, keep, recs=recs, picked=True).prefill["batch"]) == 1
                assert not ds.prefill_records(r, keep, recs=recs).prefill
                return
    pytest.fail("no record dominated without a bandwidth in the search")


def test_the_output_length_terms_are_elementwise():
    """What _one_length rests on, at the source: the steady tokens and the mean context of an
    array of lengths are each length's own, bit for bit (a paged admission with a clipped
    reservation, and the prefill pool's one-token output beside a scenario's)."""
    from engine.deploy.admission import Admission, mean_context, steady_tokens
    adm = Admission(page_tokens=16, free_fraction=0.05, reserve_ratio=0.5, reserve_clip_tokens=64)
    lengths = np.array([256, 1, 1024, 256])
    for fn in (lambda o: steady_tokens(adm, 2048, o), lambda o: mean_context(2048, o)):
        many = np.asarray(fn(lengths), dtype=float)
        one = [np.asarray(fn(np.int64(o)), dtype=float) for o in lengths.tolist()]
        assert [x.tobytes() for x in many] == [x.tobytes() for x in one]
