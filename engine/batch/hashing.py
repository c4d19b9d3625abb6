"""The build's input hashes: what a model's results depend on, by content (never by place or mtime).

Layer: engine.batch (imports the standard library, engine.project and engine.batch.dependencies;
nothing that pulls in sympy or polars, so a command can check a built checkout's hashes without the
evaluation's libraries: ``archledger list`` does, :mod:`engine.batch.built`). :mod:`engine.batch.results`
uses these functions for its incremental builds and re-exports them; :func:`engine_digest` is what a
Dask worker compares with the client's (:mod:`engine.batch.tasks`).

Invariants: every hash is SHA-256 over file names and contents in a fixed order, plus the results'
schema version and the installed versions of the numeric libraries (:mod:`engine.batch.dependencies`);
a model's hash is a function of files below the corpus folder and the shared hash, so an unchanged
corpus (:func:`corpus_digest`) and an unchanged shared hash imply every model's hash is unchanged.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from engine.batch import dependencies
from engine.project import MAX_FILE_BYTES, PACKAGE_ROOT

if TYPE_CHECKING:       # the corpus type only: loading a corpus imports sympy
    from engine.language.corpus import Corpus

#: The engine's own sources (every subpackage) are an input of every model's results.
ENGINE = PACKAGE_ROOT / "engine"
#: 2: time columns stored as float32, tokens_per_s_per_gpu no longer stored (docs/results.md "Precision").
SCHEMA_VERSION = 2
#: The corpus's lineage table (engine.batch.landscape reads it; its order is in models.parquet).
LINEAGE_FILE = "lineage.yaml"


def _digest(paths, extra: bytes = b"") -> str:
    """SHA-256 over file names and contents in the given order (where the files live is not part
    of the identity: a copied folder hashes the same)."""
    digest = hashlib.sha256(extra)
    for path in paths:
        digest.update(str(path.name).encode())
        # a bounded read, as every input is read (engine.language.yamlio.read_text): the hash is taken
        # before the inputs are checked, and a FIFO or /dev/zero given as the grid must not be read
        # forever (every hashed file is a corpus file, a GPU table or an engine source: all small)
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            from engine.language.errors import SpecError, Where
            raise SpecError(Where(str(path)), f"file is larger than {MAX_FILE_BYTES // (1 << 20)} MiB "
                            "(the cap for a corpus file)", "split it, or record less (corpus files are a few KB)")
        digest.update(data)
    return digest.hexdigest()


def engine_sources() -> list[Path]:
    """Every ``.py`` file below ``engine/`` (all subpackages), sorted, caches excluded."""
    return sorted(p for p in ENGINE.rglob("*.py") if "__pycache__" not in p.parts)


def _engine_identity() -> bytes:
    """What, besides its sources, makes the engine compute what it computes: the results' schema
    version and the installed versions of the numeric libraries (:mod:`engine.batch.dependencies`)."""
    return str(SCHEMA_VERSION).encode() + b"\0" + dependencies.fingerprint(dependencies.RESULTS)


def shared_hash_at(corpus_root: Path, grid_path: Path, gpu_root: Path) -> str:
    """:func:`shared_hash` from the corpus folder alone (no corpus loaded)."""
    root = Path(corpus_root)
    files = [root / "dims.yaml", root / "roles.yaml", root / "verification.yaml", Path(grid_path),
             *[p for p in (root / LINEAGE_FILE,) if p.exists()],
             *sorted(Path(gpu_root).glob("*.yaml")), *sorted((root / "fusion").glob("*.yaml")),
             # the measured kernel tables every expected time reads (engine.deploy.measured's files)
             *sorted(Path(gpu_root).glob("measured/*/*/*.yaml")),
             *sorted((root / "components" / "library").glob("*.yaml")),
             *[p for p in (root / "slots.yaml",) if p.exists()],     # the playground's picks fit its contracts
             *engine_sources()]
    return _digest(files, _engine_identity())


def shared_hash(corpus: Corpus, grid_path: Path, gpu_root: Path) -> str:
    """Everything every model's results depend on: tables, components, GPUs and their measured kernel
    tables, fusion, grid, engine
    (its sources and the versions of the libraries it computes with)."""
    return shared_hash_at(corpus.root, grid_path, gpu_root)


def model_hash(corpus: Corpus, model_id: str, shared: str) -> str:
    """A model's partition hash: its own files on top of the shared ones."""
    model = corpus.models[model_id]
    base = corpus.root.parent
    files = {base / model.where.file, base / model.snapshot.where.file}
    files.update(p for p in evidence_files(corpus, model) if p.exists())
    from engine.language import checkpoints
    for ckpt in getattr(model, "checkpoints", ()):     # each published checkpoint's own evidence too
        files.add(base / ckpt.snapshot.where.file)
        files.update(p for p in evidence_files(corpus, checkpoints.variant(model, ckpt)) if p.exists())
    files.update(base / corpus.drafts[d].where.file for d in model.drafts if d in corpus.drafts)
    quant = set(model.quant.values()).union(*(c.quant.values() for c in getattr(model, "checkpoints", ())))
    files.update(base / corpus.schemes[s].where.file for s in quant)
    return _digest(sorted(files, key=lambda p: (p.parent.name, p.name)), shared.encode())


def evidence_files(corpus: Corpus, model) -> list[Path]:
    """The model's tensor manifest and source snapshot (part of its hash: new evidence re-validates)."""
    from engine.verify.evidence import snapshot_name, source_path
    from engine.verify.manifest import manifest_path
    name = snapshot_name(model)
    return [manifest_path(corpus.root, name), source_path(corpus.root, name)]


def corpus_digest(root: Path | str) -> str:
    """SHA-256 over every file below a corpus folder (relative names and contents; 1.5 MB, a few ms)."""
    root = Path(root)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


_ENGINE_DIGEST: list[str] = []


def engine_digest() -> str:
    """SHA-256 of the engine's sources and library versions as this process sees them (once per
    process): a Dask worker compares it with the client's before working (:mod:`engine.batch.executor`)."""
    if not _ENGINE_DIGEST:
        _ENGINE_DIGEST.append(_digest(engine_sources(), _engine_identity()))
    return _ENGINE_DIGEST[0]


def grid_id(grid_path: Path) -> str:
    """Which grid a results tree was built over: the grid file's path relative to this checkout when
    inside it (a moved checkout keeps its results), else absolute. Editing that file is an input
    change (every model's hash changes), not another grid."""
    path = Path(grid_path).resolve()
    try:
        return path.relative_to(PACKAGE_ROOT).as_posix()
    except ValueError:
        return str(path)


def _grid_of(recorded: str) -> str:
    """A manifest's grid entry in :func:`grid_id`'s form (relative entries are relative to the checkout)."""
    return grid_id(Path(recorded)) if Path(recorded).is_absolute() else Path(recorded).as_posix()
