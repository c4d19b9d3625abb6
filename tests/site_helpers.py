"""Helpers shared by the tests that build a small site: one build over a tiny grid, and its tables."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import polars as pl
import yaml


def build_small_site(root: Path, grid: dict, models: list[str]) -> Path:
    """Build ``models`` over ``grid`` (a grid.yaml mapping) into ``root``: results and site, the way
    ``archledger build`` publishes them (staged, then moved into place)."""
    from engine.build.results import build
    from engine.spec.corpus import load_corpus
    from site_builder.render import render_staged

    path = root / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    build(load_corpus(), root, models, path, jobs=1, site=render_staged)
    return root


def result_tables(out: Path) -> dict[str, pl.DataFrame]:
    """models.parquet and the hive-partitioned deployments, ops, fronts and sizing tables of a build."""
    results = out / "results"

    def scan(table: str) -> pl.DataFrame:
        return pl.scan_parquet(str(results / table / "**" / "*.parquet"), hive_partitioning=True).collect()

    return {"models": pl.read_parquet(results / "models.parquet"),
            **{t: scan(t) for t in ("deployments", "ops", "fronts", "sizing") if (results / t).is_dir()}}


def served(site: Path) -> Iterator[str]:
    """A local server over ``site`` for the length of a fixture: yields its base URL."""
    from site_builder.serve import start

    server, url = start(site)
    yield url
    server.shutdown()
    server.server_close()
