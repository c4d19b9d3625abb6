"""The playground's live catalog picks: any base model x slot x fitting component, not only the
shipped variants (corpus/variants/).

The page evaluates, in Chromium, the base's exported formula trees plus each pick's exported change
(engine.playground.whatif.pick) at the dims the reader enters. The expectation comes from another path:
``archledger edit MODEL --swap ... --bind ... --json`` run in-process through the real command line
(numeric walk and the deploy planner's comparison, no formula trees), and for the two numbers
``edit`` does not print (active params, decode FLOPs) the numeric walk of the same variant.
"""
from __future__ import annotations

import contextlib
import io
import json

import pytest
import yaml

from engine.playground import catalog, variant as playground_variant, whatif
from engine.playground.steps import KEYS as SOL_KEYS
from engine.language import formula_tree, quantities, symbols
from site_builder.sources import REPO
from tests.site_helpers import served, shared_small_site
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid the small site it shares with test_site_playground_sol.py and test_site_urls.py
#: (tests/site_helpers.shared_small_site: one build per process) twice.
pytestmark = pytest.mark.xdist_group("playground_site")

BASE = "Qwen/Qwen3-8B"
#: edit --json's whole-model keys that the page's table also shows
EDIT_KEYS = ("params", "weight_bytes", "kv_bytes_per_token", "kv_bytes_per_request", "prefill_flops")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid["gpu_counts"] = [1]
    # Qwen3.5-27B: its gated DeltaNet is drawn on the components pages, so the GQA -> GDN diff exists
    return shared_small_site(tmp_path_factory, grid, [BASE, "Qwen/Qwen3.5-27B"])   # also test_site_playground_sol's


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


def edit_json(args: list[str]) -> dict:
    """``archledger edit ARGS --json`` through the engine's own command line, in this process."""
    from engine.cli import main
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["edit", *args, "--json"]) == 0
    return json.loads(buffer.getvalue())


def walked(corpus, swap: str, binds: dict[str, int], context: int) -> dict[str, float]:
    """Active params and one decode token's FLOPs of the same variant by the numeric walk."""
    from engine.language import variants as variant_rules
    from engine.language.api import evaluate_spec
    parsed = [playground_variant.parse_bind(corpus, f"{d}={v}") for d, v in binds.items()]
    variant = variant_rules.resolve(corpus, "t", BASE, [playground_variant.parse_swap(swap)], parsed, playground_variant._CLI)
    a = evaluate_spec(corpus, variant.spec).numeric
    point = {symbols.dim("batch"): 1, symbols.dim("seq"): 1, symbols.dim("ctx"): context}
    return {"params_active": int(quantities.params_active(a)),
            "decode_flops": float(quantities.flops(a, "decode").subs(point))}


def choose(page, slot: str, component: str, dim: str, model: str = BASE) -> None:
    """Pick ``component`` for ``slot`` of ``model`` and wait for its form (``dim``'s input)."""
    page.select_option("#pick-model", model)
    page.select_option("#pick-slot", slot)
    page.select_option("#pick-component", component)
    page.wait_for_selector("#pick-dim-" + dim)


def cells(page, keys=catalog.RECOMPUTED) -> dict[str, dict[str, float]]:
    """The old and new values the pick's table shows for ``keys`` (once the last one is drawn)."""
    page.wait_for_selector(f'#pick-table td[data-side="new"][data-k="{list(keys)[-1]}"]')
    return {side: {k: float(page.get_attribute(f'#pick-table td[data-side="{side}"][data-k="{k}"]', "data-v"))
                   for k in keys} for side in ("old", "new")}


@contextlib.contextmanager
def playground(browser, base):  # noqa: F811
    """A tab on the playground page; on leaving, the page raised no error and is closed."""
    tab = _open(browser)
    tab.goto(base + "playground/")
    yield tab
    assert not tab.errors, tab.errors
    tab.context.close()


def test_a_catalog_pick_recomputes_as_archledger_edit(browser, base, corpus):  # noqa: F811
    """Qwen3-8B with MLA in place of its GQA (no corpus variant does this) at three dim settings and
    contexts: every cell equals ``archledger edit`` (and the numeric walk) within 1e-9."""
    assert not any(v.base == BASE for v in corpus.variants.values())
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "attention", "mla_attention", "kv_lora_rank")
        swap = "layers[block].attention=mla_attention"
        assert swap in page.inner_text("#pick-status")
        settings = [({}, 32768),      # the pre-filled values (DeepSeek-V3's)
                    ({"kv_lora_rank": 256, "q_lora_rank": 768}, 8192),
                    ({"kv_lora_rank": 384, "q_lora_rank": 1024, "d_qk_nope": 64, "d_qk_rope": 32, "d_v_head": 96}, 131072)]
        for dims, context in settings:
            page.fill("#pick-context", str(context))
            for dim, value in dims.items():
                page.fill(f"#pick-dim-{dim}", str(value))
            binds = {d: int(page.input_value(f"#pick-dim-{d}"))
                     for d in ("d_qk_nope", "d_qk_rope", "d_v_head", "kv_lora_rank", "q_lora_rank")}
            got = cells(page)
            want = edit_json([BASE, "--swap", swap, *[f"--bind={d}={v}" for d, v in binds.items()],
                              "--context", str(context)])
            for key in EDIT_KEYS:
                assert got["old"][key] == pytest.approx(want["model"]["old"][key], rel=1e-9), (dims, context, key)
                assert got["new"][key] == pytest.approx(want["model"]["new"][key], rel=1e-9), (dims, context, key)
            for key, value in walked(corpus, swap, binds, context).items():
                assert got["new"][key] == pytest.approx(value, rel=1e-9), (dims, context, key)
            # by hand: MLA caches kv_lora_rank + d_qk_rope per token and layer (36 layers, BF16)
            assert got["new"]["kv_bytes_per_token"] == 36 * (binds["kv_lora_rank"] + binds["d_qk_rope"]) * 2


def test_ffn_to_moe_and_the_prefill_names_its_source(browser, base, corpus):  # noqa: F811
    """Qwen3-8B's dense MLP -> moe: its three new dims are pre-filled from a corpus model using moe,
    named beside each input, and the numbers equal ``archledger edit`` at those values."""
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "ffn", "moe", "n_experts")
        used = catalog.component_dims(corpus)["moe"]
        names = {m.model_id: m.display_name for m in corpus.models.values()}
        binds = {}
        for dim in ("d_ff_expert", "n_experts", "top_k"):
            first = used[dim][0]
            assert page.input_value(f"#pick-dim-{dim}") == str(first["value"])
            assert page.inner_text(f"#pick-src-{dim}") == f"source: {names[first['model']]}"
            binds[dim] = first["value"]
        page.fill("#pick-context", "4096")
        got = cells(page)
        want = edit_json([BASE, "--swap", "layers[block].ffn=moe", *[f"--bind={d}={v}" for d, v in binds.items()],
                          "--context", "4096"])
        assert want["setting"]["config"].endswith("ep1") or "ep" not in want["setting"]["config"]   # dense -> MoE: ep 1
        for key in EDIT_KEYS:
            assert got["new"][key] == pytest.approx(want["model"]["new"][key], rel=1e-9), key


def test_a_missing_binding_is_reported_not_computed(browser, base):  # noqa: F811
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "attention", "mla_attention", "kv_lora_rank")
        page.fill("#pick-dim-kv_lora_rank", "")
        page.wait_for_selector("#pick-status[data-missing]")
        assert page.get_attribute("#pick-status", "data-missing") == "kv_lora_rank"
        assert "Unbound: kv_lora_rank" in page.inner_text("#pick-status")
        assert page.query_selector_all("#pick-table td") == []
        page.fill("#pick-dim-kv_lora_rank", "512")
        # old and new of each recomputed number and of the SOL times (tests/test_site_playground_sol.py)
        assert len(page.query_selector_all("#pick-table td[data-k]")) == 2 * (len(catalog.RECOMPUTED) + len(SOL_KEYS))
        # no built model instantiates MLA: drawn from the pick's walk (tests/test_site_playground_diff.py)
        page.wait_for_selector("#pick-graph .graph-wrap svg")


def test_the_changed_block_is_drawn_old_beside_new(browser, base):  # noqa: F811
    """GQA -> gated DeltaNet: the diff of the two blocks as the components pages draw them."""
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "attention", "gated_deltanet", "lin_dk")
        page.wait_for_selector("#pick-graph .graph-wrap svg")
        assert "gqa_attention (old) vs gated_deltanet (new)" in page.inner_text("#pick-graph")
        labels = page.inner_text("#pick-graph .graph-wrap")
        assert "q_proj" in labels and "conv" in labels          # a node of each side


def test_picks_are_carried_with_their_model(out):
    """results/playground/<model>.json is one of the model's files in the manifest (carried when
    its inputs are unchanged, like its partitions), and the site serves it gzip-compressed."""
    manifest = json.loads((out / "results" / "manifest.json").read_text())
    assert "playground/Qwen--Qwen3-8B.json" in manifest["models"][BASE]["files"]
    doc = json.loads((out / "results" / "playground" / "Qwen--Qwen3-8B.json").read_text())
    assert set(doc["picks"]) == {"attention", "ffn"} and "gqa_attention" not in doc["picks"]["attention"]
    assert (out / "site" / "data" / "playground" / "Qwen--Qwen3-8B.json.gz").is_file()


def test_some_templates_only(browser, base, corpus):  # noqa: F811
    """Qwen3.5-27B's attention -> MLA in its full-attention layers only (the DeltaNet layers
    unticked): the numbers equal ``archledger edit --swap 'layers[full,mtp].attention=...'``."""
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "attention", "mla_attention", "kv_lora_rank", "Qwen/Qwen3.5-27B")
        page.uncheck("#pick-tpl-linear")
        page.fill("#pick-context", "16384")
        got = cells(page)
        binds = {d: int(page.input_value(f"#pick-dim-{d}"))
                 for d in ("d_qk_nope", "d_qk_rope", "d_v_head", "kv_lora_rank", "q_lora_rank")}
        swap = "layers[full,mtp].attention=mla_attention"
        assert swap in page.inner_text("#pick-status")
        want = edit_json(["Qwen/Qwen3.5-27B", "--swap", swap, *[f"--bind={d}={v}" for d, v in binds.items()],
                          "--context", "16384"])
        for key in EDIT_KEYS:
            assert got["new"][key] == pytest.approx(want["model"]["new"][key], rel=1e-9), key
        # by hand: only the 16 full-attention layers cache (the 48 DeltaNet layers keep a fixed state)
        q35 = json.loads((REPO / "corpus" / "snapshots" / "Qwen--Qwen3.5-27B.config.json").read_text())["text_config"]
        full = q35["layer_types"].count("full_attention")
        assert got["new"]["kv_bytes_per_token"] == full * (binds["kv_lora_rank"] + binds["d_qk_rope"]) * 2


@pytest.mark.parametrize("model_id", [BASE, "Qwen/Qwen3.5-27B"])
def test_site_walks_agree_with_the_whole_walk(corpus, model_id):
    """Every pick of the model: the page's arithmetic (whatif.pick_change: the new filler walked at
    each of the slot's sites in place of the old one's rows) equals the change the variant's whole
    symbolic walk gives (whatif.pick without the shared sites), at two dim settings and contexts."""
    ev, sites = whatif.evaluate_with_sites(corpus, corpus.models[model_id])
    doc = whatif.model_playground(ev, sites=sites)
    checked = 0
    for slot, picks in doc["picks"].items():
        for component, p in picks.items():
            whole = whatif.pick(ev, slot, component)
            assert ("error" in p) == ("error" in whole), (slot, component)
            if "error" in p:
                continue
            # DSA publishes its top-k as a layer stream: only the whole walk places it
            assert ("sites" in p) == (component != "dsa_attention"), (slot, component)
            for value, context in ((16, 1024), (96, 200_000)):
                env = {**doc["env"], "seq": context, "ctx": context, "length": context,
                       **{d: value + i for i, d in enumerate(p["needs"])}}
                got = whatif.pick_change(doc, p, env, slot)
                want = {k: formula_tree.evaluate(t, env) for k, t in whole["delta"].items()}
                for key in catalog.RECOMPUTED:
                    assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-6), (slot, component, key)
            checked += 1
    assert checked >= 9
