"""Old -> new: a what-if variant beside its base model, per layer group and for the whole model.

Layer: engine.playground. Both sides are evaluated by the same walk (:func:`engine.api.evaluate_spec`)
and deployed by the same planner (:func:`engine.deploy.plan`) on one GPU, parallel config and
scenario, so every difference is the swap's. What is compared (:data:`METRICS`): parameters, stored
weight bytes, KV bytes per token of context and per request at ``context`` tokens, the prefill of a
``context``-token prompt in one step (the whole model's FLOPs, SOL time) and one decode step at
``context`` (bytes one GPU reads, SOL time). A layer group is a layer template's layers (``layers[moe]``); a swap limited to
some layers gives a new group (``layers[block_gated_deltanet]``) whose old side is empty.

``archledger edit`` prints this; the build writes it beside the variant's results for the site.

The playground's live picks (:func:`model_playground`, one file per corpus model): any slot x
fitting library component of a base, its change to the numbers exported as formula trees over the
dims so the page recomputes it as the reader binds them. The new filler is walked only where the
base walks the slot (its recorded sites), shared between sites and models with the same scope;
the variant's whole walk (:func:`changed_parts`) is the reference and the fallback where a layer
stream crosses the sites.
"""
from __future__ import annotations

import json
import functools
import re
from dataclasses import dataclass, replace
from typing import Any

import sympy

from engine.deploy import Options, Scenario, plan
from engine.deploy.fusion import load_tables
from engine.deploy.hardware import GPU
from engine.deploy.parallel import ParallelConfig
from engine.spec import expr, formula_tree, kv, quantities, storage, symbols
from engine.spec import variants as variant_rules
from engine.spec.api import Evaluation, evaluate_spec
from engine.spec.corpus import Corpus
from engine.spec.errors import SpecError, Where
from engine.spec.evaluate import Analysis, Binding, Walker, walk_model
from engine.spec.ir import Fill, ModelSpec
from engine.playground.playground_sol import default_config  # noqa: F401  (edit's config; it lives beside the SOL export)
from engine.playground.playground_sol import free_names

#: (key, label, unit) of every compared number, in print order.
METRICS = (
    ("params", "params", ""),
    ("weight_bytes", "weight bytes", "B"),
    ("kv_bytes_per_token", "KV per token", "B"),
    ("kv_bytes_per_request", "KV per request", "B"),
    ("prefill_flops", "prefill FLOPs", ""),
    ("prefill_sol_s", "prefill SOL", "s"),
    ("decode_bytes", "decode bytes/GPU", "B"),
    ("decode_sol_s", "decode SOL", "s"),
)
_CLI = Where("<command line>")
_CONFIG = re.compile(r"(tp|ep|dp_attn|pp|cp)(\d+)")


@dataclass(frozen=True, slots=True)
class Setting:
    """Where both sides are deployed: GPU, parallel config, framework, KV dtype, batch, context."""

    gpu: GPU
    config: ParallelConfig
    framework: str = "vllm"
    kv_dtype: str = "bf16"
    batch: int = 1
    context: int = 8192


def parse_config(text: str) -> ParallelConfig:
    """``tp8-ep8-dp_attn8`` (the deploy page's label, ``8x `` prefix allowed) -> a config."""
    body = text.split(" ", 1)[-1].strip()
    degrees = {}
    for part in body.split("-"):
        match = _CONFIG.fullmatch(part)
        if not match:
            raise SpecError(_CLI.at("--config"), f"{part!r} in {text!r} is not a degree",
                            "write e.g. tp8, tp8-ep8 or tp8-ep8-dp_attn8 (tp, ep, dp_attn, pp, cp)")
        degrees[match[1]] = int(match[2])
    config = ParallelConfig(**degrees)
    if config.problems():
        raise SpecError(_CLI.at("--config"), "; ".join(config.problems()), "fix the degrees")
    return config


def _side(ev: Evaluation, gpu: GPU, config: ParallelConfig, setting: Setting) -> dict[str, Any]:
    """Every metric for the whole model and per layer group (group uid -> metrics)."""
    tables = load_tables(ev.corpus.root / "fusion")
    # the whole prompt in one prefill step, so the per-op table is the whole prefill
    options = Options(framework=setting.framework, kv_dtype=setting.kv_dtype,
                      prefill_tokens=max(8192, setting.batch * setting.context))
    scenario = Scenario(batch=setting.batch, input_len=setting.context, output_len=0)
    deployment = plan(ev, gpu, config, options, tables.get(setting.framework), scenario).at(scenario)
    a = ev.numeric
    point = {symbols.dim(symbols.BATCH): setting.batch, symbols.dim(symbols.SEQ): setting.context,
             symbols.dim(symbols.CTX): setting.context}
    groups = {uid: c for uid, c in a.components.items() if c.template and c.stack == "main"}
    tensors = [t for t in ev.tensors() if t.stack == "main"]

    def metrics(prefix: str | None) -> dict[str, float]:
        def mine(uid: str) -> bool:
            uid = uid.split("@", 1)[-1]
            return prefix is None or uid == prefix or uid.startswith(prefix + "/")
        caches = [c for c in kv.caches(a) if mine(c.node_uid)]
        per_token = sum(float(kv.per_context_token(c) * kv.cache_element_bytes(c, setting.kv_dtype))
                        for c in caches if c.growth in ("every_token", "compressed"))
        per_request = sum(float(kv.entry_bytes_per_request(c, setting.context, setting.kv_dtype)) for c in caches)
        rows = [r for r in a.rows.values() if r.stack == "main" and "prefill" in r.phases and not r.shares
                and mine(r.uid)]
        flops = sum((r.flops * r.repeat for r in quantities.phase_rows(a, "prefill") if mine(r.uid)), sympy.Integer(0))
        prefill = [r for r in deployment.ops["prefill"] if mine(r["op_uid"])]
        decode = [r for r in deployment.ops["decode"] if mine(r["op_uid"])]
        out = {
            "params": float(sum(r.params * r.repeat * r.instances for r in rows)),
            "weight_bytes": float(sum(t.total_bytes for t in tensors if mine(t.uid))),
            "kv_bytes_per_token": per_token,
            "kv_bytes_per_request": per_request,
            "prefill_flops": float(flops.subs(point)),      # the whole model's, not one GPU's
            "prefill_sol_s": sum(r["t_sol_s"] for r in prefill),
            "decode_bytes": sum(r["bytes"] for r in decode),
            "decode_sol_s": sum(r["t_sol_s"] for r in decode),
        }
        if prefix is None:   # the whole model: the planner's own totals (step time, not a sum of ops)
            out["prefill_sol_s"] = deployment.summary["ttft_s"]
            out["decode_sol_s"] = deployment.summary["tpot_s"]
            out["decode_bytes"] = deployment.phases["decode"]["bytes"]
        return out

    return {"model": metrics(None), "fits": bool(deployment.summary["fits"]),
            "groups": {uid: {"template": c.template, "layers": len(c.layers), **metrics(uid)}
                       for uid, c in groups.items()}}


def compare(corpus: Corpus, variant: variant_rules.ModelVariant, setting: Setting,
            old_ev: Evaluation | None = None, new_ev: Evaluation | None = None) -> dict[str, Any]:
    """Old -> new for every metric, whole model and per layer group (JSON-ready); the two
    evaluations are made here unless given."""
    old_ev = old_ev or evaluate_spec(corpus, corpus.models[variant.base])
    new_ev = new_ev or evaluate_spec(corpus, variant.spec)
    old = _side(old_ev, setting.gpu, setting.config, setting)
    new = _side(new_ev, setting.gpu, setting.config, setting)
    groups = []
    for uid in dict.fromkeys([*old["groups"], *new["groups"]]):
        o, n = old["groups"].get(uid), new["groups"].get(uid)
        groups.append({"group": uid.removeprefix("main/"), "layers_old": o["layers"] if o else 0,
                       "layers_new": n["layers"] if n else 0,
                       "old": {k: o[k] for k, _, _ in METRICS} if o else None,
                       "new": {k: n[k] for k, _, _ in METRICS} if n else None})
    return {
        "variant": variant.name, "model_id": variant.model_id, "variant_of": variant.base, "label": variant_rules.LABEL,
        "swaps": [swap_text(s) for s in variant.swaps],
        "binds": {b.dim: {"value": b.value if isinstance(b.value, (int, str)) else str(b.value),
                          "bound": int(new_ev.bound[b.dim]), "src": b.src} for b in variant.binds},
        "setting": {"gpu": setting.gpu.name, "config": setting.config.label(), "n_gpus": setting.config.n_gpus,
                    "framework": setting.framework, "kv_dtype": setting.kv_dtype, "batch": setting.batch,
                    "context": setting.context},
        "fits": {"old": old["fits"], "new": new["fits"]},
        "model": {"old": old["model"], "new": new["model"]},
        "groups": groups,
    }


def swap_text(swap: variant_rules.Swap) -> str:
    """A swap in the command line's form: ``layers[dense,moe].attention=dsa_attention``."""
    where = ",".join(swap.templates) + (f" if {swap.when}" if swap.when else "")
    opts = ",".join(f"{k}={v}" for k, v in swap.fill.options.items())
    return f"layers[{where}].{swap.slot}={swap.fill.component}" + (f"({opts})" if opts else "")


_SWAP = re.compile(r"\s*(\w+)\s*(?:\[([^\]]*)\])?\s*\.\s*(\w+)\s*=\s*(\w+)\s*(?:\((.*)\))?\s*")


def parse_swap(text: str) -> variant_rules.Swap:
    """``layers[dense,moe].attention=dsa_attention(rope_theta=rope_theta)``; the brackets may end
    with ``if <condition on layer>`` (``layers[block if layer % 4 != 3].attention=gated_deltanet``)."""
    match = _SWAP.fullmatch(text)
    where = _CLI.at("--swap")
    if not match:
        raise SpecError(where, f"{text!r} is not a swap",
                        "write e.g. --swap 'layers[dense,moe].attention=dsa_attention' "
                        "(optionally `layers[block if layer % 4 != 3]...`, `...=moe(shared_experts=true)`)")
    _, inside, slot, component, opts = match.groups()
    inside = inside or ""
    when = None
    if " if " in f" {inside} ":
        inside, when = re.split(r"(?:^|\s)if\s", inside, maxsplit=1)
        when = when.strip()
    templates = tuple(t.strip() for t in inside.split(",") if t.strip() and t.strip() != "*")
    options = {}
    for item in filter(None, (p.strip() for p in (opts or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(where, f"option {item!r} has no value", "write key=value, e.g. shared_experts=true")
        options[key.strip()] = _literal(value.strip())
    fill = Fill(component, where, options)
    return variant_rules.Swap(slot, templates, fill, where, when)


def _literal(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def parse_bind(corpus: Corpus, text: str) -> variant_rules.Bind:
    """``dim=value``; ``dim`` may also be the config field a corpus model binds that dim to
    (``index_n_heads`` -> ``n_index_heads``, as DeepSeek-V3.2 does)."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise SpecError(_CLI.at("--bind"), f"{text!r} is not a binding", "write --bind dim=value, e.g. --bind index_topk=2048")
    dim = name if name in corpus.dims else config_aliases(corpus).get(name)
    if dim is None:
        raise SpecError(_CLI.at("--bind"), f"{name!r} is neither a dim of corpus/dims.yaml nor a config field a corpus model binds",
                        "write the dim's name (see corpus/dims.yaml)")
    return variant_rules.Bind(dim, _literal(value), f"command line ({text})", _CLI.at("--bind"))


def config_aliases(corpus: Corpus) -> dict[str, str]:
    """Config field -> the dim corpus models bind to exactly ``config.<field>`` (one dim only)."""
    seen: dict[str, set[str]] = {}
    for model in corpus.models.values():
        if model.unverified:       # never published (as component_dims)
            continue
        for dim, text in model.dims.items():
            if isinstance(text, str) and re.fullmatch(r"config\.\w+", text.strip()):
                seen.setdefault(text.strip()[7:], set()).add(dim)
    return {field: dims.pop() for field, dims in seen.items() if len(dims) == 1}


def variant_yaml(variant: variant_rules.ModelVariant) -> dict[str, Any]:
    """The variant as ``corpus/variants/<name>.yaml`` data (``archledger edit --save``)."""
    swaps = []
    for s in variant.swaps:
        entry: dict[str, Any] = {"slot": s.slot}
        if s.templates:
            entry["templates"] = list(s.templates)
        if s.when:
            entry["when"] = s.when
        entry["component"] = s.fill.component
        if s.fill.options:
            entry["with"] = dict(s.fill.options)
        if s.fill.module is not None:
            entry["module"] = s.fill.module
        swaps.append(entry)
    out = {"variant": variant.name, "base": variant.base, "name": variant.display_name, "notes": variant.notes,
           "swaps": swaps}
    if variant.binds:
        out["bind"] = {b.dim: {"value": b.value, "src": b.src} for b in variant.binds}
    return out


# -- the playground's data (results/variants.json) -------------------------------------------------

#: Where the playground's build-time comparison is deployed (the page recomputes the spec-level
#: numbers at any context; SOL times are the planner's at this setting).
PLAYGROUND = {"gpu": "H200", "context": 32768, "batch": 1, "framework": "vllm", "kv_dtype": "bf16"}
#: The numbers the page recomputes as dims change: key -> (label, unit).
RECOMPUTED = {
    "params": ("params", ""), "params_active": ("active params", ""), "weight_bytes": ("weight bytes", "B"),
    "kv_bytes_per_token": ("KV per token", "B"), "kv_bytes_per_request": ("KV per request", "B"),
    "prefill_flops": ("prefill FLOPs", ""), "decode_flops": ("decode FLOPs per token", ""),
}


def formulas(ev: Evaluation, kv_dtype: str = "bf16") -> dict[str, sympy.Expr]:
    """The whole model's spec-level numbers as formulas over its dims, the layer-group counts and
    the scenario (``batch``; ``seq`` = ``ctx`` = ``length`` = the context; decode at one new token)."""
    return analysis_formulas(ev.symbolic, ev.model, ev.corpus, kv_dtype)


def analysis_formulas(a: Analysis, model: ModelSpec, corpus: Corpus, kv_dtype: str = "bf16",
                      decode_seq: int | None = 1) -> dict[str, sympy.Expr]:
    """:func:`formulas` of a symbolic analysis, or of part of one (every number is a sum over its
    rows and caches, so the part's formulas are its share of the whole). ``decode_seq=None`` leaves
    ``seq`` free in the decode FLOPs (a caller summing parts puts it in once)."""
    seq = symbols.dim(symbols.SEQ)
    return {
        "params": quantities.params_total(a),
        "params_active": quantities.params_active(a),
        "weight_bytes": sum((t.total_bytes for t in storage.checkpoint_tensors(a, model, corpus) if t.stack == "main"),
                            sympy.Integer(0)),
        "kv_bytes_per_token": kv.growing_bytes_per_token(a, kv_dtype),
        "kv_bytes_per_request": kv.bytes_per_request(a, None, kv_dtype),
        "prefill_flops": quantities.flops(a, "prefill"),
        "decode_flops": quantities.flops(a, "decode") if decode_seq is None
        else quantities.flops(a, "decode").subs(seq, decode_seq),
    }


def environment(ev: Evaluation, context: int, batch: int = 1) -> dict[str, float]:
    """Every symbol of :func:`formulas` bound: the dims' and group counts' values, the scenario."""
    env = {k: int(v) for k, v in ev.bound.items()}
    env.update({symbols.BATCH: batch, symbols.SEQ: context, symbols.CTX: context, symbols.LENGTH: context})
    return env


def component_dims(corpus: Corpus) -> dict[str, dict[str, list[dict]]]:
    """Component -> dim -> the corpus models whose layers use that component and the value each
    binds the dim to (the playground's pre-fill, each value with its model as the source)."""
    from engine.spec.evaluate import Binding, Walker
    out: dict[str, dict[str, list[dict]]] = {}
    needs: dict[str, set[str]] = {}
    skip = {"hidden", *symbols.SCENARIO_DIMS}     # every model binds these: no suggestion to make
    for model in corpus.models.values():
        if model.unverified:       # never published: the playground cites only gallery models
            continue
        used = {f.component for t in model.templates.values()
                for f in [t, *variant_rules.slots_reached(corpus, model, t).values()]}
        try:
            bound = Walker(corpus, model, Binding("numeric")).model_dims()
        except SpecError:      # a model whose dims do not bind suggests nothing
            continue
        for component in sorted(used):       # a set: its order differs between processes
            if component not in needs:
                needs[component] = variant_rules.required_dims(corpus, corpus.components[component], {}) \
                    if component in corpus.components else set()
            for dim, value in bound.items():
                if dim not in needs[component] or dim in skip:
                    continue
                out.setdefault(component, {}).setdefault(dim, []).append(
                    {"model": model.model_id, "value": int(value)})
    return out


def playground_entry(corpus: Corpus, variant: variant_rules.ModelVariant, gpus, used: dict,
                     evaluations: dict | None = None) -> dict[str, Any]:
    """One variant's page data: the build-time comparison (:func:`compare`), both sides' formula
    trees and environments, and each binding with its meaning, source and the corpus models using
    the same component (their values as alternatives)."""
    from engine.deploy.hardware import find_gpu
    old_ev = evaluate_spec(corpus, corpus.models[variant.base])
    new_ev = evaluate_spec(corpus, variant.spec)
    gpu = find_gpu(gpus, PLAYGROUND["gpu"])
    setting = Setting(gpu, default_config([old_ev, new_ev], gpu), PLAYGROUND["framework"], PLAYGROUND["kv_dtype"],
                      PLAYGROUND["batch"], PLAYGROUND["context"])
    comparison = compare(corpus, variant, setting, old_ev, new_ev)
    if evaluations is not None:
        evaluations[variant.name] = new_ev
    trees = {side: {k: formula_tree.to_tree(f) for k, f in formulas(ev, setting.kv_dtype).items()}
             for side, ev in (("old", old_ev), ("new", new_ev))}
    symbolic = {k: v for k, v in new_ev.symbolic.values.items()}
    binds = []
    for b in variant.binds:
        derived = isinstance(b.value, str)
        tree = formula_tree.to_tree(expr.evaluate(b.value, expr.Scope(symbolic))) if derived else None
        comp = next((s.fill.component for s in variant.swaps), "")
        binds.append({"dim": b.dim, "value": int(new_ev.bound[b.dim]), "expression": b.value if derived else None,
                      "tree": tree, "src": b.src, "doc": corpus.dims[b.dim].doc,
                      "used_by": used.get(comp, {}).get(b.dim, [])})
    return {**comparison, "display_name": variant.display_name, "notes": variant.notes,
            "base_name": corpus.models[variant.base].display_name,
            "file": variant.where.file, "bind_list": binds, "formulas": trees,
            "env": {"old": environment(old_ev, setting.context), "new": environment(new_ev, setting.context)},
            "recomputed": {k: list(v) for k, v in RECOMPUTED.items()}}


def catalog(corpus: Corpus) -> dict[str, Any]:
    """Per corpus model: each slot its layer templates reach, what fills it now, and the library
    components that fit the slot's contract (what the playground offers), each with the dims it
    needs that the model does not bind (their corpus values: :func:`component_dims`)."""
    return {model.model_id: {"name": model.display_name, "slots": model_slots(corpus, model)}
            for model in corpus.models.values() if not model.unverified}   # published models only


def model_slots(corpus: Corpus, model: ModelSpec) -> dict[str, dict]:
    """One model's part of :func:`catalog`: slot -> its templates, current fillers, fitting components."""
    skip = set(symbols.SCENARIO_DIMS)
    needs = _component_needs(corpus)
    slots: dict[str, dict] = {}
    for template, fill in model.templates.items():
        for slot, current in variant_rules.slots_reached(corpus, model, fill).items():
            contract = corpus.slot_contracts.get(slot)
            fits = sorted(n for n, c in corpus.components.items()
                          if contract and c.role in contract.roles and len(c.inputs) == contract.inputs)
            entry = slots.setdefault(slot, {"templates": [], "current": [], "fits": {
                n: [d for d in sorted(needs[n]) if d in corpus.dims and d not in model.dims and d not in skip]
                for n in fits}})
            entry["templates"].append(template)
            if current.component not in entry["current"]:
                entry["current"].append(current.component)
    return slots


_NEEDS: dict[int, tuple] = {}     # id(corpus) -> (corpus, component -> required dims): one per process


def _component_needs(corpus: Corpus) -> dict[str, set]:
    """Every component's :func:`engine.spec.variants.required_dims` (no options given), once per
    corpus: each model's :func:`model_slots` reads all of them."""
    if id(corpus) not in _NEEDS or _NEEDS[id(corpus)][0] is not corpus:
        _NEEDS.clear()
        _NEEDS[id(corpus)] = (corpus, {n: variant_rules.required_dims(corpus, c, {})
                                       for n, c in corpus.components.items()})
    return _NEEDS[id(corpus)][1]


# -- any catalog pick, live: results/playground/<org--name>.json ----------------------------------

#: The value each dim a pick needs is bound to for its symbolic walk: the exported formulas keep
#: the dim free (the page binds the reader's value), so no number shown depends on it.
PLACEHOLDER = 64
_PAGE = Where("<playground>")


def changed_parts(old: Analysis, new: Analysis) -> tuple[Analysis, Analysis]:
    """Both analyses cut to what differs between them: the rows and cache entries one has and the
    other has not, or has unequal. Every number of :func:`analysis_formulas` is a sum over rows and
    caches, so new = old - (old's cut) + (new's cut) exactly."""
    rows_old = {u: r for u, r in old.rows.items() if new.rows.get(u) != r}
    rows_new = {u: r for u, r in new.rows.items() if old.rows.get(u) != r}
    caches_old = tuple(c for c in old.caches if c not in new.caches)
    caches_new = tuple(c for c in new.caches if c not in old.caches)
    return (replace(old, rows=rows_old, caches=caches_old), replace(new, rows=rows_new, caches=caches_new))


_CHUNK = 8     # rows per running sum: short enough that re-sorting its partial sums stays cheap


def _sum_of_parts(a: Analysis, model: ModelSpec, corpus: Corpus, kv_dtype: str) -> dict[str, sympy.Expr]:
    """:func:`analysis_formulas` of ``a`` as one sympy sum of those of its rows and cache entries in
    chunks (the same definitions; a running sum over all rows re-sorts every partial Add, which on
    a large model costs seconds)."""
    rows, caches = list(a.rows.items()), list(a.caches)
    parts = [replace(a, rows=dict(rows[i:i + _CHUNK]), caches=()) for i in range(0, len(rows), _CHUNK)]
    parts += [replace(a, rows={}, caches=tuple(caches[i:i + _CHUNK])) for i in range(0, len(caches), _CHUNK)]
    each = [analysis_formulas(part, model, corpus, kv_dtype, decode_seq=None) for part in parts]
    out = {k: sympy.Add(*(f[k] for f in each)) for k in RECOMPUTED}
    out["decode_flops"] = out["decode_flops"].subs(symbols.dim(symbols.SEQ), 1)
    return out


class _Sites(Walker):
    """The base's symbolic walk, recording each slot node it walks inside a layer template: the
    place a swap walks its new filler instead (node, inputs, scope, layer, template)."""

    def __init__(self, corpus: Corpus, model: ModelSpec):
        super().__init__(corpus, model, Binding("symbolic"))
        self.sites: dict[str, dict[str, tuple]] = {}
        self.template: str | None = None

    def _walk_layers(self, node, inputs, scope, uid, template, tag, layers, count_sym, whole, offset):
        outer, self.template = self.template, template
        try:
            return super()._walk_layers(node, inputs, scope, uid, template, tag, layers, count_sym, whole, offset)
        finally:
            self.template = outer

    def walk_node(self, node, inputs, scope, uid):
        if node.kind == "slot" and self.template is not None:   # a group walked again (it waited for a stream) overwrites
            self.sites.setdefault(node.target, {})[uid] = (node, inputs, scope, self.layer_index, self.template)
        return super().walk_node(node, inputs, scope, uid)


class _Streams(Exception):
    """The new filler publishes or reads a layer stream: only the whole walk can place it."""


class _NoStreams:
    """A site walk's stand-in for the layer stack's streams: any use sends the pick to the whole walk."""

    def publish(self, node, value):
        raise _Streams()

    def spec(self, node):
        raise _Streams()


def _under(uid: str, site: str) -> bool:
    return uid == site or uid.startswith(site + "/")


def _under_any(sites: list[str]):
    """``uid -> any(_under(uid, s) for s in sites)``, by one set lookup and one ``startswith``."""
    exact, prefixes = set(sites), tuple(s + "/" for s in sites)
    return lambda uid: uid in exact or uid.startswith(prefixes)


#: The layer count a site is walked at (substituted by each site's own: every number is linear in it).
_REPEAT = sympy.Symbol("site_repeat", positive=True, integer=True)
#: Site walks shared by every pick of a process (key -> [(config values read, rows, caches, quant
#: -> formula trees)]): the same component in the same scope walks to the same rows whichever model
#: the scope is in, and with the same quant schemes to the same formulas.
_SITE_CACHE: dict[tuple, list[tuple[dict, dict, tuple, dict]]] = {}
#: (key, index) of :data:`_SITE_CACHE` -> the site uid, input uids and outputs it was walked with
#: (:func:`site_walk` relabels the rows for another site sharing the walk).
_SITE_WALKS: dict[tuple, tuple] = {}


def site_walk(key: tuple, index: int, uid: str, site: tuple) -> tuple[dict, list, list]:
    """The rows, caches and output uids of a cached site walk as walked at ``site`` (uid ``uid``):
    the uids under the walked site moved under ``uid``, its inputs' producers replaced by this
    site's, the layer count :data:`_REPEAT` by the site's own."""
    _, rows, caches, _ = _SITE_CACHE[key][index]
    uid0, inputs0, outputs = _SITE_WALKS[(key, index)]
    inputs = dict(zip(inputs0, [u for _, u in site[1]]))
    count = site[2].repeat

    def move(u: str) -> str:
        return uid + u[len(uid0):] if u == uid0 or u.startswith(uid0 + "/") else inputs.get(u, u)

    same = uid == uid0 and all(k == v for k, v in inputs.items())
    out_rows = {}
    for r in rows.values():
        r = replace(r, repeat=_at_repeat(r.repeat, count)) if same else \
            replace(r, uid=move(r.uid), inputs=tuple(move(i) for i in r.inputs), component_uid=move(r.component_uid),
                    repeat=_at_repeat(r.repeat, count))
        out_rows[r.uid] = r
    out_caches = [replace(c, uid=move(c.uid), node_uid=move(c.node_uid), repeat=_at_repeat(c.repeat, count))
                  for c in caches]
    return out_rows, out_caches, [move(u) for _, u in _flat_outputs(outputs)]


def site_bytes(ev: Evaluation, key: tuple, index: int, site: tuple) -> sympy.Expr:
    """Stored bytes (every stack) of a cached site walk's rows at ``site``'s layer count; computed
    once per walk and quant scheme (the walk's rows hold :data:`_REPEAT`)."""
    _, rows, _, trees = _SITE_CACHE[key][index]
    tag = ("bytes", repr(sorted(ev.model.quant.items())))
    if tag not in trees:
        part = replace(ev.symbolic, rows=rows, caches=())
        trees[tag] = sympy.Add(*(t.total_bytes for t in storage.checkpoint_tensors(part, ev.model, ev.corpus)))
    at = (tag, site[2].repeat)        # the same walk at the same layer count: in many models
    if at not in trees:
        trees[at] = _subs(trees[tag], {_REPEAT: site[2].repeat})
    return trees[at]


def _subs(value, mapping: dict):
    return value.xreplace(mapping) if isinstance(value, sympy.Basic) else value


_AT_REPEAT: dict[tuple, tuple] = {}     # (id(value), id(count)) -> (value, count, value at count): both kept


def _at_repeat(value, count):
    """``value`` with :data:`_REPEAT` put to ``count``, once per (value, count) object pair: a cached
    walk's rows are relabelled for every pick and site with the site's same count object."""
    if not isinstance(value, sympy.Basic):
        return value
    key = (id(value), id(count))
    hit = _AT_REPEAT.get(key)
    if hit is None or hit[0] is not value or hit[1] is not count:
        if len(_AT_REPEAT) > 100_000:
            _AT_REPEAT.clear()
        hit = _AT_REPEAT[key] = (value, count, value.xreplace({_REPEAT: count}))
    return hit[2]


def _flat_outputs(value) -> list:
    """The (tensor, uid) pairs of a walked value (a pair, or a dict of them)."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in _flat_outputs(v)]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        return [value]
    return []


def _has_slots(corpus: Corpus, name: str, seen: frozenset = frozenset()) -> bool:
    spec = corpus.components.get(name)
    if spec is None or name in seen:
        return spec is None
    return any(n.kind == "slot" or (n.kind == "component" and _has_slots(corpus, n.target, seen | {name}))
               for n in spec.graph.values())


def _site_key(model: ModelSpec, corpus: Corpus, component: str, fill: Fill, node, inputs, scope, layer,
              kv_dtype: str) -> tuple:
    """Everything a site walk of ``fill`` reads besides config values (checked separately) and
    labels (uids, module paths): a model dim bound to its own symbol is left out, since a dim the
    component reads is that symbol whether the base binds it or the page does."""
    dims = tuple(sorted((k, str(v)) for k, v in scope.dims.items() if v != symbols.dim(k)))
    slots = repr(sorted(scope.slots.items())) if _has_slots(corpus, component) else ""
    per_layer = layer if any("layer" in str(t) for t in node.dims.values()) else None
    return (component, kv_dtype, repr(fill.options), repr(node), repr([v for v, _ in inputs]), dims,
            repr(sorted(scope.options.items())), slots, str(scope.instances), str(scope.active), scope.stacked,
            repr(sorted(scope.renames.items())), scope.role, scope.component, scope.stack,
            tuple(sorted(scope.phases)), per_layer, tuple(sorted(model.drafts)))


def _config_matches(walker: Walker, values: dict) -> bool:
    try:
        return all(walker.config(path) == value for path, value in values.items())
    except KeyError:
        return False


def _site_formulas(ev: Evaluation, walker: Walker, component: str, site: tuple, uid: str, needs: list[str],
                   kv_dtype: str, counted: bool = True) -> tuple[tuple, dict[str, Any]] | None:
    """The new filler's numbers at one site as formula trees, with the site's layer count left as
    :data:`_REPEAT`: (the site's key, the trees), shared through :data:`_SITE_CACHE`. ``counted``
    False: the walk only (a site outside the main stack: nothing to count, but the filler must
    still walk there, as in the whole walk); no trees."""
    corpus = ev.corpus
    node, inputs, scope, layer, _ = site
    fill = variant_rules.inherit(Fill(component, _PAGE, {}), corpus.components[component], scope.slots[node.target])
    dims = {**{d: symbols.dim(d) for d in needs}, **scope.dims}      # a dim the base's scope binds stays the base's
    key = _site_key(ev.model, corpus, component, fill, node, inputs, scope, layer, kv_dtype)
    entries = _SITE_CACHE.setdefault(key, [])
    for i, (values, rows, caches, trees) in enumerate(entries):
        if _config_matches(walker, values):
            break
    else:
        walker.rows, walker.caches, walker.components, walker.config_reads = {}, [], {}, set()
        walker.layer_index = layer
        outputs = walker.walk_component(node, fill, inputs, replace(scope, dims=dims, repeat=_REPEAT), uid)
        entries.append(({path: walker.config(path) for path in walker.config_reads}, dict(walker.rows),
                         tuple(walker.caches), {}))
        i, (_, rows, caches, trees) = len(entries) - 1, entries[-1]
        _SITE_WALKS[(key, i)] = (uid, [u for _, u in inputs], outputs)
    if not counted:
        return (key, i, None), None
    quant = repr(sorted(ev.model.quant.items()))      # how the weights are stored: the weight bytes only
    if quant not in trees:
        part = replace(ev.symbolic, rows=rows, caches=caches)
        trees[quant] = {k: formula_tree.to_tree(f) for k, f in _sum_of_parts(part, ev.model, corpus, kv_dtype).items()}
    return (key, i, quant), trees[quant]


def _old_at_sites(ev: Evaluation, sites: dict[str, tuple], kv_dtype: str) -> dict[str, Any] | None:
    """The base's numbers of the rows under the sites, per layer template (``templates``: template
    -> trees), and whether the reader may swap some templates only (``tickable``: no layer stream
    touches the sites). None when a stream published inside the sites is read outside them (a
    swap would change the reader's rows too; a reader inside reading a producer outside is fine:
    the producer's rows do not depend on its readers)."""
    a = ev.symbolic

    def inside(uid: str) -> bool:
        return any(_under(uid, site) for site in sites)
    touched = False
    for stream in a.streams:
        readers = [*(r for _, r in stream.readers), *(p[-1] for p in stream.pairs)]
        produced_inside = any(inside(u) for _, u in stream.producers)
        if produced_inside and not all(inside(u) for u in readers):
            return None
        touched = touched or produced_inside or any(inside(u) for u in readers)
    out: dict[str, Any] = {}
    for template in dict.fromkeys(site[4] for site in sites.values()):
        mine = [u for u, site in sites.items() if site[4] == template]
        under = _under_any(mine)
        part = replace(a, rows={u: r for u, r in a.rows.items() if under(u)},
                       caches=tuple(c for c in a.caches if under(c.node_uid)))
        out[template] = {k: formula_tree.to_tree(f) for k, f in _sum_of_parts(part, ev.model, ev.corpus, kv_dtype).items()}
    return {"templates": out, "tickable": not touched}


class Picks:
    """What the picks of one base model share: the base's slot sites (recorded by its symbolic walk,
    :class:`_Sites`), a walker of the base for the new fillers, the old fillers' numbers per slot
    (``old``) and the new fillers' numbers per distinct site (``blocks``: the page evaluates them)."""

    def __init__(self, ev: Evaluation, sites: dict[str, dict[str, tuple]]):
        self.ev, self.sites = ev, sites
        self.walker = Walker(ev.corpus, ev.model, Binding("symbolic"))
        self.walker.model_dims()
        self.walker.layer_ctx = _NoStreams()
        self.old: dict[str, Any] = {}
        self.blocks: list[dict] = []
        self._index: dict[tuple, int] = {}
        self.walks: dict[tuple, tuple] = {}    # (slot, component) -> (needs, its sites, their walks): the site route
        self.whole: dict[tuple, tuple] = {}    # (slot, component) -> (variant spec, its symbolic walk): the others
        self.walked: dict[tuple, dict] = {}    # (slot, component) -> site uid -> its site walk's rows, caches, outputs, bytes
        self.was: dict[tuple, dict] = {}       # (base row uids, ids of its caches, kv dtype) -> _sum_of_parts of them

    def block(self, key: tuple, trees: dict) -> int:
        if key not in self._index:
            self._index[key] = len(self.blocks)
            self.blocks.append(trees)
        return self._index[key]


def pick(ev: Evaluation, slot: str, component: str, kv_dtype: str = "bf16",
         shared: Picks | None = None) -> dict[str, Any]:
    """One catalog pick of the playground: ``component`` in ``slot`` of every layer template of
    ``ev``'s model reaching it (the variant ``archledger edit MODEL --swap 'layers[..].SLOT=COMPONENT'``
    makes). Returns the templates swapped, the dims the component needs that the base does not
    bind, and how each number of :data:`RECOMPUTED` changes (the new side is the base's number
    plus the change; formula trees over the base's dims, the needed dims and the scenario):

    * ``sites``: [[block, layer count tree, template], ...] (with ``shared``, when no layer
      stream crosses the slot's sites): at each place the base walks the slot, the new filler's
      numbers (``shared.blocks[block]`` at ``site_repeat`` = that count) replace the old filler's
      (``shared.old[slot]["templates"]``, per template); ``tickable``: no stream touches the
      sites, so the reader may swap some of the templates only (the sum over those);
    * else ``delta``: new - old from the variant's whole symbolic walk (the reference: the two
      agree on every pick of the corpus, tests/test_site_playground_any.py);

    or ``{"error": ...}`` when the swap does not resolve or walk (one line, as ``edit`` prints it)."""
    corpus, base = ev.corpus, ev.model
    swap = variant_rules.Swap(slot, (), Fill(component, _PAGE, {}), _PAGE)
    out: dict[str, Any] = {}
    try:
        needs = variant_rules.missing_dims(corpus, base, [swap])
        binds = [variant_rules.Bind(d, PLACEHOLDER, "placeholder", _PAGE) for d in needs]
        variant = variant_rules.resolve(corpus, "pick", base.model_id, [swap], binds, _PAGE)
        if shared is not None:
            mine = {u: site for u, site in shared.sites.get(slot, {}).items() if site[4] in variant.changed}
            if slot not in shared.old:
                shared.old[slot] = _old_at_sites(ev, mine, kv_dtype)
            if shared.old[slot] is not None:
                try:
                    # every number of RECOMPUTED is the main stack's: a site in another (MTP) is
                    # walked (the filler must fit there too) but counts nothing
                    walked = {}       # site uid -> its walk's (key, index) in _SITE_CACHE
                    for uid, site in mine.items():
                        if site[2].stack != "main":
                            walked[uid] = _site_formulas(ev, shared.walker, component, site, uid, needs, kv_dtype,
                                                         counted=False)[0][:2]
                    out["sites"] = []
                    for uid, site in mine.items():
                        if site[2].stack == "main":
                            ident, trees = _site_formulas(ev, shared.walker, component, site, uid, needs, kv_dtype)
                            walked[uid] = ident[:2]
                            out["sites"].append([shared.block(ident, trees), formula_tree.to_tree(site[2].repeat),
                                                 site[4]])
                    out["tickable"] = shared.old[slot]["tickable"]
                    shared.walks[(slot, component)] = (needs, mine, walked)      # the SOL's site route
                except _Streams:
                    out = {}
        if not out:
            whole = walk_model(corpus, variant.spec, Binding("symbolic"))
            if shared is not None:     # the SOL's whole route plans this walk
                shared.whole[(slot, component)] = (variant.spec, whole)
            old_part, new_part = changed_parts(ev.symbolic, whole)
            # the base's rows a whole walk changes: the same for most whole-walk picks of a slot
            key = (tuple(old_part.rows), tuple(id(c) for c in old_part.caches), kv_dtype)   # the base's own rows
            was = shared.was.get(key) if shared is not None else None
            if was is None:
                was = _sum_of_parts(old_part, base, corpus, kv_dtype)
                if shared is not None:
                    shared.was[key] = was
            now = _sum_of_parts(new_part, variant.spec, corpus, kv_dtype)
            out["delta"] = {k: formula_tree.to_tree(now[k] - was[k]) for k in RECOMPUTED}
    except SpecError as exc:
        return {"error": exc.problem}
    trees = list(out.get("delta", {}).values())
    for b, r, _ in out.get("sites", []):
        trees += [*shared.blocks[b].values(), r]
    free = set().union(*(free_names(t) for t in trees)) - {_REPEAT.name}     # memoized: a slot's picks share blocks
    known = set(ev.bound) | set(needs) | {symbols.BATCH, symbols.SEQ, symbols.CTX, symbols.LENGTH}
    if free - known:   # a symbol the page could not bind: say so rather than show a wrong number
        return {"error": f"the swapped model reads {', '.join(sorted(free - known))}, which the page cannot bind"}
    templates = list(variant.changed)
    return {"templates": templates, "needs": needs, "swap": f"layers[{','.join(templates)}].{slot}={component}", **out}


def pick_change(doc: dict, p: dict, env: dict[str, float], slot: str,
                templates: list[str] | None = None) -> dict[str, float]:
    """new - old of each number of a pick of :func:`model_playground`'s ``doc`` at ``env`` (the
    reader's dims and the scenario on top of ``doc["env"]``), the component swapped into
    ``templates`` only (default: all the pick's; a subset needs ``p["tickable"]``): in Python what
    static/js/playground.js computes, for the tests."""
    if "delta" in p:
        assert templates is None or set(templates) == set(p["templates"]), "a whole-walk pick swaps all its templates"
        return {k: formula_tree.evaluate(t, env) for k, t in p["delta"].items()}
    chosen = set(p["templates"] if templates is None else templates)
    assert chosen == set(p["templates"]) or p["tickable"], "a stream touches this slot: all templates or none"
    out = {k: 0.0 for k in RECOMPUTED}
    for template, trees in doc["old"][slot]["templates"].items():
        if template in chosen:
            for k, t in trees.items():
                out[k] -= formula_tree.evaluate(t, env)
    for block, repeat, template in p["sites"]:
        if template in chosen:
            at = {**env, _REPEAT.name: formula_tree.evaluate(repeat, env)}
            for k, t in doc["blocks"][block].items():
                out[k] += formula_tree.evaluate(t, at)
    return out


def sites_of(ev: Evaluation) -> dict[str, dict[str, tuple]]:
    """The base's slot sites, by another symbolic walk (the build has them: :func:`evaluate_with_sites`)."""
    recorder = _Sites(ev.corpus, ev.model)
    recorder.walk()
    return recorder.sites


def evaluate_with_sites(corpus: Corpus, model: ModelSpec) -> tuple[Evaluation, dict]:
    """:func:`engine.spec.api.evaluate_spec` whose symbolic walk also records the slot sites (the
    same Walker, so the same analysis), and those sites."""
    recorder = _Sites(corpus, model)
    symbolic = recorder.walk()
    return Evaluation(model, corpus, walk_model(corpus, model, Binding("numeric")), symbolic), recorder.sites


@functools.lru_cache(maxsize=2)
def _tables(root):
    return load_tables(root)


@functools.lru_cache(maxsize=1)
def _default_gpus():
    from engine.deploy.hardware import load_gpus
    return load_gpus()


_USED: dict[int, tuple] = {}     # id(corpus) -> (corpus, component_dims): one per process


def prefill_values(corpus: Corpus, component: str, needs: list[str]) -> dict[str, int]:
    """The page's pre-fill of each dim a pick needs: the first corpus model's value using the same
    component (:func:`component_dims`), else :data:`PLACEHOLDER` (the page leaves it empty)."""
    if id(corpus) not in _USED or _USED[id(corpus)][0] is not corpus:
        _USED.clear()
        _USED[id(corpus)] = (corpus, component_dims(corpus))
    used = _USED[id(corpus)][1].get(component, {})
    return {d: used[d][0]["value"] if used.get(d) else PLACEHOLDER for d in needs}


def template_subsets(p: dict) -> list[tuple[str, ...]]:
    """The layer templates the page lets the reader swap pick ``p`` into: every non-empty subset of
    its templates where it may tick some only (``tickable``), else all of them; each in the pick's
    order (the page keys its SOL entry by them joined with commas), the whole set first."""
    templates = tuple(p["templates"])
    if not p.get("tickable") or len(templates) < 2:
        return [templates]
    chosen = [tuple(t for i, t in enumerate(templates) if mask >> i & 1) for mask in range(1, 1 << len(templates))]
    return sorted(chosen, key=lambda s: -len(s))


def _pick_sol(bases, slot: str, component: str, p: dict, shared: Picks | None = None) -> dict[str, Any]:
    """The SOL times of pick ``p`` (engine.playground.playground_sol) at its pre-filled binding, per subset
    of its layer templates the page lets the reader tick (:func:`template_subsets`; key: the subset
    joined with commas): each the variant ``edit --swap 'layers[SUBSET].SLOT=COMPONENT'`` makes,
    by the site route where the pick has one and it applies, else from the variant's whole plan."""
    from engine.playground import playground_sol
    corpus, base = bases.ev.corpus, bases.ev.model
    values = prefill_values(corpus, component, p["needs"])
    subsets = template_subsets(p)
    if shared is not None and (slot, component) in shared.walks:
        needs, sites, walked = shared.walks[(slot, component)]
        try:
            rows = {uid: (*site_walk(*walked[uid], uid, site), site_bytes(bases.ev, *walked[uid], site))
                    for uid, site in sites.items()}
            shared.walked[(slot, component)] = rows       # the graph diff's block (_pick_blocks)
            found = playground_sol.site_sol(bases, needs, sites, rows, values, subsets)
        except (SpecError, _Streams):
            found = None
        if found is not None:
            return {",".join(chosen): entry for chosen, entry in found.items()}
    out = {}
    for chosen in subsets:
        every = len(chosen) == len(p["templates"])
        try:
            if every and shared is not None and (slot, component) in shared.whole:
                spec, whole = shared.whole[(slot, component)]
            else:
                binds = [variant_rules.Bind(d, v, "pre-fill", _PAGE) for d, v in values.items()]
                swap = variant_rules.Swap(slot, () if every else chosen, Fill(component, _PAGE, {}), _PAGE)
                spec = variant_rules.resolve(corpus, "pick", base.model_id, [swap], binds, _PAGE).spec
                whole = walk_model(corpus, spec, Binding("symbolic"))
            found = playground_sol.whole_sol(bases, spec, whole, p["needs"], values)
            out[",".join(chosen)] = found if found is not None else \
                {"error": "a formula of this swap reads a symbol the page cannot bind"}
        except SpecError as exc:
            out[",".join(chosen)] = {"error": exc.problem}
    return out


def block_graph(rows: dict, uid: str) -> dict[str, Any]:
    """The new filler's block at site ``uid`` (``rows``: its rows there, from its site walk or the
    variant's whole walk) in the model document's form that site_builder.graphs.level_graph draws:
    its ops (uid, name, op, phases, inputs, output axes) and the sub-components they sit in (no
    badges: the walk is symbolic). The site draws the playground's graph diff from it (old: the
    base's document at ``uid``)."""
    ops = [{"uid": r.uid, "name": r.name, "op": r.op, "phases": sorted(r.phases), "inputs": list(r.inputs),
            "out_shape": [a.name for a in r.out.axes]} for r in rows.values() if _under(r.uid, uid)]
    inner = {r.component_uid: r.component for r in rows.values()
             if r.component_uid != uid and _under(r.component_uid, uid)}
    one = {"value": 1}
    return {"site": uid, "ops": ops, "caches": [],
            "components": [{"uid": u, "component": c, "template": "", "repeat": one, "instances": one, "active": one}
                           for u, c in sorted(inner.items())]}


def _pick_blocks(shared: Picks, slot: str, component: str, p: dict) -> list[dict]:
    """:func:`block_graph` of pick ``p`` at each of its main-stack sites (one per layer template:
    the old filler may differ between templates)."""
    if (slot, component) in shared.walks:
        _, sites, walked = shared.walks[(slot, component)]
        done = shared.walked.get((slot, component), {})
        return [block_graph(done[uid][0] if uid in done else site_walk(*walked[uid], uid, site)[0], uid)
                for uid, site in sites.items() if site[2].stack == "main"]
    if (slot, component) in shared.whole:
        whole = shared.whole[(slot, component)][1]
        return [block_graph(whole.rows, uid) for uid, site in shared.sites.get(slot, {}).items()
                if site[2].stack == "main" and site[4] in p["templates"]]
    return []


def model_playground(ev: Evaluation, context: int | None = None, sites: dict | None = None,
                     gpus: dict | None = None, only: set | None = None) -> dict[str, Any]:
    """``results/playground/<org--name>.json``: the base's :func:`formulas` as trees and their
    environment, :func:`pick` for every slot x fitting component of its catalog entry (a slot's
    only current filler excepted: nothing would change), the old fillers' numbers per slot
    (``old``) and the new fillers' per distinct site (``blocks``). Depends on the model's spec and
    snapshot, the component library, slots.yaml and the engine only (pre-fill values live in
    variants.json), so it is carried with the model's other results. ``sites``: the base's
    (:func:`evaluate_with_sites`), else recorded here; ``only``: just these (slot, component) picks
    (the tests'). Each pick also carries its SOL times (``sol``, engine.playground.playground_sol: one
    entry per subset of its layer templates the reader may tick, :func:`template_subsets`) on
    :data:`PLAYGROUND`'s GPU from ``gpus`` (default: gpus/), the base's in ``sol_base``."""
    context = context or PLAYGROUND["context"]
    slots = model_slots(ev.corpus, ev.model)
    shared = Picks(ev, sites if sites is not None else sites_of(ev))
    picks = {slot: {c: pick(ev, slot, c, PLAYGROUND["kv_dtype"], shared) for c in entry["fits"]
                    if entry["current"] != [c] and (only is None or (slot, c) in only)}
             for slot, entry in slots.items()}
    # the SOL times: the planner's programs at the page's setting (engine.playground.playground_sol)
    from engine.playground import playground_sol
    from engine.playground.playground_sol import Bases
    from engine.deploy.hardware import find_gpu
    gpu = find_gpu(gpus if gpus is not None else _default_gpus(), PLAYGROUND["gpu"])
    bases = Bases(ev, gpu, _tables(ev.corpus.root / "fusion").get(PLAYGROUND["framework"]), context,
                  PLAYGROUND["framework"], PLAYGROUND["kv_dtype"])
    for slot, chosen in picks.items():
        for component, p in chosen.items():
            if "error" not in p:
                p["sol"] = _pick_sol(bases, slot, component, p, shared)
    # the new filler's block as drawn in the graph diff (site_builder.render._playground_diffs)
    graphs: list = []
    seen: dict[str, int] = {}
    for slot, chosen in picks.items():
        for component, p in chosen.items():
            for block in (_pick_blocks(shared, slot, component, p) if "error" not in p else []):
                text = json.dumps(block, sort_keys=True)
                if text not in seen:
                    seen[text] = len(graphs)
                    graphs.append(block)
                p.setdefault("graphs", []).append(seen[text])
    sol_trees = playground_sol.intern(picks)
    playground_sol.forget()
    return {"model_id": ev.model.model_id, "context": context,
            "formulas": {k: formula_tree.to_tree(f) for k, f in
                         _sum_of_parts(ev.symbolic, ev.model, ev.corpus, PLAYGROUND["kv_dtype"]).items()},
            "env": environment(ev, context), "picks": picks, "old": shared.old, "blocks": shared.blocks,
            "sol_base": bases.trees, "sol_trees": sol_trees,
            "sol_setting": {"gpu": PLAYGROUND["gpu"], "framework": PLAYGROUND["framework"], "context": context},
            "graphs": graphs,
            "repeat": _REPEAT.name, "recomputed": {k: list(v) for k, v in RECOMPUTED.items()}}


def playground_document(corpus: Corpus, gpus, chosen: list | None = None, evaluations: dict | None = None) -> dict[str, Any]:
    """``results/variants.json``: the variants' page data (``chosen``, default all) and the slot
    catalog; ``evaluations`` (if given) receives each variant's evaluation by name."""
    chosen = list(corpus.variants.values()) if chosen is None else chosen
    used = component_dims(corpus)
    return {"label": variant_rules.LABEL, "setting": PLAYGROUND,
            "variants": [playground_entry(corpus, v, gpus, used, evaluations) for v in chosen],
            "catalog": catalog(corpus), "used": used,
            "dims": {d: corpus.dims[d].doc for d in sorted({d for c in used.values() for d in c})},
            "contracts": {n: {"roles": list(c.roles), "doc": c.doc} for n, c in corpus.slot_contracts.items()}}
