"""A model's deployments page and what every deploy and sizing page shares.

Layer: site_builder. The page evaluates any (prompt, output, batch) in the browser from the
structures' formula trees (static/js/formula.js); this module writes its data: the model-wide part
(``data/deploy/<model>/index.json.gz``), one file of programs and trees per (config, scale-up
domain), the grid's fronts, the per-op measured sources, and :data:`DEPLOY_SHARED` once for all.

Invariants: every number comes from the results (the grid's rows, the formula documents, the
fronts); the GPU comparison ranks by the steady state's rule (engine.serving.steady, the fronts'
``FRONT_BASIS``); files are compact gzip-compressed JSON with no timestamp (same value, same bytes).
"""
from __future__ import annotations

import polars as pl

from engine.serving.steady import steady_rate
from site_builder import charts
from site_builder.data import (Results, config_twins, deploy_formulas, deployment_options, deployment_rows,
                               expected_files, front_files, slug, split_formulas)
from site_builder.writer import Site

COMPARE_INPUT = 4096


def _deploy(site: Site, results: Results, model_id: str, sizing_page: bool = False) -> None:
    doc = results.documents[model_id]
    name = slug(model_id)
    rows = deployment_rows(results, model_id)
    options = deployment_options(rows)
    # a combination's weight formula is shared by every GPU, framework and KV dtype: sent once per model
    weight_formulas = sorted({o["weight_bytes_per_gpu_formula"] for o in options})
    weight_number = {f: i for i, f in enumerate(weight_formulas)}
    for o in options:
        o["weight_formula"] = weight_number[o.pop("weight_bytes_per_gpu_formula")]
    decode = rows.filter(pl.col("phase") == "decode").drop("phase")
    # the GPU comparison: each evaluated combination's best decode throughput among the points the
    # steady state of continuous batching serves (the fronts' rule, FRONT_BASIS)
    rate = steady_rate()
    best = (decode.filter(pl.col("fits_steady") & (pl.col("input_len") == COMPARE_INPUT))
            .group_by(["gpu", "n_gpus", "config", "framework", "kv_dtype"])
            .agg(rate.max().alias("best_tokens_per_s_per_gpu"), pl.col("batch").sort_by(rate).last().alias("at_batch"))
            .sort(["gpu", "n_gpus", "config", "framework", "kv_dtype"]))    # every key: group_by's order is random
    # ... and each GPU type's best combination (one bar per GPU in the comparison chart)
    per_gpu = (best.sort("best_tokens_per_s_per_gpu", descending=True, maintain_order=True)
               .group_by(["gpu", "framework", "kv_dtype"], maintain_order=True).first())
    # the page evaluates any (prompt, output, batch) from the structures' formula trees: the model-wide
    # part (GPU rates, configs, options) goes into index.json.gz, each (config, scale-up domain) gets one
    # file of its programs and trees (what one selection fetches); the grid's values are suggestions
    formulas = deploy_formulas(results, model_id)
    model: dict = {}
    if formulas is not None:
        model, files = split_formulas(formulas)
        for key, text in files.items():          # compact JSON, as gzip_json writes it
            site.gzip_text(f"data/deploy/{name}/{key}.json.gz", text)
        found = {(o["gpu"], o["n_gpus"], o["config"], o["framework"]): o for o in model.pop("options")}
        for o in options:
            f = found.get((o["gpu"], o["n_gpus"], o["config"], o["framework"]))
            if f is not None:
                o.update({k: f[k] for k in ("cfg", "file", "limits", "reserve", "overlap", "admission", "prefill", "decode", "mtp",
                                             "expected") if k in f})
    grid = {k: decode[c].unique().sort().to_list() for k, c in
            (("inputs", "input_len"), ("outputs", "output_len"), ("batches", "batch"))}
    # the grid's fronts, one small file per (framework, KV dtype, prompt, output): the front chart at a
    # grid point fetches its one file; off the grid (or with MTP drafting) it evaluates the configs
    fronts = []
    for (fw, kv, prompt, output), table in front_files(results, model_id).items():
        site.gzip_json(f"data/deploy/{name}/{FRONTS_DIR}/{fw}-{kv}-{prompt}-{output}.json.gz", table)
        fronts.append([fw, kv, prompt, output])
    site.gzip_json(f"data/deploy/{name}/index.json.gz",
                   {"options": options, "weight_formulas": weight_formulas, "best": best.to_dicts(),
                    "twins": config_twins(results, model_id),
                    "best_per_gpu": per_gpu.to_dicts(), "grid": grid, "model": model, "fronts": fronts,
                    "output_len": int(decode["output_len"].min()) if decode.height else 0})
    # each op's measured source at the grid's per-op points (ops.parquet), for the per-op table's
    # tooltips: one file per (config, scale-up domain), as the formulas, so one selection fetches its own
    cfg_of = {(o["gpu"], str(o["n_gpus"]), o["config"], o["framework"]): o["cfg"] for o in options if "cfg" in o}
    for cfg, tips in expected_files(results, model_id, cfg_of).items():
        site.gzip_json(f"data/deploy/{name}/expected-{cfg}.json.gz", tips)
    # the bar charts' heights: the most bars one selection can show (GPU types; configs per GPU type and count)
    # (the specs and texts every deploy page shares are in DEPLOY_SHARED, fetched once)
    specs = charts.deployment_specs(
        gpu_bars=max([r[-1] for r in per_gpu.group_by(["framework", "kv_dtype"]).len().iter_rows()], default=1),
        config_bars=max([r[-1] for r in best.group_by(["gpu", "n_gpus", "framework", "kv_dtype"]).len().iter_rows()], default=1))
    data = {"page": "deploy", "slug": name, "max_context": doc["max_context"],
            "specs": {k: specs[k] for k in PAGE_SPECS},
            # the model's dims, for the per-op formulas' "where" line (the point's batch, seq, ctx beside them)
            "bound": {d["name"]: d["value"] for d in doc["dims"]},
            "kv_rows": charts.kv_rows(doc["kv_curve"], doc["max_context"]), "compare_input": COMPARE_INPUT}
    site.page(f"models/{name}/deploy", "deploy.html", f"{doc['name']} deployments", data,
              doc=doc, slug=name, compare_input=COMPARE_INPUT, sizing_page=sizing_page)


#: What every deploy and sizing page shares, in one file each page fetches (a browser keeps it across
#: pages) rather than in every page's HTML (17 KB a page): the chart specs that do not depend on the
#: model, the Parquet column docs behind the summary's numbers, and the roofline's GPU figures.
DEPLOY_SHARED = "data/deploy/page.json.gz"
#: The folder of a model's precomputed grid fronts under data/deploy/<model>/ (:func:`_deploy`).
FRONTS_DIR = "fronts"
#: The deploy page's specs that stay in its own page data: the bar charts, sized for its model.
PAGE_SPECS = ("gpus", "ep")


def _deploy_shared(site: Site, results: Results) -> None:
    """:data:`DEPLOY_SHARED`: the model-independent chart specs (the deploy page's batch, KV,
    roofline and throughput/interactivity charts; the sizing page's front is the same spec), the
    column docs (:func:`_schema_docs`) and the build's figures of every GPU (the roofline's roofs)."""
    specs = charts.deployment_specs()
    site.gzip_json(DEPLOY_SHARED, {
        "specs": {**{k: v for k, v in specs.items() if k not in PAGE_SPECS},
                  "roofline": charts.roofline_spec(), "front": charts.front_spec()},
        "docs": dict(_schema_docs()), "gpus": (results.landscape or {}).get("gpus") or {}})


_SCHEMA_DOCS: dict[str, str] = {}


def _schema_docs() -> dict[str, str]:
    """The Parquet column docs (engine.batch.schema.DEPLOYMENTS_SCHEMA's, by column), shown as the
    definition behind each deployment number; a render worker is handed them (:func:`_worker_start`).
    From the schema module, not engine.batch.results (which imports the build: sympy and the spec
    language, 0.4 s of a lone `archledger site`)."""
    if not _SCHEMA_DOCS:
        from engine.batch.schema import DEPLOYMENTS_SCHEMA, UNSTORED
        _SCHEMA_DOCS.update({k: v[1] for k, v in DEPLOYMENTS_SCHEMA.items()})
        _SCHEMA_DOCS.update(UNSTORED)       # what the page shows beside the columns, not stored
    return _SCHEMA_DOCS

