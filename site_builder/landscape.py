"""The landscape page (``/landscape/``): the corpus as a 2026 survey of LLM operators would print it.

Layer: site_builder (reads build/results only). Every table and every number comes from
``build/results/landscape.json`` (engine/build/landscape.py computes them, formulas included);
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


def render(site, results: Results, csv) -> None:
    """Write ``landscape/index.html`` and its CSV twins (``csv`` turns rows into CSV text)."""
    tables = landscape_tables(results)
    for table in tables:
        site.file(f"downloads/landscape/{table['name']}.csv", csv(csv_rows(table)))
    site.page("landscape", "landscape.html", "Landscape", {"page": "landscape"}, tables=tables,
              traits=(results.landscape or {}).get("traits") or {})
