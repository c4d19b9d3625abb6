"""Model-level quantities read off an Analysis (the same functions serve both bindings).

Layer: engine.language. Each function sums node rows; with the numeric Analysis it returns a number, with
the symbolic one the formula of that number. Nothing is cached or stored twice. Sums are one
``sympy.Add`` of all their terms (the same expression as adding them one by one, without
re-flattening a growing formula at every term).
"""
from __future__ import annotations

import sympy

from engine.language.evaluate import Analysis, NodeRow

ZERO = sympy.Integer(0)


def quantity(value, formula, text=str) -> dict:
    """A number beside its formula, as JSON (the shape every published number arrives in): an exact
    integer stays an int, anything else a float; the formula as sympy prints it (``text``: a
    function that prints it the same, e.g. remembering repeated formulas)."""
    if isinstance(value, sympy.Basic):
        value = int(value) if value.is_integer else float(value)
    return {"value": value, "formula": text(formula)}


def _canonical(analysis: Analysis, stack: str | None):
    """Rows of the canonical graph (the prefill form) that own their weights."""
    for row in analysis.rows.values():
        if "prefill" in row.phases and not row.shares and (stack is None or row.stack == stack):
            yield row


def params_total(analysis: Analysis, stack: str | None = "main") -> sympy.Expr:
    """Parameters (buffers excluded): per-instance params x layers x experts."""
    return sympy.Add(*(r.params * r.repeat * r.instances for r in _canonical(analysis, stack)))


def params_active(analysis: Analysis, stack: str | None = "main") -> sympy.Expr:
    """Parameters one token touches: experts counted top_k times, not n_experts."""
    return sympy.Add(*(r.params * r.repeat * r.active for r in _canonical(analysis, stack)))


def params_by_role(analysis: Analysis, role: str, stack: str | None = "main") -> sympy.Expr:
    return sympy.Add(*(r.params * r.repeat * r.instances for r in _canonical(analysis, stack) if r.role == role))


def params_embedding(analysis: Analysis, stack: str | None = "main") -> sympy.Expr:
    """Parameters of the input token embedding table(s)."""
    return params_by_role(analysis, "embedding", stack)


def phase_rows(analysis: Analysis, phase: str, stack: str = "main") -> list[NodeRow]:
    """The program of one phase: rows whose phases include it."""
    return [r for r in analysis.rows.values() if phase in r.phases and r.stack == stack]


def flops(analysis: Analysis, phase: str = "prefill", stack: str = "main") -> sympy.Expr:
    """FLOPs of one step of ``phase`` over the scenario dims batch, seq, ctx."""
    return sympy.Add(*(r.flops * r.repeat for r in phase_rows(analysis, phase, stack)))


def n_layers(analysis: Analysis, stack: str = "main") -> sympy.Expr:
    """Layers of a stack: the sum of its templates' repeat counts."""
    return sympy.Add(*(c.repeat for c in analysis.components.values() if c.template and c.stack == stack))
