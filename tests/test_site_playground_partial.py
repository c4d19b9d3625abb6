"""Consistency: the playground's live SOL times when the reader swaps some of a pick's layer templates only.

The page lets the reader untick layer templates of a pick (``tickable``: no layer stream touches
the slot); the build exports the SOL change for every non-empty subset of them
(engine.playground.playground_sol: each subset on its own parallel config and with its own validity
conditions). The expectation is ``archledger edit MODEL --swap 'layers[SUBSET].SLOT=COMPONENT'
--bind ... --context N --json`` run through the real command line (a whole plan of both sides),
never the exported trees. Qwen3.5-27B's slots reach three templates (48 DeltaNet layers ``linear``,
16 gated-attention layers ``full``, the MTP layer ``mtp``), and its picks cover both ways a subset
is exported: on the full swap's config (MLA in place of attention: 1 GPU for every subset) and on a
config of its own (``ffn`` -> 256-expert MoE: 8 GPUs for the whole swap, 4 for the full-attention
layers only, which the subset's own weights decide).
"""
from __future__ import annotations

import pytest

from engine.playground import catalog, sites as playground_sites, whatif
from engine.language import formula_tree
from tests.test_site_playground_any import cells, choose, playground
from tests.test_site_playground_sol import KEYS, at, base, edit, entry  # noqa: F401  (base: the shared small site)

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid the small site it shares with the other playground tests
#: (tests/site_helpers.shared_small_site: one build per process) twice.
pytestmark = pytest.mark.xdist_group("playground_site")

MODEL = "Qwen/Qwen3.5-27B"
PICKS = {("attention", "mla_attention"), ("ffn", "moe")}
_DOC: list = []


def exported(corpus, slot: str, component: str) -> tuple[dict, dict]:
    """Qwen3.5-27B's playground document restricted to this module's picks, and one pick."""
    if not _DOC:
        ev, sites = whatif.evaluate_with_sites(corpus, corpus.models[MODEL])
        _DOC.append(whatif.model_playground(ev, sites=sites, only=PICKS))
    return _DOC[0], _DOC[0]["picks"][slot][component]


def test_every_subset_of_the_templates_is_exported(corpus):
    """Each tickable pick carries one SOL entry per non-empty subset of its templates, keyed as the
    page keys the ticked boxes (in the pick's order, comma-joined)."""
    for slot, component in sorted(PICKS):
        _, p = exported(corpus, slot, component)
        assert p["tickable"] and p["templates"] == ["linear", "full", "mtp"], p["templates"]
        assert sorted(p["sol"]) == sorted(["linear,full,mtp", "linear,full", "linear,mtp", "full,mtp",
                                           "linear", "full", "mtp"])


@pytest.mark.parametrize("slot, component, templates, settings", [
    # the gated-attention layers (and the MTP layer) only: the DeltaNet layers keep theirs
    ("attention", "mla_attention", ["full", "mtp"],
     [({}, 32768), ({"kv_lora_rank": 256, "q_lora_rank": 768, "d_qk_rope": 32}, 8192)]),
    ("attention", "mla_attention", ["linear"], [({"kv_lora_rank": 384, "d_v_head": 96}, 65536)]),
    # the full swap needs 8 GPUs, and so does this subset (the 48 DeltaNet layers' experts)
    ("ffn", "moe", ["linear", "mtp"], [({}, 16384)]),
    # 16 layers of experts fit on 4 GPUs: the subset's own config, not the whole swap's
    ("ffn", "moe", ["full"], [({}, 32768), ({"d_ff_expert": 2048, "top_k": 4}, 4096)]),
])
def test_consistency_subset_sol_equals_archledger_edit(corpus, slot, component, templates, settings):
    doc, p = exported(corpus, slot, component)
    sol = entry(p, templates)
    assert "error" not in sol, sol
    swap = f"layers[{','.join(templates)}].{slot}={component}"
    for change, context in settings:
        binds = {**sol["at"], **change}
        valid, got = at(doc, p, binds, context, templates)
        assert valid, (change, context)
        want = edit(MODEL, swap, binds, context)
        assert want["setting"]["config"] == sol["config"], (change, context)
        for key in KEYS:
            assert got[key][0] == pytest.approx(want["model"]["old"][key], rel=1e-9), (change, context, key)
            assert got[key][1] == pytest.approx(want["model"]["new"][key], rel=1e-9), (change, context, key)


def test_a_subset_has_its_own_parallel_config(corpus):
    """The subset's config follows its own weights. By hand from the published config: each layer's
    dense MLP (3 x 5120 x 17408 parameters) becomes 256 experts of 3 x 5120 x 1536, BF16; the base
    holds about 27e9 parameters (its name). With the 16 full-attention layers swapped the weights
    x 1.25 need more than 2 H200s' 90 % of the 143,771 MiB nvidia-smi reports and fit in 4 (tp4);
    with all 64 layers (and the
    MTP layer) they need more than 4 (tp8: edit's config for the whole swap)."""
    _, p = exported(corpus, "ffn", "moe")
    import json
    from site_builder.sources import REPO
    cfg = json.loads((REPO / "corpus" / "snapshots" / "Qwen--Qwen3.5-27B.config.json").read_text())["text_config"]
    d, ff, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    full = cfg["layer_types"].count("full_attention")
    assert entry(p, ["full"])["at"] == {"d_ff_expert": 1536, "n_experts": 256, "top_k": 8}
    per_layer = (256 * 3 * d * 1536 - 3 * d * ff) * 2
    gpu = 0.9 * 143771 * 2**20
    need_full = (27e9 * 2 + full * per_layer) * 1.25
    need_all = (27e9 * 2 + (layers + 1) * per_layer) * 1.25
    assert 2 * gpu < need_full < 4 * gpu and 4 * gpu < need_all
    assert entry(p, ["full"])["config"] == "tp4" and entry(p)["config"] == "tp8"


def test_consistency_every_subset_equals_the_subset_planned_alone(corpus):
    """Every subset of both picks as exported (most taken from the whole swap's plan) equals the same
    subset planned by itself (its own splice, config and plan): the same config and, at the
    pre-filled binding and at other dims and contexts, the same three numbers; the exported
    conditions include the alone plan's (the whole swap's placement decisions may add some)."""
    import json
    from engine.playground import playground_sol
    from engine.deploy.hardware import find_gpu
    ev, sites = whatif.evaluate_with_sites(corpus, corpus.models[MODEL])
    doc = whatif.model_playground(ev, sites=sites, only=PICKS)
    # one Bases for both (the planner's weight cache holds rows by id while their analyses live)
    shared = whatif.Picks(ev, sites)
    gpu = find_gpu(whatif._default_gpus(), catalog.PLAYGROUND["gpu"])
    bases = playground_sol.Bases(ev, gpu, whatif._tables(corpus.root / "fusion").get(catalog.PLAYGROUND["framework"]),
                                 doc["context"], catalog.PLAYGROUND["framework"], catalog.PLAYGROUND["kv_dtype"])
    trees = doc["sol_trees"]
    checked = 0
    for slot, component in sorted(PICKS):
        p = doc["picks"][slot][component]
        whatif.pick(ev, slot, component, catalog.PLAYGROUND["kv_dtype"], shared)
        needs, every_site, walked = shared.walks[(slot, component)]
        rows = {u: (*playground_sites.site_walk(*walked[u], u, s), playground_sites.site_bytes(ev, *walked[u], s))
                for u, s in every_site.items()}
        for key, got in p["sol"].items():
            chosen = tuple(key.split(","))
            mine = {u: s for u, s in every_site.items() if s[4] in chosen}
            alone = playground_sol.site_sol(bases, needs, mine, rows, got["at"], [chosen])[chosen]
            assert got["config"] == alone["config"], key
            assert {json.dumps(t) for t, _ in alone["valid"]} <= {json.dumps(trees[i]) for i, _ in got["valid"]}, key
            for scale in (1, 2):
                env = {**doc["env"], "seq": 4096 * scale, "ctx": 4096 * scale, "length": 4096 * scale,
                       **{d: v * scale for d, v in got["at"].items()}}
                for k in KEYS:
                    (a, r), (a2, r2) = got["change"][k], alone["change"][k]
                    value = sum(formula_tree.evaluate(trees[i], env) for i in a) - sum(formula_tree.evaluate(trees[i], env) for i in r)
                    want = sum(formula_tree.evaluate(t, env) for t in a2) - sum(formula_tree.evaluate(t, env) for t in r2)
                    assert value == pytest.approx(want, rel=1e-9, abs=1e-15), (slot, component, key, k, scale)
            checked += 1
    assert checked == 14


# -- in the browser ---------------------------------------------------------------------------------

@pytest.mark.parametrize("slot, component, dim, unticked, settings", [
    ("attention", "mla_attention", "kv_lora_rank", ["linear"], [({}, 16384), ({"kv_lora_rank": 256}, 8192)]),
    ("ffn", "moe", "n_experts", ["linear", "mtp"], [({}, 32768)]),
])
def test_page_sol_for_ticked_templates_equals_archledger_edit(browser, base, slot, component, dim, unticked,  # noqa: F811
                                                             settings):
    """Qwen3.5-27B with some templates unticked: the SOL cells show numbers, equal to ``archledger
    edit --swap 'layers[TICKED]...' --json`` at the same binding to 1e-9 (the config in the row's
    label is the subset's)."""
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, slot, component, dim, MODEL)
        for template in unticked:
            page.uncheck(f"#pick-tpl-{template}")
        ticked = [t for t in ("linear", "full", "mtp") if t not in unticked]
        swap = f"layers[{','.join(ticked)}].{slot}={component}"
        for change, context in settings:
            page.fill("#pick-context", str(context))
            for name, value in change.items():
                page.fill(f"#pick-dim-{name}", str(value))
            assert swap in page.inner_text("#pick-status")
            needs = [el.get_attribute("id").removeprefix("pick-dim-") for el in page.query_selector_all("[id^=pick-dim-]")]
            binds = {d: int(page.input_value(f"#pick-dim-{d}")) for d in needs}
            got = cells(page, KEYS)
            assert page.query_selector("#pick-table td[data-why]") is None
            want = edit(MODEL, swap, binds, context)
            assert f", {want['setting']['config']})" in page.inner_text("#pick-table")
            for key in KEYS:
                assert got["old"][key] == pytest.approx(want["model"]["old"][key], rel=1e-9), (change, context, key)
                assert got["new"][key] == pytest.approx(want["model"]["new"][key], rel=1e-9), (change, context, key)
