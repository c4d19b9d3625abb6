"""site_builder.graph_svg: static SVG graph layout (deterministic, escaped, accessible) and diffs."""
from __future__ import annotations

import copy
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from site_builder.graph_svg import diff_graphs, render_svg

REPO = Path(__file__).resolve().parent.parent
NS = "{http://www.w3.org/2000/svg}"


def _graph(nodes, edges):
    return {"nodes": [{"id": i, "label": i, "kind": k, "detail": d, "badge": b} for i, k, d, b in nodes],
            "edges": [{"src": s, "dst": t, "label": lab} for s, t, lab in edges]}


GQA = _graph(
    [("x", "input", "[batch, seq, hidden]", ""),
     ("q_proj", "op", "linear  [batch, seq, hidden] -> [batch, seq, n_heads*d_head]", ""),
     ("k_proj", "op", "linear  hidden -> n_kv*d_head", ""),
     ("v_proj", "op", "linear  hidden -> n_kv*d_head", ""),
     ("kv_cache", "cache", "k, v  [batch, ctx, n_kv, d_head]", ""),
     ("sdpa", "fused", "softmax(QK^T/sqrt(d)) V", "x61"),
     ("o_proj", "op", "linear  n_heads*d_head -> hidden", "")],
    [("x", "q_proj", "[batch, seq, hidden]"), ("x", "k_proj", "[batch, seq, hidden]"),
     ("x", "v_proj", "[batch, seq, hidden]"), ("k_proj", "kv_cache", ""), ("v_proj", "kv_cache", ""),
     ("q_proj", "sdpa", "[b, s, h, d]"), ("kv_cache", "sdpa", ""), ("sdpa", "o_proj", "[b, s, h*d]")])

MLA = _graph(
    [("x", "input", "[batch, seq, hidden]", ""),
     ("q_a_proj", "op", "linear  hidden -> q_lora", ""),
     ("q_proj", "op", "linear  q_lora -> n_heads*qk_head", ""),
     ("kv_a_proj", "op", "linear  hidden -> kv_lora+rope", ""),
     ("kv_cache", "cache", "c_kv, k_rope  [batch, ctx, kv_lora+rope]", ""),
     ("kv_b_proj", "op", "linear  kv_lora -> n_heads*(nope+v)", ""),
     ("sdpa", "fused", "softmax(QK^T/sqrt(d)) V", "x61"),
     ("o_proj", "op", "linear  n_heads*d_head -> hidden", "")],
    [("x", "q_a_proj", "[batch, seq, hidden]"), ("q_a_proj", "q_proj", ""), ("q_proj", "sdpa", "[b, s, h, d]"),
     ("x", "kv_a_proj", "[batch, seq, hidden]"), ("kv_a_proj", "kv_cache", ""), ("kv_cache", "kv_b_proj", ""),
     ("kv_b_proj", "sdpa", ""), ("sdpa", "o_proj", "[b, s, h*d]")])


def _random_dag(n=60, seed=1):
    rng = random.Random(seed)
    nodes = [(f"n{i}", "op", "linear  [batch, seq, hidden]", "") for i in range(n)]
    edges = [(f"n{j}", f"n{i}", "[b, s, h]") for i in range(1, n)
             for j in rng.sample(range(max(0, i - 8), i), min(i, rng.choice([1, 1, 2])))]
    return _graph(nodes, edges)


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # every test: the output is well-formed XML
    assert root.tag == NS + "svg"
    assert root.get("class") == "graph" and root.get("role") == "group" and root.get("width") == "100%"
    assert root.find(NS + "title") is not None
    assert len(root.get("viewBox").split()) == 4
    return root


def _nodes(root):
    return {g.get("data-node"): g for g in root.iter(NS + "g") if "node" in g.get("class").split()}


def _edges(root):
    return {(g.get("data-src"), g.get("data-dst")): g for g in root.iter(NS + "g")
            if "edge" in g.get("class").split()}


def _box(g):
    return tuple(float(g.get(k)) for k in ("data-x", "data-y", "data-w", "data-h"))


def _overlap(a, b):
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    return ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah


def _texts(g):
    return ["".join(t.itertext()) for t in g.iter(NS + "text")]


def test_layout_is_deterministic_within_and_across_processes():
    big = _random_dag()
    assert render_svg(big, title="t") == render_svg(copy.deepcopy(big), title="t")
    union, status = diff_graphs(GQA, MLA)
    assert render_svg(union, status=status) == render_svg(union, status=dict(status))
    # another interpreter (other hash seed, other object ids) must produce the same bytes
    code = ("import sys; sys.path.insert(0, 'tests'); from test_graph_svg import _random_dag;"
            "from site_builder.graph_svg import render_svg; sys.stdout.write(render_svg(_random_dag(), title='t'))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2")}
    assert outs == {render_svg(big, title="t")}
    _parse(render_svg(big, title="t"))


def test_every_node_and_edge_appears_with_its_attributes():
    root = _parse(render_svg(GQA, title="GQA"))
    nodes, edges = _nodes(root), _edges(root)
    assert set(nodes) == {n["id"] for n in GQA["nodes"]}
    assert set(edges) == {(e["src"], e["dst"]) for e in GQA["edges"]}
    assert root.find(NS + "title").text == "GQA"
    for n in GQA["nodes"]:
        g = nodes[n["id"]]
        assert f"kind-{n['kind']}" in g.get("class").split()
        assert g.get("tabindex") == "0"
        assert n["label"] in g.find(NS + "title").text and n["detail"] in g.find(NS + "title").text
        assert float(g.get("data-w")) >= 90
        assert n["label"] in _texts(g)
    assert "x61" in _texts(nodes["sdpa"])
    # a cache is drawn differently from an op (a path, not a plain rect)
    assert nodes["kv_cache"].find(NS + "path") is not None and nodes["kv_cache"].find(NS + "rect") is None
    assert nodes["q_proj"].find(NS + "rect") is not None
    for e in GQA["edges"]:
        g = edges[(e["src"], e["dst"])]
        path = g.find(NS + "path")
        assert path.get("d").startswith("M") and path.get("marker-end", "").startswith("url(#")
        assert _texts(g) == ([e["label"]] if e["label"] else [])


def test_chain_is_laid_out_top_to_bottom():
    chain = _graph([(i, "op", "", "") for i in "abcde"], [(s, t, "") for s, t in zip("abcd", "bcde")])
    root = _parse(render_svg(chain))
    boxes = [_box(_nodes(root)[i]) for i in "abcde"]
    for (_, y0, _, h0), (_, y1, _, _) in zip(boxes, boxes[1:]):
        assert y1 > y0 + h0  # strictly below, with a gap for the edge
    # arrows go down: each path starts above where it ends
    for g in _edges(root).values():
        nums = [float(v) for v in g.find(NS + "path").get("d").replace("M", " ").replace("C", " ")
                .replace(",", " ").split()]
        assert nums[1] < nums[-1]


def test_text_is_escaped():
    evil = {"nodes": [{"id": 'a"b', "label": "<script>alert(1)</script>", "kind": "op",
                       "detail": "x & y < z \"q\" \x01", "badge": "<b>"},
                      {"id": "c", "label": "c", "kind": "op", "detail": ""}],
            "edges": [{"src": 'a"b', "dst": "c", "label": "</text><script>"}]}
    svg = render_svg(evil, title="<title>&", link=lambda n: "/m?a=1&b=<2>")
    assert "<script" not in svg and "<b>" not in svg and "\x01" not in svg
    root = _parse(svg)
    g = _nodes(root)['a"b']
    assert "<script>alert(1)</script>" in _texts(g)
    assert g.find(NS + "title").text.startswith("<script>alert(1)</script> (<b>)")
    assert _edges(root)[('a"b', "c")].get("data-src") == 'a"b'
    assert root.find(NS + "title").text == "<title>&"
    assert g.find(NS + "a").get("href") == "/m?a=1&b=<2>"


def test_diff_statuses_and_union():
    a, b = copy.deepcopy(GQA), copy.deepcopy(MLA)
    union, status = diff_graphs(a, b)
    assert (a, b) == (GQA, MLA)  # inputs untouched
    assert status == {"x": "same", "q_proj": "changed", "k_proj": "only_a", "v_proj": "only_a",
                      "kv_cache": "changed", "sdpa": "same", "o_proj": "same",
                      "q_a_proj": "only_b", "kv_a_proj": "only_b", "kv_b_proj": "only_b"}
    assert [n["id"] for n in union["nodes"]] == [
        "x", "q_proj", "k_proj", "v_proj", "kv_cache", "sdpa", "o_proj", "q_a_proj", "kv_a_proj", "kv_b_proj"]
    q = next(n for n in union["nodes"] if n["id"] == "q_proj")
    assert q["detail"] == "linear  q_lora -> n_heads*qk_head"
    assert q["data"]["a_detail"] == "linear  [batch, seq, hidden] -> [batch, seq, n_heads*d_head]"
    pairs = [(e["src"], e["dst"]) for e in union["edges"]]
    assert len(pairs) == len(set(pairs))  # (q_proj, sdpa) and (sdpa, o_proj) are in both, kept once
    assert set(pairs) == {(e["src"], e["dst"]) for e in GQA["edges"] + MLA["edges"]}
    assert pairs[:len(GQA["edges"])] == [(e["src"], e["dst"]) for e in GQA["edges"]]
    edge_status = {(e["src"], e["dst"]): e["status"] for e in union["edges"]}
    assert edge_status[("sdpa", "o_proj")] == "same"
    assert edge_status[("x", "q_proj")] == "only_a" and edge_status[("q_a_proj", "q_proj")] == "only_b"
    # identical graphs: everything "same"
    assert set(diff_graphs(GQA, GQA)[1].values()) == {"same"}


def test_rendered_diff_has_textual_markers_dashes_and_classes():
    union, status = diff_graphs(GQA, MLA)
    root = _parse(render_svg(union, status=status, title="GQA vs MLA"))
    nodes = _nodes(root)
    marks = {"changed": "≠ changed", "only_a": "− only in A", "only_b": "+ only in B"}
    for nid, st in status.items():
        g = nodes[nid]
        assert f"status-{st}" in g.get("class").split()
        shape = g.find(NS + "rect") if g.find(NS + "rect") is not None else g.find(NS + "path")
        if st == "same":
            assert not any(m in t for t in _texts(g) for m in marks.values())
            assert shape.get("stroke-dasharray") is None
        else:
            assert marks[st] in _texts(g)  # colour is never the only signal
            assert marks[st] in g.find(NS + "title").text
            assert shape.get("stroke-dasharray")
    dashes = {st: nodes[nid].find(NS + "rect").get("stroke-dasharray")
              for nid, st in status.items() if st != "same" and nid != "kv_cache"}
    assert len(set(dashes.values())) == 3  # one pattern per status
    edges = _edges(root)
    for (src, dst), g in edges.items():
        cls = g.get("class").split()
        if "only_a" in (status[src], status[dst]):
            assert "status-only_a" in cls and g.find(NS + "path").get("stroke-dasharray")
        elif "only_b" in (status[src], status[dst]):
            assert "status-only_b" in cls and g.find(NS + "path").get("stroke-dasharray")
    assert edges[("sdpa", "o_proj")].get("class") == "edge"
    assert "A: linear  [batch, seq, hidden]" in nodes["q_proj"].find(NS + "title").text


def test_nodes_never_overlap_and_fit_the_viewbox():
    for graph in (_random_dag(), GQA, diff_graphs(GQA, MLA)[0]):
        root = _parse(render_svg(graph))
        _, _, vw, vh = (float(v) for v in root.get("viewBox").split())
        boxes = [_box(g) for g in _nodes(root).values()]
        for i, a in enumerate(boxes):
            assert a[0] >= 0 and a[1] >= 0 and a[0] + a[2] <= vw and a[1] + a[3] <= vh
            assert not any(_overlap(a, b) for b in boxes[i + 1:])


def test_disconnected_components_do_not_overlap():
    graph = _graph([("a1", "op", "", ""), ("a2", "op", "a long detail line " * 3, ""), ("a3", "op", "", ""),
                    ("solo", "cache", "", ""), ("b1", "op", "", ""), ("b2", "op", "", "")],
                   [("a1", "a2", "[batch, seq, hidden]"), ("a1", "a3", "[batch, seq, hidden]"),
                    ("b1", "b2", "[batch, seq, hidden]")])
    root = _parse(render_svg(graph))
    nodes = _nodes(root)

    def bbox(ids):
        bs = [_box(nodes[i]) for i in ids]
        x0, y0 = min(b[0] for b in bs), min(b[1] for b in bs)
        return x0, y0, max(b[0] + b[2] for b in bs) - x0, max(b[1] + b[3] for b in bs) - y0

    comps = [bbox(["a1", "a2", "a3"]), bbox(["solo"]), bbox(["b1", "b2"])]
    for i, a in enumerate(comps):
        assert not any(_overlap(a, b) for b in comps[i + 1:])
    assert comps[0][0] < comps[1][0] < comps[2][0]  # declaration order, left to right
    # a graph without edges: every node its own component, none overlapping
    root = _parse(render_svg(_graph([(f"n{i}", "op", "", "") for i in range(30)], [])))
    boxes = [_box(g) for g in _nodes(root).values()]
    assert len(boxes) == 30
    assert not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_links_wrap_nodes_in_anchors():
    graph = copy.deepcopy(GQA)
    graph["nodes"][5]["data"] = {"href": "sdpa.html"}
    root = _parse(render_svg(graph, link=lambda n: n.get("data", {}).get("href")))
    nodes = _nodes(root)
    a = nodes["sdpa"].find(NS + "a")
    assert a is not None and a.get("href") == "sdpa.html"
    assert a.find(NS + "rect") is not None and "sdpa" in _texts(a)  # the content sits inside the link
    assert nodes["sdpa"].get("tabindex") is None  # the <a> is the focus stop
    for nid, g in nodes.items():
        if nid != "sdpa":
            assert g.find(NS + "a") is None and g.get("tabindex") == "0"


def test_small_and_odd_graphs_render():
    for graph in ({"nodes": [], "edges": []},
                  {"nodes": [{"id": "only"}]},
                  _graph([(i, "op", "", "") for i in "abc"], [("a", "b", ""), ("b", "c", ""), ("c", "a", "")]),
                  _graph([(i, "op", "", "") for i in "abc"],
                         [("a", "b", "x"), ("b", "c", ""), ("c", "b", ""), ("c", "c", "loop"), ("a", "b", "dup")])):
        root = _parse(render_svg(graph))
        assert set(_nodes(root)) == {n["id"] for n in graph["nodes"]}
        assert set(_edges(root)) == {(e["src"], e["dst"]) for e in graph.get("edges", [])}
    # the duplicate (a, b) edge is drawn once, with the first label
    assert _texts(_edges(root)[("a", "b")]) == ["x"]


def test_long_detail_is_truncated_but_kept_in_title():
    detail = "linear  [batch, seq, hidden] -> [batch, seq, n_heads*d_head]  " * 3
    short = {"nodes": [{"id": "a", "label": "a", "detail": "d"}]}
    long_ = {"nodes": [{"id": "a", "label": "a_rather_long_label_name_here", "detail": detail}]}
    g_short = _nodes(_parse(render_svg(short)))["a"]
    g = _nodes(_parse(render_svg(long_)))["a"]
    shown = next(t for t in g.iter(NS + "text") if t.get("class") == "node-detail").text
    assert shown.endswith("…") and len(shown) < len(detail) and detail.startswith(shown[:-1])
    assert detail in g.find(NS + "title").text
    assert float(g_short.get("data-w")) == 90 < float(g.get("data-w"))


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="unknown node"):
        render_svg({"nodes": [{"id": "a"}], "edges": [{"src": "a", "dst": "zz"}]})
    with pytest.raises(ValueError, match="duplicate"):
        render_svg({"nodes": [{"id": "a"}, {"id": "a"}]})
    with pytest.raises(ValueError, match="status"):
        render_svg(GQA, status={"x": "different"})


def _label_boxes(root):
    """Each edge label's box at 9 px: its anchor (x, baseline y) and at least 4.5 px per character
    (narrower than any glyph of the labels' font but "i", "l", "," and brackets)."""
    out = []
    for t in root.iter(NS + "text"):
        if t.get("class") == "edge-label":
            x, y = float(t.get("x")), float(t.get("y"))
            out.append(((x, y - 7, len(t.text) * 4.5, 9), t.text))
    return out


def test_edge_labels_never_overlap():
    """A fan-out whose long labels would meet where the edges are still close together (each label
    near its target, the targets side by side), the random DAG and a diff: no two label boxes meet."""
    fan = _graph([("src", "op", "", "")] + [(f"t{i}", "op", "", "") for i in range(4)],
                 [("src", f"t{i}", f"stream token_ids (layers {i}-{i + 40}) [batch, seq, hc_mult, hidden]")
                  for i in range(4)])
    for graph in (fan, _random_dag(), diff_graphs(GQA, MLA)[0]):
        boxes = _label_boxes(_parse(render_svg(graph)))
        assert len(boxes) >= 4
        clash = [(a[1], b[1]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlap(a[0], b[0])]
        assert clash == []


def test_repeat_edge_is_a_loop_left_of_its_span():
    """A ``kind: repeat`` edge (a repeated period of layers) leaves the chain's layering alone: the
    boxes stay one column top to bottom, and the loop runs from the last box's left side back up to
    the first's, left of every box it spans, its label left of the loop."""
    chain = _graph([("embed", "op", "", ""), ("linear", "component", "", "x3"), ("full", "component", "", ""),
                    ("norm", "op", "", "")],
                   [("embed", "linear", "[b, s, h]"), ("linear", "full", "[b, s, h]"), ("full", "norm", "[b, s, h]")])
    chain["edges"].append({"src": "full", "dst": "linear", "kind": "repeat", "label": "x16, layers 0-63"})
    root = _parse(render_svg(chain))
    nodes = {k: _box(g) for k, g in _nodes(root).items()}
    ys = [nodes[k][1] for k in ("embed", "linear", "full", "norm")]
    assert ys == sorted(ys) and len(set(ys)) == 4
    loop = _edges(root)[("full", "linear")]
    assert "kind-repeat" in loop.get("class").split()
    d = [float(v) for v in re.findall(r"-?[0-9.]+", loop.find(NS + "path").get("d"))]
    (x1, y1), (x0, y0) = d[:2], d[-2:]
    full, linear = nodes["full"], nodes["linear"]
    assert x1 == pytest.approx(full[0]) and y1 == pytest.approx(full[1] + full[3] / 2, abs=0.1)
    assert x0 == pytest.approx(linear[0]) and y0 == pytest.approx(linear[1] + linear[3] / 2, abs=0.1)
    assert min(d[0::2]) < min(full[0], linear[0])              # bulges left of both boxes
    label = loop.find(NS + "text")
    assert label.text == "x16, layers 0-63"
    assert float(label.get("x")) + len(label.text) * 4.5 < min(full[0], linear[0])


def test_an_edge_beside_another_between_the_same_boxes_is_drawn_aside():
    """A stream joining the two boxes a data edge already joins (either way) keeps its own route:
    a loop right of both boxes, never over the data edge; both are drawn."""
    chain = _graph([("a", "component", "", ""), ("b", "component", "", "")], [("a", "b", "[b, s, h]")])
    chain["edges"] += [{"src": "a", "dst": "b", "kind": "stream", "label": "stream x (layers 3-5)"},
                       {"src": "b", "dst": "a", "kind": "stream", "label": "stream y (layers 7-9)"}]
    root = _parse(render_svg(chain))
    nodes = {k: _box(g) for k, g in _nodes(root).items()}
    right = max(nodes["a"][0] + nodes["a"][2], nodes["b"][0] + nodes["b"][2])
    paths = {(g.get("data-src"), g.get("data-dst"), g.get("class")): g.find(NS + "path").get("d")
             for g in root.iter(NS + "g") if "edge" in g.get("class").split()}
    assert len(paths) == 3
    for (src, dst, cls), d in paths.items():
        xs = [float(v) for v in re.findall(r"-?[0-9.]+", d)][0::2]
        if "kind-stream" in cls:
            assert max(xs) > right + 10, (src, dst, d)      # out to the right of both boxes
        else:
            assert max(xs) <= right, d                      # the data edge between them
