"""Pages given URLs nobody meant: a hash that is not valid percent-encoding, a query naming a GPU or
config the build lacks, a compare link naming a model by its id (issue 35, item 8).

A hash is the reader's text: ``decodeURIComponent`` throws on ``#%E0%A4%A``, and site.js read the
hash before it defined the loaders every page's scripts use, so the model and deploy pages drew
nothing. The compare page's options are slugs (``org--name``): a link with ``?a=org/name`` left
the select empty and fetched ``data/models/.json.gz`` (a 404 shown raw). Each page here must draw
its content with no console error, no uncaught exception and no failed request.
"""
from __future__ import annotations

import json

import pytest
import yaml

from site_builder.sources import REPO
from tests.site_helpers import served, shared_small_site
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid the small site it shares with the playground tests
#: (tests/site_helpers.shared_small_site: one build per process) twice.
pytestmark = pytest.mark.xdist_group("playground_site")

A, B = "Qwen/Qwen3-8B", "Qwen/Qwen3.5-27B"
SLUG_A, SLUG_B = A.replace("/", "--"), B.replace("/", "--")
HASHES = ["#%E0%A4%A", "#%", "#{{", "#a=b&&&=", "#c-no-such-drawing", "#%00%ZZ"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid["gpu_counts"] = [1]
    return shared_small_site(tmp_path_factory, grid, [A, B])     # the playground tests' site (one build)


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


@pytest.fixture(scope="module")
def names(out) -> dict[str, str]:
    """Display name per slug, from the build's model documents."""
    return {s: json.loads((out / "results" / "models" / f"{s}.json").read_text())["name"] for s in (SLUG_A, SLUG_B)}


@pytest.fixture
def tab(browser):  # noqa: F811
    t = _open(browser)
    yield t
    t.context.close()


def test_a_malformed_hash_leaves_the_model_page_working(tab, base):
    for bad in HASHES:
        tab.goto(f"{base}models/{SLUG_A}/{bad}")
        tab.page.wait_for_selector("#op-table tbody tr")          # model.js drew the op table (archJSON)
        assert tab.page.evaluate("typeof window.archJSON") == "function", bad
        assert not tab.errors, (bad, tab.errors)


def test_a_malformed_hash_or_an_unknown_selection_leaves_the_deploy_page_working(tab, base):
    """The hash as above, and a query naming a GPU, config, framework and KV dtype the build did not
    evaluate: the page falls back to the first it did and draws that."""
    for query, bad in [("", HASHES[0]), ("", HASHES[2]), ("?gpu=NOPE&cfg=999x%20tp9&fw=trt&kv=fp2", HASHES[1]),
                       ("?gpu=%3Cimg%3E&input=abc", HASHES[3])]:
        tab.goto(f"{base}models/{SLUG_A}/deploy/{query}{bad}")
        page = tab.page
        if "input=abc" in query:          # a prompt that is no number: said, nothing drawn, no error
            page.wait_for_function("() => document.getElementById('batch-note').textContent.includes('whole numbers')")
        else:
            page.wait_for_function("() => document.getElementById('summary').hasAttribute('data-ready')"
                                   " && document.querySelectorAll('#ops tbody tr').length > 0")
            state = json.loads(page.get_attribute("#summary", "data-ready"))
            assert state["gpu"] == "B200" and state["fw"] == "sglang" and state["kv"] == "bf16", state
        assert not tab.errors, (query, bad, tab.errors)


@pytest.mark.parametrize("a, b", [(A, B), (SLUG_A, "qwen3.5-27b"), ("QWEN/QWEN3-8B", "Qwen/Qwen3.5-27B")])
def test_compare_resolves_a_model_id_or_name(tab, base, names, a, b):
    """``?a=`` and ``?b=`` may name a model by slug, id (``org/name``) or name part, in any case."""
    tab.goto(f"{base}compare/?a={a}&b={b}")
    tab.page.wait_for_selector("#compare table")
    heading = tab.page.inner_text("#compare h2")
    assert heading == f"{names[SLUG_A]} vs {names[SLUG_B]}", heading
    assert tab.page.locator("#compare-unknown").count() == 0
    assert "a=" + SLUG_A in tab.page.url and "b=" + SLUG_B in tab.page.url      # the link kept is the slugs'
    assert not tab.errors, tab.errors


def test_compare_says_when_a_link_names_no_model(tab, base, names):
    """An id the build lacks: said in the page, the default pair shown, no file fetched for it."""
    tab.goto(f"{base}compare/?a=Qwen/No-Such-Model&b={B}")
    tab.page.wait_for_selector("#compare table")
    note = tab.page.inner_text("#compare-unknown")
    assert "No model \u201cQwen/No-Such-Model\u201d in this build" in note, note
    assert tab.page.inner_text("#compare h2") == f"{names[SLUG_A]} vs {names[SLUG_B]}"
    assert not tab.errors, tab.errors          # HTTP 404s are errors here (tests/test_site_browser.py _open)
