"""The playground page (/playground/) and what-if variants in the results.

The page recomputes each variant's numbers in Chromium from the exported formula trees as the reader
changes dims; the expectation is the engine's own numeric walk of the variant re-resolved with those
dims (a different path: numbers all the way, no formula trees). Variants live in variants.parquet
(variant_of, label what-if, never verified) and never in the gallery.
"""
from __future__ import annotations

import json
from dataclasses import replace

import polars as pl
import pytest
import yaml

from engine.api import evaluate_spec
from engine.playground import catalog, whatif
from engine.language import formula_tree, kv, quantities, symbols
from engine.language import variants as variant_rules
from engine.language.corpus import load_corpus
from site_builder.sources import REPO
from tests.site_helpers import build_small_site, served
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site twice.
pytestmark = pytest.mark.xdist_group("site_playground")

GDN = "Qwen3-32B-GDN"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid["gpu_counts"] = [1]
    return build_small_site(tmp_path_factory.mktemp("playground"), grid, ["Qwen/Qwen3-32B"])


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


def engine_numbers(corpus, name: str, dims: dict[str, int], context: int) -> dict[str, float]:
    """The variant re-resolved with ``dims`` and walked numerically (no formula trees)."""
    v = corpus.variants[name]
    binds = [replace(b, value=dims.get(b.dim, b.value)) for b in v.binds]
    spec = variant_rules.resolve(corpus, name, v.base, list(v.swaps), binds, v.where).spec
    ev = evaluate_spec(corpus, spec)
    a = ev.numeric
    s = {symbols.dim("batch"): 1, symbols.dim("seq"): context, symbols.dim("ctx"): context}
    return {
        "params": int(quantities.params_total(a)), "params_active": int(quantities.params_active(a)),
        "weight_bytes": int(sum(t.total_bytes for t in ev.tensors() if t.stack == "main")),
        "kv_bytes_per_token": int(kv.growing_bytes_per_token(a)),
        "kv_bytes_per_request": int(kv.bytes_per_request(a, context)),
        "prefill_flops": float(quantities.flops(a, "prefill").subs(s)),
        "decode_flops": float(quantities.flops(a, "decode").subs({**s, symbols.dim("seq"): 1})),
    }


def test_variants_parquet_and_never_in_the_gallery(out):
    table = pl.read_parquet(out / "results" / "variants.parquet")
    assert table["model_id"].to_list() == [f"what-if/{GDN}"]
    row = table.row(0, named=True)
    assert row["variant_of"] == "Qwen/Qwen3-32B" and row["label"] == "what-if" and row["verified"] is False
    assert row["attention_label"] == "gdn + gqa"
    models = pl.read_parquet(out / "results" / "models.parquet")
    assert models["model_id"].to_list() == ["Qwen/Qwen3-32B"]
    gallery = (out / "site" / "index.html").read_text()
    assert "what-if" not in gallery and GDN not in gallery
    page = (out / "site" / "playground" / "index.html").read_text()
    assert "[what-if]" in page and "layers[block_gated_deltanet]" in page
    assert (out / "site" / "downloads" / "variants.parquet").is_file()


def test_page_recomputes_as_python_does(browser, base, corpus):  # noqa: F811
    tab = _open(browser)
    tab.goto(base + f"playground/?v={GDN}")
    page = tab.page

    def numbers():
        return {k: float(page.get_attribute(f'#pg-table td[data-side="new"][data-k="{k}"]', "data-v"))
                for k in catalog.RECOMPUTED}

    settings = [({}, 32768), ({"lin_k_heads": 8, "lin_v_heads": 32}, 65536), ({"lin_k_heads": 8, "lin_v_heads": 32, "lin_dv": 64, "conv_kernel": 3}, 4096)]   # inputs keep their values
    for dims, context in settings:
        page.fill("#pg-context", str(context))
        for dim, value in dims.items():
            page.fill(f"#pg-dim-{dim}", str(value))
        got, want = numbers(), engine_numbers(corpus, GDN, dims, context)
        for key in catalog.RECOMPUTED:
            assert got[key] == pytest.approx(want[key], rel=1e-12), (dims, context, key)
        # the derived binding follows its expression: 2 x key heads x d_k + value heads x d_v
        h, v = dims.get("lin_k_heads", 16), dims.get("lin_v_heads", 48)
        assert int(page.input_value("#pg-dim-lin_conv_dim")) == 2 * h * 128 + v * dims.get("lin_dv", 128)
    old = float(page.get_attribute('#pg-table td[data-side="old"][data-k="kv_bytes_per_request"]', "data-v"))
    q3 = json.loads((REPO / "corpus" / "snapshots" / "Qwen--Qwen3-32B.config.json").read_text())
    assert old == 4096 * q3["num_hidden_layers"] * 2 * q3["num_key_value_heads"] * q3["head_dim"] * 2
    # the slot picker offers the components fitting the attention contract, never an FFN
    page.select_option("#pick-model", "Qwen/Qwen3-32B")
    offered = page.eval_on_selector_all("#pick-component option", "els => els.map(e => e.value)")
    assert {"mla_attention", "dsa_attention", "gated_deltanet"} <= set(offered) and "swiglu_mlp" not in offered
    page.select_option("#pick-component", "mla_attention")
    page.wait_for_selector("#pick-dim-kv_lora_rank")     # live picks: tests/test_site_playground_any.py
    assert "--bind kv_lora_rank=512" in page.inner_text("#pick-status")
    assert not tab.errors, tab.errors
    tab.context.close()


def test_an_empty_or_zero_dim_is_said_not_recomputed(browser, base):  # noqa: F811
    """Issue 41: an empty field or 0 recomputed silently as 0. A free dim or the context that is not a
    positive whole number empties the table and names the field (aria-invalid on it); a good value
    brings the numbers back."""
    tab = _open(browser)
    tab.goto(base + f"playground/?v={GDN}")
    page = tab.page
    page.wait_for_selector("#pg-table tbody tr")
    rows = page.locator("#pg-table tbody tr").count()
    for text in ("", "0", "2.5", "-8"):
        page.fill("#pg-dim-lin_k_heads", text)
        assert page.locator("#pg-table tbody tr").count() == 0, text
        assert page.get_attribute("#pg-status", "data-invalid") == "lin_k_heads", text
        assert "lin_k_heads" in page.inner_text("#pg-status")
        assert page.get_attribute("#pg-dim-lin_k_heads", "aria-invalid") == "true"
    page.fill("#pg-dim-lin_k_heads", "16")
    page.fill("#pg-context", "")
    assert page.get_attribute("#pg-status", "data-invalid") == "context"
    page.fill("#pg-context", "4096")
    assert page.locator("#pg-table tbody tr").count() == rows
    assert page.get_attribute("#pg-status", "data-invalid") is None and page.inner_text("#pg-status") == ""
    assert page.get_attribute("#pg-dim-lin_k_heads", "aria-invalid") is None
    assert not tab.errors, tab.errors
    tab.context.close()


def test_dsa_formula_trees_equal_the_walk(corpus):
    """V3 + DSA's exported trees at other indexer sizes and lengths (the page's inputs) equal the walk."""
    v = corpus.variants["DeepSeek-V3-DSA"]
    ev = evaluate_spec(corpus, v.spec)
    trees = {k: formula_tree.to_tree(f) for k, f in catalog.formulas(ev).items()}
    for dims, context in [({"n_index_heads": 32, "index_topk": 1024}, 131072), ({"d_index_head": 64}, 2048)]:
        env = {**catalog.environment(ev, context), **dims}
        want = engine_numbers(corpus, "DeepSeek-V3-DSA", dims, context)
        for key, tree in trees.items():
            assert formula_tree.evaluate(tree, env) == pytest.approx(want[key], rel=1e-12), (dims, key)


def test_contract_compares_the_gated_and_k_eq_v_mixers(out):
    """Every attention mixer of the library is under the contract: Qwen3.5's gated GQA (Qwen3.5-397B's
    32 query and 2 KV heads of 256) and Gemma 4's K = V GQA (gemma-4-26B's global layers: 16 query and
    2 KV heads of 512) by hand at the contract's hidden 7168 (BF16 KV: keys and values cached)."""
    h = 7168
    rows = {v["id"]: v for v in json.loads((out / "results" / "contracts.json").read_text())["attention"]["variants"]}
    q, kvh, d = 32, 2, 256
    gated = 2 * q * d * h + 2 * kvh * d * h + q * d * h + 2 * d        # q (+ gate), k, v, o, q/k norms
    assert rows["gated"]["params"]["value"] == gated
    assert rows["gated"]["kv_bytes_per_token"]["value"] == 2 * kvh * d * 2
    q, kvh, d = 16, 2, 512
    k_eq_v = q * d * h + kvh * d * h + q * d * h + 2 * d                # no v_proj; v_norm has no scale
    assert rows["gqa_kv"]["params"]["value"] == k_eq_v
    assert rows["gqa_kv"]["kv_bytes_per_token"]["value"] == 2 * kvh * d * 2
    library = {n for n, c in load_corpus().components.items() if c.role == "attention"}
    assert library <= {v["component"] for v in rows.values()}


#: the hash of the inputs every model shares (grid, GPU files, engine): any fixed value, the same each call
INPUTS = "0" * 64


def test_variants_are_carried_when_unchanged_and_rebuilt_when_damaged(tmp_path, corpus, monkeypatch):
    from engine.batch import corpus_tables, publish
    gpus = REPO / "gpus"
    final, again, third = tmp_path / "final", tmp_path / "again", tmp_path / "third"
    for folder in (final, again, third):
        folder.mkdir()
    corpus_tables.write_variants(corpus, final, final, INPUTS, gpus, ["Qwen/Qwen3-32B"])
    names = ("variants.json", "variants.parquet")
    (final / "manifest.json").write_text(json.dumps({"files": {n: publish.file_digest(final / n) for n in names}}))

    def recompute(*args, **kwargs):
        raise AssertionError("recomputed although nothing changed")
    with monkeypatch.context() as m:
        m.setattr(whatif, "playground_document", recompute)
        corpus_tables.write_variants(corpus, final, again, INPUTS, gpus, ["Qwen/Qwen3-32B"])
    assert all((again / n).read_bytes() == (final / n).read_bytes() for n in names)
    (final / "variants.parquet").write_bytes(b"garbage")
    corpus_tables.write_variants(corpus, final, third, INPUTS, gpus, ["Qwen/Qwen3-32B"])
    assert pl.read_parquet(third / "variants.parquet")["variant_of"].to_list() == ["Qwen/Qwen3-32B"]
