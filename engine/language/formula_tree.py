"""Formula trees: a sympy expression as plain JSON, for the browser to evaluate with ``static/js/formula.js``.

Layer: engine.language (sympy only, and only to make trees: :func:`to_tree` imports it where it
runs, so evaluating and compiling trees, :func:`evaluate`, :func:`run_arrays`, :func:`positional`,
never imports sympy: a command answering from stored trees does not pay its import). The static
site has no server, yet some pages recompute numbers as a reader changes an input (the deploy
page at any prompt length and batch, the playground as dims change). They evaluate the *same* expressions the engine evaluated, exported at build time in this
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

A rule program (:func:`run`, ``run`` in formula.js) is a list of ``[name, tree]`` bindings evaluated
in order, each tree reading the caller's names and the names bound before it: the way a rule of
several steps (the deploy summary, engine.deploy.rules; the disaggregated join, engine.serving.rules)
is written once in Python and evaluated by both interpreters. The engine evaluates rule programs with
:func:`run_arrays` over numpy arrays (:func:`compile_arrays`): binary operations in argument order,
left to right, integers kept integers, so a rule program gives the floats of the numpy expression
written in the same order (``+`` and ``*`` fold left; formula.js does the same; its ``fold(op,
values)`` is the tree ``[op, *values]``, how the page sums a phase's steps). A binding the caller's
environment gives already is not evaluated (a later step alone).

A selection rule (:func:`select`, ``select`` in formula.js) picks a list of values with trees: a JSON
object ``{"each": name, "largest": name, "keep": tree, "add": [[value, condition], ...], "else":
[values]}``. Of the values given, those whose ``keep`` holds with ``each`` bound to the value, in
order; then each ``add`` value whose condition holds and that is not kept already; ``else`` when none
is. Its environment binds the caller's names and ``largest`` to the largest value given (the grid's
batches: engine/deploy/rules.py ``GRID_BATCHES``).

Invariant: ``evaluate(to_tree(e), env) == float(e.subs(env))`` up to float rounding, for every
expression made of the node types in :data:`OPS` (the only ones the spec language and the deploy
planner produce); any other node type raises ``TypeError`` naming it, so an unsupported function
cannot be exported silently. ``evaluate`` is the reference semantics of ``formula.js`` and is used
by the tests that compare the browser with Python.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.language.memo import remembered_for

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
    "-": "first argument less the second (a hand-written rule's subtraction, in its own order)",
    "cdiv": "ceil(a / b) of whole numbers (numpy's -(-a // b): integers stay integers)",
    "rank": "[\"rank\", name, x]: how many values of the ascending list bound to ``name`` are < x "
            "(numpy searchsorted, side left: the fusion regime a token count falls in)",
    "rank_le": "[\"rank_le\", name, x]: how many values of the ascending list bound to ``name`` are <= x "
               "(numpy searchsorted, side right: the last prefill point within a bound)",
    "at": "[\"at\", name, i]: the value at index i (from 0) of the list bound to ``name``",
    "lookup": "a measured table's time at a point: [\"lookup\", ref, coordinate, ...], ref naming a table "
              "the caller holds (axes, values, seconds, roofline tree); interpolated by the rule of "
              "engine.deploy.measured.interpolate (the caller's ``lookup``)",
}

_SYMPY_TABLES: list = []       # [(_NARY, _UNARY, _RELATIONS)], made by the first to_tree (sympy imported there)


def _tables() -> tuple:
    """sympy's node classes -> the tree's ops: n-ary, unary and relations (made once, on first use)."""
    if not _SYMPY_TABLES:
        import sympy
        _SYMPY_TABLES.append((
            {sympy.Add: "+", sympy.Mul: "*", sympy.Min: "min", sympy.Max: "max", sympy.And: "and", sympy.Or: "or"},
            {sympy.floor: "floor", sympy.ceiling: "ceil", sympy.log: "log", sympy.Not: "not"},
            {sympy.StrictLessThan: "<", sympy.LessThan: "<=", sympy.Equality: "==",
             sympy.StrictGreaterThan: ">", sympy.GreaterThan: ">=", sympy.Unequality: "!="}))
    return _SYMPY_TABLES[0]


def _number(expr) -> Any:
    import sympy
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
    import sympy
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
    for table in _tables():
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
        if tree and tree[0] in _LIST_OPS:
            return {tree[1]} | free_names(tree[2])
        return set().union(set(), *(free_names(a) for a in tree[1:]))
    return set()


def evaluate(tree: Any, env: Mapping[str, float], lookup=None) -> float:
    """The value of ``tree`` with its symbols bound by ``env`` (the semantics formula.js mirrors);
    ``lookup(ref, point)``: the value of a ``lookup`` node (a tree with one and no ``lookup`` raises)."""
    if isinstance(tree, (int, float)):
        return float(tree)
    if isinstance(tree, str):
        if tree not in env:
            raise _unbound_error(tree)
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
    if op in _LIST_OPS:
        x, values = evaluate(args[1], env, lookup), env[args[0]]
        if op == "at":
            return float(values[int(x)])
        return float(sum(1 for value in values if (value <= x if op == "rank_le" else value < x)))
    v = [evaluate(a, env, lookup) for a in args]
    if op == "-":
        return v[0] - v[1]
    if op == "cdiv":
        return float(-(-v[0] // v[1]))
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


#: the ops whose first argument names a list the environment binds (not a tree)
_LIST_OPS = ("rank", "rank_le", "at")

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


# -- rule programs over numpy arrays (the engine's evaluation of its exported rules) -----------------

def _fold(fn):
    def apply(values):
        out = values[0]
        for v in values[1:]:
            out = fn(out, v)
        return out
    return apply


def _cdiv(a, b):
    return -(-a // b)


_ARRAY_OPS = {
    "+": _fold(lambda a, b: a + b), "*": _fold(lambda a, b: a * b), "-": lambda v: v[0] - v[1],
    "/": lambda v: v[0] / v[1], "^": lambda v: v[0] ** v[1], "cdiv": lambda v: _cdiv(v[0], v[1]),
    "min": _fold(lambda a, b: np.minimum(a, b)), "max": _fold(lambda a, b: np.maximum(a, b)),
    "floor": lambda v: np.floor(v[0]), "ceil": lambda v: np.ceil(v[0]), "log": lambda v: np.log(v[0]),
    "mod": lambda v: v[0] - v[1] * np.floor(v[0] / v[1]),
    "not": lambda v: np.logical_not(v[0]), "and": _fold(np.logical_and), "or": _fold(np.logical_or),
    "<": lambda v: np.less(v[0], v[1]), "<=": lambda v: np.less_equal(v[0], v[1]),
    "==": lambda v: np.equal(v[0], v[1]), ">": lambda v: np.greater(v[0], v[1]),
    ">=": lambda v: np.greater_equal(v[0], v[1]), "!=": lambda v: np.not_equal(v[0], v[1]),
}


def compile_arrays(tree: Any):
    """``tree`` as a function of an environment of numbers or numpy arrays (what :func:`run_arrays`
    evaluates; module doc: argument order, integers kept). A ``pw`` whose conditions are single
    truth values evaluates only the branch taken (a branch may read names that are bound only
    there: a pipeline's fill step); over arrays each branch is evaluated and picked per point.

    The functions make the very numpy calls of the tree, in its order, on the same operands (so
    the same floats and dtypes); a binary node's number operand is used as it is and a symbol
    beside a number looked up in the node's own call rather than through a function of its own
    (:func:`_binary`), and a one-argument op calls its numpy function directly (rule programs run
    tens of thousands of times per model over a few dozen points each, where Python's calls per
    node cost about what numpy's work does; tests/test_grid_eleventh_pass.py holds every rule
    program to the walk before)."""
    if isinstance(tree, (int, float)):
        return lambda env: tree
    if isinstance(tree, str):
        return _symbol(tree)
    op, args = tree[0], tree[1:]
    if op == "pw":
        return _piecewise([(compile_arrays(v), compile_arrays(c)) for v, c in args])
    if op in _LIST_OPS:
        name, x = args[0], compile_arrays(args[1])
        if op == "at":
            return lambda env: np.asarray(env[name])[x(env)]
        side = "right" if op == "rank_le" else "left"
        return lambda env: np.searchsorted(np.asarray(env[name]), x(env), side=side)
    if op not in _ARRAY_OPS:
        raise ValueError(f"formula tree: unknown op {op!r}")
    unary = _ONE_ARG.get(op)
    if unary is not None and len(args) == 1:
        a = compile_arrays(args[0])
        return lambda env: unary(a(env))
    binary = _BINARY.get(op)
    if binary is not None and len(args) == 2:      # most nodes: one call, no list (the same operation)
        return _binary(binary, args[0], args[1])
    fn, parts = _ARRAY_OPS[op], [compile_arrays(a) for a in args]
    return lambda env: fn([p(env) for p in parts])


def _symbol(name: str):
    """A free symbol's function: its value in the environment (a clear error when it is unbound)."""
    def symbol(env):
        try:
            return env[name]
        except KeyError:
            raise _unbound_error(name) from None
    return symbol


def _operand(tree: Any) -> tuple[str, Any]:
    """How :func:`_binary` reads one operand: ("number", it), ("name", the symbol) or ("tree", its
    compiled function)."""
    if isinstance(tree, (int, float)):
        return "number", tree
    if isinstance(tree, str):
        return "name", tree
    return "tree", compile_arrays(tree)


def _binary(binary, left: Any, right: Any):
    """The function of a two-operand node ``binary(left, right)``: the left operand read first,
    then the right, then the one numpy call (the tree's order); a number is used as it is and a
    symbol looked up in the node's own call (an unbound one: :func:`_symbol`'s error)."""
    (lk, lv), (rk, rv) = _operand(left), _operand(right)
    if lk == "tree" and rk == "tree":
        return lambda env: binary(lv(env), rv(env))
    if lk == "tree" and rk == "number":
        return lambda env: binary(lv(env), rv)
    if lk == "number" and rk == "tree":
        return lambda env: binary(lv, rv(env))
    if lk == "name" and rk == "number":
        def name_number(env):
            try:
                return binary(env[lv], rv)
            except KeyError:
                _unbound(env, lv)
                raise
        return name_number
    if lk == "number" and rk == "name":
        def number_name(env):
            try:
                return binary(lv, env[rv])
            except KeyError:
                _unbound(env, rv)
                raise
        return number_name
    a = compile_arrays(left) if lk != "tree" else lv
    b = compile_arrays(right) if rk != "tree" else rv
    return lambda env: binary(a(env), b(env))


def _unbound(env, name: str) -> None:
    """Raise :func:`_symbol`'s error when ``name`` is not bound in ``env`` (a KeyError raised by
    the numpy call itself goes on as it is)."""
    if name not in env:
        raise _unbound_error(name) from None


def _unbound_error(name: str) -> KeyError:
    """The error of a tree that reads a symbol its environment does not bind."""
    return KeyError(f"formula tree: symbol {name!r} is not bound")


def _piecewise(pairs: list[tuple]):
    """A ``pw`` node's function (:func:`compile_arrays`' rule): the conditions in order until an
    array one (a single true one first: its value alone); then each branch's value picked per
    point by ``np.where``, the last first, with numpy's divide and invalid warnings off while the
    values are evaluated and picked (a branch not taken may divide by zero where it is not read)."""
    def piecewise(env):
        conds = []
        for value, cond in pairs:
            c = cond(env)
            if np.ndim(c) == 0 and not conds:
                if c:
                    return value(env)
                continue
            conds.append((value, c))
        out = np.nan
        with np.errstate(divide="ignore", invalid="ignore"):
            for value, c in reversed(conds):
                out = np.where(c, value(env), out)
        return out
    return piecewise


def positional(tree: Any, names: tuple[str, ...]):
    """``tree`` as a function of positional arguments bound to ``names`` in order (numbers or numpy
    arrays), by :func:`compile_arrays` (binary operations in the tree's order, left to right);
    a tree without a symbol is its value as a float. A tree written in the order a compiled
    function evaluates (engine.deploy.printed_tree: the operations of lambdify's source, one node
    each) gives that function's floats: the deploy fast path's programs (engine.deploy.stored)."""
    if not free_names(tree):
        return float(compile_arrays(tree)({}))
    fn = compile_arrays(tree)
    if len(names) == 4:          # the step functions' (batch, seq, ctx, kv_bytes): no tuple per call
        a, b, c, d = names
        return lambda w, x, y, z: fn({a: w, b: x, c: y, d: z})
    return lambda *values: fn(dict(zip(names, values)))


#: the two-argument form of each op of :data:`_ARRAY_OPS` that has one (the same numpy operation)
_ONE_ARG = {"floor": np.floor, "ceil": np.ceil, "log": np.log, "not": np.logical_not}

_BINARY = {"+": operator.add, "*": operator.mul, "-": operator.sub, "/": operator.truediv, "cdiv": _cdiv,
           "min": np.minimum, "max": np.maximum, "<": np.less, "<=": np.less_equal, "==": np.equal,
           ">": np.greater, ">=": np.greater_equal, "!=": np.not_equal, "and": np.logical_and, "or": np.logical_or}

def _plan(program: list, only: tuple | None, given: tuple) -> list:
    """The compiled bindings :func:`run_arrays` evaluates for ``only`` (every one when None): the
    bindings ``only`` names and those they read, in program order, less those the caller ``given``."""
    keep = [name not in given for name, _ in program]
    if only:
        need, keep = set(only), [False] * len(program)
        for i in range(len(program) - 1, -1, -1):
            name, tree = program[i]
            if name in need and name not in given:
                keep[i] = True
                need |= free_names(tree)
    return [(name, compile_arrays(tree)) for (name, tree), k in zip(program, keep) if k]


class _Program:
    """A rule program as :func:`run_arrays` runs it: its binding names in order and as a set, and
    its compiled bindings per (``only``, ``given``) (:func:`_plan`; a handful per program, since
    callers ask for fixed names and bind fixed inputs)."""

    def __init__(self, program: list):
        self.program = program
        self.names = tuple(name for name, _ in program)
        self.name_set = frozenset(self.names)
        self.plans: dict[tuple, list] = {}

    def plan(self, only: tuple | None, given: tuple) -> list:
        found = self.plans.get((only, given))
        if found is None:
            found = self.plans[(only, given)] = _plan(self.program, only, given)
        return found


#: id(program) -> (it, its _Program): the programs are module constants and the callers' own lists,
#: a handful per process (one lookup per run, where rule programs run tens of thousands of times a model)
_PROGRAMS: dict = {}


def run_arrays(program: list, env: Mapping[str, Any], only: tuple | None = None) -> dict[str, Any]:
    """A rule program's bindings (module doc) over numbers or numpy arrays: ``env`` plus each
    ``[name, tree]`` in order. ``only``: just these names and the bindings they read (a caller
    that needs a program's first steps does not evaluate, nor bind the inputs of, the rest). A
    binding ``env`` gives already is the caller's (a later step evaluated alone)."""
    out = dict(env)
    compiled = remembered_for(_PROGRAMS, program, lambda: _Program(program), 1_000)
    # (most calls bind none of the program's names: one set test in C instead of a test per binding)
    given = () if compiled.name_set.isdisjoint(out) else tuple(name for name in compiled.names if name in out)
    for name, fn in compiled.plan(only, given):
        out[name] = fn(out)
    return out


class Rule:
    """A tree written with Python's operators (``a * b / c`` is ``["/", ["*", a, b], c]``: the order
    written is the order evaluated), for the engine's hand-written rule programs."""

    __slots__ = ("tree",)

    def __init__(self, tree):
        self.tree = tree.tree if isinstance(tree, Rule) else tree

    def _op(self, op, other, swap=False):
        a, b = self.tree, Rule(other).tree
        return Rule([op, b, a] if swap else [op, a, b])

    def __add__(self, o): return self._op("+", o)
    def __radd__(self, o): return self._op("+", o, True)
    def __sub__(self, o): return self._op("-", o)
    def __rsub__(self, o): return self._op("-", o, True)
    def __mul__(self, o): return self._op("*", o)
    def __rmul__(self, o): return self._op("*", o, True)
    def __truediv__(self, o): return self._op("/", o)
    def __rtruediv__(self, o): return self._op("/", o, True)
    def __pow__(self, o): return self._op("^", o)
    def __lt__(self, o): return self._op("<", o)
    def __le__(self, o): return self._op("<=", o)
    def __gt__(self, o): return self._op(">", o)
    def __ge__(self, o): return self._op(">=", o)
    __hash__ = None


def call(op: str, *args) -> Rule:
    """``[op, arg, ...]`` of :data:`OPS` as a :class:`Rule` (min, max, ceil, cdiv, pw pairs as tuples)."""
    if op == "pw":
        return Rule(["pw", *([Rule(v).tree, Rule(c).tree] for v, c in args)])
    if op in _LIST_OPS:
        return Rule([op, args[0], Rule(args[1]).tree])
    return Rule([op, *(Rule(a).tree for a in args)])


def program(*bindings: tuple) -> list:
    """A rule program from (name, :class:`Rule` or number) pairs: its JSON form."""
    return [[name, Rule(rule).tree] for name, rule in bindings]
