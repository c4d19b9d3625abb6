"""The sizing page in headless Chromium: the form answers as ``archledger plan --json`` (same config,
GPU count and batch per GPU type, and the same overall answer) for each framework the build sized,
the throughput/interactivity chart has one line per GPU type with a legend, and the build records
the fronts and sizing partitions."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from engine.cli import main
from tests.site_helpers import axe_serious, served, shared_small_site
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid the small site it shares with test_site_sizing_disagg.py
#: (tests/site_helpers.shared_small_site: one build per process) twice.
pytestmark = pytest.mark.xdist_group("sizing_site")

REPO = Path(__file__).resolve().parent.parent
MODEL, SLUG = "Llama-3.1-8B", "meta-llama--Meta-Llama-3.1-8B"
GPUS, MAX_GPUS = ["H100", "B200"], 2
SCENARIOS = [(2048, 256), (1024, 128)]
FRAMEWORKS = ["vllm", "sglang"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid["sizing"] = {"scenarios": [{"input": i, "output": o} for i, o in SCENARIOS], "gpus": GPUS,
                      "frameworks": FRAMEWORKS, "kv_dtypes": ["bf16"], "max_gpus": MAX_GPUS}
    return shared_small_site(tmp_path_factory, grid, [MODEL])     # tests/test_site_sizing_disagg.py reads it too


@pytest.fixture(scope="module")
def base(built):
    yield from served(built / "site")


def _plan(capsys, inp: int, out: int, ttft: float, tpot: float, fw: str) -> dict:
    args = ["plan", MODEL, "--input", str(inp), "--output", str(out), "--ttft", repr(ttft), "--tpot", repr(tpot),
            "--max-gpus", str(MAX_GPUS), "--framework", fw, "--kv-dtype", "bf16", "--top", "1", "--time", "estimate", "--json"]
    for g in GPUS:
        args += ["--gpu", g]
    main(args)
    return json.loads(capsys.readouterr().out)


def _form(page) -> dict:
    answer = page.locator("#sizing-answer")
    rows = {}
    for tr in page.locator("#sizing-table tbody tr").all():
        cells = [c.inner_text() for c in tr.locator("td").all()]
        rows[cells[0]] = cells
    return {"answer": {k: answer.get_attribute(f"data-{k}") for k in ("gpu", "config", "n-gpus", "batch")},
            "rows": rows}


# the question (TTFT <= 2 s, TPOT <= 50 ms) under both frameworks, and tighter bounds
@pytest.mark.parametrize("scenario, ttft, tpot_ms, fw", [(SCENARIOS[0], 2.0, 50.0, "vllm"),
                                                         (SCENARIOS[0], 2.0, 50.0, "sglang"),
                                                         (SCENARIOS[0], 0.25, 8.0, "vllm"),
                                                         (SCENARIOS[1], 0.1, 12.5, "sglang")])
def test_form_gives_plans_answer(browser, base, capsys, scenario, ttft, tpot_ms, fw):
    inp, out = scenario
    plan = _plan(capsys, inp, out, ttft, tpot_ms / 1000, fw)
    assert plan["framework"] == fw
    tab = _open(browser)
    try:
        tab.goto(f"{base}/models/{SLUG}/sizing/?scenario={inp}/{out}&fw={fw}&ttft={ttft}&tpot={tpot_ms}")
        tab.page.wait_for_function("document.querySelectorAll('#sizing-table tbody tr').length > 0")
        got = _form(tab.page)
        a = plan["answer"]
        if a:      # the answer's lower bounds beside its estimates, as plan gives them (the deploy page's evaluation)
            tab.page.wait_for_function("document.getElementById('sizing-answer').hasAttribute('data-ttft-bound')")
            answer = tab.page.locator("#sizing-answer")
            if fw == "sglang":        # the tiny grid's framework: its deploy page holds the answer's config
                for key in ("ttft", "tpot"):
                    shown = float(answer.get_attribute(f"data-{key}-bound"))
                    assert shown == pytest.approx(a["times"]["bound"][f"{key}_s"], rel=1e-9), key
                assert "Lower bound at this point" in answer.inner_text()
            else:
                assert answer.get_attribute("data-ttft-bound") == "" and "archledger deploy" in answer.inner_text()
        assert tab.page.locator("select[name=fw]").input_value() == fw
        assert f"--framework {fw}" in tab.page.locator("#sizing-cli").inner_text()
        assert not tab.errors and not tab.blocked
    finally:
        tab.context.close()
    assert set(got["rows"]) == set(GPUS)
    for g in plan["gpus"]:
        cells = got["rows"][g["gpu"]]
        if not g["cheapest"]:
            assert "no config" in cells[1]
            continue
        want = g["cheapest"][0]
        assert (cells[2], int(cells[1]), int(cells[3])) == (want["config"], want["n_gpus"], want["batch"]), g["gpu"]
    a = plan["answer"]
    expected = {"gpu": a["gpu"], "config": a["config"], "n-gpus": str(a["n_gpus"]), "batch": str(a["batch"])} if a \
        else {"gpu": "", "config": "", "n-gpus": "", "batch": ""}
    assert got["answer"] == expected


def test_front_chart_has_one_line_per_gpu_type_and_a_legend(browser, base, built):
    tab = _open(browser)
    try:
        tab.goto(f"{base}/models/{SLUG}/sizing/")
        tab.page.locator("#chart-front").scroll_into_view_if_needed()  # charts are drawn once in view
        tab.page.wait_for_selector("#chart-front svg .mark-line path")
        lines = tab.page.locator("#chart-front svg .mark-line path").count()
        legend = tab.page.eval_on_selector_all("#chart-front svg .role-legend-label text",
                                               "els => els.map(e => e.textContent.trim())")
        # unchecking a GPU type drops its line
        tab.page.uncheck("input[name=gpu][value=B200]")
        tab.page.wait_for_function("document.querySelectorAll('#chart-front svg .mark-line path').length === 1")
        # none left: a sentence, not an empty chart (which logged Vega warnings)
        tab.page.uncheck("input[name=gpu][value=H100]")
        tab.page.wait_for_function("!document.querySelector('#chart-front svg')")
        assert tab.page.locator("#chart-front").inner_text() == "Pick a GPU type above to draw its front."
        assert tab.page.locator("#sizing-answer").inner_text() == "Pick at least one GPU type."
        assert not tab.warnings, tab.warnings           # an empty chart logged 8 Vega warnings (issue 41)
        tab.page.check("input[name=gpu][value=H100]")
        tab.page.wait_for_selector("#chart-front svg .mark-line path")
        # the framework selector switches the rows (and the command line) to the other framework's
        tab.page.select_option("select[name=fw]", "sglang")
        tab.page.wait_for_function("document.getElementById('sizing-cli').textContent.includes('--framework sglang')")
        assert "fw=sglang" in tab.page.url
        assert not tab.errors
    finally:
        tab.context.close()
    assert lines == len(GPUS) and sorted(legend) == sorted(GPUS)


def test_axe_finds_no_serious_violation_on_the_sizing_page(browser, base):  # noqa: F811
    """The sizing page type's share of tests/test_site_keyboard.py's axe pass: read to its end (its
    chart drawn), no serious or critical axe-core violation."""
    tab = _open(browser)
    try:
        tab.goto(f"{base}/models/{SLUG}/sizing/")
        tab.scroll_through()
        tab.page.wait_for_selector("#chart-front svg .mark-line path", state="attached")
        found = axe_serious(tab.page)
        assert not found, "\n".join(found)
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


def test_deploy_page_links_the_sizing_page_and_results_record_the_tables(built):
    deploy = (built / "site" / "models" / SLUG / "deploy" / "index.html").read_text()
    assert f'models/{SLUG}/sizing/"' in deploy
    manifest = json.loads((built / "results" / "manifest.json").read_text())
    entry = manifest["models"]["meta-llama/Meta-Llama-3.1-8B"]
    for table in ("fronts", "sizing"):
        rel = f"{table}/model={SLUG}/part.parquet"
        assert rel in entry["files"]
        frame = pl.read_parquet(built / "results" / rel)
        assert frame.height == entry[table] > 0
        assert set(frame["gpu"]) == set(GPUS) and set(frame["framework"]) == set(FRAMEWORKS)
        assert set(zip(frame["input_len"], frame["output_len"])) == set(SCENARIOS)


def test_rebuild_with_nothing_changed_carries_the_sizing_tables(built):
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder.render import render_staged

    files = {t: (built / "results" / t / f"model={SLUG}" / "part.parquet").read_bytes() for t in ("fronts", "sizing")}
    again = build(load_corpus(), built, [MODEL], built / "grid.yaml", jobs=1, site=render_staged)
    assert again.recomputed == [] and again.reused == ["meta-llama/Meta-Llama-3.1-8B"]
    for t, data in files.items():
        assert (built / "results" / t / f"model={SLUG}" / "part.parquet").read_bytes() == data
    assert (built / "site" / "data" / "sizing" / f"{SLUG}.json.gz").exists()


def test_pages_say_which_time_they_show(built):
    """Issue 39: the model, deploy and sizing pages say in one sentence which time they show (the
    estimate and bound the pages compute; the expected time is plan's and deploy's)."""
    import re
    site = built / "site" / "models" / SLUG
    said = {}
    for page in ("", "deploy/", "sizing/"):
        text = (site / page / "index.html").read_text()
        found = re.findall(r'<p class="note" id="which-time">(.*?)</p>', text)
        assert len(found) == 1, page
        said[page] = re.sub(r"<[^>]+>", "", found[0])
        assert said[page].count(". ") == 0 and said[page].endswith(".")      # one sentence
    assert "no times" in said[""]
    assert "schedule estimate" in said["deploy/"] and "lower bound" in said["deploy/"] \
        and "ttft_expected_s" in said["deploy/"]
    assert "schedule estimate" in said["sizing/"] and "archledger plan --time estimate" in said["sizing/"]
    # issue 38: each page's front chart says, in one sentence, which time and which capacity it uses:
    # the schedule estimate (not the bound) in the steady state, the worst case named as what it is not
    for page in ("deploy/", "sizing/"):
        text = (site / page / "index.html").read_text()
        found = re.findall(r'<span class="front-basis">(.*?)</span>', text)
        assert len(found) == 1, page
        basis = found[0].replace("&#39;", "'")
        assert basis.count(". ") == 0 and basis.endswith("."), basis
        for words in ("schedule estimate", "not the lower bound", "steady state of continuous batching",
                      "tpot_mean_s", "max_concurrent_requests_steady", "worst case"):
            assert words in basis, (page, words)


def test_a_bound_still_computing_never_lands_on_a_newer_answer(browser, base):
    """The answer's lower bound arrives asynchronously (the deploy page's evaluator): a form changed
    again before it lands must show its own sentence only. Planted: an update that leaves earlier
    bound requests live appends "(Its lower bound ...)" or "Lower bound at this point ..." to "Pick
    at least one GPU type." (seen under load in the suite's run)."""
    from tests.browser_waits import awaited
    tab = _open(browser)
    try:
        inp, out = SCENARIOS[0]
        tab.goto(f"{base}/models/{SLUG}/sizing/?scenario={inp}/{out}&fw=sglang&ttft=2&tpot=50")
        # one bound has landed: the evaluator's index and data are fetched, so the next resolves at once
        tab.page.wait_for_function("document.getElementById('sizing-answer').hasAttribute('data-ttft-bound')")
        assert "Lower bound at this point" in tab.page.locator("#sizing-answer").inner_text()
        # in one task: an answer whose bound is asked, then a form with no GPU type
        tab.page.evaluate("""() => {
            const boxes = Array.from(document.querySelectorAll("input[name=gpu]"));
            boxes.forEach(c => { c.checked = true; }); boxes[0].form.dispatchEvent(new Event("change"));
            boxes.forEach(c => { c.checked = false; }); boxes[0].form.dispatchEvent(new Event("change"));
        }""")
        awaited(tab.page, "() => new Promise(r => setTimeout(r, 1000))", what="the pending bound to settle")
        assert tab.page.locator("#sizing-answer").inner_text() == "Pick at least one GPU type."
        assert not tab.errors
    finally:
        tab.context.close()
