"""A built checkout's models table, trusted only where the build's input hashes still hold.

Layer: engine.batch (reads build/results; imports the standard library, :mod:`engine.batch.hashing`
and :mod:`engine.batch.publish` at the top; polars only for a build without :data:`MODELS_JSON`). A command answers from
the build's numbers instead of evaluating the specs again only when they are the numbers an
evaluation would give: same inputs, same engine, same library versions (the build's own hashes).

Invariants: :func:`read` returns rows only from a models.parquet whose size and SHA-256 match its
manifest's record (read from its JSON twin when that matches its own record), and only rows whose ``spec_hash`` is the manifest's hash for that model;
:func:`unchanged` is true only if the corpus folder is byte-identical to the one the build read and
the shared hash (tables, GPU files, the build's grid, engine sources, library versions) is the
build's: then every model's hash is the build's (a model's hash is a function of corpus files and the
shared hash, :mod:`engine.batch.hashing`), without loading the corpus (which imports sympy).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.batch import hashing, publish
from engine.project import PACKAGE_ROOT

#: models.parquet's rows as a JSON list (same columns and order; written by the build beside it and
#: recorded in the manifest): a command reads them without importing polars (a fifth of `list`'s time).
MODELS_JSON = "models.json"


@dataclass
class Built:
    """What a results folder says about its build: the manifest and the trusted rows."""

    manifest: dict
    rows: dict[str, dict] = field(default_factory=dict)     # model id -> models.parquet row

    def grid_path(self) -> Path:
        """The grid file the build read (the manifest records it relative to the checkout when inside it)."""
        recorded = Path(self.manifest.get("grid") or "")
        return recorded if recorded.is_absolute() else PACKAGE_ROOT / recorded

    def shared_hash_now(self, corpus_root: Path, gpu_root: Path) -> str:
        """The shared hash of the current inputs over the build's grid (the build's own function)."""
        return hashing.shared_hash_at(corpus_root, self.grid_path(), gpu_root)


def read(results: Path, columns: list[str]) -> Built | None:
    """The manifest and models.parquet's rows (``columns`` plus ``model_id`` and ``spec_hash``) of a
    results folder, or None where there is no build or it cannot be trusted (no manifest, a
    models.parquet that does not match its record, a grid file that is gone)."""
    results = Path(results)
    try:
        manifest = json.loads((results / "manifest.json").read_text())
        record = manifest["files"]["models.parquet"]
        entries = manifest["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path = results / "models.parquet"
    if not isinstance(entries, dict) or not publish.matches(path, record):
        return None
    built = Built(manifest)
    if not built.grid_path().is_file():
        return None
    wanted = list(dict.fromkeys(["model_id", "spec_hash", *columns]))
    table = _rows_json(results, manifest, wanted)
    if table is None:            # a build from before models.json: its Parquet, through polars
        import polars as pl
        try:
            table = pl.read_parquet(path, columns=wanted).to_dicts()
        except Exception:        # noqa: BLE001 — a table of an older schema (a column missing): no build to read
            return None
    for row in table:
        entry = entries.get(row["model_id"])
        if isinstance(entry, dict) and entry.get("hash") == row["spec_hash"]:
            built.rows[row["model_id"]] = row
    return built


def _rows_json(results: Path, manifest: dict, wanted: list[str]) -> list[dict] | None:
    """models.parquet's rows from their JSON twin :data:`MODELS_JSON` (``wanted`` columns), or None
    where it is not recorded, does not match its record or lacks a column (then the Parquet is read)."""
    path, record = results / MODELS_JSON, manifest["files"].get(MODELS_JSON)
    if not isinstance(record, dict) or not publish.matches(path, record):
        return None
    try:
        rows = json.loads(path.read_text())
        return [{k: row[k] for k in wanted} for row in rows]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unchanged(built: Built, corpus_root: Path, gpu_root: Path) -> bool:
    """The build read exactly the current corpus folder and shared inputs (so every model's hash is
    the build's); a manifest from before the corpus digest was recorded is never unchanged."""
    corpus = built.manifest.get("corpus")
    if not isinstance(corpus, dict) or corpus.get("digest") != hashing.corpus_digest(corpus_root):
        return False
    return built.manifest.get("shared_hash") == built.shared_hash_now(corpus_root, gpu_root)


def unverified_rows(built: Built, columns: list[str]) -> tuple[dict[str, dict], dict[str, str]]:
    """The manifest's rows of the declared-unverified specs (``unverified_listed``: ``columns`` of
    each, engine.batch.results.unverified_listed) and their reasons (``unverified``); a row of the
    wrong form (not a mapping, a missing column, a reason that is not text) is left out, so the
    caller evaluates that spec instead."""
    rows, why = built.manifest.get("unverified_listed"), built.manifest.get("unverified")
    if not isinstance(rows, dict) or not isinstance(why, dict):
        return {}, {}
    kept = {m: {c: r[c] for c in columns} for m, r in rows.items()
            if isinstance(r, dict) and all(c in r for c in columns) and isinstance(why.get(m), str)}
    return kept, {m: why[m] for m in kept}


def corpus_models(built: Built) -> list[str]:
    """The model ids of the corpus the build read (every spec, built, skipped or not named)."""
    models = (built.manifest.get("corpus") or {}).get("models")
    return [m for m in models if isinstance(m, str)] if isinstance(models, list) else []
