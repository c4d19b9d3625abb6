"""The playground page (what-if variants, never in the gallery) and each model's live picks.

Layer: site_builder. ``/playground/`` shows results/variants.json's variants (old -> new recomputed
in the browser from the exported formula trees) with the graph diffs of their swaps; each model's
picks (results/playground/<org--name>.json) are written with that model's page group.

Invariants: a graph diff is laid out once per (old, new) pair, from the first model (corpus order)
whose pick makes it, and a drawing of the previous site is reused only when what it draws and the
layout's code (:data:`_GRAPH_CODE`) are unchanged (the same inputs draw the same SVG).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

from engine.batch import publish
from site_builder import graph_svg, graphs
from site_builder.component_pages import _attention_instances, _short
from site_builder.data import Results, read_json, slug
from site_builder.json_cuts import json_without
from site_builder.graph_svg import diff_graphs, render_svg
from site_builder.incremental import _hash, _results_inputs
from site_builder.writer import Site


def _playground_key(code: str, results: Results) -> str | None:
    """The playground's inputs: the renderer and variants.json (the page reads nothing else but
    the corpus models' documents for the graph diffs, whose inputs the manifest's models carry)."""
    path = results.root / "variants.json"
    if not path.exists():
        return None
    _, corpus_wide = _results_inputs(results)
    return _hash(code, publish.file_digest(path), corpus_wide.get("models")) if corpus_wide else None


def _playground(site: Site, results: Results, previous: Path | None = None) -> None:
    """``/playground/``: the what-if variants (results/variants.json, never in the gallery), each
    with its old -> new table recomputed in the browser from the exported formula trees as its
    dims change (static/js/formula.js), the build-time comparison per layer group, and the graph
    diff of the swapped mixer as the corpus instantiates both; plus the catalog of slots and the
    library components fitting each."""
    path = results.root / "variants.json"
    doc = read_json(path) if path.exists() else {"variants": [], "catalog": {}, "used": {}, "dims": {}}
    uses = _attention_instances(results)
    for v in doc["variants"]:
        v["slug"] = slug(v["model_id"])
        v["rows"] = [("whole model", "", v["model"]["old"], v["model"]["new"])] + [
            (g["group"], f"{g['layers_old']} -> {g['layers_new']}", g["old"], g["new"]) for g in v["groups"]]
        base = doc["catalog"].get(v["variant_of"], {}).get("slots", {})
        v["diffs"] = []
        for swap in v["swaps"]:
            slot, new = re.match(r".*\]\.(\w+)=(\w+)", swap).groups()
            for old in base.get(slot, {}).get("current", []):
                if old != new and old in uses and new in uses:
                    ua, ub = uses[old][0], uses[new][0]
                    union, status = diff_graphs(_short(graphs.level_graph(ua["doc"], ua["uid"])),
                                                _short(graphs.level_graph(ub["doc"], ub["uid"])))
                    v["diffs"].append({"a": old, "b": new, "a_in": ua["name"], "b_in": ub["name"],
                                       "svg": render_svg(union, status=status, title=f"{old} vs {new}")})
    site.gzip_json(_PLAYGROUND_DIFFS, _playground_diffs(results, uses, _drawn_before(previous)))
    live = {m: _PLAYGROUND_DATA.format(slug(m)) for m in results.models["model_id"].to_list()   # any catalog pick
            if (results.root / "playground" / f"{slug(m)}.json").exists()}                     # (_playground_data)
    data = {"page": "playground", "variants": [{k: v[k] for k in (
        "variant", "display_name", "variant_of", "base_name", "swaps", "bind_list", "formulas", "env", "recomputed",
        "setting")} for v in doc["variants"]], "catalog": doc["catalog"], "used": doc["used"], "dims": doc["dims"],
        "names": {m: c["name"] for m, c in doc["catalog"].items()}, "live": live, "drawn": sorted(uses),
        "diffs": _PLAYGROUND_DIFFS}
    site.page("playground", "playground.html", "Playground (what-if designs)", data, variants=doc["variants"],
              setting=doc.get("setting", {}))


_PLAYGROUND_DATA = "data/playground/{}.json.gz"
#: The layout's own code: a drawing is reused (_playground_diffs) only when drawn by the same layout.
_GRAPH_CODE = hashlib.sha256(Path(graph_svg.__file__).read_bytes()).hexdigest()
_PLAYGROUND_DIFFS = "data/playground/diffs.json.gz"


def _drawn_before(previous: Path | None) -> dict[str, str]:
    """The previously published site's playground drawings by the digest of what they draw
    (``key``), or nothing when it has none that can be read."""
    try:
        entries = json.loads(gzip.decompress((Path(previous) / _PLAYGROUND_DIFFS).read_bytes()))
        return {e["key"]: e["svg"] for e in entries.values() if isinstance(e, dict) and "key" in e}
    except (OSError, TypeError, ValueError, AttributeError, KeyError, EOFError):
        return {}


def _playground_diffs(results: Results, uses: dict, drawn: dict[str, str] | None = None) -> dict[str, dict]:
    """The graph diff of every (old filler, new component) pair a live pick makes that the
    components pages do not draw (they draw the token mixers corpus models use): ``old--new`` ->
    the drawing (old as the base's document has it at the slot's site, new as the pick's walk puts
    it there: engine.playground.whatif.block_graph) and the models each side is drawn from. One drawing
    per pair, from the first model (corpus order) whose pick makes it. ``key`` is the SHA-256 of
    what a drawing draws; ``drawn`` (key -> drawing, the previous site's) is reused, not laid out
    again: the layout is most of the playground's render, and the same inputs (and layout code,
    :data:`_GRAPH_CODE`) draw the same SVG."""
    drawn = drawn or {}
    out: dict[str, dict] = {}
    for model_id in results.models["model_id"].to_list():
        path = results.root / "playground" / f"{slug(model_id)}.json"
        base = results.documents.get(model_id)
        if not path.exists() or base is None:
            continue
        doc = read_json(path)
        at = {c["uid"]: c["component"] for c in base["components"]}
        for picks in doc["picks"].values():
            for new, p in picks.items():
                for block in (doc["graphs"][i] for i in p.get("graphs", [])):
                    old = at.get(block["site"])
                    key = f"{old}--{new}"
                    if old is None or old == new or key in out or (old in uses and new in uses):
                        continue
                    a, b = _short(graphs.level_graph(base, block["site"])), _short(graphs.level_graph(block, block["site"]))
                    title = f"{old} vs {new}"
                    digest = hashlib.sha256(json.dumps([a, b, title, _GRAPH_CODE], sort_keys=True).encode()).hexdigest()
                    svg = drawn.get(digest)
                    if svg is None:
                        union, status = diff_graphs(a, b)
                        svg = render_svg(union, status=status, title=title)
                    out[key] = {"svg": svg, "a_in": base["name"], "key": digest}
    return out


def _playground_data(site: Site, results: Results, model_id: str) -> None:
    """The playground's live picks of one base model (results/playground/<org--name>.json,
    engine.playground.whatif.model_playground), compressed beside the model's other data: rendered with
    the model's pages, so a model whose results did not change keeps its file."""
    source = results.root / "playground" / f"{slug(model_id)}.json"
    if source.exists():        # the blocks' graphs are drawn once for the corpus (_playground_diffs)
        site.gzip_text(_PLAYGROUND_DATA.format(slug(model_id)), json_without(source.read_text(), "graphs"))

