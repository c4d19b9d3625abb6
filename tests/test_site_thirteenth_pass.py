"""The site render, thirteenth pass (docs/scaling-2.md): the config twins confirmed in the rows' own order.

* ``site_builder.twins.same_rows`` first matches each candidate config's rows with its set's first
  config's in the order the rows come (``_same_in_order``), and sorts on every compared column
  (``_same_sorted``, the old check) only for the sets that pass cannot confirm. By hand: rows in
  the same order are confirmed without the sort; rows in another order are not confirmed by the
  first pass but are by the second; a differing value, a missing row or a number against a missing
  value is refused by both.
* Consistency check on real inputs (a small build's own deployment rows): ``same_rows`` says what
  the sorted check alone says for every candidate set, ``twins`` finds the same sets either way,
  and the first pass confirms every set the sorted check does (the build writes every config's
  rows in one point order: the measured reason the pass pays).
"""
from __future__ import annotations

import polars as pl
import pytest

from site_builder import twins
from tests.site_helpers import shared_small_site

H100 = {"gpu": "H100", "framework": "vllm", "kv_dtype": "bf16"}


def _rows(config: str, n_gpus: int, ttft: list[float | None]) -> list[dict]:
    """One config's prefill rows at batches 1, 8, ... with these TTFTs, every other compared value 1.0."""
    base = {**H100, "n_gpus": n_gpus, "config": config, "tp": n_gpus, "ep": 1, "dp_attn": 1, "pp": 1, "cp": 1,
            "phase": "prefill", "input_len": 1024, "output_len": 128, **{c: 1.0 for c in twins.COMPARED}}
    return [{**base, "batch": b, "ttft_s": t} for b, t in zip((1, 8, 64), ttft)]


def _frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows).select([*twins.GROUP, "config", *twins.DEGREES, *twins.POINT, *twins.COMPARED])


def _sets() -> list[tuple[dict, list[str]]]:
    eight, four = {**H100, "n_gpus": 8}, {**H100, "n_gpus": 4}
    return [(eight, ["a", "same"]), (eight, ["a", "reversed"]), (eight, ["a", "off"]), (eight, ["a", "short"]),
            (four, ["b", "b_none"]), (four, ["b", "b_zero"]), (eight, ["a", "same", "reversed"])]


@pytest.fixture
def frame() -> pl.DataFrame:
    """By hand: ``same`` is ``a`` row for row; ``reversed`` holds ``a``'s rows last to first; ``off``
    differs at batch 64; ``short`` lacks ``a``'s last row; on 4 GPUs ``b`` and ``b_none`` have a
    missing TTFT at batch 8, ``b_zero`` a 0.0 there."""
    return _frame(_rows("a", 8, [0.1, 0.4, 0.9]) + _rows("same", 8, [0.1, 0.4, 0.9])
                  + _rows("reversed", 8, [0.1, 0.4, 0.9])[::-1] + _rows("off", 8, [0.1, 0.4, 0.8])
                  + _rows("short", 8, [0.1, 0.4]) + _rows("b", 4, [0.2, None, 0.7])
                  + _rows("b_none", 4, [0.2, None, 0.7]) + _rows("b_zero", 4, [0.2, 0.0, 0.7]))


def test_the_first_pass_confirms_rows_in_the_same_order_only(frame):
    """``_same_in_order`` says True only where the rows match one by one as they come: not for the
    reversed rows (the same multiset in another order), never for differing or missing rows."""
    assert twins._same_in_order(frame, _sets()) == [True, False, False, False, True, False, False]


def test_the_sorted_check_decides_what_the_first_pass_leaves(frame):
    """``same_rows``: the reversed rows are the same rows (the sorted check, by hand), a differing
    value, a missing row and a number against a missing value are not; the sorted check alone says
    the same for every set."""
    expected = [True, True, False, False, True, False, True]
    assert twins.same_rows(frame, _sets()) == expected
    assert twins._same_sorted(frame, _sets()) == expected


def test_twins_by_hand_through_both_passes(frame):
    """``twins`` over the hand rows: ``a``, ``same`` and ``reversed`` are one set (their fingerprints
    are equal and the rows are), ``b`` and ``b_none`` another; ``off``, ``short`` and ``b_zero`` are in none."""
    found = twins.twins(frame)
    assert [(t["n_gpus"], t["configs"]) for t in found] == [(4, ["b", "b_none"]), (8, ["a", "reversed", "same"])]


#: A MoE model on two H100s with EP 1 and 2: tp2 and tp2ep2 are twins (EP inside TP, dp_attn 1).
EP_GRID = {
    "doc": "Tiny grid for tests/test_site_thirteenth_pass.py: twins from EP inside TP.",
    "gpus": ["H100"], "gpu_counts": [2], "beyond_fit": 2,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1, 2], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024], "beyond_max_context": 1, "output_lengths": [256], "batches": [1, 8]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 1024, "output": 256}]},
}


@pytest.fixture(scope="module")
def small_site(tmp_path_factory):
    return shared_small_site(tmp_path_factory, EP_GRID, ["Mixtral-8x7B-v0.1"])


def _candidate_sets(rows: pl.DataFrame) -> list[tuple[dict, list[str]]]:
    """Every (GPU, GPU count, framework, KV dtype) with two configs or more, all its configs as one
    candidate set (more than the fingerprints hand over: sets that are not twins are checked too)."""
    configs = rows.select(*twins.GROUP, "config").unique().sort([*twins.GROUP, "config"])
    out: dict[tuple, list[str]] = {}
    for row in configs.iter_rows():
        out.setdefault(row[:len(twins.GROUP)], []).append(row[-1])
    return [(dict(zip(twins.GROUP, key)), names) for key, names in out.items() if len(names) >= 2] + \
        [(dict(zip(twins.GROUP, key)), [names[0], names[i]]) for key, names in out.items() for i in range(1, len(names))]


def test_on_the_builds_rows_the_two_passes_agree_with_the_sorted_check(small_site):
    """The consistency check on real inputs: each model's deployment rows as the build wrote them;
    every candidate set (each group's configs together and each pair with its first) is decided
    by ``same_rows`` as by the sorted check alone, ``twins`` finds the same sets with the sorted
    check in place of ``same_rows``, and every set the sorted check confirms the first pass confirms."""
    parts = sorted((small_site / "results" / "deployments").glob("model=*/part.parquet"))
    assert parts
    confirmed = 0
    for part in parts:
        model_id = pl.read_parquet(part, columns=["model_id"])["model_id"][0]
        rows = twins.read_rows(part, model_id)
        sets = _candidate_sets(rows)
        sorted_only = twins._same_sorted(rows, sets)
        assert twins.same_rows(rows, sets) == sorted_only
        in_order = twins._same_in_order(rows, sets)
        assert all(a for a, b in zip(in_order, sorted_only) if b)
        confirmed += sum(sorted_only)
        found = twins.twins(rows)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(twins, "same_rows", twins._same_sorted)
            assert twins.twins(rows) == found
    assert confirmed        # the small build has twins to confirm (else the check above checks nothing)
