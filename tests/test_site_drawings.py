"""Structure drawings, formula tooltips and zoomable drawings as a reader sees them, in headless Chromium.

The small site the playground tests build (tests/test_site_playground_any.py: Qwen3-8B, one layer
template, and Qwen3.5-27B, three linear-attention layers to one full-attention layer, plus its MTP
stack), shared with them when they run in the same process.

- Every stack drawing on every model page is one path from the embedding (or the stack's input) to
  its final norm through every layer group in layer order: walking the drawn path with its run
  badges and repeat loops gives back the group the walk put at each layer (the document's
  component rows), and the page prints the layer plan, whose text for these two models is written
  out here from their config.json. No two edge labels of any drawing on the site overlap (their
  boxes as Chromium lays them out).
- A formula tooltip opened near the bottom or the right edge of the window lies inside it (1280x800
  and a 390x844 phone).
- A graph diff opens with a changed node inside the visible drawing (390 and 1280 px wide), and a
  model page's drawing wider than its column gets zoom.
"""
from __future__ import annotations

import json

import pytest
import yaml

from site_builder.sources import REPO
from tests.site_helpers import drawn_layers, expected_layers, served, shared_small_site
from tests.test_site_browser import _open

#: The playground tests' group: they read the same small site (tests/site_helpers.shared_small_site, one
#: build per process), which this module's tests, spread one by one, built again on each worker.
pytestmark = pytest.mark.xdist_group("playground_site")

MODELS = ["Qwen/Qwen3-8B", "Qwen/Qwen3.5-27B"]
#: The plan text each model page prints, from the published configs: Qwen3-8B's 36 layers are one
#: template (``block``); Qwen3.5-27B's ``layer_types`` is 3 x linear_attention then full_attention,
#: 16 times over 64 layers, and its MTP stack (``mtp_num_hidden_layers: 1``) one layer.
PLAN_TEXT = {"Qwen/Qwen3-8B": {"main/layers": "layers 0-35: block"},
             "Qwen/Qwen3.5-27B": {"main/layers": "layers 0-63: 3 linear : 1 full, x16", "mtp/layers": "layer 0: mtp"}}
PHONE, DESKTOP = {"width": 390, "height": 844}, {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid["gpu_counts"] = [1]
    return shared_small_site(tmp_path_factory, grid, ["Qwen/Qwen3-8B", "Qwen/Qwen3.5-27B"])   # the playground's


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


@pytest.fixture
def tab(browser):  # noqa: F811
    t = _open(browser)
    yield t
    t.context.close()


def _doc(out, model_id: str) -> dict:
    return json.loads((out / "results" / "models" / f"{model_id.replace('/', '--')}.json").read_text())


def _open_levels(tab, selector: str = "details.level") -> None:
    """Open every structure level matching ``selector`` and wait for its drawing."""
    levels = tab.page.locator(selector)
    for i in range(levels.count()):
        level = levels.nth(i)
        if level.get_attribute("open") is None:
            level.locator("summary").click()
        level.locator("svg.graph g.node").first.wait_for(state="visible")


_DRAWING = """wrap => {
  const nodes = {}, edges = [];
  wrap.querySelectorAll('g.node').forEach(g => {
    const badge = g.querySelector('text.node-badge');
    nodes[g.getAttribute('data-node')] = {badge: badge ? badge.textContent : ''};
  });
  wrap.querySelectorAll('g.edge').forEach(g => {
    const kind = [...g.classList].find(c => c.startsWith('kind-'));
    const label = g.querySelector('text');
    edges.push({src: g.getAttribute('data-src'), dst: g.getAttribute('data-dst'),
                kind: kind ? kind.slice(5) : '', label: label ? label.textContent : ''});
  });
  return {nodes, edges};
}"""


@pytest.mark.parametrize("model_id", MODELS)
def test_stack_drawing_is_the_layer_sequence_with_its_plan(tab, base, out, model_id):
    doc = _doc(out, model_id)
    tab.goto(f"{base}models/{model_id.replace('/', '--')}/")
    _open_levels(tab, "details.level.depth-0")
    plans = doc["layer_plan"]
    assert {p["uid"] for p in plans} == set(PLAN_TEXT[model_id])
    for plan in plans:
        stack = plan["uid"].split("/")[0]
        level = tab.page.locator(f"details.level[id='c-{stack}']")
        shown = level.locator(f"p.layer-plan[data-stack='{plan['uid']}']")
        assert shown.is_visible(), plan["uid"]
        assert PLAN_TEXT[model_id][plan["uid"]] in shown.inner_text()
        drawing = level.locator(".graph-wrap").evaluate(_DRAWING)
        top = [o for o in doc["ops"] if o["uid"].count("/") == 1 and o["uid"].startswith(stack + "/")]
        end = [o["uid"] for o in top if o["op"] == "rmsnorm"][-1]          # the stack's final norm
        embed = [o["uid"] for o in top if o["op"] == "embedding"]
        starts = embed or [n for n in drawing["nodes"] if n.startswith("in:")]   # MTP: its inputs
        walked = []
        for start in starts:
            try:
                walked = drawn_layers(drawing["nodes"], drawing["edges"], start, end)
                break
            except AssertionError:
                continue
        assert walked == expected_layers(doc, plan["uid"]), (plan["uid"], walked)
    assert not tab.errors, tab.errors


def _label_overlaps(tab) -> list:
    return tab.page.evaluate("""() => {
      const bad = [];
      document.querySelectorAll('svg.graph').forEach(svg => {
        const boxes = [...svg.querySelectorAll('text.edge-label')].map(t => [t.textContent, t.getBoundingClientRect()]);
        for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
          const [a, ra] = boxes[i], [b, rb] = boxes[j];
          const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
          const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
          if (w > 0.5 && h > 0.5) bad.push([svg.getAttribute('aria-labelledby'), a, b]);
        }
      });
      return bad;
    }""")


def test_no_two_edge_labels_overlap(tab, base, out):
    """Every drawing of every model page (each level opened) and of the components pages."""
    pages = [f"models/{m.replace('/', '--')}/" for m in MODELS]
    pages += [f"components/{p.parent.relative_to(out / 'site' / 'components').as_posix()}/"
              for p in sorted((out / "site" / "components").glob("**/index.html")) if p.parent.name != "components"]
    assert len(pages) >= 5, pages
    for page in pages:
        tab.goto(base + page)
        _open_levels(tab)
        assert tab.page.locator("svg.graph text.edge-label").count() > 0, page
        assert _label_overlaps(tab) == [], page
    assert not tab.errors, tab.errors


def _tip_for(tab, pick: str) -> dict:
    """Hover the number ``pick`` chooses (a JS function of the visible .num elements returning one,
    after scrolling it where it wants) and return the tooltip's box and the viewport's size."""
    tab.page.evaluate(f"() => {{ window.__num = ({pick})([...document.querySelectorAll('.num')]"
                      ".filter(e => e.getClientRects().length && (e.dataset.f || e.dataset.fk || e.dataset.d || e.dataset.dk))); }")
    box = tab.page.evaluate("() => { const r = window.__num.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; }")
    tab.page.mouse.move(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
    tab.page.wait_for_selector("#tip:not([hidden])")
    return tab.page.evaluate("""() => { const r = document.getElementById('tip').getBoundingClientRect(),
        n = window.__num.getBoundingClientRect();
      return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, vw: document.documentElement.clientWidth,
              vh: document.documentElement.clientHeight, num_top: n.top, num_bottom: n.bottom, num_right: n.right}; }""")


#: The number with the longest formula (the tallest tooltip), scrolled to the window's bottom edge.
BOTTOM = """nums => { const n = nums.reduce((a, b) => ((b.dataset.f || '').length > (a.dataset.f || '').length ? b : a));
  n.scrollIntoView({block: 'end'}); window.scrollBy(0, -2); return n; }"""
#: The number reaching furthest right inside the window, scrolled to its middle.
RIGHT = """nums => { const vw = document.documentElement.clientWidth;
  const inside = nums.filter(e => e.getBoundingClientRect().right <= vw);
  const n = inside.reduce((a, b) => (b.getBoundingClientRect().right > a.getBoundingClientRect().right ? b : a));
  n.scrollIntoView({block: 'center'}); return n; }"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
@pytest.mark.parametrize("where", ["bottom", "right"])
def test_formula_tooltip_stays_in_the_viewport(tab, base, viewport, where):
    tab.page.set_viewport_size(viewport)
    tab.goto(f"{base}models/Qwen--Qwen3.5-27B/")
    tip = _tip_for(tab, BOTTOM if where == "bottom" else RIGHT)
    if where == "bottom":
        assert tip["num_bottom"] > tip["vh"] - 40, tip        # the number does sit at the bottom edge
    else:
        assert tip["num_right"] > tip["vw"] * 0.7, tip        # and this one near the right edge
    assert 0 <= tip["left"] and tip["right"] <= tip["vw"], tip
    assert 0 <= tip["top"] and tip["bottom"] <= tip["vh"], tip
    # beside the number, never over it (the pointer would leave the number for the tooltip)
    assert tip["bottom"] <= tip["num_top"] or tip["top"] >= tip["num_bottom"], tip
    assert not tab.errors, tab.errors


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390", "1280"])
def test_graph_diff_opens_on_a_changed_node(tab, base, out, viewport):
    diffs = sorted(p.name for p in (out / "site" / "components" / "diff").iterdir())
    assert diffs
    tab.page.set_viewport_size(viewport)
    for name in diffs:
        tab.goto(f"{base}components/diff/{name}/")
        tab.page.wait_for_selector(".graph-wrap.panzoom svg")
        seen = tab.page.evaluate("""() => {
          const area = document.querySelector('.graph-wrap.panzoom svg').getBoundingClientRect(),
            vw = document.documentElement.clientWidth;
          const marked = [...document.querySelectorAll('svg.graph g.node.status-changed, svg.graph g.node.status-only_a, svg.graph g.node.status-only_b')];
          return {marked: marked.length, inside: marked.filter(g => { const r = g.getBoundingClientRect();
            return r.left >= Math.max(0, area.left) && r.right <= Math.min(vw, area.right) && r.top >= area.top && r.bottom <= area.bottom; }).length};
        }""")
        assert seen["marked"] > 0, name
        assert seen["inside"] > 0, (name, seen)
    assert not tab.errors, tab.errors


def test_wide_model_drawing_gets_zoom_and_opens_whole(tab, base, out):
    """A drawing wider than the model page's column is zoomable (the components pages' panzoom)
    and opens with the whole drawing in its window."""
    tab.goto(f"{base}models/Qwen--Qwen3.5-27B/")
    wide = tab.page.locator("details.level:has(.graph-wrap[data-panzoom])")
    assert wide.count() >= 1
    level = wide.first
    level.locator("summary").click()
    level.locator(".graph-wrap.panzoom svg").wait_for()
    state = level.locator(".graph-wrap").evaluate("""w => { const area = w.querySelector('svg').getBoundingClientRect();
      const nodes = [...w.querySelectorAll('g.node')].map(g => g.getBoundingClientRect());
      return {view: w.archPanZoom.view(), bar: w.previousElementSibling.classList.contains('panzoom-bar'), nodes: nodes.length,
              outside: nodes.filter(r => r.left < area.left - 0.5 || r.right > area.right + 0.5 ||
                                         r.top < area.top - 0.5 || r.bottom > area.bottom + 0.5).length}; }""")
    assert state["bar"] and state["nodes"] > 0 and state["outside"] == 0, state
    before = state["view"]
    level.locator(".panzoom-bar .zoom-in").click()
    after = level.locator(".graph-wrap").evaluate("w => w.archPanZoom.view()")
    assert after["w"] < before["w"], (before, after)
    assert not tab.errors, tab.errors
