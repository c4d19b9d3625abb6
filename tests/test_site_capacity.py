"""The deploy page when a batch exceeds the selected config's capacity, in headless Chromium.

Llama-3.1-8B over a tiny grid (H100 and H200, one and two GPUs, vLLM, BF16 KV, 1024-token prompts
+ 256 generated, batches 1, 8 and 512). By hand (tests/test_hand_capacity.py derives the same
numbers): one H100 holds floor((76,968,728,985.6 - 16,060,522,496 - 139,586,437.12 (vLLM's runtime
reserve) - 704,643,072) / 167,772,160) = 358 requests, so batch 512 has no row there; two H100
(TP 2) hold 810 (tests/test_site_numbers.py). The grid keeps each
config's batches that fit the worst case or the steady state of continuous batching plus the
larger capacity when below the largest batch swept, so the one-H100 data has batches 1, 8 and its
steady-state capacity (about 395: each request's mean paged KV), never 512.

The page must (1) keep batch 512 on one H100, say in words that it exceeds the capacity of 358
(sol.summarize's max_concurrent_requests, which the page computes from the config's formula trees by
the same rule; tests/test_site_offgrid.py checks it against `archledger deploy`) and link the configs
that hold it; (2) keep the batch, whatever it is, when the GPU changes.
"""
from __future__ import annotations

import polars as pl
import pytest

from tests.site_helpers import build_small_site, served
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site twice.
pytestmark = pytest.mark.xdist_group("site_capacity")

SLUG = "meta-llama--Meta-Llama-3.1-8B"
GRID = {
    "doc": "Tiny grid for tests/test_site_capacity.py.",
    "gpus": ["H100", "H200"], "gpu_counts": [1, 2], "beyond_fit": 2,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024], "beyond_max_context": 1, "output_lengths": [256],
                  "batches": [1, 8, 512]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 1024, "output": 256}]},
}
ONE_H100 = 358          # by hand, above
TWO_H100 = 810


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return build_small_site(tmp_path_factory.mktemp("site-capacity"), GRID, ["Llama-3.1-8B"])


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


@pytest.fixture(scope="module")
def caps(out) -> dict[tuple[str, int], int]:
    d = pl.scan_parquet(str(out / "results" / "deployments" / "**" / "*.parquet"), hive_partitioning=True)
    rows = d.filter(pl.col("phase") == "decode").group_by(["gpu", "n_gpus"]).agg(
        pl.col("max_concurrent_requests").unique()).collect()
    out = {}
    for gpu, n, values in rows.iter_rows():
        assert len(values) == 1, (gpu, n, values)          # one capacity per (config, prompt, output)
        out[(gpu, n)] = values[0]
    return out


def _form(tab) -> dict:
    return tab.page.evaluate("() => Object.fromEntries(['gpu','cfg','input','batch']"
                             ".map(k => [k, document.querySelector('#pick [name=' + k + ']').value]))")


def _card(tab, label: str) -> str:
    return tab.page.locator(f"#summary dl.cards > div:has(dt:text-is('{label}')) dd").inner_text()


#: Issue 38/41: the cards lead with the steady state of continuous batching (the basis of every front,
#: engine.serving.steady.FRONT_BASIS), each with its worst case (every request at its last token) next.
LEAD = ["Fits, steady state", "Fits, worst case", "Max concurrent requests, steady state",
        "Max concurrent requests, worst case", "TPOT, mean over the output", "TPOT, last token"]


def test_capacities_by_hand(caps):
    assert caps[("H100", 1)] == ONE_H100 and caps[("H100", 2)] == TWO_H100
    assert caps[("H200", 1)] >= 512                      # 143 GB: one H200 holds the batch


def test_batch_over_capacity_is_explained_and_points_to_configs(browser, base, caps):  # noqa: F811
    tab = _open(browser)
    try:
        tab.goto(f"{base}models/{SLUG}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16&input=1024&batch=512")
        tab.page.wait_for_selector("#capacity #holders")
        assert _form(tab) == {"gpu": "H100", "cfg": "1x tp1", "input": "1024", "batch": "512"}
        # the batch is a free number; the grid's batches are suggestions
        suggested = tab.page.evaluate("() => [...document.querySelectorAll('#batches option')].map(o => o.value)")
        assert {"1", "8", "512"} <= set(suggested), suggested
        text = tab.page.locator("#capacity p.warn").inner_text()
        assert f"Batch 512 exceeds this config's capacity of {ONE_H100} requests at 1K prompt tokens" in text, text
        links = tab.page.locator("#capacity ul.holders a")
        assert links.all_inner_texts() == [f"H100 2x tp2 (capacity {TWO_H100})"]
        # the point is computed all the same (as `archledger deploy` prints it): it does not fit
        assert _card(tab, "Fits, worst case").startswith("no — short by")
        links.first.click()
        tab.page.wait_for_function("() => document.querySelector('#pick [name=cfg]').value === '2x tp2'"
                                   " && document.querySelectorAll('#summary dl.cards').length === 1")
        assert _form(tab) == {"gpu": "H100", "cfg": "2x tp2", "input": "1024", "batch": "512"}
        tab.page.wait_for_function("() => document.getElementById('capacity').innerText.trim() === ''")
        assert _card(tab, "Fits, worst case") == "yes"
        assert tab.page.locator("#summary dl.cards > div > dt").all_inner_texts()[:len(LEAD)] == LEAD
        assert tab.page.locator("#membar .seg").count() == 4
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


def test_changing_gpu_keeps_the_batch(browser, base, caps):  # noqa: F811
    """Any batch is a point the page computes: a new GPU keeps it exactly (one H100's capacity, 358,
    is no batch of the H200 grid and stays selected)."""
    tab = _open(browser)
    try:
        tab.goto(f"{base}models/{SLUG}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16&input=1024&batch=512")
        tab.page.wait_for_selector("#capacity p.warn")
        tab.page.select_option("#pick [name=gpu]", "H200")
        tab.page.wait_for_function("() => document.querySelector('#pick [name=gpu]').value === 'H200'"
                                   " && document.getElementById('capacity').innerText.trim() === ''"
                                   " && document.querySelectorAll('#summary dl.cards').length === 1")
        assert _form(tab) == {"gpu": "H200", "cfg": "1x tp1", "input": "1024", "batch": "512"}
        assert tab.page.locator("#batch-note").inner_text() == ""
        assert ONE_H100 not in (caps[("H200", 1)], caps[("H200", 2)])
        tab.goto(f"{base}models/{SLUG}/deploy/?gpu=H100&cfg=1x+tp1&fw=vllm&kv=bf16&input=1024&batch={ONE_H100}")
        tab.page.wait_for_selector("#summary dl.cards")
        assert tab.page.locator("#capacity").inner_text().strip() == ""        # exactly the capacity: it fits
        tab.page.select_option("#pick [name=gpu]", "H200")
        tab.page.wait_for_function("() => document.querySelector('#pick [name=gpu]').value === 'H200'")
        assert _form(tab)["batch"] == str(ONE_H100)
        assert f"batch={ONE_H100}" in tab.page.url and "gpu=H200" in tab.page.url
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()
