"""How well the decode-attention tables' rule beyond their largest batch predicts the package's own measurements there.

Run from the repo root, with aiconfigurator-core installed as for the import::

    python benchmarks/decode_attention_holdout.py [--site DIR]

The imported decode-attention tables (gpus/measured/<gpu>/<framework>-<version>/decode_attention-*)
stop at batch 128: the package measures larger batches only at short contexts (its collector
bounds batch x context), so a complete grid keeps batch <= 128. Beyond it
engine.deploy.measured.interpolate_many continues the last span's power law (clipped to the
roofline's slope). This benchmark holds out every point the package measured beyond the table's
largest batch (head size 128, full attention, the table's KV heads, query heads per KV head and
context range) and prints, per table, the median of predicted / measured and the mean |log| error.
Evidence independent of any published throughput (a kernel table against its own held-out
points); it prints, asserts nothing, and is never a test dependency.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import import_kernels  # noqa: E402  (the package's location and recipe: one reader of the package)
from engine.deploy.measured import attention_roof, interpolate_many, load_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", help="folder the package was installed into (pip install --target)")
    args = ap.parse_args(argv)
    import polars as pl
    try:
        root, version = import_kernels.package_root(args.site)
    except import_kernels.Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    recipe = import_kernels.RECIPES[version]
    print("| GPU | framework | KV dtype | held-out points | median predicted / measured | mean abs log error |")
    print("|---|---|---|---|---|---|")
    for system, gpu in import_kernels.SYSTEMS.items():
        for framework, fw_version in recipe.frameworks.items():
            for dtype, name in import_kernels.KV_DTYPES.items():
                path = REPO / "gpus" / "measured" / gpu.lower() / f"{framework}-{fw_version}" / \
                    f"decode_attention-{name}_d{import_kernels.ATTENTION_HEAD_DIM}.yaml"
                if not path.is_file():
                    continue
                table = load_table(path, REPO)
                src = root / "systems" / "data" / system / "attention" / framework / fw_version / \
                    "generation_attention_perf.parquet"
                rows = pl.read_parquet(src).filter(
                    (pl.col("kv_cache_dtype") == dtype) & (pl.col("head_dim") == import_kernels.ATTENTION_HEAD_DIM)
                    & (pl.col("window_size") == 0))
                b_max, kv, q, ctx = table.values[0][-1], table.values[1], table.values[2], table.values[3]
                points, measured = [], []
                for b, h, k, step, ms in rows.select(["batch_size", "num_heads", "num_key_value_heads", "step",
                                                      "latency"]).iter_rows():
                    if b > b_max and ms > 0 and h % k == 0 and k in kv and h // k in q and ctx[0] <= step + 1 <= ctx[-1]:
                        points.append((b, k, h // k, step + 1))
                        measured.append(ms * 1e-3)
                if not points:
                    continue
                t, _ = interpolate_many(table, np.array(points, dtype=float), attention_roof("decode_attention"))
                err = np.log(t / np.array(measured))
                print(f"| {gpu} | {framework} {fw_version} | {name} | {len(points)} | {np.exp(np.median(err)):.2f} | "
                      f"{np.mean(np.abs(err)):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
