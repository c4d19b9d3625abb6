"""The site render, thirteenth pass (docs/scaling-2.md): the config twins confirmed in the rows' own
order, and the sizing page's disagg data from one partition of its table.

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
* ``site_builder.data.front_files`` takes each front column by column (``engine.serving.steady.front_tables``,
  of which ``front_points`` is the row-by-row form): on a small build, the transpose of the rows.
* ``site_builder.sizing.disagg_data`` takes each (scenario, GPU type, pool)'s rows from one
  ``partition_by`` of the table instead of a filter per GPU type and pool: by hand, on a table given
  out of order (the same expectations hold for the old code; a GPU type's figures taken from its
  last pool fail them). On the 51 models every sizing page's text was compared with the old code's
  (docs/scaling-2.md); tests/test_site_sizing_disagg.py checks the page on a build.
"""
from __future__ import annotations

import polars as pl
import pytest

from site_builder import twins

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
    """Results only (both tests read results/, no page): the site render's fixed cost is most of a
    small build's."""
    import yaml
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    root = tmp_path_factory.mktemp("ep-results")
    (root / "grid.yaml").write_text(yaml.safe_dump(EP_GRID, sort_keys=False))
    build(load_corpus(), root, ["Mixtral-8x7B-v0.1"], root / "grid.yaml", jobs=1)
    return root


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


def _disagg_row(scenario: tuple, gpu: str, pool: str, rank: int, **extra) -> dict:
    framework, kv_dtype, input_len, output_len = scenario
    return {"framework": framework, "kv_dtype": kv_dtype, "input_len": input_len, "output_len": output_len,
            "gpu": gpu, "pool": pool, "rank": rank, "config": f"tp{rank + 1}", "n_gpus": rank + 1,
            "kv_share_bytes": 10.0 * (rank + 1), "batch": 4 * (rank + 1), "ttft_s": 0.5 / (rank + 1),
            "tpot_s": 0.01 * (rank + 1), "kv_transfer_bytes": extra.get("kv", 7.0),
            "usd_per_gpu_hour": extra.get("price", 2.0), "scale_up_domain": 8, "scale_up_alpha_s": 1e-6,
            "scale_up_bytes_per_s": 4.5e11, "scale_out_alpha_s": 5e-6, "scale_out_bytes_per_s": 5e10,
            "pairs_with": extra.get("pairs", "H100")}


def test_disagg_data_by_hand_from_one_partition():
    """site_builder.sizing.disagg_data over a table given out of order, by hand: scenarios in the
    ``scenarios`` order (one with no rows keeps its empty entry, one of a framework without rows is
    absent), GPU types sorted, each GPU type's price and links from its first row (its decode pool's
    rank 0: "decode" sorts before "prefill"), the scenario's KV bytes from its first GPU type's first
    row, each pool's points in rank order, a pool without rows empty."""
    from site_builder import sizing
    a, b = ("vllm", "bf16", 1024, 128), ("vllm", "bf16", 4096, 128)
    rows = [_disagg_row(a, "H200", "prefill", 1, kv=3.0), _disagg_row(a, "H100", "prefill", 0, kv=5.0, price=3.0),
            _disagg_row(a, "H200", "decode", 0, kv=3.0, price=4.0, pairs="H100,H200"),
            _disagg_row(a, "H100", "decode", 1, kv=9.0), _disagg_row(a, "H200", "prefill", 0, kv=3.0),
            _disagg_row(b, "H100", "decode", 0, kv=6.0)]
    out = sizing.disagg_data(pl.DataFrame(rows), ["sglang/bf16/1024/128", "vllm/bf16/8192/128",
                                                   "vllm/bf16/4096/128", "vllm/bf16/1024/128"])
    assert list(out) == ["vllm/bf16/8192/128", "vllm/bf16/4096/128", "vllm/bf16/1024/128"]
    assert out["vllm/bf16/8192/128"] == {"kv_request": 0.0, "gpus": {}}
    first = out["vllm/bf16/1024/128"]
    assert first["kv_request"] == 9.0                         # H100's decode rank 1 (its only decode row)
    assert list(first["gpus"]) == ["H100", "H200"]
    h100, h200 = first["gpus"]["H100"], first["gpus"]["H200"]
    assert (h100["price"], h200["price"], h200["pairs_with"]) == (2.0, 4.0, ["H100", "H200"])
    assert list(h100) == ["price", "domain", "up", "out", "pairs_with", "prefill", "decode"]
    assert h200["prefill"]["config"] == [0, 1] and [c[0] for c in h200["prefill"]["configs"]] == ["tp1", "tp2"]
    assert h100["prefill"]["ttft"] == [0.5] and h100["decode"]["batch"] == [8]
    only = out["vllm/bf16/4096/128"]["gpus"]["H100"]
    assert only["prefill"] == {"configs": [], "config": [], "batch": [], "ttft": []}
    assert only["decode"]["config"] == [0]


def test_on_the_builds_rows_the_front_files_are_the_front_points_by_column(small_site):
    """Consistency check on real inputs (the small MoE build's deployment rows): each front file's
    ``values`` (site_builder.data.front_files, from engine.serving.steady.front_tables) is the
    transpose of engine.serving.steady.front_points' rows at :data:`site_builder.data.FRONT_FIELDS`,
    value for value and type for type, with the same keys in the same order."""
    from engine.serving.steady import front_points, front_tables
    from site_builder.data import FRONT_FIELDS, Results, front_files
    results = Results.load(small_site / "results")
    for model_id in results.models["model_id"]:
        part = small_site / "results" / "deployments" / f"model={model_id.replace('/', '--')}" / "part.parquet"
        points = front_points(pl.scan_parquet(part))
        files = front_files(results, model_id)
        assert list(files) == list(points) == list(front_tables(pl.scan_parquet(part)))
        assert any(front["rows"] for front in points.values())     # (a front to compare)
        for key, front in points.items():
            where = [front["columns"].index(c) for c in FRONT_FIELDS]
            expected = [[row[i] for row in front["rows"]] for i in where]
            assert files[key] == {"columns": list(FRONT_FIELDS), "values": expected}
            assert [[type(v) for v in col] for col in files[key]["values"]] == [[type(v) for v in col] for col in expected]
