"""The site render's shortcuts give what the long way gives (issue 19: the render's CPU).

Consistency tests: the chart specs built once per process and filled per page equal Altair's own
build of each page's specs, text for text; a render worker starts without the engine's evaluation.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from site_builder import charts

REPO = Path(__file__).resolve().parent.parent


def _doc(max_context: int, context: list[int], state: list[float], growing: list[float]) -> dict:
    return {"max_context": max_context,
            "kv_curve": {"context": context, "state_bf16": state, "growing_bf16": growing,
                         "bytes_bf16": [s + g for s, g in zip(state, growing)]}}


DOCS = [_doc(131072, [1024, 4096, 262144], [0.0, 0.0, 0.0], [1.0e6, 4.0e6, 2.6e8]),       # KV only
        _doc(4096, [1024, 8192], [5.0e5, 5.0e5], [1.0e6, 8.0e6]),                          # hybrid, past max
        _doc(32768, [1024, 2048, 4096], [7.5e5, 7.5e5, 7.5e5], [0.0, 0.0, 0.0]),            # state only
        _doc(1024, [1024], [0.0], [0.0]),                                                   # nothing to draw
        _doc(2 ** 20, [2 ** k for k in range(10, 21)], [3.0] * 11, [2.0 ** k * 1.5 for k in range(10, 21)])]


@pytest.mark.parametrize("doc", DOCS)
def test_model_specs_consistency_with_altairs_build(doc):
    """The model page's KV chart from the per-process template is Altair's build for that model:
    the same JSON text (data, view name, key order)."""
    assert json.dumps(charts.model_specs(doc)) == json.dumps(charts._model_specs(doc))


def test_model_specs_consistency_pages_do_not_share_data():
    """Each page's specs are its own: filling one leaves the template and the other pages as built."""
    first = charts.model_specs(DOCS[0])
    text = json.dumps(first)
    charts.model_specs(DOCS[1])["kv"]["layer"][0]["data"]["values"].append({"x": 1})
    first_again = charts.model_specs(DOCS[0])
    assert json.dumps(first) == text == json.dumps(first_again)


@pytest.mark.parametrize("bars", [(1, 1), (3, 2), (12, 8), (0, 5), (40, 1)])
def test_deployment_specs_consistency_with_altairs_build(bars):
    """The deploy page's specs built once and given each page's bar heights are Altair's build
    for those bar counts."""
    charts._deployment_specs.cache_clear()
    assert json.dumps(charts.deployment_specs(*bars)) == json.dumps(charts._deployment_specs(*bars))


def test_render_worker_starts_without_the_engines_evaluation():
    """A spawned render worker imports site_builder/cli.py's top (the spawn's main module) and the
    renderer: neither brings sympy or engine.batch.results (half of a worker's start)."""
    code = ("import sys, site_builder.cli, site_builder.render, site_builder.sizing; "
            "print(sorted(m for m in ('sympy', 'engine.batch.results', 'engine.batch.model_build', 'engine.language.corpus',"
            " 'engine.language.model_load') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"


def test_layout_memo_consistency_with_a_fresh_layout():
    """A drawing whose layout comes from the memo is the drawing laid out afresh: the same SVG
    text as with the memo emptied, and the memo answers the second drawing of the same graph."""
    from site_builder import graph_svg
    graph = {"nodes": [{"id": "a", "label": "x"}, {"id": "b", "label": "long label b", "detail": "d"},
                       {"id": "c", "label": "c", "kind": "cache"}, {"id": "d", "label": "lonely"}],
             "edges": [{"src": "a", "dst": "b", "label": "e1"}, {"src": "b", "dst": "c"}, {"src": "a", "dst": "c"}]}
    graph_svg._LAYOUTS.clear()
    fresh = graph_svg.render_svg(graph, title="t")
    assert len(graph_svg._LAYOUTS) == 1
    again = graph_svg.render_svg(graph, title="t")
    relabelled = graph_svg.render_svg({**graph, "edges": [{**graph["edges"][0], "label": "a longer edge label"},
                                                          *graph["edges"][1:]]}, title="t")
    assert again == fresh and len(graph_svg._LAYOUTS) == 2 and relabelled != fresh
    graph_svg._LAYOUTS.clear()
    assert graph_svg.render_svg(graph, title="t") == fresh


def test_deployment_options_consistency_with_every_distinct_row():
    """The options (rows equal to the one before them dropped first) are the distinct combinations
    of all the rows: repeated rows apart or together, a combination with two formulas, the first row."""
    import random

    import polars as pl

    from site_builder.data import deployment_options
    columns = ["gpu", "n_gpus", "config", "framework", "kv_dtype", "tp", "ep", "dp_attn", "pp",
               "weight_bytes_per_gpu_formula"]
    combos = [("H100", 8, "tp8", "vllm", "bf16", 8, 1, 1, 1, "w*2/8"), ("H100", 8, "tp8", "vllm", "fp8", 8, 1, 1, 1, "w*2/8"),
              ("B200", 8, "tp8", "vllm", "bf16", 8, 1, 1, 1, "w*2/8"), ("H100", 16, "tp8-pp2", "sglang", "bf16", 8, 1, 1, 2, "w/8"),
              ("H100", 16, "tp8-pp2", "sglang", "bf16", 8, 1, 1, 2, "w/8 + e")]
    rng = random.Random(7)
    table = [c for c in combos for _ in range(rng.randint(1, 5))]
    for order in (table, rng.sample(table, len(table))):
        rows = pl.DataFrame([dict(zip(columns, c)) for c in order])
        got = sorted(tuple(o[k] for k in columns) for o in deployment_options(rows))
        assert got == sorted(set(combos))
