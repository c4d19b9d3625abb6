"""A restricted expression language for spec YAML, parsed into sympy without ever evaluating Python.

Layer: engine.language. Spec text is untrusted (it arrives in pull requests) and ``sympy.sympify`` on a
string runs Python ``eval``. Instead the text is parsed by ``ast.parse`` (parsing only executes
nothing) and the tree is walked against a whitelist:

* integers, decimals (kept exact as rationals), ``True``/``False``, quoted strings (comparisons);
* names: dims in scope, component options, ``layer`` in schedules;
* ``config.<field>`` (also nested ``config.a.b`` and ``config.list[i]``): a value of the model's
  config snapshot, looked up through a resolver that records which fields were read;
* ``+ - * / // % **``, unary ``-``/``not``, comparisons (incl. ``in``), ``and``/``or``,
  ``a if cond else b``;
* calls to ``ceil floor min max len count`` only (``count(list, value)`` counts occurrences).

Anything else (attributes other than ``config``, calls, lambdas, comprehensions, dunder names)
is rejected with a message that names the construct and what to write instead.

Evaluation is bounded, so no text can hang or exhaust memory: every number an expression reads
or computes (literals, names, config fields, each intermediate result, the numbers inside a
symbolic result) is finite and within ±:data:`MAX_MAGNITUDE` with a denominator of at most that
much; a power's size is estimated from ``exponent * log2|base|`` *before* it is computed;
exponents are integers 0..64 (also inside symbolic results, where sympy folds ``(x**8)**8``
into ``x**64``); dividing by a numeric zero is an error, not sympy's ``zoo``/``nan``. The text
must be plain ASCII: ``ast.parse`` NFKC-normalises identifiers, so a full-width ``ｈidden`` or a
math-bold name would silently read as the ASCII dim.
"""
from __future__ import annotations

import ast
import math
from functools import lru_cache
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

MAX_LENGTH = 400
#: Bound on every number's magnitude (and denominator): defined beside the YAML reader, which
#: checks every number read (and imports no sympy), the first of its users
from engine.language.yamlio import MAX_MAGNITUDE  # noqa: E402
_MAX_BITS = 128
#: Largest exponent of a power, numeric or symbolic.
MAX_EXPONENT = 64
#: Deepest nesting of sub-expressions. The walk recurses about two frames per level, so 400
#: characters of ``-`` or ``not`` could otherwise end in RecursionError inside a deep caller.
MAX_NESTING = 200
_HUGE = "write real sizes and counts (no dim, count or size is near 2**128)"
_ALLOWED_CALLS = ("ceil", "floor", "min", "max", "len", "count")
_GRAMMAR = ("only arithmetic, comparisons, names, config.<field> and "
            + "/".join(_ALLOWED_CALLS) + " are allowed")


class ExprError(ValueError):
    """The text is not a valid restricted expression, or names something not in scope."""

    def __init__(self, message: str, hint: str = ""):
        self.hint = hint
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Scope:
    """What names mean while evaluating one expression.

    ``names`` maps a bare name to a sympy expression or a plain Python value (bool/str/number).
    ``config`` resolves a dotted config path (tuple of keys) to a Python value, or raises KeyError.
    """

    names: Mapping[str, Any]
    config: Callable[[tuple], Any] | None = None
    unknown: str = ""  # hint for an unknown name (default: bind it under dims:)


def parse(text: Any) -> ast.expression:
    """Parse (not evaluate) an expression; raise :class:`ExprError` on syntax errors."""
    if not isinstance(text, str):
        got = ("nothing" if text is None else "a list" if isinstance(text, list)
               else "a mapping" if isinstance(text, dict) else type(text).__name__)
        raise ExprError(f"expected a number or an expression, got {got}",
                        "write e.g. 4096 or 'config.hidden_size // config.num_attention_heads'")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters",
                        "split it into named dims")
    return _parse_text(text)


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> ast.expression:
    """:func:`parse` of a string of at most MAX_LENGTH characters. Cached: the walks and the guards
    read the same few hundred expressions again per layer; a tree is only read, never changed.
    (A text that fails raises each time: exceptions are not cached.)"""
    if not text.isascii():
        # Never echo the text: it may hold a lone surrogate, which cannot be printed.
        at, char = next((i, c) for i, c in enumerate(text) if not c.isascii())
        raise ExprError(f"character U+{ord(char):04X} at position {at + 1} of the expression is not "
                        "ASCII (Python would read look-alike letters as ASCII names)",
                        "write plain ASCII names")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:   # ValueError: e.g. a NUL byte in the text
        raise ExprError(f"cannot parse expression {text!r} ({getattr(exc, 'msg', exc)})",
                        "write arithmetic over dim names and config.<field>, e.g. "
                        "'config.hidden_size // config.num_attention_heads'") from None
    if _nesting(tree.body) > MAX_NESTING:
        raise ExprError(f"expression nested more than {MAX_NESTING} levels deep", "split it into named dims")
    return tree


def _nesting(root: ast.AST) -> int:
    """Depth of sub-expressions, counted without recursion (the point is to avoid deep stacks)."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + isinstance(child, ast.expr)) for child in ast.iter_child_nodes(node))
    return deepest


def evaluate(text: Any, scope: Scope) -> Any:
    """Evaluate a YAML value in ``scope``: numbers/bools pass through, strings are parsed."""
    if isinstance(text, (bool, int, float)):
        return _to_sympy(text, "the number")
    tree = parse(text)
    return _Walker(scope, text).visit(tree.body)


def names_in(text: Any) -> set[str]:
    """Bare names an expression refers to (config paths excluded)."""
    if not isinstance(text, str):
        return set()
    tree = parse(text)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id != "config":
            found.add(node.id)
    return found


def _to_sympy(value: Any, where: str) -> Any:
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, int):
        if abs(value) > MAX_MAGNITUDE:   # bit_length, not str(): a huge int cannot be printed
            raise ExprError(f"{where} is about 2**{abs(value).bit_length() - 1}, beyond ±2**128", _HUGE)
        return sympy.Integer(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExprError(f"{where} is {value!r}, not a finite number", "write a finite number")
        if abs(value) > MAX_MAGNITUDE:
            raise ExprError(f"{where} is {value!r}, beyond ±2**128", _HUGE)
        return _bounded(sympy.Rational(Fraction(str(value))), where)   # e.g. 1e-300: too fine
    if isinstance(value, sympy.Basic):
        return _bounded(value, where)
    if isinstance(value, (list, tuple)):
        return list(value)
    if value is None:
        raise ExprError(f"{where} is null", "bind it to a value or remove the reference")
    raise ExprError(f"{where} has unsupported type {type(value).__name__}",
                    "read a number, string or list (config.<field>.<key> inside a mapping)")


def _bounded(value: Any, where: str) -> Any:
    """``value`` unchanged if every number in it is finite and within the bounds, else ExprError.

    Applied to every intermediate result, so the operands of the next operation are bounded too:
    ``+ - * // %`` of bounded numbers cannot blow up, only ``**`` can, and it is estimated first.
    """
    if isinstance(value, sympy.Integer):    # the common case, kept cheap
        if abs(value.p) <= MAX_MAGNITUDE:
            return value
    elif isinstance(value, sympy.Symbol) or not isinstance(value, sympy.Basic):
        return value
    for node in sympy.preorder_traversal(value):
        if node in (sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
            raise ExprError(f"{where} is not a finite number",
                            "write a finite number (no nan, inf or division by zero)")
        if isinstance(node, sympy.Rational) and (abs(node.p) > MAX_MAGNITUDE or node.q > MAX_MAGNITUDE):
            size = "beyond ±2**128" if abs(node.p) > MAX_MAGNITUDE else "finer than 2**-128"
            raise ExprError(f"{where} has a number {size}", _HUGE)
        if (isinstance(node, sympy.Pow) and node.exp.is_Integer
                and abs(int(node.exp)) > MAX_EXPONENT):
            raise ExprError(f"{where} has a power with exponent {node.exp} (beyond {MAX_EXPONENT})",
                            f"keep exponents within 0..{MAX_EXPONENT}")
    return value


def _pow_bits(base: Any, exponent: int) -> int:
    """An upper bound on the bits of the numbers in ``base ** exponent``, without computing it.

    sympy distributes an integer power over a product (``(c*x)**k`` holds ``c**k``), so every
    number in a symbolic base counts, numerator and denominator alike.
    """
    numbers = [base] if isinstance(base, sympy.Rational) else \
        [n for n in sympy.preorder_traversal(base) if isinstance(n, sympy.Rational)]
    return max((exponent * max(abs(n.p).bit_length(), n.q.bit_length()) for n in numbers), default=0)


class _Walker:
    def __init__(self, scope: Scope, text: str):
        self.scope = scope
        self.text = text

    def fail(self, what: str, hint: str = "") -> ExprError:
        return ExprError(f"{what} in expression {self.text!r}", hint or _GRAMMAR)

    def visit(self, node: ast.AST) -> Any:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise self.fail(f"'{type(node).__name__}' is not allowed")
        value = method(node)
        try:   # every intermediate result, so the next operation's operands are bounded too
            return _bounded(value, "an intermediate result")
        except ExprError as exc:
            raise self.fail(str(exc), exc.hint) from None

    # -- leaves -------------------------------------------------------------------------------
    def visit_Constant(self, node: ast.Constant) -> Any:
        value = node.value
        if isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return sympy.Integer(value)
        if isinstance(value, float):
            if not math.isfinite(value):   # e.g. 1e999
                raise self.fail(f"number {value!r} is not finite", "write a finite number")
            return sympy.Rational(Fraction(repr(value)))
        raise self.fail(f"constant {value!r} is not allowed")

    def visit_Name(self, node: ast.Name) -> Any:
        name = node.id
        if name.startswith("_"):
            raise self.fail(f"name {name!r} is not allowed", "names cannot start with '_'")
        if name == "config":
            raise self.fail("bare 'config'", "write config.<field>")
        if name in ("True", "False"):
            return name == "True"
        if name not in self.scope.names:
            known = ", ".join(sorted(k for k in self.scope.names if not k.startswith("_")))
            if self.scope.unknown:
                hint = self.scope.unknown + (f" (in scope: {known})" if known else "")
            else:
                hint = f"bind it under dims: or use one of: {known}" if known else "bind it under dims:"
            raise self.fail(f"unknown name {name!r}", hint)
        return _to_sympy(self.scope.names[name], f"name {name!r}")

    def _config_path(self, node: ast.AST) -> tuple | None:
        """('a', 'b', 0) for config.a.b[0]; None when the chain does not start at config."""
        if isinstance(node, ast.Name):
            return () if node.id == "config" else None
        if isinstance(node, ast.Attribute):
            base = self._config_path(node.value)
            if base is None:
                return None
            if node.attr.startswith("_"):
                raise self.fail(f"attribute {node.attr!r} is not allowed",
                                "read a config field by name: config.<field>")
            return base + (node.attr,)
        if isinstance(node, ast.Subscript):
            base = self._config_path(node.value)
            if base is None:
                return None
            index = node.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, int) and not isinstance(index.value, bool):
                return base + (index.value,)
            value = self.visit(index)   # e.g. config.indexer_types[layer] in a schedule condition
            if not (isinstance(value, sympy.Integer) and value >= 0):
                raise self.fail("config subscripts must be non-negative integers",
                                "write config.<list>[0] or config.<list>[layer]")
            return base + (int(value),)
        return None

    def _config(self, node: ast.AST) -> Any:
        path = self._config_path(node)
        if path is None or not path:
            raise self.fail("attribute access is only allowed on config",
                            "write config.<field> or a dim name")
        if self.scope.config is None:
            raise self.fail("config is not available here",
                            "config fields can only be read in a model spec's dims and schedules")
        dotted = "config." + ".".join(str(p) for p in path)
        try:
            value = self.scope.config(path)
        except KeyError:
            raise self.fail(f"config field {dotted} is missing",
                            "add it to the model's snapshot (or read another field)") from None
        return _to_sympy(value, dotted)

    visit_Attribute = _config
    visit_Subscript = _config

    # -- operators ----------------------------------------------------------------------------
    def _number(self, value: Any, op: str) -> Any:
        if isinstance(value, (bool, str, list)):
            raise self.fail(f"operator {op} applied to a non-number ({value!r})")
        return value

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        kind = type(node.op).__name__
        left = self._number(self.visit(node.left), kind)
        right = self._number(self.visit(node.right), kind)
        if kind == "Add":
            return left + right
        if kind == "Sub":
            return left - right
        if kind == "Mult":
            return left * right
        if kind in ("Div", "FloorDiv", "Mod") and getattr(right, "is_zero", False):
            symbol = {"Div": "/", "FloorDiv": "//", "Mod": "%"}[kind]
            raise self.fail(f"division by zero ({symbol} 0)", "divide by a non-zero dim or number")
        if kind == "Div":
            return left / right
        if kind == "FloorDiv":
            return sympy.floor(left / right)
        if kind == "Mod":
            return sympy.Mod(left, right)
        if kind == "Pow":
            if not (isinstance(right, sympy.Integer) and 0 <= int(right) <= MAX_EXPONENT):
                raise self.fail(f"exponents must be integer literals 0..{MAX_EXPONENT}")
            if _pow_bits(left, int(right)) > _MAX_BITS + int(right):   # estimate before computing
                raise self.fail(f"the power's result would exceed 2**{_MAX_BITS} in size or precision",
                                _HUGE)
            return left ** right
        raise self.fail(f"operator {kind} is not allowed")

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return not self._truth(value)
        if isinstance(node.op, ast.USub):
            return -self._number(value, "-")
        if isinstance(node.op, ast.UAdd):
            return self._number(value, "+")
        raise self.fail(f"unary {type(node.op).__name__} is not allowed")

    def _truth(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, sympy.Basic):
            if value.is_number:
                return bool(value != 0)
            raise self.fail("a condition depends on an unbound symbol",
                            "conditions may only use config fields, options and layer")
        return bool(value)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self._truth(self.visit(v)) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)

    def visit_Compare(self, node: ast.Compare) -> bool:
        left = self.visit(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.visit(comparator)
            kind = type(op).__name__
            if kind in ("In", "NotIn"):
                if not isinstance(right, list):
                    raise self.fail("'in' needs a list on the right (a config list field)")
                found = any(_same(left, item) for item in right)
                ok = found if kind == "In" else not found
            elif kind in ("Eq", "NotEq"):
                ok = _same(left, right) == (kind == "Eq")
            else:
                a, b = self._number(left, kind), self._number(right, kind)
                result = {"Lt": a < b, "LtE": a <= b, "Gt": a > b, "GtE": a >= b}.get(kind)
                if result is None:
                    raise self.fail(f"comparison {kind} is not allowed")
                if not isinstance(result, (bool, sympy.logic.boolalg.BooleanAtom)):
                    raise self.fail("a comparison depends on an unbound symbol",
                                    "conditions may only use config fields, options and layer")
                ok = bool(result)
            if not ok:
                return False
            left = right
        return True

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self._truth(self.visit(node.test)) else self.visit(node.orelse)

    def visit_Call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name) or node.func.id not in _ALLOWED_CALLS:
            raise self.fail("function call is not allowed",
                            "only " + ", ".join(_ALLOWED_CALLS) + " can be called")
        if node.keywords:
            raise self.fail("keyword arguments are not allowed")
        args = [self.visit(a) for a in node.args]
        name = node.func.id
        if name in ("ceil", "floor"):
            if len(args) != 1:
                raise self.fail(f"{name}() takes one argument")
            value = self._number(args[0], name)
            return sympy.ceiling(value) if name == "ceil" else sympy.floor(value)
        if name in ("min", "max"):
            if len(args) < 2:
                raise self.fail(f"{name}() takes at least two arguments")
            numbers = [self._number(a, name) for a in args]
            return sympy.Min(*numbers) if name == "min" else sympy.Max(*numbers)
        if name == "len":
            if len(args) != 1 or not isinstance(args[0], list):
                raise self.fail("len() takes one list (a config list field)")
            return sympy.Integer(len(args[0]))
        if len(args) != 2 or not isinstance(args[0], list):
            raise self.fail("count() takes a list and a value: count(config.layer_types, 'full_attention')")
        return sympy.Integer(sum(1 for item in args[0] if _same(item, args[1])))


def _same(a: Any, b: Any) -> bool:
    """Equality for condition values: strings and bools literally, numbers exactly."""
    if isinstance(a, (str, bool)) or isinstance(b, (str, bool)):
        return a == b
    return bool(_to_sympy(a, "value") == _to_sympy(b, "value"))
