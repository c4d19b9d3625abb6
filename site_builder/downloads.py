"""The downloads page (``/downloads/``): every table of the results, grouped by table and by model.

Layer: site_builder (reads build/results only). The Parquet files are the results' own partitions,
published as hard links (one copy: ``downloads/models.parquet``, ``downloads/deployments/model=<org--name>/part.parquet``,
``downloads/ops/model=<org--name>/part.parquet``); the corpus-wide JSON documents beside them; the
CSV twins the other pages write (gallery, landscape tables, contracts, each model's per-op table).
This module lists them: for each table what one row is, its files with their sizes and row counts
(read from the files the site publishes), and a one-line polars and DuckDB snippet that reads the
files as a browser saves them (each link names its file with ``download``: ``deployments-<org--name>.parquet``,
so one glob reads every model the reader saved). The template only displays what is built here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import polars as pl

from site_builder.data import Results, slug

#: The per-model tables: (folder under results/ and downloads/, title, what one row is).
PER_MODEL = [("deployments", "Deployments", "one row per (model, GPU, parallel config, framework, KV dtype, batch, "
              "prompt, output, phase): memory, capacity, TTFT, TPOT, throughput"),
             ("ops", "Per-op SOL tables", "one row per kernel or collective of the deployment points the deployment "
              "pages show: FLOPs, bytes, times, bound, formulas"),
             ("fronts", "Pareto fronts", "one row per point of archledger plan's tokens/s/GPU vs tokens/s/user front "
              "(model, GPU, framework, KV dtype, sizing scenario): config, batch, TTFT, TPOT"),
             ("sizing", "Sizing answers", "one row per (config, batch) point that is plan's answer for some TTFT/TPOT "
              "bounds, in plan's order of preference (docs/results.md)")]


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _rows(path: Path) -> int:
    """Rows of a Parquet file, from its footer (no data read)."""
    return pl.scan_parquet(path).select(pl.len()).collect().item()


def _counted(counts: dict[str, int] | None, rel: str, path: Path) -> int:
    """``_rows(path)`` of the file at ``rel`` (its path under results/ and under downloads/), read
    once per render: ``counts`` holds what this render has read (None: no memo). Why ``rel`` is a
    complete key: within one render a file under ``downloads/<rel>`` is only ever the one
    :func:`render` placed there from ``results/<rel>`` (a hard link, or a byte copy where linking
    fails), and neither tree is written while the site renders (the results are staged and
    complete; no other page group writes a Parquet file), so both paths hold the same rows. The
    footer reads were a third of this group's time, each placed file read twice (whether to place
    it, then the listing): 255 files on the 51-model corpus."""
    if counts is None:
        return _rows(path)
    if rel not in counts:
        counts[rel] = _rows(path)
    return counts[rel]


def _file(site_dir: Path, rel: str, saved_as: str | None = None, rows: int | None = None) -> dict[str, Any]:
    """One downloadable file: its link (relative to /downloads/), the name a browser saves it under,
    its size in bytes and, for a Parquet file, its rows."""
    path = site_dir / "downloads" / rel
    return {"href": rel, "saved_as": saved_as or rel.rsplit("/", 1)[-1], "bytes": _size(path), "rows": rows}


def _snippets(name: str) -> dict[str, str] | None:
    """The one-line polars and DuckDB reads of the file(s) saved as ``name`` (a glob for a table
    saved per model); None for a JSON document (nested: read it with json.load)."""
    if name.endswith(".parquet"):
        return {"polars": f'pl.read_parquet("{name}")', "duckdb": f"SELECT * FROM read_parquet('{name}');"}
    if name.endswith(".csv"):
        return {"polars": f'pl.read_csv("{name}")', "duckdb": f"SELECT * FROM read_csv('{name}');"}
    return None


def listing(site_dir: Path, results: Results, counts: dict[str, int] | None = None) -> dict[str, Any]:
    """What the downloads page shows, read from the files under ``site_dir/downloads`` (and each
    model's per-op CSV and document): ``tables``, the corpus-wide files (one entry each: link, the
    name a browser saves it under, what one row is, bytes, Parquet rows, snippets); ``per_model``,
    the tables published one file per model (files per model, totals, snippets over a glob of the
    saved files); ``models``, per model its files across tables (for the by-model listing).
    ``counts``: the Parquet row counts :func:`render` read already, by path under downloads/
    (:func:`_counted`)."""
    site_dir = Path(site_dir)
    downloads = site_dir / "downloads"
    names = {m: results.documents[m]["name"] for m in results.models["model_id"]}
    tables: list[dict[str, Any]] = []

    def add(rel: str, title: str, note: str, saved_as: str | None = None) -> None:
        path = downloads / rel
        if path.is_file():
            entry = _file(site_dir, rel, saved_as, _counted(counts, rel, path) if rel.endswith(".parquet") else None)
            tables.append({**entry, "title": title, "note": note, "snippets": _snippets(entry["saved_as"])})

    add("models.parquet", "models", "one row per model: parameters, checkpoint bytes, KV per token, traits, lineage")
    add("gallery.csv", "gallery", "the gallery table, one row per model")
    add("variants.parquet", "what-if variants", "one row per what-if variant (models.parquet's columns, variant_of, "
        "label what-if; never verified)")
    add("contracts.csv", "contracts", "the components page's contract table, one row per variant and context length")
    add("contracts.json", "contracts", "the same contracts as built, formulas included")
    for table in (results.landscape or {}).get("tables", []):
        add(f"landscape/{table['name']}.csv", f"landscape: {table['name']}", table["title"],
            f"landscape-{table['name']}.csv")
    add("landscape.json", "landscape", "the landscape page's tables as built, formulas and bound dims included")

    per_model: list[dict[str, Any]] = []
    by_model: dict[str, dict[str, Any]] = {
        m: {"model_id": m, "name": names[m], "slug": slug(m), "files": {}} for m in results.models["model_id"]}
    for table, title, row in PER_MODEL:
        files = []
        for model_id in results.models["model_id"]:
            rel = f"{table}/model={slug(model_id)}/part.parquet"
            if (downloads / rel).is_file():   # an empty sizing partition (model outside the sizing list) is not placed
                entry = {**_file(site_dir, rel, f"{table}-{slug(model_id)}.parquet",
                                 _counted(counts, rel, downloads / rel)),
                         "model_id": model_id, "name": names[model_id]}
                files.append(entry)
                by_model[model_id]["files"][table] = entry
        if not files:   # fronts/sizing when no model of the build is in the grid's sizing list
            continue
        per_model.append({"key": table, "title": title, "row": row, "files": files,
                          "bytes": sum(f["bytes"] for f in files), "rows": sum(f["rows"] for f in files),
                          "snippets": _snippets(f"{table}-*.parquet")})
    # each model page's own tables: its per-op table (CSV) and its whole document (JSON)
    for m in by_model.values():
        m["ops_csv"] = _size(site_dir / "models" / m["slug"] / "ops.csv")
        m["document"] = _size(site_dir / "data" / "models" / f"{m['slug']}.json.gz")
    return {"tables": tables, "per_model": per_model, "models": list(by_model.values()),
            "total": sum(_size(p) for p in downloads.rglob("*")) if downloads.is_dir() else 0}


def render(site, results: Results, csv: Callable[[list[dict]], str]) -> None:
    """Place the results' files under ``downloads/`` (hard links), write the contracts' CSV twin,
    and the downloads page. Runs after every other page group (it lists their CSV twins)."""
    counts: dict[str, int] = {}         # each Parquet file's rows, read once (_counted)
    site.place(results.root / "models.parquet", "downloads/models.parquet")
    for table, _, _ in PER_MODEL:
        for path in sorted((results.root / table).glob("model=*/part.parquet")):
            rel = path.relative_to(results.root).as_posix()
            if path.is_file() and not path.is_symlink() and _counted(counts, rel, path):
                site.place(path, f"downloads/{rel}")
    if (results.root / "variants.parquet").exists() and _counted(counts, "variants.parquet",
                                                                 results.root / "variants.parquet"):
        site.place(results.root / "variants.parquet", "downloads/variants.parquet")
    if (results.root / "contracts.json").exists():
        site.place(results.root / "contracts.json", "downloads/contracts.json")
        contracts = json.loads((results.root / "contracts.json").read_text())
        rows = [{"slot": slot, "variant": v["name"], "component": v["component"], "context": n,
                 "params": v["params"]["value"], "kv_bytes_per_token": v["kv_bytes_per_token"]["value"],
                 "kv_bytes_per_request": kv, "prefill_s": p, "decode_s": d, "decode_bytes": db}
                for slot, c in contracts.items() for v in c["variants"]
                for n, kv, p, d, db in zip(c["lengths"], v["kv_bytes_per_request"], v["prefill_s"], v["decode_s"],
                                           v["decode_bytes"])]
        site.file("downloads/contracts.csv", csv(rows))
    if results.landscape is not None:
        site.place(results.root / "landscape.json", "downloads/landscape.json")
    site.page("downloads", "downloads.html", "Downloads", {"page": "downloads"},
              **listing(site.folder, results, counts))
