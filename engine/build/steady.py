"""The rule the Pareto fronts serve by, as the results tables and the pages read it.

Layer: engine.build (polars only, and only inside :func:`steady_rate`: ``archledger plan`` reads
:data:`FRONT_BASIS` without importing it; a render worker imports this module without the engine's
evaluation, site_builder/render.py ``_worker_start``). Every front (deployments' ``on_front``, fronts.parquet,
the deploy and sizing pages' charts, ``archledger plan``) is on the schedule estimate in the
steady state of continuous batching (engine.deploy.sol.steady_fit decides what is served; the
search's points and the grid's ``fits_steady`` are its output): :data:`FRONT_BASIS` says so in one
sentence, and :func:`steady_rate` is the steady throughput from a deployments table's stored
columns (the division ``archledger deploy`` prints as ``tokens_per_s_per_gpu_steady``).
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


def steady_rate() -> pl.Expr:
    """``tokens_per_s_per_gpu_steady`` from a deployments table's stored columns: batch /
    tpot_mean_s / n_gpus (engine.build.results UNSTORED), what the fronts and the GPU comparison read."""
    import polars as pl
    return pl.col("batch") / pl.col("tpot_mean_s") / pl.col("n_gpus")
