"""The published Parquet reads back as the evaluated table (issue 42: writer settings cut bytes, never data).

The build sorts the rows (``PARTITION_ORDER``), writes zstd, leaves a decode row's step columns null
where they repeat its TPOT (``DECODE_COPIES``) and adds ``on_front``. Whatever the writer's settings,
an analyst's reading gives back every value the evaluation produced: here one model is built over the
tiny grid (``build_model``, the build's own writer) and, independently, its grid is evaluated in
memory (``grid_eval.evaluate_model``); the files read back, copies restored by the documented
``pl.coalesce``, equal the evaluated columns row for row, bit for bit (floats compared exactly, each
column in the dtype docs/results.md gives it; a time column is the float32 rounding of the evaluated
float64, engine.batch.schema.stored_time, docs/results.md "Precision"). A consistency test: both
sides are the engine's.
"""
from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import REPO

TINY = REPO / "tests" / "data" / "grid_tiny.yaml"
MODEL = "Qwen/Qwen3-0.6B"
#: A total order of a deployments row, written out here (not the build's PARTITION_ORDER): both sides
#: are sorted by it, stably, so ops keep their step order.
KEY = ["gpu", "n_gpus", "config", "phase", "framework", "kv_dtype", "input_len", "output_len", "batch"]


@pytest.fixture(scope="module")
def built(tmp_path_factory, evaluation):
    from engine.batch import grid_eval
    from engine.batch.model_build import build_model, slug
    staging = tmp_path_factory.mktemp("roundtrip")
    ev = evaluation(MODEL)
    build_model(None, MODEL, str(TINY), None, str(staging), "test", corpus=ev.corpus, part="grid")
    deployments, ops, _ = grid_eval.evaluate_model(ev, str(TINY), None)
    name = slug(MODEL)
    read = {t: pl.read_parquet(staging / t / f"model={name}" / "part.parquet", hive_partitioning=False)
            for t in ("deployments", "ops")}
    return read, {"deployments": deployments, "ops": ops}


def _evaluated(columns: dict, schema: dict) -> pl.DataFrame:
    """The evaluated columns as the table stores them: each time rounded by the one function."""
    from engine.batch.schema import stored_times
    stored = stored_times(columns, schema)
    return pl.DataFrame({k: pl.Series(k, v, dtype=schema[k][0]) if k in schema else v for k, v in stored.items()},
                        strict=False).sort(KEY, maintain_order=True)


#: The time columns docs/results.md "Precision" names, written out here: float32 in the files.
TIMES = {"deployments": ["ttft_s", "tpot_s", "tpot_mean_s", "ttft_bound_s", "tpot_bound_s", "tpot_mean_bound_s",
                         "ttft_expected_s", "tpot_expected_s", "tpot_mean_expected_s", "step_time_s", "step_bound_s",
                         "step_expected_s", "compute_time_s", "memory_time_s", "comm_time_s"],
         "ops": ["t_compute_s", "t_memory_s", "t_comm_s", "t_expected_s"]}


def test_deployments_read_back_equal_the_evaluation(built):
    from engine.batch.results import DECODE_COPIES, DEPLOYMENTS_SCHEMA, DERIVED
    read, evaluated = built
    frame = read["deployments"]
    # a decode row's step is its TPOT: the reader's coalesce (docs/results.md) gives it back
    frame = frame.with_columns(pl.coalesce(name, original).alias(name) for name, original in DECODE_COPIES.items())
    expected = _evaluated(evaluated["deployments"], DEPLOYMENTS_SCHEMA)
    got = frame.sort(KEY, maintain_order=True)
    assert got.height == expected.height > 0
    # every stored column (the schema's, but the one derived from the table: on_front) is the
    # evaluation's; the evaluation's others (UNSTORED divisions) are not published
    assert set(got.columns) == set(DEPLOYMENTS_SCHEMA) and set(got.columns) - set(DERIVED) <= set(expected.columns)
    for name in set(got.columns) - set(DERIVED):
        assert got[name].dtype == DEPLOYMENTS_SCHEMA[name][0], name
        assert got[name].to_list() == expected[name].to_list(), name       # exact: floats bit for bit
    # the times are float32, the worst case's rate (batch / tpot_s / n_gpus) is not stored
    assert {n for n in got.columns if got[n].dtype == pl.Float32} == set(TIMES["deployments"])
    assert "tokens_per_s_per_gpu" not in got.columns and "tokens_per_s_per_gpu" in evaluated["deployments"]
    # a stored lower bound is never above the engine's float64 bound, on every row
    raw = pl.DataFrame({k: evaluated["deployments"][k] for k in KEY + ["ttft_bound_s", "tpot_bound_s"]},
                       strict=False).sort(KEY, maintain_order=True)
    for name in ("ttft_bound_s", "tpot_bound_s"):
        assert (got[name].cast(pl.Float64) <= raw[name]).all() and (got[name].cast(pl.Float64) < raw[name]).any(), name


def test_on_front_is_reproduced_from_the_download(built):
    """An analyst's on_front from the file's own values (the documented rule, engine.serving.fronts.
    grid_front, on the rows as read) is the stored one: it was computed from the stored float32 times."""
    from engine.serving.fronts import grid_front
    frame = built[0]["deployments"]
    assert frame["on_front"].sum() > 0
    assert grid_front(frame.drop("on_front")).to_list() == frame["on_front"].to_list()


def test_ops_read_back_equal_the_evaluation(built):
    from engine.batch.results import OPS_SCHEMA
    read, evaluated = built
    expected = _evaluated(evaluated["ops"], OPS_SCHEMA)
    got = read["ops"].sort(KEY, maintain_order=True)
    assert got.height == expected.height > 0
    # every stored column is the evaluation's (its SOL time and intensity, divisions and maxima of
    # these, are not stored: docs/results.md)
    assert set(got.columns) == set(OPS_SCHEMA) and set(got.columns) <= set(expected.columns)
    for name in got.columns:
        assert got[name].dtype == OPS_SCHEMA[name][0], name
        assert got[name].to_list() == expected[name].to_list(), name
    assert {n for n in got.columns if got[n].dtype == pl.Float32} == set(TIMES["ops"])
