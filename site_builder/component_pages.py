"""The components pages: the token mixers under one fixed contract, each drawn as instantiated, and graph diffs.

Layer: site_builder. :func:`_components_inputs` gathers everything the pages show (each attention
component's uses across the corpus, the graph it is drawn from, contracts.json); :func:`_components`
renders from that alone, so the group's key (a hash of it) covers all its pages depend on.

Invariants: a component is drawn as its first use (corpus order) instantiates it; two components'
diff pairs nodes by their declared name (:func:`_short`).
"""
from __future__ import annotations

from site_builder import charts, graphs
from site_builder.data import Results, read_json, slug
from site_builder.graph_svg import diff_graphs, render_svg
from site_builder.writer import Site


def _attention_instances(results: Results) -> dict[str, list[dict]]:
    """Attention component instances per component name, across the corpus."""
    uses: dict[str, list[dict]] = {}
    for model_id, doc in results.documents.items():
        for c in doc["components"]:
            if c["role"] == "attention" and c["stack"] == "main":
                uses.setdefault(c["component"], []).append({
                    "slug": slug(model_id), "name": doc["name"], "uid": c["uid"], "doc": doc,
                    "params": c["params_per_layer"], "layers": c["repeat"]["value"],
                    "kv": c["kv_bytes_per_token_per_layer"]})
    return uses


def _components_inputs(results: Results) -> dict:
    """Everything the components pages show (:func:`_components`): each attention component's
    uses, the graph it is drawn from (its first use's, corpus order) and contracts.json. Their
    group is keyed by a hash of exactly this, so an edit that leaves it unchanged (a model's notes,
    its deployments) carries the pages (their drawings are most of a site-wide re-render)."""
    uses = _attention_instances(results)
    contracts = read_json(results.root / "contracts.json") if (results.root / "contracts.json").exists() else {}
    return {"uses": {name: [{k: v for k, v in u.items() if k != "doc"} for u in found] for name, found in uses.items()},
            "graphs": {name: graphs.level_graph(found[0]["doc"], found[0]["uid"]) for name, found in uses.items()},
            "contracts": contracts}


def _components(site: Site, inputs: dict) -> None:
    """The components pages from :func:`_components_inputs` (and nothing else)."""
    uses, drawn = inputs["uses"], inputs["graphs"]
    names = sorted(uses)
    items = []
    for name in names:
        first = uses[name][0]
        svg = render_svg(drawn[name], title=f"{name} (as in {first['name']})")
        others = [n for n in names if n != name]
        diffs = [{"href": f"../diff/{name}--{o}/", "label": f"{name} vs {o}"} for o in others]
        site.page(f"components/{name}", "component.html", name, {"page": "component"},
                  doc=f"Drawn as instantiated in {first['name']} ({first['uid']}).", svg=svg,
                  uses=uses[name], diffs=diffs, legend=False, a_name="", b_name="")
        items.append({"href": f"{name}/", "label": name, "note": f"used by {len(uses[name])} layer templates"})
    for a in names:
        for b in names:
            if a == b:
                continue
            ua, ub = uses[a][0], uses[b][0]
            union, status = diff_graphs(_short(drawn[a]), _short(drawn[b]))
            svg = render_svg(union, status=status, title=f"{a} vs {b}")
            site.page(f"components/diff/{a}--{b}", "component.html", f"{a} vs {b}", {"page": "diff"},
                      doc=f"Nodes paired by their declared name: {a} as in {ua['name']}, {b} as in {ub['name']}.",
                      svg=svg, uses=[], diffs=[], legend=True, a_name=a, b_name=b)
            items.append({"href": f"diff/{a}--{b}/", "label": f"graph diff: {a} vs {b}", "note": ""})
    contracts = inputs["contracts"]
    specs = {slot: charts.contract_specs(c) for slot, c in contracts.items()}
    contracts = {slot: {**c, "panels": charts.contract_panels(c)} for slot, c in contracts.items()}
    site.page("components", "components.html", "Components", {"page": "components", "specs": specs},
              items=items, contracts=contracts, paged=set(names), panel_lines=charts.PANEL_LINES,
              intro="The token mixers (attention and its linear-time successors) side by side under one fixed "
                    "contract; the attention components the corpus uses drawn as instantiated in the models, "
                    "and graph diffs between every pair.")


def _short(graph: dict) -> dict:
    """Node ids by declared name (the last uid segment), so two components pair node by node."""
    rename = {n["id"]: n["id"].rsplit("/", 1)[-1] for n in graph["nodes"]}
    nodes = [{**n, "id": rename[n["id"]]} for n in graph["nodes"]]
    edges = [{**e, "src": rename.get(e["src"], e["src"]), "dst": rename.get(e["dst"], e["dst"])} for e in graph["edges"]]
    return {"nodes": nodes, "edges": edges}

