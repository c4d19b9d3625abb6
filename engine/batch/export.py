"""The per-model document the site's inspector reads: numbers with their formulas, the structure.

Layer: engine.batch -> build/results. ``build/results/models/<org--name>.json`` holds, for one model,
everything a page shows that is not a Parquet row: the dims (spec symbol, value, config binding),
the overview quantities, the component tree and every primitive op with shapes and per-op
numbers at a stated reference scenario, and the cache entries. Every number is written beside its
formula (sympy text over the spec's dims) and the node it comes from; pages display these, they
never compute them. Reference scenario for per-op numbers: one request, a 4096-token prompt
(prefill) and one token at 4096 context (decode), on one GPU, unfused, BF16 activations and KV.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import sympy
from sympy.core.exprtools import decompose_power
from sympy.core.sorting import default_sort_key

from engine.language import kv, symbols
from engine.language.memo_printer import MemoStrPrinter
from engine.language.quantities import quantity
from engine.language.api import Evaluation
from engine.deploy.cost import intensity
from engine.deploy.step_functions import KV_BYTES
from engine.deploy.step_totals import step_totals
from engine.language.finite import check_document
from engine.batch.landscape import model_facts
from engine.batch.layer_plan import layer_plans


REFERENCE = {"batch": 1, "prompt": 4096}
#: Context lengths (tokens) of the per-model cache curve (the model document's ``kv_curve``, and
#: models.parquet's ``kv_context_lengths``).
KV_LENGTHS = (1024, 4096, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)



def _shape(tensor) -> list[str]:
    return [a.name for a in tensor.axes]


def _dims(ev: Evaluation) -> list[dict]:
    out = []
    model, table = ev.model, ev.corpus.dims
    for name, value in ev.numeric.values.items():
        info = table.get(name)
        binding = model.dims.get(name)
        out.append({"name": name, "value": int(value), "binding": str(binding) if binding is not None else "",
                    "kind": info.kind if info else "layer_count", "shard": info.shard if info else "none",
                    "doc": info.doc if info else "Layers of one layer template (from the per-layer schedule)."})
    return out


def _point(phase: str) -> dict:
    seq = REFERENCE["prompt"] if phase == "prefill" else 1
    return {symbols.dim("batch"): REFERENCE["batch"], symbols.dim("seq"): seq,
            symbols.dim("ctx"): REFERENCE["prompt"], KV_BYTES: 2}


def _at(expr, point: dict):
    """``expr.subs(point)``, by the cheaper ``xreplace`` when that gives an exact number: a point of
    numbers for symbols evaluates to one exact rational either way (anything else, a Float or a
    symbol left over, takes ``subs`` itself, so its value is the one it always was)."""
    value = expr.xreplace(point) if isinstance(expr, sympy.Basic) else expr
    if isinstance(value, sympy.Rational):
        return value
    return expr.subs(point)


class _Printer(MemoStrPrinter):
    """``str(expr)``'s printer, remembering what it printed below the top level
    (:class:`engine.language.memo_printer.MemoStrPrinter`): the formulas of one document share most of
    their terms (a component's sum holds its children's rows)."""

    def __init__(self):
        super().__init__({"order": None})      # what Printable.__str__ passes to sstr
        self._term_data: dict = {}     # term -> _term_data(term)

    def _as_ordered_terms(self, expr, order=None):
        """The terms of a sum in the order ``str`` prints them (sympy's ``Expr.as_ordered_terms`` at
        the default order), each term's sort data (``Expr.as_terms``: its coefficient as a complex
        number, its powers) computed once per document: a component's sum repeats its rows' terms,
        and the coefficient's conversion to ``complex`` is most of the sort's cost."""
        if (order or self.order) is not None or not isinstance(expr, sympy.Add):
            return super()._as_ordered_terms(expr, order=order)
        args = expr.args
        if len(args) == 2:      # as_ordered_terms' special case (a number and a negative multiple)
            return super()._as_ordered_terms(expr, order=order)
        terms, gens = [], set()
        for term in args:
            data = self._term_data.get(term)
            if data is None:
                data = self._term_data[term] = _term_data(term)
            if data is _ORDER:
                return super()._as_ordered_terms(expr, order=order)
            terms.append((term, data))
            gens.update(data[1])
        gens = sorted(gens, key=default_sort_key)
        index = {g: i for i, g in enumerate(gens)}
        keyed = []
        for term, (coeff, cpart, ncpart) in terms:
            monom = [0] * len(gens)
            for base, exp in cpart.items():
                monom[index[base]] = exp
            keyed.append((term, (coeff, tuple(monom), ncpart)))
        key, reverse = expr._parse_order(None)
        return [term for term, _ in sorted(keyed, key=key, reverse=reverse)]


_ORDER = object()     # _term_data of an Order term: as_ordered_terms sorts those apart (never in a document)


def _term_data(term):
    """One term's part of sympy's ``Expr.as_terms`` (the same steps): ((real, imag) of its
    coefficient, {base: exponent} of its commutative factors, its non-commutative ones)."""
    if term.is_Order:
        return _ORDER
    coeff, rest = term.as_coeff_Mul()
    coeff = complex(coeff)
    cpart, ncpart = {}, []
    if rest is not sympy.S.One:
        for factor in sympy.Mul.make_args(rest):
            if factor.is_number:
                try:
                    coeff *= complex(factor)
                except (TypeError, ValueError):
                    pass
                else:
                    continue
            if factor.is_commutative:
                base, exp = decompose_power(factor)
                cpart[base] = exp
            else:
                ncpart.append(factor)
    return (coeff.real, coeff.imag), cpart, tuple(ncpart)


class _Texts(dict):
    """``str(expr)`` once per distinct expression of one document (ops repeat per phase, components
    share their rows, templates repeat formulas), printed by one :class:`_Printer`."""

    def __init__(self):
        super().__init__()
        self._printer = _Printer()

    def __call__(self, expr) -> str:
        if not isinstance(expr, sympy.Basic):    # a plain number: str() as ever, never a key
            return str(expr)
        return self[expr]

    def __missing__(self, expr) -> str:
        text = self[expr] = self._printer.doprint(expr)
        return text

    def quantity(self, value, formula) -> dict:
        """:func:`engine.language.quantities.quantity` with the formula printed here."""
        return quantity(value, formula, self)


def _reference_bytes(ev: Evaluation, formulas: dict | None = None) -> dict[str, dict[str, float]]:
    """Per row uid and phase: HBM bytes of the unfused single-GPU program at the reference point
    (per call; ``formulas``, when given, receives the same per call over the scenario symbols)."""
    from engine.deploy import Options, place
    from engine.deploy.parallel import ParallelConfig
    out: dict[str, dict[str, float]] = {}
    # every stack, not only the served one: an MTP stack's blocks have weights and traffic too
    # (placing only ``main`` left their bytes at 0 beside non-zero FLOPs)
    stacks = sorted({row.stack for row in ev.numeric.rows.values()})
    # (all calls' bytes, repeat, phase) -> (one call's bytes, its value at the point): the layers of a
    # template repeat their steps' expressions, so each is divided and evaluated once
    seen: dict[tuple, tuple] = {}
    for phase, program in ((phase, program) for stack in stacks
                           for phase, (program, _) in place(ev, ParallelConfig(), 8, Options(), False, stack).items()):
        point = _point(phase)
        for step in program.steps:
            if step.kind == "compute":
                key = (step_totals(step)[1], step.repeat, phase)
                if key not in seen:
                    per_call = key[0] / step.repeat
                    seen[key] = (per_call, float(_at(per_call, point)))
                per_call, value = seen[key]
                out.setdefault(step.uid, {})[phase] = value
                if formulas is not None:
                    formulas.setdefault(step.uid, {})[phase] = per_call
    return out


def model_document(ev: Evaluation, verification: dict | None = None) -> dict[str, Any]:
    """The inspector's data for one model (see the module doc); ``verification`` is the guard
    report (:meth:`engine.verify.validate.Report.as_dict`) shown as the page's guard table."""
    model = ev.model
    overview = ev.overview()
    text = _Texts()
    flat = {}
    for key, q in overview.items():
        if isinstance(q, dict):
            flat[key] = {sub: text.quantity(v.value, v.formula) for sub, v in q.items()}
        else:
            flat[key] = text.quantity(q.value, q.formula)
    num, sym = ev.numeric, ev.symbolic
    bytes_formula: dict = {}
    bytes_at = _reference_bytes(ev, bytes_formula)
    ops = []
    at_decode: dict = {}      # per decode row: its FLOPs at the reference point (the landscape's too)
    exact: dict = {}          # (row uid, phase) -> its FLOPs at the reference point when an exact number
    for uid, row in num.rows.items():
        srow = sym.rows[uid]
        entry = {"uid": uid, "name": row.name, "op": row.op, "component_uid": row.component_uid,
                 "component": row.component, "role": row.role, "stack": row.stack,
                 "phases": sorted(row.phases), "inputs": list(row.inputs),
                 "in_shapes": [_shape(t) for t in row.in_shapes], "out_shape": _shape(row.out),
                 "out_sizes": [text(a.size) for a in row.out.axes],    # (str() of each: sizes repeat op to op)
                 "params": text.quantity(row.params, srow.params),
                 "repeat": text.quantity(row.repeat, srow.repeat), "instances": text.quantity(row.instances, srow.instances),
                 "active": text.quantity(row.active, srow.active),
                 "leaves": [{"key": l.key, "shape": [a.name for a in l.axes], "kind": l.kind} for l in row.leaves],
                 "weight_axes": dict(row.weight_axes), "shares": row.shares or "",
                 "line": row.where.line, "file": row.where.file}
        for phase in ("prefill", "decode"):
            if phase in row.phases:
                point = _point(phase)
                value = _at(row.flops, point)
                if phase == "decode":
                    at_decode[uid] = value
                if isinstance(value, sympy.Rational):
                    exact[(uid, phase)] = value
                entry[f"flops_{phase}"] = {"value": float(value), "formula": text(srow.flops)}
                if uid in bytes_at and phase in bytes_at[uid]:
                    traffic = bytes_at[uid][phase]
                    entry[f"bytes_{phase}"] = traffic
                    entry[f"intensity_{phase}"] = float(intensity(value, traffic)) if traffic else None
        ops.append(entry)
    components = []
    for uid, comp in num.components.items():
        scomp = sym.components[uid]
        parent = uid.rsplit("/", 1)[0] if "/" in uid else ""
        inside = [u for u in num.rows if u.startswith(uid + "/")]
        owned = [u for u in inside if "prefill" in num.rows[u].phases and not num.rows[u].shares]
        # sympy.Add(*terms) flattens once; sum() re-flattened a growing Add at every term (nested
        # components made it quadratic in the model's rows)
        params = sympy.Add(*(num.rows[u].params * num.rows[u].repeat * num.rows[u].instances for u in owned))
        sparams = sympy.Add(*(sym.rows[u].params * sym.rows[u].repeat * sym.rows[u].instances for u in owned))
        totals = {}
        for phase in ("prefill", "decode"):
            rows = [u for u in inside if phase in num.rows[u].phases]
            point = _point(phase)
            sflops = sympy.Add(*(sym.rows[u].flops * sym.rows[u].repeat for u in rows))
            traffic = sum(bytes_at.get(u, {}).get(phase, 0.0) * float(num.rows[u].repeat) for u in rows)
            if all((u, phase) in exact and isinstance(num.rows[u].repeat, sympy.Rational) for u in rows):
                # the rows' exact values summed: the exact number the sum's formula takes at the point
                at = sympy.Add(*(exact[(u, phase)] * num.rows[u].repeat for u in rows))
            else:
                at = _at(sympy.Add(*(num.rows[u].flops * num.rows[u].repeat for u in rows)), point)
            totals[f"flops_{phase}"] = {"value": float(at), "formula": text(sflops)}
            totals[f"bytes_{phase}"] = traffic
        # one layer's worth: parameters per repeat, cache bytes per token (BF16) per repeat
        per_layer = sympy.Add(*(num.rows[u].params * num.rows[u].instances for u in owned))
        sper_layer = sympy.Add(*(sym.rows[u].params * sym.rows[u].instances for u in owned))
        mine = [(c, sc) for c, sc in zip(num.caches, sym.caches) if c.node_uid.startswith(uid + "/")]
        kv_layer = sympy.Add(*(c.per_token * 2 for c, _ in mine if c.growth != "state"))
        skv_layer = sympy.Add(*(sc.per_token * 2 for _, sc in mine if sc.growth != "state"))
        components.append({"uid": uid, "component": comp.component, "role": comp.role, "stack": comp.stack,
                           "parent": parent, "template": comp.template or "", "layers": list(comp.layers),
                           "repeat": text.quantity(comp.repeat, scomp.repeat), "instances": text.quantity(comp.instances, scomp.instances),
                           "active": text.quantity(comp.active, scomp.active), "params": text.quantity(params, sparams),
                           "params_per_layer": text.quantity(per_layer, sper_layer),
                           "kv_bytes_per_token_per_layer": text.quantity(kv_layer, skv_layer), **totals})
    caches = []
    for c, s in zip(num.caches, sym.caches):
        caches.append({"uid": c.uid, "node": c.node_uid, "name": c.name, "kind": c.kind, "growth": c.growth,
                       "stack": c.stack, "per_token": text.quantity(c.per_token, s.per_token), "layers": text.quantity(c.repeat, s.repeat),
                       "window": text.quantity(c.window, s.window) if c.window is not None else None,
                       "every": text.quantity(c.every, s.every) if c.every is not None else None,
                       # per token of context: a compressed cache adds one entry every `every` tokens
                       # a state adds nothing per context token: its fixed bytes per request instead
                       "bytes_per_token": text.quantity(0 if c.growth == "state" else kv.per_context_token(c) * kv.cache_element_bytes(c),
                                                   0 if c.growth == "state" else kv.per_context_token(s) * kv.cache_element_bytes(s)),
                       "bytes_per_request": (text.quantity(c.per_token * c.repeat * kv.cache_element_bytes(c),
                                                      s.per_token * s.repeat * kv.cache_element_bytes(s))
                                             if c.growth == "state" else None),
                       "layer_bytes_per_token": text.quantity(c.per_token * kv.cache_element_bytes(c),
                                                         s.per_token * kv.cache_element_bytes(s)),
                       "dtype": kv.dtype_label(c)})
    decode = _point("decode")
    landscape = model_facts(ev, decode, at_decode, bytes_at, bytes_formula, overview, text)
    streams = [_stream_entry(stream, num) for stream in num.streams]
    length = np.array(KV_LENGTHS, dtype=float)
    curve = {part: np.broadcast_to(kv.request_bytes_fn(num, part=part)(length, 2), length.shape).astype(float).tolist()
             for part in (None, *kv.PARTS)}
    document = {
        "model_id": model.model_id, "name": model.display_name, "family": model.family,
        "model_type": model.model_type, "notes": model.notes or "", "spec_file": model.where.file,
        "snapshot_source": model.snapshot.source, "max_context": int(num.max_context),
        "dims": _dims(ev), "overview": flat, "components": components, "ops": ops, "caches": caches,
        "streams": streams,
        # which layer template runs at which layer index, stack by stack (engine/batch/layer_plan.py)
        "layer_plan": layer_plans((c["uid"], c["template"], c["layers"]) for c in components),
        "kv_curve": {"context": length.astype(int).tolist(), "bytes_bf16": curve[None],
                     "state_bf16": curve["state"], "growing_bf16": curve["growing"]},
        "kv_split": _kv_split(ev),
        "reference": {"batch": REFERENCE["batch"], "prompt": REFERENCE["prompt"], "gpus": 1,
                      "activations": "bf16", "kv": "bf16", "fusion": "none"},
        "verification": verification or {"verified": False, "evidence": "", "guards": []},
        "landscape": landscape,
        # the published checkpoints of the model (its own first), each with its exact stored bytes
        "weight_formats": [{"format": f["format"], "model_id": f["model_id"],
                            "tensors": text.quantity(f["tensors"].value, f["tensors"].formula),
                            "bytes": text.quantity(f["bytes"].value, f["bytes"].formula),
                            "bytes_by_dtype": {k: text.quantity(q.value, q.formula) for k, q in f["bytes_by_dtype"].items()}}
                           for f in ev.weight_formats()],
    }
    check_document(model, document)    # a NaN or negative number is never published (engine/language/finite.py)
    return document


#: Context lengths of the model page's cache table (tokens).
SPLIT_LENGTHS = (1024, 32768, 131072, 1048576)


def _kv_split(ev: Evaluation) -> dict[str, Any]:
    """A request's cache at :data:`SPLIT_LENGTHS`, BF16 KV: per cache entry, per part (the flat
    ``state`` of recurrent mixers, the ``growing`` caches of attention) and in total, each number
    beside its formula over the spec's dims and the context ``length`` (the page names the length
    of each column)."""
    num, sym = ev.numeric, ev.symbolic
    length = symbols.dim(symbols.LENGTH)

    def row(value_at, formula: sympy.Expr) -> list[dict]:
        printed = str(formula)          # the one formula beside its values at every length: printed once
        return [quantity(sympy.Integer(value_at(n)), formula, lambda _: printed) for n in SPLIT_LENGTHS]

    entries = [{"uid": c.uid, "node": c.node_uid, "kind": c.kind, "growth": c.growth, "part": kv.part_of(c),
                "dtype": kv.dtype_label(c),
                "bytes": row(lambda n, c=c: kv.entry_bytes_per_request(c, n), kv.entry_bytes_per_request(s, length))}
               for c, s in zip(kv.caches(num), kv.caches(sym))]
    parts = {part: row(lambda n, p=part: kv.bytes_per_request(num, n, part=p), kv.bytes_per_request(sym, part=part))
             for part in kv.PARTS}
    total = row(lambda n: kv.bytes_per_request(num, n), kv.bytes_per_request(sym))
    return {"lengths": list(SPLIT_LENGTHS), "length_symbol": str(length), "kv": "bf16", "entries": entries,
            "parts": parts, "total": total}


def _layer_ranges(layers) -> str:
    """``[0, 1, 2, 6, 10]`` -> ``"0-2, 6, 10"`` (how the page lists layers)."""
    out, run = [], []
    for layer in sorted(set(layers)):
        if run and layer == run[-1] + 1:
            run.append(layer)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [layer]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _stream_entry(stream, num) -> dict[str, Any]:
    """A stream with who produces and who reads it, and its cross-layer edges between layer groups."""
    groups = [c for c in num.components.values() if c.template and c.stack == stream.stack]

    def group_of(uid: str) -> str:
        return next((c.uid for c in groups if uid.startswith(c.uid + "/")), uid)

    edges: dict[tuple[str, str], list[int]] = {}
    producer_node = {layer: uid for layer, uid in stream.producers}
    for producer, reader, node in stream.pairs:
        source = producer_node.get(producer, next(iter(producer_node.values()), ""))
        edges.setdefault((group_of(source), group_of(node)), []).append(reader)
    return {"uid": stream.uid, "name": stream.name, "kind": stream.kind, "stack": stream.stack,
            "src": stream.src, "take": list(stream.take),
            "producer_layers": _layer_ranges(l for l, _ in stream.producers if l >= 0),
            "producer_nodes": sorted({u for _, u in stream.producers}),
            "reader_layers": _layer_ranges(l for l, _ in stream.readers),
            "reader_nodes": sorted({u for _, u in stream.readers}),
            "pairs": len(stream.pairs),
            "edges": [{"src": a, "dst": b, "layers": _layer_ranges(ls), "count": len(ls)}
                      for (a, b), ls in edges.items()]}
