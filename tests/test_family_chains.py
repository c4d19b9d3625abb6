"""Family chains (engine/batch/families.py): which models a worker runs together, and (consistency, the
engine with itself) that a family evaluated one model after the other in one process, sharing what
the process keeps between models, writes the files each model writes evaluated alone in a fresh
process.

Planted bugs the consistency test catches: a cross-model memo keyed by an expression or a spec
shape alone that hands the second model the first one's structure, placement or compiled program
(Qwen3-0.6B, 1.7B and 8B share every symbolic expression and differ in every dim value), so its
rows carry the first model's numbers; a memo keyed by ``id`` of a freed object (a model's) that
answers for the next model's object at the same address.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.batch import model_build
from engine.batch.families import chains
from engine.language.corpus import load_corpus
from tests.conftest import REPO
from tests.file_helpers import files_of

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
FAMILY = ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-8B"]      # one spec shape, three sets of dims


def test_chains_group_a_family_in_the_builds_order_longest_chain_first():
    todo = ["a1", "b1", "a2", "c1", "b2", "d1"]
    family = {"a1": "A", "a2": "A", "b1": "B", "b2": "B", "c1": "C", "d1": "D"}.__getitem__
    # without previous timings (cost 0) the chains keep the order of their first model in todo
    assert chains(todo, family, lambda m: 0.0) == [["a1", "a2"], ["b1", "b2"], ["c1"], ["d1"]]
    # with them, the longest chain first: B = 3 + 4 = 7 > C = 6 > A = 1 + 2 = 3 > D = 0
    cost = {"a1": 1.0, "a2": 2.0, "b1": 3.0, "b2": 4.0, "c1": 6.0, "d1": 0.0}.__getitem__
    assert chains(todo, family, cost) == [["b1", "b2"], ["c1"], ["a1", "a2"], ["d1"]]
    # every model in exactly one chain
    assert sorted(m for chain in chains(todo, family, cost) for m in chain) == sorted(todo)


_ALONE = """
import sys
from engine.batch import collector
collector.tune()
from engine.batch.model_build import build_model
build_model(None, sys.argv[1], sys.argv[2], None, sys.argv[3], "h", None)
"""


@pytest.mark.long
def test_consistency_a_family_chain_writes_what_each_model_writes_alone(tmp_path):
    corpus = load_corpus()
    assert {corpus.models[m].family for m in FAMILY} == {"Qwen3"}
    # the build's chain: the three models back to back in one process (this one)
    chained = tmp_path / "chain"
    for mid in FAMILY:
        model_build.build_model(str(corpus.root), mid, str(TINY), None, str(chained), "h", None, corpus=corpus)
    shared = files_of(chained)
    # each model alone: a fresh process that evaluated nothing before it
    alone = tmp_path / "alone"
    for mid in FAMILY:
        subprocess.run([sys.executable, "-c", _ALONE, mid, str(TINY), str(alone)], cwd=REPO, check=True)
    apart = files_of(alone)
    assert sorted(shared) == sorted(apart)
    for mid in FAMILY:       # each model wrote its partitions, formulas, sizing and documents
        assert sum(model_build.slug(mid) in name for name in shared) >= 5, mid
    for name in shared:
        assert shared[name] == apart[name], f"{name}: the family chain's file differs from the model's alone"


_PLAYGROUND = """
import json, sys
from engine.language.corpus import load_corpus
from engine.playground.whatif import evaluate_with_sites, model_playground
corpus = load_corpus()
for mid in sys.argv[1:]:      # one after the other in this process, as a build worker runs them
    ev, sites = evaluate_with_sites(corpus, corpus.models[mid])
    doc = model_playground(ev, sites=sites, only={("attention", "kda_attention")})
sys.stdout.write(json.dumps(doc, sort_keys=True))
"""


def _playground_after(*models: str) -> str:
    done = subprocess.run([sys.executable, "-c", _PLAYGROUND, *models], cwd=REPO, check=True,
                          capture_output=True, text=True)
    return done.stdout


def test_consistency_a_playground_pick_does_not_depend_on_the_model_walked_before():
    """The smallest schedule the cold build tripped on: DeepSeek-V3's MTP layer and Qwen3.6-27B-NVFP4's
    walk kda_attention in the same scope (one shared site walk), but at different module paths
    (``model.layers.{layer}.self_attn`` vs ``mtp.layers.{layer}.self_attn``), and Qwen3.6-27B-NVFP4
    stores ``model.layers.*.self_attn.q_proj`` (and k, v, o) as fp8 by module-path pattern, its MTP
    layer's as bf16. A walk shared by a key without the module path hands Qwen3.6 DeepSeek's leaf
    keys, so its MTP projections were weighed as fp8. Each side in a fresh process, so no earlier
    test's walks are shared."""
    alone = _playground_after("nvidia/Qwen3.6-27B-NVFP4")
    chained = _playground_after("deepseek-ai/DeepSeek-V3", "nvidia/Qwen3.6-27B-NVFP4")
    assert chained == alone, "the playground document depends on the model evaluated before it"
    # the right one (consistency with the reference route): the pick's stored bytes, base + change at
    # its pre-filled kda dims, are those of the variant `edit --swap layers.attention=kda_attention`
    # walked whole, every stack (its MTP layer's q/k/v/o at mtp.layers.{layer}.self_attn: bf16, no
    # pattern covers them); the chained document was 83,886,048 B short of it
    from engine.language import formula_tree, variants
    from engine.language.api import evaluate_spec
    from engine.language.ir import Fill
    from engine.playground import whatif
    doc = json.loads(alone)
    entry = doc["picks"]["attention"]["kda_attention"]["sol"]["linear,full,mtp"]
    assert entry["at"] == {"kda_head_dim": 64, "kda_heads": 64}
    bound = doc["sol_trees"][entry["valid"][0][0]]      # ["and", ["<=", ["*", 1.25, base + change], capacity]]
    weights = bound[1][1][2]
    corpus = load_corpus()
    swap = variants.Swap("attention", (), Fill("kda_attention", whatif._PAGE, {}), whatif._PAGE)
    binds = [variants.Bind(d, v, "pre-fill", whatif._PAGE) for d, v in entry["at"].items()]
    spec = variants.resolve(corpus, "pick", "nvidia/Qwen3.6-27B-NVFP4", [swap], binds, whatif._PAGE).spec
    whole = evaluate_spec(corpus, spec)
    assert {t.dtype for t in whole.tensors() if t.key.startswith("mtp.layers.{layer}.self_attn.q_proj")} == {"BF16"}
    assert formula_tree.evaluate(weights, entry["at"]) == float(sum(t.total_bytes for t in whole.tensors()))
