"""Consistency (the engine with itself): placement's per-process memos give what plain arithmetic gives.

The reference is Python's own operators and ``functools.reduce`` from ``sympy.Integer(1)`` (what
placement computed before the memos). Planted bugs this catches: an identity-keyed entry answering for
an operand of another type (2 and 2.0 are different objects but equal numbers), a product that skips
its first factor's conversion (``_prod([2])`` must be sympy's 2, not Python's), a row-dims memo
answering for another row.
"""
from __future__ import annotations

from functools import reduce
import operator

import sympy

from engine.deploy.placement import _row_dims
from engine.deploy.placement_arith import _div, _mul, _prod
from engine.language import symbols
from engine.language.shapes import Axis, Tensor


def _plain(values):
    return reduce(operator.mul, values, sympy.Integer(1))


def test_products_equal_plain_products_with_their_types():
    x = symbols.dim("hidden")
    for values in ([], [2], [2.0], [x], [x, 2], [2, x], [x, 2.0], [sympy.Integer(3), x, sympy.Rational(1, 2)]):
        got, want = _prod(values), _plain(values)
        assert got == want and type(got) is type(want), values
        assert sympy.srepr(got) == sympy.srepr(want)


def test_identity_memo_keeps_equal_operands_of_other_types_apart():
    x = symbols.dim("d_model")
    for _ in range(2):       # the second round answers from the memos
        assert _mul(x, 2) == 2 * x and _mul(x, 2.0) == 2.0 * x and _mul(x, 2) != _mul(x, 2.0)
        assert _div(x, 4) == x / 4 and _div(x, 4.0) == x / 4.0 and _div(x, 4) != _div(x, 4.0)


class _Row:
    def __init__(self, out, in_shapes):
        self.out, self.in_shapes = out, in_shapes


def test_row_dims_are_each_rows_own():
    a, b = symbols.dim("n_heads"), symbols.dim("d_head")
    first = _Row(Tensor((Axis("n_heads", a),)), (Tensor((Axis("d_head", b),)),))
    second = _Row(Tensor((Axis("n_heads", 2 * a),)), ())
    assert _row_dims(first) == {"n_heads": a, "d_head": b}
    assert _row_dims(second) == {"n_heads": 2 * a}
    assert _row_dims(first) == {"n_heads": a, "d_head": b}
