"""The built site in real headless Chromium: pages load cleanly, offline, and their scripts work.

A three-model site is built once for the module (engine build over a small grid, then
``render_site``) and served by ``site_builder.serve.start`` on 127.0.0.1, with the response headers
production adds (netlify.toml: the Content-Security-Policy above all) sent by the server
(:data:`PRODUCTION_RULES`), so a page that would break under the CSP breaks here too. Chromium is Debian's
``chromium-headless-shell`` (else its ``chromium``) driven by Playwright (never a
Playwright-downloaded browser); when it is missing these tests fail, they do not skip: CI installs
it (.ci/run).
"""
from __future__ import annotations

import json
import re
import shutil
import threading
import time
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urldefrag, urljoin, urlsplit
from urllib.request import urlopen

import pytest
import yaml

from site_builder.screenshots import VIEWPORT, screenshots
from site_builder.serve import load_headers, start
from tests.browser_waits import PAGE_WAIT_MS

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site and Chromium twice. tests/test_site_readable.py and
#: tests/test_site_keyboard.py read the same site (:func:`built`, one build per process) and are in
#: this group too: apart, each worker that ran one of them built the three models' site again.
pytestmark = pytest.mark.xdist_group("site_browser")

REPO = Path(__file__).resolve().parent.parent
MODELS = ["Llama-3.1-8B", "Qwen3-30B-A3B", "DeepSeek-V3"]
LLAMA, QWEN, DEEPSEEK = "meta-llama--Meta-Llama-3.1-8B", "Qwen--Qwen3-30B-A3B", "deepseek-ai--DeepSeek-V3"
SLUGS = [LLAMA, QWEN, DEEPSEEK]
COMPARE_URL = f"compare/?a={LLAMA}&b={DEEPSEEK}"
DEPLOY_URL = f"models/{LLAMA}/deploy/?gpu=H100&kv=fp8"
TIMEOUT_MS = PAGE_WAIT_MS         # (the pages' default timeout and awaited()'s bound: one figure)
XSS_NOTES = "<script>alert(1)</script>"
XSS_NAME = 'Llama 3.1 8B"><img src=x onerror=alert(2)>'


# -- the site, its server, the browser ----------------------------------------------------------------

_BUILT: list[Path] = []       # the site of :func:`built`, once per test process


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """``out`` with ``results/`` and ``site/`` for three models over the small test grid, built once
    per test process: this module, tests/test_site_readable.py and tests/test_site_keyboard.py
    import this fixture and only read the folder (a test that renders or writes works in a copy
    or in its own tmp_path).

    The grid is tests/data/grid_small.yaml plus the prompt length the deployment page's GPU and
    parallel-config charts compare at (4096 tokens), so that those two charts have data too.
    """
    if _BUILT:
        return _BUILT[0]
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder import deploy_pages, render

    out = tmp_path_factory.mktemp("browser-site")
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_small.yaml").read_text())
    compare_input = deploy_pages.COMPARE_INPUT
    grid["scenarios"]["input_lengths"] = sorted(set(grid["scenarios"]["input_lengths"]) | {compare_input})
    grid_path = out / "grid.yaml"
    grid_path.write_text(yaml.safe_dump(grid, sort_keys=False))
    # in this process: two --jobs workers each paid the imports and the measured tables again (12.2 -> 9.0
    # CPU-s alone); tests/test_build.py builds with a worker pool
    build(load_corpus(), out, MODELS, grid_path, jobs=1)
    site = render.render_site(out / "results", out)
    assert (site / "index.html").exists()
    _BUILT.append(out)
    return out


@pytest.fixture(scope="module")
def site(built) -> Path:
    return built / "site"


@pytest.fixture(scope="module")
def base(site):
    server, url = start(site, rules=PRODUCTION_RULES)
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def names(built) -> dict[str, str]:
    """Display name per model slug, from the build's model documents."""
    return {s: json.loads((built / "results" / "models" / f"{s}.json").read_text())["name"] for s in SLUGS}


@dataclass
class Tab:
    """One browser context and page, recording console errors, page errors, failed and blocked requests."""
    context: object
    page: object
    errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)     # console warnings (a test asserts on them where it means to)
    inflight: set = field(default_factory=set)           # requests started and not yet finished or failed
    started: int = 0                                      # requests started so far
    production: bool = False                              # pages must carry the production headers (goto)

    def goto(self, url: str):
        """Open ``url``: its load event, then :meth:`settle`. A production tab's page must carry the
        production Content-Security-Policy (the server sends netlify.toml's headers)."""
        response = self.page.goto(url, wait_until="load")
        if self.production and response is not None:
            assert response.headers.get("content-security-policy") == PRODUCTION_CSP, \
                f"{url}: served without the production headers (start the server with PRODUCTION_RULES)"
        self.settle()
        return response

    def settle(self) -> None:
        """Return once the page is quiet: no request in flight, and none started while its main
        thread ran to idle and painted twice, twice in a row. Every request a page's script makes
        (a data file, the chart library when a chart comes into view, a drawing when its section
        opens) starts from a task or an observer callback that has run by then: the site sets no
        timer but ``setTimeout(f, 0)``. This is what Playwright's "networkidle" meant here (no
        request for 500 ms) without the half second each page load waited idle (hundreds of page
        loads a run); and unlike ``wait_for_load_state("networkidle")``, which returns at once on a
        page that was quiet once, it also waits for what a click or an opened section fetches."""
        quiet, deadline = 0, time.monotonic() + TIMEOUT_MS / 1000
        while time.monotonic() < deadline:
            if self.inflight:
                self.page.wait_for_timeout(10)
                quiet = 0
                continue
            before = self.started
            self.page.evaluate(IDLE_AND_PAINTED)
            quiet = quiet + 1 if not self.inflight and self.started == before else 0
            if quiet == 2:
                return
        raise AssertionError(f"the page did not go quiet in {TIMEOUT_MS / 1000:g} s: "
                             f"{sorted(r.url for r in self.inflight)[:5]} in flight")

    def scroll_through(self) -> None:
        """Bring every part of the page into view once, then :meth:`settle`: every chart is drawn
        (a chart is drawn once in view: its library and data are fetched then). The positions are
        those of site_builder.screenshots.scroll_through (the screenshots command's), each held until
        its intersection observers have run (two painted frames and a task) instead of 60 ms; and
        where that function, which cannot see requests, waits until no resource was added for 400
        ms (0.4-2 s a page), this tab sees the requests a chart makes and waits until none is in
        flight (issue 42: the suite's time)."""
        self.page.evaluate(SCROLL_STEPS)
        self.settle()


#: Resolves once the page's main thread is idle and two frames have been painted after it (or after
#: 2 s, for a page that is never idle: the round then simply repeats).
IDLE_AND_PAINTED = """() => new Promise(done => {
  const painted = () => requestAnimationFrame(() => requestAnimationFrame(() => done()));
  requestIdleCallback(painted, {timeout: 2000});
  setTimeout(done, 2000);
})"""


#: site_builder.screenshots.SCROLL_THROUGH_JS's scroll positions (a step of the window's height less
#: 100 px, the bottom, then back to the top), each held for two painted frames and a task: the
#: intersection observers' callbacks (queued when a frame is rendered) have run before the next step.
#: A position is held 2 s at most, as :data:`IDLE_AND_PAINTED` waits: ``page.evaluate`` has no time
#: limit of its own (tests/browser_waits.py), so a page that paints no frame (a stalled renderer) must
#: not hold the scroll, and the test, forever; the charts it did not draw then fail the test.
SCROLL_STEPS = """async () => {
  if (!document.querySelector('.chart')) return;      // every chart is a .chart: nothing waits to be seen
  const step = Math.max(200, window.innerHeight - 100);
  const seen = () => new Promise(r => {
    requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 0)));
    setTimeout(r, 2000);
  });
  for (let y = 0; y < document.documentElement.scrollHeight; y += step) { window.scrollTo(0, y); await seen(); }
  window.scrollTo(0, document.documentElement.scrollHeight); await seen();
  window.scrollTo(0, 0);
}"""


def _production_headers(path: str) -> dict[str, str]:
    """The headers netlify.toml adds to a response for ``path`` (lower-case names)."""
    netlify = REPO / "netlify.toml"
    rules = tomllib.loads(netlify.read_text()).get("headers", []) if netlify.exists() else []
    out: dict[str, str] = {}
    for rule in rules:
        if fnmatch(path, rule["for"]):
            out.update({k.lower(): str(v) for k, v in rule.get("values", {}).items()})
    return out


#: The Content-Security-Policy production sends with every page (read by :func:`_production_headers`,
#: the tests' own reading of netlify.toml, not the server's).
PRODUCTION_CSP = _production_headers("/").get("content-security-policy")

#: netlify.toml's headers as the tests' servers send them (``site_builder.serve.start(rules=...)``, what
#: ``archledger serve`` sends): each response carries them from the server, as in production.
PRODUCTION_RULES = load_headers(REPO / "netlify.toml")
#: Every URL whose host is not 127.0.0.1 (a JavaScript regular expression, matched by the Playwright
#: driver): only such requests are routed to Python, to be aborted and recorded.
REMOTE = re.compile(r"^(?!https?://127\.0\.0\.1(?::\d+)?(?:/|$))")


def moved_on(exc: Exception) -> bool:
    """Whether a route handler's Playwright call failed because its page or context closed while
    the request waited (the test moved on): nothing is left to answer, and nothing went wrong."""
    return "disposed" in str(exc) or "closed" in str(exc)


def _open(browser, production: bool = True) -> Tab:
    """A fresh context: requests off 127.0.0.1 are aborted and recorded. ``production``: each page
    :meth:`Tab.goto` opens must arrive with the production headers (the Content-Security-Policy
    above all), which the server sends (:data:`PRODUCTION_RULES`, tests/site_helpers.py ``served``).

    Local requests are not routed: routing every request through this process (Playwright's fetch,
    then fulfilling with the headers added) cost about 0.04 CPU-s a page load, some 15% of the
    browser's work (issue 42, the suite's time, eleventh pass); the server adds the same headers."""
    context = browser.new_context(viewport=VIEWPORT)
    tab = Tab(context, None, production=production)

    def route(r):
        tab.blocked.append(r.request.url)
        try:
            r.abort()
        except Exception as exc:   # playwright's Error; the package is imported by the fixture
            if not moved_on(exc):  # else nothing to abort
                raise

    context.route(REMOTE, route)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    tab.page = page

    def console(msg):
        if msg.type == "warning":
            tab.warnings.append(msg.text)
        if msg.type == "error":
            where = msg.location.get("url", "") if isinstance(msg.location, dict) else ""
            tab.errors.append(f"console error: {msg.text}" + (f" [{where}]" if where else ""))

    def dialog(d):
        tab.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    page.on("console", console)
    page.on("pageerror", lambda exc: tab.errors.append(f"page error: {exc}"))
    page.on("response", lambda r: r.status >= 400 and tab.errors.append(f"HTTP {r.status}: {r.url}"))
    # net::ERR_ABORTED is Chromium cancelling a load because its page navigated on (a favicon still
    # in flight when a test moves to the next URL), not a failure of the site: a missing file is an
    # HTTP status above, a refused connection another net:: error
    page.on("requestfailed", lambda r: r.url not in tab.blocked and "ERR_ABORTED" not in (r.failure or "") and
            tab.errors.append(f"request failed: {r.url} ({r.failure})"))
    page.on("dialog", dialog)

    def started(r):
        tab.inflight.add(r)
        tab.started += 1
    page.on("request", started)
    page.on("requestfinished", lambda r: tab.inflight.discard(r))
    page.on("requestfailed", lambda r: tab.inflight.discard(r))
    return tab


@pytest.fixture
def tab(browser):
    t = _open(browser)
    yield t
    t.context.close()


# -- crawling with urllib (what a static host would serve) ---------------------------------------------

class _Refs(HTMLParser):
    """href/src of a, link, script, img, iframe, source, and data-src; ids and names (fragment targets)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.refs: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key) and (key == "id" or tag == "a"):
                self.ids.add(attrs[key])
        for key in ("href", "src", "xlink:href"):
            if tag in ("a", "link", "script", "img", "iframe", "source") and attrs.get(key) is not None:
                self.refs.append((tag, attrs[key]))
        if attrs.get("data-src") and tag in ("div", "section", "figure", "details", "span"):
            # an HTML container whose content the page's script fetches (lazy drawings); SVG edges
            # also carry data-src (an endpoint's node id), which is not a URL
            self.refs.append(("data-src", attrs["data-src"]))

    handle_startendtag = handle_starttag


@dataclass
class Crawl:
    pages: list[str]                                  # HTML pages reached from /, in BFS order
    status: dict[str, int]                            # every internal URL (no fragment) -> HTTP status
    links: list[tuple[str, str, str, str]]            # (page, tag, raw ref, absolute URL)
    ids: dict[str, set[str]]                          # page URL -> element ids on it
    external: list[tuple[str, str, str]]              # (page, tag, URL) leaving 127.0.0.1


def _fetch(url: str) -> tuple[int, str, bytes]:
    try:
        with urlopen(url, timeout=15) as resp:
            return resp.status, resp.headers.get_content_type(), resp.read()
    except HTTPError as exc:
        return exc.code, "", b""
    except URLError as exc:
        raise AssertionError(f"{url}: {exc}") from exc


def _is_page(url: str, site: Path, base: str) -> bool:
    """A URL that a static host serves as an HTML page of the site (an index.html or .html file)."""
    path = unquote(urlsplit(url).path)[len(urlsplit(base).path):]
    target = site / path / "index.html" if path.endswith("/") or not path else site / path
    return target.is_file() and target.suffix == ".html"


@pytest.fixture(scope="module")
def crawl(site, base) -> Crawl:
    host = urlsplit(base).netloc
    result = Crawl([], {}, [], {}, [])
    queue = [base]
    while queue:
        url = queue.pop(0)
        if url in result.status:
            continue
        status, ctype, body = _fetch(url)
        result.status[url] = status
        if status != 200 or ctype != "text/html" or not _is_page(url, site, base):
            continue
        result.pages.append(url)
        parser = _Refs()
        parser.feed(body.decode("utf-8"))
        result.ids[url] = parser.ids
        for tag, ref in parser.refs:
            absolute = urljoin(url, ref)
            parts = urlsplit(absolute)
            if parts.scheme in ("mailto", "data", "javascript"):
                continue
            if parts.netloc != host:
                result.external.append((url, tag, absolute))
                continue
            result.links.append((url, tag, ref, absolute))
            target = urldefrag(absolute).url
            if target not in result.status and target not in queue:
                queue.append(target)
    return result


# -- tests -----------------------------------------------------------------------------------------------

def test_crawl_reaches_every_page(crawl, site, base):
    """Every page the renderer wrote is reachable from / by following links."""
    written = {base + p.parent.relative_to(site).as_posix() + "/" if p.parent != site else base
               for p in site.rglob("index.html")}
    reached = set(crawl.pages)
    assert len(written) >= 12, sorted(written)
    assert written - reached == set(), f"pages not linked from anywhere: {sorted(written - reached)}"


def test_internal_links_resolve(crawl, site, base):
    """Every href/src of a, link, script and img (and data-src) resolves to a 200 and to a file a static
    host serves; fragments name an element of their page; no resource is loaded from another host."""
    assert len(crawl.links) > 50
    problems = []
    root = urlsplit(base).path
    for page, tag, ref, absolute in crawl.links:
        target, fragment = urldefrag(absolute)
        if crawl.status[target] != 200:
            problems.append(f"broken: {page} -> {ref} ({absolute}): HTTP {crawl.status[target]}")
            continue
        # The local preview server lists directories; a static host (Netlify) only serves files.
        path = unquote(urlsplit(target).path)[len(root):]
        file = (site / path / "index.html") if (path.endswith("/") or not path) else site / path
        if not file.is_file():
            problems.append(f"not servable by a static host: {page} -> {ref}: no file {file.relative_to(site)}")
        if fragment and target in crawl.ids and unquote(fragment) not in crawl.ids[target]:
            problems.append(f"anchor without target: {page} -> {ref}")
    # Scripts, stylesheets and images are the site's own (links out are fine, fetched resources are not).
    problems += [f"resource from another host: {page}: <{tag}> {url}" for page, tag, url in crawl.external if tag != "a"]
    problems = sorted(set(problems))
    assert not problems, f"{len(problems)} link problems:\n" + "\n".join(problems)


def test_every_page_loads_without_errors_or_remote_requests(browser, crawl, base):
    """Each crawled page, the compare page and a deployment page with a query: no console error,
    no uncaught exception, no failed request, no request to a host other than 127.0.0.1."""
    urls = crawl.pages + [base + COMPARE_URL, base + DEPLOY_URL]
    assert len(urls) >= 14
    problems: dict[str, list[str]] = {}
    blocked: list[str] = []
    tab = _open(browser)
    try:
        csp = _production_headers("/").get("content-security-policy")
        for url in urls:
            tab.errors.clear()
            response = tab.goto(url)
            assert response is not None and response.status == 200, url
            assert response.headers.get("content-security-policy") == csp   # production headers applied
            tab.page.wait_for_timeout(150)      # late errors (chart rendering after the data arrives)
            if tab.errors:
                problems[url] = list(tab.errors)
        blocked = list(tab.blocked)
    finally:
        tab.context.close()
    assert not blocked, "requests leaving 127.0.0.1:\n" + "\n".join(blocked)
    assert not problems, f"{len(problems)} of {len(urls)} pages have errors:\n" + "\n".join(
        f"{url}\n  " + "\n  ".join(errs) for url, errs in problems.items())


def test_landscape_tooltips_come_from_its_formula_file(tab, base, site):
    """The landscape page keeps its formulas beside it (data/landscape-formulas.json.gz, numbered
    once per distinct text): a hovered cell shows the text its number names, with its where-line."""
    import gzip
    texts = json.loads(gzip.decompress((site / "data" / "landscape-formulas.json.gz").read_bytes()))
    tab.goto(base + "landscape/")
    tab.page.wait_for_function("() => Array.isArray(window.ARCH_PAGE.formulas)")
    num = tab.page.locator("table.landscape .num[data-fk]").first
    text = texts[int(num.get_attribute("data-fk"))]
    num.hover()
    tip = tab.page.locator("#tip")
    tip.wait_for(state="visible", timeout=5_000)
    shown = tip.inner_text()
    assert text.split("   where ")[0] in shown and "where" in shown, (text, shown)
    tab.page.mouse.move(1, 1)
    assert not tab.errors, tab.errors


def test_components_charts_name_their_lines(tab, base, built):
    """Issue 20: the components page's charts (KV, prefill, decode against context) each draw a
    legend whose labels are the contract's variants as the build wrote them (contracts.json)."""
    contracts = json.loads((built / "results" / "contracts.json").read_text())
    assert contracts
    tab.goto(base + "components/")
    tab.scroll_through()                                       # charts are drawn once in view
    for slot, contract in contracts.items():
        names = sorted({v["name"] for v in contract["variants"]})
        assert len(names) >= 5
        for kind in ("kv", "prefill", "decode"):
            # issue 41 item 4: small multiples, each panel's legend at most 5 variants (14 lines in one
            # chart cannot be told apart), every variant in exactly one panel's legend
            panels = tab.page.locator(f'.chart[data-spec^="{slot}.{kind}."]')
            assert panels.count() >= 2, (slot, kind)
            labels = []
            for i in range(panels.count()):
                chart = f'.chart[data-spec="{slot}.{kind}.{i}"]'
                tab.page.wait_for_selector(f"{chart} svg .role-legend-label text", state="attached")
                mine = tab.page.eval_on_selector_all(f"{chart} svg .role-legend-label text",
                                                     "els => els.map(e => e.textContent)")
                assert 1 <= len(mine) <= 5, (slot, kind, i, mine)
                labels += mine
            assert sorted(labels) == names, (slot, kind, labels)
    assert not tab.errors, tab.errors


@pytest.mark.parametrize("slug", SLUGS)
def test_deployment_charts_render(tab, base, slug):
    """The four vega-embed charts draw SVG marks with data (lines, points, bars, the context rule)."""
    tab.goto(f"{base}models/{slug}/deploy/")
    tab.scroll_through()                                       # charts are drawn once in view
    marks = {"chart-batch": "g.mark-line path, g.mark-symbol path",
             "chart-gpus": "g.mark-rect path",
             "chart-ep": "g.mark-rect path",
             "chart-kv": "g.mark-line path, g.mark-symbol path"}
    counts_js = """marks => Object.fromEntries(Object.entries(marks).map(([id, sel]) => {
        const svg = document.querySelector('#' + id + ' svg');
        return [id, svg ? svg.querySelectorAll(sel).length : -1]; }))"""
    try:
        tab.page.wait_for_function(f"marks => Object.values(({counts_js})(marks)).every(n => n > 0)",
                                   arg=marks, timeout=TIMEOUT_MS)
    except Exception:
        pass                                              # the assertion below says which chart is empty
    counts = tab.page.evaluate(counts_js, marks)
    assert all(n > 0 for n in counts.values()), \
        f"charts without marks (-1: no <svg> at all): {counts}; errors: {tab.errors}"
    assert tab.page.locator("#chart-kv svg g.mark-rule line, #chart-kv svg g.mark-rule path").count() >= 1
    assert tab.page.locator("#summary dl.cards dd").count() >= 5
    assert tab.page.locator("#pick select[name=gpu] option").count() >= 1


def test_deployment_query_selects_the_deployment(tab, base):
    """The selection in the URL query is the one shown, and stays in the URL."""
    tab.goto(base + DEPLOY_URL)
    tab.page.wait_for_selector("#summary dl.cards")
    form = tab.page.evaluate("() => Object.fromEntries(['gpu','kv','fw','cfg','input','batch']"
                             ".map(k => [k, document.querySelector('#pick [name=' + k + ']').value]))")
    assert form["gpu"] == "H100" and form["kv"] == "fp8", form
    query = dict(part.split("=", 1) for part in urlsplit(tab.page.url).query.split("&"))
    assert query["gpu"] == "H100" and query["kv"] == "fp8", tab.page.url
    assert all(form[k] for k in form), form


def test_formula_tooltip_on_hover(tab, base):
    tab.goto(base)
    tip = tab.page.locator("#tip")
    assert tip.is_hidden()
    num = tab.page.locator("#gallery .num").first
    formula = num.get_attribute("data-f")
    assert formula
    num.hover()
    tip.wait_for(state="visible", timeout=5_000)
    text = tip.inner_text()
    assert "=" in text and formula in text, text
    box, tip_box = num.bounding_box(), tip.bounding_box()
    assert tip_box["width"] > 0 and tip_box["height"] > 0
    assert tip_box["y"] >= box["y"] + box["height"] - 1, (box, tip_box)   # placed under the number
    tab.page.mouse.move(1, 1)
    tip.wait_for(state="hidden", timeout=5_000)


def test_formula_tooltip_on_keyboard_focus(tab, base):
    """Tab reaches a number; its formula shows without a mouse; Escape hides it; the arrow keys move
    to the next number of its table (one tab stop per table, tests/test_site_keyboard.py)."""
    tab.goto(base)
    tip = tab.page.locator("#tip")
    for _ in range(80):
        tab.page.keyboard.press("Tab")
        if tab.page.evaluate("() => document.activeElement.classList.contains('num')"):
            break
    else:
        pytest.fail("80 presses of Tab never focused a .num")
    formula = tab.page.evaluate("() => document.activeElement.getAttribute('data-f')")
    tip.wait_for(state="visible", timeout=5_000)
    assert "=" in tip.inner_text() and formula in tip.inner_text()
    assert tab.page.evaluate("() => document.activeElement.getAttribute('aria-describedby')") == "tip"
    tab.page.keyboard.press("Escape")
    tip.wait_for(state="hidden", timeout=5_000)
    tab.page.evaluate("() => { window.__first = document.activeElement; }")
    tab.page.keyboard.press("ArrowRight")
    assert tab.page.evaluate("() => document.activeElement.classList.contains('num') && document.activeElement !== window.__first")
    tip.wait_for(state="visible", timeout=5_000)
    assert tip.inner_text()


def test_model_page_tooltip_names_dims(tab, base):
    """On a model page the tooltip also gives the values of the dims the formula names."""
    tab.goto(f"{base}models/{LLAMA}/")
    num = tab.page.locator("dl.cards .num").first
    num.hover()
    tip = tab.page.locator("#tip")
    tip.wait_for(state="visible", timeout=5_000)
    text = tip.inner_text()
    assert "=" in text and num.get_attribute("data-f") in text, text
    assert "where" in text and "hidden = " in text, text


def test_gallery_search_and_family_filter(tab, base, names):
    tab.goto(base)
    rows = tab.page.locator("#gallery tbody tr[data-name]")
    visible = tab.page.locator("#gallery tbody tr[data-name]:visible")
    assert rows.count() == 3 and visible.count() == 3
    tab.page.fill("#q", "deepseek")
    tab.page.wait_for_function("() => document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])').length === 1")
    assert visible.count() == 1
    assert names[DEEPSEEK] in visible.first.inner_text()
    assert tab.page.inner_text("#count").startswith("1 ")
    tab.page.fill("#q", "no such model anywhere")
    tab.page.wait_for_function("() => document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])').length === 0")
    assert visible.count() == 0
    tab.page.fill("#q", "")
    tab.page.wait_for_function("() => document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])').length === 3")
    assert visible.count() == 3
    family = tab.page.locator(f"#gallery tbody tr[data-name]:has(a[href$='models/{QWEN}/'])").get_attribute("data-family")
    tab.page.select_option("#family", family)
    tab.page.wait_for_function("() => document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])').length < 3")
    assert 1 <= visible.count() < 3
    assert all(visible.nth(i).get_attribute("data-family") == family for i in range(visible.count()))
    assert names[QWEN] in visible.first.inner_text()
    assert not tab.errors, tab.errors


def test_gallery_search_survives_enter(tab, base):
    """Pressing Enter in the search box keeps the page and its filter (the form must not submit,
    also under the production Content-Security-Policy, which blocks inline event handlers)."""
    tab.goto(base)
    tab.page.fill("#q", "deepseek")
    tab.page.wait_for_function("() => document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])').length === 1")
    url = tab.page.url
    tab.page.press("#q", "Enter")
    tab.page.wait_for_timeout(500)
    assert tab.page.url == url, f"Enter navigated to {tab.page.url}; errors: {tab.errors}"
    assert tab.page.input_value("#q") == "deepseek"
    assert tab.page.locator("#gallery tbody tr[data-name]:visible").count() == 1
    assert not tab.errors, tab.errors


def test_gallery_trait_filter_and_lineage_groups(tab, base):
    """Ticking a trait keeps only the models whose graph has it (DeepSeek-V3 is the one MLA model
    here); a lineage header shows only while one of its models does; sorting flattens the list
    and "release order" brings the groups back."""
    tab.goto(base)
    shown = "() => Array.from(document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])')).map(r => r.dataset.lineage)"
    tab.page.check("#traits input[value=mla]")
    tab.page.wait_for_function("() => document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])').length === 1")
    assert tab.page.locator("#gallery tbody tr[data-name]:visible").first.get_attribute("data-traits").split() == ["moe", "mla", "mtp"]
    assert tab.page.locator("#gallery tbody tr.lineage:visible").count() == 1
    tab.page.check("#traits input[value=moe]")
    assert tab.page.locator("#gallery tbody tr[data-name]:visible").count() == 1
    tab.page.uncheck("#traits input[value=mla]")
    tab.page.wait_for_function("() => document.querySelectorAll('#gallery tbody tr[data-name]:not([hidden])').length === 2")
    tab.page.uncheck("#traits input[value=moe]")
    tab.page.click("th[data-sort=params_total] button")
    assert tab.page.locator("#gallery tbody tr.lineage:visible").count() == 0
    tab.page.click("#release-order")
    assert tab.page.locator("#gallery tbody tr.lineage:visible").count() == 3
    assert tab.page.evaluate(shown) == sorted(tab.page.evaluate(shown), key=str.lower)
    assert not tab.errors, tab.errors


def test_structure_graph_expands(tab, base):
    """The first level is drawn open; clicking a closed level's summary opens it and shows its graph
    (drawings below the first may be fetched on toggle); every level opens to a drawing."""
    tab.goto(f"{base}models/{DEEPSEEK}/")
    levels = tab.page.locator("details.level")
    assert levels.count() >= 3
    first = levels.first
    assert first.get_attribute("open") is not None
    assert first.locator("svg.graph g.node").first.is_visible()
    closed = tab.page.locator("details.level:not([open])")
    n_closed = closed.count()
    assert n_closed >= 2, "every structure level is already open: nothing to expand"
    one = closed.first
    level_id = one.get_attribute("id")
    assert not one.locator("svg.graph").first.is_visible()
    one.locator("summary").click()
    one = tab.page.locator(f"details.level[id='{level_id}']")
    assert one.get_attribute("open") is not None
    nodes = one.locator("svg.graph g.node")
    nodes.first.wait_for(state="visible", timeout=10_000)
    assert nodes.count() >= 2
    box = one.locator("svg.graph").bounding_box()
    assert box and box["width"] > 50 and box["height"] > 50, box
    for i in range(levels.count()):                       # the rest open to a drawing too
        level = levels.nth(i)
        if level.get_attribute("open") is None:
            level.locator("summary").click()
        level.locator("svg.graph g.node").first.wait_for(state="visible", timeout=10_000)
    assert not tab.errors, tab.errors


def test_component_node_opens_its_drawing(tab, base):
    """The model page promises "a component node opens its own drawing": following a component
    node's link in the first drawing opens the target level and shows its graph."""
    tab.goto(f"{base}models/{DEEPSEEK}/")
    link = tab.page.locator("details.level[open] svg.graph a[href^='#c-']").first
    assert link.count() == 1, "no component node links to its drawing"
    href = link.get_attribute("href")
    target = tab.page.locator(f"details.level[id='{href[1:]}']")
    assert target.count() == 1, href
    assert target.get_attribute("open") is None
    link.click()
    tab.page.wait_for_function("id => location.hash === '#' + id", arg=href[1:])
    try:
        target.locator("svg.graph g.node").first.wait_for(state="visible", timeout=5_000)
    except Exception:
        pass                                              # asserted below, with a readable message
    assert target.get_attribute("open") is not None, f"{href}: the target <details> stayed closed"
    assert target.locator("svg.graph g.node").first.is_visible()
    assert not tab.errors, tab.errors


def test_compare_shows_both_models(tab, base, names):
    tab.goto(base + COMPARE_URL)
    compare = tab.page.locator("#compare")
    tab.page.wait_for_selector("#compare table")
    text = compare.inner_text()
    assert names[LLAMA] in text and names[DEEPSEEK] in text, text[:500]
    assert tab.page.input_value("#pair select[name=a]") == LLAMA
    assert tab.page.input_value("#pair select[name=b]") == DEEPSEEK
    assert compare.locator(".num[data-f]").count() >= 6


def test_graph_diff_marks_changed_nodes(tab, crawl):
    diffs = [u for u in crawl.pages if "/components/diff/" in u]
    assert diffs, "no graph diff page linked from the site"
    for url in diffs:
        tab.goto(url)
        nodes = tab.page.locator("svg.graph g.node")
        assert nodes.count() >= 2, url
        differing = tab.page.locator("svg.graph g.node.status-changed, svg.graph g.node.status-only_a, "
                                     "svg.graph g.node.status-only_b")
        assert differing.count() >= 1, url
        assert differing.first.is_visible(), url


def test_templates_escape_model_text(built, browser, tmp_path):
    """A model document with markup in its notes and name renders as text, and runs no script."""
    out = tmp_path / "xss"
    shutil.copytree(built / "results", out / "results")
    doc_path = out / "results" / "models" / f"{LLAMA}.json"
    doc = json.loads(doc_path.read_text())
    doc["notes"], doc["name"] = XSS_NOTES, XSS_NAME
    doc_path.write_text(json.dumps(doc))
    from site_builder.render import render_site
    site = render_site(out / "results", out)
    html = (site / "models" / LLAMA / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert XSS_NOTES not in html
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert XSS_NOTES not in text and "<img src=x" not in text, page.relative_to(site)
    server, url = start(site)
    tab = _open(browser, production=False)     # no CSP: the templates must escape on their own
    try:
        tab.goto(f"{url}models/{LLAMA}/")
        assert XSS_NOTES in tab.page.inner_text(".notes")
        assert tab.page.locator("h1").inner_text() == XSS_NAME
        for path in ("", f"models/{LLAMA}/deploy/", "components/", f"compare/?a={LLAMA}&b={QWEN}"):
            tab.goto(url + path)
            tab.page.wait_for_timeout(200)
        tab.page.wait_for_selector("#compare table")
        assert XSS_NAME in tab.page.inner_text("#compare")
        assert tab.page.locator("img").count() == 0
        assert not tab.dialogs, f"script from model text ran: {tab.dialogs}"
    finally:
        tab.context.close()
        server.shutdown()
        server.server_close()


def test_screenshots_command(built, tmp_path, capsys):
    """`archledger screenshots` writes five non-trivial PNGs; without a site it is a one-line error."""
    assert screenshots(tmp_path / "nowhere", tmp_path / "shots", DEEPSEEK) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1
    to = tmp_path / "shots"
    # The command in another thread: Playwright's sync API does not nest inside this thread's open
    # browser, and a thread without an event loop of its own may start one (it was a second Python
    # process, whose start and imports cost about 2 CPU-s: issue 42, the suite's time).
    from site_builder.cli import main as site_main
    done: list = []
    # a daemon: a command still running when the join gives up must not hold the worker's exit
    worker = threading.Thread(target=lambda: done.append(site_main(["screenshots", "--out", str(built), "--to", str(to),
                                                                    "--model", DEEPSEEK])), daemon=True)
    worker.start()
    worker.join(timeout=180)
    captured = capsys.readouterr()
    assert not worker.is_alive(), f"`archledger screenshots` still running after 180 s: {captured.err}"
    assert done == [0], captured.err
    for name in ("gallery", "model", "deploy", "compare", "diff"):   # compare and a graph diff: issue 20's new views
        png = to / f"{name}.png"
        assert str(png) in captured.out
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(data) > 10_000, (png, len(data))


def test_model_page_shows_the_guard_table(tab, base):
    """The model page says what was checked and against which evidence."""
    tab.goto(f"{base}models/{LLAMA}/")
    assert "verified against modeling code" in tab.page.inner_text(".lede")
    rows = tab.page.locator("#guards tbody tr")
    assert rows.count() == 7
    assert [rows.nth(i).locator("td").first.inner_text() for i in range(7)] == \
        ["weight", "packing", "shape", "schedule", "structural", "axiom", "source"]
    assert all(rows.nth(i).locator("td").nth(2).inner_text().startswith("pass") for i in range(7))
    assert "modeling-code" in rows.first.locator("td").nth(1).inner_text()


# -- issue 20: one formatter and one tooltip component on every page ----------------------------------

def _gallery_row(tab, slug: str):
    return tab.page.locator(f"#gallery tbody tr[data-m='{slug}']")


def test_gallery_tooltip_names_dims(tab, base):
    """The gallery's numbers get the model page's "where dim = value" line, with their own model's dims."""
    tab.goto(base)
    tip = tab.page.locator("#tip")
    for slug, hidden in ((LLAMA, 4096), (DEEPSEEK, 7168)):     # config.json hidden_size
        _gallery_row(tab, slug).locator(".num[data-f]").first.hover()
        tip.wait_for(state="visible", timeout=5_000)
        assert "where" in tip.inner_text() and f"hidden = {hidden}" in tip.inner_text(), tip.inner_text()
        tab.page.mouse.move(1, 1)
    assert not tab.errors, tab.errors


def test_compare_prints_max_context_as_the_gallery(tab, base):
    tab.goto(base)
    shown = {slug: _gallery_row(tab, slug).locator("td").nth(6).inner_text() for slug in (LLAMA, DEEPSEEK)}
    assert shown == {LLAMA: "128K", DEEPSEEK: "160K"}                # 131072 and 163840 tokens
    tab.goto(base + COMPARE_URL)
    tab.page.wait_for_selector("#compare table")
    row = tab.page.locator("#compare table tr:has(th:text-is('Max context'))")
    assert [row.locator("td").nth(i).inner_text() for i in range(2)] == [shown[LLAMA], shown[DEEPSEEK]]
    # and its tooltips name the dims of their own model
    tab.page.locator("#compare table tr:has(th:text-is('Parameters')) td").nth(1).locator(".num").hover()
    tip = tab.page.locator("#tip")
    tip.wait_for(state="visible", timeout=5_000)
    assert "hidden = 7168" in tip.inner_text(), tip.inner_text()
    assert not tab.errors, tab.errors


def test_compare_shows_the_fixed_kv_beside_the_growing(tab, base, built):
    """Issue 41: compare's KV row left out a hybrid's fixed state per request that the gallery shows.
    Both models here hold no state and no window (Llama-3.1-8B: full attention in every layer;
    DeepSeek-V3: MLA in every layer), so 0 B each; the row reads models.parquet's kv_fixed_bytes."""
    import polars as pl
    fixed = dict(pl.read_parquet(built / "results" / "models.parquet").select("model_id", "kv_fixed_bytes").iter_rows())
    assert fixed["meta-llama/Meta-Llama-3.1-8B"] == 0 and fixed["deepseek-ai/DeepSeek-V3"] == 0
    tab.goto(base + COMPARE_URL)
    tab.page.wait_for_selector("#compare table")
    row = tab.page.locator("#compare table tr:has(th:text-is('KV fixed per request (BF16)'))")
    assert [row.locator("td").nth(i).inner_text() for i in range(2)] == ["0 B", "0 B"]
    assert not tab.errors, tab.errors


def test_per_op_table_says_routed_expert_params_are_per_expert(tab, base):
    """DeepSeek-V3's routed gate_proj: hidden 7168 x moe_intermediate_size 2048 = 14,680,064 params
    for ONE expert, of n_routed_experts 256, num_experts_per_tok 8 active (config.json)."""
    tab.goto(f"{base}models/{DEEPSEEK}/")
    row = tab.page.locator("#op-table tbody tr:has(code:text-is('main/layers[moe]/mlp/experts/gate_proj'))")
    cell = " ".join(row.locator("td").nth(3).inner_text().split())
    assert cell == "14.7 M per expert × 256, 8 active", cell
    dense = tab.page.locator("#op-table tbody tr:has(code:text-is('main/layers[dense]/mlp/gate_proj'))")
    assert "per" not in dense.locator("td").nth(3).inner_text()
    assert not tab.errors, tab.errors
