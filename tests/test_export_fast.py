"""The model document's shortcuts print and evaluate exactly what sympy's own ``str`` and ``subs`` do.

engine/batch/export.py prints each formula once with a printer that remembers sub-terms, and
evaluates at the reference point with ``xreplace`` when that gives an exact number. The written
JSON must not change by a byte, so each shortcut is compared here with the plain call it replaces,
on the formulas of real models and on expressions built to trip it (Floats below the top level,
where sympy prints them without trailing zeros, and at the top, where it keeps them).
"""
from __future__ import annotations

import pytest
import sympy

from engine.batch.export import _Texts, _at, _point
from engine.language import symbols


@pytest.mark.parametrize("model_id", ["deepseek-ai/DeepSeek-V4-Flash", "Qwen/Qwen3.5-27B"])
def test_formulas_print_as_str_does(model_id, evaluation):
    ev = evaluation(model_id)
    num, sym = ev.numeric, ev.symbolic
    text = _Texts()
    formulas = [e for r in sym.rows.values() for e in (r.flops, r.params, r.repeat, r.instances, r.active)]
    for uid in num.components:          # the component sums: the long formulas with shared terms
        inside = [u for u in num.rows if u.startswith(uid + "/")]
        formulas.append(sympy.Add(*(sym.rows[u].flops * sym.rows[u].repeat for u in inside)))
        formulas.append(sympy.Add(*(sym.rows[u].params * sym.rows[u].instances for u in inside)))
    formulas += [c.per_token for c in sym.caches]
    for formula in formulas + formulas:     # twice: the second time from the memo
        assert text(formula) == str(formula)


def test_floats_and_plain_numbers_print_as_str_does():
    x, y = sympy.symbols("x y")
    cases = [sympy.Float(2.5), sympy.Float(2.0) * x, sympy.Float(0.1) * x + 3 * y, x / 2 + sympy.Float(1.25),
             sympy.Max(x, sympy.Float(3.0)) * y, sympy.Float(2.0), sympy.Integer(2) * x, sympy.Rational(1, 3) * x,
             sympy.Float(1e-30) * x ** 2 - y, sympy.Min(x, 4096) * sympy.Float(0.5)]
    text = _Texts()
    for expr in cases + cases[::-1]:
        assert text(expr) == str(expr)
    assert [text(v) for v in (0, 2, 0.5)] == ["0", "2", "0.5"]


def test_values_at_the_reference_point_are_the_substituted_ones(evaluation):
    ev = evaluation("deepseek-ai/DeepSeek-V4-Flash")
    length = symbols.dim(symbols.LENGTH)
    exprs = [r.flops for r in ev.numeric.rows.values()] + [sympy.Float(0.5) * symbols.dim("seq") + 1,
                                                           length * symbols.dim("batch")]
    for phase in ("prefill", "decode"):
        point = _point(phase)
        for expr in exprs:
            fast, plain = _at(expr, point), expr.subs(point)
            assert fast == plain and type(fast) is type(plain)
            if plain.is_number:
                assert float(fast) == float(plain)
