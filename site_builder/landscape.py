"""The landscape page (``/landscape/``): the corpus as a 2026 survey of LLM operators would print it.

Layer: site_builder (reads build/results only). Every table and every number comes from
``build/results/landscape.json`` (engine/batch/landscape.py computes them, formulas included);
this module formats labels, writes the page and one CSV twin per table
(``downloads/landscape/<table>.csv``: the same rows and columns, exact values).
"""
from __future__ import annotations

from typing import Any

from site_builder.data import Results, landscape_tables


def csv_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A table's CSV twin: one row per table row, one column per table column (a cell's exact value;
    the model's display name beside its id)."""
    out = []
    for row in table["rows"]:
        line = {}
        for col in table["columns"]:
            cell = row.get(col["key"])
            line[col["key"]] = cell["value"] if isinstance(cell, dict) else cell
            if col["key"] == "model_id":
                line["name"] = row.get("name", cell)
        out.append(line)
    return out


#: The page's tooltips: each cell's formula and the values it was taken at, numbered once per distinct
#: text and published beside the page gzip-compressed (two thirds of the page's bytes as inline
#: attributes; the page loads them after it is drawn, site.js ``formulas_src``).
FORMULAS = "data/landscape-formulas.json.gz"


def tooltip(cell: dict) -> str:
    """A cell's tooltip text: its formula, then the values of the dims it names."""
    where = cell.get("where")
    return cell["formula"] + (f"   where {where}" if where else "")


def past_max(results: Results) -> set[tuple[str, str]]:
    """(model id, column key) of each landscape cell taken at a context past the model's maximum
    context (a column's ``context``, which landscape.json gives the KV table's ``kv_<length>``
    columns): the page marks them, as the charts mark their points past the maximum context."""
    limit = dict(zip(results.models["model_id"], results.models["max_context"]))
    contexts = {c["key"]: c["context"] for t in (results.landscape or {}).get("tables") or []
                for c in t["columns"] if "context" in c}
    return {(m, key) for m, top in limit.items() for key, n in contexts.items() if n > top}


def render(site, results: Results, csv) -> None:
    """Write ``landscape/index.html``, its formula file and its CSV twins (``csv`` turns rows into CSV text)."""
    tables = landscape_tables(results)
    for table in tables:
        site.file(f"downloads/landscape/{table['name']}.csv", csv(csv_rows(table)))
    texts: dict[str, int] = {}
    keys = {id(cell): texts.setdefault(tooltip(cell), len(texts))
            for table in tables for row in table["rows"] for cell in row.values() if isinstance(cell, dict)}
    site.gzip_json(FORMULAS, list(texts))
    past = past_max(results)
    site.page("landscape", "landscape.html", "Landscape", {"page": "landscape", "formulas_src": "../" + FORMULAS},
              tables=tables, formula_key=lambda cell: keys[id(cell)], past=past,
              marked={t["name"] for t in tables if any((r.get("model_id"), c["key"]) in past
                                                        for r in t["rows"] for c in t["columns"])},
              traits=(results.landscape or {}).get("traits") or {})
