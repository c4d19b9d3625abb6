"""The corpus landscape: architecture traits per model and the survey tables of the landscape page.

Layer: engine.batch -> build/results. Three pieces, all computed here so the site only displays:

* :func:`traits` — what a model's evaluated graph uses (MoE, MLA, sparse attention, sliding
  window, compressed KV, linear/SSM mixers, hybrid stacks, MTP), read from its ops, components,
  caches and stacks (never from its name). Written to ``models.parquet`` (``traits``) with the
  model's lineage (``lineage``, ``generation``) from ``corpus/lineage.yaml``.
* :func:`model_facts` — per model, with formulas: KV bytes per token of context at 4K/128K/1M,
  expert counts and widths, parameters total/active, and the decode arithmetic intensity of each
  attention kind (the weight-free attention ops: score, softmax, apply and the cache reads, at one
  request and a 4096-token context on one GPU, the model document's reference point). Written into
  the model document (``models/<org--name>.json``, key ``landscape``), computed in the worker.
* :func:`tables` — the landscape tables (``landscape.json``) assembled from those facts and
  ``gpus/*.yaml``: the ridge point of each GPU (bf16 peak FLOP/s over HBM bytes/s) and the tokens
  an expert needs per step for its matmuls to reach it.

Invariant: every cell is ``{"value", "formula"}`` and the formula evaluated at the dims (and the
GPU figures it names) gives the value; docs/results.md documents each column.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import sympy

from engine.batch.hashing import LINEAGE_FILE   # (re-exported: the hashes read the file too)
from engine.language import kv, symbols
from engine.language.api import Evaluation
from engine.language.errors import SpecError, Where
from engine.language.file_schemas import LINEAGE
from engine.language.reader import Reader
from engine.language.quantities import quantity as _q

#: Trait order on the site (the gallery's filter bar and the landscape page) with one line each.
TRAITS = {
    "moe": ("MoE", "Mixture of experts: weights stored more times than a token uses them."),
    "mla": ("MLA", "Multi-head latent attention: a compressed latent (mla_latent) is cached instead of keys and values."),
    "sparse": ("Sparse attention", "Each query reads only the top-k cached tokens an indexer selects (token_topk)."),
    "sliding": ("Sliding window", "At least one cache is capped by a window."),
    "compressed": ("Compressed KV", "A cache adds one entry every few tokens."),
    "linear": ("Linear / SSM", "A recurrent mixer keeps a fixed-size state per request."),
    "hybrid": ("Hybrid", "Layers mix more than one kind of token mixer (attention kinds or window variants)."),
    "mtp": ("MTP", "Multi-token prediction: an extra stack predicts further tokens."),
}

#: Contexts of the KV table (tokens).
KV_CONTEXTS = {"4k": 4096, "128k": 131072, "1m": 1048576}

#: Bytes per element of the ridge-batch model: BF16 weights and activations (see docs/results.md).
RIDGE_BYTES = 2



def traits(ev: Evaluation) -> list[str]:
    """The model's architecture traits (keys of :data:`TRAITS`), from its evaluated main stack."""
    num = ev.numeric
    main_caches = [c for c in num.caches if c.stack == "main"]
    ops = {r.op for r in num.rows.values() if r.stack == "main"}
    comps = [c for c in num.components.values() if c.stack == "main"]
    found = set()
    if any(c.instances != c.active for c in comps):
        found.add("moe")
    if any(c.kind == "mla_latent" for c in main_caches):
        found.add("mla")
    if "token_topk" in ops:
        found.add("sparse")
    if any(c.growth == "window" for c in main_caches):
        found.add("sliding")
    if any(c.growth == "compressed" for c in main_caches):
        found.add("compressed")
    if any(kv.is_recurrent(c, num) for c in main_caches):
        found.add("linear")
    if len(attention_kinds(ev)) > 1:
        found.add("hybrid")
    if any("mtp" in stack for stack in num.stacks if stack != "main"):
        found.add("mtp")
    return [t for t in TRAITS if t in found]


def attention_kinds(ev: Evaluation) -> list[str]:
    """Attention components of the main stack, ``+window`` where every cache an instance keeps is
    window-capped (the rule by which the gallery's label says ``sliding``: results.attention_label)."""
    return sorted(set(_kind_of(ev).values()))


def _kind_of(ev: Evaluation) -> dict[str, str]:
    """Attention component uid -> its kind label (component, ``+window`` when :func:`all_windowed`)."""
    return {uid: row.component + ("+window" if all_windowed(ev, uid) else "")
            for uid, row in ev.numeric.components.items() if row.role == "attention" and row.stack == "main"}


def all_windowed(ev: Evaluation, uid: str) -> bool:
    """Whether the component instance ``uid`` keeps caches and every one is window-capped: a
    sliding-window layer. An instance with a window beside a cache that grows (DeepSeek-V4's local
    window next to its compressed entries) is not: its cache grows with context."""
    mine = [c for c in ev.numeric.caches if c.node_uid.startswith(uid + "/")]
    return bool(mine) and all(c.growth == "window" for c in mine)


# -- lineage -------------------------------------------------------------------------------------------

def load_lineage(corpus_root: Path) -> dict[str, Any]:
    """``corpus/lineage.yaml`` -> ``{"families": {family: (lineage, generation)}, "models": {model_id:
    position in its family's release list}}``. An entry naming a lineage again continues it: the
    families it names merge into that lineage's order and a family listed again merges its models
    into its release list, both by :func:`_merge_release` (a name already placed is an anchor; a
    family in two lineages is an error). Absent file: empty tables. Read by the bounded
    loader with its schema (engine.language.file_schemas.LINEAGE): a wrong kind anywhere is one line there."""
    path = Path(corpus_root) / LINEAGE_FILE
    families: dict[str, tuple[str, int]] = {}
    models: dict[str, int] = {}
    if not path.exists():
        return {"families": families, "models": models}
    reader = Reader(path, Path(corpus_root), LINEAGE)
    listed_by_family: dict[str, list[str]] = {}
    lineage_of: dict[str, str] = {}
    order: dict[str, list[str]] = {}    # per lineage: its families in generation order
    for i, entry in enumerate(reader.data["lineages"]):
        named = []
        for position, item in enumerate(entry["families"]):
            if isinstance(item, dict) and len(item) != 1:   # the schema allows a name or a mapping
                raise SpecError(Where(reader.display, entry["families"].line_of_item(position),
                                      f"lineages[{i}].families[{position}]"),
                                f"a family is one `Name: [org/model, ...]`, got {len(item)} names",
                                "write - Qwen3: [Qwen/Qwen3-8B, Qwen/Qwen3-32B]")
            family, listed = next(iter(item.items())) if isinstance(item, dict) else (item, [])
            if lineage_of.setdefault(family, entry["lineage"]) != entry["lineage"]:
                raise SpecError(Where(reader.display, entry["families"].line_of_item(position),
                                      f"lineages[{i}].families[{position}]"),
                                f"family {family!r} is already in lineage {lineage_of[family]!r}",
                                f"list it under lineage {lineage_of[family]!r} only")
            named.append(family)
            _merge_release(listed_by_family.setdefault(family, []), listed)
            models.update({m: pos for pos, m in enumerate(listed_by_family[family])})
        # an entry repeating a lineage continues it (`archledger new` appends one at the end): the
        # families it names again are anchors, a new family goes right after the one named before it
        # (`[Qwen3, Qwen3-VL, Qwen3.5]` puts Qwen3-VL between them), the same rule as a release list's
        _merge_release(order.setdefault(entry["lineage"], []), named)
    for lineage, names in order.items():
        families.update({family: (lineage, generation) for generation, family in enumerate(names)})
    return {"families": families, "models": models}


def _merge_release(release: list[str], listed: list[str]) -> None:
    """Merge a family's later list into its release list: a model already there is an anchor, the
    new models before the first anchor go just before it, those after an anchor just after it;
    with no anchor they follow the listed ones (`[GLM-5, GLM-5.1]` puts GLM-5.1 after GLM-5)."""
    pending: list[str] = []
    at = None
    for model in listed:
        if model in release:
            i = release.index(model)
            release[i:i] = pending
            pending, at = [], release.index(model) + 1
        elif at is None:
            pending.append(model)
        else:
            release.insert(at, model)
            at += 1
    release += pending


def list_row(corpus, model, table: dict[str, Any]) -> dict[str, Any]:
    """What ``archledger list`` prints of one spec (engine.cli.show.LIST_COLUMNS and ``model_id``):
    its family and model type, its parameters from a numeric walk, and its lineage columns
    (``table``: :func:`load_lineage`). The one definition for a model the build did not publish
    (a declared-unverified spec, kept in the manifest) and for one ``list`` evaluates itself."""
    from engine.language import quantities
    from engine.language.evaluate import Binding, walk_model
    params = int(quantities.params_total(walk_model(corpus, model, Binding("numeric", {}))))
    return {"model_id": model.model_id, "family": model.family, "model_type": model.model_type,
            "params_total": params, **lineage_columns(model.model_id, model.family, table)}


def lineage_columns(model_id: str, family: str, table: dict[str, Any]) -> dict[str, Any]:
    """models.parquet's ``lineage``, ``generation`` and ``release_position`` for one model (a family
    not listed: its own lineage, generation 0; a model not listed: after the listed ones)."""
    lineage, generation = table["families"].get(family, (family, 0))
    return {"lineage": lineage, "generation": generation, "release_position": table["models"].get(model_id, 1000)}


# -- per-model facts (in the model document) -------------------------------------------------------------


def model_facts(ev: Evaluation, point: dict, flops_at: dict, bytes_at: dict, bytes_formula: dict,
                overview: dict | None = None, text=str) -> dict[str, Any]:
    """The landscape facts of one model (see the module doc). ``point`` is the decode reference
    point; ``bytes_at``/``bytes_formula``: per row uid and phase, the HBM bytes of one call of the
    placed single-GPU program (value and formula over the scenario symbols); ``flops_at``: per row
    uid, its decode FLOPs per call at ``point``; ``overview``: ``ev.overview()`` if the caller has it;
    ``text``: prints a formula as ``str`` does (the model document's printer, which remembers them)."""
    num, sym = ev.numeric, ev.symbolic
    kv_cells = {}
    for label, length in KV_CONTEXTS.items():
        kv_cells[label] = _q(kv.bytes_per_request(num, length) / length, kv.bytes_per_request(sym, length) / length,
                             text)
    values = num.values
    experts = None
    if "n_experts" in values and "top_k" in values:
        experts = {name: {"value": int(values[name]), "formula": str(symbols.dim(name))}
                   for name in ("n_experts", "top_k", "n_shared_experts", "d_ff_expert", "hidden") if name in values}
        experts.setdefault("n_shared_experts", {"value": 0, "formula": "0"})
    attention = []
    kinds = _kind_of(ev)
    for comp_uid, kind in sorted(kinds.items(), key=lambda kv_: kv_[1]):
        rows = [u for u, r in num.rows.items() if u.startswith(comp_uid + "/") and "decode" in r.phases
                and not r.leaves and u in bytes_at and "decode" in bytes_at[u]]
        flops = sympy.Add(*(flops_at[u] * num.rows[u].repeat for u in rows))
        sflops = sympy.Add(*(sym.rows[u].flops * sym.rows[u].repeat for u in rows))
        traffic = sum(bytes_at[u]["decode"] * float(num.rows[u].repeat) for u in rows)
        straffic = sympy.Add(*(bytes_formula[u]["decode"] * sym.rows[u].repeat for u in rows))
        if not traffic:
            continue
        flops_text, bytes_text = text(sflops), text(straffic)      # each printed once
        attention.append({"kind": kind, "component": comp_uid,
                          "intensity": {"value": float(flops) / traffic,
                                        "formula": f"({flops_text}) / ({bytes_text})"},
                          "flops": {"value": float(flops), "formula": flops_text},
                          "bytes": {"value": float(traffic), "formula": bytes_text}})
    # one row per kind: a kind used by several layer templates is summed over them
    merged: dict[str, dict] = {}
    for a in attention:
        m = merged.setdefault(a["kind"], {"kind": a["kind"], "flops": 0.0, "bytes": 0.0, "f": [], "b": []})
        m["flops"] += a["flops"]["value"]
        m["bytes"] += a["bytes"]["value"]
        m["f"].append(a["flops"]["formula"])
        m["b"].append(a["bytes"]["formula"])
    by_kind = [{"kind": k, "intensity": {"value": m["flops"] / m["bytes"],
                                         "formula": f"({' + '.join(m['f'])}) / ({' + '.join(m['b'])})"},
                "flops": {"value": m["flops"], "formula": " + ".join(m["f"])},
                "bytes": {"value": m["bytes"], "formula": " + ".join(m["b"])}}
               for k, m in merged.items()]
    overview = overview if overview is not None else ev.overview()
    return {"traits": traits(ev), "dims": {k: int(v) for k, v in values.items()}, "kv_per_token": kv_cells, "experts": experts, "attention_decode": by_kind,
            "params_total": _q(overview["params_total"].value, overview["params_total"].formula, text),
            "params_active": _q(overview["params_active"].value, overview["params_active"].formula, text),
            "point": {str(k): (int(v) if float(v).is_integer() else float(v)) for k, v in point.items()}}


# -- the tables (landscape.json) ---------------------------------------------------------------------------

def ridge(gpu) -> tuple[float, str]:
    """The GPU's ridge point in FLOP per byte: bf16 dense peak over HBM bandwidth, and its formula."""
    peak, bw = gpu.peak_flops("bf16"), gpu.hbm_bytes_per_s
    return peak / bw, f"{gpu.peak['bf16'].value:g}e12 / {gpu.hbm_bw.value:g}e12"


def roofline(gpu) -> dict[str, Any]:
    """A GPU's roofline (landscape.json ``gpus``; the deployment page's roofline chart): the HBM
    bandwidth (B/s) and, per native dtype of ``peak_tflops``, the dense peak (FLOP/s) and the ridge
    point (FLOP/B) where the bandwidth slope meets it, each with its formula."""
    bw = gpu.hbm_bytes_per_s
    peaks = {}
    for dtype, figure in gpu.peak.items():
        peak = figure.value * 1e12
        peaks[dtype] = {"peak_flops": {"value": peak, "formula": f"{figure.value:g}e12"},
                        "ridge": {"value": peak / bw, "formula": f"{figure.value:g}e12 / {gpu.hbm_bw.value:g}e12"}}
    return {"name": gpu.name, "hbm_bytes_per_s": {"value": bw, "formula": f"{gpu.hbm_bw.value:g}e12"}, "peaks": peaks}


def tokens_to_ridge(r: float, hidden: int, width: int, b: int = RIDGE_BYTES) -> float | None:
    """Tokens t one expert must process per step for its matmuls to reach ridge r. One expert
    matrix [width, hidden] over t tokens: 2 t hidden width FLOPs, b hidden width weight bytes and
    b t (hidden + width) activation bytes (read input, write output). Setting FLOPs / bytes = r:
    t = r b h w / (2 h w - r b (h + w)); None when the denominator is not positive (the matmul can
    never reach the ridge). The same t holds for the whole gated expert (3 such matrices)."""
    den = 2 * hidden * width - r * b * (hidden + width)
    if den <= 0:
        return None
    return r * b * hidden * width / den


def _unit(key: str) -> str:
    """How a column's values read: bytes, count, ratio, flops (FLOP/s or FLOPs), bytes_per_s, or text."""
    if key.startswith("kv_") or key == "bytes":
        return "bytes"
    if key in ("ridge", "intensity", "active_share"):
        return "ratio"
    if key in ("peak_bf16", "flops"):
        return "flops"
    if key == "hbm_bytes_per_s":
        return "bytes_per_s"
    if key.startswith(("batch_", "tokens_", "n_", "top_k", "d_ff", "params_")):
        return "count"
    return "text"


def _bound(formula: str, dims: dict[str, int]) -> str:
    """``name = value`` for each dim a formula names (what its tooltip prints after "where")."""
    names = dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", formula))
    return ", ".join(f"{n} = {dims[n]:,}" if isinstance(dims[n], int) else f"{n} = {dims[n]:g}" for n in names if n in dims)


def release_key(row: dict) -> tuple:
    """Sort key of a models.parquet row: lineage, then release order inside it, then size."""
    return (row["lineage"].lower(), row["generation"], row["release_position"], row["params_total"], row["model_id"])


def tables(facts: dict[str, dict], rows: dict[str, dict], gpus: dict) -> dict[str, Any]:
    """The landscape tables from each model's facts (``model_facts``, by model id), its
    models.parquet row (name, family, lineage) and the GPUs. Each table: ``columns`` (key, label,
    doc) and ``rows`` (each cell a string or ``{value, formula}``)."""
    order = sorted(facts, key=lambda m: release_key(rows[m]))
    ident = [{"key": "model_id", "label": "Model", "doc": "Hugging Face model id."},
             {"key": "family", "label": "Family", "doc": "Model family."}]

    def base(m):
        return {"model_id": m, "family": rows[m]["family"]}

    kv_rows = [{**base(m), "kinds": ", ".join(rows[m]["attention_kinds"]),
                **{f"kv_{label}": facts[m]["kv_per_token"][label] for label in KV_CONTEXTS}} for m in order]
    kv_cols = ident + [{"key": "kinds", "label": "Attention", "doc": "Attention kinds of the main stack."}] + [
        {"key": f"kv_{label}", "label": f"KV B/token @ {label.upper()}", "context": n,
         "doc": f"KV bytes one request holds at {n:,} tokens of context, divided by {n:,} (BF16 KV, main stack; "
                "windows and states included, so a capped cache costs less per token as the context grows)."}
        for label, n in KV_CONTEXTS.items()]

    gpu_names = sorted(gpus)
    ridges = {g: ridge(gpus[g]) for g in gpu_names}
    exp_rows = []
    for m in order:
        e = facts[m].get("experts")
        if not e:
            continue
        h, w = e["hidden"]["value"], e["d_ff_expert"]["value"]
        n, k = e["n_experts"]["value"], e["top_k"]["value"]
        row = {**base(m), "n_experts": e["n_experts"], "top_k": e["top_k"], "n_shared_experts": e["n_shared_experts"],
               "d_ff_expert": e["d_ff_expert"]}
        for g in gpu_names:
            r, rf = ridges[g]
            t = tokens_to_ridge(r, h, w)
            tf = f"R*{RIDGE_BYTES}*hidden*d_ff_expert / (2*hidden*d_ff_expert - R*{RIDGE_BYTES}*(hidden + d_ff_expert)), R = {rf}"
            if t is None:
                row[f"tokens_{g}"] = {"value": None, "formula": tf + " (denominator <= 0: never reaches the ridge)"}
                row[f"batch_{g}"] = {"value": None, "formula": "never"}
            else:
                row[f"tokens_{g}"] = {"value": math.ceil(t), "formula": f"ceil({tf})"}
                row[f"batch_{g}"] = {"value": math.ceil(t * n / k),
                                     "formula": f"ceil(t * n_experts / top_k), t = {tf}"}
        exp_rows.append(row)
    exp_cols = ident + [
        {"key": "n_experts", "label": "Experts", "doc": "Routed experts per MoE layer."},
        {"key": "top_k", "label": "Active", "doc": "Routed experts per token."},
        {"key": "n_shared_experts", "label": "Shared", "doc": "Shared experts every token uses."},
        {"key": "d_ff_expert", "label": "Expert width", "doc": "Intermediate width of one expert."}] + [
        {"key": f"batch_{g}", "label": f"Batch @ {g}",
         "doc": f"Tokens per step the whole model needs so that an average expert reaches {g}'s ridge point "
                f"(tokens per expert x n_experts / top_k; BF16 weights and activations)."} for g in gpu_names]
    ridge_rows = [{"gpu": g, "ridge": {"value": ridges[g][0], "formula": ridges[g][1]},
                   "peak_bf16": {"value": gpus[g].peak_flops("bf16"), "formula": f"{gpus[g].peak['bf16'].value:g}e12"},
                   "hbm_bytes_per_s": {"value": gpus[g].hbm_bytes_per_s, "formula": f"{gpus[g].hbm_bw.value:g}e12"}}
                  for g in gpu_names]
    ridge_cols = [{"key": "gpu", "label": "GPU", "doc": "gpus/*.yaml `gpu:`."},
                  {"key": "ridge", "label": "Ridge (FLOP/B)", "doc": "bf16 dense peak FLOP/s / HBM bytes/s."},
                  {"key": "peak_bf16", "label": "Peak bf16 (FLOP/s)", "doc": "Dense bf16 peak."},
                  {"key": "hbm_bytes_per_s", "label": "HBM (B/s)", "doc": "HBM bandwidth."}]

    att_rows = [{**base(m), "kind": a["kind"], "intensity": a["intensity"], "flops": a["flops"], "bytes": a["bytes"]}
                for m in order for a in facts[m]["attention_decode"]]
    att_cols = ident + [
        {"key": "kind", "label": "Attention kind", "doc": "Attention component (+window: window-capped cache)."},
        {"key": "intensity", "label": "FLOP / byte", "doc": "Decode arithmetic intensity of the attention's weight-free "
                                                          "ops (scores, softmax, apply, cache reads) at batch 1, 4096 tokens of context."},
        {"key": "flops", "label": "FLOPs", "doc": "Their FLOPs per decode step, all layers of that kind."},
        {"key": "bytes", "label": "HBM bytes", "doc": "Their HBM bytes per decode step (BF16 KV, unfused, one GPU)."}]

    par_rows = []
    for m in order:
        t, a = facts[m]["params_total"], facts[m]["params_active"]
        par_rows.append({**base(m), "params_total": t, "params_active": a,
                         "active_share": {"value": a["value"] / t["value"], "formula": f"({a['formula']}) / ({t['formula']})"}})
    par_cols = ident + [{"key": "params_total", "label": "Total", "doc": "Parameters of the main stack."},
                        {"key": "params_active", "label": "Active", "doc": "Parameters one token uses."},
                        {"key": "active_share", "label": "Active / total", "doc": "Share of the weights a token uses."}]

    trait_rows = [{**base(m), **{t: ("yes" if t in facts[m]["traits"] else "") for t in TRAITS}} for m in order]
    trait_cols = ident + [{"key": t, "label": label, "doc": doc} for t, (label, doc) in TRAITS.items()]
    for row in kv_rows + exp_rows + att_rows + par_rows:
        dims = {**facts[row["model_id"]]["dims"], **facts[row["model_id"]]["point"]}   # + the reference scenario
        for cell in row.values():
            if isinstance(cell, dict) and "formula" in cell:
                cell["where"] = _bound(cell["formula"], dims)
    for col in kv_cols + exp_cols + ridge_cols + att_cols + par_cols + trait_cols:
        col["unit"] = _unit(col["key"])
    return {"traits": {t: {"label": label, "doc": doc} for t, (label, doc) in TRAITS.items()},
            "gpus": {g: roofline(gpus[g]) for g in gpu_names}, "tables": [
        {"name": "traits", "title": "Architecture traits", "columns": trait_cols, "rows": trait_rows},
        {"name": "kv", "title": "KV cache per token of context", "columns": kv_cols, "rows": kv_rows},
        {"name": "experts", "title": "Experts and the batch to reach the ridge point", "columns": exp_cols, "rows": exp_rows},
        {"name": "ridge", "title": "GPU ridge points", "columns": ridge_cols, "rows": ridge_rows},
        {"name": "attention", "title": "Decode attention arithmetic intensity", "columns": att_cols, "rows": att_rows},
        {"name": "params", "title": "Parameters, active and total", "columns": par_cols, "rows": par_rows}]}
