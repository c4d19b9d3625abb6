"""Issue 20's reader-facing fixes, in headless Chromium at 1280 px on a small build.

Two models over a tiny grid (H100 only, one and two GPUs, vLLM, BF16 KV, prompts of 1K and 4K
tokens, batches 1 and 8, one per-op point): Llama-3.1-8B (GQA) and Qwen3.5-27B (Gated DeltaNet
beside gated attention), so the components page draws graph diffs and the compare page has shared
deployments.

- Graph diffs zoom and pan on the SVG viewBox, at the page's width, opening on what changed.
- The deploy page's per-op table keeps SOL and bound in view at 1280 px with the longest op uids
  (fused all-reduce + RMSNorm kernels behind a tp2 collective).
- The memory bar's labels read whole ("KV ...", never "K").
- No Vega warning "Dropping fit-y" on the deploy and model pages.
- The roofline: one point per op with FLOPs, the ridge point at peak / HBM bandwidth, by hand from
  gpus/h100-sxm.yaml: 989 TFLOP/s BF16 dense / 3.35 TB/s = 295.2 FLOP/B (FP8: 1979 / 3.35 = 590.7).
- Compare: side by side on one deployment, each cell the deployments Parquet row's value.
(``archledger screenshots`` saving the new views, compare and a graph diff, is checked by
tests/test_site_browser.py's screenshot test.)
"""
from __future__ import annotations

import re

import polars as pl
import pytest

from engine.cli import units
from tests.site_helpers import H100_PAIR_GRID, H100_PAIR_MODELS, shared_small_site, result_tables, served
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site twice. The group holds tests/test_site_numbers.py and
#: tests/test_site_polish.py, which read one small site (tests/site_helpers.H100_PAIR_GRID, one build
#: per process; apart, each module built its own).
pytestmark = pytest.mark.xdist_group("site_h100_pair")

LLAMA, QWEN = "meta-llama--Meta-Llama-3.1-8B", "Qwen--Qwen3.5-27B"
GRID = H100_PAIR_GRID
#: gpus/h100-sxm.yaml: peak_tflops {bf16: 989, fp8: 1979}, hbm_tb_s 3.35
H100_RIDGE = {"bf16": 989e12 / 3.35e12, "fp8": 1979e12 / 3.35e12}
TP2 = f"models/{LLAMA}/deploy/?gpu=H100&cfg=2x+tp2&fw=vllm&kv=bf16&input=4096&batch=8"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return shared_small_site(tmp_path_factory, GRID, H100_PAIR_MODELS)


@pytest.fixture(scope="module")
def tables(out):
    return result_tables(out)


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


@pytest.fixture
def tab(browser):
    t = _open(browser)
    messages: list[str] = []
    t.page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    t.messages = messages
    yield t
    t.context.close()


# -- 1. graph diff: zoom and pan ---------------------------------------------------------------------------

def test_graph_diff_zooms_and_pans_at_page_width(tab, base, out):
    page = tab.page
    path = "components/diff/gqa_attention--gated_deltanet/"
    html = (out / "site" / path / "index.html").read_text()
    full_w = float(re.search(r'viewBox="0 0 ([0-9.]+) ([0-9.]+)"', html).group(1))
    tab.goto(base + path)
    page.wait_for_selector(".panzoom-bar .zoom-in")
    box = lambda: [float(v) for v in page.get_attribute(".graph-wrap svg", "viewBox").split()]   # noqa: E731
    geometry = page.evaluate("""() => ({svg: document.querySelector('.graph-wrap svg').getBoundingClientRect().width,
        right: document.querySelector('.graph-wrap svg').getBoundingClientRect().right,
        view: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth})""")
    assert full_w > geometry["view"], "the test needs a drawing wider than the page"
    # not wider than the viewport; opens on the changed nodes, never larger than natural size (one
    # drawing unit per CSS pixel) (tests/test_site_drawings.py checks a changed node is in view)
    assert geometry["right"] <= geometry["view"] and geometry["scroll"] <= geometry["view"], geometry
    start = box()
    scale = geometry["svg"] / start[2]                  # CSS px per drawing unit at load
    assert scale <= 1 + 1e-3 and start[2] < full_w, (start, geometry)
    page.click(".panzoom-bar .zoom-in")
    zoomed = box()
    assert zoomed != start and zoomed[2] == pytest.approx(start[2] / 1.25, rel=1e-3)
    # keyboard: with the drawing focused, - zooms out, an arrow pans 60 px, 0 resets to natural size
    page.focus(".graph-wrap")
    page.keyboard.press("-")
    assert box()[2] == pytest.approx(start[2], rel=1e-3)
    before = box()
    page.keyboard.press("ArrowRight")
    assert box()[0] == pytest.approx(before[0] + 60 / scale, abs=0.2)
    page.keyboard.press("0")
    natural = box()
    assert natural[:2] == [0, 0] and natural[2] == pytest.approx(geometry["svg"], abs=1), natural
    # drag pans: the drawing follows the pointer
    r = page.locator(".graph-wrap svg").bounding_box()
    page.mouse.move(r["x"] + 400, r["y"] + 200)
    page.mouse.down()
    page.mouse.move(r["x"] + 300, r["y"] + 150, steps=5)
    page.mouse.up()
    dragged = box()
    assert dragged[0] == pytest.approx(natural[0] + 100, abs=1) and dragged[1] == pytest.approx(natural[1] + 50, abs=1)
    page.click(".panzoom-bar .zoom-fit")
    fit = box()
    assert fit[2] >= full_w - 1 or fit[3] >= float(re.search(r'viewBox="0 0 [0-9.]+ ([0-9.]+)"', html).group(1)) - 1
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    assert not tab.errors, tab.errors


# -- 2.-4. the deploy page: per-op table, memory bar, no Vega warning ----------------------------------------

def test_ops_table_keeps_sol_and_bound_in_view_at_1280(tab, base):
    page = tab.page
    tab.goto(base + TP2)
    page.wait_for_selector("#ops tbody tr")
    m = page.evaluate("""() => { const wrap = document.querySelector('#ops').closest('.table-wrap');
        const th = [...document.querySelectorAll('#ops thead th')];
        return {wrap: [wrap.scrollWidth, wrap.clientWidth], view: document.documentElement.clientWidth,
                scroll: document.documentElement.scrollWidth, heads: th.map(t => t.textContent),
                sol: th[8].getBoundingClientRect().right, bound: th[9].getBoundingClientRect().right,
                expected: th[10].getBoundingClientRect().right,
                longest: Math.max(...[...document.querySelectorAll('#ops tbody td:first-child')].map(c => c.textContent.length))}; }""")
    assert m["longest"] >= 70, f"the test needs the long fused-collective uids: {m['longest']}"
    assert m["heads"][8:] == ["SOL", "bound", "expected"], m["heads"]
    assert m["wrap"][0] <= m["wrap"][1], f"the table scrolls inside its container: {m}"
    assert m["expected"] <= m["view"] and m["scroll"] <= m["view"], m
    page.wait_for_selector("#chart-gpus svg g.mark-rect path", state="attached")
    page.wait_for_selector("#chart-ep svg g.mark-rect path", state="attached")
    _no_vega_warning(tab)
    assert not tab.errors, tab.errors


def test_memory_bar_labels_read_whole(tab, base):
    page = tab.page
    # one GPU, batch 1, 1K prompt: the KV segment is 0.2 % of the usable memory
    tab.goto(base + f"models/{LLAMA}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16&input=1024&batch=1")
    page.wait_for_selector("#membar .seg-KV")
    segs = page.evaluate("""() => [...document.querySelectorAll('#membar .seg')].map(s => ({
        text: s.textContent, scroll: s.scrollWidth, client: s.clientWidth,
        right: s.getBoundingClientRect().right, bar: s.parentElement.getBoundingClientRect().right}))""")
    assert [s["text"].split(" ")[0] for s in segs] == ["weights", "prefill", "KV", "free"]
    for s in segs:
        assert s["scroll"] <= s["client"] and s["right"] <= s["bar"] + 0.5, f"clipped label: {s}"
    assert re.fullmatch(r"KV [0-9.]+ [kMG]?B", segs[2]["text"]), segs[2]


def _no_vega_warning(tab):
    assert not [m for m in tab.messages if "Dropping" in m or "WARN" in m], tab.messages


def test_no_vega_dropping_warning(tab, base):
    """The model page's chart and a deploy page at its default selection (both bar charts drawn)
    log no Vega warning; the other deploy tests here check the same after their own charts."""
    for path, marks in ((f"models/{LLAMA}/", "#chart-model-kv svg g.mark-line path"),
                        (f"models/{QWEN}/deploy/", "#chart-ep svg g.mark-rect path")):
        tab.goto(base + path)
        tab.scroll_through()                               # charts are drawn once in view
        tab.page.wait_for_selector(marks, state="attached")
        if "deploy" in path:
            tab.page.wait_for_selector("#chart-gpus svg g.mark-rect path", state="attached")
        tab.page.wait_for_timeout(200)
        _no_vega_warning(tab)
    assert not tab.errors, tab.errors


# -- 5. the roofline --------------------------------------------------------------------------------------

def test_roofline_one_point_per_op_and_the_ridge_by_hand(tab, base, tables):
    page = tab.page
    tab.goto(base + TP2)
    page.locator("#chart-roofline").scroll_into_view_if_needed()     # charts are drawn once in view
    page.wait_for_selector("#chart-roofline svg g.ops_marks path", state="attached")
    page.wait_for_function("() => document.getElementById('chart-roofline').archView")
    ops = tables["ops"].filter((pl.col("model_id") == "meta-llama/Meta-Llama-3.1-8B") & (pl.col("gpu") == "H100")
                               & (pl.col("n_gpus") == 2) & (pl.col("config") == "tp2") & (pl.col("phase") == "decode")
                               & (pl.col("batch") == 8) & (pl.col("input_len") == 4096))
    assert ops.height == page.locator("#ops tbody tr").count() > 0
    with_flops = ops.filter((pl.col("flops") > 0) & (pl.col("bytes") > 0))
    assert 0 < with_flops.height < ops.height         # the collectives carry no FLOPs: left out
    assert page.locator("#chart-roofline svg g.ops_marks path").count() == with_flops.height
    # issue 39: each op's mark says where its expected time comes from, as ops.parquet's `measured` does
    drawn = {r["op"]: r["expected"] for r in page.evaluate("() => document.getElementById('chart-roofline').archView.data('ops')")}
    assert drawn == {r["op_uid"]: "measured table" if r["measured"] else "bound / default efficiency"
                     for r in with_flops.iter_rows(named=True)}
    assert "measured table" in drawn.values()
    roofs = {r["dtype"]: r for r in page.evaluate("() => document.getElementById('chart-roofline').archView.data('roofs')")}
    assert set(roofs) == set(H100_RIDGE)
    for dtype, ridge in H100_RIDGE.items():
        assert roofs[dtype]["ridge"] == pytest.approx(ridge, rel=1e-12)
    assert round(H100_RIDGE["bf16"], 1) == 295.2
    # the diamonds sit at (ridge, peak) on the chart's scales; their labels print the ridge
    placed = page.evaluate("""() => { const v = document.getElementById('chart-roofline').archView;
        return [...document.querySelectorAll('#chart-roofline g.ridges_marks path')].map(p => {
          const m = /translate\\(([-0-9.e]+),([-0-9.e]+)\\)/.exec(p.getAttribute('transform'));
          return [+m[1], +m[2]]; }).concat([Object.fromEntries(v.data('roofs').map(r => [r.dtype, [v.scale('x')(r.ridge), v.scale('y')(r.peak)]]))]); }""")
    where = placed.pop()
    assert len(placed) == len(where)
    for (x, y), (wx, wy) in zip(sorted(placed), sorted(where.values())):
        assert x == pytest.approx(wx, abs=0.6) and y == pytest.approx(wy, abs=0.6)
    labels = page.locator("#chart-roofline g.ridge_labels_marks text").all_text_contents()
    assert sorted(labels) == ["BF16 ridge 295 FLOP/B", "FP8 ridge 591 FLOP/B"]
    assert "ridge 295 FLOP/B" in page.text_content("#roofline-note")
    # the event contract other scripts use: rows (with their roofline coordinates, deploy_eval.js opRows'
    # intensity and attained_flops_per_s) and a GPU name draw one point per row with FLOPs
    page.evaluate("""() => document.dispatchEvent(new CustomEvent('arch:ops', {detail: {gpu: 'H100', rows: [
        {op_uid: 'x', kind: 'compute', flops: 2e9, bytes: 1e6, t_sol_s: 3e-7, bound: 'memory', intensity: 2000,
         attained_flops_per_s: 2e9 / 3e-7},
        {op_uid: 'y', kind: 'comm', flops: 0, bytes: 4e6, t_sol_s: 1e-6, bound: 'comm', intensity: 0,
         attained_flops_per_s: 0}]}}))""")
    page.wait_for_function("() => document.querySelectorAll('#chart-roofline g.ops_marks path').length === 1")
    _no_vega_warning(tab)
    assert not tab.errors, tab.errors


# -- 6. compare: one deployment side by side ------------------------------------------------------------------

def test_compare_side_by_side_equals_the_deployment_rows(tab, base, tables):
    page = tab.page
    tab.goto(base + f"compare/?a={LLAMA}&b={QWEN}&gpu=H100&cfg=2x+tp2&fw=vllm&kv=bf16&input=4096&batch=8")
    page.wait_for_selector("#side-table table tbody tr")
    assert page.input_value("#side-pick [name=dep]") == "H100 · 2x tp2 · vllm · bf16"
    shown = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#side-table tbody tr')]
        .map(tr => [tr.getAttribute('data-k'), [...tr.querySelectorAll('td')].map(td => td.textContent)]))""")
    fmt = {"fits": lambda v: "yes" if v else "no", "weight_bytes_per_gpu": units.decimal_bytes,
           "kv_bytes_per_gpu": units.decimal_bytes, "activation_bytes_per_gpu": units.decimal_bytes,
           "free_bytes_per_gpu": units.decimal_bytes, "usable_bytes_per_gpu": units.decimal_bytes,
           "ttft_s": units.seconds, "tpot_s": units.seconds, "max_concurrent_requests": str,
           "tokens_per_s_per_gpu": units.si, "fits_steady": lambda v: "yes" if v else "no",
           "max_concurrent_requests_steady": str, "tpot_mean_s": units.seconds}
    assert set(shown) == set(fmt)
    # the steady state leads (the basis of every front), each worst case right after its steady figure
    assert list(shown)[:4] == ["fits_steady", "fits", "max_concurrent_requests_steady", "max_concurrent_requests"]
    rows = []
    for model in ("meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3.5-27B"):
        frame = tables["deployments"].filter(
            (pl.col("model_id") == model) & (pl.col("gpu") == "H100") & (pl.col("n_gpus") == 2)
            & (pl.col("config") == "tp2") & (pl.col("framework") == "vllm") & (pl.col("kv_dtype") == "bf16")
            & (pl.col("phase") == "decode") & (pl.col("batch") == 8) & (pl.col("input_len") == 4096))
        assert frame.height == 1
        rows.append(frame.row(0, named=True))
    for key, f in fmt.items():
        assert shown[key] == [f(rows[0][key]), f(rows[1][key])], key
    assert rows[0]["tpot_s"] != rows[1]["tpot_s"]       # two models, two columns
    heads = page.locator("#side-table thead a")
    assert heads.nth(1).get_attribute("href").startswith(f"../models/{QWEN}/deploy/?gpu=H100&cfg=2x+tp2")
    assert not tab.errors, tab.errors
