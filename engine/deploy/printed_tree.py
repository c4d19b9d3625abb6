"""Formula trees in the order the compiled functions evaluate: what a stored program needs to give
the compile path's floats without sympy.

Layer: engine.deploy (sympy side: used where trees are written, by engine/batch/deploy_export.py).
:func:`engine.language.formula_tree.to_tree` writes a sum's terms in sympy's stored order; the
engine's compiled step functions (:func:`engine.deploy.step_functions._compiled`) add them in the order
lambdify prints them, and floating-point sums depend on the order. :func:`step_tree` writes the
tree of the very operations the compiled function performs, one binary node per Python operation,
so :func:`engine.language.formula_tree.positional` of it (numpy, no sympy) returns that function's
floats, bit for bit:

* a constant: its float (what the compile path stores), an integer as an integer;
* a sum of monomials (most step expressions): the terms as :func:`engine.deploy.step_functions._polynomial_plan`
  orders them, each product left to right after its coefficient, as :func:`engine.deploy.step_functions._polynomial`
  computes them;
* any other expression: lambdify's source itself, parsed with :mod:`ast` (never executed): its
  binary operations with Python's precedence and associativity, ``ceil``, ``floor``, ``log``,
  ``minimum``/``maximum`` and ``reduce(minimum, [...])``; anything else (``select``, ``mod``,
  helper statements) is no tree (None), and the caller keeps the compile path there.

A unary minus is written ``["*", -1, x]`` (IEEE negation and multiplication by -1 give the same
bits). tests/test_stored_consistency.py holds every step function of three models equal to its tree.
"""
from __future__ import annotations

import ast
import inspect
import linecache
from typing import Any

import sympy

import engine.deploy.step_functions as functions

#: numpy functions lambdify's source calls -> the tree's op (same numpy function in
#: formula_tree.compile_arrays)
CALLS = {"ceil": "ceil", "floor": "floor", "log": "log", "minimum": "min", "maximum": "max"}


def _number(c) -> Any:
    """The tree of :func:`engine.deploy.step_functions._python_number` of a sympy rational: ``p`` or ``["/", p, q]``
    (Python's correctly rounded division of the two integers, as the literal ``p/q`` evaluates)."""
    return int(c.p) if c.q == 1 else ["/", int(c.p), int(c.q)]


def _factor(factor) -> Any:
    """A factor of a monomial (:func:`engine.deploy.step_functions._factor`): a symbol's name, or a rational's
    power to a product of symbols (the product left to right)."""
    if type(factor) is sympy.Symbol:
        return factor.name
    names = [s.name for s in functions._symbols(factor.exp)]
    exponent = names[0]
    for name in names[1:]:
        exponent = ["*", exponent, name]
    return ["^", _number(factor.base), exponent]


def _term(c, factors: tuple, lead: bool) -> Any:
    """One printed term (:func:`engine.deploy.step_functions._term`): the coefficient, then the factors left to
    right; no coefficient when it is 1, a unary minus when it is -1 and the term leads the sum."""
    if not factors:
        return _number(c)
    trees = [_factor(f) for f in factors]
    head = trees[0]
    if c == -1 and lead:
        head = ["*", -1, head]
    elif c != 1:
        head = ["*", _number(c), head]
    for f in trees[1:]:
        head = ["*", head, f]
    return head


def _polynomial_tree(expr) -> Any:
    """The tree of :func:`engine.deploy.step_functions._polynomial`'s function for ``expr``, None when that
    function is not made (not a sum of monomials, or a coefficient beyond a float)."""
    plan = functions._polynomial_plan(expr)
    if plan is None:
        return None
    try:
        for _, c, _ in plan:
            functions._python_number(c)
    except OverflowError:            # functions._polynomial gives up there: lambdify's function is used
        return None
    (_, c, factors), rest = plan[0], plan[1:]
    out = _term(c, factors, lead=True)
    for sign, c, factors in rest:
        out = [sign, out, _term(c, factors, lead=False)]
    return out


def _tree(node: ast.AST, names: frozenset) -> Any:
    """The tree of one node of lambdify's return expression; ValueError for what has none."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return node.id
    if isinstance(node, ast.BinOp):
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "^"}.get(type(node.op))
        if op is not None:
            return [op, _tree(node.left, names), _tree(node.right, names)]
    if isinstance(node, ast.UnaryOp):
        inner = _tree(node.operand, names)
        if isinstance(node.op, ast.UAdd):
            return inner
        if isinstance(node.op, ast.USub):
            return -inner if isinstance(inner, (int, float)) else ["*", -1, inner]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        name, args = node.func.id, node.args
        if name in CALLS and len(args) == (1 if CALLS[name] in ("ceil", "floor", "log") else 2):
            return [CALLS[name], *(_tree(a, names) for a in args)]
        if name == "reduce" and len(args) == 2 and isinstance(args[0], ast.Name) and \
                args[0].id in ("minimum", "maximum") and isinstance(args[1], ast.List) and args[1].elts:
            return [CALLS[args[0].id], *(_tree(a, names) for a in args[1].elts)]
    raise ValueError(f"no tree for {ast.dump(node)[:80]}")


def lambdified_tree(fn) -> Any:
    """The tree of a lambdify-made function's return expression (its source, parsed), None when its
    body is more than one return or holds an operation :func:`_tree` does not write."""
    try:
        # lambdify keeps its whole source in linecache under the function's file name (cheaper to
        # read there than through inspect.getsource)
        text = "".join(linecache.getlines(fn.__code__.co_filename)) or inspect.getsource(fn)
        source = ast.parse(text)
    except (OSError, TypeError, SyntaxError, AttributeError):
        return None
    body = source.body[0].body if source.body and isinstance(source.body[0], ast.FunctionDef) else []
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return None
    names = frozenset(a.arg for a in source.body[0].args.args)
    try:
        return _tree(body[0].value, names)
    except ValueError:
        return None


_KV_TREES: dict = {}


def length_tree(expr, args: tuple) -> Any:
    """The tree of ``symbols.checked_lambdify(args, expr, modules=NUMPY_MODULES)`` (a cache term in
    ``length``, KV per GPU in ``length`` and ``kv_bytes``: how engine.language.kv and
    engine.deploy.structure compile them), None where it has none; once per (expression, args)."""
    key = (expr, args)
    found = _KV_TREES.get(key, _KV_TREES)
    if found is _KV_TREES:
        from engine.language import symbols
        fn = symbols.checked_lambdify(args, expr, modules=list(symbols.NUMPY_MODULES))
        found = _KV_TREES[key] = lambdified_tree(fn)
        if len(_KV_TREES) > 20_000:
            _KV_TREES.clear()
    return found


_STEP_TREES: dict = {}


def step_tree(expr) -> Any:
    """The tree of :func:`engine.deploy.step_functions._compiled`'s function (or float) for ``expr``, in the
    order it evaluates (module doc); None where no tree gives its floats. Once per expression."""
    found = _STEP_TREES.get(expr, _STEP_TREES)
    if found is not _STEP_TREES:
        return found
    if expr.is_number:           # an integer as itself, else the float the compile path stores (its own memo)
        tree = int(expr) if expr.is_Integer and abs(int(expr)) < 2 ** 53 else functions._compiled(expr)
    else:
        tree = _polynomial_tree(expr)
        if tree is None:
            fn = functions._compiled(expr)
            tree = lambdified_tree(fn) if callable(fn) else float(fn)
    if len(_STEP_TREES) > 200_000:
        _STEP_TREES.clear()
    _STEP_TREES[expr] = tree
    return tree
