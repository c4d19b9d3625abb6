"""Render build/site/ from build/results/: a pure function of the results, written atomically.

Layer: site_builder. Pages (stable URLs): ``/`` gallery, ``/models/<org--name>/`` inspector,
``/models/<org--name>/deploy/`` deployments (state in the query string), ``/compare/?a=&b=``,
``/components/`` and ``/components/<name>/`` (with graph diffs under ``/components/diff/``),
``/methodology/<page>/`` (Markdown, raw HTML off), ``/playground/`` (what-if variants, never in
the gallery), ``/downloads/``. Client data under ``/data/``.
Templates are autoescaped; numbers arrive with their formula; nothing here evaluates a spec.
"""
from __future__ import annotations

import contextlib
import csv
import gc
import gzip
import hashlib
import io
import json
import multiprocessing
import os
import re
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import polars as pl
from markdown_it import MarkdownIt

from engine.batch import collector, dependencies, lifeline, publish
from engine.serving.steady import FRONT_BASIS, steady_rate
from engine.batch.workers import default_workers
from engine.cli import units
from engine.language.errors import SpecError, Where
from site_builder import charts, graph_svg, graphs, sizing
from site_builder import downloads, landscape
from site_builder.data import (Results, compact_json, config_twins, deploy_formulas, deployment_options, deployment_rows,
                               front_files,
                               expected_ops, expected_tips,
                               gallery_index, lineages, read_json, slug, split_formulas, trait_index)
from site_builder.graph_svg import diff_graphs, render_svg, svg_size

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "templates"
STATIC = REPO / "static"
DOCS = [("architecture", REPO / "docs" / "architecture.md", "Architecture: packages and data flow"),
        ("deployment", REPO / "docs" / "deployment.md", "Deployment accounting: SOL, KV, communication, fusion"),
        ("results", REPO / "docs" / "results.md", "The Parquet tables"),
        ("spec-language", REPO / "docs" / "spec-language.md", "The spec language"),
        ("verification", REPO / "docs" / "verification.md", "Verification: guards and evidence"),
        ("security", REPO / "docs" / "security.md", "Security and failure model"),
        ("scaling", REPO / "docs" / "scaling.md", "Scaling the build: the distributed executor"),
        ("contributing", REPO / "CONTRIBUTING.md", "How to add a model, component, op, GPU or fusion rule")]
OVERVIEW = [("params_total", "Parameters"), ("params_active", "Active per token (with embedding)"),
            ("params_embedding", "Embedding"), ("n_layers", "Layers"), ("max_context", "Max context"),
            ("checkpoint_bytes", "Checkpoint bytes"), ("checkpoint_tensors", "Checkpoint tensors"),
            ("kv_bytes_per_token_growing", "KV per token (BF16)"), ("kv_fixed_bytes", "KV fixed per request")]
COMPARE_INPUT = 4096
#: The widest drawing a model page shows unzoomed (px): its content column (static/css/site.css's
#: ``main``, less its padding). A wider one would be shrunk to fit, so it gets zoom and pan
#: (static/js/panzoom.js), as the components pages have.
ZOOM_WIDTH = 1138
#: Most bytes of HTML one page may have (issue 19; tests/test_site_size.py, benchmarks/site.py): what
#: would pass it is drawn from data the site already has (a model's per-op table from its document,
#: static/js/model.js) or loaded on demand (structure drawings).
PAGE_LIMIT = 300_000


# -- display filters (formatting only) -------------------------------------------------------------

# one formatter for the CLI and the site (engine/cli/units.py; its FORMAT ships to every page, where
# static/js/site.js archFmt interprets it)
si, human_bytes, seconds, tokens = units.si, units.decimal_bytes, units.seconds, units.tokens


def crossing_length(value) -> str:
    """A context length that may be fractional (a crossing point): 14563.56 -> '14,563.6', 1042 -> '1,042'."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def landscape_fmt(value, unit: str) -> str:
    """A landscape cell by its column's unit (landscape.json ``unit``); None reads "never"."""
    if value is None:
        return "never"
    if unit == "bytes":
        return human_bytes(value)
    if unit == "bytes_per_s":
        return human_bytes(value) + "/s"
    if unit == "flops":
        return si(value)
    if unit == "ratio":
        return f"{float(value):.3g}"
    if unit == "count":
        return f"{value:,}" if isinstance(value, int) else si(value)
    return str(value)


def fmt(value, key: str) -> str:
    if "bytes" in key:
        return human_bytes(value)
    if key == "max_context":
        return tokens(value)
    if key.startswith("params"):
        return si(value)
    return f"{value:,}" if isinstance(value, int) else si(value)


def anchor(uid: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in uid)


#: Characters JSON may hold that must not reach HTML raw: ``<`` opens ``</script>`` and ``<!--``
#: (either ends or swallows the script block), ``>`` and ``&`` pair with them, ``'`` closes a
#: single-quoted attribute, U+2028/U+2029 end a line in JavaScript before ES2019. Each becomes its
#: ``\uXXXX`` escape, which is the same string to JSON.parse and to JavaScript.
_SCRIPT_UNSAFE = re.compile("[<>&'\u2028\u2029]")


def script_json(value: Any) -> str:
    """``value`` as JSON that is inert inside an HTML ``<script>`` block or attribute.

    The one way data reaches a page's inline script (the ``page-data`` block of base.html, and the
    templates' ``tojson`` filter, replaced by this): model ids, names, notes and docs come from spec
    files in pull requests, so any string may be hostile. NaN and infinity are refused (they are not
    JSON; engine/language/finite.py keeps them out of the results)."""
    text = json.dumps(value, allow_nan=False)
    return _SCRIPT_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def environment(assets: dict[str, str] | None = None) -> jinja2.Environment:
    """The templates' environment. ``asset('js/deploy.js')`` gives a static file's published path,
    ``static/js/deploy.<sha8>.js`` (``assets``: :func:`static_assets`' names, read from static/ if not given)."""
    names = static_assets()[0] if assets is None else assets
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(si=si, bytes=human_bytes, tokens=tokens, fmt=fmt, anchor=anchor, seconds=seconds,
                       landscape_fmt=landscape_fmt, crossing_length=crossing_length)
    # jinja's own tojson escapes < > & ' but not U+2028/U+2029: templates get the one escaper
    env.filters["tojson"] = lambda value, indent=None: markupsafe.Markup(script_json(value))
    env.globals["asset"] = lambda rel: "static/" + names[rel]
    env.globals["number_format"] = units.FORMAT   # base.html's data-fmt: the rule archFmt reads
    env.globals["front_basis"] = FRONT_BASIS    # the one sentence every front chart's caption states
    return env


# -- writing ----------------------------------------------------------------------------------------

class Site:
    """Pages and files written under a staging folder."""

    def __init__(self, folder: Path, env: jinja2.Environment):
        self.folder = folder
        self.env = env
        self.pages: list[str] = []
        self.written: list[str] = []     # every file written, relative to the folder (the site manifest's record)

    def page(self, path: str, template: str, title: str, page_data: dict | None = None, **context) -> None:
        depth = len(path.split("/")) if path else 0     # pages live at <path>/index.html
        root = "../" * depth
        html = self.env.get_template(template).render(
            title=title, root=root, page_json=script_json(page_data or {}), **context)
        self.file(f"{path}/index.html" if path else "index.html", html)
        self.pages.append(path)

    def file(self, path: str, text: str) -> None:
        target = self._target(path)
        target.write_text(text)

    def gzip_text(self, path: str, text: str) -> None:
        """``text`` gzip-compressed at ``path`` (``.gz``), with no timestamp (same text, same bytes)."""
        self._target(path).write_bytes(gzip.compress(text.encode(), 9, mtime=0))

    def gzip_json(self, path: str, value) -> None:
        """``value`` as compact JSON, gzip-compressed at ``path`` (``.json.gz``): the deploy pages'
        formula files are a third of the site as plain JSON and a tenth of that compressed; the
        pages decompress them (static/js/deploy_eval.js). No timestamp in the header, so the same
        value gives the same bytes (the incremental render compares hashes)."""
        self.gzip_text(path, compact_json(value))

    def place(self, source: Path, path: str) -> None:
        """Put the file ``source`` at ``path``: a hard link where the file system allows (the site
        and the results it links to are only ever replaced whole, never written in place), else a copy."""
        target = self._target(path)
        try:
            os.link(source, target)
        except OSError:
            _copy(source, target)

    def _target(self, path: str) -> Path:
        # a new file, never a write through an existing one: a carried file is a hard link into the
        # published site
        target = self.folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        self.written.append(path)
        return target


def static_assets() -> tuple[dict[str, str], str]:
    """static/'s files (without its README) and the content-hashed name each is published under
    (``js/deploy.js`` -> ``js/deploy.<first 8 hex of its SHA-256>.js``: a changed file gets a new
    URL, so netlify.toml may let browsers keep /static/* for a year), and one digest of them all.
    A symbolic link under static/ is refused with one line first (engine.language.corpus.refuse_symlinks):
    a committed link to /proc/self/environ would otherwise publish the build machine's environment."""
    from engine.language.corpus import refuse_symlinks      # (not at the top: see _worker_start)
    refuse_symlinks(STATIC, REPO)
    names, digest = {}, hashlib.sha256()
    for path in sorted(p for p in STATIC.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(STATIC).as_posix()
        if rel == "README.md":
            continue
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        stem, dot, ext = path.name.partition(".")
        names[rel] = (rel[:-len(path.name)] + f"{stem}.{sha[:8]}{dot}{ext}") if dot else f"{rel}.{sha[:8]}"
        digest.update(f"{rel}\0{sha}\n".encode())
    return names, digest.hexdigest()


def _copy(source: Path, target: Path, follow_symlinks: bool = True) -> None:
    """Copy a file; a failed write names the target (a full disk is the output folder's, not the source's)."""
    try:
        shutil.copy2(source, target, follow_symlinks=follow_symlinks)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, os.strerror(exc.errno), str(target)) from exc


def _copy_static(site: "Site", names: dict[str, str]) -> None:
    """Copy static/ into the site under its hashed names. ``follow_symlinks=False`` keeps a link that
    appears after the check a link (the copy never reads through it)."""
    for rel, name in names.items():
        _copy(STATIC / rel, site._target(f"static/{name}"), follow_symlinks=False)


def _repo_text(path: Path) -> str:
    """A page source from the repo (docs/*.md, CONTRIBUTING.md), refused if it or a folder on the
    way to it is a symbolic link, or if it resolves outside the repo: it is published as a page.
    Read as the corpus's files are (bounded, UTF-8: a bad byte is one line naming the page)."""
    from engine.language.corpus import refuse_symlinks      # (not at the top: see _worker_start)
    from engine.language.yamlio import read_text
    refuse_symlinks(path, REPO)
    shown = path.relative_to(REPO).as_posix()
    if not path.resolve().is_relative_to(REPO.resolve()):
        raise SpecError(Where(shown), "resolves outside the repository", "commit the file itself")
    return read_text(path, shown)


def _csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in row.items()})
    return out.getvalue()


#: The site's record of what each page group was rendered from (``SITE_MANIFEST`` in the site root).
SITE_MANIFEST = "site-manifest.json"
SITE_MANIFEST_VERSION = 1


def _hash(*parts) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _code_hash(static_digest: str) -> str:
    """What every page depends on besides the results: the templates, static/ (pages name its
    hashed files), the renderer's own code (site_builder/*.py) and the installed versions of the
    libraries it renders with (:data:`engine.batch.dependencies.SITE`)."""
    files = sorted(p for p in TEMPLATES.rglob("*") if p.is_file()) + \
        sorted(Path(__file__).resolve().parent.glob("*.py"))
    return _hash(SITE_MANIFEST_VERSION, static_digest, dependencies.fingerprint(dependencies.SITE),
                 *[(p.name.encode() + b"\0" + p.read_bytes()) for p in files])


def _results_inputs(results: "Results") -> tuple[dict, dict]:
    """Per model, what its pages are rendered from (its results manifest entry: input hash and the
    size and SHA-256 of its Parquet partitions and document, plus its models.parquet row); and what
    the corpus-wide pages are rendered from (all of those, and contracts.json). Empty when the
    results folder has no manifest (then every page is rendered)."""
    try:
        manifest = json.loads((results.root / "manifest.json").read_text())
        entries = manifest["models"]
        contracts = manifest["files"].get("contracts.json")
        landscape_file = manifest["files"].get("landscape.json")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}, {}
    per_model = {}
    for row in results.models.iter_rows(named=True):
        entry = entries.get(row["model_id"]) if isinstance(entries, dict) else None
        if isinstance(entry, dict) and "files" in entry:
            per_model[row["model_id"]] = _hash(entry.get("hash"), entry["files"], row)
    if len(per_model) != results.models.height:
        return {}, {}
    return per_model, {"models": per_model, "contracts": contracts, "landscape": landscape_file,
                       "unverified": manifest.get("unverified")}


def _previous_groups(previous: Path | None) -> dict:
    if previous is None:
        return {}
    try:
        data = json.loads((Path(previous) / SITE_MANIFEST).read_text())
        if data.get("version") == SITE_MANIFEST_VERSION and isinstance(data.get("groups"), dict):
            return data["groups"]
    except (OSError, ValueError, AttributeError):
        pass
    return {}


def _carry(previous: Path, site: "Site", record: dict) -> bool:
    """Hard-link (or copy) a page group's files from the previously published site into the staged
    one, when every file is still there as a regular file of the recorded size and SHA-256.
    Returns False (nothing carried) otherwise."""
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        return False
    for rel, expected in files.items():
        source = previous / rel
        if (not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/") or source.is_symlink()
                or not source.is_file() or not publish.matches(source, expected)):
            return False
    for rel in files:
        site.place(previous / rel, rel)
    return True


def render_pages(results_dir: Path, site_dir: Path, progress=None, previous: Path | None = None) -> None:
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
    site is never written in place, so the staged folder is still published whole."""
    results = Results.load(results_dir)
    assets, static_digest = static_assets()
    env = environment(assets)
    staging = Path(site_dir)
    staging.mkdir(parents=True, exist_ok=True)
    site = Site(staging, env)
    code = _code_hash(static_digest)
    per_model, corpus_wide = _results_inputs(results)
    docs = [(name, _repo_text(path)) for name, path, _ in DOCS]
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
    record: dict[str, dict] = {}

    def carried(label: str, key: str | None) -> bool:
        site.written = []
        old = before.get(label)
        if key is not None and isinstance(old, dict) and old.get("key") == key and _carry(Path(previous), site, old):
            record[label] = {"key": key, "files": old["files"]}
            return True
        return False

    def finish(label: str, key: str | None, written: list[str]) -> None:
        record[label] = {"key": key, "files": {rel: publish.file_digest(staging / rel) for rel in written}}

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
        # own files
        todo = [label for label, key, _ in groups if label in models and not carried(label, key)]
        pool = _render_pool(stack, len(todo))
        # the biggest first (by their formula documents, most of a group's work): the last group a
        # worker takes is then a small one, not one that keeps the other worker idle
        queue = sorted(todo, key=lambda m: -_formulas_size(results, m)) if pool else []
        futures = {label: pool.submit(_render_model_group, str(results_dir), str(staging), assets, label)
                   for label in queue}
        # a failure (or a killed build) stops the queued groups rather than rendering them first
        stack.callback(lambda: [future.cancel() for future in futures.values()])
        for label, key, render in groups:
            if label == "downloads":          # it lists every group's files: the model groups first
                written = _take_share(site, results, queue, futures)
                for model_label in todo if futures else []:        # (corpus order, as rendered in-process)
                    finish(model_label, keys[model_label],
                           written[model_label] if model_label in written else futures[model_label].result())
                    step(model_label)
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


def _take_share(site: Site, results: Results, queue: list[str], futures: dict) -> dict[str, list[str]]:
    """This process's share of the queued model groups, once it has rendered the site-wide ones:
    the groups no worker has taken yet, from the end of ``queue`` (the smallest: the workers take
    from its front), each rendered here (:func:`_model_group`, the workers' call) after its future
    is cancelled. A future that cannot be cancelled has gone to a worker; so have all before it.
    Returns the files each group rendered here wrote. The same files as a worker's: this process
    needs no start of its own, a worker does (its imports and the results' reading)."""
    written: dict[str, list[str]] = {}
    for label in reversed(queue):
        if not futures[label].cancel():
            break
        site.written = []
        _model_group(site, results, label)
        written[label] = site.written
    return written


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


def _render_model_group(results_dir: str, staging: str, assets: dict[str, str], model_id: str) -> list[str]:
    """In a render worker: one model's page group (:func:`_model_group`) written under
    ``staging``, with the parent's static asset names; returns the files written (relative paths).
    The same calls as the in-process render."""
    if results_dir not in _WORKER:
        _WORKER[results_dir] = (Results.load(Path(results_dir)), environment(assets))
    results, env = _WORKER[results_dir]
    site = Site(Path(staging), env)
    _model_group(site, results, model_id)
    return site.written


def _model_group(site: Site, results: Results, model_id: str) -> None:
    """One model's page group: its inspector, playground picks, deployments and sizing pages (the
    one definition both the in-process and the worker render call)."""
    _model(site, results, model_id)
    _playground_data(site, results, model_id)
    _deploy(site, results, model_id, sizing.render(site, results.root, model_id, slug(model_id),
                                                   results.documents[model_id]))


def render_staged(results_dir: Path, site_dir: Path, progress=None) -> None:
    """:func:`render_pages` into a staging folder ``OUT/.site-*`` whose published site ``OUT/site``
    (if any) supplies the page groups whose inputs did not change: what ``archledger build`` renders
    with (the ``site`` callable of :func:`engine.batch.results.run`)."""
    render_pages(results_dir, site_dir, progress, previous=Path(site_dir).parent / "site")


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


# -- pages ------------------------------------------------------------------------------------------

def _gallery(site: Site, results: Results) -> None:
    index = gallery_index(results)
    site.file("data/index.json", json.dumps(index))
    rows = [{k: v for k, v in m.items() if k not in ("formulas", "dims")} for m in index]
    site.file("downloads/gallery.csv", _csv(rows))
    families = sorted({m["family"] for m in index})
    site.page("", "gallery.html", "Gallery", {"page": "gallery", "bounds": {m["slug"]: m["dims"] for m in index}},
              models=index, families=families,
              traits=trait_index(results, index), lineages=lineages(index), unverified=results.unverified)


def _model(site: Site, results: Results, model_id: str) -> None:
    doc = results.documents[model_id]
    name = slug(model_id)
    row = results.models.filter(pl.col("model_id") == model_id).row(0, named=True)
    levels = []
    for level in graphs.levels(doc):
        graph = graphs.level_graph(doc, level["uid"])
        if not graph["nodes"]:
            continue
        svg = render_svg(graph, title=level["uid"],
                         link=lambda node: f"#c-{anchor(node['data']['uid'])}" if node["kind"] == "component" else None)
        # the outermost drawing is inline; deeper ones load when their <details> opens (page weight),
        # stored gzip-compressed (a tenth of the bytes; static/js/site.js archText inflates them)
        name_svg = f"graphs/{anchor(level['uid'])}.svg.gz"
        if levels:
            site.gzip_text(f"models/{name}/{name_svg}", svg)
        plans = [p for p in doc.get("layer_plan", []) if graphs.child_of(p["uid"], level["uid"]) == p["uid"]]
        levels.append({**level, "anchor": anchor(level["uid"]), "svg": svg if not levels else "",
                       "src": name_svg if levels else "", "plans": plans, "zoom": svg_size(svg)[0] > ZOOM_WIDTH})
    site.gzip_json(f"data/models/{name}.json.gz", doc)
    op_rows = [{"uid": o["uid"], "op": o["op"], "out_shape": " x ".join(o["out_shape"]),
                "params": o["params"]["value"], "params_formula": o["params"]["formula"],
                "layers": o["repeat"]["value"],
                "flops_prefill": o.get("flops_prefill", {}).get("value"),
                "flops_prefill_formula": o.get("flops_prefill", {}).get("formula"),
                "bytes_prefill": o.get("bytes_prefill"),
                "flops_decode": o.get("flops_decode", {}).get("value"), "bytes_decode": o.get("bytes_decode")}
               for o in doc["ops"]]
    site.file(f"models/{name}/ops.csv", _csv(op_rows))
    dims = {d["name"]: d["value"] for d in doc["dims"]}
    # the bytes columns share one definition: sent once in the page data, named by each number (data-dk)
    defs = {"bytes": "HBM bytes read and written at the reference point (one GPU, unfused, BF16): the op's "
                     "inputs, outputs and weights, all layers"}
    site.page(f"models/{name}", "model.html", doc["name"],
              {"page": "model", "bound": dims, "defs": defs, "specs": {"model": charts.model_specs(doc)}},
              doc=doc, row=row, slug=name, levels=levels, overview_keys=OVERVIEW)


def _round(value):
    """Four significant digits for display data (the Parquet downloads keep full precision)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    return value


def _table(frame: pl.DataFrame) -> dict:
    return {"columns": frame.columns, "rows": [[_round(v) for v in row] for row in frame.rows()]}


def _deploy(site: Site, results: Results, model_id: str, sizing_page: bool = False) -> None:
    doc = results.documents[model_id]
    name = slug(model_id)
    rows = deployment_rows(results, model_id)
    options = deployment_options(rows)
    # a combination's weight formula is shared by every GPU, framework and KV dtype: sent once per model
    weight_formulas = sorted({o["weight_bytes_per_gpu_formula"] for o in options})
    weight_number = {f: i for i, f in enumerate(weight_formulas)}
    for o in options:
        o["weight_formula"] = weight_number[o.pop("weight_bytes_per_gpu_formula")]
    decode = rows.filter(pl.col("phase") == "decode").drop("phase")
    # the GPU comparison: each evaluated combination's best decode throughput among the points the
    # steady state of continuous batching serves (the fronts' rule, FRONT_BASIS)
    rate = steady_rate()
    best = (decode.filter(pl.col("fits_steady") & (pl.col("input_len") == COMPARE_INPUT))
            .group_by(["gpu", "n_gpus", "config", "framework", "kv_dtype"])
            .agg(rate.max().alias("best_tokens_per_s_per_gpu"), pl.col("batch").sort_by(rate).last().alias("at_batch"))
            .sort(["gpu", "n_gpus", "config", "framework", "kv_dtype"]))    # every key: group_by's order is random
    # ... and each GPU type's best combination (one bar per GPU in the comparison chart)
    per_gpu = (best.sort("best_tokens_per_s_per_gpu", descending=True, maintain_order=True)
               .group_by(["gpu", "framework", "kv_dtype"], maintain_order=True).first())
    # the page evaluates any (prompt, output, batch) from the structures' formula trees: the model-wide
    # part (GPU rates, configs, options) goes into index.json.gz, each (config, scale-up domain) gets one
    # file of its programs and trees (what one selection fetches); the grid's values are suggestions
    formulas = deploy_formulas(results, model_id)
    model: dict = {}
    if formulas is not None:
        model, files = split_formulas(formulas)
        for key, text in files.items():          # compact JSON, as gzip_json writes it
            site.gzip_text(f"data/deploy/{name}/{key}.json.gz", text)
        found = {(o["gpu"], o["n_gpus"], o["config"], o["framework"]): o for o in model.pop("options")}
        for o in options:
            f = found.get((o["gpu"], o["n_gpus"], o["config"], o["framework"]))
            if f is not None:
                o.update({k: f[k] for k in ("cfg", "file", "limits", "reserve", "overlap", "admission", "prefill", "decode", "mtp",
                                             "expected") if k in f})
    grid = {k: decode[c].unique().sort().to_list() for k, c in
            (("inputs", "input_len"), ("outputs", "output_len"), ("batches", "batch"))}
    # the grid's fronts, one small file per (framework, KV dtype, prompt, output): the front chart at a
    # grid point fetches its one file; off the grid (or with MTP drafting) it evaluates the configs
    fronts = []
    for (fw, kv, prompt, output), table in front_files(results, model_id).items():
        site.gzip_json(f"data/deploy/{name}/{FRONTS_DIR}/{fw}-{kv}-{prompt}-{output}.json.gz", table)
        fronts.append([fw, kv, prompt, output])
    site.gzip_json(f"data/deploy/{name}/index.json.gz",
                   {"options": options, "weight_formulas": weight_formulas, "best": best.to_dicts(),
                    "twins": config_twins(results, model_id),
                    "best_per_gpu": per_gpu.to_dicts(), "grid": grid, "model": model, "fronts": fronts,
                    "output_len": int(decode["output_len"].min()) if decode.height else 0})
    # each op's measured source at the grid's per-op points (ops.parquet), for the per-op table's
    # tooltips: one file per (config, scale-up domain), as the formulas, so one selection fetches its own
    cfg_of = {(o["gpu"], str(o["n_gpus"]), o["config"], o["framework"]): o["cfg"] for o in options if "cfg" in o}
    by_cfg: dict[str, dict] = {}
    for key, ops in expected_ops(results, model_id).items():
        cfg = cfg_of.get(tuple(key.split("|")[:4]))
        if cfg is not None:
            by_cfg.setdefault(cfg, {})[key] = ops
    for cfg, part in by_cfg.items():
        site.gzip_json(f"data/deploy/{name}/expected-{cfg}.json.gz", expected_tips(part))
    # the bar charts' heights: the most bars one selection can show (GPU types; configs per GPU type and count)
    # (the specs and texts every deploy page shares are in DEPLOY_SHARED, fetched once)
    specs = charts.deployment_specs(
        gpu_bars=max([r[-1] for r in per_gpu.group_by(["framework", "kv_dtype"]).len().iter_rows()], default=1),
        config_bars=max([r[-1] for r in best.group_by(["gpu", "n_gpus", "framework", "kv_dtype"]).len().iter_rows()], default=1))
    data = {"page": "deploy", "slug": name, "max_context": doc["max_context"],
            "specs": {k: specs[k] for k in PAGE_SPECS},
            # the model's dims, for the per-op formulas' "where" line (the point's batch, seq, ctx beside them)
            "bound": {d["name"]: d["value"] for d in doc["dims"]},
            "kv_rows": charts.kv_rows(doc["kv_curve"], doc["max_context"]), "compare_input": COMPARE_INPUT}
    site.page(f"models/{name}/deploy", "deploy.html", f"{doc['name']} deployments", data,
              doc=doc, slug=name, compare_input=COMPARE_INPUT, sizing_page=sizing_page)


#: What every deploy and sizing page shares, in one file each page fetches (a browser keeps it across
#: pages) rather than in every page's HTML (17 KB a page): the chart specs that do not depend on the
#: model, the Parquet column docs behind the summary's numbers, and the roofline's GPU figures.
DEPLOY_SHARED = "data/deploy/page.json.gz"
#: The folder of a model's precomputed grid fronts under data/deploy/<model>/ (:func:`_deploy`).
FRONTS_DIR = "fronts"
#: The deploy page's specs that stay in its own page data: the bar charts, sized for its model.
PAGE_SPECS = ("gpus", "ep")


def _deploy_shared(site: Site, results: Results) -> None:
    """:data:`DEPLOY_SHARED`: the model-independent chart specs (the deploy page's batch, KV,
    roofline and throughput/interactivity charts; the sizing page's front is the same spec), the
    column docs (:func:`_schema_docs`) and the build's figures of every GPU (the roofline's roofs)."""
    specs = charts.deployment_specs()
    site.gzip_json(DEPLOY_SHARED, {
        "specs": {**{k: v for k, v in specs.items() if k not in PAGE_SPECS},
                  "roofline": charts.roofline_spec(), "front": charts.front_spec()},
        "docs": dict(_schema_docs()), "gpus": (results.landscape or {}).get("gpus") or {}})


_SCHEMA_DOCS: dict[str, str] = {}


def _schema_docs() -> dict[str, str]:
    """The Parquet column docs (engine.batch.results.DEPLOYMENTS_SCHEMA's, by column), shown as the
    definition behind each deployment number; a render worker is handed them (:func:`_worker_start`)."""
    if not _SCHEMA_DOCS:
        from engine.batch.results import DEPLOYMENTS_SCHEMA, UNSTORED
        _SCHEMA_DOCS.update({k: v[1] for k, v in DEPLOYMENTS_SCHEMA.items()})
        _SCHEMA_DOCS.update(UNSTORED)       # what the page shows beside the columns, not stored
    return _SCHEMA_DOCS


def _compare(site: Site, results: Results) -> None:
    index = gallery_index(results)
    shown = ("fits", "weight_bytes_per_gpu", "kv_bytes_per_gpu", "activation_bytes_per_gpu", "free_bytes_per_gpu",
             "usable_bytes_per_gpu", "ttft_s", "tpot_s", "max_concurrent_requests", "tokens_per_s_per_gpu")
    site.page("compare", "compare.html", "Compare",
              {"page": "compare", "compare_input": COMPARE_INPUT, "docs": {k: _schema_docs()[k] for k in shown}},
              models=index)


def _attention_instances(results: Results) -> dict[str, list[dict]]:
    """Attention component instances per component name, across the corpus."""
    uses: dict[str, list[dict]] = {}
    for model_id, doc in results.documents.items():
        for c in doc["components"]:
            if c["role"] == "attention" and c["stack"] == "main":
                uses.setdefault(c["component"], []).append({
                    "slug": slug(model_id), "name": doc["name"], "uid": c["uid"], "doc": doc,
                    "params": c["params_per_layer"], "layers": c["repeat"]["value"],
                    "kv": c["kv_bytes_per_token_per_layer"]})
    return uses


def _components_inputs(results: Results) -> dict:
    """Everything the components pages show (:func:`_components`): each attention component's
    uses, the graph it is drawn from (its first use's, corpus order) and contracts.json. Their
    group is keyed by a hash of exactly this, so an edit that leaves it unchanged (a model's notes,
    its deployments) carries the pages (their drawings are most of a site-wide re-render)."""
    uses = _attention_instances(results)
    contracts = read_json(results.root / "contracts.json") if (results.root / "contracts.json").exists() else {}
    return {"uses": {name: [{k: v for k, v in u.items() if k != "doc"} for u in found] for name, found in uses.items()},
            "graphs": {name: graphs.level_graph(found[0]["doc"], found[0]["uid"]) for name, found in uses.items()},
            "contracts": contracts}


def _components(site: Site, inputs: dict) -> None:
    """The components pages from :func:`_components_inputs` (and nothing else)."""
    uses, drawn = inputs["uses"], inputs["graphs"]
    names = sorted(uses)
    items = []
    for name in names:
        first = uses[name][0]
        svg = render_svg(drawn[name], title=f"{name} (as in {first['name']})")
        others = [n for n in names if n != name]
        diffs = [{"href": f"../diff/{name}--{o}/", "label": f"{name} vs {o}"} for o in others]
        site.page(f"components/{name}", "component.html", name, {"page": "component"},
                  doc=f"Drawn as instantiated in {first['name']} ({first['uid']}).", svg=svg,
                  uses=uses[name], diffs=diffs, legend=False, a_name="", b_name="")
        items.append({"href": f"{name}/", "label": name, "note": f"used by {len(uses[name])} layer templates"})
    for a in names:
        for b in names:
            if a == b:
                continue
            ua, ub = uses[a][0], uses[b][0]
            union, status = diff_graphs(_short(drawn[a]), _short(drawn[b]))
            svg = render_svg(union, status=status, title=f"{a} vs {b}")
            site.page(f"components/diff/{a}--{b}", "component.html", f"{a} vs {b}", {"page": "diff"},
                      doc=f"Nodes paired by their declared name: {a} as in {ua['name']}, {b} as in {ub['name']}.",
                      svg=svg, uses=[], diffs=[], legend=True, a_name=a, b_name=b)
            items.append({"href": f"diff/{a}--{b}/", "label": f"graph diff: {a} vs {b}", "note": ""})
    contracts = inputs["contracts"]
    specs = {slot: charts.contract_specs(c) for slot, c in contracts.items()}
    contracts = {slot: {**c, "panels": charts.contract_panels(c)} for slot, c in contracts.items()}
    site.page("components", "components.html", "Components", {"page": "components", "specs": specs},
              items=items, contracts=contracts, paged=set(names), panel_lines=charts.PANEL_LINES,
              intro="The token mixers (attention and its linear-time successors) side by side under one fixed "
                    "contract; the attention components the corpus uses drawn as instantiated in the models, "
                    "and graph diffs between every pair.")


def _playground_key(code: str, results: Results) -> str | None:
    """The playground's inputs: the renderer and variants.json (the page reads nothing else but
    the corpus models' documents for the graph diffs, whose inputs the manifest's models carry)."""
    path = results.root / "variants.json"
    if not path.exists():
        return None
    _, corpus_wide = _results_inputs(results)
    return _hash(code, publish.file_digest(path), corpus_wide.get("models")) if corpus_wide else None


def _playground(site: Site, results: Results, previous: Path | None = None) -> None:
    """``/playground/``: the what-if variants (results/variants.json, never in the gallery), each
    with its old -> new table recomputed in the browser from the exported formula trees as its
    dims change (static/js/formula.js), the build-time comparison per layer group, and the graph
    diff of the swapped mixer as the corpus instantiates both; plus the catalog of slots and the
    library components fitting each."""
    path = results.root / "variants.json"
    doc = read_json(path) if path.exists() else {"variants": [], "catalog": {}, "used": {}, "dims": {}}
    uses = _attention_instances(results)
    for v in doc["variants"]:
        v["slug"] = slug(v["model_id"])
        v["rows"] = [("whole model", "", v["model"]["old"], v["model"]["new"])] + [
            (g["group"], f"{g['layers_old']} -> {g['layers_new']}", g["old"], g["new"]) for g in v["groups"]]
        base = doc["catalog"].get(v["variant_of"], {}).get("slots", {})
        v["diffs"] = []
        for swap in v["swaps"]:
            slot, new = re.match(r".*\]\.(\w+)=(\w+)", swap).groups()
            for old in base.get(slot, {}).get("current", []):
                if old != new and old in uses and new in uses:
                    ua, ub = uses[old][0], uses[new][0]
                    union, status = diff_graphs(_short(graphs.level_graph(ua["doc"], ua["uid"])),
                                                _short(graphs.level_graph(ub["doc"], ub["uid"])))
                    v["diffs"].append({"a": old, "b": new, "a_in": ua["name"], "b_in": ub["name"],
                                       "svg": render_svg(union, status=status, title=f"{old} vs {new}")})
    site.gzip_json(_PLAYGROUND_DIFFS, _playground_diffs(results, uses, _drawn_before(previous)))
    live = {m: _PLAYGROUND_DATA.format(slug(m)) for m in results.models["model_id"].to_list()   # any catalog pick
            if (results.root / "playground" / f"{slug(m)}.json").exists()}                     # (_playground_data)
    data = {"page": "playground", "variants": [{k: v[k] for k in (
        "variant", "display_name", "variant_of", "base_name", "swaps", "bind_list", "formulas", "env", "recomputed",
        "setting")} for v in doc["variants"]], "catalog": doc["catalog"], "used": doc["used"], "dims": doc["dims"],
        "names": {m: c["name"] for m, c in doc["catalog"].items()}, "live": live, "drawn": sorted(uses),
        "diffs": _PLAYGROUND_DIFFS}
    site.page("playground", "playground.html", "Playground (what-if designs)", data, variants=doc["variants"],
              setting=doc.get("setting", {}))


_PLAYGROUND_DATA = "data/playground/{}.json.gz"
#: The layout's own code: a drawing is reused (_playground_diffs) only when drawn by the same layout.
_GRAPH_CODE = hashlib.sha256(Path(graph_svg.__file__).read_bytes()).hexdigest()
_PLAYGROUND_DIFFS = "data/playground/diffs.json.gz"


def _drawn_before(previous: Path | None) -> dict[str, str]:
    """The previously published site's playground drawings by the digest of what they draw
    (``key``), or nothing when it has none that can be read."""
    try:
        entries = json.loads(gzip.decompress((Path(previous) / _PLAYGROUND_DIFFS).read_bytes()))
        return {e["key"]: e["svg"] for e in entries.values() if isinstance(e, dict) and "key" in e}
    except (OSError, TypeError, ValueError, AttributeError, KeyError, EOFError):
        return {}


def _playground_diffs(results: Results, uses: dict, drawn: dict[str, str] | None = None) -> dict[str, dict]:
    """The graph diff of every (old filler, new component) pair a live pick makes that the
    components pages do not draw (they draw the token mixers corpus models use): ``old--new`` ->
    the drawing (old as the base's document has it at the slot's site, new as the pick's walk puts
    it there: engine.playground.whatif.block_graph) and the models each side is drawn from. One drawing
    per pair, from the first model (corpus order) whose pick makes it. ``key`` is the SHA-256 of
    what a drawing draws; ``drawn`` (key -> drawing, the previous site's) is reused, not laid out
    again: the layout is most of the playground's render, and the same inputs (and layout code,
    :data:`_GRAPH_CODE`) draw the same SVG."""
    drawn = drawn or {}
    out: dict[str, dict] = {}
    for model_id in results.models["model_id"].to_list():
        path = results.root / "playground" / f"{slug(model_id)}.json"
        base = results.documents.get(model_id)
        if not path.exists() or base is None:
            continue
        doc = read_json(path)
        at = {c["uid"]: c["component"] for c in base["components"]}
        for picks in doc["picks"].values():
            for new, p in picks.items():
                for block in (doc["graphs"][i] for i in p.get("graphs", [])):
                    old = at.get(block["site"])
                    key = f"{old}--{new}"
                    if old is None or old == new or key in out or (old in uses and new in uses):
                        continue
                    a, b = _short(graphs.level_graph(base, block["site"])), _short(graphs.level_graph(block, block["site"]))
                    title = f"{old} vs {new}"
                    digest = hashlib.sha256(json.dumps([a, b, title, _GRAPH_CODE], sort_keys=True).encode()).hexdigest()
                    svg = drawn.get(digest)
                    if svg is None:
                        union, status = diff_graphs(a, b)
                        svg = render_svg(union, status=status, title=title)
                    out[key] = {"svg": svg, "a_in": base["name"], "key": digest}
    return out


def _playground_data(site: Site, results: Results, model_id: str) -> None:
    """The playground's live picks of one base model (results/playground/<org--name>.json,
    engine.playground.whatif.model_playground), compressed beside the model's other data: rendered with
    the model's pages, so a model whose results did not change keeps its file."""
    source = results.root / "playground" / f"{slug(model_id)}.json"
    if source.exists():        # the blocks' graphs are drawn once for the corpus (_playground_diffs)
        doc = {k: v for k, v in read_json(source).items() if k != "graphs"}
        site.gzip_json(_PLAYGROUND_DATA.format(slug(model_id)), doc)


def _short(graph: dict) -> dict:
    """Node ids by declared name (the last uid segment), so two components pair node by node."""
    rename = {n["id"]: n["id"].rsplit("/", 1)[-1] for n in graph["nodes"]}
    nodes = [{**n, "id": rename[n["id"]]} for n in graph["nodes"]]
    edges = [{**e, "src": rename.get(e["src"], e["src"]), "dst": rename.get(e["dst"], e["dst"])} for e in graph["edges"]]
    return {"nodes": nodes, "edges": edges}


def _methodology(site: Site, texts: dict[str, str]) -> None:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    # a table scrolls in its own box (.table-wrap), as every other table of the site: a wide one
    # (architecture.md's packages) made the page 698 px wide on a 390 px phone
    for side, markup in (("table_open", '<div class="table-wrap">'), ("table_close", "")):
        def rule(renderer, tokens, idx, options, env, _markup=markup, _side=side):
            html = renderer.renderToken(tokens, idx, options, env)
            return _markup + html if _side == "table_open" else html + "</div>\n"
        md.add_render_rule(side, rule)
    items = []
    pages = {path.name: name for name, path, _ in DOCS}

    def relink(match: re.Match) -> str:
        target = match.group(1).split("#")[0].rsplit("/", 1)[-1]
        return f'href="../{pages[target]}/"' if target in pages else match.group(0)

    for name, path, title in DOCS:
        # links between the Markdown files point at their pages here
        body = re.sub(r'href="([^"]+\.md(?:#[^"]*)?)"', relink, md.render(texts[name]))
        site.page(f"methodology/{name}", "doc.html", title, {"page": "doc"}, body=body)
        items.append({"href": f"{name}/", "label": title, "note": ""})
    site.page("methodology", "listing.html", "Methodology", {"page": "methodology"}, items=items,
              intro="How every number on this site is defined and computed, and how to add to the corpus.")
