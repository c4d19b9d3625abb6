"""The suite, eleventh pass (issue 42): no browser test can wait forever.

A third pytest-xdist worker once sat five minutes in Playwright's event loop on a page that never
answered: ``page.evaluate`` waits for a script's promise with no time limit. These tests hold the
bounds: tests/browser_waits.py's :func:`awaited` (a promise the page never settles fails, naming
what it waited for; what it returns is what ``evaluate`` returns), the scroll that draws the charts
(it ends on a page that paints no frame), :func:`time_limit` behind every browser test (a wait
nothing else bounds fails, naming its line, and the browser answers after it), and a rule over the
tests' sources: a script that awaits something is never handed to a bare ``evaluate``.

And the browser tests' requests: the servers send netlify.toml's headers themselves, so no local
request is routed through this process (it cost about 0.04 CPU-s a page load). Consistency checks
hold what routing did: the servers' headers are the ones the route added, path by path; the routed
pattern is the old host rule, URL by URL; a production tab refuses a page without the headers.
"""
from __future__ import annotations

import ast
import re
import signal
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import urlopen

import pytest

from site_builder.screenshots import LOCAL_HOSTS
from site_builder.serve import start
from tests.browser_waits import BROWSER_TEST_LIMIT_S, awaited, time_limit
from tests.site_helpers import served
from tests.test_site_browser import IDLE_AND_PAINTED, REMOTE, SCROLL_STEPS, _open, _production_headers

TESTS = Path(__file__).resolve().parent
NEVER = "() => new Promise(() => {})"


@pytest.fixture(scope="module")
def page(browser):
    tab = _open(browser, production=False)
    tab.page.set_content("<p>a page of the tests' own</p>")
    yield tab.page
    tab.context.close()


def test_awaited_returns_what_evaluate_returns(page):
    """A consistency check: the same scripts through ``awaited`` and through ``evaluate`` give equal
    values (floats to the bit, nesting, null, an undefined result)."""
    scripts = [("x => Promise.resolve(x * 3)", 0.1), ("() => ({a: [1, 2.5, null], b: 'text', c: true})", None),
               ("async x => { await null; return [x, -0.0, 1e308, 2 ** 53 + 2]; }", 7), ("() => undefined", None)]
    for script, arg in scripts:
        assert awaited(page, script, arg, what=script) == page.evaluate(script, arg), script


def test_awaited_fails_naming_what_it_waited_for(page):
    """A promise the page never settles (a data file never answered) fails within the bound, with
    what it waited for; the page answers the next call."""
    with pytest.raises(AssertionError, match=r"waited 0\.3 s for the never-answered file: the page never answered"):
        awaited(page, NEVER, what="the never-answered file", timeout_ms=300)
    assert page.evaluate("1 + 1") == 2


def test_awaited_reports_the_pages_error(page):
    with pytest.raises(AssertionError, match=r"the failing script failed in the page: Error: boom"):
        awaited(page, "async () => { throw new Error('boom'); }", what="the failing script")


def test_the_charts_scroll_ends_on_a_page_that_paints_no_frame(page):
    """``Tab.scroll_through``'s script holds each scroll position for two painted frames; on a page
    whose frames never come (``requestAnimationFrame`` never calls back, as on a stalled renderer)
    each position is held 2 s at most, so the scroll ends (three positions here: the top, one step,
    the bottom): it once waited forever. The settle script's round ends there too."""
    page.set_content("<div class='chart' style='height: 1500px'></div>")
    page.evaluate("() => { window.requestAnimationFrame = () => 0; }")
    assert awaited(page, SCROLL_STEPS, what="the scroll of a page without frames", timeout_ms=15_000) is None
    assert awaited(page, IDLE_AND_PAINTED, what="a settle round without frames", timeout_ms=15_000) is None
    page.set_content("<p>a page of the tests' own</p>")


def test_every_browser_test_runs_under_the_limit(page):
    """tests/conftest.py's ``_browser_test_limit`` times each test that uses the browser: its timer
    runs here, at most the limit."""
    left, _ = signal.getitimer(signal.ITIMER_REAL)
    assert 0 < left <= BROWSER_TEST_LIMIT_S


def test_a_wait_past_the_limit_fails_naming_its_line(page):
    """A wait nothing else bounds (a bare ``evaluate`` of a promise never settled) fails when the
    limit runs out, naming what was limited and the line that waited; the page and the browser answer
    after it, and the enclosing limit (the test's own) is running again."""
    with pytest.raises(AssertionError) as failure:
        with time_limit(0.5, "the probe"):
            page.evaluate(NEVER)
    assert re.fullmatch(r"the probe: still waiting after 0\.5 s, at test_suite_eleventh_pass\.py:\d+ "
                        r"`page\.evaluate\(NEVER\)`", str(failure.value)), str(failure.value)
    assert page.evaluate("2 + 2") == 4
    assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= BROWSER_TEST_LIMIT_S


#: What marks a script that waits for something (a promise, an await).
AWAITS = re.compile(r"\basync\b|\bawait\b|\.then\(|new Promise|Promise\.")
#: The scripts a bare ``evaluate`` may run although they wait: each ends on the page's own timer
#: (``setTimeout``), checked in test_the_charts_scroll_ends_on_a_page_that_paints_no_frame.
PAGE_BOUNDED = {"IDLE_AND_PAINTED", "SCROLL_STEPS"}


def _bare_awaiting_evaluates(source: str) -> list[int]:
    """Lines where ``.evaluate(`` gets a script that waits (a string, or a module constant naming one)
    other than :data:`PAGE_BOUNDED`: such a script belongs in ``awaited``."""
    tree = ast.parse(source)
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "evaluate"
                and node.args):
            continue
        script = node.args[0]
        if isinstance(script, ast.Name) and script.id in PAGE_BOUNDED:
            continue
        text = (script.value if isinstance(script, ast.Constant) else constants.get(script.id, "")
                if isinstance(script, ast.Name) else "")
        if isinstance(text, str) and AWAITS.search(text):
            lines.append(node.lineno)
    return lines


def test_no_test_hands_a_waiting_script_to_a_bare_evaluate():
    """The rule over every test module; excepted: tests/browser_waits.py, which starts the promise it
    then waits for with a bound, and the one bare wait this module makes on purpose (under a limit of
    0.5 s, test_a_wait_past_the_limit_fails_naming_its_line)."""
    found = {p.name: lines for p in sorted(TESTS.glob("*.py")) if p.name != "browser_waits.py"
             for lines in [_bare_awaiting_evaluates(p.read_text())] if lines}
    ours = found.pop(Path(__file__).name, [])
    assert found == {}
    assert len(ours) == 1, ours


def test_the_rule_finds_a_bare_waiting_evaluate():
    """The rule itself on a planted case: each kind of waiting script is found, a plain one is not."""
    planted = ('X = "() => fetch(u).then(r => r.json())"\n'
               'page.evaluate("async () => 1")\npage.evaluate(X)\npage.evaluate("() => document.title")\n'
               'page.evaluate(SCROLL_STEPS)\n')
    assert _bare_awaiting_evaluates(planted) == [2, 3]


#: Paths of each kind netlify.toml names (a page, a static file, the two Parquet download patterns,
#: a data file): each rule applies to some of them and not to others.
SITE_FILES = ["index.html", "models/m/index.html", "static/js/site.0123abcd.js", "downloads/all.parquet",
              "downloads/m/ops/part.parquet", "data/deploy/m/index.json.gz"]


@pytest.fixture(scope="module")
def tiny_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("tiny-site")
    for name in SITE_FILES:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("<!doctype html><title>t</title>" if name.endswith(".html") else "x")
    return site


def test_consistency_the_servers_send_what_the_route_added(tiny_site):
    """A consistency check, path by path: every header the browser tests' route used to add to a
    response (``_production_headers``: the tests' own reading of netlify.toml, fnmatch patterns)
    arrives from the tests' server (tests/site_helpers.py ``served``) with the same value."""
    server = served(tiny_site)
    base = next(server)
    try:
        for name in SITE_FILES:
            path = "/" + name.removesuffix("index.html")
            want = _production_headers(path)
            assert want and "content-security-policy" in want
            with urlopen(base + path.lstrip("/"), timeout=15) as response:
                got = {k.lower(): v for k, v in response.headers.items()}
            assert {k: got.get(k) for k in want} == want, path
    finally:
        server.close()


def test_consistency_the_routed_pattern_is_the_old_host_rule():
    """A consistency check, URL by URL: the pattern that routes a request (to abort and record it)
    matches exactly the URLs whose host the old route refused (not in LOCAL_HOSTS)."""
    urls = ["http://127.0.0.1:8123/", "http://127.0.0.1:8123/models/m/?a=1", "http://127.0.0.1/x",
            "https://127.0.0.1:1/", "http://127.0.0.1.example.com/", "http://127.0.0.2:8123/",
            "http://localhost:8123/", "https://cdn.jsdelivr.net/npm/vega@5", "http://example.com/?u=http://127.0.0.1/",
            "data:text/plain,x", "blob:http://127.0.0.1:8123/0a1b"]
    assert {u: bool(REMOTE.match(u)) for u in urls} == {u: urlsplit(u).hostname not in LOCAL_HOSTS for u in urls}


def test_a_production_tab_refuses_a_page_without_the_production_headers(browser, tiny_site):
    """A server that sends no netlify.toml headers (``start`` without rules) fails a production tab's
    page load, naming the page; a tab that is not production opens it."""
    server, url = start(tiny_site)
    tab, bare = _open(browser), _open(browser, production=False)
    try:
        with pytest.raises(AssertionError, match="served without the production headers"):
            tab.goto(url)
        assert bare.goto(url).status == 200
    finally:
        tab.context.close()
        bare.context.close()
        server.shutdown()
        server.server_close()


def test_a_request_leaving_127_0_0_1_is_aborted_and_recorded(browser, tiny_site):
    """What the route is still for, in the browser: a page that asks another host (an image here) has
    the request aborted and its URL recorded in ``blocked``, not reported as a failed request (Chromium
    still logs the refused load to the console, as it did when every request was routed)."""
    server, url = start(tiny_site)
    tab = _open(browser, production=False)
    try:
        tab.goto(url)
        tab.page.set_content('<img src="https://example.com/x.png"><img src="http://127.0.0.1.example.com/y.png">')
        tab.settle()
        assert sorted(tab.blocked) == ["http://127.0.0.1.example.com/y.png", "https://example.com/x.png"]
        assert not [e for e in tab.errors if e.startswith("request failed")], tab.errors
    finally:
        tab.context.close()
        server.shutdown()
        server.server_close()
