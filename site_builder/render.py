"""Render build/site/ from build/results/: a pure function of the results, written atomically.

Layer: site_builder. Pages (stable URLs): ``/`` gallery, ``/models/<org--name>/`` inspector,
``/models/<org--name>/deploy/`` deployments (state in the query string), ``/compare/?a=&b=``,
``/components/`` and ``/components/<name>/`` (with graph diffs under ``/components/diff/``),
``/methodology/<page>/`` (Markdown, raw HTML off), ``/playground/`` (what-if variants, never in
the gallery), ``/downloads/``. Client data under ``/data/``.
Templates are autoescaped; numbers arrive with their formula; nothing here evaluates a spec.

This module orchestrates: the page groups, their keys and carrying (:mod:`site_builder.incremental`),
the render workers, and publishing. Each page group's writer lives with its page: the gallery,
inspector, compare and methodology pages in :mod:`site_builder.pages`, deployments in
:mod:`site_builder.deploy_pages`, sizing in :mod:`site_builder.sizing`, components in
:mod:`site_builder.component_pages`, the playground in :mod:`site_builder.playground_page`, the
landscape and downloads in :mod:`site_builder.landscape` and :mod:`site_builder.downloads`; the
files are written through :class:`site_builder.writer.Site` with the templates' environment
(:mod:`site_builder.templating`) and the checkout's sources (:mod:`site_builder.sources`).
Invariant: every group writes only its own files, so a group rendered in a worker, in this process
or carried from the published site gives the same site.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import json
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from engine.batch import collector, lifeline, publish
from engine.batch.workers import default_workers
from site_builder import downloads, landscape, pages, sizing
from site_builder.component_pages import _components, _components_inputs
from site_builder.data import Results, slug
from site_builder.deploy_pages import _SCHEMA_DOCS, _deploy, _deploy_shared, _schema_docs
from site_builder.incremental import (SITE_MANIFEST, SITE_MANIFEST_VERSION, _carry, _code_hash, _hash,
                                      _previous_groups, _results_inputs, _vouched)
from site_builder.pages import _compare, _gallery, _methodology, _model
from site_builder.playground_page import _playground, _playground_data, _playground_key
from site_builder.sources import _copy_static, _repo_text, static_assets
from site_builder.writer import Site, _csv
from site_builder.templating import environment


def render_pages(results_dir: Path, site_dir: Path, progress=None, previous: Path | None = None,
                 workers=None) -> None:
    """Render the whole site from ``results_dir`` into the empty folder ``site_dir`` (created if
    absent), ending with ``site-manifest.json`` and ``pin.json`` (which results it shows). Writes
    nowhere else, publishes nothing: ``archledger build`` calls it on its staged results and
    publishes both together. ``progress(done, total, label)`` is called after each page group.

    Incremental: the site is rendered in page groups (static files; the gallery; each model's
    inspector and deployment pages and data; compare; components; methodology; downloads), each
    keyed by a hash of its inputs (the renderer's code, templates and static files; the results
    manifest's entries of the models it shows; the docs it publishes). ``site-manifest.json``
    records each group's key and the size and SHA-256 of each file it wrote. A group whose key
    matches the one recorded in the published site ``previous`` (and whose files there are intact)
    is carried into ``site_dir`` as hard links instead of being rendered again; the published
    site is never written in place, so the staged folder is still published whole.

    ``workers``: an executor of idle processes to render the model groups in (a build hands over
    its --jobs workers: :func:`engine.batch.results._publish`), used for any number of groups in
    place of the render's own pool (:func:`_render_pool`); it is not shut down here."""
    results = Results.load(results_dir)
    assets, static_digest = static_assets()
    env = environment(assets)
    staging = Path(site_dir)
    staging.mkdir(parents=True, exist_ok=True)
    site = Site(staging, env)
    code = _code_hash(static_digest)
    per_model, corpus_wide = _results_inputs(results)
    docs = [(name, _repo_text(path)) for name, path, _ in pages.DOCS]   # (pages.DOCS: tests patch it there)
    whole = _hash(code, corpus_wide) if corpus_wide else None
    components = _components_inputs(results)
    groups = [("static", _hash(static_digest), lambda: _copy_static(site, assets)),
              ("gallery", whole, lambda: _gallery(site, results)),
              ("deploy-shared", whole, lambda: _deploy_shared(site, results))]
    for model_id in results.models["model_id"]:
        key = _hash(code, model_id, per_model[model_id]) if model_id in per_model else None
        groups.append((model_id, key, lambda m=model_id: _model_group(site, results, m)))
    groups += [("compare", whole, lambda: _compare(site, results)),
               ("landscape", whole, lambda: landscape.render(site, results, _csv)),
               # keyed by what its pages show, not by every model: a one-spec edit seldom changes it
               ("components", _hash(code, components) if corpus_wide else None, lambda: _components(site, components)),
               ("playground", _playground_key(code, results), lambda: _playground(site, results, previous)),
               ("methodology", _hash(code, docs), lambda: _methodology(site, dict(docs))),
               ("downloads", None, lambda: downloads.render(site, results, _csv))]   # lists every group's files: always redone
    before = _previous_groups(previous)
    vouched = _vouched(previous) if before else {}
    record: dict[str, dict] = {}

    def keyed(label: str, key: str | None) -> bool:
        """The previous site recorded ``label`` under this very key: it is carried if its files are intact."""
        old = before.get(label)
        return key is not None and isinstance(old, dict) and old.get("key") == key

    def carried(label: str, key: str | None) -> bool:
        site.written = []
        if keyed(label, key) and _carry(Path(previous), site, before[label], vouched):
            record[label] = {"key": key, "files": before[label]["files"]}
            return True
        return False

    def finish(label: str, key: str | None, written: list[str], here: bool = True) -> None:
        record[label] = {"key": key, "files": {rel: publish.file_digest(staging / rel) for rel in written}}
        if here:                # (a worker's group was queued when its future finished: _presync_group)
            presync.add(staging / rel for rel in written)

    models = set(results.models["model_id"])
    keys = {label: key for label, key, _ in groups}
    done = 0

    def step(label: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, len(groups), label)
        if label == "gallery":
            publish.fault("site")

    with contextlib.ExitStack() as stack:
        # the model groups to render (two thirds of a cold render) go to worker processes while this
        # one renders the site-wide groups, then takes its share of them; each group writes only its
        # own files. Those whose key changed are rendered whatever the previous site holds: they are
        # queued before this process carries the others (hard links: a fifth of its render on a
        # one-spec edit, while the worker waited), and a group whose carry fails is queued after them
        changed = [label for label, key, _ in groups if label in models and not keyed(label, key)]
        # a build's idle workers where given (no process to start: the engine and polars are imported),
        # else the render's own
        pool = (workers if changed else None) if workers is not None else _render_pool(stack, len(changed))
        # each group's files fsynced while the next groups render, not all after the render (the
        # publish still fsyncs every file: publish.Presync); closed before the site is published
        presync = publish.Presync()
        stack.callback(presync.close)
        queue: list[str] = []
        futures: dict = {}
        # a failure (or a killed build) stops the queued groups rather than rendering them first
        stack.callback(lambda: [future.cancel() for future in futures.values()])
        _queue(pool, changed, queue, futures, presync, results, staging, assets)
        # the site-wide groups a worker may render too (POOLED), after the model groups: the only
        # charts of a one-spec edit's site-wide groups, so this process need not import Altair
        _queue(pool, [label for label, key, _ in groups if label in POOLED and not keyed(label, key)], queue, futures,
               presync, results, staging, assets)
        failed = [label for label, key, _ in groups if label in models and label not in changed
                  and not carried(label, key)]
        _queue(pool, failed, queue, futures, presync, results, staging, assets)
        todo = [label for label, _, _ in groups if label in changed or label in failed]    # (corpus order)
        for label, key, render in groups:
            if label == "downloads":          # it lists every group's files: the model groups first
                written = _take_share(site, results, queue, futures)
                for queued in [name for name, _, _ in groups if name in futures]:   # (the order rendered in-process)
                    finish(queued, keys[queued], written[queued] if queued in written else futures[queued].result(),
                           here=queued in written)
                    step(queued)
            if label in futures:
                continue
            if label in todo or (label not in models and not carried(label, key)):
                site.written = []
                render()
                finish(label, key, site.written)
            step(label)
    # compact: it is published with the site and names every file (a thousand and more)
    (staging / SITE_MANIFEST).write_text(json.dumps({"version": SITE_MANIFEST_VERSION, "groups": record},
                                                    separators=(",", ":"), sort_keys=True))
    publish.pin_site(staging, results_dir)


def _queue(pool, labels: list[str], queue: list[str], futures: dict, presync: publish.Presync, results: Results,
           staging: Path, assets: dict[str, str]) -> None:
    """Submit the page groups ``labels`` (model groups, or :data:`POOLED`) to ``pool`` (none
    without one: they render in this process), the biggest first (by their formula documents, most of a group's work: the last group
    a worker takes is then a small one, not one that keeps the other worker idle), appending each
    to ``queue`` (the order the workers take them, which :func:`_take_share` takes back from the
    end) and its future to ``futures``; a done group's files are queued for an early fsync."""
    if pool is None:
        return
    for label in sorted(labels, key=lambda m: -_formulas_size(results, m)):
        queue.append(label)
        futures[label] = pool.submit(_render_group, str(results.root), str(staging), assets, label)
        futures[label].add_done_callback(functools.partial(_presync_group, presync, staging))


def _take_share(site: Site, results: Results, queue: list[str], futures: dict) -> dict[str, list[str]]:
    """This process's share of the queued model groups, once it has rendered the site-wide ones:
    the groups no worker has taken yet, from the end of ``queue`` (the smallest: the workers take
    from its front), each rendered here (:func:`_group`, the workers' call) after its future
    is cancelled. A future that cannot be cancelled has gone to a worker; so have all before it.
    Returns the files each group rendered here wrote. The same files as a worker's: this process
    needs no start of its own, a worker does (its imports and the results' reading)."""
    written: dict[str, list[str]] = {}
    for label in reversed(queue):
        if not futures[label].cancel():
            break
        site.written = []
        _group(site, results, label)
        written[label] = site.written
    return written


def _presync_group(presync: publish.Presync, staging: Path, future) -> None:
    """A worker's page group, once its future is done: its files queued for an early fsync
    (:class:`engine.batch.publish.Presync`). A cancelled group (this process rendered it, or the
    render failed) or a failed one queues nothing."""
    if not future.cancelled() and future.exception() is None:
        presync.add(staging / rel for rel in future.result())


def _render_pool(stack: contextlib.ExitStack, groups: int):
    """Worker processes for the model page groups, or None when one process is enough: fewer than
    :data:`POOL_GROUPS` groups (a worker's start costs about what a small model's pages do), or
    ``ARCHLEDGER_RENDER_JOBS=1``. The render uses that many processes (default:
    :func:`engine.batch.workers.default_workers`: the CPUs, capped by memory and a fixed maximum), the
    calling one among them (:func:`_take_share`): one worker fewer, each worker's start being CPU
    that renders nothing. Spawned, not forked: a forked child inherits polars' thread pool
    mid-state (as in the results build)."""
    asked = os.environ.get("ARCHLEDGER_RENDER_JOBS")
    jobs = int(asked) if asked else default_workers() if groups >= POOL_GROUPS else 1
    jobs = max(1, min(jobs, groups)) - 1         # workers beside this process
    if jobs < 1:
        return None
    return stack.enter_context(ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                   initializer=_worker_start, initargs=(os.getpid(), _schema_docs())))


POOL_GROUPS = 4


def _formulas_size(results: Results, model_id: str) -> int:
    path = results.root / "formulas" / f"{slug(model_id)}.json"
    return path.stat().st_size if path.is_file() else 0
_WORKER: dict[str, tuple] = {}       # results folder -> (Results, Site environment) in a render worker


def _worker_start(parent: int, schema_docs: dict[str, str]) -> None:
    """In each render worker, first: die when the rendering process dies, however it dies
    (:func:`engine.batch.lifeline.die_with`, as a build worker does); collect rarely
    (engine/batch/collector.py), the start-up heap frozen; take the Parquet column docs the deploy
    pages show (:func:`_schema_docs`) from ``parent``. A render worker never evaluates, so it
    imports nothing of the engine's evaluation (sympy, the spec language: engine.batch.results
    imports both, and that was half of a worker's start); site_builder/cli.py's top imports none
    either (a spawned worker runs it first)."""
    _SCHEMA_DOCS.update(schema_docs)
    gc.freeze()
    collector.tune()
    lifeline.die_with(parent)


def prepare_worker() -> None:
    """Readies a build's --jobs worker for the model groups (:func:`render_pages`' ``workers``): its
    call imports this module, the renderer (jinja2, altair, the graph layout: about 0.3 CPU-s),
    which the worker's first group would otherwise pay on the site's critical path. The build
    queues it behind the worker's evaluation tasks (the site callable's ``prepare``:
    :func:`engine.batch.results._evaluate_changed`), so it runs while the build process evaluates
    a split model's grid half. Altair is imported here too: :mod:`site_builder.charts` imports it
    when a chart is first built, and the worker's groups build charts. Writes nothing."""
    import altair  # noqa: F401


def _render_group(results_dir: str, staging: str, assets: dict[str, str], label: str) -> list[str]:
    """In a render worker: one page group (:func:`_group`: a model's, or one of :data:`POOLED`)
    written under ``staging``, with the parent's static asset names; returns the files written
    (relative paths). The same calls as the in-process render."""
    if results_dir not in _WORKER:
        _WORKER[results_dir] = (Results.load(Path(results_dir)), environment(assets))
    results, env = _WORKER[results_dir]
    site = Site(Path(staging), env)
    _group(site, results, label)
    return site.written


#: The site-wide page groups a render's workers may take as well as the model groups, each a
#: function of (site, results) alone: the deploy pages' shared data and charts (the only charts of
#: the site-wide groups a one-spec edit renders again).
POOLED = {"deploy-shared": _deploy_shared}


def _group(site: Site, results: Results, label: str) -> None:
    """The page group ``label``: one of :data:`POOLED`, else the model ``label``'s
    (:func:`_model_group`)."""
    if label in POOLED:
        POOLED[label](site, results)
    else:
        _model_group(site, results, label)


def _model_group(site: Site, results: Results, model_id: str) -> None:
    """One model's page group: its inspector, playground picks, deployments and sizing pages (the
    one definition both the in-process and the worker render call)."""
    _model(site, results, model_id)
    _playground_data(site, results, model_id)
    _deploy(site, results, model_id, sizing.render(site, results.root, model_id, slug(model_id),
                                                   results.documents[model_id]))


def render_staged(results_dir: Path, site_dir: Path, progress=None, workers=None) -> None:
    """:func:`render_pages` into a staging folder ``OUT/.site-*`` whose published site ``OUT/site``
    (if any) supplies the page groups whose inputs did not change: what ``archledger build`` renders
    with (the ``site`` callable of :func:`engine.batch.results.run`; ``workers``: the build's idle
    --jobs workers, or None)."""
    render_pages(results_dir, site_dir, progress, previous=Path(site_dir).parent / "site", workers=workers)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def render_site(results_root: Path, out: Path, progress=None) -> Path:
    """``archledger site``: re-render ``out/site`` from the results in ``results_root`` (normally
    ``out/results``), staged beside it and published atomically under ``out``'s build lock (so it
    never interleaves with a build, and finishes or sweeps what an interrupted one left first).
    Returns the site folder. An ``out`` that is not an ArchLedger output, a held lock past
    ``ARCHLEDGER_LOCK_TIMEOUT`` or a bad value of it: :class:`engine.batch.publish.PublishError`."""
    out = Path(out)
    publish.claim(out)
    timeout = publish.lock_timeout()
    out.mkdir(parents=True, exist_ok=True)
    with publish.lock(out, "archledger site", timeout, log=_stderr):
        publish.recover(out, _stderr)
        with publish.staged(out, "site") as staging:
            render_pages(results_root, staging, progress, previous=out / "site")
            publish.publish(out, [("site", staging)])
    return out / "site"

