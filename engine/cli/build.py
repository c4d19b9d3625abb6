"""``archledger build``: every verified spec over the grid -> OUT/results/ (and, from site_builder, OUT/site/).

Layer: engine.cli (the command's options; the work is :func:`engine.batch.results.run`).
"""
from __future__ import annotations

import argparse


def add_parser(sub, parents: list) -> argparse.ArgumentParser:
    build = sub.add_parser(
        "build", parents=parents, help="evaluate every spec over the grid; write results/ and the site",
        description="Evaluate every verified spec over the grid and publish OUT/results/ (Parquet) and "
                    "OUT/site/ together. A model whose inputs did not change is carried over. "
                    "--models or --grid build a subset: models not named keep their previous results "
                    "(nothing is discarded); a grid other than the one the previous results were "
                    "built with needs another --out.")
    build.add_argument("--models", nargs="*", metavar="MODEL", help="limit to these models (HF ids or unique suffixes)")
    build.add_argument("--grid", default=None, metavar="FILE", help="grid YAML (default: grid.yaml of the corpus)")
    build.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per CPU, at most 4 and one per 1.2 GB of available memory)")
    build.add_argument("--executor", default=None, metavar="WHERE",
                       help="where models are evaluated: local (default: this process or --jobs processes), "
                            "local-cluster[:N] (a Dask LocalCluster), or a Dask scheduler: dask://HOST:PORT, "
                            "tcp://HOST:PORT (needs the scale extra: pip install -e '.[scale]'); docs/scaling.md")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.add_argument("--no-site", action="store_true", help="write results/ only, leave the site as it is")
    build.add_argument("--strict", action="store_true",
                       help="fail (exit 2, nothing published) when a spec fails its verification guards, "
                            "instead of skipping it: what CI and the deploy run, so a broken spec cannot "
                            "silently drop its model from the site")
    build.set_defaults(func=run)
    return build


def run(args: argparse.Namespace) -> int:
    import time
    from engine.batch import uptodate
    if uptodate.answer(args, None, time.perf_counter()):     # nothing to do: answered before the build's imports
        return 0
    from engine.batch.results import run as build_run
    return build_run(args)
