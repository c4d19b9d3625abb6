"""Speed-of-light cost of a device program: per step compute, memory and link time; SOL = their max.

Layer: engine.deploy. Steps hold per-device expressions in the scenario symbols (and the KV element size);
:func:`compile_program` turns a program into one numpy function evaluated over many scenario
points at once (the grid build's vectorized path and the single point of ``archledger deploy``
use the same code).

* t_compute = FLOPs / peak of the operands' dtype on this GPU (next wider native dtype if needed)
* t_memory  = (activation + cache + weight bytes) / HBM bandwidth
* t_comm    = calls x alpha + bytes sent / link bandwidth (scale-up or scale-out, one direction):
  alpha is the collective's per-call latency on this GPU's links (NCCL's tuner model,
  :meth:`engine.deploy.hardware.CollectiveModel.latency`), beta the link's bandwidth
* SOL(step) = max of the three, the bound is the largest term; a phase's no-overlap time
  (``t_sol``) is the sum of its steps: one kernel after another, none hiding another's time.
* The phase's lower bound (``t_bound``, docs/deployment.md "Two times per point"): each resource
  serves one thing at a time but resources overlap freely, so no schedule of the phase's work
  (kernels, collectives, micro-batches, in any order or overlap) beats the busiest resource:
  max(sum of t_compute (the tensor cores), sum of t_memory (HBM), and per link class the sum of
  t_comm of the steps on it). ``t_comm_stream``: the no-overlap time of the ``comm`` steps alone
  (what a second micro-batch can hide, engine.deploy.sol's two-batch schedule).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from itertools import chain
from typing import Mapping

import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter

from engine.language import symbols
from engine.language.memo_printer import MemoPrinting
from engine.deploy.hardware import GPU
from engine.deploy.placement import Program, Step

BOUNDS = ("compute", "memory", "comm")
#: Symbol for the bytes of one cache element: programs keep it free so one compiled program
#: serves every KV dtype (bound at evaluation).
KV_BYTES = symbols.dim("kv_bytes")
ARGS = tuple(symbols.dim(n) for n in symbols.SCENARIO_DIMS) + (KV_BYTES,)
_MODULES = list(symbols.NUMPY_MODULES)
#: Largest steps x points a program's totals stack at once (8 MB per term); above it, step by step.
STACKED_ELEMENTS = 1 << 20


_TOTALS: dict[tuple, tuple] = {}
#: (expression, repeat, last token?) -> one total (:func:`_times`); (bytes, weight bytes) -> their sum.
#: Steps missing _TOTALS (fused steps, mostly) share most of their four expressions with others
#: (a fused step's FLOPs with the same match under other boundaries, the weight bytes of its
#: members): about one product in three was new.
_PRODUCTS: dict[tuple, sympy.Expr] = {}
_SUMS: dict[tuple, sympy.Expr] = {}


def _times(expr: sympy.Expr, repeat: sympy.Expr, last_token: bool) -> sympy.Expr:
    """``expr * repeat``, with the sequence length set to 1 for a last-token step (prefill logits),
    once per distinct (expression, repeat, last token?): a pure function of them."""
    key = (expr, repeat, last_token)
    out = _PRODUCTS.get(key)
    if out is None:
        out = expr * repeat
        if last_token:
            out = out.subs(symbols.dim(symbols.SEQ), 1)
        _PRODUCTS[key] = out
    return out


#: id(step) -> (step, totals): structures share most step objects (fusion keeps the unfused ones,
#: placements are shared), and a lookup by expressions compares large formulas term by term.
_BY_STEP: dict[int, tuple] = {}


def step_totals(step: Step) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]:
    """Per device, all calls of the step: FLOPs, HBM bytes (weights included), link bytes, and the
    weight bytes among the HBM bytes (prefill logits: last token only). Memoized on the step's
    expressions: structures that share steps (most of them) share this arithmetic."""
    mine = _BY_STEP.get(id(step))
    if mine is not None and mine[0] is step:     # the same step object: no expression compared
        return mine[1]
    key = (step.flops, step.bytes, step.weight_bytes, step.comm_bytes, step.repeat, step.last_token)
    totals = _TOTALS.get(key)
    if totals is None:
        repeat, last = step.repeat, step.last_token
        total_bytes = _SUMS.get((step.bytes, step.weight_bytes))
        if total_bytes is None:
            total_bytes = _SUMS[(step.bytes, step.weight_bytes)] = step.total_bytes
        totals = tuple(_times(e, repeat, last) for e in (step.flops, total_bytes, step.comm_bytes, step.weight_bytes))
        if len(_TOTALS) > 200_000:        # as _BY_STEP: the steps of a model or two
            _TOTALS.clear()
            _PRODUCTS.clear()
            _SUMS.clear()
        _TOTALS[key] = totals
    if len(_BY_STEP) > 200_000:      # steps are shared by the structures of one model: keep it bounded
        _BY_STEP.clear()
    _BY_STEP[id(step)] = (step, totals)
    return totals


_FUNCTIONS: dict[sympy.Expr, object] = {}     # expression -> its numpy function or float

#: Recent point sets -> {step function: its value there}. One function serves every program that
#: holds its expression (:func:`_compiled`), and a build evaluates sibling programs (the other
#: fusion regimes and frameworks of a config, the prefill working set's columns, the per-op
#: tables) at the very same points again and again: about three function calls in four were
#: repeats. A value is a function of its inputs alone, so a stored one is the same float a new call
#: would give. Bounded: past :data:`VALUES_ELEMENTS` stored numbers the least recently used point
#: sets go first.
_VALUES: OrderedDict[tuple, "_PointSet"] = OrderedDict()
_VALUES_SIZE = [0]              # numbers held in _VALUES (a list: updated in place)
VALUES_ELEMENTS = 1 << 22       # 32 MB of float64


class _PointSet(dict):
    """One point set's stored values (function -> value, and :meth:`CompiledProgram._table`'s
    tables), with the count of numbers they hold: dropping the set subtracts it at once instead
    of sizing every value again."""

    __slots__ = ("size",)

    def __init__(self):
        super().__init__()
        self.size = 0

    def hold(self, key, value):
        """Store ``value`` (:func:`_stored`'s array or a float) under ``key``, counted."""
        self[key] = value
        n = np.size(value)
        self.size += n
        _VALUES_SIZE[0] += n
        return value


def _values(args) -> _PointSet:
    """The stored values at the point set ``args`` (arrays: keyed by dtype, shape and bytes),
    marked most recently used; an empty set to fill when it is new."""
    key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in args)
    found = _VALUES.get(key)
    if found is None:
        found = _VALUES[key] = _PointSet()
    else:
        _VALUES.move_to_end(key)
    return found


def _stored(value, args):
    """``value`` as :data:`_VALUES` keeps it: an array of its own that nobody may write to (a
    function such as ``batch`` returns its input, which the caller owns)."""
    if isinstance(value, np.ndarray):
        if value.base is not None or any(value is a for a in args):
            value = value.copy()
        value.flags.writeable = False
    return value


def _trim_values() -> None:
    """Drop the least recently used point sets while more than VALUES_ELEMENTS numbers are held
    (the newest set stays, whatever its size)."""
    while _VALUES_SIZE[0] > VALUES_ELEMENTS and len(_VALUES) > 1:
        _, dropped = _VALUES.popitem(last=False)
        _VALUES_SIZE[0] -= dropped.size


#: (the functions, the constants' exact floats) of a table layout -> a small number naming it: the
#: key of that table among a point set's stored values (programs of sibling structures hold the
#: same functions, often in the same order). Functions live in _FUNCTIONS for the whole process,
#: so an id never names two layouts.
_LAYOUT_TOKENS: dict[tuple, int] = {}


def _compiled(expr: sympy.Expr):
    """A numpy function of ARGS for one expression (a float when constant), shared by every program:
    structures that differ by a fusion or a GPU class repeat most of their step expressions."""
    fn = _FUNCTIONS.get(expr)
    if fn is None:
        # constants are stored as floats too: converting a sympy number goes through mpmath, and
        # the same few thousand constants recur in every structure of a model
        fn = _FUNCTIONS[expr] = float(expr) if expr.is_number else _polynomial(expr) or _lambdify(expr)
    return fn


#: ARGS' ranks in the order sympy's printers write them (their sort key: batch, ctx, kv_bytes, seq):
#: the factors of a product and the monomials of a sum are ordered by it.
_RANK = {a: r for r, a in enumerate(sorted(ARGS, key=sympy.default_sort_key))}
_AT = {a: i for i, a in enumerate(ARGS)}


def _symbols(expr) -> tuple | None:
    """``expr``'s symbols in print order when it is one symbol of ARGS or a product of distinct
    ones (no coefficient); else None."""
    factors = expr.args if type(expr) is sympy.Mul else (expr,)
    if not all(type(f) is sympy.Symbol and f in _RANK for f in factors):
        return None
    return tuple(sorted(factors, key=_RANK.__getitem__))


def _monomial(term) -> tuple | None:
    """``term`` as (rational coefficient, factors in print order) when it is a rational, or a
    rational times either distinct symbols of ARGS or one power ``r**(x*y)`` of a positive rational
    ``r`` to a product of such symbols (an expert's touch probability); else None."""
    if isinstance(term, sympy.Rational):
        return term, ()
    coeff, factors = sympy.S.One, term.args if type(term) is sympy.Mul else (term,)
    if isinstance(factors[0], sympy.Rational):
        coeff, factors = factors[0], factors[1:]
    if len(factors) == 1 and type(factors[0]) is sympy.Pow:
        base, exp = factors[0].args
        if isinstance(base, sympy.Rational) and base > 0 and _symbols(exp) is not None:
            return coeff, factors
        return None
    if not all(type(f) is sympy.Symbol and f in _RANK for f in factors):
        return None
    return coeff, tuple(sorted(factors, key=_RANK.__getitem__))


def _polynomial_plan(expr) -> list | None:
    """What ``sympy.lambdify(ARGS, expr, modules=_MODULES)`` writes for a sum of monomials
    (:func:`_monomial`; most step expressions), as a list of terms in the order it prints them,
    each (sign, coefficient, factors): the first term's sign is "" and it carries its own
    coefficient, the others are added ("+") or subtracted ("-") with the coefficient's absolute
    value, as the printer writes ``a - 5*x``. None for any other expression, and for sums of two
    powers (whose order this does not work out).

    The order is the printer's (``Expr.as_ordered_terms`` with no order given): monomials by their
    exponents over the sorted generators (the power of a rational first, then the symbols), largest
    first (lex), the constant last; except a positive constant and one negative multiple of one
    factor, printed ``c - k*x`` (sympy's special case). tests/test_compile_speed2.py checks this
    text against lambdify's source on real programs."""
    terms = [_monomial(t) for t in (expr.args if type(expr) is sympy.Add else (expr,))]
    if any(t is None for t in terms) or (len(terms) == 1 and not terms[0][1]) or \
            sum(type(t[1][0]) is sympy.Pow for t in terms if t[1]) > 1:
        return None
    if len(terms) == 2 and any(not t[1] and t[0] > 0 for t in terms) \
            and any(len(t[1]) == 1 and t[0] < 0 for t in terms):
        terms.sort(key=lambda t: bool(t[1]))        # c - k*x: the constant first
    else:
        terms.sort(key=lambda t: (-(bool(t[1]) and type(t[1][0]) is sympy.Pow),
                                  *(-(s in t[1]) for s in _RANK)))
    return [("" if i == 0 else "+" if c > 0 else "-", c if i == 0 else abs(c), factors)
            for i, (c, factors) in enumerate(terms)]


def _python_number(c):
    """The Python number the printed literal of sympy rational ``c`` evaluates to: ``p`` (an int)
    or ``p/q`` (a float, Python's correctly rounded division, as it folds the literal)."""
    return int(c.p) if c.q == 1 else int(c.p) / int(c.q)


def _polynomial(expr):
    """A numpy function of ARGS doing what lambdify's source for ``expr`` does (:func:`_polynomial_plan`),
    operation for operation with the same Python numbers, so it returns the very same floats,
    without lambdify's printing and compiling (about 1 ms per expression; nine in ten of the
    corpus's distinct non-constant step expressions are such sums). None when ``expr`` is not one.

    A term ``k*x*y`` is ``(k*x)*y``; a coefficient 1 is not written (``x*y``), -1 is a unary minus
    on the first factor (``-x*y`` is ``(-x)*y``) when it leads the sum; a power ``(31/32)**(x*y)``
    is the float ``31/32`` to the power ``x*y``; then the terms are added or subtracted left to
    right (``a + b - c`` is ``(a + b) - c``)."""
    plan = _polynomial_plan(expr)
    if plan is None:
        return None
    try:
        parts = [(sign, _term(c, [_factor(f) for f in factors], lead=not sign)) for sign, c, factors in plan]
    except OverflowError:           # p/q beyond a float: lambdify's function raises when called
        return None
    (_, first), rest = parts[0], parts[1:]
    if not rest:
        return lambda *a: first(a)
    if len(rest) == 1:
        (sign, second), = rest
        if sign == "+":
            return lambda *a: first(a) + second(a)
        return lambda *a: first(a) - second(a)

    def total(*a):
        value = first(a)
        for sign, term in rest:
            value = value + term(a) if sign == "+" else value - term(a)
        return value
    return total


def _factor(factor):
    """A factor of a term (:func:`_monomial`) as a function of the argument tuple: its argument's
    position when it is a symbol; the power ``r**(x*y)`` (the float or int ``r``, the product of
    the exponent's arguments left to right) when it is a power."""
    if type(factor) is sympy.Symbol:
        return _AT[factor]
    base = _python_number(factor.base)
    at = [_AT[s] for s in _symbols(factor.exp)]
    if len(at) == 1:
        i, = at
        return lambda a: base ** a[i]
    if len(at) == 2:
        i, j = at
        return lambda a: base ** (a[i] * a[j])
    exponent = _term(sympy.S.One, at, lead=False)
    return lambda a: base ** exponent(a)


def _term(c, factors: list, lead: bool):
    """One printed term as a function of the argument tuple: the constant ``c`` when it has no
    factor (a Python number, as lambdify's literal); else the product of its factors (an argument's
    position or a function, :func:`_factor`) left to right, after the coefficient (``k*x*y``),
    without it when it is 1, or, when it is -1 and the term leads the sum, with a unary minus on
    the first (``-x*y``)."""
    if not factors:
        k = _python_number(c)
        return lambda a: k
    first, more = factors[0], factors[1:]
    k = None if c == 1 or (c == -1 and lead) else _python_number(c)
    if callable(first):         # a power
        head = first if c == 1 else (lambda a: -first(a)) if k is None else (lambda a: k * first(a))
    else:
        i = first
        head = (lambda a: a[i]) if c == 1 else (lambda a: -a[i]) if k is None else (lambda a: k * a[i])
    if not more:
        return head
    if len(more) == 1:
        j, = more
        return lambda a: head(a) * a[j]
    if len(more) == 2:
        j, m = more
        return lambda a: head(a) * a[j] * a[m]

    def product(a):
        value = head(a)
        for j in more:
            value = value * a[j]
        return value
    return product


#: id(step) -> (step, its compiled columns): structures share most step objects (see _BY_STEP).
_STEP_FUNCTIONS: dict[int, tuple] = {}


def _step_functions(step: Step) -> tuple:
    """The step's four totals (:func:`step_totals`) compiled, and its calls (a collective's repeat;
    0.0 for a compute step), each a function or a float (:func:`_compiled`): once per step object."""
    mine = _STEP_FUNCTIONS.get(id(step))
    if mine is not None and mine[0] is step:
        return mine[1]
    totals = step_totals(step)
    out = (*(_compiled(t) for t in totals), _compiled(step.repeat) if step.collective else 0.0)
    if len(_STEP_FUNCTIONS) > 200_000:      # as _BY_STEP: the steps of a model or two
        _STEP_FUNCTIONS.clear()
    _STEP_FUNCTIONS[id(step)] = (step, out)
    return out


class _MemoPrinter(MemoPrinting, NumPyPrinter):
    """The NumPy printer lambdify makes for ``modules=_MODULES``, printing each distinct
    sub-expression once per process (:class:`engine.language.memo_printer.MemoPrinting`). Used only
    on the node types of :data:`_PLAIN` (no printer state: no unsupported functions or number
    constants, which doprint collects per call)."""


#: The node types :class:`_MemoPrinter` prints (their text is a function of the node alone and needs no
#: per-call state of the printer).
_PLAIN = frozenset({sympy.Symbol, sympy.Integer, sympy.core.numbers.Zero, sympy.core.numbers.One,
                    sympy.core.numbers.NegativeOne, sympy.Rational, sympy.core.numbers.Half, sympy.Add,
                    sympy.Mul, sympy.Pow, sympy.Min, sympy.Max, sympy.floor, sympy.ceiling})
_PRINTER: list = []      # [the process's _MemoPrinter], made on first use


def _lambdify(expr: sympy.Expr):
    """``sympy.lambdify(ARGS, expr, modules=_MODULES)``, printed by one shared :class:`_MemoPrinter`
    when every node of ``expr`` is of a :data:`_PLAIN` type and its symbols are ARGS. The printer
    has the settings lambdify gives its own (user functions from the modules' dicts), so the
    function's source is the one lambdify writes without it, and the floats are the same
    (tests/test_cost_compile.py compares the sources). Printing was most of lambdify's time."""
    printer = None
    if all(type(node) in _PLAIN and (type(node) is not sympy.Symbol or node in ARGS)
           for node in sympy.preorder_traversal(expr)):
        if not _PRINTER:
            _PRINTER.append(_MemoPrinter({"fully_qualified_modules": False, "inline": True,
                                          "allow_unknown_functions": True,
                                          "user_functions": {k: k for m in _MODULES if isinstance(m, dict)
                                                             for k in m}}))
        printer = _PRINTER[0]
    # no docstring: printing the expression into it is a quarter of lambdify's time
    return symbols.checked_lambdify(_ARG_LIST, expr, modules=_MODULES, printer=printer, docstring_limit=0)


#: ARGS as lambdify's one argument: their parameter list as text. lambdify writes an argument that is
#: not a symbol as its ``str`` (sympy's _EvaluatorPrinter), so the source is the one ARGS give,
#: ``def _lambdifygenerated(batch, seq, ctx, kv_bytes):`` (tests/test_cost_compile.py compares the
#: sources); given the four symbols it first sorts them with sympy's ``ordered`` to find any it must
#: rename (none of ours is), about a third of the time of a lambdify call.
_ARG_LIST = (", ".join(str(a) for a in ARGS),)


#: (number of columns, ids of a layout's entries as bytes: its columns' functions and constants, column
#: after column) -> (the entries, :func:`_layout` of them): programs of sibling structures (other regimes, frameworks,
#: domains) hold other step objects but mostly the very same functions and constants (a
#: DeepSeek-V3 build asks 1,582 layouts of 889 distinct entry lists).
_LAYOUTS: dict[tuple, tuple] = {}


def _layout(entries: tuple, n_columns: int) -> tuple[np.ndarray, np.ndarray, list, int]:
    """:meth:`CompiledProgram._table_layout` of ``n_columns`` columns of equal length whose
    entries, column after column, are ``entries``: rows (shape (n_columns, steps)), distinct
    constants in first-seen order (told apart by their exact float text: -0.0 is not 0.0), distinct
    functions in first-seen order (their rows after the constants') and the token. (A plain loop:
    measured faster than sorting the entries out with C-level maps and numpy at a few hundred.)"""
    constants: dict[str, int] = {}        # exact float text -> row
    functions: dict = {}                   # function -> position among the functions
    marks = []                             # per entry: a constant's row, or ~(its function's position)
    for f in entries:
        if callable(f):
            j = functions.get(f)
            if j is None:
                j = functions[f] = len(functions)
            marks.append(~j)
        else:
            text = float(f).hex()
            j = constants.get(text)
            if j is None:
                j = constants[text] = len(constants)
            marks.append(j)
    marks = np.array(marks, dtype=np.intp).reshape(n_columns, -1)
    rows = np.where(marks < 0, len(constants) + ~marks, marks)
    rows.flags.writeable = False           # shared by every program with these entries
    fns = list(functions)
    table = np.array([float.fromhex(k) for k in constants], dtype=float)
    table.flags.writeable = False
    token = _LAYOUT_TOKENS.setdefault((tuple(fns), tuple(constants)), len(_LAYOUT_TOKENS))
    return rows, table, fns, token


#: (id(GPU), operand dtypes, links, collective shapes) -> (the GPU, their peaks, bandwidths and
#: per-call latencies): the programs of a model use a handful of each, and every program asks
#: every GPU type of the grid (the GPU is held: its id names it while the entry lives).
_KIND_RATES: dict[tuple, tuple] = {}


def _kind_rates(gpu: GPU, dtypes: tuple, links: tuple, colls: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Peak FLOP/s per operand dtype, bytes/s per link and seconds per call per collective shape
    (0 for none) on ``gpu``: read from the GPU once per distinct (GPU, kinds) (read-only arrays)."""
    key = (id(gpu), dtypes, links, colls)
    found = _KIND_RATES.get(key)
    if found is None or found[0] is not gpu:
        if len(_KIND_RATES) > 50_000:
            _KIND_RATES.clear()
        rates = (np.array([gpu.peak_flops(d) for d in dtypes], dtype=float),
                 np.array([link_bandwidth(gpu, link) for link in links], dtype=float),
                 np.array([gpu.collective_latency(*c) if c else 0.0 for c in colls], dtype=float))
        for r in rates:
            r.flags.writeable = False
        found = _KIND_RATES[key] = (gpu, *rates)
    return found[1:]


class CompiledProgram:
    """A program's per-step totals as numpy functions of (batch, seq, ctx, kv_bytes).

    Compiled once per program (GPU-independent); a GPU only supplies the peaks, bandwidths and
    links the times divide by. Inputs broadcast: ``batch`` of shape (n, 1) and ``ctx`` of shape
    (1, m) evaluate the n x m grid, each sub-expression at the shape it depends on.
    """

    def __init__(self, program: Program, compiled: list | None = None):
        self.program = program
        # ``compiled``: each step's five entries made elsewhere (engine.deploy.stored: from the build's
        # trees; its steps then carry what the rates read: dtype, link, collective, kind, repeat)
        compiled = [_step_functions(s) for s in program.steps] if compiled is None else compiled
        self._columns = [[c[i] for c in compiled] for i in range(4)]
        # collectives (alone or fused): calls per step, each paying the per-call latency
        self._calls = [c[4] for c in compiled]
        self._rates: dict[str, tuple[np.ndarray, np.ndarray, float, np.ndarray]] = {}
        self._stacked_rates: dict[tuple, tuple] = {}    # rates_for's per-GPU rates side by side, per GPU list
        self._layouts: dict[tuple, tuple] = {}     # column indices -> their table layout (_table_layout())
        self._evaluated: dict[tuple, dict[int, np.ndarray]] = {}     # evaluate()'s columns per point set
        self._kernels: tuple[list[int], np.ndarray] | None = None
        self._key: tuple | None = None              # evaluation_key(), made on first use
        #: prefill working sets already computed (engine.deploy.sol.prefill_working_set: a function
        #: of the program and the points only), keyed by one (prompts, prompt, prompt, KV bytes)
        #: point, or by ("points", shape, bytes) of a set of distinct (prompt, KV bytes) points
        self.working_sets: dict[tuple, np.ndarray] = {}
        # a program's steps use a handful of dtypes, links and collective shapes: rates are looked
        # up once per distinct one and spread to the steps by index (hundreds of steps, many GPUs)
        self._kinds = [_distinct(s.compute_dtype for s in program.steps),
                       _distinct(s.link for s in program.steps),
                       _distinct((s.collective, s.ranks, s.nodes) if s.collective else None for s in program.steps)]
        #: the steps a second micro-batch's kernels can hide (inserted collectives, kind ``comm``)
        self._comm_steps = np.array([s.kind == "comm" for s in program.steps], dtype=bool)
        self._bound_rows: tuple | None = None       # _bound_terms' step indices, made on first use

    def evaluation_key(self) -> tuple:
        """A key two programs share when they give the same numbers at the same points on the same
        GPUs: the ids of their columns' entries (the step functions and constants, step by step:
        the same objects, so the same values) and each step's rate kinds (operand dtype, link,
        collective shape: the same rates on any GPU). Structures built apart (other domains, token
        regimes, frameworks) often hold other program objects with the very same entries; the
        grid evaluates one of them for all (:func:`engine.deploy.sol.phases_many`). An id names
        its entry while this program lives (it holds its entries): compare keys of live programs only."""
        if self._key is None:
            (dtypes, d_at), (links, l_at), (colls, c_at) = self._kinds
            self._key = (len(self._calls), _ids(chain(*self._columns, self._calls)),
                         tuple(dtypes), d_at.tobytes(), tuple(links), l_at.tobytes(), tuple(colls), c_at.tobytes(),
                         self._comm_steps.tobytes())
        return self._key

    def kernel_steps(self) -> tuple[list[int], np.ndarray]:
        """Indices of the steps that run a kernel (not communication, repeated at least once) and
        their repeats as floats: what a prefill working set looks at (computed once per program)."""
        if self._kernels is None:
            repeats = [_repeat(s.repeat) if s.kind != "comm" else 0.0 for s in self.program.steps]
            keep = [i for i, r in enumerate(repeats) if r > 0]
            self._kernels = (keep, np.array([repeats[i] for i in keep]))
        return self._kernels

    def rates(self, gpu: GPU) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        """Per step: peak FLOP/s of its operand dtype and its link's bytes/s; HBM bytes/s; and per
        step the seconds of latency each call of a collective costs (0 for compute steps)."""
        if gpu.key not in self._rates:
            (dtypes, d_at), (links, l_at), (colls, c_at) = self._kinds
            peaks, bandwidths, latencies = _kind_rates(gpu, tuple(dtypes), tuple(links), tuple(colls))
            self._rates[gpu.key] = (peaks[d_at], bandwidths[l_at], gpu.hbm_bytes_per_s, latencies[c_at])
        return self._rates[gpu.key]

    def latency(self, index: int, args, alphas) -> np.ndarray | float:
        """Per-call latency x calls of step ``index`` (seconds)."""
        calls = self._calls[index]
        return (calls(*args) if callable(calls) else calls) * alphas[index]

    def column(self, index: int, args, shape, values: dict | None = None, at=None) -> np.ndarray:
        """Column ``index`` (0 flops, 1 bytes, 2 comm bytes, 3 weight bytes; 4 collective calls) of
        every step, stacked: an array of shape (steps, *shape), or (steps, len(at)) when ``at``
        picks points of the 1-d ``args`` (a gather: the floats of evaluating there). See
        :meth:`columns`."""
        return self.columns((index,), args, shape, values, at)[0]

    def columns(self, indices: tuple, args, shape, values: dict | None = None, at=None) -> np.ndarray:
        """The columns ``indices`` (see :meth:`column`) of every step at once: a new array of
        shape (len(indices), steps, *shape) (``at``: (len(indices), steps, len(at))), each
        ``[i]`` a C-ordered block of its own.

        The distinct constants and functions of those columns fill one table (:meth:`_table`),
        spread to the steps by one gather (a pure copy, the same floats): every layer repeats its
        ops, so a program holds far fewer distinct functions than steps."""
        if at is not None:           # the picked points first: the table has fewer rows than the steps
            rows, table = self._picked_table(tuple(indices), args, tuple(shape), values, np.asarray(at, dtype=np.intp))
        else:
            rows, table = self._table(tuple(indices), args, tuple(shape), values)
        # take() keeps the (steps, points) blocks C-ordered: the sums over axis 0 add row after row
        return table.take(rows, axis=0)

    def _picked_table(self, indices: tuple, args, shape: tuple, values: dict | None, at: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_table` at the points ``at`` picks of the 1-d ``args``: each function's value over
        every point of ``args`` (:func:`_values`, as :meth:`_table` gets it) gathered at the picks
        into a table of this call's own, not kept: the very copies ``_table(...)[1].take(at,
        axis=1)`` holds, without a table over every point. :func:`engine.deploy.sol.phases_many`
        picks each program's points out of one point set of all the programs' points (far more
        points than any one program's: a table over them would cost more than its picks)."""
        rows, constants, functions, _ = self._table_layout(indices)
        if values is None:
            values = _values(args)
        if 4 * len(at) >= shape[0]:
            # most points picked: the rows over every point (whole-row copies), then one gather
            table = _filled(constants, functions, values, args, shape).take(at, axis=1)
        else:
            table = np.empty((len(constants) + len(functions), len(at)))
            table[:len(constants)] = constants.reshape(-1, 1)
            for j, f in enumerate(functions, len(constants)):
                value = _value(values, f, args)
                if type(value) is not np.ndarray or value.shape != shape:
                    value = np.broadcast_to(value, shape)
                table[j] = value[at]
        _trim_values()
        return rows, table

    def _table(self, indices: tuple, args, shape: tuple, values: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(each step's row per column, the table of :meth:`_table_layout`'s rows at these points).

        Each step function's value at these points comes from :func:`_values` (computed once per
        function and point set, shared with every program holding the same expression; a caller
        asking several columns at one point set passes its ``values``). The table itself is kept
        among the point set's values too, under its layout's token and shape: sibling programs
        (other fusion regimes, structures of other domains) and the sizing search's repeated
        questions ask for the very same functions at the very same points about every other
        time, and the table is a function of those alone (read-only; :meth:`columns` gathers
        from it into new arrays)."""
        rows, constants, functions, token = self._table_layout(indices)
        if values is None:
            values = _values(args)
        key = (token, shape)
        table = values.get(key)
        if table is None:
            table = _filled(constants, functions, values, args, shape)
            table.flags.writeable = False
            values.hold(key, table)
            _trim_values()
        return rows, table

    def _table_layout(self, indices: tuple) -> tuple[np.ndarray, np.ndarray, list, int]:
        """The table of columns ``indices``: each step's row per column (shape (len(indices),
        steps)), the distinct constants (rows first, told apart by their exact float: -0.0 is not
        0.0), the distinct functions (the rows after them) and the layout's token
        (:data:`_LAYOUT_TOKENS`). Once per program and tuple of columns, and made once per
        distinct list of entries (:data:`_LAYOUTS`, read-only arrays shared by the programs)."""
        found = self._layouts.get(indices)
        if found is None:
            columns = [self._columns[i] if i < 4 else self._calls for i in indices]
            entries = tuple(chain.from_iterable(columns))
            key = (len(columns), _ids(entries))
            shared = _LAYOUTS.get(key)
            if shared is None:
                if len(_LAYOUTS) > 5_000:        # the programs of a model or two: keep it bounded
                    _LAYOUTS.clear()
                # the entries themselves are held with the layout: while it is stored, no other object
                # can take one of their ids
                shared = _LAYOUTS[key] = (entries, _layout(entries, len(columns)))
            found = self._layouts[indices] = shared[1]
        return found

    def rates_for(self, gpus: list[GPU], index) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per-point rates when points run on different GPUs: ``index`` picks a GPU per point;
        returns peaks, links and per-call latencies of shape (steps, points) and HBM bandwidth of
        shape (points,)."""
        index = np.asarray(index)
        key = tuple(g.key for g in gpus)
        stacked = self._stacked_rates.get(key)
        if stacked is None:       # (steps, GPUs) per rate, once per GPU list (the grid asks per bucket)
            per_gpu = [self.rates(g) for g in gpus]
            stacked = self._stacked_rates[key] = (np.stack([r[0] for r in per_gpu], axis=1),
                                                  np.stack([r[1] for r in per_gpu], axis=1),
                                                  np.array([r[2] for r in per_gpu]),
                                                  np.stack([r[3] for r in per_gpu], axis=1))
        peaks, links, hbm, alphas = stacked
        if index.ndim == 1 and len(index) and (index == index[0]).all():
            # one GPU for every point (the usual call): its per-step rates as one (steps, 1) column
            # that broadcasts over the points, not copied per point (each point divides by the same
            # numbers); HBM bandwidth stays per point (it gives the sums their shape)
            one = index[:1]
            return peaks[:, one], links[:, one], hbm[index], alphas[:, one]
        return peaks[:, index], links[:, index], hbm[index], alphas[:, index]

    def _points(self, args, at, hbm, peaks) -> tuple[list, tuple, np.ndarray | None]:
        """(arguments, shape of the sums, ``at`` or None) of :meth:`totals` and :meth:`step_time`.

        ``at`` (optional) picks, per point of the sums, a point of the 1-d ``args`` (the rates are
        already per picked point): the stacked columns are evaluated at ``args``' own points and
        gathered (:meth:`_stacked`), a pure copy, so the floats are those of evaluating at the
        picked arguments; the step-by-step path gets the picked arguments themselves."""
        if at is None:
            return args, np.broadcast_shapes(*(a.shape for a in args), np.shape(hbm), np.shape(peaks)[1:]), None
        at = np.asarray(at, dtype=np.intp)
        own = np.broadcast_shapes(*(a.shape for a in args))
        shape = np.broadcast_shapes(at.shape, np.shape(hbm), np.shape(peaks)[1:])
        if len(own) == 1 and at.ndim == 1 and self._stacks(shape):
            return args, shape, at
        return [np.broadcast_to(a, own)[at] for a in args], shape, None

    def _stacked(self, indices, args, shape, at) -> list[np.ndarray]:
        """The stacked columns ``indices`` at the sums' points (see :meth:`_points`), each a
        C-ordered block of one new array of this call's own (:meth:`columns`)."""
        if at is None:
            return list(self.columns(indices, args, shape))
        own = np.broadcast_shapes(*(a.shape for a in args))
        return list(self.columns(indices, args, own, None, at))

    def step_time(self, rates, batch, seq, ctx, kv_bytes, at=None) -> np.ndarray:
        """The ``t_sol`` of :meth:`totals` alone (the sizing search's hot path): the same terms,
        summed in the same order, so the same floats, without the other sums and the bound split."""
        peaks, links, hbm, alphas = self.rates(rates) if isinstance(rates, GPU) else rates
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        args, shape, at = self._points(args, at, hbm, peaks)
        if self._stacks(shape):              # as totals() does: stacked on small grids, same floats
            f, b, c, calls = self._stacked((0, 1, 2, 4), args, shape, at)
            per_step = _per_step(shape)
            # the terms of totals(), each written over the column it is made from (the stacked
            # columns are this call's own arrays): no new array per term, the same floats
            t_compute = np.divide(f, per_step(np.asarray(peaks)), out=f)
            t_comm = np.divide(c, per_step(np.asarray(links)), out=c)
            t_comm += np.multiply(calls, per_step(np.asarray(alphas)), out=calls)
            sol = np.maximum(t_compute, np.divide(b, hbm, out=b), out=t_compute)
            return _add_steps(np.maximum(sol, t_comm, out=sol))
        total = np.zeros(shape)
        cols = self._columns
        for i in range(len(self.program.steps)):
            f, b, c = (fn(*args) if callable(fn) else fn for fn in (cols[0][i], cols[1][i], cols[2][i]))
            total += np.maximum(np.maximum(f / peaks[i], b / hbm), c / links[i] + self.latency(i, args, alphas))
        return total

    def totals(self, rates, batch, seq, ctx, kv_bytes, at=None) -> dict[str, np.ndarray]:
        """Phase sums over the broadcast shape: flops, bytes, weight_bytes, comm_bytes, t_compute,
        t_memory, t_comm, t_sol, and t_sol split by the term bounding each step (``by_bound``, shape
        (3, ...)); the phase's lower bound ``t_bound`` and the ``comm`` steps' share of t_sol
        ``t_comm_stream`` (module doc). ``rates`` is a GPU or the (peaks, links, hbm, alphas) of :meth:`rates_for`.

        Two paths, the same floats: a small grid (the build's buckets hold tens of points, the
        sizing search and ``archledger deploy`` single points) stacks every step into one
        (steps, ...) array per term and sums over the steps axis (:func:`_add_steps`), a few numpy
        calls per program instead of a dozen per step; a large one (the bench's 204,800 points)
        goes step by step, each step at the shape it depends on (stacked blocks of the full shape
        measured 27x slower there). Both add the steps in program order, so they give identical
        sums (tests/test_cost_paths.py). ``at``: the points are ``args[at]`` (:meth:`_points`)."""
        peaks, links, hbm, alphas = self.rates(rates) if isinstance(rates, GPU) else rates
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        args, shape, at = self._points(args, at, hbm, peaks)
        if self._stacks(shape):
            return self._totals_stacked(peaks, links, hbm, alphas, args, shape, at)
        return self._totals_by_step(peaks, links, hbm, alphas, args, shape)

    def _stacks(self, shape) -> bool:
        """Whether sums over ``shape`` stack the steps (see :meth:`totals`)."""
        size, n_steps = math.prod(shape), len(self.program.steps)
        return bool(n_steps) and 1 <= size and n_steps * size <= STACKED_ELEMENTS

    def _totals_stacked(self, peaks, links, hbm, alphas, args, shape, at=None) -> dict[str, np.ndarray]:
        """:meth:`totals` with every step stacked on axis 0 (small grids and single points)."""
        f, b, c, w, calls = self._stacked((0, 1, 2, 3, 4), args, shape, at)
        per_step = _per_step(shape)
        add = _add_steps
        sums = {"flops": add(f), "bytes": add(b), "weight_bytes": add(w), "comm_bytes": add(c)}
        # the times written over the columns they are made from, once summed (the stacked columns
        # are this call's own arrays): no new array per term, the same floats
        tc = np.divide(f, per_step(np.asarray(peaks)), out=f)
        tm = np.divide(b, hbm, out=b)
        tl = np.divide(c, per_step(np.asarray(links)), out=c)
        tl += np.multiply(calls, per_step(np.asarray(alphas)), out=calls)
        sol = np.maximum(np.maximum(tc, tm, out=w), tl, out=w)
        compute_bound = (tc >= tm) & (tc >= tl)
        memory_bound = ~compute_bound & (tm >= tl)
        sums.update({"t_compute": add(tc), "t_memory": add(tm), "t_comm": add(tl), "t_sol": add(sol)})
        sums.update(self._bound_terms(lambda rows, x: add(x[rows]), tl, sol, sums, shape))
        part = calls                          # each bound's share: sol where it bounds, else 0
        shares = []
        for mask in (compute_bound, memory_bound, ~compute_bound & ~memory_bound):
            part.fill(0.0)
            np.copyto(part, sol, where=mask)
            shares.append(add(part))
        sums["by_bound"] = np.stack(shares)
        return sums

    def _totals_by_step(self, peaks, links, hbm, alphas, args, shape) -> dict[str, np.ndarray]:
        """:meth:`totals` one step at a time, each step's values at the shape they depend on (a
        weight read is one float, a KV read a context vector): large grids."""
        sums = {k: np.zeros(shape) for k in ("flops", "bytes", "weight_bytes", "comm_bytes", "t_compute",
                                              "t_memory", "t_comm", "t_sol")}
        by_bound = np.zeros((3,) + shape)
        cols = self._columns
        links_at, per_link, comm_stream = self._kinds[1][1], {}, 0.0
        for i in range(len(self.program.steps)):
            f, b, c, w = (fn(*args) if callable(fn) else fn for fn in (cols[0][i], cols[1][i], cols[2][i], cols[3][i]))
            tc, tm, tl = f / peaks[i], b / hbm, c / links[i] + self.latency(i, args, alphas)
            sol = np.maximum(np.maximum(tc, tm), tl)
            for key, value in (("flops", f), ("bytes", b), ("weight_bytes", w), ("comm_bytes", c),
                               ("t_compute", tc), ("t_memory", tm), ("t_comm", tl), ("t_sol", sol)):
                sums[key] += value
            compute_bound = (tc >= tm) & (tc >= tl)
            memory_bound = ~compute_bound & (tm >= tl)
            by_bound[0] += np.where(compute_bound, sol, 0.0)
            by_bound[1] += np.where(memory_bound, sol, 0.0)
            by_bound[2] += np.where(~compute_bound & ~memory_bound, sol, 0.0)
            link = links_at[i]
            per_link[link] = per_link.get(link, 0.0) + tl
            if self._comm_steps[i]:
                comm_stream = comm_stream + sol
        sums["by_bound"] = by_bound
        sums["t_bound"] = np.maximum(np.maximum(sums["t_compute"], sums["t_memory"]),
                                     np.maximum.reduce([np.broadcast_to(v, shape) for v in per_link.values()])
                                     if per_link else 0.0)
        sums["t_comm_stream"] = np.broadcast_to(comm_stream, shape).copy()
        return sums

    def _bound_terms(self, add_rows, tl, sol, sums, shape) -> dict[str, np.ndarray]:
        """``t_bound`` and ``t_comm_stream`` (module doc) from the stacked (steps, ...) link times
        ``tl`` and step times ``sol``: ``add_rows(rows, x)`` sums the rows ``rows`` of ``x`` in
        program order."""
        if self._bound_rows is None:       # once per program: the steps of each link class, the comm steps
            # (steps on no link, kernels, send nothing: their t_comm is 0)
            links, l_at = self._kinds[1]
            self._bound_rows = ([np.flatnonzero(l_at == i) for i, link in enumerate(links) if link],
                                np.flatnonzero(self._comm_steps))
        per_link, comm = self._bound_rows
        busiest = np.maximum(sums["t_compute"], sums["t_memory"])
        for rows in per_link:               # each link class serves its collectives one at a time
            busiest = np.maximum(busiest, add_rows(rows, tl))
        stream = add_rows(comm, sol) if len(comm) else np.zeros(shape)
        return {"t_bound": np.broadcast_to(busiest, shape).copy(), "t_comm_stream": np.broadcast_to(stream, shape).copy()}

    def evaluate(self, gpu: GPU, batch, seq, ctx, kv_bytes, weights: bool = False) -> dict[str, np.ndarray]:
        """Arrays of shape (steps, *broadcast shape): flops, bytes, comm_bytes, t_compute, t_memory,
        t_comm, t_sol (and weight_bytes when asked)."""
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        shape = np.broadcast_shapes(*(a.shape for a in args))
        # the columns depend on the point only, not the GPU: a structure shared by several GPU
        # types (the build's per-op tables) evaluates them once per point set
        key = tuple((a.shape, a.tobytes()) for a in args)
        columns = self._evaluated.get(key)
        if columns is None:
            columns = self._evaluated[key] = {}
        missing = tuple(i for i in ((0, 1, 2, 4, 3) if weights else (0, 1, 2, 4)) if i not in columns)
        if missing:          # in one table (one layout, one gather): the same floats as column by column
            for i, column in zip(missing, self.columns(missing, args, shape)):
                column.flags.writeable = False              # shared: no caller may change it
                columns[i] = column
        flops, traffic, comm = columns[0], columns[1], columns[2]
        peaks, links, hbm, alphas = self.rates(gpu)
        expand = (slice(None),) + (None,) * len(shape)
        latency = columns[4] * alphas[expand]       # calls x per-call latency
        t_compute, t_memory, t_comm = flops / peaks[expand], traffic / hbm, comm / links[expand] + latency
        out = {"flops": flops, "bytes": traffic, "comm_bytes": comm, "t_compute": t_compute,
               "t_memory": t_memory, "t_comm": t_comm,
               "t_sol": np.maximum(np.maximum(t_compute, t_memory), t_comm)}
        if weights:
            out["weight_bytes"] = columns[3]
        return out


_REPEATS: dict = {}     # a step's repeat (a sympy number) -> its float


def _repeat(expr) -> float:
    """``float(expr)`` of a step's repeat, once per distinct repeat (a handful per model; the
    conversion goes through sympy's evalf, and every program of every structure asks)."""
    value = _REPEATS.get(expr)
    if value is None:
        if len(_REPEATS) > 100_000:
            _REPEATS.clear()
        value = _REPEATS[expr] = float(expr)
    return value


def _value(values, f, args):
    """Step function ``f``'s value at the points ``args``: from the point set's ``values``
    (:func:`_values`), else computed and held there (once per function and point set)."""
    value = values.get(f)
    if value is None:
        value = values.hold(f, _stored(f(*args), args))
    return value


def _filled(constants: np.ndarray, functions: list, values, args, shape: tuple) -> np.ndarray:
    """A layout's table at the points ``args``: the constants' rows (weight reads, fixed
    collectives, zeros) in one assignment, then each function's row (:func:`_value`)."""
    table = np.empty((len(constants) + len(functions),) + shape)
    table[:len(constants)] = constants.reshape((-1,) + (1,) * len(shape))
    for j, f in enumerate(functions, len(constants)):
        table[j] = _value(values, f, args)
    return table


def _ids(entries) -> bytes:
    """The ids of ``entries``, in order, as bytes (a key naming those objects while they live)."""
    entries = tuple(entries)
    return np.fromiter(map(id, entries), dtype=np.uintp, count=len(entries)).tobytes()


def _add_steps(x: np.ndarray) -> np.ndarray:
    """The sum over axis 0 (the steps) of a C-ordered (steps, ...) array, row after row in program
    order (the step-by-step loop's order, so the same floats). Over axis 0 numpy adds row after row
    when a row holds two numbers or more; a single point would make the steps the inner loop, summed
    pairwise, so there the running sum (accumulate, sequential by definition) is taken."""
    if x[0].size >= 2:
        return np.add.reduce(x, axis=0)
    return np.add.accumulate(x, axis=0)[-1]


def _per_step(shape):
    """Per-step rates are (steps,) or (steps, points): a function aligning them with (steps, *shape)
    on the right."""
    return lambda r: np.reshape(r, (r.shape[0],) + (1,) * (len(shape) + 1 - r.ndim) + r.shape[1:])


def _distinct(values) -> tuple[list, np.ndarray]:
    """The distinct values in first-seen order, and each value's position among them."""
    found: dict = {}
    at = [found.setdefault(v, len(found)) for v in values]
    return list(found), np.array(at, dtype=np.intp)


def link_bandwidth(gpu: GPU, link: str) -> float:
    if link == "scale_up":
        return gpu.scale_up_bytes_per_s
    if link == "scale_out":
        return gpu.scale_out_bytes_per_s
    return float("inf")


def compile_program(program: Program) -> CompiledProgram:
    return CompiledProgram(program)


def intensity(flops, traffic):
    """Arithmetic intensity in FLOP per HBM byte (inf where nothing is read); arrays or numbers."""
    flops, traffic = np.asarray(flops, dtype=float), np.asarray(traffic, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(traffic > 0, flops / np.where(traffic > 0, traffic, 1.0), np.inf)


def scenario_point(phase: str, input_len: int, output_len: int, decode_seq: int = 1) -> Mapping[str, int]:
    """The (seq, ctx) a phase runs at: prefill the prompt; decode one token at the last position
    (``decode_seq`` with speculative decoding: the last token and the drafts it verifies)."""
    if phase == "prefill":
        return {"seq": input_len, "ctx": input_len}
    return {"seq": decode_seq, "ctx": input_len + output_len}
