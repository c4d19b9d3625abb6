"""Where the Parquet downloads' bytes go: per table, per column, and how close each column is to its floor.

Run from the repo root after a build: ``python benchmarks/downloads.py [--results build/results] [--top 15]``.
Reads the results' partitions (the site publishes them as its downloads, hard links) and prints
Markdown tables for README / docs/results.md:

* per table (deployments, ops, fronts, sizing, disagg, models): files, rows, bytes;
* per column of the deployments and ops tables (summed over every model's partition, as stored:
  compressed bytes from the Parquet footers): bytes, share, distinct values per partition (summed)
  and bytes per distinct value. A float64 column whose values are the results of divisions and sums
  has about 8 bytes of entropy per distinct value that no lossless codec removes: a column near
  8 B per distinct value is at its floor; one far below it is repetitive and already cheap (the time
  columns are float32, about 4 B at their floor: docs/results.md "Precision");
* the writer settings tried on the largest partitions (codec level, row order, column encodings
  through pyarrow: byte-stream split, dictionary; without the derivable columns; the stored file
  is the reference): what each would save, with its write time (a measurement, not a test);
* the stored columns that are an exact function of other stored columns on every row (bytes an
  analyst could compute back, which only a schema change would drop).

Timings here are measured, never asserted in tests.
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from engine.batch.results import PARTITION_ORDER, ZSTD_LEVEL  # noqa: E402

TABLES = ("deployments", "ops", "fronts", "sizing", "disagg")

#: Stored columns to test for being an exact float64 function of other stored columns, on every row
#: (tokens_per_s_per_gpu = batch / tpot_s / n_gpus was one: no longer stored since schema version 2).
DERIVABLE = {"free_bytes_per_gpu": pl.max_horizontal(pl.lit(0.0), pl.col("kv_budget_bytes_per_gpu") - pl.col("kv_bytes_per_gpu"))}


def mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB"


def partitions(results: Path, table: str) -> list[Path]:
    return sorted((results / table).glob("model=*/part.parquet"))


def column_bytes(path: Path) -> dict[str, int]:
    """Compressed bytes of each column of a Parquet file (every row group), from its footer."""
    meta = pq.ParquetFile(path).metadata
    out: dict[str, int] = defaultdict(int)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(meta.num_columns):
            out[group.column(c).path_in_schema.split(".")[0]] += group.column(c).total_compressed_size
    return out


def _written(frame: pl.DataFrame, **options) -> tuple[int, float]:
    buffer = io.BytesIO()
    start = time.perf_counter()
    frame.write_parquet(buffer, statistics=True, compression="zstd", **options)
    return len(buffer.getbuffer()), time.perf_counter() - start


def _written_arrow(frame: pl.DataFrame, **options) -> tuple[int, float]:
    """Bytes and time of pyarrow's writer with column-encoding ``options``, the file read back and
    checked equal to ``frame`` (an encoding that changed a value would be no candidate)."""
    import pyarrow as pa
    table = frame.to_arrow()
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    chosen = {k: (floats if v == "floats" else [c for c in table.column_names if c not in floats] if v == "not floats" else v)
              for k, v in options.items()}
    buffer = io.BytesIO()
    start = time.perf_counter()
    pq.write_table(table, buffer, compression="zstd", compression_level=ZSTD_LEVEL, **chosen)
    seconds = time.perf_counter() - start
    if not pl.read_parquet(io.BytesIO(buffer.getvalue())).equals(frame):
        raise AssertionError(f"pyarrow {options}: the file read back differs")
    return len(buffer.getbuffer()), seconds


#: Row orders tried beside the published one (benchmarks only): the framework innermost, so the
#: columns that do not depend on it (bounds, FLOPs, bytes) would repeat in neighbouring rows.
FRAMEWORK_INNER = ["gpu", "n_gpus", "config", "kv_dtype", "input_len", "output_len", "batch", "phase", "framework"]
FRAMEWORK_BEFORE_PHASE = ["gpu", "n_gpus", "config", "kv_dtype", "input_len", "output_len", "batch", "framework", "phase"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=REPO / "build" / "results", type=Path)
    parser.add_argument("--top", type=int, default=15, help="columns listed per table")
    parser.add_argument("--trials", type=int, default=4, help="largest partitions the writer settings are tried on")
    args = parser.parse_args(argv)
    results: Path = args.results
    if not (results / "manifest.json").is_file():
        print(f"error: {results}: no results — run `archledger build` first", file=sys.stderr)
        return 2

    print("| table | files | rows | bytes |\n|---|---|---|---|")
    for table in TABLES:
        files = partitions(results, table)
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        print(f"| {table} | {len(files)} | {rows:,} | {mb(sum(f.stat().st_size for f in files))} |")
    models = results / "models.parquet"
    print(f"| models | 1 | {pq.ParquetFile(models).metadata.num_rows:,} | {mb(models.stat().st_size)} |")

    for table in ("deployments", "ops"):
        sizes: dict[str, int] = defaultdict(int)
        distinct: dict[str, int] = defaultdict(int)
        for f in partitions(results, table):
            for name, n in column_bytes(f).items():
                sizes[name] += n
            frame = pl.read_parquet(f, hive_partitioning=False)
            for name in frame.columns:
                if frame[name].dtype in (pl.Float64, pl.Float32):
                    distinct[name] += frame[name].n_unique()
        total = sum(sizes.values())
        print(f"\n{table}: {mb(total)} of column data\n")
        print("| column | bytes | share | distinct values (per partition, summed) | bytes per distinct value |")
        print("|---|---|---|---|---|")
        for name, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:args.top]:
            per = f"{n / distinct[name]:.1f} B" if distinct.get(name) else ""
            print(f"| {name} | {mb(n)} | {n / total:.1%} | {distinct.get(name, '') and f'{distinct[name]:,}'} | {per} |")

    largest = sorted(partitions(results, "deployments"), key=lambda f: -f.stat().st_size)[:args.trials]
    stored = sum(f.stat().st_size for f in largest)
    trials: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    old_order = [k for k in PARTITION_ORDER if k != "phase"]
    old_order.insert(old_order.index("framework"), "phase")       # the order before issue 42's change
    for f in largest:
        frame = pl.read_parquet(f, hive_partitioning=False)
        for label, order, level in ((f"phase before framework, zstd {ZSTD_LEVEL}", old_order, ZSTD_LEVEL),
                                    (f"phase last (published), zstd {ZSTD_LEVEL}", PARTITION_ORDER, ZSTD_LEVEL),
                                    ("phase last, zstd 12", PARTITION_ORDER, 12),
                                    ("phase last, zstd 19", PARTITION_ORDER, 19)):
            n, seconds = _written(frame.sort(order, maintain_order=True), compression_level=level)
            trials[label][0] += n
            trials[label][1] += seconds
        published = frame.sort(PARTITION_ORDER, maintain_order=True)
        for label, order in (("framework innermost (after phase)", FRAMEWORK_INNER),
                             ("framework just before phase", FRAMEWORK_BEFORE_PHASE)):
            n, seconds = _written(frame.sort(order, maintain_order=True), compression_level=ZSTD_LEVEL)
            trials[label][0] += n
            trials[label][1] += seconds
        # column encodings through pyarrow (polars' writer has no per-column encoding option):
        # floats byte-stream split, floats dictionary-encoded, the default; each read back equal
        for label, options in (("pyarrow: floats BYTE_STREAM_SPLIT, no dictionary", {"use_dictionary": "not floats",
                                                                                     "use_byte_stream_split": "floats"}),
                               ("pyarrow: floats PLAIN, no dictionary", {"use_dictionary": "not floats"}),
                               ("pyarrow: every column dictionary-encoded (its default)", {})):
            n, seconds = _written_arrow(published, **options)
            trials[label][0] += n
            trials[label][1] += seconds
        n, seconds = _written(published.drop(*DERIVABLE), compression_level=ZSTD_LEVEL)
        trials["published, without the derivable columns (a schema change)"][0] += n
        trials["published, without the derivable columns (a schema change)"][1] += seconds
    print(f"\nwriter settings on the {len(largest)} largest deployments partitions ({mb(stored)} stored)\n")
    print("| settings | bytes | vs stored | write time |\n|---|---|---|---|")
    for label, (n, seconds) in trials.items():
        print(f"| {label} | {mb(n)} | {n / stored - 1:+.1%} | {seconds:.2f} s |")

    print("\n| stored column | equal on every row? | its bytes |\n|---|---|---|")
    for name, expr in DERIVABLE.items():
        rows = exact = 0
        for f in partitions(results, "deployments"):
            frame = pl.read_parquet(f, hive_partitioning=False, columns=[*expr.meta.root_names(), name])
            rows += frame.height
            exact += frame.select((expr == pl.col(name)).sum()).item()
        spent = sum(column_bytes(f).get(name, 0) for f in partitions(results, "deployments"))
        print(f"| {name} | {exact:,} of {rows:,} rows equal `{expr}` | {mb(spent)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
