"""The layer plan (engine/batch/layer_plan.py) and the stack drawing made from it (site_builder/graphs.py).

Expectations come from outside the code under test: hand-written layer sequences with their plan
text written out, and the published config.json of four models whose layer stacks mix templates
(DeepSeek-V3's ``first_k_dense_replace``, Qwen3.5-27B's ``layer_types``, DeepSeek-V4-Pro's
``compress_ratios`` and ``num_hash_layers``, Nemotron-H's ``hybrid_override_pattern``), each turned
into a template per layer by the rule its model card states.
"""
from __future__ import annotations

import ast
import functools
import xml.etree.ElementTree as ET

import pytest

from engine.batch.export import model_document
from engine.batch.layer_plan import layer_plans
from site_builder import graphs
from site_builder.graph_svg import render_svg
from tests.conftest import hf_config
from tests.test_graph_svg import _label_boxes, _overlap
from tests.site_helpers import drawn_layers, expected_layers

NS = "{http://www.w3.org/2000/svg}"


def _plan(seq: list[str], first: int = 0) -> dict:
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(seq):
        groups.setdefault(f"s/layers[{name}]", []).append(first + i)
    (plan,) = layer_plans((uid, uid[uid.index("[") + 1:-1], layers) for uid, layers in groups.items())
    return plan


@pytest.mark.parametrize("seq, first, text", [
    (["block"] * 32, 0, "layers 0-31: block"),
    (["dense"] * 3 + ["moe"] * 58, 0, "layers 0-2: dense; layers 3-60: moe"),
    (["linear"] * 3 + ["full"] + ["linear"] * 3 + ["full"], 0, "layers 0-7: 3 linear : 1 full, x2"),
    # a period opens on its longest run ("5 sliding : 1 full"), a leftover run stays a run
    (["dense"] + (["sliding"] * 5 + ["full"]) * 2 + ["sliding"], 0,
     "layer 0: dense; layers 1-12: 5 sliding : 1 full, x2; layer 13: sliding"),
    (["mtp"], 61, "layer 61: mtp"),
])
def test_plan_text_by_hand(seq, first, text):
    plan = _plan(seq, first)
    assert plan["text"] == text
    assert plan["count"] == len(seq) and (plan["first"], plan["last"]) == (first, first + len(seq) - 1)


def _templates_from_config(model_id: str) -> list[str]:
    """The template at each main-stack layer, by the rule the model's config states."""
    c = hf_config(model_id)
    if model_id == "deepseek-ai/DeepSeek-V3":     # the first k layers dense, the rest MoE
        return ["dense" if i < c["first_k_dense_replace"] else "moe" for i in range(c["num_hidden_layers"])]
    if model_id == "Qwen/Qwen3.5-27B":            # layer_types: linear_attention | full_attention
        types = c["text_config"]["layer_types"]
        types = ast.literal_eval(types) if isinstance(types, str) else types
        return [t.split("_")[0] for t in types]
    if model_id == "deepseek-ai/DeepSeek-V4-Pro":  # ratio 128: HCA, 4: CSA; the first num_hash_layers hashed
        ratios = c["compress_ratios"]
        ratios = ast.literal_eval(ratios) if isinstance(ratios, str) else ratios
        return [("hca" if r == 128 else "csa") + ("_hash" if i < c["num_hash_layers"] else "")
                for i, r in enumerate(ratios[:c["num_hidden_layers"]])]
    pattern = c["hybrid_override_pattern"]        # M Mamba2, - MLP, * attention
    return [{"M": "mamba", "-": "mlp", "*": "attention"}[ch] for ch in pattern]


MIXED = ["deepseek-ai/DeepSeek-V3", "Qwen/Qwen3.5-27B", "deepseek-ai/DeepSeek-V4-Pro", "nvidia/Nemotron-H-56B-Base-8K"]
#: The plan text of three of them, written out from the configs above.
TEXT = {"deepseek-ai/DeepSeek-V3": "layers 0-2: dense; layers 3-60: moe",
        "Qwen/Qwen3.5-27B": "layers 0-63: 3 linear : 1 full, x16",
        "deepseek-ai/DeepSeek-V4-Pro": "layers 0-1: hca_hash; layer 2: csa_hash; layers 3-60: 1 hca : 1 csa, x29"}


@functools.lru_cache(maxsize=None)
def _document(model_id: str) -> dict:
    from tests.conftest import _evaluation
    return model_document(_evaluation(model_id))


@pytest.mark.parametrize("model_id", MIXED)
def test_plan_follows_the_published_config(model_id):
    (plan,) = [p for p in _document(model_id)["layer_plan"] if p["uid"] == "main/layers"]
    layers = [run["name"] for seg in plan["segments"] for _ in range(seg["times"])
              for run in seg["runs"] for _ in range(run["count"])]
    assert layers == _templates_from_config(model_id)
    assert [s["first"] for s in plan["segments"]] == sorted(s["first"] for s in plan["segments"])
    if model_id in TEXT:
        assert plan["text"] == TEXT[model_id]


@pytest.mark.parametrize("model_id", MIXED)
def test_stack_drawing_is_one_chain_in_layer_order(model_id):
    """Embedding -> every layer group in layer order -> final norm, as the SVG draws it: the path
    walked in the drawing, with its run badges and repeat loops, gives back the template the walk
    put at each layer (the document's component rows) and the config's; no edge labels overlap."""
    doc = _document(model_id)
    root = ET.fromstring(render_svg(graphs.level_graph(doc, "main"), title="main"))
    nodes, edges = {}, []
    for g in root.iter(NS + "g"):
        cls = g.get("class").split()
        if "node" in cls:
            badge = g.find(f"{NS}text[@class='node-badge']")
            nodes[g.get("data-node")] = {"badge": badge.text if badge is not None else ""}
        elif "edge" in cls:
            label = g.find(NS + "text")
            kind = next((c[5:] for c in cls if c.startswith("kind-")), "")
            edges.append({"src": g.get("data-src"), "dst": g.get("data-dst"), "kind": kind,
                          "label": label.text if label is not None else ""})
    top = [o for o in doc["ops"] if o["uid"].count("/") == 1 and o["uid"].startswith("main/")]
    embed = next(o["uid"] for o in top if o["op"] == "embedding")
    norm = [o["uid"] for o in top if o["op"] == "rmsnorm"][-1]
    drawn = drawn_layers(nodes, edges, embed, norm)
    assert drawn == expected_layers(doc, "main/layers")
    assert [g[g.index("[") + 1:-1] for g in drawn] == _templates_from_config(model_id)
    # and no two edge labels meet (DeepSeek-V4-Pro's stack drawing once printed two over each other)
    boxes = _label_boxes(root)
    assert [(a[1], b[1]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlap(a[0], b[0])] == []
