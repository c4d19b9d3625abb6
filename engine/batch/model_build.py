"""One model's work in a build: walk and verify a changed spec, then evaluate it over the grid into its files.

Layer: engine.batch. :func:`check_model` walks and verifies one spec (its verdict and models.parquet
row); :func:`build_model` evaluates it over the grid and writes its partitions (deployments, ops,
the deploy page's formulas, fronts and sizing, the model document, the playground picks) under the
staged results tree. Both run where :mod:`engine.batch.tasks` puts them: in the build's process, in a
--jobs worker, or on a Dask worker (:mod:`engine.batch.executor`), with the same files either way.

Invariants: a model writes only below its own partitions and files (``model=<org--name>``,
``<org--name>.json``), so models and the two halves of one model (:data:`PARTS`) never write the same
file; nothing NaN or negative reaches a table (engine.language.finite); a process reads a corpus
once per content of its files (:func:`cached_corpus`), so an edited corpus is read again.
"""
from __future__ import annotations

import time
from pathlib import Path

from engine.batch import collector
from engine.batch.jsontext import compact_json
from engine.batch.hashing import corpus_digest, evidence_files
from engine.batch.model_row import model_row, slug
from engine.batch.parquet_writer import GRID_OPTIONS, PARTITION_ORDER, SERVING_OPTIONS, _frame, write_parquet
from engine.batch.schema import DEPLOYMENTS_SCHEMA, DERIVED, OPS_SCHEMA, without_copies
from engine.language.api import evaluate_spec
from engine.language.corpus import Corpus, load_corpus
from engine.verify.validate import validate


#: The build's corpus a --jobs worker was seeded with (engine.batch.tasks.worker_init: unpickled,
#: ~40x faster than parsing), under the folder and the content digest the build computed.
_CORPORA: dict[tuple[str, str], Corpus] = {}


def cached_corpus(root: str | None) -> Corpus:
    """The corpus at ``root`` (default: the repository's), resolved: the seeded one where its files
    still have the digest it was seeded under, else :func:`load_corpus`, which keeps each corpus it
    loaded by its files' bytes (a --jobs worker evaluates many models, and parsing the YAML, about
    2.5 s, dominated a small model's work; an edited corpus is read again)."""
    from engine.language.corpus import DEFAULT_ROOT
    path = (Path(root) if root else DEFAULT_ROOT).resolve()
    if _CORPORA:
        seeded = _CORPORA.get((str(path), corpus_digest(path)))
        if seeded is not None:
            return seeded
    return load_corpus(path)


#: The two halves of a model's work (:func:`build_model`'s ``part``): the grid (deployments, ops and
#: the deploy page's formulas) and the rest (fronts and sizing, the model document, the playground
#: picks). They write disjoint files; a build with fewer models to evaluate than workers runs the
#: halves of each model the previous build timed at :data:`SPLIT_SECONDS` or more in parallel (each
#: walks the spec and compiles its own structures), else a model is one task (the sizing step then
#: reuses the grid's structures).
PARTS = ("grid", "extras")


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
    """:func:`build_model`'s work: a whole model whose inputs equal, up to its identity, a model this
    process evaluated into the same ``staging`` is written from that model's files
    (:mod:`engine.batch.twins`: the same bytes); any other is evaluated, its config reads recorded
    so a later model may follow it."""
    from engine.batch import twins
    from engine.language import config_reads
    started = time.perf_counter()
    corpus = corpus if corpus is not None else cached_corpus(corpus_root)
    model = corpus.models[model_id]
    key = twins.spec_key(corpus, model, grid_path, gpu_root) if part == "all" else None
    leader = twins.matches(key, corpus, model, staging)
    counts = _follow(leader, corpus, model, staging, verification) if leader is not None else None
    if counts is None:
        with config_reads.recording(model.snapshot) as reads:
            counts = _evaluate_model(corpus, model_id, grid_path, gpu_root, staging, verification, part)
        twins.remember(key, model, reads, counts, staging)
    counts["seconds"] = round(time.perf_counter() - started, 3)
    return counts


def _follow(leader, corpus: Corpus, model, staging: str, verification: dict | None) -> dict | None:
    """``model``'s files as ``leader``'s with its id (:func:`engine.batch.twins.follow`), and its own
    model document (it names the model throughout: evaluated as ever); None when the leader's files
    cannot be relabelled (then ``model`` is evaluated)."""
    from engine.batch import twins
    from engine.batch.export import model_document
    counts = twins.follow(leader, model.model_id, staging)
    if counts is not None:
        (Path(staging) / "models").mkdir(exist_ok=True)
        (Path(staging) / "models" / f"{slug(model.model_id)}.json").write_text(
            compact_json(model_document(evaluate_spec(corpus, model), verification)))
    return counts


def _evaluate_model(corpus: Corpus, model_id: str, grid_path: str | None, gpu_root: str | None, staging: str,
                    verification: dict | None, part: str) -> dict:
    """Evaluate one model over the grid (its ``part``) and write its files under ``staging``; its counts."""
    from engine.batch import grid_eval
    from engine.language import finite
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.structure_cache import StructureCache
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
            write_parquet(frame, folder / "part.parquet", **GRID_OPTIONS)
        (Path(staging) / "formulas").mkdir(exist_ok=True)
        from engine.batch.deploy_export import document_json     # compact_json's text, each step row encoded once
        (Path(staging) / "formulas" / f"{name}.json").write_text(document_json(formulas))
        counts.update(deployments=len(deployments["model_id"]), ops=len(ops["model_id"]), points=points)
    if part in ("all", "extras"):      # plan's search per sizing scenario: fronts/ and sizing/ (docs/results.md)
        counts.update(fronts.write_model(ev, grid_path, gpu_root, Path(staging), name,
                                         lambda columns, schema, path: write_parquet(_frame(columns, schema), path,
                                                                                     **SERVING_OPTIONS),
                                         cache))
        del cache
        from engine.batch.export import model_document
        (Path(staging) / "models").mkdir(exist_ok=True)
        (Path(staging) / "models" / f"{name}.json").write_text(
            compact_json(model_document(ev, verification)))
        (Path(staging) / "playground").mkdir(exist_ok=True)      # the playground's live picks (docs/results.md)
        (Path(staging) / "playground" / f"{name}.json").write_text(
            compact_json(model_playground(ev, sites=sites, gpus=load_gpus(gpu_root))))
    return counts


def merge_parts(halves: list[dict]) -> dict:
    """One model's counts from its :data:`PARTS` (``seconds``: their sum, the work the next build
    orders models by)."""
    merged = {k: v for half in halves for k, v in half.items()}
    merged["seconds"] = round(sum(half["seconds"] for half in halves), 3)
    return merged


def _skip_line(corpus: Corpus, model_id: str, errors: list) -> str:
    base = corpus.root.parent
    missing = [p for p in evidence_files(corpus, corpus.models[model_id]) if not p.exists()]
    if missing:
        names = ", ".join(str(p.relative_to(base)) if p.is_relative_to(base) else str(p) for p in missing)
        return (f"skip {model_id}: evidence {names} missing — skipped as unverified "
                f"(record it: archledger snapshot {model_id})")
    return f"skip {model_id}: not verified ({len(errors)} guard errors; run `archledger validate {model_id}`)"


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
