"""Placement's sympy arithmetic, memoized: products, quotients and sums computed once per operand pair.

Layer: engine.deploy. Placement (and the planner's memory figures) repeat the same few products and
quotients under every config and phase. Invariant: :func:`_arith` returns ``op(a, b)`` itself (the
same sympy tree a fresh computation builds); the memos are bounded and hold their operands, so an
id never names two objects.
"""
from __future__ import annotations

from functools import reduce
import operator

import sympy

from engine.deploy.device_program import ONE


def _prod(values) -> sympy.Expr:
    """The product of ``values`` (from ``ONE``), by the memoized :func:`_mul`.

    ``ONE * v`` is ``v`` itself for a sympy ``v`` (a plain ``int`` or ``float`` would become a
    sympy number, so only sympy values skip the product): the first factor costs no lookup."""
    it = iter(values)
    first = next(it, ONE)
    if not isinstance(first, sympy.Basic):
        first = _mul(ONE, first)
    return reduce(_mul, it, first)


#: (operator, a, b, type(a), type(b)) -> a op b. Placement repeats the same few products and
#: quotients under every config and phase (a row's FLOPs over a split of 2, 4, 8; the same
#: activation sizes in every layer template), and building a sympy expression is most of its
#: time. The types are part of the key because 2 == 2.0 in Python while x*2 and x*2.0 differ.
_ARITH: dict[tuple, object] = {}


#: (operator, id(a), id(b)) -> (a, b, a op b): the same operand objects recur (a row's sizes, the
#: memo's own results), and a key of ids skips hashing the expressions. The entry holds the operands,
#: so an id cannot be reused by another object while it is in the memo; the same objects have the
#: same types, so 2 and 2.0 stay apart here too. Misses fall through to :data:`_ARITH`.
_ARITH_BY_ID: dict[tuple, tuple] = {}


def _arith(op, a, b):
    """``op(a, b)`` for the sympy arithmetic of placement, computed once per operand pair (bounded)."""
    hit = _ARITH_BY_ID.get((op, id(a), id(b)))
    if hit is not None and hit[0] is a and hit[1] is b:
        return hit[2]
    key = (op, a, b, type(a), type(b))
    found = _ARITH.get(key)
    if found is None:
        if len(_ARITH) > 500_000:
            _ARITH.clear()
        found = _ARITH[key] = op(a, b)
    if len(_ARITH_BY_ID) > 500_000:
        _ARITH_BY_ID.clear()
    _ARITH_BY_ID[(op, id(a), id(b))] = (a, b, found)
    return found


def _mul(a, b):
    return _arith(operator.mul, a, b)


def _div(a, b):
    return _arith(operator.truediv, a, b)


def _add(a, b):
    return _arith(operator.add, a, b)
