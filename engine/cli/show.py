"""``archledger show`` (one model's overview, with formulas) and ``archledger list`` (the corpus).

Layer: engine.cli (imports engine.language).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from engine.cli import units

if TYPE_CHECKING:   # sympy is imported by the commands that evaluate, not by `--help` or the parser
    import sympy


def add_parsers(sub, parents=()) -> dict[str, argparse.ArgumentParser]:
    parents = list(parents)
    show = sub.add_parser("show", parents=parents, help="overview of one model: params, checkpoint bytes, KV per token")
    show.add_argument("model", help="HF id or a unique suffix, e.g. DeepSeek-V3")
    show.add_argument("--formula", action="store_true", help="print the formula behind each number")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp8"], help="KV cache dtype")
    show.add_argument("--weight-format", default="checkpoint",
                      help="the storage the checkpoint figures are of: checkpoint (the spec's own), a published "
                           "checkpoint's format or id (the spec's `checkpoints:`, e.g. fp8), or a quant scheme for every matrix")
    show.set_defaults(func=cmd_show)

    from engine.cli import common_options
    lst = sub.add_parser("list", parents=[*parents, common_options(corpus=False)],
                         help="the models in the corpus (from the build's results when its inputs are unchanged)")
    lst.set_defaults(func=cmd_list)
    return {"show": show, "list": lst}


def _human(value: sympy.Expr, unit: str = "") -> str:
    """1234567 -> '1.23 M' (the one formatter, engine/cli/units.py); the exact integer beside it."""
    return units.si(float(value), unit)


def _formula(expr: sympy.Expr) -> str:
    return str(expr)


def _flatten(overview: dict) -> list[tuple[str, object]]:
    rows = []
    for key, value in overview.items():
        if isinstance(value, dict):
            rows.extend((f"{key}[{sub}]", q) for sub, q in value.items())
        else:
            rows.append((key, value))
    return rows


def cmd_show(args: argparse.Namespace) -> int:
    from dataclasses import replace
    from engine.deploy.planner import weight_format_model
    from engine.language.api import evaluate
    ev = evaluate(args.model, args.corpus)
    formats = ev.weight_formats()       # every published checkpoint, whichever storage is shown
    ev = replace(ev, model=weight_format_model(ev.model, ev.corpus, args.weight_format))
    overview = ev.overview(args.kv_dtype)
    if args.json:
        out = {"model_id": ev.model.model_id, "family": ev.model.family, "kv_dtype": args.kv_dtype,
               "weight_format": args.weight_format,
               "bound": {k: int(v) for k, v in sorted(ev.bound.items())},
               "weight_formats": [{"format": f["format"], "model_id": f["model_id"], "bytes": int(f["bytes"].value),
                                   "tensors": int(f["tensors"].value)} for f in formats]}
        for key, q in _flatten(overview):
            out[key] = {"value": int(q.value), "formula": _formula(q.formula)}
        if ev.model.config_defaults:   # config fields the modeling code supplies (spec config_defaults)
            out["config_defaults"] = {d.field: {"value": d.value, "src": d.src, "applied": d.applied}
                                      for d in ev.model.config_defaults.values()}
        if ev.model.unverified:        # the spec's declaration: these numbers are checked by nothing
            out["unverified"] = ev.model.unverified
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(f"{ev.model.display_name}  ({ev.model.model_id}, {ev.model.model_type})")
    if ev.model.unverified:
        print(f"  UNVERIFIED: {ev.model.unverified}")
    if len(formats) > 1:
        print("  published checkpoints (--weight-format): " + "; ".join(
            f"{f['format']} {f['model_id']} {_human(f['bytes'].value, 'B')}" for f in formats))
    units = {"params": "", "checkpoint_bytes": "B", "kv": "B"}
    for key, q in _flatten(overview):
        unit = next((u for prefix, u in units.items() if key.startswith(prefix)), "")
        print(f"  {key:44s} {int(q.value):>20,}  {_human(q.value, unit)}")
        if args.formula:
            print(f"  {'':44s} = {_formula(q.formula)}")
    if args.formula:
        print("  bound: " + ", ".join(f"{k}={int(v)}" for k, v in sorted(ev.bound.items())))
        for d in ev.model.config_defaults.values():
            state = "default" if d.applied else "config.json gives its own value"
            print(f"  config default: {d.field} = {d.value!r} ({state}; src: {d.src})")
    return 0


#: The models.parquet columns ``list`` shows or orders by (the build wrote them from the same evaluation).
LIST_COLUMNS = ["family", "model_type", "params_total", "lineage", "generation", "release_position"]


def cmd_list(args: argparse.Namespace) -> int:
    """The corpus as the gallery orders it: lineage, family in release order, the model's place in
    its family's release list (corpus/lineage.yaml), then size; a header names the columns. A spec
    declaring ``unverified:`` ends its row with ``(unverified: <why>)`` (the build never publishes it).

    On a built checkout whose inputs are unchanged the rows come from build/results/models.parquet
    without loading the corpus (no sympy: :mod:`engine.batch.built`); a model whose input hash
    differs from the build's is evaluated, as every model is without a build (same numbers)."""
    rows = _listed(args)
    # each column as wide as its longest entry (a model_type of 12+ characters ran into FAMILY)
    width = max([len("MODEL")] + [len(r["model_id"]) for r in rows])
    kind = max([len("TYPE")] + [len(r["model_type"]) for r in rows])
    print(f"{'MODEL':{width}s} {'PARAMS':>8s}  {'TYPE':{kind}s}  FAMILY")
    for r in sorted(rows, key=lambda r: (r["lineage"].lower(), r["generation"], r["release_position"],
                                         r["params_total"], r["model_id"])):
        # a spec declaring `unverified:` is listed with its reason (the gallery leaves it out)
        why = f"  (unverified: {r['unverified']})" if r.get("unverified") else ""
        print(f"{r['model_id']:{width}s} {units.si(r['params_total']):>8s}  {r['model_type']:{kind}s}  {r['family']}{why}")
    return 0


def _listed(args: argparse.Namespace) -> list[dict]:
    """One row (model_id and :data:`LIST_COLUMNS`) per model of the corpus: the build's where its
    input hash is the build's, else evaluated."""
    from pathlib import Path
    from engine.batch import built
    corpus_root, gpu_root = Path(args.corpus), Path(args.gpus_root)
    done = built.read(Path(args.out) / "results", LIST_COLUMNS)
    if done is not None and built.unchanged(done, corpus_root, gpu_root):
        ids = built.corpus_models(done)
        # a declared-unverified spec is never published: its row is the manifest's (the build's walk)
        listed, why = built.unverified_rows(done, LIST_COLUMNS)
        if ids and all(m in done.rows or m in listed for m in ids):
            return [done.rows[m] if m in done.rows else {"model_id": m, **listed[m], "unverified": why[m]} for m in ids]
    from engine.batch.hashing import model_hash
    from engine.batch.landscape import list_row, load_lineage
    from engine.language.corpus import load_corpus
    corpus = load_corpus(args.corpus)
    shared = done.shared_hash_now(corpus.root, gpu_root) if done is not None else None
    reusable = shared is not None and shared == done.manifest.get("shared_hash")
    table = load_lineage(corpus.root)
    rows = []
    for model in corpus.models.values():
        row = done.rows.get(model.model_id) if reusable else None
        if row is None or row["spec_hash"] != model_hash(corpus, model.model_id, shared):
            row = list_row(corpus, model, table)
        rows.append({**row, "unverified": model.unverified} if model.unverified else row)
    return rows
