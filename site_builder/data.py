"""Read build/results/ into what pages need: reshaping and selecting only, never computing a number.

Layer: site_builder (reads build/results, imports no engine evaluation). Every value handed to a
template comes from a Parquet row or a model document written by the build; functions here pick
rows, group them and format labels. A "number" is passed as ``{"value", "formula", "node"}`` so
the template can attach its formula tooltip.
"""
from __future__ import annotations

import re

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

# the site's JSON text: json.dumps with compact separators, byte for byte (what Site.gzip_json
# writes; one encoder for the results' files and the site's, without json.dumps' per-call encoder
# and circular-reference check)
from engine.batch.jsontext import compact_json
from site_builder.json_cuts import Items, RowTexts, cut_rows, gc_paused, lookup_refs, row_texts, top_level

KEY = ["gpu", "n_gpus", "config", "framework", "kv_dtype"]


def slug(model_id: str) -> str:
    return model_id.replace("/", "--")


def read_json(path: Path) -> Any:
    """A results JSON file, parsed with the collector paused (:func:`gc_paused`)."""
    text = Path(path).read_text()
    with gc_paused():
        return json.loads(text)


class Documents(Mapping):
    """The model documents (``models/<org--name>.json``), each read when first asked for: an
    incremental render reads only those of the pages it renders again."""

    def __init__(self, root: Path, model_ids: list[str]):
        self.root, self.ids, self.cache = root, list(model_ids), {}

    def __getitem__(self, model_id: str) -> dict:
        if model_id not in self.cache:
            if model_id not in self.ids:
                raise KeyError(model_id)
            self.cache[model_id] = read_json(self.root / "models" / f"{slug(model_id)}.json")
        return self.cache[model_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Results:
    root: Path
    models: pl.DataFrame
    documents: Mapping[str, dict]
    deployments: pl.LazyFrame
    ops: pl.LazyFrame
    landscape: dict | None = None      # landscape.json (the landscape page's tables), when built
    #: model -> why its spec cannot be verified (manifest.json ``unverified``): listed, never published
    unverified: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def load(root: Path) -> "Results":
        models = pl.read_parquet(root / "models.parquet")
        documents = Documents(root, list(models["model_id"]))
        deployments = pl.scan_parquet(str(root / "deployments" / "**" / "*.parquet"), hive_partitioning=True)
        ops = pl.scan_parquet(str(root / "ops" / "**" / "*.parquet"), hive_partitioning=True)
        landscape = json.loads((root / "landscape.json").read_text()) if (root / "landscape.json").exists() else None
        return Results(root, models, documents, deployments, ops, landscape, _declared_unverified(root))


def _declared_unverified(root: Path) -> dict[str, str]:
    """The build's ``unverified`` list (manifest.json); {} for results without one."""
    try:
        listed = json.loads((root / "manifest.json").read_text()).get("unverified")
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in listed.items()} if isinstance(listed, dict) else {}


def gallery_index(results: Results) -> list[dict[str, Any]]:
    """One entry per model for the gallery's client-side search, filter and sort."""
    out = []
    rows = sorted(results.models.iter_rows(named=True), key=_release_key)
    for position, row in enumerate(rows):
        doc = results.documents[row["model_id"]]
        out.append({
            "model_id": row["model_id"], "slug": slug(row["model_id"]), "name": doc["name"],
            "family": row["family"], "model_type": row["model_type"],
            "params_total": row["params_total"], "params_active": row["params_active"],
            "kv_bytes_per_token": row["kv_bytes_per_token"], "kv_fixed_bytes": row["kv_fixed_bytes"],
            "max_context": row["max_context"], "n_layers": row["n_layers"],
            "checkpoint_bytes": row["checkpoint_bytes"], "attention_kinds": list(row["attention_kinds"]),
            "attention_label": row["attention_label"], "kv_state_bytes": row["kv_state_bytes"],
            "verified": row["verified"], "verified_against": row["verified_against"], "moe": row["params_active"] < row["params_total"],
            "traits": list(row["traits"]), "lineage": row["lineage"], "release": position,
            "formulas": {**{k: doc["overview"][k]["formula"] for k in ("params_total", "params_active",
                                                                        "kv_bytes_per_token_growing", "max_context")},
                         "kv_state_bytes": doc["kv_split"]["parts"]["state"][0]["formula"]},
        })
        out[-1]["dims"] = _named_dims(doc, out[-1]["formulas"].values())
    labels = {key: info["label"] for key, info in ((results.landscape or {}).get("traits") or {}).items()}
    for m in out:
        m["search"] = search_text(m, labels)
    return out


def search_text(m: dict[str, Any], trait_labels: dict[str, str]) -> str:
    """The gallery search's text for one entry: every field a gallery filter reads (family, dense or
    MoE, each trait by its key and its label) and the columns the row shows (id, mixers, model type),
    lower case. The search and the filters read the same fields, so a word a filter offers
    ("MLA", "moe") finds every model that filter finds."""
    words = [m["model_id"], m["name"], m["family"], "moe" if m["moe"] else "dense", m["attention_label"],
             *m["attention_kinds"], m["model_type"]]
    for key in m["traits"]:
        words += [key, trait_labels.get(key, "")]
    return " ".join(w for w in words if w).lower()


def _named_dims(doc: dict, formulas) -> dict[str, int]:
    """The model's dims that ``formulas`` name, with their values: the tooltip's "where" line
    (static/js/site.js) on pages that show many models."""
    names = {name for f in formulas for name in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", f or "")}
    return {d["name"]: d["value"] for d in doc["dims"] if d["name"] in names}


def _release_key(row: dict) -> tuple:
    """Gallery order: lineage, then release order inside it (models.parquet's generation and
    release_position, from corpus/lineage.yaml), then size."""
    return (row["lineage"].lower(), row["generation"], row["release_position"], row["params_total"], row["model_id"])


def trait_index(results: Results, index: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trait (landscape.json's order and labels): the gallery entries that have it."""
    meta = (results.landscape or {}).get("traits") or {}
    return [{"key": key, "label": info["label"], "doc": info["doc"],
             "models": [m for m in index if key in m["traits"]]} for key, info in meta.items()]


def lineages(index: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gallery entries grouped by lineage, in gallery order (each group: lineage, families in
    release order, models)."""
    out: list[dict[str, Any]] = []
    for m in index:
        if not out or out[-1]["lineage"] != m["lineage"]:
            out.append({"lineage": m["lineage"], "families": [], "models": []})
        if m["family"] not in out[-1]["families"]:
            out[-1]["families"].append(m["family"])
        out[-1]["models"].append(m)
    return out


def landscape_tables(results: Results) -> list[dict[str, Any]]:
    """The landscape page's tables as built (landscape.json), with model names for display."""
    tables = (results.landscape or {}).get("tables") or []
    names = {m: results.documents[m]["name"] for m in results.models["model_id"]}
    for table in tables:
        for row in table["rows"]:
            if "model_id" in row:
                row["name"] = names.get(row["model_id"], row["model_id"])
    return tables


def deployment_rows(results: Results, model_id: str) -> pl.DataFrame:
    """The model's deployment rows with the columns the deployment page uses: its options (the
    combinations, their parallel degrees and weight formula), the GPU comparison (the best decode
    rate among points that fit) and the grid's lengths and batches. Only those: the page evaluates
    every other number in the browser from the formula files, and reading the other columns of the
    two million rows was two thirds of the rows' time."""
    columns = ["gpu", "n_gpus", "config", "tp", "ep", "dp_attn", "pp", "framework", "kv_dtype", "phase", "batch",
               "weight_bytes_per_gpu_formula", "input_len", "output_len", "fits_steady", "tpot_mean_s"]
    # from the model's own partition when it has one (the build writes one per model): a scan of
    # the whole table opens every model's file to find this model's rows
    part = results.root / "deployments" / f"model={slug(model_id)}" / "part.parquet"
    table = pl.scan_parquet(part) if part.is_file() else results.deployments
    return table.filter(pl.col("model_id") == model_id).select(columns).collect()


#: The fields of a front file (:func:`front_files`): the stored values the chart's points need,
#: the two rates it plots included as the build computed them (engine.serving.steady.front_point:
#: the page divides nothing, issue 37's one rule in one place; they are about 40% of the files'
#: bytes, 4.4 -> about 7 MB over the 51 models); the capacities no chart reads are left out.
FRONT_FIELDS = ("gpu", "n_gpus", "config", "batch", "ttft_s", "tpot_s", "tpot_last_s", "tokens_per_s_per_gpu",
                "tokens_per_s_per_user")


def front_files(results: Results, model_id: str) -> dict[tuple[str, str, int, int], dict]:
    """The model's grid fronts as the deploy page draws them (engine.serving.steady.front_points), per
    (framework, KV dtype, prompt, output): what its throughput/interactivity chart fetches, one small
    file per selection, instead of every config's formulas. Each as ``{"columns": FRONT_FIELDS,
    "values": [one list per column]}`` (column-wise: a column's like values sit together for gzip),
    the points in front_points' order. Taken column by column from each front's frame
    (engine.serving.steady.front_tables): a column's values are the rows' values at its place, so
    no row is built only to be taken apart again."""
    from engine.serving.steady import front_tables
    part = results.root / "deployments" / f"model={slug(model_id)}" / "part.parquet"
    table = pl.scan_parquet(part) if part.is_file() else results.deployments.filter(pl.col("model_id") == model_id)
    return {key: {"columns": list(FRONT_FIELDS), "values": [front[c].to_list() for c in FRONT_FIELDS]}
            for key, front in front_tables(table).items()}


def config_twins(results: Results, model_id: str) -> list[dict[str, Any]]:
    """The model's parallel configs identical in every deployment row (site_builder.twins), with the
    note the deploy page prints beside them."""
    from site_builder import twins
    part = results.root / "deployments" / f"model={slug(model_id)}" / "part.parquet"
    return twins.twins(twins.read_rows(part if part.is_file() else results.deployments, model_id))


def deployment_options(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """The (GPU, GPU count, config, framework, KV dtype) combinations the build evaluated: the
    distinct rows of those columns, the parallel degrees and the weight formula."""
    # a row the same as the one before it in all these columns adds no combination: dropped first
    # (cheap comparisons; the rows of one combination are mostly together), so the formulas (KB
    # each) are hashed for a few hundred rows, not for every row
    columns = KEY + ["tp", "ep", "dp_attn", "pp", "weight_bytes_per_gpu_formula"]
    rows = rows.filter(pl.any_horizontal([pl.col(c).ne_missing(pl.col(c).shift(1)) for c in columns]))
    # grouped on the short columns, the formulas (KB each, one per combination) only compared
    # inside a group: a unique() over all the columns copies every row's formula to compare rows
    combos = rows.group_by(KEY + ["tp", "ep", "dp_attn", "pp"]).agg(pl.col("weight_bytes_per_gpu_formula").unique())
    # sorted on every column: a combination with two formulas (two weight formats) has one order
    # whatever order group_by returned them in (the page's index is the same bytes every build)
    first = ["gpu", "n_gpus", "config", "framework", "kv_dtype"]
    return combos.explode("weight_bytes_per_gpu_formula").sort(first + [c for c in columns if c not in first]).to_dicts()


def ops_rows(results: Results, model_id: str) -> pl.DataFrame:
    return results.ops.filter(pl.col("model_id") == model_id).collect()


#: The per-op point key of :func:`expected_files` (the deploy page's selection: static/js/deploy.js).
EXPECTED_KEY = ("gpu", "n_gpus", "config", "framework", "kv_dtype", "batch", "input_len", "output_len")


def expected_files(results: Results, model_id: str, cfg_of: Mapping[tuple[str, str, str, str], str]) -> dict[str, dict]:
    """The deploy page's per-op tooltips at the grid's per-op points (ops.parquet's decode rows), one
    document per config file (``expected-<cfg>.json.gz``), in the order the configs' first points
    come. ``cfg_of`` maps (GPU, GPU count as its decimal text, config, framework) to its config
    file's name; rows of other combinations are left out. A document is ``{"ops": [op uid, ...],
    "tips": [tooltip, ...], "points": {point key: [index into tips per op of ops, -1 where the point
    has no such op]}}``: a
    point key is ``"gpu|n_gpus|config|framework|kv_dtype|batch|input_len|output_len"`` (each value
    as str() writes it, a missing one "None"), a tooltip says the measured source as the results
    store it (the table's kernel, framework and version at the op's point, its file, the measured
    points around it) or ``no measurement: bound / 0.7``. Points, ops and tooltips are numbered in
    the order they are first met (points in row order, each point's ops in row order); of two rows
    of one op at one point, the first's place and the last's tooltip. The seconds are left out: the
    page shows the expected time its own lookup tree gives (static/js/deploy_eval.js opRows), the
    stored one only in ops.parquet; each distinct tooltip and op uid is written once (8.1 -> 1.7 MB
    over the 51 models' files). Empty for results built before the expected columns.

    The key and the tooltip are joined by polars, and the rows are read once into one dictionary
    per point, a run of one point's rows at a time (a dictionary of [seconds, tooltip] per point
    filled row by row, then numbered again per file, was twice the work); a point's file is looked
    up once per point, not per row."""
    part = results.root / "ops" / f"model={slug(model_id)}" / "part.parquet"
    table = pl.scan_parquet(part) if part.is_file() else results.ops
    if "t_expected_s" not in table.collect_schema().names():
        return {}

    def text(name: str) -> pl.Expr:
        return pl.col(name).cast(pl.String).fill_null("None")
    rows = (table.filter((pl.col("model_id") == model_id) & (pl.col("phase") == "decode"))
            .select(pl.concat_str([text(k) for k in EXPECTED_KEY], separator="|").alias("key"), "op_uid",
                    pl.when(pl.col("measured"))
                    .then(pl.format("measured: {}; table {}; measured points around it: {}", text("expected_src"),
                                    text("expected_table"), text("expected_nearest")))
                    .otherwise(pl.format("no measurement: {}", text("expected_src"))).alias("tip"))
            .collect())
    # each point's ops and tooltips in row order (a later row of an op replaces its tooltip in place),
    # a run of rows of one point at a time (a point's rows come together; one met again goes on filling its own)
    points: dict[str, dict[str, str]] = {}
    runs = rows.select(pl.col("key").rle()).unnest("key")
    uids, tips = rows["op_uid"].to_list(), rows["tip"].to_list()
    end = 0
    for key, n in zip(runs["value"].to_list(), runs["len"].to_list()):
        start, end = end, end + n
        found = points.get(key)
        if found is None:
            found = points[key] = {}
        found.update(zip(uids[start:end], tips[start:end]))
    by_file: dict[str, dict[str, dict[str, str]]] = {}
    for at, found in points.items():
        gpu, n_gpus, config, framework = at.split("|")[:4]
        cfg = cfg_of.get((gpu, n_gpus, config, framework))
        if cfg is not None:
            by_file.setdefault(cfg, {})[at] = found
    return {cfg: _tips(part) for cfg, part in by_file.items()}


def _tips(points: dict[str, dict[str, str]]) -> dict:
    """One file of :func:`expected_files` from its points' op -> tooltip dictionaries."""
    ops: dict[str, int] = {}
    tips: dict[str, int] = {}
    for found in points.values():
        for uid, tip in found.items():
            ops.setdefault(uid, len(ops))
            tips.setdefault(tip, len(tips))
    table = {}
    for key, found in points.items():
        row = [-1] * len(ops)
        for uid, tip in found.items():
            row[ops[uid]] = tips[tip]
        table[key] = row
    return {"ops": list(ops), "tips": list(tips), "points": table}


def deploy_formulas(results: Results, model_id: str) -> dict | None:
    """The model's formula document (``formulas/<org--name>.json``, engine/batch/deploy_export.py) as
    :func:`read_formulas` gives it, or None for results built before it existed."""
    path = results.root / "formulas" / f"{slug(model_id)}.json"
    return read_formulas(path) if path.exists() else None


def read_formulas(path: Path) -> dict:
    """A formula document, decoded but for its ``programs``, which come as :class:`RowTexts` cut from
    the file's text: the programs are most of the text (36 of the 51 models' 64 MB) and repeat few
    distinct rows (GLM-5.2: 49,886 steps, 1,495 distinct), which json.loads would build as a new list
    each; the site renumbers each distinct row once (:func:`split_formulas`). A document whose
    programs cannot be cut so (not compact, or a string in a row) is decoded whole and its rows
    encoded again (:func:`row_texts`): the same texts, since the writer's encoder is
    :func:`compact_json` and decoding and encoding again gives a value's compact text back. The
    ``trees`` come as :class:`Items`: the common file copies the texts of those it holds."""
    text = Path(path).read_text()
    with gc_paused():
        entries = top_level(text, cut="programs", items="trees")
        at = {e[0]: e for e in entries or ()}
        rows = cut_rows(text[at["programs"][2]:at["programs"][3]]) if "programs" in at else None
        if rows is None:
            doc = json.loads(text)
            doc["programs"] = row_texts(doc["programs"])
            return doc
        doc = {name: value for name, _, _, _, value in entries}
        doc["programs"] = rows
        return doc


class _Numbering(dict):
    """Source index -> local index, numbered from 0 in order of first lookup (a miss numbers it:
    the hits, nearly every lookup, stay in C)."""

    def __missing__(self, i: int) -> int:
        n = self[i] = len(self)
        return n


def split_formulas(doc: dict) -> tuple[dict, dict[str, str]]:
    """The formula document as the deploy page fetches it: the model-wide part (GPU rates, configs,
    options, the KV trees) for index.json, one file per (config, scale-up domain) holding the
    programs its options use, renumbered from 0 (what one selection loads; configs whose files are
    identical share one), and one :data:`COMMON` file per model holding the trees, strings and
    measured tables those programs name, numbered once for the model; each as its compact JSON
    text. A config file is ``{"programs", "expected", "common"}``: ``expected`` the per-step
    expected-time tree lists its options name per KV dtype, ``common`` the common file's name; the
    common file ``{"trees", "strings", "lookups"}``, ``lookups`` the tables the trees' lookup nodes
    read, by their model-wide ref (written as they are, never encoded twice). A step's formulas are
    over the parallel degrees, so most trees and every formula text are the same in every config:
    each config file used to carry its own copy of them and of the tables (over the 51 models'
    1,546 config files: 17.4 MB compressed, now 2.6 MB plus 2.5 MB of common files). Options name
    their config (``cfg``) and file. Reshaping only: every tree and number is the build's; the rule
    picking the grid's batches travels beside them (``grid_batches``: engine.deploy.rules.GRID_BATCHES,
    read by formula.js ``select``)."""
    from engine.deploy.rules import GRID_BATCHES, exported as deploy_rules   # (here: the module's other readers need no engine)
    from engine.deploy.measured_tree import STORED_ONLY
    programs, trees, strings = doc["programs"], doc["trees"], doc["strings"]
    if not isinstance(programs, RowTexts):
        programs = row_texts(programs)
    expected = doc.get("expected", [])
    # trees and strings numbered once for the model (first use: the programs in option order, each
    # program's steps in order, fields left to right; then the expected-time lists, file by file)
    tm, sm = _Numbering(), _Numbering()
    # a program's step rows are the same in every file that holds it (the numbering is the model's),
    # so each is renumbered and written as compact JSON once, when first used; a file's text is
    # joined from them (what compact_json of the file's value writes, byte for byte). Programs repeat
    # few distinct rows: each distinct row (by its text) is decoded and renumbered once, when first
    # met; a row met again numbers nothing new (its trees and strings are numbered already), so the
    # numbering is the same as renumbering every row in order
    texts: dict[int, str] = {}
    steps: dict[str, str] = {}                # a row's text in the document -> its text here
    local: dict[str, dict[int, int]] = {}     # per file: its programs, in order, renumbered from 0
    lists: dict[str, _Numbering] = {}         # per file: the expected-time lists it holds, renumbered

    def step(row: str) -> str:
        """A step row's text here: 5 tree indices, 6 numbers, 4 string indices (renumbered)."""
        s = json.loads(row)
        text = steps[row] = compact_json([tm[s[0]], tm[s[1]], tm[s[2]], tm[s[3]], tm[s[4]], s[5], s[6], s[7], s[8],
                                          s[9], s[10], sm[s[11]], sm[s[12]], sm[s[13]], sm[s[14]]])
        return text

    options = []
    for opt in doc["options"]:
        cfg = doc["configs"][opt["config"]]
        key = cfg["key"]
        if key not in local:
            local[key] = {}
            lists[key] = _Numbering()
        pmap, lm = local[key], lists[key]

        def program(pid: int) -> int:
            if pid not in pmap:
                pmap[pid] = len(pmap)
                if pid not in texts:
                    texts[pid] = "[" + ",".join([steps[r] if r in steps else step(r) for r in programs[pid]]) + "]"
            return pmap[pid]

        options.append({**{k: opt[k] for k in ("gpu", "framework", "kv_dtypes", "limits", "reserve", "overlap", "admission") if k in opt},
                        "file": key,
                        "n_gpus": cfg["n_gpus"], "config": cfg["config"],
                        "prefill": [program(p) for p in opt["prefill"]], "decode": [program(p) for p in opt["decode"]]})
        if "mtp" in opt:          # the MTP drafts' steps (models with an mtp stack)
            options[-1]["mtp"] = {ph: [program(p) for p in pids] for ph, pids in opt["mtp"].items()}
        if "expected" in opt:     # per KV dtype and phase, each regime's list of step expected-time trees
            options[-1]["expected"] = {kv: {ph: ({m: [lm[i] for i in ids] for m, ids in v.items()} if ph == "mtp"
                                                 else [lm[i] for i in v]) for ph, v in by.items()}
                                       for kv, by in opt["expected"].items()}
    bodies = {}
    listed: dict[int, str] = {}              # an expected-time list's text, written once (as the programs')
    for key, pmap in local.items():
        parts = ['{"programs":[', ",".join(texts[pid] for pid in pmap), "]"]
        if expected:
            parts += [',"expected":[', ",".join(listed[i] if i in listed else listed.setdefault(
                i, compact_json([tm[t] for t in expected[i]])) for i in lists[key]), "]"]
        bodies[key] = "".join(parts + [',"common":', compact_json(COMMON), "}"])
    # the common file's text as compact_json of {"trees", "strings", "lookups"} writes it, the trees
    # copied as the document holds them where it was read with their texts (read_formulas)
    shared_trees = ("[" + ",".join([trees.texts[i] for i in tm]) + "]" if isinstance(trees, Items)
                    else compact_json([trees[i] for i in tm]))
    parts = ['{"trees":', shared_trees, ',"strings":', compact_json([strings[i] for i in sm])]
    if expected:
        # the measured tables the trees' lookup nodes name (by their index in the model's lookups)
        # (less what only `archledger deploy`'s reading of the document needs: engine.deploy.stored)
        parts += [',"lookups":', compact_json({str(r): {k: v for k, v in doc["lookups"][r].items() if k not in STORED_ONLY}
                                               for r in sorted(lookup_refs(shared_trees))})]
    texts, same = _shared(bodies)
    texts[COMMON] = "".join(parts + ["}"])
    for o in options:
        o["cfg"], o["file"] = o["file"], same[o["file"]]
    # the weight formula's text travels once per model in index.json's weight_formulas
    configs = {c["key"]: {**{k: v for k, v in c.items() if k not in ("kv_dev", "weight_formula")},
                          "kv_dev": trees[c["kv_dev"]]} for c in doc["configs"]}
    # with MTP drafting: each config's weights and KV per GPU; the weight formulas' texts once per model
    mtp_formulas: dict[int, int] = {}
    for c in doc["configs"]:
        if "mtp" in c:
            text = mtp_formulas.setdefault(c["mtp"]["weight_formula"], len(mtp_formulas))
            configs[c["key"]]["mtp"] = {**c["mtp"], "kv_dev": trees[c["mtp"]["kv_dev"]], "weight_formula": text}
    head = {k: doc[k] for k in ("format", "max_context", "budget", "hbm_fraction", "max_batch", "batches", "kv_bytes",
                                "kv_request", "gpus", "mtp_modules", "tokens_per_step", "kv_request_mtp", "default_efficiency")
            if k in doc}
    if mtp_formulas:
        head["mtp_weight_formulas"] = [strings[i] for i in mtp_formulas]
    head["grid_batches"] = GRID_BATCHES
    head["rules"] = deploy_rules()        # the deploy summary's rule programs (engine.deploy.rules)
    return {**head, "configs": configs, "options": options}, texts


#: The name of a model's file of the trees, formula texts and measured tables its config files
#: share (:func:`split_formulas`; each config file names it in its ``common`` field and
#: static/js/deploy_eval.js puts its lists in place on fetching a config's file).
COMMON = "common"


def _shared(bodies: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The files' compact JSON texts (``bodies``), one per distinct text, and each key's file: the
    first key (in order) whose text is the same (configs whose files come out identical, one GPU on
    an 8- or a 72-GPU domain, share one file). Equal values give equal texts: a body's keys are in
    one order, and its trees are the build's, interned by their compact text (engine/batch/deploy_export.py)."""
    texts: dict[str, str] = {}
    same: dict[str, str] = {}
    kept: dict[str, str] = {}            # compact text -> its first key
    for key, text in bodies.items():
        first = kept.setdefault(text, key)
        if first == key:
            texts[key] = text
        same[key] = first
    return texts, same
