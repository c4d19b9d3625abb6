"""Consistency: the playground's live prefill and decode SOL times vs the deploy planner run independently.

The build exports, per catalog pick, the change of ``prefill_sol_s``, ``decode_bytes`` and
``decode_sol_s`` as formula trees over the pick's dims and the context (engine.playground.playground_sol:
the planner's steps at the pre-filled binding), with the conditions under which the planner's
decisions stand. The expectation is ``archledger edit MODEL --swap ... --bind ... --context N --json``
run through the real command line at each binding (a whole plan of both sides: placement, fusion,
roofline per step), never the exported trees. This is a consistency test of two paths through the
same planner, so its name says so; the planner's own numbers are checked against outside figures
elsewhere (tests/test_deploy*.py).
"""
from __future__ import annotations

import pytest
import yaml

from engine.playground import whatif
from engine.language import formula_tree
from site_builder.sources import REPO
from tests.site_helpers import served, shared_small_site
from tests.test_site_playground_any import BASE, cells, choose, edit_json, playground

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid the small site it shares with test_site_playground_any.py and test_site_urls.py
#: (tests/site_helpers.shared_small_site: one build per process) twice.
pytestmark = pytest.mark.xdist_group("playground_site")

KEYS = ("prefill_sol_s", "decode_bytes", "decode_sol_s")


#: The picks the tests below read, per base model (one export per model).
PICKS = {"deepseek-ai/DeepSeek-V3": {("attention", "dsa_attention"), ("attention", "gqa_attention")},
         "meta-llama/Meta-Llama-3.1-8B": {("attention", "mla_attention"), ("attention", "mamba2_mixer")},
         BASE: {("ffn", "moe")}}
_DOCS: dict[str, dict] = {}


def exported(corpus, model: str, slot: str, component: str) -> tuple[dict, dict]:
    """The base's playground document restricted to this module's picks, and one pick."""
    if model not in _DOCS:
        ev, sites = whatif.evaluate_with_sites(corpus, corpus.models[model])
        _DOCS[model] = whatif.model_playground(ev, sites=sites, only=PICKS[model])
    doc = _DOCS[model]
    return doc, doc["picks"][slot][component]


def entry(p: dict, templates: list[str] | None = None) -> dict:
    """The pick's SOL entry for the swap in ``templates`` (default: all of its templates)."""
    return p["sol"][",".join(templates or p["templates"])]


def at(doc: dict, p: dict, binds: dict, context: int, templates: list[str] | None = None) -> tuple[bool, dict]:
    """Whether every validity condition holds, and old/new of each SOL number (formula_tree.evaluate)."""
    sol, trees = entry(p, templates), doc["sol_trees"]
    old_env = {**doc["env"], "seq": context, "ctx": context, "length": context}
    env = {**old_env, **binds}
    valid = all(formula_tree.evaluate(trees[i], env) for i, _ in sol["valid"])
    base = doc["sol_base"][sol["config"]]
    out = {}
    for key in KEYS:
        old = formula_tree.evaluate(base[key], old_env)
        added, removed = ([formula_tree.evaluate(trees[i], env) for i in side] for side in sol["change"][key])
        out[key] = (old, old + (sum(added) - sum(removed)))
    return valid, out


def edit(model: str, swap: str, binds: dict, context: int) -> dict:
    return edit_json([model, "--swap", swap, *[f"--bind={d}={v}" for d, v in binds.items()], "--context", str(context)])


@pytest.mark.parametrize("model, slot, component, route, settings", [
    # DeepSeek-V3 with V3.2's sparse attention (its indexer shares top-k through a layer stream,
    # so the variant is planned whole): the indexer's heads, head dim and top-k
    ("deepseek-ai/DeepSeek-V3", "attention", "dsa_attention", "whole",
     [({}, 32768), ({"n_index_heads": 32, "d_index_head": 64, "index_topk": 1024}, 8192)]),
    # DeepSeek-V3 (8 GPUs, tensor parallel: collectives, fusions) with GQA in place of MLA
    ("deepseek-ai/DeepSeek-V3", "attention", "gqa_attention", "sites", [({"n_kv_heads": 16, "d_head": 256}, 8192)]),
    # Llama-3.1-8B with MLA in place of GQA, and with Mamba-2 (a linear mixer with a fixed state)
    ("meta-llama/Meta-Llama-3.1-8B", "attention", "mla_attention", "sites",
     [({}, 32768), ({"kv_lora_rank": 256, "q_lora_rank": 768, "d_qk_rope": 32, "d_v_head": 96}, 65536)]),
    ("meta-llama/Meta-Llama-3.1-8B", "attention", "mamba2_mixer", "sites", [({"ssm_state": 64, "ssm_heads": 32}, 16384)]),
])
def test_consistency_exported_sol_trees_equal_archledger_edit(corpus, model, slot, component, route, settings):
    doc, p = exported(corpus, model, slot, component)
    assert "error" not in p and "error" not in entry(p), p
    assert entry(p)["route"] == route
    swap = f"layers[{','.join(p['templates'])}].{slot}={component}"
    for change, context in settings:
        binds = {**entry(p)["at"], **change}
        valid, got = at(doc, p, binds, context)
        assert valid, (change, context)
        want = edit(model, swap, binds, context)
        assert want["setting"]["config"] == entry(p)["config"]
        for key in KEYS:
            assert got[key][0] == pytest.approx(want["model"]["old"][key], rel=1e-9), (change, context, key)
            assert got[key][1] == pytest.approx(want["model"]["new"][key], rel=1e-9), (change, context, key)


def test_consistency_a_decision_outside_the_regime_is_flagged(corpus):
    """Qwen3-8B's MLP -> moe needs 4 GPUs at the pre-filled binding (256 experts, DeepSeek-V3's);
    with 1024 experts the weights need another parallel config, which ``edit`` then picks: the
    exported trees do not hold there, and the validity condition says so (naming the config)."""
    doc, p = exported(corpus, BASE, "ffn", "moe")
    binds = dict(entry(p)["at"])
    valid, got = at(doc, p, binds, 8192)
    want = edit(BASE, "layers[block].ffn=moe", binds, 8192)
    assert valid and want["setting"]["config"] == entry(p)["config"]
    assert got["decode_sol_s"][1] == pytest.approx(want["model"]["new"]["decode_sol_s"], rel=1e-9)
    binds["n_experts"] *= 4
    valid, got = at(doc, p, binds, 8192)
    want = edit(BASE, "layers[block].ffn=moe", binds, 8192)
    assert not valid and want["setting"]["config"] != entry(p)["config"]
    failed = [reason for i, reason in entry(p)["valid"]
              if not formula_tree.evaluate(doc["sol_trees"][i], {**doc["env"], **binds, "seq": 8192, "ctx": 8192, "length": 8192})]
    assert any("parallel config" in r for r in failed), failed


# -- in the browser ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def base(tmp_path_factory):
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid["gpu_counts"] = [1]
    # the same small site as tests/test_site_playground_any.py (built once per process)
    out = shared_small_site(tmp_path_factory, grid, [BASE, "Qwen/Qwen3.5-27B"])
    yield from served(out / "site")


@pytest.mark.parametrize("component, dims, settings", [
    ("mla_attention", ("d_qk_nope", "d_qk_rope", "d_v_head", "kv_lora_rank", "q_lora_rank"),
     [({}, 32768), ({"kv_lora_rank": 256, "q_lora_rank": 768}, 8192), ({"d_qk_rope": 32, "d_v_head": 96}, 131072)]),
    # the convolution's channels are 2 x key heads x d_k + value heads x d_v (16, 32 heads of 128)
    ("gated_deltanet", ("lin_dk", "lin_dv", "lin_k_heads", "lin_v_heads", "conv_kernel", "lin_conv_dim"),
     [({}, 32768), ({"lin_v_heads": 32, "lin_k_heads": 16, "lin_conv_dim": 2 * 16 * 128 + 32 * 128}, 4096)]),
])
def test_consistency_page_sol_equals_archledger_edit(browser, base, component, dims, settings):  # noqa: F811
    """Qwen3-8B's attention swapped live in the page at several dims and contexts: the SOL cells
    equal ``archledger edit --json`` at the same binding to 1e-9."""
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "attention", component, dims[0])
        swap = f"layers[block].attention={component}"
        for change, context in settings:
            page.fill("#pick-context", str(context))
            for dim, value in change.items():
                page.fill(f"#pick-dim-{dim}", str(value))
            binds = {d: int(page.input_value(f"#pick-dim-{d}")) for d in dims if page.query_selector(f"#pick-dim-{d}")}
            got = cells(page, KEYS)
            want = edit(BASE, swap, binds, context)
            for key in KEYS:
                assert got["old"][key] == pytest.approx(want["model"]["old"][key], rel=1e-9), (change, context, key)
                assert got["new"][key] == pytest.approx(want["model"]["new"][key], rel=1e-9), (change, context, key)


def test_the_page_shows_no_sol_number_outside_the_regime(browser, base):  # noqa: F811
    """1024 experts need another parallel config than the exported one: no SOL number, the reason."""
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "ffn", "moe", "n_experts")
        page.wait_for_selector('#pick-table td[data-side="new"][data-k="decode_sol_s"]')
        page.fill("#pick-dim-n_experts", "1024")
        page.wait_for_selector('#pick-table td[data-k="decode_sol_s"][data-why]')
        assert "parallel config" in page.get_attribute('#pick-table td[data-k="decode_sol_s"]', "data-why")
        assert page.query_selector('#pick-table td[data-side][data-k="decode_sol_s"]') is None
        assert page.query_selector('#pick-table td[data-side="new"][data-k="params"]') is not None   # the rest stays
