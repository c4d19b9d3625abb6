"""The deploy page at points the grid never evaluated, against ``archledger deploy``, in headless Chromium.

The page evaluates the selected structure's formula trees (engine/batch/deploy_export.py) with
static/js/formula.js and the rules of engine/deploy/sol.py summarize (mirrored in static/js/deploy.js).
Here every number it computes at an off-grid point (prompt 8,000 + 700 generated, batch 37, ...) must
equal what the CLI's own path (``archledger deploy``'s argument parser and
:func:`engine.cli.deploy.deployment_from_args`, i.e. ``--json``) gives at that point, within 1e-9
relative: TTFT, TPOT, throughput, memory and capacity, fits, and the decode per-op rows. The
expectations come from the CLI, not from the export: a wrong tree, regime or rule shows here.

Models: gpt-oss-20b (MoE with sliding-window layers; a DP-attention + EP config) and Llama-3.1-8B
(dense; a pipeline-parallel config) over a tiny grid whose prompt lengths (1024, 4096), output
(256) and batches (1, 8, 64) none of the points below are; DeepSeek-V3 (its MLA kernel classes' expected
times) over a tiny 8x H200 grid of its own.
"""
from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest

from tests.deploy_helpers import assert_close, deploy_json
from tests.site_helpers import DEPLOY_FIELDS, OP_FIELDS, build_small_site, deploy_page, result_tables, served
from tests.browser_waits import awaited, hovered_tip
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site and Chromium tab twice.
pytestmark = pytest.mark.xdist_group("site_offgrid")

GRID = {
    "doc": "Tiny grid for tests/test_site_offgrid.py.",
    "gpus": ["H100", "H200"], "gpu_counts": [1, 2], "beyond_fit": 2,
    "parallel": {"max_pp": 2, "cp": [1], "ep": [1, "tp"], "dp_attn": [1, "tp"], "tp_in_domain": True,
                 "pp_after_tp": 1},
    "frameworks": ["vllm", "sglang"], "kv_dtypes": ["bf16", "fp8"],
    "scenarios": {"input_lengths": [1024, 4096], "beyond_max_context": 1, "output_lengths": [256],
                  "batches": [1, 8, 64]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 4096, "output": 256}]},
}
GPT = "openai/gpt-oss-20b"
LLAMA = "meta-llama/Meta-Llama-3.1-8B"
# (model, GPU, config label, CLI degrees, framework, KV dtype, prompt, output, batch)
POINTS = [
    (GPT, "H100", "2x tp2-ep2-dp_attn2", dict(tp=2, ep=2, dp_attn=2), "sglang", "fp8", 8000, 700, 37),
    (GPT, "H200", "1x tp1", dict(), "vllm", "bf16", 8000, 700, 37),
    (GPT, "H100", "2x tp2-ep2-dp_attn2", dict(tp=2, ep=2, dp_attn=2), "vllm", "bf16", 3000, 1, 5),
    (LLAMA, "H100", "2x tp1-pp2", dict(pp=2), "vllm", "bf16", 8000, 700, 37),
    (LLAMA, "H200", "2x tp2", dict(tp=2), "vllm", "fp8", 20000, 3000, 90),
    (LLAMA, "H100", "2x tp2", dict(tp=2), "vllm", "bf16", 5000, 300, 20),    # 20 decode tokens: fused regime
    (LLAMA, "H100", "1x tp1", dict(), "vllm", "bf16", 8000, 700, 2000),      # over capacity: fits = no
]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return build_small_site(tmp_path_factory.mktemp("site-offgrid"), GRID, ["gpt-oss-20b", "Llama-3.1-8B"])


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


@pytest.fixture(scope="module")
def tab(browser, base):  # noqa: F811
    # (after ``base``: pytest tears fixtures down in reverse, so the tab closes before the
    # server stops and no late request of the last test meets a closed socket)
    t = _open(browser)
    yield t
    t.context.close()


_cli, _close = deploy_json, assert_close


def _page(tab, base, model, gpu, cfg, fw, kv, prompt, output, batch):
    query = f"gpu={gpu}&cfg={cfg.replace(' ', '+')}&fw={fw}&kv={kv}&input={prompt}&output={output}&batch={batch}"
    return deploy_page(tab, base, model, query)


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p[0].split('/')[1]}-{p[1]}-{p[2]}-{p[4]}-{p[5]}-b{p[8]}")
def test_page_equals_archledger_deploy_off_grid(tab, base, point):
    model, gpu, cfg, degrees, fw, kv, prompt, output, batch = point
    assert prompt not in GRID["scenarios"]["input_lengths"] and batch not in GRID["scenarios"]["batches"] \
        or output not in GRID["scenarios"]["output_lengths"]
    page = _page(tab, base, model, gpu, cfg, fw, kv, prompt, output, batch)
    want = _cli(model, gpu, degrees, fw, kv, prompt, output, batch)
    got, summary = page["summary"], want["deployment"]
    for name in DEPLOY_FIELDS:
        _close(got[name], summary[name], name)
    assert got["bound"] == want["phases"]["decode"]["bound"] and got["prefill_bound"] == want["phases"]["prefill"]["bound"]
    # the per-op table of this very point, decode and prefill, every launched step in order
    for phase in ("prefill", "decode"):
        rows = [r for r in page["ops"] if r["phase"] == phase]
        cli = want["ops"][phase]
        assert [r["op_uid"] for r in rows] == [r["op_uid"] for r in cli], phase
        for r, c in zip(rows, cli):
            for name in OP_FIELDS:
                _close(r[name], c[name], (phase, r["op_uid"], name))
            assert r["bound"] == c["bound"] and r["kind"] == c["kind"], (phase, r["op_uid"])
            assert r["flops_formula"] == c["flops_formula"] and r["bytes_formula"] == c["bytes_formula"]
    # ... and what the reader sees: the form keeps the point, the cards and table show these numbers
    form = tab.page.evaluate("() => Object.fromEntries(['input','output','batch']"
                             ".map(k => [k, document.querySelector('#pick [name=' + k + ']').value]))")
    assert form == {"input": str(prompt), "output": str(output), "batch": str(batch)}
    assert f"&input={prompt}&output={output}&batch={batch}" in tab.page.url
    cards = tab.page.locator("#summary dl.cards > div")
    shown = {cards.nth(i).locator("dt").inner_text(): cards.nth(i).locator("dd").inner_text() for i in range(cards.count())}
    assert shown["Max concurrent requests, worst case"] == str(summary["max_concurrent_requests"])
    assert shown["Fits, worst case"] == "yes" if summary["fits"] else shown["Fits, worst case"].startswith("no — short by")
    assert shown["Max concurrent requests, steady state"] == str(summary["max_concurrent_requests_steady"])
    assert shown["Fits, steady state"] == ("yes" if summary["fits_steady"] else f"no — over the steady-state capacity of {summary['max_concurrent_requests_steady']}")
    assert tab.page.locator("#ops tbody tr").count() == len(want["ops"]["decode"])
    first = tab.page.locator("#ops tbody tr").first.locator("td").first.inner_text()
    assert first == want["ops"]["decode"][0]["op_uid"]
    warned = tab.page.locator("#capacity p.warn").count()
    assert warned == (0 if summary["fits"] else 1)
    if not summary["fits"]:
        text = tab.page.locator("#capacity p.warn").inner_text()
        assert f"exceeds this config's capacity of {summary['max_concurrent_requests']} requests" in text, text
    assert not tab.errors, tab.errors


def test_two_batch_overlap_in_the_page_equals_archledger_deploy(tab, base):
    # the grid's frameworks run without overlap (SGLang's two-batch overlap is opt-in): the page's
    # schedule under two_batch (deploy_eval.js scheduled) against ``archledger deploy --overlap two_batch``
    model, gpu, cfg, degrees, fw, kv, prompt, output, batch = POINTS[0]
    _page(tab, base, model, gpu, cfg, fw, kv, prompt, output, batch)
    got = awaited(tab.page, """async (p) => { const c = window.archDeploy.current;
        const o = Object.assign({}, c.option, {overlap: 'two_batch'}), s = await window.archDeploy.at(o, p);
        return {ttft_s: s.ttft_s, tpot_s: s.tpot_s, ttft_bound_s: s.ttft_bound_s, tpot_bound_s: s.tpot_bound_s,
                overlap: s.overlap, plain: c.summary.tpot_s}; }""", {"input": prompt, "output": output, "batch": batch},
                  what="archDeploy.at under two-batch overlap")
    want = _cli(model, gpu, degrees, fw, kv, prompt, output, batch, ("--overlap", "two_batch"))["deployment"]
    assert got["overlap"] == want["overlap"] == "two_batch"
    for name in ("ttft_s", "tpot_s", "ttft_bound_s", "tpot_bound_s"):
        _close(got[name], want[name], name)
    assert got["tpot_s"] != got["plain"]          # the schedule changed the estimate at this point
    assert not tab.errors, tab.errors


def test_expected_times_off_grid_read_the_measured_tables(tab, base):
    """Issue 39: the page's expected times come from the measured tables at the point itself, as
    `archledger deploy --json` gives them (the summary fields are in DEPLOY_FIELDS, the per-op ones in
    OP_FIELDS): Llama-3.1-8B on 2x H200 (TP2, vLLM, FP8 KV) at prompt 20,000 + 3,000, batch 90, where
    the decode GEMMs, the FP8-KV attention and the all-reduce each read a table of their own
    (gpus/measured/h200/vllm-0.24.0/: a KV dtype read wrong reads the bf16 attention table), and the
    cards and the per-op column show them with their measured source."""
    model, gpu, cfg, degrees, fw, kv, prompt, output, batch = POINTS[4]
    page = _page(tab, base, model, gpu, cfg, fw, kv, prompt, output, batch)
    want = _cli(model, gpu, degrees, fw, kv, prompt, output, batch)
    decode = want["ops"]["decode"]
    tables = {r["expected_table"].rsplit("/", 1)[-1] for r in decode if r["measured"]}
    assert {"gemm-bf16.yaml", "decode_attention-fp8_d128.yaml"} <= tables, tables
    assert any(not r["measured"] for r in decode)          # norms and the like: bound / 0.7
    rows = [r for r in page["ops"] if r["phase"] == "decode"]
    assert [r["measured"] for r in rows] == [r["measured"] for r in decode]
    for r, c in zip(rows, decode):
        _close(r["t_expected_s"], c["t_expected_s"], r["op_uid"])
        if c["measured"]:         # the tooltip off grid: the tables the lookup read, by file
            assert any(c["expected_table"] in t for t in r["expected_tables"]), (r["expected_tables"], c["expected_table"])
    summary = want["deployment"]
    assert summary["tpot_expected_s"] > summary["tpot_bound_s"]
    cards = tab.page.locator("#summary dl.cards > div")
    shown = {cards.nth(i).locator("dt").inner_text(): cards.nth(i).locator("dd").inner_text() for i in range(cards.count())}
    for label, name in (("TTFT expected", "ttft_expected_s"), ("TPOT last token expected", "tpot_expected_s"),
                        ("TPOT mean expected", "tpot_mean_expected_s")):
        # the CLI's number in the page's one time format (site.js archFmt.time)
        assert shown[label] == tab.page.evaluate("s => window.archFmt.time(s)", summary[name]), (label, shown[label])
    tab.page.wait_for_selector("#ops[data-expected-ready]")
    cell = tab.page.locator("#ops tbody tr").nth([c["measured"] for c in decode].index(True)).locator("td").nth(10)
    assert cell.get_attribute("title").startswith("measured: ") and "gpus/measured/h200/vllm-" in cell.get_attribute("title")
    assert not tab.errors, tab.errors


def test_invalid_input_is_refused_in_words(tab, base):
    """A prompt length that is not a whole number in range: one sentence, no numbers recomputed."""
    slug = LLAMA.replace("/", "--")
    tab.goto(f"{base}models/{slug}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16&input=-5&output=700&batch=3")
    tab.page.wait_for_function("() => document.getElementById('batch-note').textContent.length > 0")
    note = tab.page.locator("#batch-note").inner_text()
    assert note.startswith("Enter whole numbers") and "input" in note, note
    assert tab.page.locator("#summary dl.cards").count() == 0


def test_selected_point_ops_are_dispatched(browser, base):  # noqa: F811
    """Other modules (the roofline chart) get the selected point's per-op rows, both phases, with the GPU."""
    tab = _open(browser)
    try:
        tab.page.add_init_script("document.addEventListener('arch:ops', e => { window.__ops = e.detail; });")
        slug = LLAMA.replace("/", "--")
        tab.goto(f"{base}models/{slug}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16&input=8000&output=700&batch=37")
        tab.page.wait_for_function("() => window.__ops && Array.isArray(window.__ops.rows) && window.__ops.rows.length > 0")
        detail = tab.page.evaluate("() => window.__ops")
        assert detail["gpu"] == "H100" and detail["phase"] == "decode"
        rows = detail["rows"]
        assert {r["phase"] for r in rows} == {"prefill", "decode"}
        decode = [r for r in rows if r["phase"] == "decode"]
        assert len(decode) == tab.page.locator("#ops tbody tr").count()
        assert all(r["t_sol_s"] == max(r["t_compute_s"], r["t_memory_s"], r["t_comm_s"]) for r in rows)
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


def test_summary_cards_show_their_rule_with_this_points_values(tab, base):
    """Issue 20: a card's tooltip is the rule (sol.py's docstring) with the values it takes here, not a
    definition. Llama-3.1-8B 2x tp1-pp2 at 8000 + 700 tokens, batch 37: TTFT's rule has a pipeline
    fill term, and its prefill_steps is what `archledger deploy` counts; TPOT's names the decode step's
    total bytes; capacity's names dp_attn and the framework's runtime reserve."""
    from engine.cli import units
    want = _cli(LLAMA, "H100", {"pp": 2}, "vllm", "bf16", 8000, 700, 37)["deployment"]
    _page(tab, base, LLAMA, "H100", "2x tp1-pp2", "vllm", "bf16", 8000, 700, 37)
    tip = tab.page.locator("#tip")

    def hover(label: str) -> str:
        text = hovered_tip(tab.page, tab.page.locator(f"#summary dl.cards > div:has(dt:text-is('{label}')) .num"))
        tab.page.mouse.move(1, 1)
        tip.wait_for(state="hidden", timeout=5_000)
        return text

    ttft = hover("TTFT")
    assert "(prefill_steps * prefill_step + (pp - 1) * largest_step) / pp" in ttft, ttft
    assert f"prefill_steps = {want['prefill_steps']}" in ttft and "pp = 2" in ttft, ttft
    tpot = hover("TPOT, last token")
    assert "max(flops / peak, bytes / hbm_bw" in tpot and "hbm_bw = 3.35 TB/s" in tpot, tpot   # gpus/h100-sxm.yaml
    cap = hover("Max concurrent requests, worst case")
    assert "dp_attn = 1" in cap and f"reserve = {units.decimal_bytes(want['reserve_bytes_per_gpu'])}" in cap, cap
    kv = hover("KV per request")                     # no rule of its own here: the column's definition, as prose
    assert not kv.startswith("=") and kv.strip(), kv


def test_per_op_formulas_name_their_values(tab, base):
    """Issue 20: the deploy page's per-op formulas get the model page's "where dim = value" line,
    with this point's decode values: Llama-3.1-8B (config.json hidden_size 4096) on 1x H100 at batch
    37 decodes 37 requests in one program (tp1, no DP-attention, no pipeline), ctx = 8000 + 700."""
    _page(tab, base, LLAMA, "H100", "1x tp1", "vllm", "bf16", 8000, 700, 37)
    flops = tab.page.locator("#ops tbody tr td:nth-child(3) .num[data-f]")
    formulas = flops.evaluate_all("els => els.map(e => e.getAttribute('data-f'))")
    at = next(i for i, f in enumerate(formulas) if "hidden" in f and "batch" in f)   # a matmul over hidden
    text = hovered_tip(tab.page, flops.nth(at))
    assert "where" in text and "hidden = 4096" in text and "batch = 37" in text, text
    tab.page.mouse.move(1, 1)


# -- the throughput/interactivity front of every GPU type (issue 17) ---------------------------------

def _pareto(points: list[tuple[float, float]]) -> set[tuple[float, float]]:
    """The hand rule: a point (tokens/s per user, tokens/s per GPU) is on the front when no other point
    has both at least as large and one larger (exact duplicates are one point)."""
    return {(u, g) for u, g in points
            if not any(u2 >= u and g2 >= g and (u2 > u or g2 > g) for u2, g2 in points)}


def _fronts(tab, base, model, fw, kv, prompt, output, batch=1) -> list[dict]:
    """The deploy page's front rows (every GPU type) for this framework, KV dtype and point."""
    slug = model.replace("/", "--")
    tab.goto(f"{base}models/{slug}/deploy/?gpu=H100&fw={fw}&kv={kv}&input={prompt}&output={output}&batch={batch}")
    tab.page.wait_for_function("() => document.getElementById('summary').hasAttribute('data-ready')")
    assert not tab.page.locator("#chart-front").get_attribute("data-ready")    # drawn once in view, not before
    tab.page.locator("#chart-front").scroll_into_view_if_needed()
    tab.page.wait_for_function("() => document.getElementById('chart-front').hasAttribute('data-ready')")
    return tab.page.evaluate("() => window.archDeploy.fronts")


def _degrees(config: str) -> dict:
    """archledger plan's label (tp2-ep2-dp_attn2-pp2) as deploy's options."""
    return {name: int(n) for name, n in (re.fullmatch(r"([a-z_]+?)(\d+)", part).groups() for part in config.split("-"))
            if name != "tp" or int(n) > 1}


@pytest.mark.parametrize("case", [(GPT, "sglang", "fp8", 4096, 256), (LLAMA, "vllm", "bf16", 1024, 256)],
                         ids=["gpt-oss-20b-sglang-fp8-4096", "llama-8b-vllm-bf16-1024"])
def test_front_chart_is_each_gpus_pareto_front_of_the_grid_rows(tab, base, out, case):
    """At a grid point the chart's lines are, per GPU type, the Pareto front of tokens/s/GPU vs
    tokens/s/user in the steady state of continuous batching (engine.serving.steady.FRONT_BASIS:
    batch / tpot_mean_s / GPUs vs 1 / tpot_mean_s) over the deployments rows the build wrote there
    (decode rows the steady state serves, fits_steady, every GPU count, config and batch): the same
    points (by the hand rule, not the page's sort), every one a grid row with its values (the
    worst case's tpot_s beside as tpot_last_s), and one line per GPU type that serves the point."""
    model, fw, kv, prompt, output = case
    rows = _fronts(tab, base, model, fw, kv, prompt, output)
    grid = result_tables(out)["deployments"].filter(
        (pl.col("model_id") == model) & (pl.col("phase") == "decode") & (pl.col("framework") == fw)
        & (pl.col("kv_dtype") == kv) & (pl.col("input_len") == prompt) & (pl.col("output_len") == output)
        & pl.col("fits_steady")).with_columns(steady=pl.col("batch") / pl.col("tpot_mean_s") / pl.col("n_gpus"),
                                              user=1 / pl.col("tpot_mean_s").cast(pl.Float64))
    assert grid.height > 0 and {r["gpu"] for r in rows} == set(grid["gpu"].unique())
    for gpu in grid["gpu"].unique():
        mine = grid.filter(pl.col("gpu") == gpu)
        want = sorted(_pareto([(1 / t, g) for t, g in zip(mine["tpot_mean_s"], mine["steady"])]), reverse=True)
        got = [(r["tokens_per_s_per_user"], r["tokens_per_s_per_gpu"]) for r in rows if r["gpu"] == gpu]
        assert len(got) == len(want), (gpu, got, want)
        for g, w in zip(got, want):      # the page lists each front fastest user first
            _close(g[0], w[0], (gpu, "tokens/s per user"))
            _close(g[1], w[1], (gpu, "tokens/s per GPU"))
    # ... the rows deployments.parquet flags on_front, no more, no fewer
    flagged = {(r["gpu"], r["n_gpus"], r["config"], r["batch"]) for r in grid.filter(pl.col("on_front")).iter_rows(named=True)}
    assert {(r["gpu"], r["n_gpus"], r["config"], r["batch"]) for r in rows} == flagged
    keys = {(r["gpu"], r["n_gpus"], r["config"], r["batch"]): r for r in grid.iter_rows(named=True)}
    for r in rows:                       # every point a grid row (config and batch), with its values
        row = keys[(r["gpu"], r["n_gpus"], r["config"], r["batch"])]
        # (the front file holds what the chart reads: site_builder.data.FRONT_FIELDS, the rates
        # divided from the stored times in float64; the capacities are on the summary, not the chart)
        for name, column in (("tokens_per_s_per_gpu", "steady"), ("tokens_per_s_per_user", "user")):
            _close(r[name], row[column], (r["gpu"], r["config"], r["batch"], name))
        # a stored time (float32) is sent as the shortest decimal that reads back as it, exactly
        for name, column in (("tpot_s", "tpot_mean_s"), ("ttft_s", "ttft_s"), ("tpot_last_s", "tpot_s")):
            assert float(np.float32(r[name])) == row[column] and len(repr(r[name])) <= 16, (r, name)
    legend = tab.page.locator("#chart-front svg").text_content()
    assert all(gpu in legend for gpu in grid["gpu"].unique()), legend
    assert not tab.errors, tab.errors


@pytest.mark.parametrize("prompt", [8000, 300_000, 600_000])
def test_front_chart_off_grid_points_are_archledger_deploy(tab, base, prompt):
    """At a prompt length the grid never evaluated (8,000, 300,000 or 600,000 + 700) the fronts are
    still the grid's configs and batches, evaluated there: the fastest-user and the highest-throughput
    point of each GPU's front equal ``archledger deploy`` at that config and batch, and fit; the
    highest-throughput point is a capacity when that falls between the grid's batches. At 600,000 tokens
    one H100 holds no request of Llama-3.1-8B (BF16 KV: 128 KiB per token, 78.7 GB for one request
    next to 16 GB of weights in 0.9 x 80 GiB): its configs that serve none are not on the front."""
    rows = _fronts(tab, base, LLAMA, "vllm", "bf16", prompt, 700)
    assert {r["gpu"] for r in rows} == {"H100", "H200"}
    for gpu in ("H100", "H200"):
        front = [r for r in rows if r["gpu"] == gpu]
        users = [r["tokens_per_s_per_user"] for r in front]
        assert users == sorted(users, reverse=True) and len(_pareto([(r["tokens_per_s_per_user"], r["tokens_per_s_per_gpu"]) for r in front])) == len(front)
        for r in (front[0], front[-1]):
            want = _cli(LLAMA, gpu, _degrees(r["config"]), "vllm", "bf16", prompt, 700, r["batch"])["deployment"]
            assert want["fits_steady"] and (want["n_gpus"], want["config"]) == (r["n_gpus"], r["config"])
            cap = max(want["max_concurrent_requests"], want["max_concurrent_requests_steady"])
            assert r["batch"] in GRID["scenarios"]["batches"] or r["batch"] == cap
            if r is front[-1] and cap < GRID["scenarios"]["batches"][1]:
                # a capacity between the grid's batches: the config's largest point is its steady
                # capacity itself (the grid's rule adds it), and the most throughput per GPU is some
                # config's largest point
                assert r["batch"] == want["max_concurrent_requests_steady"]
            for name, field in (("tpot_s", "tpot_mean_s"), ("ttft_s", "ttft_s"),
                                ("tokens_per_s_per_gpu", "tokens_per_s_per_gpu_steady"), ("tpot_last_s", "tpot_s")):
                _close(r[name], want[field], (gpu, r["config"], r["batch"], name))


def test_on_front_flags_each_groups_pareto_front(out):
    """deployments.parquet's on_front: per (model, GPU, framework, KV dtype, prompt, output), the
    decode rows the steady state serves (fits_steady) that no other such row dominates in (1 /
    tpot_mean_s, batch / tpot_mean_s / n_gpus) (the hand rule), one row per distinct point; never a
    prefill row or a row the steady state does not serve (tests/test_hand_steady_capacity.py has a
    point past the worst-case capacity on the front, by hand)."""
    rows = result_tables(out)["deployments"].with_columns(
        steady=pl.col("batch") / pl.col("tpot_mean_s") / pl.col("n_gpus"))
    assert rows.filter(pl.col("on_front") & ((pl.col("phase") != "decode") | ~pl.col("fits_steady"))).height == 0
    served = rows.filter((pl.col("phase") == "decode") & pl.col("fits_steady"))
    groups = served.partition_by(["model_id", "gpu", "framework", "kv_dtype", "input_len", "output_len"])
    assert len(groups) > 20
    for group in groups:
        points = [(1 / t, g) for t, g in zip(group["tpot_mean_s"], group["steady"])]
        flagged = group.filter(pl.col("on_front"))
        got = [(1 / t, g) for t, g in zip(flagged["tpot_mean_s"], flagged["steady"])]
        assert sorted(got) == sorted(_pareto(points)), group.row(0, named=True)


def test_on_front_consistency_with_sizing_front(out):
    """Consistency test: grid_front flags, per group, the rows engine.serving.pareto.front picks
    from the group's rows in the table's order (its grouping and row mapping)."""
    import numpy as np
    from engine.serving.fronts import GRID_FRONT_KEY
    from engine.batch.results import PARTITION_ORDER
    from engine.serving.pareto import front
    rows = result_tables(out)["deployments"]
    for model in rows.partition_by("model_id"):
        model = model.sort(PARTITION_ORDER, maintain_order=True)       # the table's own row order
        served = model.with_row_index("row").filter((pl.col("phase") == "decode") & pl.col("fits_steady"))
        want = set()
        for group in served.partition_by(GRID_FRONT_KEY):
            mean = group["tpot_mean_s"].cast(pl.Float64).to_numpy()     # as stored, divided in float64
            picked = front(1 / mean, group["batch"].to_numpy() / mean / group["n_gpus"].to_numpy())
            want.update(group["row"].to_numpy()[picked].tolist())
        assert set(np.flatnonzero(model["on_front"].to_numpy()).tolist()) == want


def test_batch_chart_points_are_the_configs_grid_rows(tab, base, out):
    """The throughput-vs-batch chart draws, at the grid's prompt lengths, exactly the batches the
    grid wrote for the selected config (those the steady state or the worst case holds plus the
    larger capacity, or batch 1), with their steady-state values and the worst case beside: Llama-3.1-8B
    on 2x H100 tp2, SGLang, FP8 KV, output 256."""
    _page(tab, base, LLAMA, "H100", "2x tp2", "sglang", "fp8", 4096, 256, 8)
    got = {(r["input_len"], r["batch"]): r for r in tab.page.evaluate("() => window.archDeploy.batchRows")}
    rows = result_tables(out)["deployments"].filter(
        (pl.col("model_id") == LLAMA) & (pl.col("gpu") == "H100") & (pl.col("config") == "tp2") & (pl.col("n_gpus") == 2)
        & (pl.col("framework") == "sglang") & (pl.col("kv_dtype") == "fp8") & (pl.col("phase") == "decode")
        & (pl.col("output_len") == 256))
    want = {(r["input_len"], r["batch"]): r for r in rows.iter_rows(named=True)}
    assert set(got) == set(want) and len(want) >= 6
    from engine.batch.schema import stored_time
    for key, r in want.items():
        # the page's float64 times from the formulas are the stored ones through the build's float32
        # rounding (docs/results.md "Precision"), and its rate the stored rows' within float32's 2^-24
        assert stored_time("tpot_mean_s", got[key]["tpot_s"]) == r["tpot_mean_s"], key
        assert stored_time("tpot_s", got[key]["tpot_last_s"]) == r["tpot_s"], key
        assert got[key]["tokens_per_s_per_gpu"] == pytest.approx(r["batch"] / r["tpot_mean_s"] / r["n_gpus"],
                                                                 rel=2 ** -23, abs=0), key
        assert (got[key]["fits"], got[key]["fits_worst"]) == (r["fits_steady"], r["fits"]), key


def test_front_point_click_opens_that_deployment(tab, base):
    """A click on a point of the throughput/interactivity chart selects its GPU, config and batch
    (prompt, output, framework and KV dtype kept), and the summary shows that point's numbers."""
    rows = _fronts(tab, base, GPT, "vllm", "bf16", 4096, 256, batch=3)   # no front point has batch 3
    assert all(r["batch"] != 3 for r in rows)
    tab.page.locator("#chart-front svg g.mark-symbol.role-mark path").last.click(force=True)   # (not a legend symbol)
    tab.page.wait_for_function("() => new URLSearchParams(location.search).get('batch') !== '3'"
                               " && document.getElementById('summary').getAttribute('data-ready')"
                               " === JSON.stringify(Object.fromEntries(new URLSearchParams(location.search)))")
    chosen = dict(kv.split("=") for kv in tab.page.url.split("?", 1)[1].split("&"))
    assert (chosen["fw"], chosen["kv"], chosen["input"], chosen["output"]) == ("vllm", "bf16", "4096", "256")
    picked = [r for r in rows if r["gpu"] == chosen["gpu"] and f'{r["n_gpus"]}x+{r["config"]}' == chosen["cfg"]
              and r["batch"] == int(chosen["batch"])]
    assert len(picked) == 1, chosen
    summary = tab.page.evaluate("() => window.archDeploy.current.summary")
    # the front's TPOT is the steady one; its file holds the stored float32 (the summary's float64
    # through the build's rounding, engine.batch.schema.stored_time)
    from engine.batch.schema import stored_time
    assert stored_time("tpot_mean_s", summary["tpot_mean_s"]) == np.float32(picked[0]["tpot_s"])
    assert stored_time("tpot_s", summary["tpot_s"]) == np.float32(picked[0]["tpot_last_s"])
    assert not tab.errors, tab.errors


#: DeepSeek-V3 (absorbed MLA: decode_mla, prefill_mla and mla_bmm tables) on one tiny grid of its own:
#: 8x H200 under SGLang, TP8 = EP8 = DP-attention 8, BF16 KV; prompts 1024, output 256, batches 8, 64.
MLA_GRID = {
    "doc": "Tiny MLA grid for tests/test_site_offgrid.py.",
    "gpus": ["H200"], "gpu_counts": [8], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": ["tp"], "dp_attn": ["tp"], "tp_in_domain": True, "pp_after_tp": 1},
    "frameworks": ["sglang"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024], "beyond_max_context": 1, "output_lengths": [256], "batches": [8, 64]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 1024, "output": 256}]},
}


@pytest.fixture(scope="module")
def mla_tab(browser, tmp_path_factory):  # noqa: F811
    site = build_small_site(tmp_path_factory.mktemp("site-offgrid-mla"), MLA_GRID, ["DeepSeek-V3"])
    for url in served(site / "site"):
        t = _open(browser)
        yield t, url
        t.context.close()


def test_mla_expected_times_off_grid_equal_archledger_deploy(mla_tab):
    """Issue 39: DeepSeek-V3's expected times off the grid (prompt 3,000 + 700, batch 40: none of
    the grid's) in the page equal `archledger deploy --json`'s, summary and every op of both phases,
    and the ops that read the MLA tables (flash_mla: decode_mla; the prefill attention: prefill_mla;
    the per-head matmuls: mla_bmm's two sides) are among them (gpus/measured/h200/sglang-*/)."""
    tab, base = mla_tab
    degrees = dict(tp=8, ep=8, dp_attn=8)
    page = _page(tab, base, "deepseek-ai/DeepSeek-V3", "H200", "8x tp8-ep8-dp_attn8", "sglang", "bf16", 3000, 700, 40)
    want = _cli("deepseek-ai/DeepSeek-V3", "H200", degrees, "sglang", "bf16", 3000, 700, 40)
    read = {r["expected_table"].rsplit("/", 1)[-1].split(".")[0] for phase in ("prefill", "decode")
            for r in want["ops"][phase] if r["measured"]}
    assert {"decode_mla-bf16_r512", "prefill_mla-bf16_r512", "mla_bmm-pre_fp8_r512", "mla_bmm-post_fp8_r512"} <= read, read
    for name in ("ttft_expected_s", "tpot_expected_s", "tpot_mean_expected_s"):
        _close(page["summary"][name], want["deployment"][name], name)
    for phase in ("prefill", "decode"):
        rows = [r for r in page["ops"] if r["phase"] == phase]
        cli = want["ops"][phase]
        assert [r["op_uid"] for r in rows] == [r["op_uid"] for r in cli], phase
        assert [r["measured"] for r in rows] == [r["measured"] for r in cli], phase
        for r, c in zip(rows, cli):
            _close(r["t_expected_s"], c["t_expected_s"], (phase, r["op_uid"]))
    assert not tab.errors, tab.errors
