"""Parallel configs that the build found identical, and why: the deploy page's note beside them.

Layer: site_builder. Two configs of one model on one GPU type, GPU count, framework and KV dtype are
*twins* when every deployment row the build wrote for them (each phase, batch, prompt and output
length) holds the same :data:`COMPARED` values. The reason is said from the rows' own degrees, never
from a model's name: where the twins differ only in ``ep`` and the expert group is the whole TP group
(ep = tp) with attention not data-parallel (dp_attn = 1), every GPU already holds every token, so
the experts' outputs are combined by an all-reduce over the same GPUs either way and each GPU holds
the same share of the expert weights (split by expert, or within each expert). Other twins are
named as identical, with no reason claimed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

#: The values compared: what a reader sees of a deployment (times, memory, link bytes; the throughput
#: is batch / tpot_s / n_gpus, equal where tpot_s is at a point of one GPU count).
COMPARED = ("fits", "ttft_s", "tpot_s", "weight_bytes_per_gpu", "kv_bytes_per_gpu",
            "free_bytes_per_gpu", "max_concurrent_requests", "step_time_s", "comm_bytes", "bytes", "flops")
POINT = ("phase", "batch", "input_len", "output_len")
GROUP = ("gpu", "n_gpus", "framework", "kv_dtype")
DEGREES = ("tp", "ep", "dp_attn", "pp", "cp")


def read_rows(part: Path | pl.LazyFrame, model_id: str) -> pl.DataFrame:
    """The model's rows with the columns :func:`twins` compares (``part``: its partition file, or
    the whole deployments table)."""
    table = pl.scan_parquet(part) if isinstance(part, Path) else part
    return (table.filter(pl.col("model_id") == model_id)
            .select([*GROUP, "config", *DEGREES, *POINT, *COMPARED]).collect())


def twins(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """Each set of configs identical in every row (:data:`COMPARED` at every :data:`POINT`), per
    (GPU, GPU count, framework, KV dtype): {gpu, n_gpus, framework, kv_dtype, configs, note}."""
    if rows.height == 0:
        return []
    # one fingerprint per config: the sum of its rows' hashes (each row with its point), and the
    # row count; equal fingerprints are then checked row by row
    prints = (rows.group_by([*GROUP, "config"])
              .agg(pl.struct([*POINT, *COMPARED]).hash().sum().alias("h"), pl.len().alias("n"),
                   *[pl.col(d).first() for d in DEGREES])
              .sort([*GROUP, "config"]))
    # grouped in Python: the configs are a few hundred rows, and each polars call on a small frame
    # costs about a millisecond (prints is sorted by config within a group, as the groups keep it)
    groups: dict[tuple, list[dict]] = {}
    for row in prints.iter_rows(named=True):
        groups.setdefault(tuple(row[k] for k in (*GROUP, "h", "n")), []).append(row)
    sets = [(dict(zip(GROUP, key[:len(GROUP)])), configs) for key, configs in groups.items() if len(configs) >= 2]
    same = same_rows(rows, [(where, [c["config"] for c in configs]) for where, configs in sets])
    return [{**where, "configs": [c["config"] for c in configs],
             "note": _reason([{d: c[d] for d in DEGREES} for c in configs], [c["config"] for c in configs])}
            for (where, configs), ok in zip(sets, same) if ok]


def same_rows(rows: pl.DataFrame, sets: list[tuple[dict, list[str]]]) -> list[bool]:
    """For each candidate set (its :data:`GROUP` values, its configs), whether every config of it has
    the same rows as its first: the same multiset of (:data:`POINT`, :data:`COMPARED`) rows, a
    missing value equal to a missing value. Two passes, each one polars pass over the sets' rows:
    :func:`_same_in_order` first (the configs' rows matched in the order the build wrote them),
    then :func:`_same_sorted` for the sets it could not confirm. Exact either way: rows equal one
    by one in some order are the same multiset, and a set the first pass leaves is decided by the
    sorted comparison alone (the first pass can confirm, never refute)."""
    if not sets:
        return []
    same = _same_in_order(rows, sets)
    rest = [i for i, ok in enumerate(same) if not ok]
    for i, ok in zip(rest, _same_sorted(rows, [sets[i] for i in rest])):
        same[i] = ok
    return same


def _members(rows: pl.DataFrame, sets: list[tuple[dict, list[str]]]) -> pl.DataFrame:
    """One row per (set, config): its :data:`GROUP` values, the config, the set's index and the
    set's first config (what each config's rows are compared with)."""
    return pl.DataFrame([{**where, "config": c, "set": i, "first": names[0]}
                         for i, (where, names) in enumerate(sets) for c in names],
                        schema={**{k: rows.schema[k] for k in GROUP}, "config": rows.schema["config"],
                                "set": pl.Int64, "first": rows.schema["config"]})


def _matched(sub: pl.DataFrame, columns: list[str], n: int) -> list[bool]:
    """Per set 0..n-1 of ``sub`` (the sets' rows, each numbered ``at`` within its config), whether every
    config's row ``at`` equals its set's first config's row ``at`` in every column of ``columns``
    (a missing value equal to a missing value) and every config has as many rows."""
    firsts = sub.filter(pl.col("config") == pl.col("first")).select("set", "at", *columns)
    paired = sub.filter(pl.col("config") != pl.col("first")).join(firsts, on=["set", "at"], how="left", suffix="~")
    ok = (paired.group_by("set")
          .agg(pl.all_horizontal([pl.col(c).eq_missing(pl.col(f"{c}~")) for c in columns]).all().alias("ok")))
    # and as many rows each (equal fingerprints count them; a row without a partner fails above)
    counts = sub.group_by("set", "config").len().group_by("set").agg((pl.col("len").n_unique() == 1).alias("n"))
    found = dict(zip(ok["set"].to_list(), ok["ok"].to_list()))
    even = dict(zip(counts["set"].to_list(), counts["n"].to_list()))
    return [found[i] and even[i] for i in range(n)]


def _same_in_order(rows: pl.DataFrame, sets: list[tuple[dict, list[str]]]) -> list[bool]:
    """:func:`_matched` with each config's rows in the order ``rows`` holds them: True where every
    config's rows equal its first's one by one. The build writes a config's rows in the grid's point
    order, the same for every config of a (GPU, GPU count, framework, KV dtype), so twins are
    confirmed here without sorting the rows on their 15 compared columns (measured: every candidate
    set of the 51 models). False says only that the order differs (or the rows do)."""
    return _matched(_numbered(rows, sets, []), [*POINT, *COMPARED], len(sets))


def _same_sorted(rows: pl.DataFrame, sets: list[tuple[dict, list[str]]]) -> list[bool]:
    """:func:`_matched` with each config's rows sorted on every compared column: the same multiset
    whatever order the rows came in (a split per config and a comparison per pair were a polars
    call each, about a millisecond apiece)."""
    if not sets:
        return []
    return _matched(_numbered(rows, sets, [*POINT, *COMPARED]), [*POINT, *COMPARED], len(sets))


def _numbered(rows: pl.DataFrame, sets: list[tuple[dict, list[str]]], order: list[str]) -> pl.DataFrame:
    """The sets' rows with their set, first config and ``at``: each row's place within its config,
    the configs' rows sorted on ``order`` first (none: as ``rows`` holds them, the join keeping
    that order)."""
    sub = rows.select([*GROUP, "config", *POINT, *COMPARED]).join(_members(rows, sets), on=[*GROUP, "config"],
                                                                  maintain_order="left")
    if order:
        sub = sub.sort(["set", "config", *order], nulls_last=True)
    return sub.with_columns(pl.int_range(pl.len()).over(["set", "config"]).alias("at"))


def _reason(degrees: list[dict[str, int]], names: list[str]) -> str:
    """Why configs with these degrees give the same numbers, as far as their degrees say."""
    same = " and ".join(names)
    differ = {d for d in DEGREES if len({row[d] for row in degrees}) > 1}
    if differ == {"ep"} and all(r["dp_attn"] == 1 and r["ep"] in (1, r["tp"]) for r in degrees):
        tp = degrees[0]["tp"]
        return (f"{same} give the same numbers in every row: EP inside TP{tp} changes nothing when the expert "
                f"group is the whole TP group (ep = tp = {tp}) and attention is not data-parallel (dp_attn 1). "
                f"Every GPU then holds every token, so the experts' outputs are combined by an all-reduce over "
                f"the same {tp} GPUs either way (no all-to-all), and each GPU holds 1/{tp} of the expert "
                f"weights either way (whole experts with EP, a slice of each with TP).")
    return f"{same} give the same numbers in every row the build evaluated."
