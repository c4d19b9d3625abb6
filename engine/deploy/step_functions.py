"""Step expressions compiled to numpy functions of the scenario point (batch, seq, ctx, kv_bytes).

Layer: engine.deploy. :func:`_compiled` turns one expression into a function of :data:`ARGS` (a
float when constant), :func:`_step_functions` a step's four totals and its calls. Most step
expressions are sums of monomials, compiled by :func:`_polynomial` without sympy's printer; the
others go through ``lambdify`` with a shared memoizing printer (:func:`_lambdify`). Invariant:
either way the function computes operation for operation what ``sympy.lambdify(ARGS, expr,
modules=_MODULES)``'s source computes, so it returns the very same floats (tests/test_cost_compile.py,
tests/test_compile_speed2.py); one function per distinct expression per process.
"""
from __future__ import annotations

import sympy
from sympy.printing.numpy import NumPyPrinter

from engine.language import symbols
from engine.language.memo_printer import MemoPrinting
from engine.language.memo import remembered_for
from engine.deploy.device_program import Step
from engine.deploy.step_totals import step_totals


#: Symbol for the bytes of one cache element: programs keep it free so one compiled program
#: serves every KV dtype (bound at evaluation).
KV_BYTES = symbols.dim("kv_bytes")
ARGS = tuple(symbols.dim(n) for n in symbols.SCENARIO_DIMS) + (KV_BYTES,)
_MODULES = list(symbols.NUMPY_MODULES)


_FUNCTIONS: dict[sympy.Expr, object] = {}     # expression -> its numpy function or float


def _compiled(expr: sympy.Expr):
    """A numpy function of ARGS for one expression (a float when constant), shared by every program:
    structures that differ by a fusion or a GPU class repeat most of their step expressions."""
    fn = _FUNCTIONS.get(expr)
    if fn is None:
        # constants are stored as floats too: converting a sympy number goes through mpmath, and
        # the same few thousand constants recur in every structure of a model
        fn = _FUNCTIONS[expr] = float(expr) if expr.is_number else numpy_function(expr)
    return fn


def numpy_function(expr: sympy.Expr):
    """``sympy.lambdify(ARGS, expr, modules=_MODULES)``'s function, or one computing operation for
    operation what its source does (:func:`_polynomial`, else :func:`_lambdify`): the same floats
    at any point, for any expression of ARGS (constants too: a function, not a float)."""
    return _polynomial(expr) or _lambdify(expr)


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
    def make() -> tuple:
        totals = step_totals(step)
        return (*(_compiled(t) for t in totals), _compiled(step.repeat) if step.collective else 0.0)
    return remembered_for(_STEP_FUNCTIONS, step, make, 200_000)      # as _BY_STEP: the steps of a model or two


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


def _plain(expr) -> bool:
    """Whether every node of ``expr`` is of a :data:`_PLAIN` type and its symbols are ARGS: what
    :func:`_lambdify` prints with the shared printer (and compiles without lambdify's walk for
    implemented functions: no such node carries one)."""
    return all(type(node) in _PLAIN and (type(node) is not sympy.Symbol or node in ARGS)
               for node in sympy.preorder_traversal(expr))


def _lambdify(expr: sympy.Expr):
    """``sympy.lambdify(ARGS, expr, modules=_MODULES)``, printed by one shared :class:`_MemoPrinter`
    when every node of ``expr`` is of a :data:`_PLAIN` type and its symbols are ARGS. The printer
    has the settings lambdify gives its own (user functions from the modules' dicts), so the
    function's source is the one lambdify writes without it, and the floats are the same
    (tests/test_cost_compile.py compares the sources). Printing was most of lambdify's time."""
    printer = None
    if _plain(expr):
        if not _PRINTER:
            _PRINTER.append(_MemoPrinter({"fully_qualified_modules": False, "inline": True,
                                          "allow_unknown_functions": True,
                                          "user_functions": {k: k for m in _MODULES if isinstance(m, dict)
                                                             for k in m}}))
        printer = _PRINTER[0]
    # no docstring: printing the expression into it is a quarter of lambdify's time. A plain
    # expression holds no implemented function (none of the _PLAIN types carries an ``_imp_``), so
    # lambdify's walk collecting their implementations (``use_imps``, about a twentieth of its time) finds
    # nothing: the namespace, and so the function, is the same without it
    return symbols.checked_lambdify(_ARG_LIST, expr, modules=_MODULES, printer=printer, docstring_limit=0,
                                    use_imps=printer is None)


#: ARGS as lambdify's one argument: their parameter list as text. lambdify writes an argument that is
#: not a symbol as its ``str`` (sympy's _EvaluatorPrinter), so the source is the one ARGS give,
#: ``def _lambdifygenerated(batch, seq, ctx, kv_bytes):`` (tests/test_cost_compile.py compares the
#: sources); given the four symbols it first sorts them with sympy's ``ordered`` to find any it must
#: rename (none of ours is), about a third of the time of a lambdify call.
_ARG_LIST = (", ".join(str(a) for a in ARGS),)
