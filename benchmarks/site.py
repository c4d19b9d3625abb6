"""Benchmark the built site: its size, page weight, the gallery's first paint and the deploy page's time to numbers.

Run from the repo root after a build: ``python benchmarks/site.py [--site build/site] [--runs 5]``.
Renders nothing itself. Reports the site's total size by folder, the largest HTML page, each
model's page HTML (shared assets under static/ excluded; the structure drawings it loads on demand
and the model document its per-op table is drawn from listed apart) and its deployment page's HTML;
in a full headless Chromium (``chromium --headless=new``, a reader's browser, not the
headless shell the tests drive) served from 127.0.0.1 (best of N cold loads): the gallery's first contentful paint, and the
deploy page's time to interactive, from navigation to the summary numbers of a selection being on
the page (``#summary .num``), with what that load fetched under ``data/`` (uncompressed and gzip,
as a CDN serves it). Prints Markdown tables for README. Targets: the site <= 1.5 MB per model plus
10 MB of fixed pages (issue 42, :mod:`site_builder.budget`: bytes per model, mean and largest, and
fixed bytes are printed), every HTML page <= 300 KB, one deployment selection <= 300 KB compressed,
gallery first paint < 500 ms, deploy page interactive < 1 s (issue 19). Page weight (issue 41): the
requests the deploy page makes on load and after a reader has scrolled it to its end (every chart
drawn; charts load their library and data only once in view), with their bytes, the first view's
bytes as transferred compressed (issue 42: <= 500 KB), and whether the
largest model page's first view requests the chart library (it should not). ``--sizes-only``: the
sizes without a browser. Timings are measured here, never asserted in tests.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from site_builder import budget  # noqa: E402
from site_builder.budget import folder_bytes  # noqa: E402
from site_builder.budget import PAGE_LIMIT as PAGE_TARGET  # noqa: E402  (bytes of HTML per page)
from site_builder.screenshots import VIEWPORT, block_remote, launch, scroll_through  # noqa: E402
from site_builder.serve import start  # noqa: E402

FCP_TARGET_MS = 500.0
INTERACTIVE_TARGET_MS = 1000.0
SELECTION_TARGET = 300_000   # bytes, compressed, one deployment selection fetches
FIRST_VIEW_TARGET = 500_000  # bytes, compressed, a page's first view transfers (issue 42)

FCP_JS = """() => new Promise(resolve => {
  const find = () => performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');
  const nav = () => { const n = performance.getEntriesByType('navigation')[0];
    return n ? {dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd} : {dcl: null, load: null}; };
  const done = e => resolve(Object.assign({fcp: e ? e.startTime : null}, nav()));
  if (find()) return done(find());
  new PerformanceObserver((list, obs) => { if (find()) { obs.disconnect(); done(find()); } })
    .observe({type: 'paint', buffered: true});
  setTimeout(() => done(find()), 5000);
})"""

#: Before any page script: note the time (ms since navigation) the first summary number appears.
READY_SELECTOR = "#summary .num"
READY_JS = """(() => {
  window.__archReady = null;
  const seen = () => { if (window.__archReady === null && document.querySelector(%r)) window.__archReady = performance.now(); };
  new MutationObserver(seen).observe(document, {subtree: true, childList: true});
})();""" % READY_SELECTOR


def kb(n: float) -> str:
    return f"{n / 1000:,.1f} KB"


def mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB"


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def page_sizes(site: Path) -> list[dict]:
    """Per model: its page's HTML, the model document it fetches to draw its per-op table
    (``data/models/<org--name>.json.gz``, uncompressed and as stored), the drawings it loads on demand, and
    its deployment page's HTML."""
    rows = []
    for page in sorted((site / "models").glob("*/index.html")):
        folder = page.parent
        document = site / "data" / "models" / f"{folder.name}.json.gz"     # written gzip-compressed
        rows.append({"slug": folder.name, "model": page.stat().st_size,
                     "doc": len(gzip.decompress(document.read_bytes())) if document.exists() else 0,
                     "doc_gz": _size(document),
                     "drawings": sum(p.stat().st_size for p in folder.rglob("*.svg")),
                     "deploy": _size(folder / "deploy" / "index.html"),
                     "deploy_data": folder_bytes(site / "data" / "deploy" / folder.name)
                     + folder_bytes(site / "data" / "ops" / folder.name)})
    return rows


def largest_page(site: Path) -> tuple[str, int]:
    """The largest HTML page of the site (any index.html) and its size."""
    pages = [(p.relative_to(site).as_posix(), p.stat().st_size) for p in site.rglob("index.html")]
    return max(pages, key=lambda x: x[1])


@contextlib.contextmanager
def _served_browser(site: Path):
    """A local server over ``site`` and a headless Chromium: yields (browser, base URL)."""
    from playwright.sync_api import sync_playwright
    server, base = start(site)
    try:
        with sync_playwright() as p:
            browser = launch(p, full=True)     # a reader's browser: not the headless shell
            try:
                yield browser, base
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()


def first_render(site: Path, runs: int) -> list[dict]:
    out = []
    with _served_browser(site) as (browser, base):
        for _ in range(runs):
            context = browser.new_context(viewport=VIEWPORT)   # a cold cache each time
            block_remote(context)
            page = context.new_page()
            page.goto(base, wait_until="load")
            out.append(page.evaluate(FCP_JS))
            context.close()
    return out


def deploy_interactive(site: Path, path: str, runs: int) -> list[dict]:
    """Cold loads of the deploy page ``path`` (e.g. ``models/<slug>/deploy/?gpu=...``): ms from
    navigation to the first summary number (None if none within 20 s), and the bytes of the
    responses under ``data/`` that load fetched, uncompressed and gzip -6 (Netlify's brotli is smaller)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    out = []
    with _served_browser(site) as (browser, base):
        for _ in range(runs):
            context = browser.new_context(viewport=VIEWPORT)
            block_remote(context)
            context.add_init_script(READY_JS)
            page = context.new_page()
            fetched: list = []
            page.on("response", lambda r: "/data/" in r.url and fetched.append(r))
            page.goto(base + path, wait_until="commit")
            try:
                page.wait_for_function("() => window.__archReady !== null", timeout=20_000)
                ready = page.evaluate("() => window.__archReady")
            except PlaywrightTimeout:
                ready = None
            page.wait_for_load_state("networkidle")
            bodies = [r.body() for r in fetched if r.ok]
            out.append({"ready": ready, "files": len(bodies), "bytes": sum(len(b) for b in bodies),
                        "gzip": sum(len(gzip.compress(b, 6)) for b in bodies)})
            context.close()
    return out


def selection_fetches(site: Path, slugs: list[str]) -> dict[str, list[tuple[str, int]]]:
    """Per model (``org--name``), one cold load of its deploy page's default selection: each file
    under ``data/`` it fetched until the per-op table's expected times are filled and the network
    is idle (the page, its index, the selected config's formulas and expected times, the shared
    texts), as (path under data/, bytes as transferred: the stored gzip)."""
    out = {}
    with _served_browser(site) as (browser, base):
        for slug in slugs:
            context = browser.new_context(viewport=VIEWPORT)
            block_remote(context)
            page = context.new_page()
            fetched: list = []
            page.on("response", lambda r: "/data/" in r.url and fetched.append(r))
            page.goto(f"{base}models/{slug}/deploy/", wait_until="commit")
            page.wait_for_selector("#ops[data-expected-ready]", state="attached", timeout=60_000)
            page.wait_for_load_state("networkidle")
            out[slug] = [(r.url.split("/data/", 1)[1], len(r.body())) for r in fetched if r.ok]
            context.close()
    return out


CHART_LIBRARY = "/vendor/vega-embed."      # static/vendor/vega-embed.<sha8>.js


def page_requests(site: Path, path: str) -> dict:
    """One cold load of ``path``: the requests (every URL, the page itself included) and the bytes
    of their responses once the load is idle, and again after scrolling the page to its end; and
    how many of each were for the chart library."""
    out = {}
    with _served_browser(site) as (browser, base):
        context = browser.new_context(viewport=VIEWPORT)
        block_remote(context)
        page = context.new_page()
        responses: list = []
        page.on("response", lambda r: responses.append(r))
        page.goto(base + path, wait_until="networkidle")
        page.wait_for_timeout(300)

        def size(r) -> int:
            try:
                return len(r.body()) if r.ok else 0
            except Exception:     # playwright's Error: a response without a body (a redirect, a 204)
                return 0

        def transferred(r) -> int:
            """The response's bytes as a CDN sends them: gzip -6 where that is smaller (text), else as
            stored (the data files are gzip already, images compressed)."""
            try:
                body = r.body() if r.ok else b""
            except Exception:     # playwright's Error: a response without a body
                return 0
            return min(len(body), len(gzip.compress(body, 6)))

        def tally() -> dict:
            done = list(responses)
            return {"requests": len(done), "bytes": sum(size(r) for r in done),
                    "compressed": sum(transferred(r) for r in done),
                    "library": sum(CHART_LIBRARY in r.url for r in done)}

        out["load"] = tally()
        scroll_through(page)
        out["scrolled"] = tally()
        context.close()
    return out


def ok(good: bool) -> str:
    return "✓" if good else "✗"


def _size_rows(site: Path) -> None:
    """The size rows: the whole site against its per-model budget, bytes per model (mean, largest),
    fixed bytes, and each top folder."""
    sizes = budget.measure(site)
    n = len(sizes.per_model)
    largest = max(sizes.per_model, key=sizes.per_model.get)
    print(f"| total site size ({sizes.files:,} files, {n} models) | {mb(sizes.total)} "
          f"| ≤ {mb(sizes.budget)} ({mb(budget.PER_MODEL_BYTES)} x {n} + {mb(budget.FIXED_BYTES)}) | {ok(sizes.within())} |")
    print(f"| … per model, mean | {mb(sizes.mean_per_model)} | ≤ {mb(budget.PER_MODEL_BYTES)} "
          f"| {ok(sizes.mean_per_model <= budget.PER_MODEL_BYTES)} |")
    print(f"| … per model, largest ({largest}) | {mb(sizes.per_model[largest])} | | |")
    print(f"| … fixed (pages that do not grow with the corpus) | {mb(sizes.fixed)} | ≤ {mb(budget.FIXED_BYTES)} "
          f"| {ok(sizes.fixed <= budget.FIXED_BYTES)} |")
    for part in sorted(p.name for p in site.iterdir() if p.is_dir()):
        print(f"| … of which {part}/ | {mb(folder_bytes(site / part))} | | |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="build/site", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--deploy", default=None, metavar="PATH",
                        help="deploy page to time, relative to the site (default: the default selection of the "
                             "model with the most deployment data, models/<org--name>/deploy/)")
    parser.add_argument("--sizes-only", action="store_true", help="the site's size per model and fixed, no browser")
    parser.add_argument("--selection", nargs="+", metavar="MODEL", default=None,
                        help="only the data one deploy-page selection fetches for these models (org--name or a "
                             "unique suffix, e.g. DeepSeek-V4-Pro DeepSeek-V3), per file")
    args = parser.parse_args(argv)
    site: Path = args.site
    if not (site / "index.html").exists():
        print(f"error: {site}: no site — run `archledger build` first", file=sys.stderr)
        return 2
    sizes = page_sizes(site)
    if not sizes:
        print(f"error: {site}: no model pages under models/", file=sys.stderr)
        return 2
    if args.sizes_only:
        print("| measure | value | target | |\n|---|---|---|---|")
        _size_rows(site)
        return 0
    if args.selection:
        slugs = []
        for name in args.selection:
            hits = [r["slug"] for r in sizes if r["slug"] == name or r["slug"].endswith(name)]
            if len(hits) != 1:
                print(f"error: --selection {name}: {len(hits)} models match ({', '.join(hits[:5])})", file=sys.stderr)
                return 2
            slugs.append(hits[0])
        print("| model | files one selection fetched under data/ (bytes as transferred) | total | target | |\n"
              "|---|---|---|---|---|")
        for slug, files in selection_fetches(site, slugs).items():
            total = sum(n for _, n in files)
            listed = ", ".join(f"`{f}` {kb(n)}" for f, n in sorted(files, key=lambda x: -x[1]))
            print(f"| {slug} | {listed} | {kb(total)} | ≤ {kb(SELECTION_TARGET)} | {ok(total <= SELECTION_TARGET)} |")
        return 0
    deploy = args.deploy or f"models/{max(sizes, key=lambda r: r['deploy_data'])['slug']}/deploy/"
    try:
        timings = first_render(site, args.runs)
        loads = deploy_interactive(site, deploy, args.runs)
        deploy_weight = page_requests(site, deploy)
        model_path = f"models/{max(sizes, key=lambda r: r['model'])['slug']}/"
        model_weight = page_requests(site, model_path)
    except (ImportError, RuntimeError) as exc:
        print(f"error: the browser timings need Playwright and Chromium: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2

    biggest = max(sizes, key=lambda r: r["model"])
    page, page_bytes = largest_page(site)
    fcps = [t["fcp"] for t in timings if t["fcp"] is not None]
    best_fcp = min(fcps) if fcps else None
    best_dcl = min(t["dcl"] for t in timings if t["dcl"] is not None)
    best_load = min(t["load"] for t in timings if t["load"] is not None)
    readies = [t["ready"] for t in loads if t["ready"] is not None]
    fetched = max(loads, key=lambda t: t["gzip"])
    print("| measure | value | target | |\n|---|---|---|---|")
    _size_rows(site)
    print(f"| largest HTML page ({page}) | {kb(page_bytes)} | ≤ {kb(PAGE_TARGET)} | {ok(page_bytes <= PAGE_TARGET)} |")
    print(f"| largest model page HTML ({biggest['slug']}; its per-op table drawn from the model document, "
          f"{kb(biggest['doc'])} / {kb(biggest['doc_gz'])} gzip, fetched beside it) "
          f"| {kb(biggest['model'])} | ≤ {kb(PAGE_TARGET)} | {ok(biggest['model'] <= PAGE_TARGET)} |")
    if best_fcp is None:
        print(f"| gallery first contentful paint (best of {args.runs}) | not reported | < {FCP_TARGET_MS:.0f} ms | ✗ |")
    else:
        print(f"| gallery first contentful paint (best of {args.runs}) | {best_fcp:.0f} ms | < {FCP_TARGET_MS:.0f} ms "
              f"| {ok(best_fcp < FCP_TARGET_MS)} |")
    print(f"| gallery DOMContentLoaded / load (best of {args.runs}) | {best_dcl:.0f} ms / {best_load:.0f} ms | | |")
    if readies:
        print(f"| deploy page interactive: navigation to the summary numbers, `{deploy}` (best of {args.runs}) "
              f"| {min(readies):.0f} ms | < {INTERACTIVE_TARGET_MS:.0f} ms | {ok(min(readies) < INTERACTIVE_TARGET_MS)} |")
    else:
        print(f"| deploy page interactive, `{deploy}` | no summary number within 20 s | < {INTERACTIVE_TARGET_MS:.0f} ms | ✗ |")
    print(f"| data that selection fetched ({fetched['files']} files under data/), uncompressed / gzip "
          f"| {kb(fetched['bytes'])} / {kb(fetched['gzip'])} | ≤ {kb(SELECTION_TARGET)} compressed "
          f"| {ok(fetched['gzip'] <= SELECTION_TARGET)} |")
    for label, path, weight in (("deploy page", deploy, deploy_weight), ("model page", model_path, model_weight)):
        load, scrolled = weight["load"], weight["scrolled"]
        print(f"| {label} requests, `{path}`: on load / after scrolling to its end (every chart drawn) "
              f"| {load['requests']} ({mb(load['bytes'])}) / {scrolled['requests']} ({mb(scrolled['bytes'])}) | | |")
    for label, path, weight in (("deploy page", deploy, deploy_weight), ("model page", model_path, model_weight)):
        sent = weight["load"]["compressed"]
        print(f"| {label} first view transferred, compressed (gzip -6 where smaller, as a CDN serves it), `{path}` "
              f"| {kb(sent)} | ≤ {kb(FIRST_VIEW_TARGET)} | {ok(sent <= FIRST_VIEW_TARGET)} |")
    first = model_weight["load"]["library"]
    print(f"| model page's first view requests the chart library (`{model_path}`) | {'yes' if first else 'no'} "
          f"| no | {ok(not first)} |")
    print()
    print("| model | model page HTML | model document it fetches (per-op table), uncompressed / gzip | structure drawings (on demand) "
          "| deployment page HTML | deployment data (all selections) | |")
    print("|---|---|---|---|---|---|---|")
    for row in sizes:
        print(f"| {row['slug']} | {kb(row['model'])} | {kb(row['doc'])} / {kb(row['doc_gz'])} | {kb(row['drawings'])} | {kb(row['deploy'])} "
              f"| {mb(row['deploy_data'])} | {ok(row['model'] <= PAGE_TARGET)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
