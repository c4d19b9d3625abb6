"""Benchmark the built site: page weight per model and the gallery's time to first render.

Run from the repo root after a build: ``python benchmarks/site.py [--site build/site] [--runs 5]``.
Renders nothing itself. Reports each model's HTML (shared assets under static/ excluded; the
structure drawings its page fetches on demand and the JSON a deployment selection fetches listed
apart), the site's total size, and the
gallery's first contentful paint in headless Chromium served from 127.0.0.1 (best of N cold loads,
with navigation timing beside it). Prints a Markdown table for README. Targets: a model page under
300 KB of HTML, first render of the gallery under 500 ms. Timings are measured here, never
asserted in tests.
"""
from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from site_builder.screenshots import VIEWPORT, block_remote, launch  # noqa: E402
from site_builder.serve import start  # noqa: E402

PAGE_TARGET = 300_000        # bytes of HTML per model page
FCP_TARGET_MS = 500.0

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


def kb(n: float) -> str:
    return f"{n / 1000:,.1f} KB"


def mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB"


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _gz(path: Path) -> int:
    """Compressed size as a CDN serves it (gzip -6; Netlify's brotli is smaller)."""
    return len(gzip.compress(path.read_bytes(), 6)) if path.exists() else 0


def page_sizes(site: Path) -> list[dict]:
    """Per model: its page's HTML, its deployment page's HTML, the drawings fetched on demand, and the
    most JSON one deployment selection fetches (index + op strings + one GPU/count/config's rows and
    per-op rows), uncompressed and gzip-compressed."""
    rows = []
    for page in sorted((site / "models").glob("*/index.html")):
        folder = page.parent
        deploy = folder / "deploy" / "index.html"
        data, ops = site / "data" / "deploy" / folder.name, site / "data" / "ops" / folder.name
        shared = [data / "index.json", ops / "strings.json"]
        per_pick = [(p.relative_to(data).with_suffix("").as_posix(), [p, ops / p.relative_to(data)])
                    for p in data.glob("*/*.json")]
        pick, files = max(per_pick, key=lambda g: sum(_size(f) for f in g[1])) if per_pick else ("", [])
        rows.append({"slug": folder.name, "model": page.stat().st_size,
                     "deploy": deploy.stat().st_size if deploy.exists() else 0,
                     "drawings": sum(p.stat().st_size for p in folder.rglob("*.svg")),
                     "deploy_data": sum(_size(f) for f in shared + files),
                     "deploy_data_gz": sum(_gz(f) for f in shared + files), "deploy_gpu": pick})
    return rows


def first_render(site: Path, runs: int) -> list[dict]:
    from playwright.sync_api import sync_playwright
    server, base = start(site)
    try:
        with sync_playwright() as p:
            browser = launch(p)
            try:
                out = []
                for _ in range(runs):
                    context = browser.new_context(viewport=VIEWPORT)   # a cold cache each time
                    block_remote(context)
                    page = context.new_page()
                    page.goto(base, wait_until="load")
                    out.append(page.evaluate(FCP_JS))
                    context.close()
                return out
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="build/site", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    site: Path = args.site
    if not (site / "index.html").exists():
        print(f"error: {site}: no site — run `archledger build` first", file=sys.stderr)
        return 2
    sizes = page_sizes(site)
    if not sizes:
        print(f"error: {site}: no model pages under models/", file=sys.stderr)
        return 2
    try:
        timings = first_render(site, args.runs)
    except (ImportError, RuntimeError) as exc:
        print(f"error: first render needs Playwright and Chromium: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2

    def ok(good: bool) -> str:
        return "✓" if good else "✗"

    biggest = max(sizes, key=lambda r: r["model"])
    fcps = [t["fcp"] for t in timings if t["fcp"] is not None]
    best_fcp = min(fcps) if fcps else None
    best_dcl = min(t["dcl"] for t in timings if t["dcl"] is not None)
    best_load = min(t["load"] for t in timings if t["load"] is not None)
    print("| measure | value | target | |\n|---|---|---|---|")
    print(f"| largest model page HTML ({biggest['slug']}) | {kb(biggest['model'])} | < {kb(PAGE_TARGET)} "
          f"| {ok(biggest['model'] < PAGE_TARGET)} |")
    print(f"| total site size ({sum(1 for _ in site.rglob('*') if _.is_file()):,} files) | {mb(folder_bytes(site))} | | |")
    for part in ("static", "data", "downloads", "models", "components"):
        print(f"| … of which {part}/ | {mb(folder_bytes(site / part))} | | |")
    if best_fcp is None:
        print(f"| gallery first contentful paint (best of {args.runs}) | not reported | < {FCP_TARGET_MS:.0f} ms | ✗ |")
    else:
        print(f"| gallery first contentful paint (best of {args.runs}) | {best_fcp:.0f} ms | < {FCP_TARGET_MS:.0f} ms "
              f"| {ok(best_fcp < FCP_TARGET_MS)} |")
    print(f"| gallery DOMContentLoaded / load (best of {args.runs}) | {best_dcl:.0f} ms / {best_load:.0f} ms | | |")
    print()
    print("| model | model page HTML | structure drawings (on demand) | deployment page HTML "
          "| JSON of the largest deployment selection, uncompressed / gzip | |")
    print("|---|---|---|---|---|---|")
    for row in sizes:
        print(f"| {row['slug']} | {kb(row['model'])} | {kb(row['drawings'])} | {kb(row['deploy'])} "
              f"| {kb(row['deploy_data'])} / {kb(row['deploy_data_gz'])} ({row['deploy_gpu']}) "
              f"| {ok(row['model'] < PAGE_TARGET)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
