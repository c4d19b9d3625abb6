"""How the build writes its Parquet files: typed frames from column lists, and the one writer.

Layer: engine.batch. Invariant: a written file reads back equal to the frame, value for value
(tests/test_site_data_size.py's round trip); the partitions' row order and zstd level are the
two settings the downloads' size depends on (benchmarks/downloads.py measures the others).
"""
from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from engine.batch.schema import stored_times


def _frame(columns: dict, schema: dict) -> pl.DataFrame:
    """The typed frame of ``schema`` from evaluated ``columns``; a float32 column's values rounded
    as it stores them (:func:`engine.batch.schema.stored_times`: a lower bound down, never
    polars' cast to the nearest)."""
    columns = stored_times(columns, schema)
    return pl.DataFrame([_series(k, columns[k], v[0]) for k, v in schema.items()])


def _series(name: str, values, dtype) -> pl.Series:
    """One column. A list column (an op's fused ``parts``) is built from its distinct values and
    gathered: polars converts nested Python lists at ~6 s per million rows, and a table of a
    million op rows holds a few hundred distinct ones. So is a column of long texts (a deployment's
    weight formula, about a kilobyte, repeated on every row of its config): polars copies each
    string it converts, ~0.6 s per million rows per kilobyte, and the gathered column shares the
    few distinct ones (the same values: the Parquet bytes are the same)."""
    nested = isinstance(dtype, pl.List)
    if isinstance(values, list) and (nested or (dtype == pl.String and _long_texts(values))):
        distinct: dict = {}
        index = [distinct.setdefault(tuple(v) if nested else v, len(distinct)) for v in values]
        firsts = [list(v) for v in distinct] if nested else list(distinct)
        return pl.Series(name, firsts, dtype=dtype).gather(pl.Series(index, dtype=pl.UInt32))
    return pl.Series(name, values, dtype=dtype)


#: Mean length from which a text column is gathered from its distinct values (:func:`_series`):
#: below it, hashing every value costs more than polars' copy of it (short labels: 2-3x more).
LONG_TEXT = 256


def _long_texts(values: list) -> bool:
    """Whether the first rows of a text column are long texts on average (a cheap sample: the
    choice changes the time :func:`_series` takes, never the values)."""
    head = [v for v in values[:64] if isinstance(v, str)]
    return bool(head) and sum(map(len, head)) >= LONG_TEXT * len(head)


def write_parquet(frame: pl.DataFrame, path: Path, **options) -> None:
    """Write a Parquet file through Python's file API: polars reports a full disk as a ComputeError
    that may not carry the errno ("Invalid thrift: transport error"), this raises OSError(ENOSPC)."""
    buffer = io.BytesIO()
    frame.write_parquet(buffer, **options)
    Path(path).write_bytes(buffer.getbuffer())


#: Row order of a deployments or ops partition (a stable sort: an ops point keeps its ops in step
#: order). Rows of one deployment sit together, so Parquet's dictionary and run-length encodings
#: see long runs; with zstd level :data:`ZSTD_LEVEL` the partitions are about 22% smaller than in
#: evaluation order at polars' default level (DeepSeek-V4-Pro: 1.46 -> 1.14 MB of deployments).
#: ``phase`` comes last: a point's prefill and decode rows sit side by side, and the columns they
#: share (memory, capacity, TTFT, TPOT) repeat within zstd's reach: 1.8% fewer bytes over the
#: 51 models' deployments and ops (75.14 -> 73.75 MB), the decode rows' own order unchanged (so
#: ``on_front``'s tie-break, which reads them in table order, too). Level 12 would save 1.2% more
#: for half again the write time; 15 and above cost 2-6x the time for 1-3% less. The rest is the
#: values themselves: a float64 column costs 5-9 bytes per distinct value, so the time columns are
#: stored as float32 (engine.batch.schema.stored_time; about half the bytes; docs/results.md
#: "Precision") (benchmarks/downloads.py).
#: The site publishes these files as its downloads (hard links), so this is the downloads' size too.
PARTITION_ORDER = ["gpu", "n_gpus", "config", "framework", "kv_dtype", "input_len", "output_len", "batch", "phase"]
ZSTD_LEVEL = 9
#: How a model's grid partitions (deployments, ops) are written: with column statistics (readers
#: prune row groups by them); its serving partitions (fronts, sizing, disagg): :data:`SERVING_OPTIONS`.
#: One place, so a table rewritten with another model's id (engine.batch.twins) is written as evaluated.
GRID_OPTIONS = {"statistics": True, "compression": "zstd", "compression_level": ZSTD_LEVEL}
SERVING_OPTIONS = {"compression": "zstd", "compression_level": ZSTD_LEVEL}
#: A model's Parquet partitions (``<table>/model=<slug>/part.parquet``) and how each is written: the
#: files a build carries for an unchanged model (engine.batch.previous) and an exact twin takes from
#: its leader (engine.batch.twins).
MODEL_PARTITIONS = {"deployments": GRID_OPTIONS, "ops": GRID_OPTIONS, "fronts": SERVING_OPTIONS,
                    "sizing": SERVING_OPTIONS, "disagg": SERVING_OPTIONS}
