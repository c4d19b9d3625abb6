"""Read build/results/ into what pages need: reshaping and selecting only, never computing a number.

Layer: site_builder (reads build/results, imports no engine evaluation). Every value handed to a
template comes from a Parquet row or a model document written by the build; functions here pick
rows, group them and format labels. A "number" is passed as ``{"value", "formula", "node"}`` so
the template can attach its formula tooltip.
"""
from __future__ import annotations

import re

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

KEY = ["gpu", "n_gpus", "config", "framework", "kv_dtype"]


def slug(model_id: str) -> str:
    return model_id.replace("/", "--")


class Documents(Mapping):
    """The model documents (``models/<org--name>.json``), each read when first asked for: an
    incremental render reads only those of the pages it renders again."""

    def __init__(self, root: Path, model_ids: list[str]):
        self.root, self.ids, self.cache = root, list(model_ids), {}

    def __getitem__(self, model_id: str) -> dict:
        if model_id not in self.cache:
            if model_id not in self.ids:
                raise KeyError(model_id)
            self.cache[model_id] = json.loads((self.root / "models" / f"{slug(model_id)}.json").read_text())
        return self.cache[model_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Results:
    root: Path
    models: pl.DataFrame
    documents: Mapping[str, dict]
    deployments: pl.LazyFrame
    ops: pl.LazyFrame
    landscape: dict | None = None      # landscape.json (the landscape page's tables), when built

    @staticmethod
    def load(root: Path) -> "Results":
        models = pl.read_parquet(root / "models.parquet")
        documents = Documents(root, list(models["model_id"]))
        deployments = pl.scan_parquet(str(root / "deployments" / "**" / "*.parquet"), hive_partitioning=True)
        ops = pl.scan_parquet(str(root / "ops" / "**" / "*.parquet"), hive_partitioning=True)
        landscape = json.loads((root / "landscape.json").read_text()) if (root / "landscape.json").exists() else None
        return Results(root, models, documents, deployments, ops, landscape)


def gallery_index(results: Results) -> list[dict[str, Any]]:
    """One entry per model for the gallery's client-side search, filter and sort."""
    out = []
    rows = sorted(results.models.iter_rows(named=True), key=_release_key)
    for position, row in enumerate(rows):
        doc = results.documents[row["model_id"]]
        out.append({
            "model_id": row["model_id"], "slug": slug(row["model_id"]), "name": doc["name"],
            "family": row["family"], "model_type": row["model_type"],
            "params_total": row["params_total"], "params_active": row["params_active"],
            "kv_bytes_per_token": row["kv_bytes_per_token"], "kv_fixed_bytes": row["kv_fixed_bytes"],
            "max_context": row["max_context"], "n_layers": row["n_layers"],
            "checkpoint_bytes": row["checkpoint_bytes"], "attention_kinds": list(row["attention_kinds"]),
            "attention_label": row["attention_label"], "kv_state_bytes": row["kv_state_bytes"],
            "verified": row["verified"], "verified_against": row["verified_against"], "moe": row["params_active"] < row["params_total"],
            "traits": list(row["traits"]), "lineage": row["lineage"], "release": position,
            "formulas": {**{k: doc["overview"][k]["formula"] for k in ("params_total", "params_active",
                                                                        "kv_bytes_per_token_growing", "max_context")},
                         "kv_state_bytes": doc["kv_split"]["parts"]["state"][0]["formula"]},
        })
        out[-1]["dims"] = _named_dims(doc, out[-1]["formulas"].values())
    return out


def _named_dims(doc: dict, formulas) -> dict[str, int]:
    """The model's dims that ``formulas`` name, with their values: the tooltip's "where" line
    (static/js/site.js) on pages that show many models."""
    names = {name for f in formulas for name in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", f or "")}
    return {d["name"]: d["value"] for d in doc["dims"] if d["name"] in names}


def _release_key(row: dict) -> tuple:
    """Gallery order: lineage, then release order inside it (models.parquet's generation and
    release_position, from corpus/lineage.yaml), then size."""
    return (row["lineage"].lower(), row["generation"], row["release_position"], row["params_total"], row["model_id"])


def trait_index(results: Results, index: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trait (landscape.json's order and labels): the gallery entries that have it."""
    meta = (results.landscape or {}).get("traits") or {}
    return [{"key": key, "label": info["label"], "doc": info["doc"],
             "models": [m for m in index if key in m["traits"]]} for key, info in meta.items()]


def lineages(index: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gallery entries grouped by lineage, in gallery order (each group: lineage, families in
    release order, models)."""
    out: list[dict[str, Any]] = []
    for m in index:
        if not out or out[-1]["lineage"] != m["lineage"]:
            out.append({"lineage": m["lineage"], "families": [], "models": []})
        if m["family"] not in out[-1]["families"]:
            out[-1]["families"].append(m["family"])
        out[-1]["models"].append(m)
    return out


def landscape_tables(results: Results) -> list[dict[str, Any]]:
    """The landscape page's tables as built (landscape.json), with model names for display."""
    tables = (results.landscape or {}).get("tables") or []
    names = {m: results.documents[m]["name"] for m in results.models["model_id"]}
    for table in tables:
        for row in table["rows"]:
            if "model_id" in row:
                row["name"] = names.get(row["model_id"], row["model_id"])
    return tables


def deployment_rows(results: Results, model_id: str) -> pl.DataFrame:
    """The model's deployment rows with the columns the deployment page uses."""
    columns = ["gpu", "n_gpus", "config", "tp", "ep", "dp_attn", "pp", "framework", "kv_dtype", "phase", "batch",
               "weight_bytes_per_gpu_formula",
               "input_len", "output_len", "fits", "shortfall_bytes", "weight_bytes_per_gpu", "kv_bytes_per_request",
               "kv_state_bytes_per_request",
               "kv_bytes_per_gpu", "free_bytes_per_gpu", "activation_bytes_per_gpu", "usable_bytes_per_gpu",
               "max_concurrent_requests", "step_time_s",
               "compute_time_s", "memory_time_s", "comm_time_s", "bound", "ttft_s", "tpot_s",
               "tokens_per_s_per_gpu", "extrapolated"]
    return results.deployments.filter(pl.col("model_id") == model_id).select(columns).collect()


def deployment_options(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """The (GPU, GPU count, config, framework, KV dtype) combinations the build evaluated."""
    combos = rows.select(KEY + ["tp", "ep", "dp_attn", "pp", "weight_bytes_per_gpu_formula"]).unique().sort(
        ["gpu", "n_gpus", "config", "framework", "kv_dtype"])
    return combos.to_dicts()


def ops_rows(results: Results, model_id: str) -> pl.DataFrame:
    return results.ops.filter(pl.col("model_id") == model_id).collect()
