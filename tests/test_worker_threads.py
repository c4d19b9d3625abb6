"""A --jobs worker's polars pool: one thread per worker unless the user set POLARS_MAX_THREADS
(engine.batch.workers.start_worker; docs/scaling.md, eighth pass, grid side)."""
import contextlib
import os

import polars as pl

from engine.batch import tasks, workers


def _pool_size():
    return pl.thread_pool_size(), os.environ.get("POLARS_MAX_THREADS")


def test_a_worker_runs_polars_on_one_thread(monkeypatch):
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    with contextlib.ExitStack() as stack:
        pool = tasks._pool(stack, 2, 2)
        assert pool.submit(_pool_size).result() == (1, "1")
    assert "POLARS_MAX_THREADS" not in os.environ          # the build's own process is left as it was


def test_the_users_setting_wins(monkeypatch):
    monkeypatch.setenv("POLARS_MAX_THREADS", "2")
    with contextlib.ExitStack() as stack:
        pool = tasks._pool(stack, 2, 2)
        assert pool.submit(_pool_size).result() == (2, "2")
    assert workers.WORKER_POLARS_THREADS == "1"
