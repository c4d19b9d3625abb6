"""The playground's data (results/variants.json): each model's slots and the library components
that fit them, the numbers the page recomputes as formula trees over the dims, and the setting
the build-time comparison is deployed at (:data:`PLAYGROUND`).

Layer: engine.playground (on :mod:`engine.playground.variant`'s comparison).
"""
from __future__ import annotations

from typing import Any
import sympy
from engine.language import expr, formula_tree, kv, quantities, storage, symbols
from engine.language import variants as variant_rules
from engine.language.api import Evaluation, evaluate_spec
from engine.language.corpus import Corpus
from engine.language.errors import SpecError
from engine.language.evaluate import Analysis
from engine.language.ir import ModelSpec


#: Where the playground's build-time comparison is deployed (the page recomputes the spec-level
#: numbers at any context; SOL times are the planner's at this setting).
PLAYGROUND = {"gpu": "H200", "context": 32768, "batch": 1, "framework": "vllm", "kv_dtype": "bf16"}


#: The numbers the page recomputes as dims change: key -> (label, unit).
RECOMPUTED = {
    "params": ("params", ""), "params_active": ("active params", ""), "weight_bytes": ("weight bytes", "B"),
    "kv_bytes_per_token": ("KV per token", "B"), "kv_bytes_per_request": ("KV per request", "B"),
    "prefill_flops": ("prefill FLOPs", ""), "decode_flops": ("decode FLOPs per token", ""),
}
from engine.playground.playground_sol import default_config
from engine.playground.variant import Setting, compare


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
        # one Add of every tensor's bytes (the same sum: a running sum re-sorts each partial Add, which
        # on a whole model's few thousand tensors cost seconds: results/variants.json's formulas)
        "weight_bytes": sympy.Add(*(t.total_bytes for t in storage.checkpoint_tensors(a, model, corpus)
                                    if t.stack == "main")),
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
    from engine.language.evaluate import Binding, Walker
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
        binds.append({"dim": b.dim, "value": int(new_ev.bound[b.dim]), "expression": b.value if derived else None,
                      "tree": tree, "src": b.src, "doc": corpus.dims[b.dim].doc,
                      "used_by": used_by(variant, used, b.dim)})
    return {**comparison, "display_name": variant.display_name, "notes": variant.notes,
            "base_name": corpus.models[variant.base].display_name,
            "file": variant.where.file, "bind_list": binds, "formulas": trees,
            "env": {"old": environment(old_ev, setting.context), "new": environment(new_ev, setting.context)},
            "recomputed": {k: list(v) for k, v in RECOMPUTED.items()}}


def used_by(variant, used: dict, dim: str) -> list:
    """The corpus models whose ``dim`` the variant's swapped-in component binds too (``used``:
    :func:`component_dims`), the alternatives a bind lists; [] when none."""
    component = next((s.fill.component for s in variant.swaps), "")
    return used.get(component, {}).get(dim, [])


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
    """Every component's :func:`engine.language.variants.required_dims` (no options given), once per
    corpus: each model's :func:`model_slots` reads all of them."""
    if id(corpus) not in _NEEDS or _NEEDS[id(corpus)][0] is not corpus:
        _NEEDS.clear()
        _NEEDS[id(corpus)] = (corpus, {n: variant_rules.required_dims(corpus, c, {})
                                       for n, c in corpus.components.items()})
    return _NEEDS[id(corpus)][1]
