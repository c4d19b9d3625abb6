"""``archledger screenshots``: full-page PNGs of the gallery, one model page, its deployments (with the
roofline), the compare page (with the side-by-side deployment) and a zoomable graph diff.

Layer: site_builder. Serves the built site on 127.0.0.1 (``site_builder.serve.start``) and drives
the system's Chromium through Playwright (``pip install -e '.[test]'``; Playwright never downloads
a browser here: Debian's ``chromium-headless-shell``, else its ``chromium``, or the binary named
by ``ARCHLEDGER_CHROMIUM``).
Requests to any other host are blocked, so a screenshot shows exactly what the static site holds.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

#: Flags for a quiet, offline headless Chromium (no sandbox: CI runs as root in a container).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: The headless shell first (Debian's ``chromium-headless-shell``; Google's build of it,
#: ``chrome-headless-shell``, is the one Playwright itself runs headless): the same Blink without
#: the full browser's windowing and display compositor, it renders the test suite's pages for half
#: the CPU of ``chromium --headless=new`` (tests/test_site_browser.py: 22 against 45 CPU-s;
#: docs/scaling-2.md, "The test suite, fifteenth pass").
HEADLESS_SHELLS = ("chromium-headless-shell", "chrome-headless-shell")
#: A full Chromium, looked for after the shells: Debian's wrapper by its path, then names on PATH.
FULL_CHROMIUMS = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
LOCAL_HOSTS = {"127.0.0.1"}
VIEWPORT = {"width": 1280, "height": 900}


def chromium_path(full: bool = False) -> Path | None:
    """The Chromium binary to drive: $ARCHLEDGER_CHROMIUM, else a headless shell on PATH, else a full
    Chromium (:data:`FULL_CHROMIUMS`). ``full``: a full Chromium only (benchmarks/site.py times pages
    for a reader's browser, whose display compositor the shell lacks)."""
    for name in (os.environ.get("ARCHLEDGER_CHROMIUM"), *(() if full else HEADLESS_SHELLS), *FULL_CHROMIUMS):
        candidate = shutil.which(name) if name and os.sep not in name else name
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def chromium_args(path: Path) -> list[str]:
    """:data:`CHROMIUM_ARGS` for the binary at ``path``: a full Chromium also gets ``--headless=new``
    (its only headless mode; a headless shell is nothing else)."""
    shell = any(path.name.startswith(name) for name in HEADLESS_SHELLS)
    return CHROMIUM_ARGS if shell else ["--headless=new", *CHROMIUM_ARGS]


def launch(playwright, full: bool = False):
    """Launch headless Chromium (``full``: see :func:`chromium_path`); raises RuntimeError with a
    one-line reason if there is none."""
    path = chromium_path(full)
    if path is None:
        wanted = "`chromium`" if full else "`chromium-headless-shell` or `chromium`"
        raise RuntimeError(f"no Chromium found (install Debian's {wanted}, or set ARCHLEDGER_CHROMIUM)")
    return playwright.chromium.launch(executable_path=str(path), args=chromium_args(path))


def block_remote(context, blocked: list[str] | None = None) -> None:
    """Abort every request whose host is not 127.0.0.1 (recorded in ``blocked`` when given)."""
    def handle(route):
        url = route.request.url
        if urlsplit(url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            if blocked is not None:
                blocked.append(url)
            route.abort()
    context.route("**/*", handle)


#: Scroll a page through, a window at a time, and back to the top: what a reader who reads it all
#: does, so every chart (a ``.chart`` element; a page without one returns at once) comes into view and is drawn (charts load their library and data only then,
#: static/js/site.js archChart: an IntersectionObserver fires within a frame, so 60 ms a window is
#: enough). Resolves once back at the top and no request has finished for 400 ms (the page's
#: resource timing entries; 15 s at most).
SCROLL_THROUGH_JS = """async () => {
  if (!document.querySelector('.chart')) return;      // every chart is a .chart: nothing waits to be seen
  const step = Math.max(200, window.innerHeight - 100), pause = ms => new Promise(r => setTimeout(r, ms));
  for (let y = 0; y < document.documentElement.scrollHeight; y += step) { window.scrollTo(0, y); await pause(60); }
  window.scrollTo(0, document.documentElement.scrollHeight); await pause(60);
  window.scrollTo(0, 0);
  const count = () => performance.getEntriesByType('resource').length;
  for (let t = 0, n = -1; t < 15000 && n !== count(); t += 400) { n = count(); await pause(400); }
}"""


def scroll_through(page) -> None:
    """:data:`SCROLL_THROUGH_JS` on ``page``."""
    page.evaluate(SCROLL_THROUGH_JS)


def screenshots(site: Path, to: Path, model_slug: str) -> int:
    """Save gallery.png, model.png, deploy.png, compare.png and (when the site has graph diffs)
    diff.png, full page, under ``to``; 0 on success, 2 on error."""
    site, to = Path(site), Path(to)
    if not (site / "index.html").exists():
        print(f"error: {site}: no site — run `archledger build` first", file=sys.stderr)
        return 2
    if not (site / "models" / model_slug / "index.html").exists():
        print(f"error: {site}: no model page models/{model_slug}/ (pass --model <org--name>)", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import Error as PlaywrightError, sync_playwright
    except ImportError:
        print("error: playwright is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    from site_builder.serve import start

    to.mkdir(parents=True, exist_ok=True)
    server, base = start(site)
    shots = [("gallery", base, "#gallery tbody tr"),
             ("model", f"{base}models/{model_slug}/", "details.level svg.graph"),
             ("deploy", f"{base}models/{model_slug}/deploy/", "#chart-batch svg")]
    # compare: this model beside the next one the site has (itself when it has one model), with the
    # side-by-side deployment; a graph diff with its zoom bar, when the components page drew any
    others = sorted(p.name for p in (site / "models").iterdir() if p.is_dir() and p.name != model_slug)
    shots.append(("compare", f"{base}compare/?a={model_slug}&b={(others or [model_slug])[0]}", "#side-table table"))
    diffs = sorted(p.name for p in (site / "components" / "diff").glob("*") if p.is_dir())
    if diffs:
        shots.append(("diff", f"{base}components/diff/{diffs[0]}/", ".panzoom-bar"))
    try:
        with sync_playwright() as p:
            try:
                browser = launch(p)
            except (RuntimeError, PlaywrightError) as exc:
                print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
                return 2
            try:
                context = browser.new_context(viewport=VIEWPORT)
                block_remote(context)
                page = context.new_page()
                for name, url, ready in shots:
                    page.goto(url, wait_until="networkidle")
                    scroll_through(page)     # a full-page picture shows every chart, drawn once seen
                    try:
                        page.wait_for_selector(ready, state="attached", timeout=15_000)
                        page.wait_for_timeout(300)  # let the last chart finish its transition
                    except PlaywrightError:
                        print(f"warning: {url}: {ready} did not appear; saving the page as it is", file=sys.stderr)
                    target = to / f"{name}.png"
                    # a full-page picture of a long page (every chart drawn) on a busy two-core
                    # machine can take longer than Playwright's default 30 s
                    page.screenshot(path=str(target), full_page=True, timeout=120_000)
                    print(target)
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return 0
