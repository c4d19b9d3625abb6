"""``archledger build``: every spec over the grid -> ``build/results/*.parquet`` (+ the site), incremental and atomic.

Layer: engine.batch -> build/results. Reads like mkdocs' build(): load and validate everything first,
evaluate, then write to a staging folder; the site (a callable from the layer above) is rendered
from that staging folder into another, and both replace ``results/`` and ``site/`` together only
when complete (:mod:`engine.batch.publish`: one lock per output folder, a journal for the two renames), so
a failed, interrupted or killed build leaves the previous results and site intact and matching.

Results (schemas: :data:`MODELS_SCHEMA`, :data:`DEPLOYMENTS_SCHEMA`, :data:`OPS_SCHEMA`, documented
in docs/results.md): ``models.parquet``; ``models/<org--name>.json`` (the inspector's document);
``formulas/<org--name>.json`` (the deploy page's formula trees, :mod:`engine.batch.deploy_export`);
``contracts.json`` (component variants under fixed contracts, always re-evaluated: it is small); ``deployments/model=<org--name>/part.parquet`` and
``ops/model=<org--name>/part.parquet`` (one hive partition per model, so
``pl.scan_parquet("build/results/deployments/**/*.parquet")`` reads the table); ``fronts/`` and
``sizing/`` partitions alike (:mod:`engine.serving.fronts`: plan's search for the grid's ``sizing:``
block); ``manifest.json``
(per model: its input hash, row counts and the size and SHA-256 of each of its files; the grid; the
skipped specs; the size and SHA-256 of models.parquet and contracts.json).

Incremental: a model's partitions carry a content hash of everything they depend on (its spec,
snapshot, the component library and its drafts, its quant schemes, the dims/roles tables, the GPU
files, the fusion tables, the grid, the engine's source and the installed versions of the
libraries it computes with: :mod:`engine.batch.dependencies`). A partition whose hash is unchanged and
whose files match their recorded size and SHA-256 is carried over from the previous results without
evaluating anything; changed or damaged ones are recomputed, models in parallel processes (which
die with the build process). A subset build (``models``) merges: what it does not name is kept
(:func:`run` states the rules).

Verification: every changed spec is validated (:mod:`engine.verify.validate`) before any grid work; a spec
with guard errors (a missing evidence file included) is skipped with one log line and left out of
every table (``manifest.json`` lists it under ``skipped``); ``--strict`` (CI and the deploy) fails
the build on such a spec instead, before any grid work and with nothing published. A spec that declares
``unverified: <why>`` (transformers lacks its architecture) is neither: it is listed with that reason
(``manifest.json`` ``unverified``, the gallery's note) and never checked or published. Published rows carry ``verified`` and
the evidence they were checked against; the guard table travels in ``models/<org--name>.json``.
"""
from __future__ import annotations

import contextlib
import errno
import gc
import json
import multiprocessing
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path


from engine.batch import collector, landscape, lifeline, publish, workers
from engine.batch.built import MODELS_JSON  # models.parquet's rows as JSON: what commands read without polars
from engine.batch.hashing import (  # re-exported: the build's hashes live in one light module
    ENGINE, SCHEMA_VERSION, _digest, _engine_identity, corpus_digest, engine_sources, evidence_files, model_hash,
    shared_hash)
from engine.batch.export import compact_json
# re-exported: the tables' schemas, the model row, the writer and the previous results moved out
# of this module (one job each); importers keep reading them here
from engine.batch.model_row import (  # noqa: F401
    attention_kinds, attention_label, model_row, slug)
from engine.batch.parquet_writer import (  # noqa: F401
    LONG_TEXT, PARTITION_ORDER, ZSTD_LEVEL, _frame, _series, write_parquet)
from engine.batch.previous import (  # noqa: F401
    Previous, _carry, _file_records, _grid_of, _intact, _read_previous, grid_id)
from engine.batch.schema import (  # noqa: F401
    DECODE_COPIES, DEPLOYMENTS_SCHEMA, DERIVED, MODELS_SCHEMA, OPS_SCHEMA, UNSTORED, VARIANTS_SCHEMA,
    without_copies)
from engine.language.api import evaluate_spec
from engine.language.corpus import Corpus, load_corpus
from engine.language.errors import SpecError
from engine.verify.validate import validate


@dataclass
class Report:
    """What a build did: models recomputed and reused, rows written, seconds."""

    results: Path
    recomputed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)   # model -> its guard errors
    unverified: dict[str, str] = field(default_factory=dict)      # model -> why it cannot be verified (its spec's `unverified:`)
    stale: list[str] = field(default_factory=list)     # kept by a subset build although their inputs changed
    site: Path | None = None                            # the published site, when one was rendered
    deployment_rows: int = 0
    op_rows: int = 0
    points: int = 0
    seconds: float = 0.0


# -- hashing --------------------------------------------------------------------------------------

_ENGINE_DIGEST: list[str] = []


def engine_digest() -> str:
    """SHA-256 of the engine's sources and library versions as this process sees them (once per
    process): a Dask worker compares it with the client's before working (:mod:`engine.batch.executor`)."""
    if not _ENGINE_DIGEST:
        _ENGINE_DIGEST.append(_digest(engine_sources(), _engine_identity()))
    return _ENGINE_DIGEST[0]


def write_contracts(corpus: Corpus, final: Path, staging: Path, shared: str, gpu_root: Path) -> str:
    """``contracts.json`` (engine.batch.contract): carried from the previous results when its inputs
    (the shared hash, which covers the components, GPUs, fusion tables and engine, and the contract
    folders) are unchanged and the file still matches its manifest record, else evaluated. Returns
    the inputs' digest (the manifest's ``contracts_hash``)."""
    from engine.batch.contract import evaluate_contracts
    files = sorted((corpus.root / "contracts").rglob("*.yaml"))
    # the folders are the slots: their relative paths are part of the identity too
    digest = _digest(files, "|".join([shared, *(p.relative_to(corpus.root).as_posix() for p in files)]).encode())
    if not _carried(final, staging, ("contracts.json",), lambda manifest: manifest.get("contracts_hash") == digest):
        (staging / "contracts.json").write_text(json.dumps(evaluate_contracts(corpus, gpu_root), indent=1))
    return digest


def _carried(final: Path, staging: Path, names: tuple[str, ...], same_inputs) -> bool:
    """Copy the previous results' corpus-wide files ``names`` into ``staging`` when
    ``same_inputs(previous manifest)`` holds and every file still matches its manifest record;
    False (nothing copied) otherwise, or when there are no readable previous results."""
    try:
        manifest = json.loads((final / "manifest.json").read_text())
        kept = same_inputs(manifest) and all(publish.matches(final / n, manifest["files"].get(n)) for n in names)
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        kept = False
    if kept:
        for name in names:
            shutil.copy2(final / name, staging / name)
    return kept


def _corpus_wide_in_worker(name: str, root: str, final: str, staging: str, shared: str, gpu_root: str, *extra):
    """In a --jobs worker: :func:`write_contracts` or :func:`write_variants` (by name) on the
    worker's copy of the corpus."""
    fn = {"write_contracts": write_contracts, "write_variants": write_variants}[name]
    return fn(cached_corpus(root), Path(final), Path(staging), shared, Path(gpu_root), *extra)


def write_variants(corpus: Corpus, final: Path, staging: Path, shared: str, gpu_root: Path,
                   models: list[str]) -> None:
    """``variants.json`` (the playground's data: engine.playground.whatif.playground_document) and
    ``variants.parquet`` (:data:`VARIANTS_SCHEMA`) for the variants whose base is among the published
    ``models`` (a variant follows its base), carried from the previous results when their inputs
    (the shared hash, the variants, slots and every model spec and snapshot) are unchanged."""
    from engine.playground import whatif
    from engine.deploy.hardware import load_gpus
    from engine.language import variants as variant_rules
    root, base = corpus.root, corpus.root.parent
    files = [p for p in (root / "slots.yaml",) if p.exists()] + sorted((root / "variants").glob("*.yaml"))
    files += sorted({base / m.where.file for m in corpus.models.values()} |
                    {base / m.snapshot.where.file for m in corpus.models.values()}, key=str)
    chosen = [v for v in corpus.variants.values() if v.base in models]
    digest = _digest(files, (shared + "|" + ",".join(v.name for v in chosen)).encode())
    if _carried(final, staging, ("variants.json", "variants.parquet"),
                lambda _: json.loads((final / "variants.json").read_text()).get("hash") == digest):
        return
    evaluations: dict = {}
    doc = {"hash": digest, **whatif.playground_document(corpus, load_gpus(gpu_root), chosen, evaluations)}
    rows = []
    for v in chosen:
        row = model_row(evaluations[v.name], digest)
        row.update({"verified": False, "verified_against": variant_rules.LABEL, "variant_of": v.base,
                    "label": variant_rules.LABEL, "swaps": [whatif.swap_text(s) for s in v.swaps]})
        rows.append(row)
    (staging / "variants.json").write_text(json.dumps(doc, separators=(",", ":")))
    write_parquet(_frame({k: [r[k] for r in rows] for k in VARIANTS_SCHEMA}, VARIANTS_SCHEMA),
                  staging / "variants.parquet")


_CORPORA: dict[tuple[str, str], Corpus] = {}


def cached_corpus(root: str | None) -> Corpus:
    """:func:`load_corpus`, once per process and corpus content: a --jobs worker evaluates many models
    and parsing the YAML (about 2.5 s) dominated a small model's work. Keyed on the files' content,
    so an edited corpus is read again (a process running several builds never sees a stale one)."""
    path = Path(root) if root else None
    from engine.language.corpus import DEFAULT_ROOT
    path = (path or DEFAULT_ROOT).resolve()
    key = (str(path), corpus_digest(path))
    if key not in _CORPORA:
        _CORPORA.clear()                 # one corpus per process at a time: a build uses one
        _CORPORA[key] = load_corpus(path)
    return _CORPORA[key]


#: The two halves of a model's work (:func:`build_model`'s ``part``): the grid (deployments, ops and
#: the deploy page's formulas) and the rest (fronts and sizing, the model document, the playground
#: picks). They write disjoint files; a build with fewer models to evaluate than workers runs the
#: halves of each model the previous build timed at :data:`SPLIT_SECONDS` or more in parallel (each
#: walks the spec and compiles its own structures), else a model is one task (the sizing step then
#: reuses the grid's structures).
PARTS = ("grid", "extras")
#: A model worth two tasks: starting a worker process (imports, the corpus) costs one to two seconds,
#: so a model that evaluates in a few seconds finishes sooner in the build's own process.
SPLIT_SECONDS = 4.0


def _split(todo: list[str], previous: "Previous", jobs: int | None) -> set[str]:
    """The models of ``todo`` evaluated as two tasks (:data:`PARTS`): none unless there are fewer
    models than workers; then those the previous build timed at :data:`SPLIT_SECONDS` or more."""
    if len(todo) >= (jobs or workers.default_workers()):
        return set()
    return {m for m in todo if previous.models.get(m, {}).get("seconds", 0.0) >= SPLIT_SECONDS}


def build_model(corpus_root: str | None, model_id: str, grid_path: str | None, gpu_root: str | None,
                staging: str, spec_hash: str, verification: dict | None = None,
                corpus: Corpus | None = None, part: str = "all") -> dict:
    """Evaluate one model over the grid; write its partitions under ``staging``. Returns counts.
    ``corpus``: the loaded corpus when the caller has it (in-process builds), else it is read once
    per process (:func:`cached_corpus`). ``part``: ``all``, or one of :data:`PARTS` (the counts of
    the other half are absent; :func:`merge_parts` joins two halves' counts)."""
    with collector.model_heap():
        return _build_model(corpus_root, model_id, grid_path, gpu_root, staging, spec_hash, verification,
                            corpus, part)


def _build_model(corpus_root: str | None, model_id: str, grid_path: str | None, gpu_root: str | None,
                 staging: str, spec_hash: str, verification: dict | None, corpus: Corpus | None,
                 part: str) -> dict:
    """:func:`build_model`'s work."""
    from engine.batch import grid_eval
    from engine.language import finite
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.structure_cache import StructureCache
    started = time.perf_counter()
    corpus = corpus if corpus is not None else cached_corpus(corpus_root)
    from engine.playground.whatif import evaluate_with_sites, model_playground
    from engine.deploy.hardware import load_gpus
    ev, sites = evaluate_with_sites(corpus, corpus.models[model_id])   # evaluate_spec's walks; its slot sites for the playground
    # one cache of placements and structures for the grid and the sizing step (the same configs)
    cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    name = slug(model_id)
    counts: dict = {"model_id": model_id}
    from engine.serving import fronts
    # every bound on the model's work (its grid points, its sizing pairs) before any of it starts
    grid_eval.check_work(ev, grid_path, gpu_root)
    fronts.check_work(ev, grid_path, gpu_root)
    if part in ("all", "grid"):
        formulas: dict = {}        # the deploy page's formula trees (engine.batch.deploy_export)
        deployments, ops, points = grid_eval.evaluate_model(ev, grid_path, gpu_root, formulas, cache)
        finite.check_tables(ev.model, {"deployments": deployments, "ops": ops})   # nothing NaN or negative is written
        for table, columns, schema in (("deployments", deployments, DEPLOYMENTS_SCHEMA), ("ops", ops, OPS_SCHEMA)):
            folder = Path(staging) / table / f"model={name}"
            folder.mkdir(parents=True, exist_ok=True)
            derived = DERIVED if table == "deployments" else ()
            frame = _frame(columns, {k: v for k, v in schema.items() if k not in derived}).sort(PARTITION_ORDER,
                                                                                             maintain_order=True)
            if table == "deployments":
                frame = without_copies(frame)
            if derived:          # each front's rows, in the published row order (its tie-break)
                from engine.serving.fronts import grid_front
                frame = frame.with_columns(grid_front(frame))
            write_parquet(frame, folder / "part.parquet", statistics=True, compression="zstd",
                          compression_level=ZSTD_LEVEL)
        (Path(staging) / "formulas").mkdir(exist_ok=True)
        from engine.batch.deploy_export import document_json     # compact_json's text, each step row encoded once
        (Path(staging) / "formulas" / f"{name}.json").write_text(document_json(formulas))
        counts.update(deployments=len(deployments["model_id"]), ops=len(ops["model_id"]), points=points)
    if part in ("all", "extras"):      # plan's search per sizing scenario: fronts/ and sizing/ (docs/results.md)
        counts.update(fronts.write_model(ev, grid_path, gpu_root, Path(staging), name,
                                         lambda columns, schema, path: write_parquet(_frame(columns, schema), path,
                                                                                     compression="zstd",
                                                                                     compression_level=ZSTD_LEVEL),
                                         cache))
        del cache
        from engine.batch.export import model_document
        (Path(staging) / "models").mkdir(exist_ok=True)
        (Path(staging) / "models" / f"{name}.json").write_text(
            compact_json(model_document(ev, verification)))
        (Path(staging) / "playground").mkdir(exist_ok=True)      # the playground's live picks (docs/results.md)
        (Path(staging) / "playground" / f"{name}.json").write_text(
            compact_json(model_playground(ev, sites=sites, gpus=load_gpus(gpu_root))))
    counts["seconds"] = round(time.perf_counter() - started, 3)
    return counts


def merge_parts(halves: list[dict]) -> dict:
    """One model's counts from its :data:`PARTS` (``seconds``: their sum, the work the next build
    orders models by)."""
    merged = {k: v for half in halves for k, v in half.items()}
    merged["seconds"] = round(sum(half["seconds"] for half in halves), 3)
    return merged


# -- the build ----------------------------------------------------------------------------------------

class BuildError(Exception):
    """The build cannot run as asked (e.g. another grid than ``--out``'s results): one line, exit 2."""


#: errno values that mean "the output cannot be written" (reported in one line, exit 2).
WRITE_ERRORS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM}
_IN_WORKER: int | None = None          # the parent's pid inside a --jobs worker, else None


def _skip_line(corpus: Corpus, model_id: str, errors: list) -> str:
    base = corpus.root.parent
    missing = [p for p in evidence_files(corpus, corpus.models[model_id]) if not p.exists()]
    if missing:
        names = ", ".join(str(p.relative_to(base)) if p.is_relative_to(base) else str(p) for p in missing)
        return (f"skip {model_id}: evidence {names} missing — skipped as unverified "
                f"(record it: archledger snapshot {model_id})")
    return f"skip {model_id}: not verified ({len(errors)} guard errors; run `archledger validate {model_id}`)"


def unverified_listed(corpus: Corpus, unverified: dict[str, str]) -> dict[str, dict]:
    """What ``archledger list`` prints of each declared-unverified spec (engine.cli.show.LIST_COLUMNS:
    family, model_type, parameters from a numeric walk, lineage columns), kept in the manifest so
    that ``list`` on a built checkout answers without loading the corpus or importing sympy (such a
    spec is never published, so models.parquet has no row for it)."""
    table = landscape.load_lineage(corpus.root)
    out = {}
    for mid in sorted(unverified):
        row = landscape.list_row(corpus, corpus.models[mid], table)
        out[mid] = {k: v for k, v in row.items() if k != "model_id"}
    return out


def refuse_unverified(skipped: dict[str, list[str]], log) -> None:
    """``--strict``: one line per spec that failed its guards (its first error), then the
    :class:`BuildError` that stops the build before anything is published. A deploy built this way
    cannot silently drop a model that a merge broke: the deploy fails instead."""
    for mid, errors in sorted(skipped.items()):
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        first = errors[0] if errors else "its evidence is missing"
        log(f"unverified {mid}: {first}{more}")
    raise BuildError(f"--strict: {len(skipped)} spec(s) failed their guards and would be left out of the "
                     f"results and site: {', '.join(sorted(skipped))}; nothing was published — fix them "
                     f"(archledger validate MODEL) or build without --strict to skip them")


def build(corpus: Corpus, out: Path, models: list[str] | None = None, grid_path: Path | None = None,
          gpu_root: Path | None = None, jobs: int | None = None, progress=None, log=None, site=None,
          site_progress=None, lock_timeout: float | None = None, command: str = "archledger build",
          executor: str | None = None, strict: bool = False) -> Report:
    """Evaluate (or carry over) the models' partitions into a staged results tree, render the staged
    site from it when ``site`` is given, then publish both together (:mod:`engine.batch.publish`).

    Invariants: ``out`` is absent, empty or an ArchLedger output (:func:`engine.batch.publish.claim`,
    else one line and nothing touched); nothing under ``out/results`` or ``out/site`` changes until
    the publication commits;
    a results tree holds one grid; a model is carried over only if its files match the sizes and
    SHA-256 its manifest records; a subset (``models``) never discards a model it did not rebuild
    (the rules are in :func:`run`). ``site(results_dir, site_dir, progress)`` renders into the empty
    ``site_dir`` and is published with the results; without it (``--no-site``) only the results are
    published and the site is left as it was, its ``pin.json`` naming the results it shows (one log
    line says so when they differ). ``executor``: where models are evaluated (``--executor``:
    local, local-cluster[:N], or a Dask scheduler address; :mod:`engine.batch.executor`).
    ``strict`` (``--strict``, what CI and the deploy run): a spec that fails its guards is not
    skipped but fails the build before any grid work, nothing published (:func:`refuse_unverified`)."""
    from engine.batch import executor as executors
    from engine.batch import inputs
    from engine.batch.grid import grid_file
    from engine.deploy.hardware import DEFAULT_ROOT as GPU_ROOT, load_gpus
    started = time.perf_counter()
    log = log or (lambda line: None)
    publish.claim(out)                     # a user's folder is refused before anything is read or written
    if lock_timeout is None:
        lock_timeout = publish.lock_timeout()
    grid_path = grid_file(corpus.root, grid_path)
    gpu_root = Path(gpu_root) if gpu_root else GPU_ROOT
    shared = shared_hash(corpus, grid_path, gpu_root)
    if not _checked_before(Path(out) / "results", shared, corpus.root):
        inputs.check_all(corpus, grid_path, gpu_root)   # fail early, before any work
    where = executors.parse(executor)
    if where.kind != "local":
        executors.distributed_module()         # the optional extra, checked before any work
    named = list(dict.fromkeys(corpus.find_model(m).model_id for m in models)) if models else list(corpus.models)
    hashes = {mid: model_hash(corpus, mid, shared) for mid in corpus.models}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with publish.lock(out, command, lock_timeout, log), contextlib.ExitStack() as stack:
        publish.recover(out, log)
        final = out / "results"
        previous = _read_previous(final, log)
        grid = grid_id(grid_path)
        if previous.models and previous.grid is not None and _grid_of(previous.grid) != grid:
            raise BuildError(f"{final}/ holds results over the grid {previous.grid}, not {grid}: use another --out "
                             f"for another grid (one results tree mixing grids would mix incomparable rows)")
        staging = stack.enter_context(publish.staged(out, "results"))
        report = Report(final)

        # -- what to build: named models are rebuilt unless unchanged; the rest of the tree is kept
        targets = list(corpus.models) if not models else \
            [m for m in corpus.models if m in named or m in previous.models] + \
            sorted(m for m in previous.models if m not in corpus.models)
        rows, entries, todo = {}, {}, []
        for mid in targets:
            entry, current = previous.models.get(mid), hashes.get(mid)
            ok, why = _intact(previous, mid) if entry else (False, "")
            if why:
                log(f"{why}: " + (f"rebuilding {mid}" if current else f"dropping {mid} (no longer in the corpus)"))
            if ok and (current == entry["hash"] or mid not in named):
                _carry(final, staging, mid)
                rows[mid] = previous.rows[mid]
                entries[mid] = {k: v for k, v in entry.items() if k != "stale"}
                if current == entry["hash"]:
                    report.reused.append(mid)
                else:
                    entries[mid]["stale"] = "inputs changed since it was built" if current else "no longer in the corpus"
                    report.stale.append(mid)
            elif current is not None:
                todo.append(mid)
        if models:       # a subset keeps the verdicts of models it did not look at
            report.skipped.update({m: e for m, e in previous.skipped.items() if m not in named and m in corpus.models})
        # a spec declaring why no evidence can verify it (transformers lacks its architecture) is
        # listed with that reason, never checked, evaluated or published, and --strict accepts it
        report.unverified = {m: spec.unverified for m, spec in corpus.models.items() if spec.unverified}
        for mid in [m for m in todo if m in report.unverified]:
            todo.remove(mid)
            log(f"unverified {mid}: {report.unverified[mid]} (declared in its spec; not published)")
        if report.stale:
            log(f"kept {len(report.stale)} model(s) not named as they were, marked stale in manifest.json: "
                + ", ".join(f"{m} ({entries[m]['stale']})" for m in report.stale)
                + " — rebuild them with --models or a full build")

        # every changed spec is walked and verified here first: a broken one fails the build before any
        # work (one line, nothing written); an unverified one is skipped; its row comes from this walk
        # (in the --jobs workers when there are several: the guards of 30 specs take seconds each)
        # (a lone model's halves run in two workers: PARTS); the contracts table is handed to the
        # pool first, so a worker starts while this process walks the specs
        split = _split(todo, previous, jobs) if where.kind == "local" else set()
        pool = _pool(stack, jobs, len(todo) + len(split), corpus) if where.kind == "local" else None
        early = [pool.submit(_corpus_wide_in_worker, "write_contracts", str(corpus.root), str(final), str(staging),
                             shared, str(gpu_root))] if pool is not None else []
        checks = {}
        for found in _check_all(corpus, list(todo), hashes, pool if len(todo) > 1 else None):
            mid = found["model_id"]
            if "errors" in found:
                report.skipped[mid] = found["errors"]
                todo.remove(mid)
                if not strict:      # (strict: refuse_unverified says it, below)
                    log(found["skip"])
                continue
            checks[mid] = found["check"]
            rows[mid] = found["row"]
        if strict and report.skipped:
            refuse_unverified(report.skipped, log)
        targets = [m for m in targets if m in rows]

        # -- evaluate: the slowest models first (as last time; else the largest), so the pool's tail is short
        todo.sort(key=lambda m: (-previous.models.get(m, {}).get("seconds", 0.0), -rows[m]["params_total"]))
        for table in ("deployments", "ops", "models", "fronts", "sizing", "disagg"):    # present even when empty: readers glob them
            (staging / table).mkdir(exist_ok=True)
        # the corpus-wide tables depend on no model's results: with a pool they are written by its
        # workers while the models evaluate (else here, after them)
        corpus_wide = [(write_contracts, ()), (write_variants, (targets,))]

        def variants_to_pool() -> None:      # queued behind the models' tasks (the longest path)
            early.append(pool.submit(_corpus_wide_in_worker, "write_variants", str(corpus.root), str(final),
                                     str(staging), shared, str(gpu_root), targets))
        results = _evaluate(corpus, todo, grid_path, gpu_root, staging, hashes, checks, jobs,
                            progress, len(targets), len(targets) - len(todo), where, pool,
                            variants_to_pool if pool is not None else None, split,
                            {m: e.get("seconds", 0.0) for m, e in previous.models.items()})
        if pool is not None:
            for future in early:        # (their errors are raised where their results are read)
                future.exception()
            pool.shutdown(wait=False)   # idle now: they exit (and free their memory) while the site renders
        for r in results:
            mid = r["model_id"]
            entries[mid] = {"hash": hashes[mid], "deployments": r["deployments"], "ops": r["ops"],
                            "points": r["points"], "seconds": r["seconds"], "partition": slug(mid),
                            "fronts": r["fronts"], "sizing": r["sizing"], "disagg": r["disagg"],
                            "sizing_seconds": r["sizing_seconds"],
                            "files": _file_records(staging, mid)}
            report.recomputed.append(mid)
            report.points += r["points"]

        # -- write the tables; every file's size and hash goes into the manifest
        contracts_digest, _ = [f.result() for f in early] if early else \
            [fn(corpus, final, staging, shared, gpu_root, *extra) for fn, extra in corpus_wide]
        ordered = [rows[m] for m in targets]
        write_parquet(_frame({k: [r[k] for r in ordered] for k in MODELS_SCHEMA}, MODELS_SCHEMA),
                      staging / "models.parquet")
        # the same rows as JSON (exact: integers, strings, lists, booleans): a command reads them
        # without importing polars (engine.batch.built; `list` answers in a fifth of the time)
        (staging / MODELS_JSON).write_text(compact_json([{k: r[k] for k in MODELS_SCHEMA} for r in ordered]))
        facts = {m: json.loads((staging / "models" / f"{slug(m)}.json").read_text())["landscape"] for m in targets}
        (staging / "landscape.json").write_text(json.dumps(
            landscape.tables(facts, rows, load_gpus(gpu_root)), separators=(",", ":")))
        manifest = {"schema_version": SCHEMA_VERSION, "shared_hash": shared, "grid": grid,
                    "contracts_hash": contracts_digest,
                    # the corpus as this build read it: a command finds an unchanged corpus (so
                    # unchanged model hashes) without loading it (engine.batch.built)
                    "corpus": {"digest": corpus_digest(corpus.root), "models": sorted(corpus.models)},
                    "models": {m: entries[m] for m in targets}, "skipped": report.skipped,
                    "unverified": report.unverified,
                    "unverified_listed": unverified_listed(corpus, report.unverified),
                    "files": {name: publish.file_digest(staging / name)
                              for name in ("models.parquet", MODELS_JSON, "contracts.json", "landscape.json",
                                           "variants.json", "variants.parquet")}}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        report.deployment_rows = sum(entries[m]["deployments"] for m in targets)
        report.op_rows = sum(entries[m]["ops"] for m in targets)

        # -- the site, from the staged results; then both are published in one journaled step
        publication = [("results", staging)]
        if site is not None:
            site_dir = stack.enter_context(publish.staged(out, "site"))
            site(staging, site_dir, site_progress)
            publish.pin_site(site_dir, staging)
            publication.append(("site", site_dir))
            report.site = out / "site"
        elif (out / "site").exists() and publish.site_pin(out / "site") != publish.results_digest(staging):
            # asked for no site: the site is left as it is, and its pin.json tells what it shows
            log(f"{out / 'site'}/ still shows the previous results (no site asked for): "
                f"`archledger site` renders it from the new ones")
        publish.publish(out, publication)
    report.seconds = time.perf_counter() - started
    return report


def _checked_before(final: Path, shared: str, corpus_root: Path) -> bool:
    """Whether the published results were built from exactly these inputs: their manifest records
    this shared hash (the grid, the GPU files and measured tables, the fusion tables, the engine's
    sources and libraries) and this corpus digest (every file under the corpus). Such a build ran
    :func:`engine.batch.inputs.check_all` on the same bytes with the same code and passed, so the
    check would pass again: a build with nothing changed skips it (parsing the measured tables was
    half of its time). Anything unreadable or different: False, and the files are checked."""
    try:
        manifest = json.loads((final / "manifest.json").read_text())
        return (manifest["shared_hash"] == shared
                and manifest["corpus"]["digest"] == corpus_digest(corpus_root))
    except Exception:       # noqa: BLE001 — absent, damaged or older: check the inputs
        return False


def check_model(corpus_root: str | None, model_id: str, spec_hash: str, corpus: Corpus | None = None) -> dict:
    """Walk and verify one changed spec: ``{model_id, check, row}`` (its verdict and models.parquet
    row) when verified, else ``{model_id, errors, skip}`` (the guard errors and the log line). A
    spec that does not evaluate raises its SpecError (the build stops before any grid work)."""
    corpus = corpus if corpus is not None else cached_corpus(corpus_root)
    model = corpus.models[model_id]
    ev = evaluate_spec(corpus, model)
    verdict = validate(corpus, model, ev)
    if not verdict.verified:
        return {"model_id": model_id, "errors": [f.one_line() for f in verdict.errors],
                "skip": _skip_line(corpus, model_id, verdict.errors)}
    check = verdict.as_dict()
    return {"model_id": model_id, "check": check, "row": model_row(ev, spec_hash, check)}


def _check_all(corpus: Corpus, todo: list[str], hashes: dict, pool) -> list[dict]:
    """:func:`check_model` for each model, in ``todo``'s order (in the pool's workers if given)."""
    if pool is None:
        return [check_model(str(corpus.root), mid, hashes[mid], corpus) for mid in todo]
    futures = [pool.submit(check_model, str(corpus.root), mid, hashes[mid]) for mid in todo]
    try:
        return [future.result() for future in futures]
    except BaseException:
        for future in futures:          # a spec that does not evaluate stops the build at once
            future.cancel()
        raise


def _pool(stack: contextlib.ExitStack, jobs: int | None, tasks: int, corpus: Corpus | None = None):
    """The --jobs worker processes (None when one is enough), closed with ``stack``. Spawned, not
    forked: a forked child inherits polars' thread pool mid-state and can hang. Workers die with
    this process (see worker_init), so a killed build leaves no orphan evaluating on. Each worker
    starts with the build's loaded ``corpus`` (unpickling it is ~40x faster than parsing the YAML),
    filed under the content digest :func:`cached_corpus` looks it up by. The pickle goes through a
    file, not the start-up pipe: a worker reads that pipe only after importing the engine, so half
    a megabyte in it held this process for as long at every worker start."""
    jobs = max(1, min(jobs or workers.default_workers(), tasks or 1))
    if jobs == 1:
        return None
    seed = None
    if corpus is not None:
        root = Path(corpus.root).resolve()
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="archledger-corpus-")))
        from engine.deploy import measured
        # with the measured kernel tables this process parsed (inputs.check_all): a worker would
        # parse them again, about a second of its start (each keeps its file's bytes: measured.adopt_tables)
        (folder / "corpus.pickle").write_bytes(pickle.dumps((corpus, measured.parsed_tables()),
                                                            protocol=pickle.HIGHEST_PROTOCOL))
        seed = ((str(root), corpus_digest(root)), str(folder / "corpus.pickle"))
    return stack.enter_context(ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                   initializer=worker_init, initargs=(os.getpid(), seed)))


def _evaluate(corpus: Corpus, todo: list[str], grid_path: Path, gpu_root: Path, staging: Path, hashes: dict,
              checks: dict, jobs: int | None, progress, total: int, done: int, where=None, pool=None,
              submitted=None, split: set[str] = frozenset(), previous_seconds: dict | None = None) -> list[dict]:
    """Run :func:`build_model` for each model: in this process, in the ``pool`` of --jobs worker
    processes, or on a Dask cluster (``where``, an :class:`engine.batch.executor.Executor`); the
    same files either way. ``submitted()``: called once the models' tasks are in the pool's queue;
    ``split``: the models run as two tasks in the pool (:func:`_split`); ``previous_seconds``: each
    model's seconds in the previous build (the chains' order, :mod:`engine.batch.families`)."""
    from engine.batch import executor as executors, families
    previous_seconds = previous_seconds or {}
    args = [(str(corpus.root), mid, str(grid_path), str(gpu_root), str(staging), hashes[mid], checks[mid])
            for mid in todo]
    results: list[dict] = []
    if progress:
        progress(done, total, 0, "")
    # each model of `split` runs as its two halves (PARTS) in the pool, the others as one task
    parts = {m: PARTS if pool is not None and m in split else ("all",) for m in todo}
    halves: dict[str, list[dict]] = defaultdict(list)

    def finished(result: dict) -> None:
        halves[result["model_id"]].append(result)
        if len(halves[result["model_id"]]) < len(parts[result["model_id"]]):
            return
        result = merge_parts(halves.pop(result["model_id"]))
        results.append(result)
        publish.fault("evaluate")
        if progress:
            progress(done + len(results), total, sum(r["points"] for r in results), result["model_id"])

    if where is not None and where.kind != "local":
        if todo:
            bundle = executors.make_bundle(corpus.root, gpu_root, grid_path, engine_digest())
            executors.run_dask(where, jobs, bundle, build_model, [(mid, (hashes[mid], checks[mid])) for mid in todo],
                               staging, engine_digest, finished)
        return results
    # a family's models one after the other in one process: what it keeps from the first answers
    # for the next (engine.batch.families); a model run as halves is two tasks of its own
    by_id = {a[1]: a for a in args}
    chained = families.chains([m for m in todo if parts[m] == ("all",)], lambda m: corpus.models[m].family,
                              lambda m: previous_seconds.get(m, 0.0))
    if pool is None:
        for chain in chained:
            for mid in chain:
                finished(build_model(*by_id[mid], corpus=corpus))
        return results
    futures = ([pool.submit(_build_model_in_worker, *by_id[m], part=part) for m in todo if parts[m] != ("all",)
                for part in parts[m]]
               + [pool.submit(_build_chain_in_worker, [by_id[m] for m in chain]) for chain in chained])
    if submitted is not None:
        submitted()
    try:
        for future in as_completed(futures):
            done_now = future.result()        # a chain's results, or one half's
            for result in done_now if isinstance(done_now, list) else [done_now]:
                finished(result)
    except BaseException:
        for future in futures:          # a failure stops the build: do not finish the others first
            future.cancel()
        raise
    return results


def worker_init(parent: int, seed: tuple | None = None) -> None:
    """In each --jobs worker: die when the build process dies, however it dies
    (:func:`engine.batch.lifeline.die_with`); collect rarely; skip the interpreter's teardown."""
    global _IN_WORKER
    _IN_WORKER = parent
    if seed is not None:             # (key, the pickled corpus's file: _pool)
        from engine.deploy import measured
        _CORPORA[seed[0]], parsed = pickle.loads(Path(seed[1]).read_bytes())
        measured.adopt_tables(parsed)
    gc.freeze()                      # the modules and the corpus live as long as the worker (each model's
                                     # evaluation freezes the heap again: collector.model_heap)
    collector.tune()                 # (already so when spawned by the archledger command: site_builder.cli)
    lifeline.die_with(parent)
    # When the pool stops a worker its heap is garbage: skip the interpreter's teardown, which
    # frees every cached sympy object one by one (about 9 s per build worker after the whole
    # corpus, while the site renders beside it). multiprocessing's exit finalizers (queue
    # flushes) run first: this one has the lowest priority, so it runs last.
    import multiprocessing.util
    multiprocessing.util.Finalize(None, _end_worker, exitpriority=-1000)


def _end_worker() -> None:
    """A pool worker's last step (see :func:`worker_init`): flush what it printed, then exit 0
    without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _build_chain_in_worker(chain: list[tuple]) -> list[dict]:
    """:func:`build_model` of each model of a family chain (:func:`engine.batch.families.chains`),
    in order, in this worker."""
    return [_build_model_in_worker(*args) for args in chain]


def _build_model_in_worker(*args, part: str = "all") -> dict:
    if os.environ.get(publish.FAULT_ENV) == "worker" and _IN_WORKER == os.getppid():
        os.kill(_IN_WORKER, signal.SIGKILL)     # test hook: the build dies while this worker evaluates on
        time.sleep(60)
    return build_model(*args, part=part)


def progress_printer(what: str, stream=sys.stderr):
    """``show(done, total, label)``: a one-line progress bar on a terminal, a line per 10% otherwise
    (the build's models and the site's page groups both report through it)."""
    shown = {"step": -1}

    def show(done: int, total: int, label: str = "") -> None:
        if stream.isatty():
            width = 24
            filled = int(width * done / max(total, 1))
            stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what}  {label[:48]:48s}")
            if done >= total:
                stream.write("\n")
        else:
            step = int(10 * done / max(total, 1))
            if step != shown["step"] or done >= total:
                shown["step"] = step
                stream.write(f"{what}: {done}/{total} {label}\n")
        stream.flush()
    return show


def _model_progress(stream=sys.stderr):
    """The build's progress: models done, grid points so far, the model just finished."""
    bar = progress_printer("models", stream)
    return lambda done, total, points, model: bar(done, total, f"{points:,} points  {model}")


def write_error(exc: BaseException) -> int | None:
    """The errno of an error that means "cannot write the output" (polars reports I/O errors as
    ``... (os error 28)`` in its own exception types), else None."""
    if isinstance(exc, shutil.Error):     # copytree collects its errors as text
        found = re.search(r"\[Errno (\d+)\]", str(exc))
        return int(found[1]) if found and int(found[1]) in WRITE_ERRORS else None
    if isinstance(exc, OSError):
        return exc.errno if exc.errno in WRITE_ERRORS else None
    if type(exc).__module__.startswith("polars"):
        found = re.search(r"os error (\d+)", str(exc))
        if found and int(found[1]) in WRITE_ERRORS:
            return int(found[1])
    return None


def run(args, site=None) -> int:
    """``archledger build``: evaluate the specs over a grid into OUT/results, render OUT/site from them
    (when ``site`` is given), and publish both together. Exit 0, or 2 after one line on stderr.

    Rules:

    * Without --models, every model of the corpus is built; a model whose inputs (spec, evidence,
      components, quant schemes, GPUs, fusion tables, grid, engine) did not change is carried over
      without re-evaluation; models no longer in the corpus are dropped.
    * --models A B rebuilds A and B (if changed) and keeps every other model of OUT/results as it
      was: carried over unchanged; one whose inputs changed since is kept and marked stale in
      manifest.json. A subset never discards what it did not rebuild.
    * OUT/results holds one grid: --grid naming another grid file than the one OUT/results was built
      over is an error (use another --out) unless OUT/results holds no model.
    * A spec that fails verification (or whose evidence file is missing) is skipped with one line and
      published nowhere; with --strict (CI and the deploy) it fails the build instead: one line per
      such spec, exit 2, nothing published.
    * Previous results are carried only if their files match the size and SHA-256 the manifest
      records; a damaged model is rebuilt (one line), a garbage manifest counts as no results.
    * Results and site are published together and only when complete: a failed, killed or full-disk
      build leaves the previous ones as they were; the next command on OUT finishes or discards what
      an interrupted one left. Two commands on one OUT take turns (OUT/.lock): the second waits,
      saying for whom, up to ARCHLEDGER_LOCK_TIMEOUT seconds (default 1800).
    * OUT must be absent, empty or an ArchLedger output, and a results/ or site/ in it absent, empty
      or carrying ArchLedger's manifest: publishing replaces them whole, so a folder holding a user's
      files is refused (one line) and left as it was.

    ``args``: out, models, grid, jobs, quiet, corpus (and optionally lock_timeout, seconds, and
    executor, ``--executor``). ``site``:
    None (``--no-site``: results only, the site is left as it was), or ``site(results_dir, site_dir,
    progress)`` rendering the whole site from ``results_dir`` into the empty ``site_dir`` (e.g.
    :func:`site_builder.render.render_pages`); it is called with ``progress=None`` and shows its own.
    """
    out = Path(args.out)
    quiet = getattr(args, "quiet", False)
    try:
        from engine.batch.executor import parse
        parse(getattr(args, "executor", None))          # a bad --executor is one line before any reading
        publish.claim(out)                              # so are a user's folder and a bad lock timeout
        lock_timeout = getattr(args, "lock_timeout", None)
        lock_timeout = publish.lock_timeout() if lock_timeout is None else lock_timeout
        corpus = load_corpus(args.corpus)
        report = build(corpus, out, args.models, getattr(args, "grid", None), getattr(args, "gpus_root", None),
                       getattr(args, "jobs", None),
                       None if quiet else _model_progress(), log=lambda line: print(line, file=sys.stderr),
                       site=site, lock_timeout=lock_timeout,
                       executor=getattr(args, "executor", None), strict=getattr(args, "strict", False))
    except SpecError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    except (BuildError, publish.PublishError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except Exception as exc:
        code = write_error(exc)
        where = getattr(exc, "filename", None)
        if code is None or (where and not Path(where).resolve().is_relative_to(out.resolve())):
            raise
        print(f"error: {str(args.out).rstrip('/')}/: cannot write ({os.strerror(code)}) — the previous results "
              f"and site are unchanged; free space or choose another --out", file=sys.stderr)
        return 2
    stale = f", {len(report.stale)} kept stale" if report.stale else ""
    print(f"wrote {report.results}: {len(report.recomputed)} models evaluated, {len(report.reused)} reused{stale}; "
          f"{report.deployment_rows:,} deployment rows, {report.op_rows:,} op rows, "
          f"{report.points:,} new grid points in {report.seconds:.1f} s")
    if report.site is not None:
        print(f"wrote {report.site} ({sum(1 for _ in report.site.rglob('index.html'))} pages)")
    return 0
