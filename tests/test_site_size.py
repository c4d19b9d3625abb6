"""The site stays lean (issue 19) and its downloads page says what each table is (issue 20).

- Every HTML page stays under ``PAGE_LIMIT``: DeepSeek-V4-Pro's model page (the corpus's largest:
  six layer templates, hyper-connections, compressed attention; 523 KB when its per-op table was
  inline HTML) is rendered by the site's own renderer from its model document, and every page of a
  small build is measured.
- The downloads are the results' own Parquet files, one copy each (no per-GPU CSV copies of the
  deployment rows); the downloads page links every one, with its size and row count as the files
  have them, and its polars snippet, run on the files saved under the names the page gives them,
  reads back exactly the table the build wrote.
- The results' partitions are written in deployment order with zstd (the downloads' size).
- In Chromium, the model page draws its per-op table from the model document: one row per op, the
  numbers as the Python formatter prints them, a bytes cell's tooltip with the column's shared
  definition and the row's node.
"""
from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from engine.cli import units
from tests.site_helpers import build_small_site, result_tables, served
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site twice.
pytestmark = pytest.mark.xdist_group("site_size")

QWEN = "Qwen/Qwen3-8B"
QWEN_SLUG = "Qwen--Qwen3-8B"
V4_PRO = "deepseek-ai/DeepSeek-V4-Pro"
GRID = {"doc": "One GPU type, one count, two batches: a deployment table and a per-op table to download.",
        "gpus": ["H100"], "gpu_counts": [1, 2], "beyond_fit": 1,
        "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
        "frameworks": ["vllm"], "kv_dtypes": ["bf16", "fp8"],
        "scenarios": {"input_lengths": [1024, 4096], "beyond_max_context": 2, "output_lengths": [256],
                      "batches": [1, 8]},
        "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 4096, "output": 256}]}}


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return build_small_site(tmp_path_factory.mktemp("size-site"), GRID, [QWEN])


def _page(out: Path, rel: str) -> str:
    return (out / "site" / rel).read_text()


# -- page weight ------------------------------------------------------------------------------------

def test_largest_model_page_stays_under_the_limit(tmp_path, evaluation):
    from engine.batch.export import model_document
    from engine.batch.results import MODELS_SCHEMA, _frame, model_row
    from site_builder import budget, pages
    from site_builder.data import Results
    from site_builder.templating import environment
    from site_builder.writer import Site

    ev = evaluation(V4_PRO)
    doc = model_document(ev)
    row = model_row(ev)
    results = Results(tmp_path / "results", _frame({k: [row[k]] for k in MODELS_SCHEMA}, MODELS_SCHEMA),
                      {V4_PRO: doc}, None, None)
    site = Site(tmp_path / "site", environment())
    pages._model(site, results, V4_PRO)
    page = (tmp_path / "site" / "models" / "deepseek-ai--DeepSeek-V4-Pro" / "index.html").read_bytes()
    assert len(page) <= budget.PAGE_LIMIT, f"{len(page):,} bytes of HTML"
    # the per-op table is drawn from the model document the site already publishes, not sent as HTML
    assert b'id="op-table"' not in page
    assert b'data-doc="../../data/models/deepseek-ai--DeepSeek-V4-Pro.json.gz"' in page
    assert (tmp_path / "site" / "data" / "models" / "deepseek-ai--DeepSeek-V4-Pro.json.gz").is_file()
    # the bytes columns name their shared definition; it travels once, in the page data
    assert page.count(b'data-dk="bytes"') == 2 * len(doc["components"])
    assert page.count(b"HBM bytes read and written at the reference point") == 1


def test_every_page_of_a_small_build_stays_under_the_limit(out):
    from site_builder.budget import PAGE_LIMIT
    pages = {p.relative_to(out / "site").as_posix(): p.stat().st_size for p in (out / "site").rglob("*.html")}
    assert "models/Qwen--Qwen3-8B/index.html" in pages and "downloads/index.html" in pages
    assert {p: n for p, n in pages.items() if n > PAGE_LIMIT} == {}


# -- downloads ----------------------------------------------------------------------------------------

def _links(page: str) -> dict[str, tuple[str, str]]:
    """href -> (download name, the text after the link up to the end of its cell) on the downloads page."""
    return {html.unescape(h): (html.unescape(d), html.unescape(rest)) for h, d, rest in
            re.findall(r'<a href="([^"]+)" download="([^"]+)">[^<]*</a>(.*?)</td>', page, re.S)}


def test_downloads_are_the_results_files_once(out):
    """downloads/ holds the results' Parquet (the same files: hard links or equal bytes) and the
    pages' small CSV/JSON twins; nothing else (no per-GPU CSV copies of the deployment rows)."""
    results, downloads = out / "results", out / "site" / "downloads"
    # every results Parquet file with rows (an empty sizing partition, for a model outside the grid's
    # sizing list, is not published)
    parquet = sorted(p.relative_to(results).as_posix() for p in results.rglob("*.parquet")
                     if pq.ParquetFile(p).metadata.num_rows)
    assert sorted(p.relative_to(downloads).as_posix() for p in downloads.rglob("*.parquet")) == parquet
    for rel in parquet:
        assert (downloads / rel).read_bytes() == (results / rel).read_bytes(), rel
    others = sorted(p.relative_to(downloads).as_posix() for p in downloads.rglob("*")
                    if p.is_file() and p.suffix != ".parquet")
    assert all(re.fullmatch(r"(index\.html|gallery\.csv|contracts\.(csv|json)|landscape\.json|landscape/\w+\.csv)", o)
               for o in others), others


def test_downloads_page_lists_every_table_by_model_with_sizes_and_rows(out):
    page = _page(out, "downloads/index.html")
    links = _links(page)
    downloads = out / "site" / "downloads"
    for table in ("deployments", "ops"):
        rel = f"{table}/model={QWEN_SLUG}/part.parquet"
        saved, cell = links[rel]
        assert saved == f"{table}-{QWEN_SLUG}.parquet"
        size, rows = (downloads / rel).stat().st_size, pq.ParquetFile(downloads / rel).metadata.num_rows
        assert f"{units.decimal_bytes(size)}, {rows:,} rows" in cell, cell
    saved, _ = links["models.parquet"]
    assert saved == "models.parquet"
    assert re.search(r"\(1 rows\)</td><td class=\"n\">" + re.escape(units.decimal_bytes(
        (downloads / "models.parquet").stat().st_size)), page)
    # the model's own page tables are listed beside its Parquet files
    assert f'href="../models/{QWEN_SLUG}/ops.csv"' in page and f'href="../data/models/{QWEN_SLUG}.json.gz"' in page


def test_polars_snippet_reads_the_saved_files_back(out, tmp_path):
    """Save every link under its download name, run the page's polars line for each per-model table:
    the frame is the build's table (the partition column of the hive layout aside)."""
    page = _page(out, "downloads/index.html")
    for href, (saved, _) in _links(page).items():
        source = (out / "site" / "downloads" / href).resolve()
        if source.is_file():
            shutil.copy(source, tmp_path / saved)
    snippets = [html.unescape(s) for s in re.findall(r"<dt>polars</dt><dd><code>([^<]+)</code>", page)]
    published = [t for t in ("deployments", "ops", "fronts", "sizing")
                 if (out / "site" / "downloads" / t / f"model={QWEN_SLUG}" / "part.parquet").is_file()]
    assert published[:2] == ["deployments", "ops"]
    assert snippets == [f'pl.read_parquet("{t}-*.parquet")' for t in published]
    tables = result_tables(out)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        for snippet, table in zip(snippets, published):
            # the page's line is exactly one pl.read_parquet call: make that call (no eval of page text)
            glob = re.fullmatch(r'pl\.read_parquet\("([^"]+)"\)', snippet).group(1)
            # the download holds the stored columns: result_tables adds the unstored worst-case rate
            stored = tables[table].drop("model", "tokens_per_s_per_gpu", strict=False)
            assert pl.read_parquet(glob).equals(stored), table
        assert pl.read_parquet("models.parquet").equals(tables["models"])


def test_partitions_are_in_deployment_order_with_zstd(out):
    from engine.batch.results import PARTITION_ORDER
    for table in ("deployments", "ops"):
        path = out / "results" / table / f"model={QWEN_SLUG}" / "part.parquet"
        frame = pl.read_parquet(path)
        assert frame.equals(frame.sort(PARTITION_ORDER, maintain_order=True)), table
        meta = pq.ParquetFile(path).metadata
        assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}


# -- the lazily loaded per-op table in Chromium ---------------------------------------------------------

def test_model_page_draws_its_op_table_with_tooltips(out, browser):  # noqa: F811
    """The table drawn from the document has one row per op, each number printed as the site's
    Python formatter prints it (engine/cli/units.py), and the tooltips of a bytes cell (the shared
    definition, the row's node) and a FLOPs cell (its formula and the dims it names)."""
    import json
    doc = json.loads((out / "results" / "models" / f"{QWEN_SLUG}.json").read_text())
    uid = "main/layers[block]/mlp/gate_proj"
    for url in served(out / "site"):
        tab = _open(browser)
        try:
            tab.page.goto(f"{url}models/{QWEN_SLUG}/", wait_until="load")
            tab.page.wait_for_selector("#op-table tbody tr")
            cells = tab.page.evaluate("""() => Array.from(document.querySelectorAll('#op-table tbody tr'))
                .map(tr => [tr.dataset.n].concat(Array.from(tr.cells).map(td => td.innerText)))""")
            assert [c[0] for c in cells] == [o["uid"] for o in doc["ops"]]
            for (_, op_uid, op, axes, params, repeat, fp, bp, _i, fd, bd), o in zip(cells, doc["ops"]):
                assert (op_uid, op, axes, params, repeat) == (o["uid"], o["op"], ", ".join(o["out_shape"]),
                                                               units.si(o["params"]["value"]), str(o["repeat"]["value"]))
                assert fp == (units.si(o["flops_prefill"]["value"]) if "flops_prefill" in o else "\u2014")
                assert fd == (units.si(o["flops_decode"]["value"]) if "flops_decode" in o else "\u2014")
                assert bp == (units.decimal_bytes(o["bytes_prefill"]) if "bytes_prefill" in o else "\u2014")
                assert bd == (units.decimal_bytes(o["bytes_decode"]) if "bytes_decode" in o else "\u2014")
            row = tab.page.locator(f"#op-table tbody tr[data-n='{uid}']")
            row.locator("td").nth(6).locator(".num").hover()             # prefill bytes
            tip = tab.page.locator("#tip")
            tip.wait_for(state="visible", timeout=5_000)
            text = tip.inner_text()
            assert "HBM bytes read and written at the reference point" in text, text
            assert f"from {uid}" in text, text
            flops = row.locator("td").nth(5).locator(".num")
            flops.hover()
            tab.page.wait_for_function("f => document.getElementById('tip').innerText.includes(f)",
                                       arg=flops.get_attribute("data-f"))
            assert "hidden = 4096" in tip.inner_text()               # config.json hidden_size
            assert not tab.errors, tab.errors
        finally:
            tab.context.close()


# -- the size budget per model (issue 42) ---------------------------------------------------------------

def test_site_files_belong_to_their_model_or_to_the_fixed_pages():
    """Hand-written paths of each kind the site writes: a dotted slug that starts another's
    (GLM-5.2 beside GLM-5, Qwen3.5 beside Qwen3) is its own, never the text up to its first dot."""
    from site_builder.budget import owner
    slugs = {"zai-org--GLM-5", "zai-org--GLM-5.2", "Qwen--Qwen3.5-397B-A17B", "Qwen--Qwen3-8B"}
    cases = {"models/zai-org--GLM-5.2/deploy/index.html": "zai-org--GLM-5.2",
             "data/models/zai-org--GLM-5.2.json.gz": "zai-org--GLM-5.2",
             "data/models/zai-org--GLM-5.json.gz": "zai-org--GLM-5",
             "data/sizing/Qwen--Qwen3.5-397B-A17B.json.gz": "Qwen--Qwen3.5-397B-A17B",
             "downloads/deployments/model=Qwen--Qwen3-8B/part.parquet": "Qwen--Qwen3-8B",
             "data/deploy/zai-org--GLM-5/8-tp8-d8.json.gz": "zai-org--GLM-5",
             "models/Qwen--Qwen3-8B/graphs/main-layers-block-.svg.gz": "Qwen--Qwen3-8B",
             "components/diff/gqa_attention/mla_attention/index.html": None,
             "downloads/landscape.json": None, "static/js/deploy.js": None, "index.html": None}
    assert {rel: owner(Path(rel), slugs) for rel in cases} == cases


def test_a_small_build_keeps_the_budget_per_model(out):
    """Every byte of the site is its model's or fixed (the sum is the site), the model's own files
    are counted as its, and the small build is within 1.5 MB per model and 10 MB fixed. (The full
    site's figures are benchmarks/site.py's: this build's grid is a few points.)"""
    from site_builder import budget
    site = out / "site"
    sizes = budget.measure(site)
    assert sizes.total == sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    assert list(sizes.per_model) == [QWEN_SLUG]
    own = [site / "models" / QWEN_SLUG / "index.html", site / "data" / "models" / f"{QWEN_SLUG}.json.gz",
           *(site / "downloads" / t / f"model={QWEN_SLUG}" / "part.parquet" for t in ("deployments", "ops"))]
    assert all(p.is_file() for p in own)
    assert sizes.per_model[QWEN_SLUG] >= sum(p.stat().st_size for p in own) + budget.folder_bytes(site / "data" / "deploy" / QWEN_SLUG)
    assert sizes.fixed >= budget.folder_bytes(site / "static") + budget.folder_bytes(site / "components")
    assert sizes.per_model[QWEN_SLUG] <= budget.PER_MODEL_BYTES and sizes.fixed <= budget.FIXED_BYTES
    assert sizes.within()
