"""engine/serving/disagg_sizing.py's memo key, tenth pass (issue 42): :func:`inputs_digest` encodes what
:func:`_picks` reads of :func:`candidates`' arguments (:data:`READ_COLUMNS` of each search, its configs,
pool configs and KV shares, the GPUs, output length and pair policy), hashing the arrays from their
buffers instead of pickling the searches whole.

- the key still separates a change of every input it covers: one ulp of each float column read,
  one more of each integer column read, a KV share, a GPU's link, the output length, the policy;
- the encoding is injective where a naive one would not be: the same raw bytes split differently
  between two columns (so the same concatenation) give two keys (each array's shape is in the key);
- consistency (the key may leave out only what ``_picks`` never reads): a search whose *unread*
  columns (the decode points' TTFT, worst-case TPOT, replicas ...) differ has the same key, and
  ``_picks`` answers the same for it, bit for bit; and ``candidates`` for such a twin, taken from
  the memo, equals a fresh evaluation field for field, its columns cut out of its own search;
- an array of Python objects (its buffer holds pointers) is keyed by its pickle, by value; a
  structured dtype by the dtype itself (two of them share the short name ``|V8``).
"""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

import engine.serving.disagg_sizing as ds
from engine.serving.sizing import GPUSearch
# the memo tests' search (Qwen3-30B-A3B on H100 and B200) and empty memo, and their field-by-field comparison
from tests.test_candidates_memo import OUTPUT, _same, empty_memo, searched  # noqa: F401 (fixtures)


def _changed(results, table: str, column: str):
    """A deep copy of ``results`` with the first value of one column of the first search moved: one
    ulp up for floats, one up for integers."""
    out = copy.deepcopy(results)
    arr = getattr(out[0], table)[column]
    arr[0] = np.nextafter(arr[0], np.inf) if arr.dtype.kind == "f" else arr[0] + 1
    return out


def _key(results, gpus, output_len=OUTPUT, pairs="same-vendor") -> bytes:
    return ds.inputs_digest(results, gpus, output_len, pairs)


def test_the_key_separates_every_input_it_covers(searched):
    gpus, results = searched
    base = _key(results, gpus)
    assert _key(copy.deepcopy(results), copy.deepcopy(gpus)) == base          # equal inputs built apart
    keys = [base] + [_key(_changed(results, table, column), gpus)
                     for table, columns in ds.READ_COLUMNS.items() for column in columns]
    share = copy.deepcopy(results)
    cfg = next(iter(share[0].kv_share))
    share[0].kv_share[cfg] = float(np.nextafter(share[0].kv_share[cfg], np.inf))
    slower = [replace(gpus[0], scale_out=replace(gpus[0].scale_out, value=gpus[0].scale_out.value / 2)), gpus[1]]
    keys += [_key(share, gpus), _key(results, slower), _key(results, gpus, OUTPUT + 1),
             _key(results, gpus, pairs="all"), _key(results[::-1], gpus[::-1])]
    assert len(set(keys)) == len(keys)


def _bare(points: dict) -> GPUSearch:
    return GPUSearch("H100", points={k: np.asarray(v) for k, v in points.items()})


def test_the_encoding_keeps_each_columns_bytes_apart(searched):
    """Hand-made: (config [0, 1], batch [7]) and (config [0], batch [1, 7]) concatenate to the same
    int64 bytes 0, 1, 7; the shapes in the key keep them apart (a key of the raw bytes alone would not)."""
    gpus, _ = searched
    tail = {"tpot_s": [0.01], "n_gpus": [1]}
    a = _bare({"config": [0, 1], "batch": [7], **tail})
    b = _bare({"config": [0], "batch": [1, 7], **tail})
    assert np.concatenate([a.points["config"], a.points["batch"]]).tobytes() == \
        np.concatenate([b.points["config"], b.points["batch"]]).tobytes()
    assert _key([a], gpus) != _key([b], gpus)


def test_an_object_array_is_keyed_by_value(searched):
    gpus, _ = searched
    tail = {"batch": [1], "tpot_s": [0.01], "n_gpus": [1]}
    one, same, other = (_bare({"config": _objects((1, n)), **tail}) for n in (2, 2, 3))
    assert _key([one], gpus) == _key([same], gpus) != _key([other], gpus)


def test_a_dtype_is_keyed_whole_not_by_its_short_name(searched):
    """Hand-made: the same 8 bytes as one float64 field or as two float32 fields: both dtypes are
    named ``|V8``; the key tells them apart."""
    gpus, _ = searched
    tail = {"batch": [1], "tpot_s": [0.01], "n_gpus": [1]}
    wide = np.zeros(1, dtype=[("a", "<f8")])
    split = wide.view([("a", "<f4"), ("b", "<f4")])
    assert wide.dtype.str == split.dtype.str and wide.tobytes() == split.tobytes()
    assert _key([_bare({"config": wide, **tail})], gpus) != _key([_bare({"config": split, **tail})], gpus)


def _objects(value) -> np.ndarray:
    """A one-element array of Python objects holding ``value`` (a new tuple object each call)."""
    out = np.empty(1, dtype=object)
    out[0] = tuple(value)
    return out


def _unread_changed(results):
    """A deep copy of ``results`` whose every decode column outside READ_COLUMNS is moved (one ulp or
    one up), in every search: what a twin model's search may differ in and still share the answer."""
    out = copy.deepcopy(results)
    moved = 0
    for r in out:
        for name, arr in r.points.items():
            if name in ds.READ_COLUMNS["points"] or not len(arr):
                continue
            if arr.dtype.kind == "f":
                r.points[name] = np.nextafter(arr, np.inf)
            elif arr.dtype.kind in "iu":
                r.points[name] = arr + 1
            else:
                r.points[name] = ~arr
            moved += 1
    assert moved >= 6          # ttft_s, tpot_last_s, tokens_per_s_per_gpu, replicas, ... all moved
    return out


def test_consistency_unread_columns_change_neither_the_key_nor_the_picks(searched):
    gpus, results = searched
    twin = _unread_changed(results)
    assert _key(twin, gpus) == _key(results, gpus)
    recs = {r.gpu: ds.all_records(r) for r in results}
    twin_recs = {r.gpu: ds.all_records(r) for r in twin}
    mine = ds._picks(results, gpus, OUTPUT, "same-vendor", recs)
    theirs = ds._picks(twin, gpus, OUTPUT, "same-vendor", twin_recs)
    assert mine[0] == theirs[0]
    assert mine[0] and any(mine[0].values())                 # some prefill record is picked
    assert mine[1].keys() == theirs[1].keys()
    for gpu in mine[1]:
        assert mine[1][gpu].dtype == theirs[1][gpu].dtype and np.array_equal(mine[1][gpu], theirs[1][gpu])
    assert sum(len(h) for h in mine[1].values()) > 0          # some decode point is held


def test_consistency_a_twin_with_other_unread_columns_takes_the_memo(searched, empty_memo, monkeypatch):
    gpus, results = searched
    first = ds.candidates(results, gpus, OUTPUT)
    twin = _unread_changed(results)
    pairing = ds._picks

    def refused(*args):
        raise AssertionError("the twin's picks are in the memo: the pairing must not run again")
    monkeypatch.setattr(ds, "_picks", refused)
    remembered = ds.candidates(twin, gpus, OUTPUT)
    assert len(empty_memo) == 1
    # its own columns (the moved ones), cut out of its own search
    some = next(g for g in remembered[1] if remembered[1][g].points)
    own = next(r for r in twin if r.gpu == some)
    held = remembered[1][some].points
    assert np.all(np.isin(held["ttft_s"], own.points["ttft_s"]))
    assert not np.array_equal(held["ttft_s"], first[1][some].points["ttft_s"])
    monkeypatch.setattr(ds, "_picks", pairing)
    empty_memo.clear()
    fresh = ds.candidates(twin, gpus, OUTPUT)
    _same(remembered[0], fresh[0])
    _same(remembered[1], fresh[1])
