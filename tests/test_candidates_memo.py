"""engine/serving/disagg_sizing.py's memo of :func:`candidates` (issue 42: a family's fine-tunes with the
same dims search to the very same points, and the second reuses the first's disaggregated candidates).

- the key (:func:`inputs_digest`) is of every argument's pickled bytes: equal arguments built apart
  (a deep copy) give one key; a change of one ulp in one decode TPOT, one prefill TTFT or one KV
  share, another GPU link, output length or pair policy each give another key (none collide);
- consistency: a second call with equal arguments (another object: a twin model's search) takes the
  picks from the memo (the pairing is not run again) and answers what a fresh evaluation (an empty
  memo) answers, field for field, its searches cut out of its own arguments;
- the memo keeps the latest :data:`MEMO_ENTRIES` answers.
"""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

import engine.serving.disagg_sizing as ds
from tests.deploy_helpers import pool_search

MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS = "Qwen/Qwen3-30B-A3B", ["H100", "B200"], 2048, 256, 2


@pytest.fixture(scope="module")
def searched():
    return pool_search(MODEL_ID, GPUS, INPUT, OUTPUT, MAX_GPUS)


@pytest.fixture
def empty_memo(monkeypatch):
    monkeypatch.setattr(ds, "_ANSWERS", type(ds._ANSWERS)())
    return ds._ANSWERS


def _nudged(results, gpu_index: int, table: str, column: str):
    """A deep copy of ``results`` with the first value of one column moved up by one ulp."""
    out = copy.deepcopy(results)
    arr = getattr(out[gpu_index], table)[column]
    arr[0] = np.nextafter(arr[0], np.inf)
    return out


def test_the_digest_separates_what_candidates_reads(searched):
    gpus, results = searched
    base = ds.inputs_digest(results, gpus, OUTPUT, "same-vendor")
    # equal arguments built apart: one key (a hit for a twin model's search)
    assert ds.inputs_digest(copy.deepcopy(results), copy.deepcopy(gpus), OUTPUT, "same-vendor") == base
    share = copy.deepcopy(results)
    cfg = next(iter(share[0].kv_share))
    share[0].kv_share[cfg] = float(np.nextafter(share[0].kv_share[cfg], np.inf))
    slower = [replace(gpus[0], scale_out=replace(gpus[0].scale_out, value=gpus[0].scale_out.value / 2)), gpus[1]]
    keys = [base,
            ds.inputs_digest(_nudged(results, 0, "points", "tpot_s"), gpus, OUTPUT, "same-vendor"),
            ds.inputs_digest(_nudged(results, 1, "prefill", "ttft_s"), gpus, OUTPUT, "same-vendor"),
            ds.inputs_digest(share, gpus, OUTPUT, "same-vendor"),
            ds.inputs_digest(results, slower, OUTPUT, "same-vendor"),
            ds.inputs_digest(results, gpus, OUTPUT + 1, "same-vendor"),
            ds.inputs_digest(results, gpus, OUTPUT, "all")]
    assert len(set(keys)) == len(keys)


def _same(a, b) -> None:
    """Two answers' searches equal field for field (arrays element for element, dtypes too)."""
    assert a.keys() == b.keys()
    for gpu in a:
        x, y = a[gpu], b[gpu]
        assert (x.gpu, x.configs, x.pool_configs, x.rejected, x.price, x.kv_share) == \
               (y.gpu, y.configs, y.pool_configs, y.rejected, y.price, y.kv_share)
        for name in ("points", "prefill"):
            p, q = getattr(x, name), getattr(y, name)
            assert p.keys() == q.keys()
            for k in p:
                assert p[k].dtype == q[k].dtype and np.array_equal(p[k], q[k])


def test_consistency_a_twins_search_takes_the_remembered_picks(searched, empty_memo, monkeypatch):
    gpus, results = searched
    runs = []
    picks = ds._picks

    def counted(*args):
        runs.append(1)
        return picks(*args)
    monkeypatch.setattr(ds, "_picks", counted)
    ds.candidates(results, gpus, OUTPUT)
    twin = copy.deepcopy(results)                 # another model's search, the very same points
    second = ds.candidates(twin, gpus, OUTPUT)
    assert len(runs) == 1 and len(empty_memo) == 1     # the twin's picks came from the memo
    # cut out of the twin's own searches, not the first's
    assert all(second[1][r.gpu].configs is r.configs for r in twin)
    empty_memo.clear()
    fresh = ds.candidates(twin, gpus, OUTPUT)
    assert len(runs) == 2
    _same(second[0], fresh[0])
    _same(second[1], fresh[1])
    # the answer keeps some points (the comparison is not of empty tables)
    assert sum(len(s.prefill.get("batch", ())) for s in fresh[0].values()) > 0
    assert sum(len(s.points.get("batch", ())) for s in fresh[1].values()) > 0


def test_the_memo_keeps_the_latest_answers(searched, empty_memo, monkeypatch):
    gpus, results = searched
    monkeypatch.setattr(ds, "MEMO_ENTRIES", 2)
    for out in (OUTPUT, OUTPUT + 1, OUTPUT + 2):
        ds.candidates(results, gpus, out)
    assert list(empty_memo) == [ds.inputs_digest(results, gpus, out, "same-vendor") for out in (OUTPUT + 1, OUTPUT + 2)]
