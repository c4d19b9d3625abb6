"""The playground's graph diff for any fitting component, not only the token mixers corpus models use.

The build stores each live pick's new block (engine.playground.whatif.block_graph: the new filler's rows
at the slot's site, from the pick's walk); the site draws every (old, new) pair the components pages
do not draw once for the corpus (site_builder/playground_page.py ``_playground_diffs``, data/playground/
diffs.json.gz). The expectation is the component's own YAML: every node it declares is drawn, each
reading the nodes its ``in`` names (``x``: the block's input, from outside the site).
"""
from __future__ import annotations

import pytest
import yaml

from engine.playground import whatif
from site_builder.sources import REPO
from tests.test_site_playground_any import BASE, base, choose, out, playground  # noqa: F401  (the shared small site)

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid the small site it shares with the other playground tests
#: (tests/site_helpers.shared_small_site: one build per process) twice.
pytestmark = pytest.mark.xdist_group("playground_site")

#: No corpus model uses KDA: before the diffs file the page said "Not drawn".
NEW = "kda_attention"


def _declared() -> dict[str, list[str]]:
    """The component's graph as its YAML declares it at its default options: node name -> the names
    it reads. A node whose ``when:`` (an option, or ``not`` an option) is false by default is not in
    the block; an input ``a|b`` reads whichever of the two is."""
    spec = yaml.safe_load((REPO / "corpus" / "components" / "library" / f"{NEW}.yaml").read_text())
    options = spec.get("options") or {}

    def live(node: dict) -> bool:
        when = node.get("when")
        if when is None:
            return True
        negated = when.startswith("not ")
        return bool(options[when.removeprefix("not ")]) != negated

    nodes = {name: node for name, node in spec["graph"].items() if live(node)}

    def read(ref: str) -> str:
        found = [a for a in ref.split("|") if a in nodes or a == "x"]
        assert len(found) == 1, (ref, found)
        return found[0]

    return {name: [read(r) for r in ([node["in"]] if isinstance(node["in"], str) else node["in"])]
            for name, node in nodes.items()}


def test_the_pick_stores_the_new_block_as_the_component_declares_it(corpus):
    ev, sites = whatif.evaluate_with_sites(corpus, corpus.models[BASE])
    doc = whatif.model_playground(ev, sites=sites, only={("attention", NEW)})
    p = doc["picks"]["attention"][NEW]
    assert p["graphs"], "a resolving pick carries its block"
    block = doc["graphs"][p["graphs"][0]]
    site = block["site"]
    ops = {o["name"]: o for o in block["ops"] if "prefill" in o["phases"]}
    declared = _declared()
    assert set(ops) == set(declared)
    for name, reads in declared.items():
        for src, uid in zip(reads, ops[name]["inputs"]):
            if src == "x":
                assert not uid.startswith(site + "/"), f"{name} reads the block's input"
            else:
                assert uid == f"{site}/{src}", f"{name} reads {src}"


def test_choosing_a_component_no_corpus_model_uses_shows_its_diff(browser, base):  # noqa: F811
    with playground(browser, base) as tab:
        page = tab.page
        choose(page, "attention", NEW, "kda_heads")
        page.wait_for_selector("#pick-graph .graph-wrap svg")
        heading = page.inner_text("#pick-graph h3")
        assert "gqa_attention (old)" in heading and NEW in heading
        text = page.inner_text("#pick-graph .graph-wrap")
        labels = set(page.eval_on_selector_all("#pick-graph svg text.node-label", "els => els.map(e => e.textContent)"))
        missing = [n for n in _declared() if n not in labels]
        assert not missing, f"nodes not drawn: {missing} ({text[:200]})"
        assert page.query_selector("#pick-graph svg .status-only_b") is not None    # KDA's own nodes, marked new
        assert page.query_selector("#pick-graph svg .status-only_a") is not None    # GQA's, marked removed
        assert not tab.blocked


def test_consistency_drawings_reused_from_the_previous_site_are_the_ones_a_fresh_render_draws(out):  # noqa: F811
    """A render reuses the previous site's drawings by the digest of what they draw: with the
    published site's drawings as that cache, the diffs are the same bytes as drawn from scratch,
    and a drawing filed under a digest is what the render takes (so the reuse is real)."""
    import gzip
    import json

    from site_builder.data import Results
    from site_builder.playground_page import _PLAYGROUND_DIFFS, _drawn_before, _playground_diffs
    site = out / "site"
    published = json.loads(gzip.decompress((site / _PLAYGROUND_DIFFS).read_bytes()))
    assert published and all(len(e["key"]) == 64 for e in published.values())
    drawn = _drawn_before(site)
    assert set(drawn) == {e["key"] for e in published.values()}
    results = Results.load(out / "results")
    uses = json.loads((site / "playground" / "index.html").read_text().split('id="page-data"', 1)[1]
                      .split(">", 1)[1].split("</script>", 1)[0])["drawn"]
    fresh = _playground_diffs(results, {u: None for u in uses})
    assert fresh == published                            # drawn from scratch: what the site holds
    planted = {k: "<svg>planted</svg>" for k in drawn}
    assert all(e["svg"] == "<svg>planted</svg>" for e in _playground_diffs(results, {u: None for u in uses},
                                                                            planted).values())
    assert _drawn_before(out / "no-such-site") == {}
