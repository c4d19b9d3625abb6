"""Structures, eleventh pass (issue 42): the step compiler's lambdify calls skip the walk for
implemented functions where the expression can hold none.

engine.deploy.step_functions._lambdify compiles a step expression whose every node is of a
``_PLAIN`` type (symbols of ARGS, numbers, Add, Mul, Pow, Min, Max, floor, ceiling) with
``use_imps=False``: lambdify's ``use_imps`` walks the expression for functions made by
``implemented_function`` (an ``_imp_`` attribute) and adds their implementations to the
function's namespace, and no ``_PLAIN`` node carries one. Consistency checks (against sympy
itself, on the hand-picked expressions of tests/test_cost_compile.py and every distinct
non-polynomial totals expression of a real structure): the implementations' walk finds nothing,
the compiled function's namespace is lambdify's default one name for name (the same objects), its
source is lambdify's, and its floats are lambdify's bit for bit. A planted bug the last test
catches: ``use_imps=False`` for every expression (an implemented function would be a NameError).
"""
from __future__ import annotations

import inspect

import numpy as np
import sympy
from sympy.utilities.lambdify import _imp_namespace, implemented_function

from engine.deploy import Options, plan, step_functions, step_totals
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.structure import PHASES
from engine.language import symbols

from tests.test_cost_compile import HAND

B, S, C = (symbols.dim(n) for n in symbols.SCENARIO_DIMS)
POINTS = (np.array([1.0, 3.0, 64.0])[:, None], np.array([1.0, 17.0, 8192.0])[:, None],
          np.array([1.0, 1000.0, 131072.0])[None, :], np.array(2.0))


def _reference(expr):
    """sympy.lambdify with its defaults (use_imps=True), as the compiler called it before."""
    return sympy.lambdify(step_functions.ARGS, expr, modules=step_functions._MODULES, docstring_limit=0)


def _assert_same_function(expr) -> None:
    ours, theirs = step_functions._lambdify(expr), _reference(expr)
    assert _imp_namespace(expr) == {}, expr
    assert inspect.getsource(ours) == inspect.getsource(theirs), expr
    # every name the code reads resolves to the very object lambdify's own namespace gives
    names = ours.__code__.co_names
    assert names == theirs.__code__.co_names
    for name in names:
        assert ours.__globals__[name] is theirs.__globals__[name], (expr, name)
    # and the namespace is the one the same call with use_imps gives (the compiler's call before):
    # the same names and objects (the shared printer's imports included)
    before = symbols.checked_lambdify(step_functions._ARG_LIST, expr, modules=step_functions._MODULES,
                                      printer=step_functions._PRINTER[0], docstring_limit=0)
    assert ours.__globals__.keys() == before.__globals__.keys()
    assert all(ours.__globals__[k] is before.__globals__[k] for k in ours.__globals__)
    assert inspect.getsource(ours) == inspect.getsource(before)
    assert np.array_equal(ours(*POINTS), theirs(*POINTS), equal_nan=True), expr


def test_hand_expressions_compile_to_lambdify_s_function():
    plain = [e for e in HAND if step_functions._plain(e)]
    assert len(plain) == len(HAND)          # each of them takes the shared printer's path
    for expr in plain:
        _assert_same_function(expr)


def test_a_structure_s_lambdified_expressions_compile_to_lambdify_s_function(corpus, evaluation):
    """Every distinct non-polynomial totals expression of real structures (a hybrid with
    pipeline stages; an MoE with compressed attention: floor, Min and expert powers)."""
    gpu = load_gpus()["H200"]
    table = load_tables(corpus.root / "fusion")["vllm"]
    seen = set()
    for model, config in (("Qwen/Qwen3.5-27B", ParallelConfig(tp=2, pp=2)),
                          ("deepseek-ai/DeepSeek-V4-Flash", ParallelConfig(tp=8))):
        structure = plan(evaluation(model), gpu, config, Options(framework="vllm"), table).structure
        for phase in PHASES:
            for step in structure.programs[phase].steps:
                for expr in step_totals.step_totals(step):
                    if not expr.is_number and expr not in seen and step_functions._polynomial(expr) is None \
                            and step_functions._plain(expr):
                        seen.add(expr)
                        _assert_same_function(expr)
    assert len(seen) >= 10


def test_an_implemented_function_still_gets_its_implementation():
    # not a _PLAIN node: lambdify's own printer and its walk for implementations (use_imps)
    twice = implemented_function("twice", lambda x: 2 * x)
    fn = step_functions._lambdify(twice(B) + S)
    assert fn(3.0, 4.0, 1.0, 1.0) == 10.0
