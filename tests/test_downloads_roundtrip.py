"""The published Parquet reads back as the evaluated table (issue 42: writer settings cut bytes, never data).

The build sorts the rows (``PARTITION_ORDER``), writes zstd, leaves a decode row's step columns null
where they repeat its TPOT (``DECODE_COPIES``) and adds ``on_front``. Whatever the writer's settings,
an analyst's reading gives back every value the evaluation produced: here one model is built over the
tiny grid (``build_model``, the build's own writer) and, independently, its grid is evaluated in
memory (``grid_eval.evaluate_model``); the files read back, copies restored by the documented
``pl.coalesce``, equal the evaluated columns row for row, bit for bit (floats compared exactly, each
column in the dtype docs/results.md gives it). A consistency test: both sides are the engine's.
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


def _evaluated(columns: dict) -> pl.DataFrame:
    return pl.DataFrame(columns, strict=False).sort(KEY, maintain_order=True)


def test_deployments_read_back_equal_the_evaluation(built):
    from engine.batch.results import DECODE_COPIES, DEPLOYMENTS_SCHEMA, DERIVED
    read, evaluated = built
    frame = read["deployments"]
    # a decode row's step is its TPOT: the reader's coalesce (docs/results.md) gives it back
    frame = frame.with_columns(pl.coalesce(name, original).alias(name) for name, original in DECODE_COPIES.items())
    expected = _evaluated(evaluated["deployments"])
    got = frame.sort(KEY, maintain_order=True)
    assert got.height == expected.height > 0
    # every stored column (the schema's, but the one derived from the table: on_front) is the
    # evaluation's; the evaluation's others (UNSTORED divisions) are not published
    assert set(got.columns) == set(DEPLOYMENTS_SCHEMA) and set(got.columns) - set(DERIVED) <= set(expected.columns)
    for name in set(got.columns) - set(DERIVED):
        assert got[name].dtype == DEPLOYMENTS_SCHEMA[name][0], name
        assert got[name].to_list() == expected[name].to_list(), name       # exact: floats bit for bit


def test_ops_read_back_equal_the_evaluation(built):
    from engine.batch.results import OPS_SCHEMA
    read, evaluated = built
    expected = _evaluated(evaluated["ops"])
    got = read["ops"].sort(KEY, maintain_order=True)
    assert got.height == expected.height > 0
    # every stored column is the evaluation's (its SOL time and intensity, divisions and maxima of
    # these, are not stored: docs/results.md)
    assert set(got.columns) == set(OPS_SCHEMA) and set(got.columns) <= set(expected.columns)
    for name in got.columns:
        assert got[name].dtype == OPS_SCHEMA[name][0], name
        assert got[name].to_list() == expected[name].to_list(), name
