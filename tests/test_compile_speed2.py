"""Consistency: the compile path's shortcuts give what sympy.lambdify and the plain arithmetic give.

* A step expression that is a sum of monomials in the scenario symbols (nine in ten) is compiled
  by engine.deploy.step_functions._polynomial: a function doing what lambdify's source for it does,
  operation for operation, without printing and compiling source. Its plan
  (engine.deploy.step_functions._polynomial_plan: the terms in the printer's order, each sign and
  coefficient) is rendered here as the text it stands for and compared with the source
  ``sympy.lambdify(ARGS, expr, modules=...)`` writes, character for character; and the function's
  floats (values, types and shapes) are compared with lambdify's, at non-integer points where a
  different order of operations rounds differently. Planted bugs this catches: terms in another
  order (a constant first, the ``c - k*x`` special case missed) or with another sign or
  coefficient (the text comparison); factors multiplied in another order (``x*(k*y)``), a rational
  coefficient applied as ``/q`` at the end, a power's exponent or base mixed up (the floats).
* engine.deploy.step_totals.step_totals keeps each product (expression x repeat, sequence set to 1 for a
  last-token step) per (expression, repeat, last token?): the totals equal the plain arithmetic
  on a real fused structure, cold and warm, and another repeat or flag is a new product.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import sympy

from engine.deploy import Options, plan, step_functions, step_totals
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.device_program import step_with
from engine.deploy.structure import PHASES
from engine.language import symbols

B, S, C = step_functions.ARGS[:3]
K = step_functions.KV_BYTES
R = sympy.Rational
P = R(31, 32) ** (B * S)

#: Sums the corpus may not hold: every coefficient form (1, -1, integers, rationals, both signs,
#: leading or not), constants of both signs, sympy's ``c - k*x`` special case and its near misses,
#: four symbols, five terms, integers past a float's exact range.
HAND = [7 * B * S, -7 * B * S, B * S, -B * S, -B, B, R(19712, 3) * B * S, -R(19712, 3) * B * S, B * S / 2,
        -B * S / 2, -B / 3, R(5, 2) * B + 3, 3 - B * S, 3 - 5 * B * S + 2 * B, 7 * B * S - R(5, 3) * B * C * K - R(1, 2),
        -R(1, 2) * B - B * C + S, -S - C, 2 ** 60 * B + 1, 2 ** 60 * B * S + 2 ** 70, B * S * C * K, 4 * S + 4 * C,
        3 - 5 * B, 3 - B, R(7, 2) - B, R(7, 2) - R(3, 5) * K, -3 - 5 * B, 3 + 5 * B, 1 - B - S,
        -B - S - C - K + R(1, 3), 5 * B * S * C * K - 7 * B * S * C + 11 * B - 13, 7 * B * S * C * K + 2,
        (2 ** 53 + 1) * B - (2 ** 55 + 3),
        # a rational to the power of a product of symbols (expert touch probabilities)
        -5 * P + 3 * B * S + 5, 5 - 7 * P, 5 - P, -P + B, P, -P, R(3, 2) * P, 7 * P + R(1, 2), 3 - 2 ** B,
        R(31, 32) ** (B * S * C) * 4 - K, -R(1, 3) * R(31, 32) ** S + C * K - 1]

RNG = np.random.default_rng(7)
POINTS = [
    (RNG.uniform(0.5, 3e3, (5, 1)), RNG.uniform(0.3, 9e3, (5, 1)), RNG.uniform(0.1, 2e5, (1, 4)), np.array(1.37)),
    tuple(np.float64(x) for x in (2.7, 11.3, 77.7, 1.9)),
    tuple(np.array(x) for x in (3.3, 0.7, 1e5 + 0.1, 2.0)),
    (RNG.uniform(1, 64, 7), RNG.uniform(1, 8192, 7), RNG.uniform(1, 131072, 7), RNG.uniform(0.5, 2, 7)),
]


def _factor_text(f) -> str:
    """A symbol's name, or a power of a rational to a product of symbols: ``(31/32)**(batch*seq)``."""
    if isinstance(f, sympy.Symbol):
        return f.name
    base, exp = f.args
    base = f"{base.p}" if base.q == 1 else f"({base.p}/{base.q})"
    names = [s.name for s in step_functions._symbols(exp)]
    return base + "**" + (names[0] if len(names) == 1 else "(" + "*".join(names) + ")")


def _text(plan) -> str:
    """The source text a plan stands for, as sympy's NumPy printer writes it: a leading term with
    its sign (``-5*x``, ``-x*y``, ``-5/3*x``, ``(5/3)*x``), then `` + `` or `` - `` and the rest
    without a sign (a positive rational in parentheses, a subtracted one without)."""
    out = []
    for sign, c, syms in plan:
        names = "*".join(_factor_text(f) for f in syms)
        p, q = abs(int(c.p)), int(c.q)
        if not syms:
            term = f"{p}" if q == 1 else f"{p}/{q}"
        elif c == 1 or (c == -1 and not sign):
            term = names
        elif c > 0 and sign != "-":
            term = (f"{p}*" if q == 1 else f"({p}/{q})*") + names
        else:
            term = (f"{p}*" if q == 1 else f"{p}/{q}*") + names
        out.append(f" {sign} {term}" if sign else ("-" if c < 0 else "") + term)
    return "".join(out)


def _check(expr) -> bool:
    """Whether the fast path takes ``expr``; when it does, its text and floats are lambdify's."""
    plan, ours = step_functions._polynomial_plan(expr), step_functions._polynomial(expr)
    if ours is None:              # not a sum of monomials, or a coefficient past a float
        return False
    theirs = sympy.lambdify(step_functions.ARGS, expr, modules=step_functions._MODULES, docstring_limit=0)
    body = inspect.getsource(theirs).splitlines()[-1].strip()
    assert body == "return " + _text(plan), expr
    for args in POINTS:
        with np.errstate(all="ignore"):           # 2**batch overflows at some points: inf on both sides
            got, want = ours(*args), theirs(*args)
        assert type(got) is type(want) and np.shape(got) == np.shape(want), expr
        assert np.array_equal(got, want), expr
        if any(want is a for a in args):          # ``return batch`` gives the argument itself
            assert any(got is a for a in args)
    return True


@pytest.mark.parametrize("index", range(len(HAND)))
def test_consistency_hand_sums_are_lambdify_s(index):
    assert _check(HAND[index])


def test_other_expressions_are_left_to_lambdify():
    x = sympy.Symbol("x", positive=True)
    for expr in (B * x, B + x, B ** 2, 3 * B * S ** 2, sympy.Min(B, C) * 3, sympy.Float("0.5") * B,
                 B * P, P + R(1, 2) ** C, R(31, 32) ** (2 * B), R(31, 32) ** (B + S), (-2) ** B, R(31, 32) ** x,
                 B * S * R(10 ** 400, 3)):        # the coefficient's float overflows: lambdify's, raising
        assert not _check(expr)
        fn = step_functions._compiled(expr)
        assert inspect.getsource(fn).startswith("def _lambdifygenerated(batch, seq, ctx, kv_bytes):")
    assert step_functions._compiled(B * S * 8) is step_functions._FUNCTIONS[B * S * 8] and not hasattr(step_functions._compiled(B * S * 8),
                                                                                   "__wrapped__")


@pytest.mark.parametrize("model,degrees", [("Qwen/Qwen3-8B", dict(tp=2, pp=2)),
                                           ("deepseek-ai/DeepSeek-V3", dict(tp=8, ep=8)),
                                           ("Qwen/Qwen3.5-35B-A3B", dict(tp=2, ep=2)),
                                           ("openai/gpt-oss-120b", dict(tp=4, ep=4, pp=2))])
def test_consistency_corpus_step_sums_are_lambdify_s(corpus, evaluation, model, degrees):
    """Every distinct step expression of a real fused structure (totals and collective repeats)."""
    gpu = load_gpus()["H200"]
    table = load_tables(corpus.root / "fusion")["vllm"]
    structure = plan(evaluation(model), gpu, ParallelConfig(**degrees), Options(framework="vllm"), table).structure
    exprs = {expr for phase in PHASES for step in structure.programs[phase].steps
             for expr in (*step_totals.step_totals(step), step.repeat) if not expr.is_number}
    taken = sum(_check(expr) for expr in exprs)
    assert taken > 20 and taken > len(exprs) / 2


def _plain_totals(step):
    """step_totals as it was written before its products were memoized."""
    totals = (step.flops * step.repeat, step.total_bytes * step.repeat, step.comm_bytes * step.repeat,
              step.weight_bytes * step.repeat)
    if step.last_token:
        seq = symbols.dim(symbols.SEQ)
        totals = tuple(e.subs(seq, 1) for e in totals)
    return totals


def test_consistency_step_totals_products_are_plain(corpus, evaluation):
    """step_totals' products memoized per (expression, repeat, last token?) equal the plain
    arithmetic on every step of a fused structure with last-token steps and repeated layers."""
    gpu = load_gpus()["H200"]
    table = load_tables(corpus.root / "fusion")["vllm"]
    structure = plan(evaluation("deepseek-ai/DeepSeek-V3"), gpu, ParallelConfig(tp=8, ep=8, pp=2),
                     Options(framework="vllm"), table).structure
    steps = [s for phase in PHASES for s in structure.programs[phase].steps]
    assert any(s.last_token for s in steps) and any(s.kind == "fused" for s in steps)
    for cold in (True, False):
        if cold:
            step_totals._TOTALS.clear(), step_totals._PRODUCTS.clear(), step_totals._SUMS.clear(), step_totals._BY_STEP.clear()
        for s in steps:
            assert step_totals.step_totals(s) == _plain_totals(s)
    # a changed input is seen: the same expression under another repeat or last-token flag
    s = next(s for s in steps if s.last_token and not s.flops.is_number)
    for changes in ({"repeat": s.repeat * 3}, {"last_token": False}):
        other = step_with(s, **changes)
        assert step_totals.step_totals(other) == _plain_totals(other) != step_totals.step_totals(s)
