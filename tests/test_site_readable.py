"""Charts, tables and phones as a reader sees them (issue 41, items 4, 5 and 9), in headless Chromium.

The three-model site of tests/test_site_browser.py (its fixtures: Llama-3.1-8B, Qwen3-30B-A3B and
DeepSeek-V3 over tests/data/grid_small.yaml, whose 200,000-token prompt lies past Llama's and
DeepSeek-V3's maximum context). What each test holds, and what it was written against:

- the deploy page's batch chart draws a point hollow exactly when its row is past the maximum
  context (the point's own tooltip says which), one clearly different colour per prompt length;
  no chart legend prints a raw ``true`` / ``false``;
- the throughput/interactivity front has log axes (its tick positions are linear in the log of
  their values), and a roofline's ridge labels are crossed by no roof line;
- configs the build found identical (DeepSeek-V3's tp8 and tp8-ep8 on 8 B200s) are named with the
  reason their degrees give, and the Parquet rows agree that they are identical;
- at 390 px no page is wider than the window; the memory bar's segments are their bytes' share of
  the usable memory within 1 % of the bar, every label whole, inside its segment or below the bar;
- the gallery's search finds every model each trait filter finds, by the trait's label and key;
  the landscape and components tables scroll in their own container and sort by any column; the model page's KV
  table marks the lengths past the model's maximum context.
"""
from __future__ import annotations

import colorsys
import json
import math
import re

import polars as pl
import pytest

from tests.site_helpers import result_tables
from tests.test_site_browser import (DEEPSEEK, LLAMA, _open, base, built, site)  # noqa: F401  (fixtures)

#: test_site_browser's group: its three-model site is built once per process (tests.test_site_browser.built)
#: and read here, so the modules run in the one worker that holds it.
pytestmark = pytest.mark.xdist_group("site_browser")

PHONE, DESKTOP = {"width": 390, "height": 844}, {"width": 1280, "height": 800}
DS_DEPLOY = f"models/{DEEPSEEK}/deploy/?gpu=B200&cfg=8x+tp8&fw=vllm&kv=bf16"


@pytest.fixture
def tab(browser):  # noqa: F811
    t = _open(browser)
    yield t
    t.context.close()


def _deploy(tab, base, url=DS_DEPLOY):  # noqa: F811
    tab.goto(base + url)
    tab.page.wait_for_function("() => document.getElementById('summary').hasAttribute('data-ready')")
    tab.page.locator("#chart-batch").scroll_into_view_if_needed()      # charts are drawn once in view
    tab.page.wait_for_selector("#chart-batch svg g.mark-symbol path", state="attached")


def _rgb(color: str) -> tuple[int, int, int]:
    color = color.lstrip("#")
    return tuple(int(color[i:i + 2], 16) for i in (0, 2, 4))


# -- item 4: charts ------------------------------------------------------------------------------------

def test_batch_chart_hollow_only_past_max_context(tab, base):  # noqa: F811
    """A point is hollow (white fill) exactly when its tooltip says it is past the maximum context;
    the grid's 200,000-token prompt is past DeepSeek-V3's 163,840 and its shorter prompts are not,
    so both kinds are drawn. Each prompt length has its own colour, and no two are near each other
    (hues 25 degrees apart at least: an ordinal field's default scheme draws them as shades of one
    blue)."""
    _deploy(tab, base)
    points = tab.page.evaluate("""() => [...document.querySelectorAll('#chart-batch g.mark-symbol.role-mark path')]
        .map(p => ({fill: p.getAttribute('fill'), label: p.getAttribute('aria-label') || ''}))""")
    assert points and all("context: " in p["label"] for p in points), points[:3]
    past = [p for p in points if "context: past max context" in p["label"]]
    within = [p for p in points if "context: within max context" in p["label"]]
    assert past and within and len(past) + len(within) == len(points)
    assert all(p["fill"] == "#ffffff" for p in past), past
    assert all(p["fill"] not in ("#ffffff", "transparent", None) for p in within), within
    # the legend's prompt lengths are not drawn as the hollow ring that means "past max context":
    # each a line (no fill) in its colour, or a filled symbol
    swatches = tab.page.evaluate("""() => [...document.querySelectorAll('#chart-batch g.role-legend-symbol path')]
        .map(p => ({fill: p.getAttribute('fill'), stroke: p.getAttribute('stroke'), d: p.getAttribute('d') || ''}))""")
    rings = [w for w in swatches if w["fill"] in ("#ffffff", "white") or (w["fill"] in ("transparent", "none", None)
                                                                         and "A" in w["d"].upper())]
    assert swatches and not rings, swatches
    strokes = tab.page.evaluate("""() => [...new Set([...document.querySelectorAll('#chart-batch g.mark-line.role-mark path')]
        .map(p => p.getAttribute('stroke')))]""")
    lengths = {int(m) for p in points for m in re.findall(r"prompt tokens: ([0-9,]+)", p["label"].replace(",", ""))}
    assert len(strokes) == len(lengths) == 4, (strokes, lengths)
    hues = [colorsys.rgb_to_hsv(*(c / 255 for c in _rgb(s)))[0] * 360 for s in strokes]
    for i, a in enumerate(hues):
        for b in hues[i + 1:]:
            assert min(abs(a - b), 360 - abs(a - b)) >= 25, f"two lines of near one hue: {strokes}"
    assert not tab.errors, tab.errors


def test_legends_name_things_in_words(tab, base):  # noqa: F811
    """No legend on the deploy page (batch, KV, roofline) or the model page's KV chart prints a raw
    boolean: the extrapolation is named in words."""
    _deploy(tab, base)
    tab.page.locator("#chart-kv").scroll_into_view_if_needed()
    tab.page.wait_for_selector("#chart-kv svg g.role-legend", state="attached")
    tab.page.locator("#chart-roofline").scroll_into_view_if_needed()
    tab.page.wait_for_selector("#chart-roofline svg g.role-legend", state="attached")
    legends = tab.page.evaluate("() => [...document.querySelectorAll('svg g.role-legend text')].map(t => t.textContent)")
    # and every legend lies inside its chart's drawing (two legends side by side below the batch
    # chart ran past its figure, the second cut off)
    outside = tab.page.evaluate("""() => [...document.querySelectorAll('.chart svg g.role-legend')].filter(g => {
        const r = g.getBoundingClientRect(), s = g.ownerSVGElement.getBoundingClientRect();
        return r.left < s.left - 1 || r.right > s.right + 1 || r.top < s.top - 1 || r.bottom > s.bottom + 1;
      }).map(g => g.closest('.chart').id + ': ' + g.textContent)""")
    assert not outside, outside
    tab.goto(base + f"models/{DEEPSEEK}/")
    tab.page.locator("#chart-model-kv").scroll_into_view_if_needed()
    tab.page.wait_for_selector("#chart-model-kv svg g.role-legend", state="attached")
    # a legend lists only what is drawn: DeepSeek-V3 holds no recurrent state, so no "state (flat)"
    parts = tab.page.evaluate("""() => [...document.querySelectorAll('#chart-model-kv svg g.role-legend')]
        .filter(g => g.querySelector('.role-legend-title').textContent === 'part')
        .flatMap(g => [...g.querySelectorAll('.role-legend-label text')].map(t => t.textContent))""")
    assert parts == ["KV (grows with context)", "total"], parts
    legends += tab.page.evaluate("() => [...document.querySelectorAll('svg g.role-legend text')].map(t => t.textContent)")
    assert "past max context (extrapolated)" in legends, legends
    assert not {"true", "false"} & set(legends), legends
    assert not tab.errors, tab.errors


_SI = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3}


def test_front_axes_are_logarithmic(tab, base):  # noqa: F811
    """Both axes of the throughput/interactivity front are log scales: the labelled ticks' pixel
    positions are linear in the logarithm of the values they print (on a linear axis they are
    linear in the values, and three labelled ticks tell the two apart)."""
    _deploy(tab, base)
    tab.page.locator("#chart-front").scroll_into_view_if_needed()
    tab.page.wait_for_selector("#chart-front[data-ready] svg g.mark-line path", state="attached")
    axes = tab.page.evaluate("""() => [...document.querySelectorAll('#chart-front svg g.role-axis')].map(axis => {
        const ticks = [...axis.querySelectorAll('g.role-axis-label text')].filter(t => t.textContent.trim())
          .map(t => { const r = t.getBoundingClientRect(); return {text: t.textContent.trim(), x: r.x + r.width / 2, y: r.y + r.height / 2}; });
        return ticks; }).filter(ticks => ticks.length)""")
    assert len(axes) == 2, axes     # (the grid's axes print no labels)
    for ticks in axes:
        values = []
        for t in ticks:
            m = re.fullmatch(r"([0-9.]+) ?([kMGm]?)", t["text"])
            assert m, t
            values.append(float(m[1]) * _SI[m[2]])
        assert len(values) >= 3, ticks
        horizontal = abs(ticks[0]["x"] - ticks[-1]["x"]) > abs(ticks[0]["y"] - ticks[-1]["y"])
        pos = [t["x"] if horizontal else t["y"] for t in ticks]
        per_decade = [(pos[i + 1] - pos[0]) / math.log10(values[i + 1] / values[0]) for i in range(len(values) - 1)]
        assert max(per_decade) - min(per_decade) < 0.05 * abs(per_decade[0]), (ticks, per_decade)   # (edge labels sit flush: a few px)
    assert not tab.errors, tab.errors


def test_front_chart_no_gpu_confined_to_the_bottom(tab, base):  # noqa: F811
    """Issue 41 "the front chart readable": no GPU's line lies wholly in the bottom 5 % of the plot
    (on the linear axes of old one fast GPU, ~15k tokens/s per GPU, squashed ten of twelve into the
    bottom band while it filled the plot). Read off the drawn SVG: each line's highest point against
    the plot's extent (its grid lines). Llama-3.1-8B: both GPUs of the test grid serve it."""
    _deploy(tab, base, f"models/{LLAMA}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16")
    tab.page.locator("#chart-front").scroll_into_view_if_needed()
    tab.page.wait_for_selector("#chart-front[data-ready] svg g.mark-line path", state="attached")
    got = tab.page.evaluate("""() => {
        const svg = document.querySelector('#chart-front svg');
        const grid = [...svg.querySelectorAll('g.role-axis-grid line')].map(l => l.getBoundingClientRect());
        const lines = [...svg.querySelectorAll('g.mark-line path')].map(p => p.getBoundingClientRect())
          .filter(r => r.width > 0 || r.height > 0);
        return {top: Math.min(...grid.map(r => r.top)), bottom: Math.max(...grid.map(r => r.bottom)),
                tops: lines.map(r => r.top)};
    }""")
    height = got["bottom"] - got["top"]
    assert height > 100 and len(got["tops"]) >= 2, got
    rise = [(got["bottom"] - t) / height for t in got["tops"]]    # each line's highest point, 0 at the bottom
    assert min(rise) > 0.05, rise
    assert not tab.errors, tab.errors


def test_roofline_ridge_labels_not_crossed(tab, base):  # noqa: F811
    """No roof line (every dtype's slope and flat roof) passes through a ridge label's box: the
    higher dtypes' slopes run on up and right through a lower dtype's ridge."""
    _deploy(tab, base)
    tab.page.locator("#chart-roofline").scroll_into_view_if_needed()
    tab.page.wait_for_selector("#chart-roofline svg g.mark-text text", state="attached")
    hits = tab.page.evaluate("""() => {
        const svg = document.querySelector('#chart-roofline svg'), out = [];
        const labels = [...svg.querySelectorAll('g.mark-text text')].filter(t => /ridge/.test(t.textContent));
        const roofs = [...svg.querySelectorAll('g.mark-line.role-mark path')];
        labels.forEach(t => {
          const b = t.getBoundingClientRect();
          roofs.forEach(p => {
            const m = p.getScreenCTM(), n = p.getTotalLength();
            for (let i = 0; i <= 400; i++) {
              const q = p.getPointAtLength(n * i / 400), x = m.a * q.x + m.c * q.y + m.e, y = m.b * q.x + m.d * q.y + m.f;
              if (x > b.left + 1 && x < b.right - 1 && y > b.top + 1 && y < b.bottom - 1) { out.push(t.textContent); break; }
            }
          });
        });
        return {labels: labels.length, out: out};
    }""")
    assert hits["labels"] >= 2 and not hits["out"], hits
    assert not tab.errors, tab.errors


def test_identical_configs_are_explained(tab, base, built):  # noqa: F811
    """DeepSeek-V3's tp8 and tp8-ep8 on 8 B200s: the Parquet rows hold the same numbers at every
    point (checked here, column by column), and the page names the two with the reason their
    degrees give (ep = tp, dp_attn 1); configs that differ (the dp_attn8 ones) are not named."""
    rows = result_tables(built)["deployments"].filter(
        (pl.col("model_id") == "deepseek-ai/DeepSeek-V3") & (pl.col("gpu") == "B200") & (pl.col("n_gpus") == 8)
        & (pl.col("framework") == "vllm") & (pl.col("kv_dtype") == "bf16"))
    same = [c for c in ("ttft_s", "tpot_s", "weight_bytes_per_gpu", "kv_bytes_per_gpu",
                        "max_concurrent_requests", "comm_bytes", "flops", "bytes")]
    point = ["phase", "batch", "input_len", "output_len"]
    a, b = (rows.filter(pl.col("config") == c).sort(point).select(point + same) for c in ("tp8", "tp8-ep8"))
    assert a.height > 0 and a.equals(b)
    _deploy(tab, base)
    note = tab.page.locator("#ep-note").inner_text()
    assert "tp8 and tp8-ep8" in note and "ep = tp = 8" in note and "dp_attn 1" in note, note
    assert "dp_attn8" not in note, note
    _deploy(tab, base, f"models/{LLAMA}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16")
    assert tab.page.locator("#ep-note").inner_text() == ""
    assert not tab.errors, tab.errors


# -- item 5: phones ------------------------------------------------------------------------------------

def _pages(base):  # noqa: F811
    return ["", f"models/{DEEPSEEK}/", DS_DEPLOY, f"compare/?a={LLAMA}&b={DEEPSEEK}", "playground/",
            "landscape/", "components/", "components/mla_attention/", "components/diff/gqa_attention--mla_attention/",
            "methodology/", "methodology/architecture/", "downloads/"]


def test_no_page_wider_than_a_phone(browser, base):  # noqa: F811
    """At 390 px the document is no wider than the window on every page type, its charts drawn (the compare page's
    block tables scroll in their own container, the playground's swap strings wrap)."""
    tab = _open(browser)
    try:
        tab.page.set_viewport_size(PHONE)
        wide = {}
        for url in _pages(base):
            tab.goto(base + url)
            if url.startswith("compare"):
                tab.page.wait_for_selector("#compare .cols table", state="attached")
            tab.scroll_through()          # every chart drawn (charts are drawn once in view)
            width = tab.page.evaluate("() => document.documentElement.scrollWidth")
            if width > PHONE["width"]:
                wide[url] = width
        assert not wide, wide
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_memory_bar_proportional(browser, base, viewport):  # noqa: F811
    """Each segment's width is its bytes' share of the usable memory, within 1 % of the bar (the
    bytes from the page's own summary, archDeploy.current); every label is whole, either inside its
    segment or below the bar, inside the bar's width, and no two labels overlap."""
    tab = _open(browser)
    try:
        tab.page.set_viewport_size(viewport)
        # one GPU, batch 1, 1K prompt: weights fill most of the memory, the KV is 0.2 % of it
        _deploy(tab, base, f"models/{LLAMA}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16&input=1024&batch=1")
        got = tab.page.evaluate("""() => {
            const bar = document.getElementById('membar'), box = bar.getBoundingClientRect(), s = window.archDeploy.current.summary;
            return {usable: s.usable_bytes_per_gpu, inner: bar.clientWidth, bar: {l: box.left + bar.clientLeft, r: box.left + bar.clientLeft + bar.clientWidth, b: box.bottom},
              bytes: [s.weight_bytes_per_gpu, s.activation_bytes_per_gpu, s.kv_bytes_per_gpu, s.free_bytes_per_gpu],
              segs: [...bar.querySelectorAll('.seg')].map(g => { const r = g.getBoundingClientRect(), t = g.querySelector('.seg-label'), q = t.getBoundingClientRect();
                return {w: r.width, l: r.left, r: r.right, text: t.textContent, whole: t.scrollWidth <= t.clientWidth + 0.5,
                        label: {l: q.left, r: q.right, t: q.top, b: q.bottom}}; })};
        }""")
        assert [s["text"].split(" ")[0] for s in got["segs"]] == ["weights", "prefill", "KV", "free"]
        for seg, n in zip(got["segs"], got["bytes"]):
            assert abs(seg["w"] / got["inner"] - n / got["usable"]) <= 0.01, (seg, n / got["usable"])
        labels = []
        for seg in got["segs"]:
            q = seg["label"]
            inside = q["l"] >= seg["l"] - 0.5 and q["r"] <= seg["r"] + 0.5
            below = q["t"] >= got["bar"]["b"] - 0.5
            assert seg["whole"] and (inside or below), seg
            assert q["l"] >= got["bar"]["l"] - 0.5 and q["r"] <= got["bar"]["r"] + 0.5, (seg, got["bar"])
            labels.append(q)
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                assert a["r"] <= b["l"] + 0.5 or b["r"] <= a["l"] + 0.5 or a["b"] <= b["t"] + 0.5 or b["b"] <= a["t"] + 0.5, (a, b)
        assert any(s["w"] < 10 for s in got["segs"]), "the KV segment of 0.2 % is drawn a few px wide"
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


# -- item 9: consistency -------------------------------------------------------------------------------

def test_search_finds_what_each_filter_finds(tab, base):  # noqa: F811
    """For every trait filter: typing its label (as the checkbox prints it) or its key into the search
    shows every model the filter shows."""
    tab.goto(base)
    page = tab.page
    traits = page.evaluate("""() => [...document.querySelectorAll('#traits input[name=trait]')].map(c =>
        ({key: c.value, label: c.parentElement.textContent.replace(/\\(\\d+\\)/, '').trim()}))""")
    assert len(traits) >= 5, traits
    shown = "() => [...document.querySelectorAll('#gallery tbody tr[data-name]')].filter(r => !r.hidden).map(r => r.dataset.name)"
    missed = {}
    for t in traits:
        box = page.locator(f"#traits input[value='{t['key']}']")
        box.check()
        by_filter = set(page.evaluate(shown))
        box.uncheck()
        for word in (t["label"], t["key"]):
            page.fill("#q", word)
            by_search = set(page.evaluate(shown))
            if not by_filter <= by_search:
                missed[word] = sorted(by_filter - by_search)
        page.fill("#q", "")
    assert not missed, missed
    assert not tab.errors, tab.errors


@pytest.mark.parametrize("url, selector", [("landscape/", "table.landscape"), ("components/", "table.contract")])
def test_wide_tables_scroll_and_sort(tab, base, url, selector):  # noqa: F811
    """At 1280 px every landscape table and the components page's contract table lie in their own
    scrolling container (the page is no wider than the window and every column can be scrolled
    to), and a header click sorts the rows by that column, ascending then descending."""
    tab.page.set_viewport_size(DESKTOP)
    tab.goto(base + url)
    page = tab.page
    assert page.evaluate("() => document.documentElement.scrollWidth") <= DESKTOP["width"]
    tables = page.evaluate(f"""() => [...document.querySelectorAll('{selector}')].map(t => {{
        const w = t.parentElement; return {{wrap: getComputedStyle(w).overflowX,
          fits: w.getBoundingClientRect().right <= window.innerWidth, reach: w.scrollWidth >= t.scrollWidth - 1}}; }})""")
    assert tables and all(t["wrap"] == "auto" and t["fits"] and t["reach"] for t in tables), tables
    sorted_tables = 0
    for k in range(len(tables)):
        # the first numeric column: the one whose cells all carry numbers (data-v)
        col = page.evaluate(f"""() => {{ const t = document.querySelectorAll('{selector}')[{k}];
            for (let i = 1; i < t.tHead.rows[0].cells.length; i++) {{
              const v = [...t.tBodies[0].rows].map(r => r.cells[i].dataset.v).filter(x => x !== undefined && x !== '');
              if (v.length >= 2 && v.every(x => isFinite(Number(x)))) return i; }} return -1; }}""")
        if col < 0:
            continue
        head = page.locator(selector).nth(k).locator("thead th").nth(col)
        values = f"""() => [...document.querySelectorAll('{selector}')[{k}].tBodies[0].rows]
            .map(r => r.cells[{col}].dataset.v).filter(x => x !== '').map(Number)"""
        head.locator("button").click()
        up = page.evaluate(values)
        assert up == sorted(up) and head.get_attribute("aria-sort") == "ascending", up
        head.locator("button").click()
        down = page.evaluate(values)
        assert down == sorted(up, reverse=True) and head.get_attribute("aria-sort") == "descending", down
        sorted_tables += 1
    assert sorted_tables >= 1
    assert not tab.errors, tab.errors


def _tokens(text: str) -> int:
    m = re.fullmatch(r"([0-9.]+)([KM]?)", text)
    return int(float(m[1]) * {"": 1, "K": 1024, "M": 1024 ** 2}[m[2]])


def test_kv_table_marks_lengths_past_max_context(tab, base, built):  # noqa: F811
    """The model page's per-request KV table marks every column past the model's maximum context
    (from the model's document, 163,840 tokens for DeepSeek-V3), header and cells, and no other."""
    doc = json.loads((built / "results" / "models" / f"{DEEPSEEK}.json").read_text())
    tab.goto(base + f"models/{DEEPSEEK}/")
    cols = tab.page.evaluate("""() => { const t = document.getElementById('kv-split-table');
        return [...t.tHead.rows[0].cells].slice(3).map((th, i) => ({text: th.firstChild.textContent.trim(),
          head: th.classList.contains('past-max'), mark: !!th.querySelector('.past-mark'),
          cells: [...t.tBodies[0].rows].map(r => r.cells[r.cells.length - t.tHead.rows[0].cells.length + 3 + i].classList.contains('past-max'))})); }""")
    past = [c for c in cols if _tokens(c["text"]) > doc["max_context"]]
    assert past and len(past) < len(cols), cols
    for c in cols:
        want = _tokens(c["text"]) > doc["max_context"]
        assert c["head"] == want and c["mark"] == want and all(x == want for x in c["cells"]), c
    assert tab.page.locator("#kv-past-note").count() == 1
    assert not tab.errors, tab.errors


def test_landscape_kv_table_marks_lengths_past_max_context(tab, base, built):  # noqa: F811
    """The landscape's KV table marks a model's cell exactly when the column's context (its header,
    "KV B/token @ 1M") is past that model's maximum context (models.parquet); the small site has
    both: Llama-3.1-8B at 128K is its maximum, not past it."""
    limit = dict(result_tables(built)["models"].select("model_id", "max_context").iter_rows())
    tab.goto(base + "landscape/")
    cells = tab.page.evaluate("""() => { const t = document.querySelector("table[data-table='kv']");
        const heads = [...t.tHead.rows[0].cells].map(th => th.textContent.trim());
        return [...t.tBodies[0].rows].flatMap(r => [...r.cells].map((c, i) => ({model: r.cells[0].dataset.v, head: heads[i],
            past: c.classList.contains('past-max'), mark: !!c.querySelector('.past-mark')}))
          .filter(c => c.head.startsWith('KV B/token @'))); }""")
    assert cells and set(c["model"] for c in cells) == set(limit)
    for c in cells:
        want = _tokens(c["head"].split("@ ")[1]) > limit[c["model"]]
        assert c["past"] == want and c["mark"] == want, c
    assert any(c["past"] for c in cells) and not all(c["past"] for c in cells)
    assert tab.page.locator("#past-note-kv").count() == 1
    assert not tab.errors, tab.errors
