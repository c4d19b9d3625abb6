"""The published results a build may carry over: what can be trusted of them, and the grid they
were built over.

Layer: engine.batch. A manifest that is not one, or a models.parquet that does not match its
record, counts as absent (:func:`_read_previous`); a model's files are carried only when every
one still has the size and SHA-256 its manifest entry records (:func:`_intact`): read and hashed,
or vouched for by the stamp of the published trees (:func:`engine.batch.uptodate.vouched`: the
same stat, so the same bytes; a one-spec edit hashed every other model's files, 138 MB).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from engine.batch import publish, uptodate
from engine.batch.model_row import _with_formats, slug
from engine.batch.parquet_writer import MODEL_PARTITIONS
from engine.batch.hashing import _grid_of, grid_id  # noqa: F401 (re-exported: they moved to the light module)

@dataclass
class Previous:
    """The published results as far as they can be trusted: a manifest that is not one, or a
    models.parquet that does not match its record, counts as absent."""

    root: Path
    grid: str | None = None
    models: dict[str, dict] = field(default_factory=dict)       # model -> manifest entry
    rows: dict[str, dict] = field(default_factory=dict)         # model -> models.parquet row
    skipped: dict[str, list[str]] = field(default_factory=dict)
    #: results-relative path -> stat key of the files the stamp vouches for (:func:`engine.batch.uptodate.vouched`)
    vouched: dict[str, list[int]] = field(default_factory=dict)


def _read_previous(final: Path, log) -> Previous:
    previous = Previous(final)
    path = final / "manifest.json"
    if not path.exists():
        if (final / "models.parquet").exists():
            log(f"{path} is missing: treating the previous results as absent, rebuilding every model")
        return previous
    try:
        manifest = json.loads(path.read_text())
        problem = "" if isinstance(manifest, dict) else f"a JSON {type(manifest).__name__}, not an object"
    except (OSError, ValueError) as exc:
        manifest, problem = None, f"not JSON: {' '.join(str(exc).split())}"
    if not problem and not isinstance(manifest.get("models"), dict):
        problem = "no models table"
    if problem:
        log(f"{path} is not a results manifest ({problem}): treating the previous results as absent, "
            f"rebuilding every model")
        return previous
    previous.vouched = uptodate.vouched(final.parent, final.name, "manifest.json")
    previous.grid = manifest.get("grid") if isinstance(manifest.get("grid"), str) else None
    previous.models = {mid: e for mid, e in manifest["models"].items()
                       if isinstance(e, dict) and isinstance(e.get("hash"), str) and isinstance(e.get("files"), dict)}
    skipped = manifest.get("skipped")
    previous.skipped = {k: v for k, v in skipped.items() if isinstance(v, list)} if isinstance(skipped, dict) else {}
    record = (manifest.get("files") or {}).get("models.parquet") if isinstance(manifest.get("files"), dict) else None
    try:
        if record is not None and not uptodate.matches(final / "models.parquet", record,
                                                       previous.vouched.get("models.parquet")):
            raise ValueError("its size or SHA-256 differs from the manifest's record")
        previous.rows = {r["model_id"]: _with_formats(r) for r in pl.read_parquet(final / "models.parquet").to_dicts()}
    except Exception as exc:      # polars raises its own errors on garbage; every one means "damaged"
        if previous.models:
            log(f"{final / 'models.parquet'} is damaged ({' '.join(str(exc).split())[:120]}): "
                f"rebuilding every model it listed")
        previous.rows = {}
    return previous


def _model_files(root: Path, model_id: str) -> list[Path]:
    """A model's files under a results folder (partitions and its inspector document)."""
    name = slug(model_id)
    return [root / t / f"model={name}" / "part.parquet" for t in MODEL_PARTITIONS] + \
        [root / "models" / f"{name}.json", root / "formulas" / f"{name}.json", root / "playground" / f"{name}.json"]


def _file_records(root: Path, model_id: str) -> dict[str, dict]:
    return {p.relative_to(root).as_posix(): publish.file_digest(p) for p in _model_files(root, model_id)}


def _intact(previous: Previous, model_id: str) -> tuple[bool, str]:
    """Can the model's previous files be carried over? (ok, why not: '' when already reported)."""
    entry, row = previous.models[model_id], previous.rows.get(model_id)
    if row is None or row.get("spec_hash") != entry["hash"]:
        return False, ""                              # models.parquet damaged: said once already
    for path in _model_files(previous.root, model_id):
        rel = path.relative_to(previous.root).as_posix()
        record = entry["files"].get(rel)
        if not uptodate.matches(path, record, previous.vouched.get(rel)):
            expected = record.get("size") if isinstance(record, dict) else None
            if not path.exists():
                state = "missing"
            elif path.stat().st_size != expected:
                state = f"{path.stat().st_size:,} bytes, recorded {expected}"
            else:
                state = "content differs from its recorded SHA-256"
            return False, f"{path} does not match the results manifest ({state})"
    return True, ""


def _carry(previous: Path, staging: Path, model_id: str) -> None:
    """Hard-link (or copy) a model's verified files from the previous results."""
    for src, dst in zip(_model_files(previous, model_id), _model_files(staging, model_id)):
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
