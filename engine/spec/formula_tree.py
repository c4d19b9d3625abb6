"""Formula trees: a sympy expression as plain JSON, for the browser to evaluate with ``static/js/formula.js``.

Layer: engine.spec (sympy only). The static site has no server, yet some pages recompute numbers as
a reader changes an input (the deploy page at any prompt length and batch, the playground as dims
change). They evaluate the *same* expressions the engine evaluated, exported at build time in this
form, never a second estimator written in JavaScript.

Format (one JSON value per node):

* a number: a JSON number (an integer when the value is one, else a float; a rational p/q becomes
  ``["/", p, q]`` so it stays exact up to the final division, as in numpy's float evaluation);
* a free symbol: its name as a JSON string (the caller's environment binds it);
* an operation: ``[op, arg, ...]`` with ``op`` one of :data:`OPS`;
* a table lookup: ``["lookup", ref, coordinate, ...]``: a measured table's time at the point the
  coordinate trees give. ``ref`` (an integer, not a tree) names a table the caller holds; its
  meaning is the caller's ``lookup(ref, point)`` (engine.deploy.measured.node_lookup: the
  measured tables' interpolation, defined there once; static/js/formula.js mirrors it).

A selection rule (:func:`select`, ``select`` in formula.js) picks a list of values with trees: a JSON
object ``{"each": name, "largest": name, "keep": tree, "add": [[value, condition], ...], "else":
[values]}``. Of the values given, those whose ``keep`` holds with ``each`` bound to the value, in
order; then each ``add`` value whose condition holds and that is not kept already; ``else`` when none
is. Its environment binds the caller's names and ``largest`` to the largest value given (the grid's
batches: engine/build/grid_eval.py ``GRID_BATCHES``).

Invariant: ``evaluate(to_tree(e), env) == float(e.subs(env))`` up to float rounding, for every
expression made of the node types in :data:`OPS` (the only ones the spec language and the deploy
planner produce); any other node type raises ``TypeError`` naming it, so an unsupported function
cannot be exported silently. ``evaluate`` is the reference semantics of ``formula.js`` and is used
by the tests that compare the browser with Python.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import sympy

#: op -> (arity or None for n-ary, meaning). The JavaScript evaluator implements exactly these.
OPS = {
    "+": "sum of the arguments",
    "*": "product of the arguments",
    "/": "first argument over the second (exact rationals; a step's bound over the default efficiency)",
    "^": "first argument to the power of the second",
    "min": "smallest argument",
    "max": "largest argument",
    "floor": "largest integer <= the argument",
    "ceil": "smallest integer >= the argument",
    "mod": "a - b * floor(a / b) (sympy's Mod, sign of b)",
    "log": "natural logarithm",
    "pw": "piecewise: [value, condition] pairs, the first whose condition holds",
    "<": "1 when a < b else 0", "<=": "1 when a <= b else 0", "==": "1 when a == b else 0",
    ">": "1 when a > b else 0", ">=": "1 when a >= b else 0", "!=": "1 when a != b else 0",
    "and": "1 when every argument is non-zero", "or": "1 when any argument is non-zero",
    "not": "1 when the argument is zero",
    "lookup": "a measured table's time at a point: [\"lookup\", ref, coordinate, ...], ref naming a table "
              "the caller holds (axes, values, seconds, roofline tree); interpolated by the rule of "
              "engine.deploy.measured.interpolate (the caller's ``lookup``)",
}

_NARY = {sympy.Add: "+", sympy.Mul: "*", sympy.Min: "min", sympy.Max: "max",
         sympy.And: "and", sympy.Or: "or"}
_UNARY = {sympy.floor: "floor", sympy.ceiling: "ceil", sympy.log: "log", sympy.Not: "not"}
_RELATIONS = {sympy.StrictLessThan: "<", sympy.LessThan: "<=", sympy.Equality: "==",
              sympy.StrictGreaterThan: ">", sympy.GreaterThan: ">=", sympy.Unequality: "!="}


def _number(expr: sympy.Expr) -> Any:
    if expr.is_Integer:
        return int(expr)
    if expr.is_Rational:
        return ["/", int(expr.p), int(expr.q)]
    if expr is sympy.true:
        return 1
    if expr is sympy.false:
        return 0
    value = float(expr)
    if not math.isfinite(value):
        raise TypeError(f"formula tree: {expr} is not a finite number")
    return value


def to_tree(expr: Any) -> Any:
    """The JSON tree of ``expr`` (a sympy expression, or a Python number)."""
    if isinstance(expr, bool):
        return int(expr)
    if isinstance(expr, int):
        return expr
    if isinstance(expr, float):
        return _number(sympy.Float(expr))
    if expr is sympy.true or expr is sympy.false:
        return _number(expr)
    if expr.is_Number:
        return _number(expr)
    if expr.is_Symbol:
        return expr.name
    if expr.is_number:  # a constant sympy keeps unevaluated (exp(2), pi): its float is all a browser needs
        return _number(expr)
    head = type(expr)
    for table in (_NARY, _UNARY, _RELATIONS):
        for cls, op in table.items():
            if issubclass(head, cls):
                return [op, *(to_tree(a) for a in expr.args)]
    if isinstance(expr, sympy.Pow):
        return ["^", to_tree(expr.base), to_tree(expr.exp)]
    if isinstance(expr, sympy.Mod):
        return ["mod", to_tree(expr.args[0]), to_tree(expr.args[1])]
    if isinstance(expr, sympy.Piecewise):
        return ["pw", *([to_tree(value), to_tree(cond)] for value, cond in expr.args)]
    raise TypeError(f"formula tree: no JSON form for {head.__name__} (in {expr}); add it to OPS and formula.js")


def free_names(tree: Any) -> set[str]:
    """Names of the symbols a tree reads (what its environment must bind)."""
    if isinstance(tree, str):
        return {tree}
    if isinstance(tree, list):
        if tree and tree[0] == "pw":
            return set().union(*(free_names(v) | free_names(c) for v, c in tree[1:]))
        if tree and tree[0] == "lookup":
            return set().union(set(), *(free_names(a) for a in tree[2:]))
        return set().union(set(), *(free_names(a) for a in tree[1:]))
    return set()


def evaluate(tree: Any, env: Mapping[str, float], lookup=None) -> float:
    """The value of ``tree`` with its symbols bound by ``env`` (the semantics formula.js mirrors);
    ``lookup(ref, point)``: the value of a ``lookup`` node (a tree with one and no ``lookup`` raises)."""
    if isinstance(tree, (int, float)):
        return float(tree)
    if isinstance(tree, str):
        if tree not in env:
            raise KeyError(f"formula tree: symbol {tree!r} is not bound")
        return float(env[tree])
    op, args = tree[0], tree[1:]
    if op == "pw":
        for value, cond in args:
            if evaluate(cond, env, lookup):
                return evaluate(value, env, lookup)
        return math.nan
    if op == "lookup":
        if lookup is None:
            raise ValueError("formula tree: a lookup node needs its tables (pass lookup=)")
        return float(lookup(args[0], [evaluate(a, env, lookup) for a in args[1:]]))
    v = [evaluate(a, env, lookup) for a in args]
    if op == "+":
        return math.fsum(v)
    if op == "*":
        return math.prod(v)
    if op == "/":
        return v[0] / v[1]
    if op == "^":
        return v[0] ** v[1]
    if op in ("min", "max"):
        return (min if op == "min" else max)(v)
    if op == "floor":
        return float(math.floor(v[0]))
    if op == "ceil":
        return float(math.ceil(v[0]))
    if op == "mod":
        return v[0] - v[1] * math.floor(v[0] / v[1])
    if op == "log":
        return math.log(v[0])
    if op == "not":
        return float(not v[0])
    if op == "and":
        return float(all(v))
    if op == "or":
        return float(any(v))
    if op in _RELATION_FUNCTIONS:
        return float(_RELATION_FUNCTIONS[op](v[0], v[1]))
    raise ValueError(f"formula tree: unknown op {op!r}")


_RELATION_FUNCTIONS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
                       ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "!=": lambda a, b: a != b}


def _whole(x: float):
    """An integral float as an int (a selected batch is a count), any other value as it is."""
    return int(x) if float(x).is_integer() else x


def select(rule: Mapping[str, Any], values: list, env: Mapping[str, float]) -> list:
    """The values a selection rule keeps of ``values`` (the module docstring's semantics, formula.js's
    ``select``): kept values are returned as given, added ones as ints when whole."""
    scope = {**env, rule["largest"]: max(values)}
    kept = [v for v in values if evaluate(rule["keep"], {**scope, rule["each"]: v})]
    for value, condition in rule["add"]:
        if evaluate(condition, scope):
            x = _whole(evaluate(value, scope))
            if x not in kept:
                kept.append(x)
    return kept or list(rule["else"])
