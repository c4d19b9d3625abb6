"""The rule the Pareto fronts serve by, as the results tables and the pages read it.

Layer: engine.serving (polars only, and only inside :func:`steady_rate`: ``archledger plan`` reads
:data:`FRONT_BASIS` without importing it; a render worker imports this module without the engine's
evaluation, site_builder/render.py ``_worker_start``). Every front (deployments' ``on_front``, fronts.parquet,
the deploy and sizing pages' charts, ``archledger plan``) is on the schedule estimate in the
steady state of continuous batching (engine.deploy.sol.steady_fit decides what is served; the
search's points and the grid's ``fits_steady`` are its output): :data:`FRONT_BASIS` says so in one
sentence, and :func:`steady_rate` is the steady throughput from a deployments table's stored
columns (the division ``archledger deploy`` prints as ``tokens_per_s_per_gpu_steady``), as
:func:`worst_rate` is the worst case's (``tokens_per_s_per_gpu``): :func:`decode_rate`, one rule.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

#: Which time and which capacity every Pareto front uses (fronts.parquet, deployments' ``on_front``,
#: the deploy and sizing pages' charts, ``archledger plan``), in one sentence.
FRONT_BASIS = ("Fronts use the schedule estimate (not the lower bound) in the steady state of continuous "
               "batching: TPOT is the decode step at the output's mean context (tpot_mean_s) and a batch is "
               "served up to the steady-state capacity (max_concurrent_requests_steady: each request's mean "
               "paged KV plus the admission headroom), not the worst case of every request at its last token "
               "(tpot_s, max_concurrent_requests).")


def decode_rate(tpot: str) -> pl.Expr:
    """Decode tokens/s per GPU from a deployments table's stored columns: batch / ``tpot`` /
    n_gpus, in float64 from the stored float32 time (docs/results.md "Precision"): the one rule of
    the rates deployments.parquet does not store (engine.batch.schema UNSTORED)."""
    import polars as pl
    return pl.col("batch") / pl.col(tpot).cast(pl.Float64) / pl.col("n_gpus")


def steady_rate() -> pl.Expr:
    """``tokens_per_s_per_gpu_steady``: batch / tpot_mean_s / n_gpus (:func:`decode_rate`), what
    the fronts and the GPU comparison read."""
    return decode_rate("tpot_mean_s")


def worst_rate() -> pl.Expr:
    """``tokens_per_s_per_gpu``, the worst case's: batch / tpot_s / n_gpus (:func:`decode_rate`;
    ``archledger deploy`` prints it, the table does not store it)."""
    return decode_rate("tpot_s")


# The fields of one front point as the pages draw it (the deploy page's throughput/interactivity
# chart, static/js/deploy_eval.js ``fronts`` gives the same at any length), from the stored columns:
# (field, expression). ``tpot_s`` is the steady TPOT (tpot_mean_s), ``tpot_last_s`` the worst case
# beside it; the capacities likewise.
def front_point() -> tuple[tuple[str, pl.Expr], ...]:
    """(field, expression) per field of one front point (built on call: polars is imported only here)."""
    import polars as pl
    return (
        ("gpu", pl.col("gpu")), ("n_gpus", pl.col("n_gpus")), ("config", pl.col("config")), ("batch", pl.col("batch")),
        ("ttft_s", pl.col("ttft_s")), ("tpot_s", pl.col("tpot_mean_s")), ("tpot_last_s", pl.col("tpot_s")),
        ("tokens_per_s_per_gpu", steady_rate()), ("tokens_per_s_per_user", 1 / pl.col("tpot_mean_s").cast(pl.Float64)),
        ("max_concurrent_requests", pl.col("max_concurrent_requests_steady")),
        ("max_concurrent_requests_worst", pl.col("max_concurrent_requests")))


#: The columns :func:`front_points` reads from a deployments table.
FRONT_SOURCE = ("gpu", "n_gpus", "config", "batch", "framework", "kv_dtype", "input_len", "output_len", "phase",
                "on_front", "ttft_s", "tpot_mean_s", "tpot_s", "max_concurrent_requests_steady",
                "max_concurrent_requests")


def front_points(deployments: pl.LazyFrame | pl.DataFrame) -> dict[tuple[str, str, int, int], dict]:
    """Each grid front as the pages draw it, precomputed: per (framework, KV dtype, prompt, output)
    of the decode rows, the rows flagged ``on_front`` (engine.serving.fronts.grid_front: each GPU
    type's Pareto front on :data:`FRONT_BASIS`) as ``{"columns": [...], "rows": [[...], ...]}`` with
    the fields of :func:`front_point`, by GPU name then fastest user first (the front's order).
    Every (framework, KV dtype, prompt, output) the grid evaluated has an entry, empty when no GPU
    serves a request there. Nothing is evaluated here: a selection and a division of stored columns
    (:func:`front_tables`, row by row)."""
    return {key: {"columns": table.columns, "rows": [list(r) for r in table.iter_rows()]}
            for key, table in front_tables(deployments).items()}


def front_tables(deployments: pl.LazyFrame | pl.DataFrame) -> dict[tuple[str, str, int, int], pl.DataFrame]:
    """:func:`front_points` as one frame per (framework, KV dtype, prompt, output): its columns the
    fields of :func:`front_point` in that order, its rows the front's points in the front's order
    (no rows where no GPU serves a request); for a reader that wants the points column by column
    (the deploy page's front files: site_builder.data.front_files)."""
    import polars as pl
    fields = front_point()
    table = deployments.lazy().select(FRONT_SOURCE).filter(pl.col("phase") == "decode")
    key = ["framework", "kv_dtype", "input_len", "output_len"]
    keys = table.select(key).unique().collect()
    points = (table.filter(pl.col("on_front"))
              .select(*key, *(expr.alias(name) for name, expr in fields))
              .sort(*key, "gpu", "tokens_per_s_per_user", "tokens_per_s_per_gpu", descending=[False] * 5 + [True, False])
              .collect())
    # a stored float32 time goes to the page as the shortest decimal that reads back as that float32
    # (polars' text of a Float32), not the 17 digits of its float64 expansion; the rates above are
    # float64 divisions of the stored values (docs/results.md "Precision")
    points = points.with_columns(pl.col(pl.Float32).cast(pl.String).cast(pl.Float64))
    names = [name for name, _ in fields]
    none = points.select(names).clear()
    out = {tuple(k): none for k in keys.sort(key).iter_rows()}
    for group, rows in points.group_by(key, maintain_order=True):
        out[tuple(group)] = rows.select(names)
    return out
