"""Consistency (the engine with sympy): a compiled step expression is the function sympy.lambdify makes.

engine.deploy.cost compiles step expressions with sympy.lambdify given one shared printer (lambdify's
NumPy printer, memoized per sub-expression) instead of a new one per expression. The contract is
that the generated source is what lambdify writes with its own printer, character for character,
so the functions compute the same floats. The reference here is sympy itself: ``inspect.getsource``
of what ``sympy.lambdify(ARGS, expr, modules=...)`` returns. A planted bug this catches: a printer
setting that differs (``fully_qualified_modules``, the Min/Max user functions), a memoized text that
depends on where it was printed, a missing parenthesis on a multi-line body.
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
from engine.deploy.structure import PHASES
from engine.language import symbols

B, S, C = (symbols.dim(n) for n in symbols.SCENARIO_DIMS)
K = step_functions.KV_BYTES

#: Every node type the compiler prints itself, alone and nested: windows (Min), compressed caches
#: (floor), expert touch probabilities (a rational base to a symbolic power), a negative power
#: (printed with a float exponent), Max, ceiling, rationals and subtractions.
HAND = [
    7168 * B * S,
    B * S * sympy.Rational(19712, 3) + 1376592,
    81758611456 - 81758552064 * sympy.Rational(31, 32) ** (B * S),
    65696 * B * (128 * S + sympy.Min(128, C) ** 2 / 2 - sympy.Rational(255, 2) * sympy.Min(128, C)
                 - sympy.Min(128, C - S) ** 2 / 2),
    B * (C * sympy.floor(C / 128) - C * sympy.floor(C / 128 - S / 128) - 64 * sympy.floor(C / 128) ** 2) * K,
    sympy.Max(B, S, C) + sympy.ceiling(C / 7) / (B * S),
    sympy.Max(sympy.Min(C, 4096), S) * K - B,
    (B + S) ** 2 * sympy.Rational(1, 2),
]


def _reference(expr) -> str:
    return inspect.getsource(sympy.lambdify(step_functions.ARGS, expr, modules=step_functions._MODULES, docstring_limit=0))


def _source(expr) -> str:
    return inspect.getsource(step_functions._lambdify(expr))


@pytest.mark.parametrize("index", range(len(HAND)))
def test_hand_expressions_print_as_lambdify(index):
    expr = HAND[index]
    assert _source(expr) == _reference(expr)
    # printed twice (the second time from the memo): the same text
    assert _source(expr) == _reference(expr)


def test_compiled_functions_give_lambdify_floats():
    args = (np.array([1.0, 3.0, 64.0])[:, None], np.array([1.0, 17.0, 8192.0])[:, None],
            np.array([1.0, 1000.0, 131072.0])[None, :], np.array(2.0))
    for expr in HAND:
        ours = step_functions._lambdify(expr)(*args)
        theirs = sympy.lambdify(step_functions.ARGS, expr, modules=step_functions._MODULES)(*args)
        assert np.array_equal(ours, theirs)


def test_other_nodes_get_lambdify_s_own_printer():
    # a Float's text depends on the print depth, another symbol is read from the namespace: the
    # shared printer never sees them (its memo would hold a depth's text)
    step_functions._lambdify(HAND[0])       # the shared printer exists
    for expr in (sympy.Float("0.3") * B * S + sympy.Float("0.25") * C, B * symbols.dim("hidden")):
        memo = dict(step_functions._PRINTER[0]._memo)
        assert _source(expr) == _reference(expr)
        assert step_functions._PRINTER[0]._memo == memo
    assert step_functions._lambdify(sympy.Float("0.3") * B * S)(2.0, 5.0, 1.0, 1.0) == pytest.approx(3.0)


def test_a_structure_s_step_expressions_print_as_lambdify(corpus, evaluation):
    """Every distinct totals expression of a real structure (a hybrid with pipeline stages)."""
    gpu = load_gpus()["H200"]
    table = load_tables(corpus.root / "fusion")["vllm"]
    structure = plan(evaluation("Qwen/Qwen3.5-27B"), gpu, ParallelConfig(tp=2, pp=2), Options(framework="vllm"),
                     table).structure
    seen = set()
    for phase in PHASES:
        for step in structure.programs[phase].steps:
            for expr in (*step_totals.step_totals(step), step.repeat):
                if not expr.is_number and expr not in seen:
                    seen.add(expr)
                    assert _source(expr) == _reference(expr), expr
    assert len(seen) > 20
