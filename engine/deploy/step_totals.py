"""A step's per-device totals over all its calls: FLOPs, HBM bytes, link bytes and weight bytes.

Layer: engine.deploy. :func:`step_totals` multiplies a step's per-call expressions by its repeat
(prefill logits: sequence length 1). Invariant: a pure function of the step's expressions, so its
memos (by step object, by expressions, by product) give the very sympy trees a fresh computation
gives; each is bounded (the steps of a model or two).
"""
from __future__ import annotations

import sympy

from engine.language import symbols
from engine.deploy.device_program import Step


_TOTALS: dict[tuple, tuple] = {}
#: (expression, repeat, last token?) -> one total (:func:`_times`); (bytes, weight bytes) -> their sum.
#: Steps missing _TOTALS (fused steps, mostly) share most of their four expressions with others
#: (a fused step's FLOPs with the same match under other boundaries, the weight bytes of its
#: members): about one product in three was new.
_PRODUCTS: dict[tuple, sympy.Expr] = {}
_SUMS: dict[tuple, sympy.Expr] = {}


def _times(expr: sympy.Expr, repeat: sympy.Expr, last_token: bool) -> sympy.Expr:
    """``expr * repeat``, with the sequence length set to 1 for a last-token step (prefill logits),
    once per distinct (expression, repeat, last token?): a pure function of them."""
    key = (expr, repeat, last_token)
    out = _PRODUCTS.get(key)
    if out is None:
        out = expr * repeat
        if last_token:
            out = out.subs(symbols.dim(symbols.SEQ), 1)
        _PRODUCTS[key] = out
    return out


#: id(step) -> (step, totals): structures share most step objects (fusion keeps the unfused ones,
#: placements are shared), and a lookup by expressions compares large formulas term by term.
_BY_STEP: dict[int, tuple] = {}


def step_totals(step: Step) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]:
    """Per device, all calls of the step: FLOPs, HBM bytes (weights included), link bytes, and the
    weight bytes among the HBM bytes (prefill logits: last token only). Memoized on the step's
    expressions: structures that share steps (most of them) share this arithmetic."""
    mine = _BY_STEP.get(id(step))
    if mine is not None and mine[0] is step:     # the same step object: no expression compared
        return mine[1]
    key = (step.flops, step.bytes, step.weight_bytes, step.comm_bytes, step.repeat, step.last_token)
    totals = _TOTALS.get(key)
    if totals is None:
        repeat, last = step.repeat, step.last_token
        total_bytes = _SUMS.get((step.bytes, step.weight_bytes))
        if total_bytes is None:
            total_bytes = _SUMS[(step.bytes, step.weight_bytes)] = step.total_bytes
        totals = tuple(_times(e, repeat, last) for e in (step.flops, total_bytes, step.comm_bytes, step.weight_bytes))
        if len(_TOTALS) > 200_000:        # as _BY_STEP: the steps of a model or two
            _TOTALS.clear()
            _PRODUCTS.clear()
            _SUMS.clear()
        _TOTALS[key] = totals
    if len(_BY_STEP) > 200_000:      # steps are shared by the structures of one model: keep it bounded
        _BY_STEP.clear()
    _BY_STEP[id(step)] = (step, totals)
    return totals
