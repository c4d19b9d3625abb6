"""Computation graphs and graph diffs as static inline SVG, laid out at build time.

Layer: site_builder (imports only grandalf and the standard library).

``render_svg(graph)`` lays a DAG out top to bottom with grandalf's Sugiyama layout and returns one
``<svg class="graph" role="group">`` element; ``diff_graphs(a, b)`` pairs two graphs' nodes by id and
returns their union plus a node-status map for ``render_svg(..., status=...)``.

Invariants:
- Deterministic: the same input gives a byte-identical SVG, in any process. Vertices and edges
  reach grandalf in declaration order (never via a set), components are placed in order of their
  first node, coordinates are printed rounded, element ids derive from a hash of the node/edge ids.
- Escaped: every piece of caller text (ids, labels, details, badges, titles, hrefs) goes through
  ``_esc``, which also drops characters XML 1.0 forbids; the result always parses as XML.
- Edges of ``kind: "repeat"`` (a layer stack's repeated period, site_builder/graphs.py) stay out of
  the layering: each is drawn as a loop left of the boxes it spans, from its source back up to its
  target. An edge between two boxes another edge already joins (a stream beside the data edge,
  either way) is drawn the same way on the right, never over the other's route. Edge labels never overlap one another: one whose usual spot is taken moves along its own
  route, else up or down (boxes estimated generously from the label's length, :func:`_label_box`).
- Accessible: the SVG and each node have a ``<title>`` (node titles keep the full, untruncated
  detail); nodes are keyboard-focusable (``tabindex="0"``, or the ``<a>`` itself when linked);
  diff status is never colour-only — each non-"same" node carries a text marker and a dash pattern.
- Styling is by class (``node kind-*``, ``status-*``, ``node-label`` ...): colours, strokes and fonts
  are rules of one ``<style>`` in each SVG (:data:`STYLE`), every selector inside ``:where()`` so it
  weighs no more than a presentation attribute and any page CSS overrides it; the SVG also reads
  standalone. Per-element attributes are only what varies (geometry, dash patterns, the arrow marker):
  a drawing is about a third smaller than with every default repeated on every element (issue 19).
"""
from __future__ import annotations

import hashlib
import re
from typing import Callable

from grandalf.graphs import Edge, Vertex, graph_core
from grandalf.layouts import SugiyamaLayout

STATUSES = ("same", "changed", "only_a", "only_b")
#: Text shown inside the node, so a diff reads without colour.
STATUS_MARK = {"changed": "≠ changed", "only_a": "− only in A", "only_b": "+ only in B"}
#: Distinct dash patterns per status (a second non-colour signal, also for edges).
STATUS_DASH = {"changed": "6 3", "only_a": "2 3", "only_b": "9 3 2 3"}
STATUS_STROKE = {"changed": "#b26b00", "only_a": "#b3261e", "only_b": "#1b7f3b"}
KIND_FILL = {"op": "#ffffff", "component": "#eef3fb", "input": "#f2f2f2", "output": "#f2f2f2",
             "cache": "#fdf6e3", "comm": "#f3eefb", "fused": "#eefbf3"}

MARGIN = 20
X_SPACE = 30          # between nodes in a layer
Y_SPACE = 52          # between layers: room for an edge label in the gap
COMPONENT_GAP = 40    # between disconnected components
MAX_ROW_WIDTH = 1400  # wrap disconnected components onto a new row past this width
DUMMY_W = 24          # width reserved for a long edge passing through a layer
REPEAT_OUT = 26       # how far a repeat loop bulges right of the boxes it spans
MIN_W, PAD = 90, 10
LABEL_CH, DETAIL_CH, SMALL_CH = 7.0, 6.0, 6.0  # px per character at 12px / 10px fonts
EDGE_CH = 5.4         # px per character of an edge label at 9px
LINE, FIRST_BASELINE = 14, 19
DETAIL_MAX = 56       # characters of detail shown; the <title> keeps all of it
CACHE_LIP = 5         # height of the cylinder's top ellipse


def _style() -> str:
    """The drawings' default look (see the module doc): fills by node kind, strokes by diff status
    (after kind and stream, so status wins), text sizes and anchors. Class names are the drawings'
    own (no page element uses them), so the rules need no ``svg.graph`` prefix."""
    fills: dict[str, list[str]] = {}
    for kind, fill in KIND_FILL.items():
        if fill != "#ffffff":
            fills.setdefault(fill, []).append(f".kind-{kind} .node-shape")
    rules = [(".edge>path", "fill:none;stroke:#666;stroke-width:1.3"), (".kind-stream>path", "stroke:#2a6fdb"),
             (".kind-repeat>path", "stroke:#7a4fb5;stroke-width:1.6"), (".kind-repeat>text", "fill:#5b3590;font-weight:bold"),
             (".edge-label", "font-size:9px;fill:#444;stroke:#fff;stroke-width:3;paint-order:stroke"),
             (".node-shape", "fill:#fff;stroke:#555;stroke-width:1.3"),
             (".node-inner", "fill:none;stroke:#555;stroke-width:0.8")]
    rules += [(",".join(sels), f"fill:{fill}") for fill, sels in fills.items()]
    rules += [(f".status-{st}>path,.status-{st} .node-shape,.status-{st} .node-inner", f"stroke:{stroke}")
              for st, stroke in STATUS_STROKE.items()]
    rules += [(".node text", "text-anchor:middle;font-size:10px;fill:#333"),
              (".node .node-label", "font-size:12px;fill:#111"), (".node .node-badge", "text-anchor:end;fill:#555"),
              (".node-detail", "font-family:monospace"), (".node-status", "font-weight:bold")]
    return "".join(f":where({sel}){{{body}}}" for sel, body in rules)


#: One ``<style>`` per drawing (a page may hold several, or one loaded alone).
STYLE = _style()

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _esc(text: object) -> str:
    """XML-escape for text and double-quoted attributes; drop characters XML 1.0 cannot hold."""
    s = _XML_BAD.sub("", str(text))
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _n(v: float) -> str:
    """A coordinate, rounded so float noise never reaches the output."""
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _truncate(s: str, limit: int) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "…"


class _View:
    """What grandalf needs on a vertex (w, h, then xy) or an edge (setpath)."""

    def __init__(self, w: float = 0.0, h: float = 0.0):
        self.w, self.h, self.xy, self.path = w, h, (0.0, 0.0), []

    def setpath(self, pts):
        self.path = [tuple(p) for p in pts]


def _node_box(node: dict, status: str | None) -> tuple[float, float, list[tuple[str, str]]]:
    """Width, height and the text lines (css class, text) below the label of one node."""
    label, badge = node["label"], node["badge"]
    lines = []
    if node["detail"]:
        lines.append(("node-detail", _truncate(node["detail"], DETAIL_MAX)))
    if status in STATUS_MARK:
        lines.append(("node-status", STATUS_MARK[status]))
    badge_w = len(badge) * SMALL_CH + 8 if badge else 0
    # the label is centred, so a badge at the right needs its width reserved on both sides
    w = max(MIN_W, len(label) * LABEL_CH + 2 * badge_w + 2 * PAD,
            *(len(t) * DETAIL_CH + 2 * PAD for _, t in lines))
    h = FIRST_BASELINE + LINE * len(lines) + 9 + (CACHE_LIP if node["kind"] == "cache" else 0)
    return w, h, lines


def _edge_key(e: dict) -> tuple[str, str, str]:
    """An edge's identity: its ends and its kind (a stream may join the boxes a data edge joins)."""
    return e["src"], e["dst"], e.get("kind") or ""


def _normalize(graph: dict) -> tuple[list[dict], list[dict]]:
    """Nodes with every field present, and edges deduplicated by (src, dst, kind), first one wins."""
    nodes, seen = [], set()
    for raw in graph.get("nodes", []):
        nid = str(raw["id"])
        if nid in seen:
            raise ValueError(f"duplicate node id {nid!r}")
        seen.add(nid)
        nodes.append({"id": nid, "label": str(raw.get("label") or nid), "kind": str(raw.get("kind") or "op"),
                      "detail": str(raw.get("detail") or ""), "badge": str(raw.get("badge") or ""),
                      "data": dict(raw.get("data") or {})})
    edges, pairs = [], set()
    for raw in graph.get("edges", []):
        src, dst = str(raw["src"]), str(raw["dst"])
        for end in (src, dst):
            if end not in seen:
                raise ValueError(f"edge {src!r} -> {dst!r} names unknown node {end!r}")
        edge = {**raw, "src": src, "dst": dst, "label": str(raw.get("label") or "")}
        if _edge_key(edge) not in pairs:
            pairs.add(_edge_key(edge))
            edges.append(edge)
    return nodes, edges


def _components(nodes: list[dict], edges: list[dict]) -> list[list[str]]:
    """Connected components (undirected), each in declaration order, ordered by first node."""
    parent = {n["id"]: n["id"] for n in nodes}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for e in edges:
        a, b = find(e["src"]), find(e["dst"])
        if a != b:
            parent[b] = a
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(find(n["id"]), []).append(n["id"])
    return list(groups.values())


#: :func:`_layout`'s answers in this process, by everything it reads (node ids and box sizes, edge
#: ends, kinds and labels, in order): the same drawing recurs (a component
#: drawn in each model that uses it, on its own page and in graph diffs), and the layout is most of
#: a drawing's time.
_LAYOUTS: dict[tuple, tuple] = {}


def _layout(nodes, edges, sizes):
    """Top-left corner of every node and the geometry of every edge, in SVG px (read only: the
    answer is shared by every drawing of the same graph, :data:`_LAYOUTS`).

    Edge geometry is (points, label anchor, is_loop); a component's bounding box covers its
    nodes, its routes and its edge labels, so side-by-side components never overlap.
    """
    key = (tuple((n["id"], sizes[n["id"]]) for n in nodes),
           tuple((*_edge_key(e), e["label"]) for e in edges))
    found = _LAYOUTS.get(key)
    if found is None:
        found = _LAYOUTS[key] = _laid_out(nodes, edges, sizes)
    return found


def _laid_out(nodes, edges, sizes):
    """:func:`_layout` without the memo."""
    out_deg = {n["id"]: 0 for n in nodes}
    in_deg = dict(out_deg)
    for e in edges:
        if e.get("kind") != "repeat":
            out_deg[e["src"]] += 1
            in_deg[e["dst"]] += 1
    pos: dict[str, tuple[float, float]] = {}
    geoms: dict[tuple[str, str, str], tuple] = {}
    aside = {_edge_key(e): "left" for e in edges if e.get("kind") == "repeat"}
    cursor_x, row_y, row_bottom = float(MARGIN), float(MARGIN), float(MARGIN)
    for comp in _components(nodes, edges):
        members = set(comp)
        comp_edges = [e for e in edges if e["src"] in members]
        centres: dict[str, tuple[float, float]] = {comp[0]: (0.0, 0.0)}
        routes: dict[tuple[str, str], list] = {}
        if len(comp) > 1:
            verts = {nid: Vertex(nid) for nid in comp}
            for nid, v in verts.items():
                v.view = _View(*sizes[nid])
            gedges = []
            routed = set()
            # data edges first, then streams; a repeat loop, and an edge that would retrace one
            # already routed (the same two boxes, either way), is drawn aside (_aside_geom)
            for e in sorted(comp_edges, key=lambda e: e.get("kind") == "stream"):
                pair = frozenset((e["src"], e["dst"]))
                if e["src"] == e["dst"] or e.get("kind") == "repeat":
                    continue
                if pair in routed:
                    aside[_edge_key(e)] = "right"
                    continue
                routed.add(pair)
                ge = Edge(verts[e["src"]], verts[e["dst"]])
                ge.view = _View()
                gedges.append(((e["src"], e["dst"]), ge))
            # graph_core rather than Graph: Graph gathers each component's edges in a set(),
            # whose order follows object ids and would make the layout vary between runs.
            core = graph_core(list(verts.values()), [ge for _, ge in gedges])
            sug = SugiyamaLayout(core)
            sug.xspace, sug.yspace = X_SPACE, Y_SPACE
            sug.dw = DUMMY_W  # dummies inherit this width; keep long edges from hogging a layer
            sug.init_all()  # cycles: grandalf reverses feedback edges internally
            sug.draw(4)
            centres = {nid: v.view.xy for nid, v in verts.items()}
            routes = {key: ge.view.path for key, ge in gedges}
        local = {n: (centres[n][0] - sizes[n][0] / 2, centres[n][1] - sizes[n][1] / 2) for n in comp}
        cgeoms = _edge_geoms(comp_edges, local, sizes, routes, out_deg, in_deg, aside)
        xs = [local[n][0] for n in comp] + [local[n][0] + sizes[n][0] for n in comp]
        ys = [local[n][1] for n in comp] + [local[n][1] + sizes[n][1] for n in comp]
        for e in comp_edges:
            pts, (lx, ly), _ = cgeoms[_edge_key(e)]
            xs += [p[0] for p in pts]
            ys += [p[1] for p in pts]
            if e["label"]:
                xs += [lx + 5, lx + 5 + (len(e["label"]) + 2) * EDGE_CH]
                ys += [ly - 7, ly + 5]
        left, top = min(xs), min(ys)
        width, height = max(xs) - left, max(ys) - top
        if cursor_x > MARGIN and cursor_x + width > MAX_ROW_WIDTH:
            cursor_x, row_y = float(MARGIN), row_bottom + COMPONENT_GAP
        dx, dy = cursor_x - left, row_y - top
        for n in comp:
            pos[n] = (local[n][0] + dx, local[n][1] + dy)
        for key, (pts, (lx, ly), loop) in cgeoms.items():
            geoms[key] = ([(x + dx, y + dy) for x, y in pts], (lx + dx, ly + dy), loop)
        cursor_x += width + COMPONENT_GAP
        row_bottom = max(row_bottom, row_y + height)
    return pos, geoms


def _cubic(a, b, t):
    """Point at t on the vertical-tangent cubic from a to b (the curve ``_path_d`` draws)."""
    ym = (a[1] + b[1]) / 2
    u = 1 - t
    x = a[0] * u**3 + 3 * a[0] * u * u * t + 3 * b[0] * u * t * t + b[0] * t**3
    y = a[1] * u**3 + 3 * ym * u * u * t + 3 * ym * u * t * t + b[1] * t**3
    return x, y


def _label_box(label: str, at) -> tuple:
    """The box an edge label's text covers (generous: EDGE_CH is wider than the mean glyph; the
    text's baseline is 3 px below the anchor, at 9 px)."""
    return (at[0] + 5, at[1] - 7, at[0] + 5 + (len(label) + 1) * EDGE_CH, at[1] + 7)


def _hits(box, boxes) -> bool:
    return any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes)


def _edge_geoms(edges, pos, sizes, routes, out_deg, in_deg, aside) -> dict:
    """Every edge of one component: (points, label anchor, is_loop) by :func:`_edge_key`.

    No two labels overlap: a label whose usual spot (:func:`_edge_geom`) is taken moves to the
    nearest free point of its own route clear of the boxes, else up or down from its spot. Edges
    drawn ``aside`` (key -> "left" or "right") come last and go round everything beside the boxes
    they span."""
    geoms, placed = {}, []
    boxes = [(x, y, x + sizes[n][0], y + sizes[n][1]) for n, (x, y) in pos.items()]
    for e in edges:
        if _edge_key(e) in aside:
            continue
        pts, at, loop = _edge_geom(e, pos, sizes, routes, out_deg, in_deg)
        if e["label"]:
            at = _free_spot(e["label"], at, [] if loop else pts, placed, boxes)
            placed.append(_label_box(e["label"], at))
        geoms[_edge_key(e)] = (pts, at, loop)
    for e in edges:
        if _edge_key(e) in aside:
            geoms[_edge_key(e)] = geom = _aside_geom(e, aside[_edge_key(e)], pos, sizes, placed)
            if e["label"]:
                placed.append(_label_box(e["label"], geom[1]))
    return geoms


def _free_spot(label, at, pts, placed, boxes):
    """``at`` when the label fits there beside the labels ``placed``, else the nearest point of the
    route ``pts`` where it fits clear of labels and node ``boxes``, else ``at`` moved up or down."""
    if not _hits(_label_box(label, at), placed):
        return at
    along = [_cubic(a, b, t) for a, b in zip(pts, pts[1:]) for t in (0.5, 0.3, 0.7, 0.15, 0.85)]
    along.sort(key=lambda p: (p[0] - at[0]) ** 2 + (p[1] - at[1]) ** 2)
    shifted = [(at[0], at[1] + d) for k in range(1, 7) for d in (14 * k, -14 * k)]
    for spot in along + shifted:
        box = _label_box(label, spot)
        if not _hits(box, placed) and not _hits(box, boxes):
            return spot
    return at


def _aside_geom(e, side, pos, sizes, placed):
    """An edge drawn beside the layout: from its source's ``side`` ("left" or "right") to its
    target's, bulging out past every box and label between them, its label outside the bulge (a
    repeat loop on the left; on the right an edge that would retrace another's route)."""
    (sx, sy), (sw, sh) = pos[e["src"]], sizes[e["src"]]
    (tx, ty), (tw, th) = pos[e["dst"]], sizes[e["dst"]]
    y1, y0 = sy + sh / 2, ty + th / 2
    lo, hi = min(ty, sy), max(ty + th, sy + sh)
    span = [(x, x + sizes[n][0]) for n, (x, y) in pos.items() if y < hi and y + sizes[n][1] > lo]
    span += [(b[0], b[2]) for b in placed if b[1] < hi and b[3] > lo]
    width = _label_box(e["label"], (0, 0))[2] if e["label"] else 0
    if side == "left":
        far, x1, x0 = min(a for a, _ in span) - REPEAT_OUT, sx, tx
        label_at = (far - 6 - width, (y1 + y0) / 2)
    else:
        far, x1, x0 = max(b for _, b in span) + REPEAT_OUT, sx + sw, tx + tw
        label_at = (far + 1, (y1 + y0) / 2)
    c = (far - (x1 + x0) / 8) / 0.75   # the cubic's widest point (t = 1/2) lands on ``far``
    return [(x1, y1), (c, y1), (c, y0), (x0, y0)], label_at, True


def _edge_geom(e, pos, sizes, routes, out_deg, in_deg):
    """(points, label anchor, is_loop) for one edge, from node boxes and grandalf's route."""
    src, dst = e["src"], e["dst"]
    (sx, sy), (sw, sh) = pos[src], sizes[src]
    (tx, ty), (tw, th) = pos[dst], sizes[dst]
    if src == dst:  # a self-loop (should not occur): one cubic bulging out of the right side
        x, y = sx + sw, sy + sh / 2
        return [(x, y - 6), (x + 30, y - 20), (x + 30, y + 20), (x, y + 6)], (x + 24, y), True
    inner = routes[(src, dst)][1:-1]  # grandalf's dummy points (its route is centre to centre)
    down = ty + th / 2 > sy + sh / 2  # back edges of a cycle point upward
    pts = [(sx + sw / 2, sy + sh if down else sy), *inner, (tx + tw / 2, ty if down else ty + th)]
    # label where sibling edges have spread apart: near the target for a fan-out,
    # near the source for a fan-in, else at the route's midpoint
    if len(pts) == 2 and out_deg[src] > 1 and in_deg[dst] == 1:
        label_at = _cubic(pts[0], pts[1], 0.72)
    elif len(pts) == 2 and in_deg[dst] > 1 and out_deg[src] == 1:
        label_at = _cubic(pts[0], pts[1], 0.28)
    elif len(pts) % 2:
        label_at = pts[len(pts) // 2]
    else:
        k = len(pts) // 2 - 1
        label_at = _cubic(pts[k], pts[k + 1], 0.5)
    return pts, label_at, False


def _path_d(pts, loop: bool) -> str:
    if loop:
        return "M{},{} C{},{} {},{} {},{}".format(*(_n(c) for p in pts for c in p))
    # one cubic per layer gap, tangents vertical at every point: smooth through the dummies
    d = [f"M{_n(pts[0][0])},{_n(pts[0][1])}"]
    for a, b in zip(pts, pts[1:]):
        ym = _n((a[1] + b[1]) / 2)
        d.append(f"C{_n(a[0])},{ym} {_n(b[0])},{ym} {_n(b[0])},{_n(b[1])}")
    return " ".join(d)


def _edge_svg(e, geom, status, pid) -> str:
    src, dst = e["src"], e["dst"]
    ends = (status.get(src), status.get(dst))
    est = "only_a" if "only_a" in ends else "only_b" if "only_b" in ends else e.get("status")
    est = est if est in STATUS_DASH else None
    pts, (lx, ly), loop = geom
    stream = e.get("kind") == "stream"   # a cross-layer stream: its own dash and colour
    kind = e.get("kind") if e.get("kind") in ("stream", "repeat") else ""
    cls = "edge" + (f" status-{est}" if est else "") + (f" kind-{kind}" if kind else "")
    dash = f' stroke-dasharray="{STATUS_DASH[est]}"' if est else (' stroke-dasharray="4 2"' if stream else "")
    out = [f'<g class="{cls}" data-src="{_esc(src)}" data-dst="{_esc(dst)}">',
           f'<path d="{_path_d(pts, loop)}"{dash} marker-end="url(#{pid}-arrow)"/>']
    label = e["label"]
    if label:
        if est == "changed":
            label = "≠ " + label
        out.append(f'<text class="edge-label" x="{_n(lx + 5)}" y="{_n(ly + 3)}">{_esc(label)}</text>')
    out.append("</g>")
    return "".join(out)


def _shape_svg(kind: str, w: float, h: float, dash: str) -> str:
    common = f'class="node-shape"{dash}'
    if kind == "cache":  # a cylinder: caches hold state across steps, unlike ops
        e = CACHE_LIP
        return (f'<path {common} d="M0,{e} A{_n(w / 2)},{e} 0 0 1 {_n(w)},{e} V{_n(h - e)} '
                f'A{_n(w / 2)},{e} 0 0 1 0,{_n(h - e)} Z M0,{e} A{_n(w / 2)},{e} 0 0 0 {_n(w)},{e}"/>')
    rect = f'<rect {common} x="0" y="0" width="{_n(w)}" height="{_n(h)}" rx="6"/>'
    if kind == "component":  # double border: a component can be drilled into
        rect += f'<rect class="node-inner" x="3" y="3" width="{_n(w - 6)}" height="{_n(h - 6)}" rx="4"{dash}/>'
    return rect


def _node_svg(node, xy, size, lines, st, href) -> str:
    (x, y), (w, h) = xy, size
    kind = re.sub(r"[^A-Za-z0-9_-]", "-", node["kind"])
    cls = f"node kind-{kind}" + (f" status-{st}" if st else "")
    # a linked node is focused through its <a>; a second tab stop on the <g> would be redundant
    focus = "" if href else ' tabindex="0"'
    tip = [node["label"] + (f" ({node['badge']})" if node["badge"] else "")]
    if node["detail"]:
        tip.append(node["detail"])
    if st == "changed" and node["data"].get("a_detail") not in (None, node["detail"]):
        tip.append(f"A: {node['data']['a_detail']}")
    if st in STATUS_MARK:
        tip.append(STATUS_MARK[st])
    dash = f' stroke-dasharray="{STATUS_DASH[st]}"' if st in STATUS_DASH else ""
    top = CACHE_LIP if node["kind"] == "cache" else 0
    out = [f'<g class="{cls}" data-node="{_esc(node["id"])}" data-x="{_n(x)}" data-y="{_n(y)}" '
           f'data-w="{_n(w)}" data-h="{_n(h)}"{focus} transform="translate({_n(x)},{_n(y)})">',
           f"<title>{_esc(chr(10).join(tip))}</title>"]
    if href:
        out.append(f'<a href="{_esc(href)}">')
    out.append(_shape_svg(node["kind"], w, h, dash))
    out.append(f'<text class="node-label" x="{_n(w / 2)}" y="{FIRST_BASELINE + top}">{_esc(node["label"])}</text>')
    if node["badge"]:
        out.append(f'<text class="node-badge" x="{_n(w - 6)}" y="{FIRST_BASELINE + top}">{_esc(node["badge"])}</text>')
    for i, (tcls, text) in enumerate(lines, 1):
        out.append(f'<text class="{tcls}" x="{_n(w / 2)}" y="{FIRST_BASELINE + top + LINE * i}">{_esc(text)}</text>')
    if href:
        out.append("</a>")
    out.append("</g>")
    return "".join(out)


def render_svg(graph: dict, *, status: dict[str, str] | None = None, title: str = "",
               link: Callable[[dict], str | None] | None = None) -> str:
    """One standalone ``<svg>`` element drawing ``graph`` top to bottom.

    ``status`` maps node id -> "same" | "changed" | "only_a" | "only_b" (see ``diff_graphs``);
    ``link(node)`` may return a URL to wrap that node in ``<a href>`` (drill-down).
    Raises ValueError on duplicate node ids, edges naming unknown nodes or unknown statuses.
    """
    status = dict(status or {})
    for nid, st in status.items():
        if st not in STATUSES:
            raise ValueError(f"status of {nid!r} is {st!r}, not one of {STATUSES}")
    nodes, edges = _normalize(graph)
    boxes = {n["id"]: _node_box(n, status.get(n["id"])) for n in nodes}
    sizes = {nid: (b[0], b[1]) for nid, b in boxes.items()}
    pos, geoms = _layout(nodes, edges, sizes)

    xs = [pos[n][0] + sizes[n][0] for n in pos]
    ys = [pos[n][1] + sizes[n][1] for n in pos]
    for e in edges:
        pts, (lx, ly), _ = geoms[_edge_key(e)]
        xs += [p[0] for p in pts] + ([lx + 5 + (len(e["label"]) + 2) * EDGE_CH] if e["label"] else [])
        ys += [p[1] for p in pts]
    width, height = max(xs, default=MARGIN) + MARGIN, max(ys, default=MARGIN) + MARGIN
    # ids are unique per graph (several graphs share one HTML page) yet reproducible
    key = "\n".join([title] + [n["id"] for n in nodes] + [f"{e['src']}\t{e['dst']}" for e in edges])
    pid = "g" + hashlib.sha1(key.encode()).hexdigest()[:10]

    name = title or "Computation graph"
    # role "group", not "img": an image's content is presentational, and these nodes are focusable
    # (axe: nested-interactive); the title names the group
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" role="group" '
             f'aria-labelledby="{pid}-title" viewBox="0 0 {_n(width)} {_n(height)}" width="100%" '
             f'style="max-width:{_n(width)}px" font-family="sans-serif" font-size="12">',
             f'<title id="{pid}-title">{_esc(name)}</title>',
             f"<desc>{len(nodes)} nodes, {len(edges)} edges</desc>", f"<style>{STYLE}</style>",
             f'<defs><marker id="{pid}-arrow" class="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
             f'markerWidth="7" markerHeight="7" orient="auto">'
             f'<path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>']
    # edges first so node boxes paint over edge ends
    parts.extend(_edge_svg(e, geoms[_edge_key(e)], status, pid) for e in edges)
    for n in nodes:
        href = link(n) if link else None
        parts.append(_node_svg(n, pos[n["id"]], sizes[n["id"]], boxes[n["id"]][2], status.get(n["id"]), href))
    parts.append("</svg>")
    return "\n".join(parts)


_VIEWBOX = re.compile(r'viewBox="0 0 ([0-9.]+) ([0-9.]+)"')


def svg_size(svg: str) -> tuple[float, float]:
    """Width and height (drawing units, one per px at natural size) of a :func:`render_svg` drawing."""
    w, h = _VIEWBOX.search(svg).groups()
    return float(w), float(h)


def diff_graphs(a: dict, b: dict) -> tuple[dict, dict[str, str]]:
    """Union of ``a`` and ``b`` with nodes paired by id, and each node's status.

    Status: "same" (label, kind and detail equal), "changed" (the union node is b's, with a's
    detail in ``data["a_detail"]`` and a's label in ``data["a_label"]`` when it differs),
    "only_a", "only_b". Nodes: a's order, then b's extra nodes in b's order. Edges: all edges of
    both, deduplicated by (src, dst, kind), a's order first; each union edge also carries a
    ``"status"`` ("same", "changed" when the labels differ — b's label is kept — "only_a",
    "only_b") which ``render_svg`` draws for edges between nodes present in both graphs.
    Inputs are not modified.
    """
    an, ae = _normalize(a)
    bn, be = _normalize(b)
    bmap = {n["id"]: n for n in bn}
    amap = {n["id"]: n for n in an}
    nodes, status = [], {}
    for n in an:
        other = bmap.get(n["id"])
        if other is None:
            nodes.append(n)
            status[n["id"]] = "only_a"
        elif all(n[k] == other[k] for k in ("label", "kind", "detail")):
            nodes.append(other)
            status[n["id"]] = "same"
        else:
            data = {**n["data"], **other["data"], "a_detail": n["detail"]}
            if n["label"] != other["label"]:
                data["a_label"] = n["label"]
            nodes.append({**other, "data": data})
            status[n["id"]] = "changed"
    for n in bn:
        if n["id"] not in amap:
            nodes.append(n)
            status[n["id"]] = "only_b"
    bedge = {_edge_key(e): e for e in be}
    aedge = {_edge_key(e) for e in ae}
    edges = []
    for e in ae:
        other = bedge.get(_edge_key(e))
        if other is None:
            edges.append({**e, "status": "only_a"})
        elif other["label"] == e["label"]:
            edges.append({**other, "status": "same"})
        else:
            edges.append({**other, "status": "changed", "a_label": e["label"]})
    edges.extend({**e, "status": "only_b"} for e in be if _edge_key(e) not in aedge)
    return {"nodes": nodes, "edges": edges}, status
