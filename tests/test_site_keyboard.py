"""Keyboard, accessibility and page weight in headless Chromium (issue 41, items 7 and 8).

The three-model site of tests/test_site_browser.py (its fixtures: Llama-3.1-8B, Qwen3-30B-A3B and
DeepSeek-V3 over tests/data/grid_small.yaml). What each test holds:

- a model page's first view requests no chart library; scrolling its chart into view loads it once,
  and draws it; a deploy page read to its end loads it once for its six charts;
- a model page (DeepSeek-V3: about a thousand numbers with a formula) has under 100 tab stops, counted
  with the Tab key, and from those stops the arrow keys reach every number;
- a chart reads by keyboard: it is a tab stop, its arrow keys show each mark's description (vega's
  own aria-label of the mark) in the tooltip, inside the viewport, and a table under the chart lists
  one row per mark;
- the gallery's "Compare selected" goes nowhere on Enter until two models are ticked;
- axe-core (the copy bundled in the PyPI package ``axe-playwright-python``, MPL-2.0, no network)
  finds no serious or critical violation on one page of every page type, its charts drawn and
  structure drawings open. tests/test_site_sizing.py runs the same check on a sizing page.
"""
from __future__ import annotations

import pytest

from tests.site_helpers import axe_serious
from tests.test_site_browser import (DEEPSEEK, LLAMA, _open, base, built, site)  # noqa: F401  (fixtures)

#: test_site_browser's group: its three-model site is built once per process (tests.test_site_browser.built)
#: and read here, so the modules run in the one worker that holds it.
pytestmark = pytest.mark.xdist_group("site_browser")

VEGA = "vendor/vega-embed."          # the chart library's published name: static/vendor/vega-embed.<sha8>.js
MODEL = f"models/{DEEPSEEK}/"

#: Elements the Tab key stops at, as the browser decides: press Tab until focus comes back round.
TAB_WALK_LIMIT = 400


@pytest.fixture
def tab(browser):  # noqa: F811
    t = _open(browser)
    yield t
    t.context.close()


def tab_stops(page) -> list[str]:
    """Press Tab from the top of the page until focus returns to an element seen before (or leaves
    the page); one descriptor per stop, in order."""
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    seen, out = set(), []
    for _ in range(TAB_WALK_LIMIT):
        page.keyboard.press("Tab")
        key = page.evaluate("""() => { const e = document.activeElement;
            if (!e || e === document.body) return null;
            if (!e.archKey) e.archKey = Math.random().toString(36).slice(2);
            return e.archKey + ' ' + e.tagName + (e.classList.contains('num') ? '.num' : ''); }""")
        if key is None or key in seen:
            break
        seen.add(key)
        out.append(key.split(" ", 1)[1])
    else:
        pytest.fail(f"more than {TAB_WALK_LIMIT} tab stops: {TAB_WALK_LIMIT} presses of Tab never came back round")
    return out


# -- item 7: the chart library only once a chart is in view ----------------------------------------------

def test_model_page_loads_no_chart_library_until_its_chart_is_visible(tab, base):  # noqa: F811
    """The KV chart lies below the first view: no request for the library, no drawing; in view, the
    library is requested once and the chart drawn."""
    requested: list[str] = []
    tab.page.on("request", lambda r: requested.append(r.url))
    tab.goto(base + MODEL)
    tab.page.wait_for_timeout(300)
    assert tab.page.evaluate("() => document.getElementById('chart-model-kv').getBoundingClientRect().top") \
        > tab.page.viewport_size["height"] + 200, "the test needs the chart below the first view"
    assert not [u for u in requested if VEGA in u], requested
    assert tab.page.evaluate("() => typeof window.vegaEmbed") == "undefined"
    assert tab.page.locator("#chart-model-kv svg").count() == 0
    tab.page.locator("#chart-model-kv").scroll_into_view_if_needed()
    tab.page.wait_for_selector("#chart-model-kv svg g.mark-line path", state="attached")
    assert len([u for u in requested if VEGA in u]) == 1, requested
    assert not tab.errors, tab.errors


def test_deploy_page_loads_the_chart_library_once_for_all_its_charts(tab, base):  # noqa: F811
    requested: list[str] = []
    tab.page.on("request", lambda r: requested.append(r.url))
    tab.goto(f"{base}models/{LLAMA}/deploy/?gpu=H100&kv=bf16")
    tab.scroll_through()
    charts = tab.page.evaluate("() => [...document.querySelectorAll('.chart')].map(c => c.id)")
    assert len(charts) == 6, charts
    for chart in charts:
        tab.page.wait_for_selector(f"#{chart} svg .role-mark", state="attached")
    assert len([u for u in requested if VEGA in u]) == 1, [u for u in requested if VEGA in u]
    assert not tab.errors, tab.errors


def test_deploy_page_read_to_its_end_fetches_one_config_and_one_front(tab, base):  # noqa: F811
    """Item 7: a deploy page read to its end (every chart drawn) at a grid point fetches the formulas
    of the selected config only, and its throughput/interactivity front as one file of the build's
    fronts (data/deploy/<model>/fronts/<fw>-<kv>-<input>-<output>.json.gz); before, the front chart
    fetched every config's formulas (DeepSeek-V3: 39 files). Off the grid's lengths the front is
    evaluated from the configs' formulas (tests/test_site_offgrid.py), fetched only then."""
    requested: list[str] = []
    tab.page.on("request", lambda r: requested.append(r.url))
    slug = DEEPSEEK
    tab.goto(f"{base}models/{slug}/deploy/?gpu=H100&fw=vllm&kv=bf16&input=1024&output=256&batch=1")
    tab.scroll_through()
    tab.page.wait_for_selector("#chart-front[data-ready] svg .role-mark", state="attached")
    mine = [u.split(f"data/deploy/{slug}/", 1)[1] for u in requested if f"data/deploy/{slug}/" in u]
    shared = {"index.json.gz", "common.json.gz"}      # the model-wide part, its trees and tables (site_builder.data.COMMON)
    configs = [u for u in mine if u not in shared and not u.startswith(("fronts/", "expected-"))]
    expected = [u for u in mine if u.startswith("expected-")]
    fronts = [u for u in mine if u.startswith("fronts/")]
    assert len(configs) == 1, mine
    assert expected == ["expected-" + configs[0]], mine      # the selected config's expected times only
    assert fronts == ["fronts/vllm-bf16-1024-256.json.gz"], mine
    rows = tab.page.evaluate("() => window.archDeploy.fronts")
    assert rows and {"gpu", "n_gpus", "config", "batch", "tokens_per_s_per_gpu", "tokens_per_s_per_user"} <= set(rows[0])
    assert not tab.errors, tab.errors


# -- item 8: keyboard ----------------------------------------------------------------------------------

def test_model_page_under_100_tab_stops_with_every_formula_reachable(tab, base):  # noqa: F811
    """Before, every number was a tab stop (DeepSeek-V3's page: over a thousand). Now each group of
    numbers is one stop; from the stops, ArrowRight reaches every number that has a formula or a
    definition, and reaching one shows its formula."""
    page = tab.page
    tab.goto(base + MODEL)
    page.wait_for_selector("#op-table tbody tr")               # the per-op table: most of the numbers
    nums = page.evaluate("() => document.querySelectorAll('.num').length")
    assert nums > 500, f"the test needs a page of many numbers: {nums}"
    stops = tab_stops(page)
    assert len(stops) < 100, f"{len(stops)} tab stops: {stops[:20]}"
    num_stops = [s for s in stops if s.endswith(".num")]
    assert num_stops, stops
    # from each number that is a tab stop, ArrowRight to the end of its group (keydown events sent
    # in the page, as the key does; a few real presses below)
    reached = page.evaluate("""() => {
        const reached = new Set(), starts = [...document.querySelectorAll('.num')].filter(n => n.tabIndex === 0);
        for (const start of starts) {
          start.focus();
          for (let i = 0; i < 5000; i++) {
            const at = document.activeElement; reached.add(at);
            at.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true, cancelable: true}));
            if (document.activeElement === at) break;
          }
        }
        const all = [...document.querySelectorAll('.num')].filter(n => n.hasAttribute('data-f') || n.hasAttribute('data-fk')
          || n.hasAttribute('data-d') || n.hasAttribute('data-dk') || n.closest('[data-n]'));
        return {all: all.length, missed: all.filter(n => !reached.has(n)).map(n => n.textContent + ' in ' + n.parentElement.tagName).slice(0, 10),
                starts: starts.length};
    }""")
    assert reached["all"] > 500 and not reached["missed"], reached
    assert reached["starts"] == len(num_stops), (reached["starts"], len(num_stops))
    # real keys: the per-op table's stop, Home to its first number, ArrowDown to the row below, its formula shown
    page.locator("#op-table .num[tabindex='0']").focus()
    page.keyboard.press("Home")
    first = page.evaluate("() => document.activeElement.closest('tr').rowIndex")
    page.keyboard.press("ArrowDown")
    now = page.evaluate("() => [document.activeElement.classList.contains('num'), document.activeElement.closest('tr').rowIndex,"
                        " document.activeElement.getAttribute('data-f')]")
    assert now[0] and now[1] == first + 1 and now[2], now
    page.locator("#tip").wait_for(state="visible", timeout=5_000)
    assert now[2] in page.locator("#tip").inner_text()
    page.keyboard.press("Shift+Tab")                           # the group keeps one stop: the row reached
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.closest('tr') && document.activeElement.closest('tr').rowIndex") == first + 1
    assert not tab.errors, tab.errors


def test_chart_reads_by_keyboard_with_a_table_of_its_marks(tab, base):  # noqa: F811
    page = tab.page
    tab.goto(base + MODEL)
    page.locator("#chart-model-kv").scroll_into_view_if_needed()
    page.wait_for_selector("#chart-model-kv svg g.mark-line path", state="attached")
    page.wait_for_selector("#chart-model-kv[tabindex='0']")
    labels = page.evaluate("""() => [...document.querySelectorAll('#chart-model-kv svg [role=graphics-symbol][aria-label]')]
        .filter(n => !n.closest('.role-axis, .role-legend, .role-title')).map(n => n.getAttribute('aria-label'))""")
    assert len(labels) >= 3 and all(": " in x for x in labels), labels
    page.locator("#chart-model-kv").focus()
    tip = page.locator("#tip")
    for label in labels[:3]:
        page.keyboard.press("ArrowRight")
        tip.wait_for(state="visible", timeout=5_000)
        assert tip.inner_text() == label
        box, view = tip.bounding_box(), page.viewport_size
        assert 0 <= box["x"] and box["x"] + box["width"] <= view["width"] and 0 <= box["y"] \
            and box["y"] + box["height"] <= view["height"], box
    page.keyboard.press("Escape")
    tip.wait_for(state="hidden", timeout=5_000)
    # the text alternative: one row per mark, its cells the mark's values
    rows = page.evaluate("""() => [...document.querySelectorAll('#chart-model-kv + details.chart-data tbody tr')]
        .map(r => [...r.cells].map(c => c.textContent))""")
    heads = page.evaluate("() => [...document.querySelectorAll('#chart-model-kv + details.chart-data thead th')].map(c => c.textContent)")
    assert len(rows) == len(labels)
    first = dict(part.split(": ", 1) for part in labels[0].split("; "))
    assert {h: v for h, v in zip(heads, rows[0]) if v} == first
    assert not tab.errors, tab.errors


def test_disabled_compare_link_goes_nowhere_on_enter(tab, base):  # noqa: F811
    page = tab.page
    tab.goto(base)
    link = page.locator("#compare-link")
    assert link.get_attribute("aria-disabled") == "true"
    link.focus()
    page.keyboard.press("Enter")
    page.wait_for_timeout(300)
    assert page.url.rstrip("/") == base.rstrip("/"), page.url
    picks = page.locator("#gallery .pick")
    picks.nth(0).check()
    picks.nth(1).check()
    assert link.get_attribute("aria-disabled") is None
    link.focus()
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "/compare/?a=" in page.url and "&b=" in page.url, page.url


# -- axe-core on every page type -----------------------------------------------------------------------

PAGES = {
    "gallery": "",
    "model": MODEL,
    "deploy": f"models/{DEEPSEEK}/deploy/",
    "compare": f"compare/?a={LLAMA}&b={DEEPSEEK}",
    "playground": "playground/",
    "landscape": "landscape/",
    "components": "components/",
    "component": "components/mla_attention/",
    "component-diff": "components/diff/gqa_attention--mla_attention/",
    "methodology": "methodology/",
    "methodology-page": "methodology/architecture/",     # its wide diagram: a scrolling <pre>
    "downloads": "downloads/",
}


@pytest.mark.parametrize("kind", sorted(PAGES))
def test_axe_finds_no_serious_violation(tab, base, kind):  # noqa: F811
    """One page of each type with every chart drawn (each scrolled into view) and its structure drawings open."""
    page = tab.page
    tab.goto(base + PAGES[kind])
    page.evaluate("() => document.querySelectorAll('details.level').forEach(d => { d.open = true; })")
    for chart in page.locator(".chart").all():                 # every chart drawn, with its data table
        chart.scroll_into_view_if_needed()
        chart.locator("svg").first.wait_for(state="attached")
    if page.locator(".graph-wrap[data-src]").count():
        page.wait_for_function("() => [...document.querySelectorAll('details.level .graph-wrap[data-src]')].every(w => w.firstElementChild)")
    found = axe_serious(page)
    assert not found, "\n".join(found)
    assert not tab.errors, tab.errors
