"""The gallery, the model inspector, the compare page and the methodology pages.

Layer: site_builder. Each function writes one page group's files through a
:class:`site_builder.writer.Site` from the results (:class:`site_builder.data.Results`); the
numbers arrive with their formulas and are only displayed (nothing here evaluates a spec).
:data:`DOCS` lists the repo's Markdown pages published under ``/methodology/`` (rendered with raw
HTML off); tests point it at copies, so the renderer reads it from this module.
"""
from __future__ import annotations

import json
import re

import polars as pl
from markdown_it import MarkdownIt

from engine.language.memo import remembered
from site_builder import charts, graphs
from site_builder.data import Results, gallery_index, lineages, slug, trait_index
from site_builder.deploy_pages import COMPARE_INPUT, _schema_docs
from site_builder.graph_svg import render_svg, svg_size
from site_builder.sources import REPO
from site_builder.writer import Site, _csv
from site_builder.templating import anchor

DOCS = [("architecture", REPO / "docs" / "architecture.md", "Architecture: packages and data flow"),
        ("deployment", REPO / "docs" / "deployment.md", "Deployment accounting: SOL, KV, communication, fusion"),
        ("results", REPO / "docs" / "results.md", "The Parquet tables"),
        ("spec-language", REPO / "docs" / "spec-language.md", "The spec language"),
        ("verification", REPO / "docs" / "verification.md", "Verification: guards and evidence"),
        ("security", REPO / "docs" / "security.md", "Security and failure model"),
        ("scaling", REPO / "docs" / "scaling.md", "Scaling the build: the distributed executor"),
        ("scaling-2", REPO / "docs" / "scaling-2.md", "Scaling the build, continued: the eleventh pass onwards"),
        ("contributing", REPO / "CONTRIBUTING.md", "How to add a model, component, op, GPU or fusion rule")]
OVERVIEW = [("params_total", "Parameters"), ("params_active", "Active per token (with embedding)"),
            ("params_embedding", "Embedding"), ("n_layers", "Layers"), ("max_context", "Max context"),
            ("checkpoint_bytes", "Checkpoint bytes"), ("checkpoint_tensors", "Checkpoint tensors"),
            ("kv_bytes_per_token_growing", "KV per token (BF16)"), ("kv_fixed_bytes", "KV fixed per request")]
#: The widest drawing a model page shows unzoomed (px): its content column (static/css/site.css's
#: ``main``, less its padding). A wider one would be shrunk to fit, so it gets zoom and pan
#: (static/js/panzoom.js), as the components pages have.
ZOOM_WIDTH = 1138


def _gallery(site: Site, results: Results) -> None:
    index = gallery_index(results)
    site.file("data/index.json", json.dumps(index))
    rows = [{k: v for k, v in m.items() if k not in ("formulas", "dims")} for m in index]
    site.file("downloads/gallery.csv", _csv(rows))
    families = sorted({m["family"] for m in index})
    site.page("", "gallery.html", "Gallery", {"page": "gallery", "bounds": {m["slug"]: m["dims"] for m in index}},
              models=index, families=families,
              traits=trait_index(results, index), lineages=lineages(index), unverified=results.unverified)


def _model(site: Site, results: Results, model_id: str) -> None:
    doc = results.documents[model_id]
    name = slug(model_id)
    row = results.models.filter(pl.col("model_id") == model_id).row(0, named=True)
    levels = []
    for level in graphs.levels(doc):
        graph = graphs.level_graph(doc, level["uid"])
        if not graph["nodes"]:
            continue
        svg = render_svg(graph, title=level["uid"],
                         link=lambda node: f"#c-{anchor(node['data']['uid'])}" if node["kind"] == "component" else None)
        # the outermost drawing is inline; deeper ones load when their <details> opens (page weight),
        # stored gzip-compressed (a tenth of the bytes; static/js/site.js archText inflates them)
        name_svg = f"graphs/{anchor(level['uid'])}.svg.gz"
        if levels:
            site.gzip_text(f"models/{name}/{name_svg}", svg)
        plans = [p for p in doc.get("layer_plan", []) if graphs.child_of(p["uid"], level["uid"]) == p["uid"]]
        levels.append({**level, "anchor": anchor(level["uid"]), "svg": svg if not levels else "",
                       "src": name_svg if levels else "", "plans": plans, "zoom": svg_size(svg)[0] > ZOOM_WIDTH})
    site.gzip_json(f"data/models/{name}.json.gz", doc)
    op_rows = [{"uid": o["uid"], "op": o["op"], "out_shape": " x ".join(o["out_shape"]),
                "params": o["params"]["value"], "params_formula": o["params"]["formula"],
                "layers": o["repeat"]["value"],
                "flops_prefill": o.get("flops_prefill", {}).get("value"),
                "flops_prefill_formula": o.get("flops_prefill", {}).get("formula"),
                "bytes_prefill": o.get("bytes_prefill"),
                "flops_decode": o.get("flops_decode", {}).get("value"), "bytes_decode": o.get("bytes_decode")}
               for o in doc["ops"]]
    site.file(f"models/{name}/ops.csv", _csv(op_rows))
    dims = {d["name"]: d["value"] for d in doc["dims"]}
    # the bytes columns share one definition: sent once in the page data, named by each number (data-dk)
    defs = {"bytes": "HBM bytes read and written at the reference point (one GPU, unfused, BF16): the op's "
                     "inputs, outputs and weights, all layers"}
    site.page(f"models/{name}", "model.html", doc["name"],
              {"page": "model", "bound": dims, "defs": defs, "specs": {"model": charts.model_specs(doc)}},
              doc=doc, row=row, slug=name, levels=levels, overview_keys=OVERVIEW)


def _compare(site: Site, results: Results) -> None:
    index = gallery_index(results)
    shown = ("fits", "weight_bytes_per_gpu", "kv_bytes_per_gpu", "activation_bytes_per_gpu", "free_bytes_per_gpu",
             "usable_bytes_per_gpu", "ttft_s", "tpot_s", "max_concurrent_requests", "tokens_per_s_per_gpu")
    site.page("compare", "compare.html", "Compare",
              {"page": "compare", "compare_input": COMPARE_INPUT, "docs": {k: _schema_docs()[k] for k in shown}},
              models=index)


#: Each docs page's HTML by its Markdown text, in this process: MarkdownIt's rendering (0.4 s for
#: docs/, a pure function of the text under :func:`_methodology`'s fixed rules) repeated for every site
#: a process renders (a test worker renders dozens).
_RENDERED: dict = {}


def _methodology(site: Site, texts: dict[str, str]) -> None:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    # a table scrolls in its own box (.table-wrap), as every other table of the site: a wide one
    # (architecture.md's packages) made the page 698 px wide on a 390 px phone
    for side, markup in (("table_open", '<div class="table-wrap">'), ("table_close", "")):
        def rule(renderer, tokens, idx, options, env, _markup=markup, _side=side):
            html = renderer.renderToken(tokens, idx, options, env)
            return _markup + html if _side == "table_open" else html + "</div>\n"
        md.add_render_rule(side, rule)
    items = []
    pages = {path.name: name for name, path, _ in DOCS}

    def relink(match: re.Match) -> str:
        target = match.group(1).split("#")[0].rsplit("/", 1)[-1]
        return f'href="../{pages[target]}/"' if target in pages else match.group(0)

    for name, path, title in DOCS:
        # links between the Markdown files point at their pages here
        body = re.sub(r'href="([^"]+\.md(?:#[^"]*)?)"', relink,
                      remembered(_RENDERED, texts[name], lambda: md.render(texts[name]), 32))
        site.page(f"methodology/{name}", "doc.html", title, {"page": "doc"}, body=body)
        items.append({"href": f"{name}/", "label": title, "note": ""})
    site.page("methodology", "listing.html", "Methodology", {"page": "methodology"}, items=items,
              intro="How every number on this site is defined and computed, and how to add to the corpus.")
