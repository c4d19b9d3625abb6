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

Here: the build's steps (:func:`build`, each step a named function below it) and the command
(:func:`run`). One model's work is :mod:`engine.batch.model_build` (``check_model``,
``build_model``); where it runs (this process, --jobs workers, Dask) is :mod:`engine.batch.tasks`;
the corpus-wide tables (contracts, variants) are :mod:`engine.batch.corpus_tables`; the inputs'
hashes are :mod:`engine.batch.hashing`.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


from engine.batch import landscape, publish, uptodate
from engine.batch.built import MODELS_JSON  # models.parquet's rows as JSON: what commands read without polars
from engine.batch.corpus_tables import _corpus_wide_in_worker, write_contracts, write_variants
from engine.batch.hashing import (  # model_hash, shared_hash re-exported: the build's hashes live in one light module
    SCHEMA_VERSION, corpus_digest, model_hash, shared_hash)
from engine.batch.jsontext import compact_json
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
from engine.batch.tasks import _check_all, _evaluate, _pool, _split
from engine.language.corpus import Corpus, load_corpus
from engine.language.errors import SpecError


@dataclass
class Report:
    """What a build did: models recomputed and reused, rows written, seconds."""

    results: Path
    recomputed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)   # model -> its guard errors
    unverified: dict[str, str] = field(default_factory=dict)      # model -> why it cannot be verified (its spec's `unverified:`)
    stale: list[str] = field(default_factory=list)     # kept by a subset build although their inputs changed
    #: model -> the exact twin whose files it was written from (engine.batch.twins), among the recomputed
    followed: dict[str, str] = field(default_factory=dict)
    site: Path | None = None                            # the published site, when one was rendered
    deployment_rows: int = 0
    op_rows: int = 0
    points: int = 0
    seconds: float = 0.0



class BuildError(Exception):
    """The build cannot run as asked (e.g. another grid than ``--out``'s results): one line, exit 2."""


#: errno values that mean "the output cannot be written" (reported in one line, exit 2).
WRITE_ERRORS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM}


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



@dataclass
class _Run:
    """What the steps of one :func:`build` share: its inputs, where it writes, its report and log."""

    corpus: Corpus
    final: Path                     # OUT/results: the published results (read, never written)
    staging: Path                   # the staged results tree this build writes
    grid_path: Path
    gpu_root: Path
    shared: str                     # shared_hash: the grid, GPUs, fusion tables, engine
    hashes: dict                    # model id -> its input hash (model_hash)
    corpus_digest: str              # corpus_digest at the build's start
    report: Report
    log: Callable[[str], None]


def build(corpus: Corpus, out: Path, models: list[str] | None = None, grid_path: Path | None = None,
          gpu_root: Path | None = None, jobs: int | None = None, progress=None, log=None, site=None,
          site_progress=None, lock_timeout: float | None = None, command: str = "archledger build",
          executor: str | None = None, strict: bool = False, site_sources: str | None = None) -> Report:
    """Evaluate (or carry over) the models' partitions into a staged results tree, render the staged
    site from it when ``site`` is given, then publish both together (:mod:`engine.batch.publish`).

    Invariants: ``out`` is absent, empty or an ArchLedger output (:func:`engine.batch.publish.claim`,
    else one line and nothing touched); nothing under ``out/results`` or ``out/site`` changes until
    the publication commits;
    a results tree holds one grid; a model is carried over only if its files match the sizes and
    SHA-256 its manifest records; a subset (``models``) never discards a model it did not rebuild
    (the rules are in :func:`run`). ``site(results_dir, site_dir, progress, workers=pool)`` renders into the empty
    ``site_dir`` and is published with the results; without it (``--no-site``) only the results are
    published and the site is left as it was, its ``pin.json`` naming the results it shows (one log
    line says so when they differ). ``executor``: where models are evaluated (``--executor``:
    local, local-cluster[:N], or a Dask scheduler address; :mod:`engine.batch.executor`).
    ``strict`` (``--strict``, what CI and the deploy run): a spec that fails its guards is not
    skipped but fails the build before any grid work, nothing published (:func:`refuse_unverified`).

    The steps, in order: check the inputs; under the output's lock, read the previous results
    (:func:`_previous_results`), decide what to carry and what to evaluate (:func:`_plan`), walk and
    verify the changed specs (:func:`_verify`), evaluate them (:func:`_evaluate_changed`), write the
    corpus-wide tables and the manifest (:func:`_write_tables`), render the site and publish
    (:func:`_publish`)."""
    from engine.batch import executor as executors
    from engine.batch import inputs
    from engine.batch.grid import grid_file
    from engine.deploy.hardware import DEFAULT_ROOT as GPU_ROOT
    started = time.perf_counter()
    log = log or (lambda line: None)
    publish.claim(out)                     # a user's folder is refused before anything is read or written
    if lock_timeout is None:
        lock_timeout = publish.lock_timeout()
    grid_path = grid_file(corpus.root, grid_path)
    gpu_root = Path(gpu_root) if gpu_root else GPU_ROOT
    shared = shared_hash(corpus, grid_path, gpu_root)
    digest = corpus_digest(corpus.root)     # the corpus's bytes at the start: what the manifest records
    if not _checked_before(Path(out) / "results", shared, digest):
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
        previous, grid = _previous_results(final, grid_path, log)
        staging = stack.enter_context(publish.staged(out, "results"))
        report = Report(final)
        run = _Run(corpus, final, staging, grid_path, gpu_root, shared, hashes, digest, report, log)
        targets, rows, entries, todo = _plan(run, models, named, previous)

        # every changed spec is walked and verified here first: a broken one fails the build before any
        # work (one line, nothing written); an unverified one is skipped; its row comes from this walk
        # (in the --jobs workers when there are several: the guards of 30 specs take seconds each)
        # (a lone model's halves: PARTS, its grid half in this process); the contracts table is handed to the
        # pool first, so a worker starts while this process walks the specs
        split = _split(todo, previous, jobs, lambda m: corpus.models[m].family) if where.kind == "local" else set()
        pool = _pool(stack, jobs, len(todo) + len(split), corpus, home=bool(split)) if where.kind == "local" else None
        early = [pool.submit(_corpus_wide_in_worker, "write_contracts", str(corpus.root), str(final), str(staging),
                             shared, str(gpu_root))] if pool is not None else []
        checks = _verify(run, todo, pool, rows, strict)
        targets = [m for m in targets if m in rows]
        _evaluate_changed(run, todo, targets, rows, entries, previous, pool, early, split, where, jobs, progress,
                          checks, keep=site is not None, prepare=getattr(site, "prepare", None))
        _write_tables(run, grid, targets, rows, entries, early)
        _publish(run, out, stack, site, site_progress, pool)
        uptodate.record(out, site_sources if site is not None else None)
    report.seconds = time.perf_counter() - started
    return report


def _previous_results(final: Path, grid_path: Path, log) -> tuple[Previous, str]:
    """The published results (:func:`engine.batch.previous._read_previous`) and this build's grid id;
    a :class:`BuildError` when they hold models over another grid."""
    previous = _read_previous(final, log)
    grid = grid_id(grid_path)
    if previous.models and previous.grid is not None and _grid_of(previous.grid) != grid:
        raise BuildError(f"{final}/ holds results over the grid {previous.grid}, not {grid}: use another --out "
                         f"for another grid (one results tree mixing grids would mix incomparable rows)")
    return previous, grid


def _plan(run: _Run, models: list[str] | None, named: list[str], previous: Previous
          ) -> tuple[list[str], dict, dict, list[str]]:
    """What to build: named models are rebuilt unless unchanged; the rest of the tree is kept.
    Carries the kept models' files into the staging tree. Returns the models the results will
    list (``targets``), the rows and manifest entries known so far (the carried models') and the
    models to walk and evaluate (``todo``); fills the report's reused, stale, skipped and unverified."""
    corpus, final, staging, hashes, report, log = run.corpus, run.final, run.staging, run.hashes, run.report, run.log
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
    return targets, rows, entries, todo


def _verify(run: _Run, todo: list[str], pool, rows: dict, strict: bool) -> dict:
    """Walk and verify each model of ``todo`` (:func:`engine.batch.tasks._check_all`, in the pool
    when there are several): a verified one gets its row in ``rows`` and its verdict in the returned
    checks; one that fails its guards leaves ``todo`` and is logged as skipped, or with ``strict``
    stops the build (:func:`refuse_unverified`)."""
    report, log = run.report, run.log
    checks = {}
    for found in _check_all(run.corpus, list(todo), run.hashes, pool if len(todo) > 1 else None):
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
    return checks


def _evaluate_changed(run: _Run, todo: list[str], targets: list[str], rows: dict, entries: dict,
                      previous: Previous, pool, early: list, split: set[str], where, jobs: int | None, progress,
                      checks: dict, keep: bool = False, prepare=None) -> None:
    """Evaluate the models of ``todo`` into the staging tree (:func:`engine.batch.tasks._evaluate`)
    and record each one's manifest entry; with a pool, queue the variants table behind them, and
    ``prepare`` (the site callable's, a picklable function of no argument: the site render readies
    a worker with it) behind that. The pool is shut down when its work is done, unless ``keep``
    (the site renders in it next)."""
    corpus, staging, hashes, report = run.corpus, run.staging, run.hashes, run.report
    # -- evaluate: the slowest models first (as last time; else the largest), so the pool's tail is short
    todo.sort(key=lambda m: (-previous.models.get(m, {}).get("seconds", 0.0), -rows[m]["params_total"]))
    for table in ("deployments", "ops", "models", "fronts", "sizing", "disagg"):    # present even when empty: readers glob them
        (staging / table).mkdir(exist_ok=True)
    # the corpus-wide tables depend on no model's results: with a pool they are written by its
    # workers while the models evaluate (else here, after them: _write_tables)

    def variants_to_pool() -> None:      # queued behind the models' tasks (the longest path)
        early.append(pool.submit(_corpus_wide_in_worker, "write_variants", str(corpus.root), str(run.final),
                                 str(staging), run.shared, str(run.gpu_root), targets))
        if prepare is not None and keep:        # a worker that would wait for the home half readies the site's
            pool.submit(prepare)
    results = _evaluate(corpus, todo, run.grid_path, run.gpu_root, staging, hashes, checks, jobs,
                        progress, len(targets), len(targets) - len(todo), where, pool,
                        variants_to_pool if pool is not None else None, split,
                        {m: e.get("seconds", 0.0) for m, e in previous.models.items()})
    if pool is not None:
        for future in early:        # (their errors are raised where their results are read)
            future.exception()
        if not keep:
            pool.shutdown(wait=False)   # idle now: they exit (and free their memory)
    for r in results:
        mid = r["model_id"]
        entries[mid] = {"hash": hashes[mid], "deployments": r["deployments"], "ops": r["ops"],
                        "points": r["points"], "seconds": r["seconds"], "partition": slug(mid),
                        "fronts": r["fronts"], "sizing": r["sizing"], "disagg": r["disagg"],
                        "sizing_seconds": r["sizing_seconds"],
                        "files": _file_records(staging, mid)}
        report.recomputed.append(mid)
        report.points += r["points"]
        if "follows" in r:
            report.followed[mid] = r["follows"]


def _write_tables(run: _Run, grid: str, targets: list[str], rows: dict, entries: dict, early: list) -> None:
    """Write the tables; every file's size and hash goes into the manifest: the corpus-wide tables
    (the pool's results in ``early``, else written here), models.parquet and its JSON rows,
    landscape.json, and manifest.json last."""
    from engine.deploy.hardware import load_gpus
    corpus, final, staging, shared, gpu_root, report = \
        run.corpus, run.final, run.staging, run.shared, run.gpu_root, run.report
    corpus_wide = [(write_contracts, ()), (write_variants, (targets,))]
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
                "corpus": {"digest": run.corpus_digest, "models": sorted(corpus.models)},
                "models": {m: entries[m] for m in targets}, "skipped": report.skipped,
                "unverified": report.unverified,
                "unverified_listed": unverified_listed(corpus, report.unverified),
                "files": {name: publish.file_digest(staging / name)
                          for name in ("models.parquet", MODELS_JSON, "contracts.json", "landscape.json",
                                       "variants.json", "variants.parquet")}}
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    report.deployment_rows = sum(entries[m]["deployments"] for m in targets)
    report.op_rows = sum(entries[m]["ops"] for m in targets)


def _publish(run: _Run, out: Path, stack: contextlib.ExitStack, site, site_progress, pool=None) -> None:
    """The site, from the staged results; then both are published in one journaled step. Without
    ``site`` only the results are published (one log line when the site then shows older ones).
    ``pool``: the build's --jobs workers, idle now and handed to the site render for its page groups
    (``site(..., workers=pool)``): warm processes (the engine and polars imported), where a render
    would start its own; shut down once the site is rendered."""
    staging, report = run.staging, run.report
    publication = [("results", staging)]
    if site is not None:
        site_dir = stack.enter_context(publish.staged(out, "site"))
        site(staging, site_dir, site_progress, workers=pool)
        if pool is not None:
            pool.shutdown(wait=False)   # idle now: they exit (and free their memory) while publishing
        publish.pin_site(site_dir, staging)
        publication.append(("site", site_dir))
        report.site = out / "site"
    elif (out / "site").exists() and publish.site_pin(out / "site") != publish.results_digest(staging):
        # asked for no site: the site is left as it is, and its pin.json tells what it shows
        run.log(f"{out / 'site'}/ still shows the previous results (no site asked for): "
                f"`archledger site` renders it from the new ones")
    publish.publish(out, publication)


def _checked_before(final: Path, shared: str, digest: str) -> bool:
    """Whether the published results were built from exactly these inputs: their manifest records
    this shared hash (the grid, the GPU files and measured tables, the fusion tables, the engine's
    sources and libraries) and this corpus digest (every file under the corpus, ``digest``). Such a build ran
    :func:`engine.batch.inputs.check_all` on the same bytes with the same code and passed, so the
    check would pass again: a build with nothing changed skips it (parsing the measured tables was
    half of its time). Anything unreadable or different: False, and the files are checked."""
    try:
        manifest = json.loads((final / "manifest.json").read_text())
        return (manifest["shared_hash"] == shared
                and manifest["corpus"]["digest"] == digest)
    except Exception:       # noqa: BLE001 — absent, damaged or older: check the inputs
        return False


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


def run(args, site=None, site_sources: str | None = None) -> int:
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
    progress, workers=None)`` rendering the whole site from ``results_dir`` into the empty ``site_dir``
    (e.g. :func:`site_builder.render.render_staged`); it is called with ``progress=None`` and shows its
    own, and with ``workers`` the build's idle --jobs workers (an executor; None without a pool).
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
                       executor=getattr(args, "executor", None), strict=getattr(args, "strict", False),
                       site_sources=site_sources)
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
    kept = f", {len(report.stale)} kept stale" if report.stale else ""
    if report.followed:       # written from an exact twin's files (engine.batch.twins): which from which
        kept += f", {len(report.followed)} of them as exact twins (" + ", ".join(
            f"{m} as {lead}" for m, lead in sorted(report.followed.items())) + ")"
    print(f"wrote {report.results}: {len(report.recomputed)} models evaluated, {len(report.reused)} reused{kept}; "
          f"{report.deployment_rows:,} deployment rows, {report.op_rows:,} op rows, "
          f"{report.points:,} new grid points in {report.seconds:.1f} s")
    if report.site is not None:
        print(f"wrote {report.site} ({sum(1 for _ in report.site.rglob('index.html'))} pages)")
    return 0
