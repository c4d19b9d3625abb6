"""Declarative schemas of the corpus's file kinds, checked right after a file is parsed.

Layer: engine.language (below yamlio and corpus; imports only errors and expr). Every file a pull request can
touch is read by :func:`engine.language.yamlio.load_yaml`, which takes one of the schemas below
(``schema=``) and checks it before any loader looks at the data. So a value of the wrong kind (a
list where a mapping belongs, a mapping where a name belongs, a number out of its physical range)
is one :class:`SpecError` naming file:line, the field, what was found and what to write, instead
of a ``TypeError`` wherever the value is first used.

A schema is a tree of small nodes: :class:`Mapping` (named fields, closed: an unknown field is
refused), :class:`MapOf` (any names, one value schema), :class:`ListOf`, :class:`Str`,
:class:`Int`, :class:`Number` (with a plausible range), :class:`Bool`, :class:`Expr` (a number or
an expression text), :class:`OneOf` (alternatives told apart by kind), :class:`Null`,
:class:`Lazy` (a recursive reference) and :class:`Anything`. Each node carries a ``doc`` saying
what the value is or what to write; errors quote it as the hint (a node without one: the nearest
enclosing node's).

Nodes compare and hash by identity (``eq=False``): a schema is a constant, passed around as one.

Invariants: checking never changes the data and never evaluates an expression (an :class:`Expr`'s
names are read with :func:`engine.language.expr.names_in`, a parse only); a range is closed
``[lo, hi]`` unless ``above`` (``lo < value``); ``bool`` is never a number (YAML ``true`` would
otherwise be 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine.language.errors import SpecError, Where


def kind_of(value: Any) -> str:
    """What a value is, for an error: 'a mapping', 'a list', "the string 'x'", 'nothing', '5'."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    return f"the string {_quoted(value)}" if isinstance(value, str) else _quoted(value)


def _quoted(value: Any, limit: int = 40) -> str:
    """``repr`` cut to ``limit`` characters (a hostile value or key can be a megabyte long)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: float | None) -> str:
    """A number for a message: whole numbers with thousands separators, others in ``g`` form."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True, eq=False)
class Node:
    """One schema node. ``doc`` says what the value is (the hint of its errors); ``required``
    matters only as a :class:`Mapping` field."""

    doc: str = ""
    required: bool = False

    #: What an error says was expected ("a mapping", "a list", ...).
    expects = "a value"

    def fits_kind(self, value: Any) -> bool:
        """Whether ``value`` is of this node's kind (how :class:`OneOf` picks an alternative)."""
        return True

    def check(self, value: Any, at: "_At") -> None:
        if not self.fits_kind(value):
            at.fail(f"expected {self.expects}, got {kind_of(value)}", self.doc or at.hint or f"write {self.expects}")


def req(node: Node) -> Node:
    """``node`` as a required field of its mapping."""
    return replace(node, required=True)


@dataclass(frozen=True, eq=False)
class Anything(Node):
    """Any value (a structure checked by its own loader, e.g. a graph node's attributes)."""


@dataclass(frozen=True, eq=False)
class Null(Node):
    """Nothing (``~``, ``null`` or an empty value): an alternative in a :class:`OneOf`."""

    expects = "nothing"

    def fits_kind(self, value: Any) -> bool:
        return value is None


@dataclass(frozen=True, eq=False)
class Str(Node):
    """Text; ``nonempty`` refuses blank text."""

    nonempty: bool = False
    expects = "text"

    def fits_kind(self, value: Any) -> bool:
        return isinstance(value, str)

    def check(self, value: Any, at: "_At") -> None:
        super().check(value, at)
        if self.nonempty and not value.strip():
            at.fail("expected text, got an empty string", self.doc or at.hint or "write the text")


@dataclass(frozen=True, eq=False)
class Bool(Node):
    expects = "true or false"

    def fits_kind(self, value: Any) -> bool:
        return isinstance(value, bool)


@dataclass(frozen=True, eq=False)
class Number(Node):
    """A number in the plausible range ``[lo, hi]`` (``above``: ``lo < value``), in ``unit``.
    ``why`` says where the range comes from; it is the hint when a value falls outside."""

    lo: float | None = None
    hi: float | None = None
    unit: str = ""
    why: str = ""
    above: bool = False
    integer: bool = False

    @property
    def expects(self) -> str:  # type: ignore[override]
        return "a whole number" if self.integer else "a number"

    def fits_kind(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) if self.integer else _is_number(value)

    def check(self, value: Any, at: "_At") -> None:
        super().check(value, at)
        low = self.lo is not None and (value <= self.lo if self.above else value < self.lo)
        high = self.hi is not None and value > self.hi
        if low or high:
            unit = f" {self.unit}" if self.unit else ""
            lo, hi = _number(self.lo), _number(self.hi)
            span = (f"above {lo}" if self.above else f"at least {lo}") if self.hi is None else \
                f"above {lo} and at most {hi}" if self.above else f"at most {hi}" if self.lo is None else \
                f"{lo} to {hi}"
            at.fail(f"{_number(value)}{unit} is outside the plausible range ({span}{unit})",
                    f"write the real figure{': ' + self.why if self.why else ''}")


def Int(doc: str = "", lo: int | None = None, hi: int | None = None, unit: str = "", why: str = "",
        required: bool = False) -> Number:
    """A whole number in ``[lo, hi]``."""
    return Number(doc, required, lo, hi, unit, why, integer=True)


@dataclass(frozen=True, eq=False)
class Expr(Node):
    """A size: a whole number, or an expression text (``config.hidden_size // 2``) whose bare names
    include none of ``forbid`` (the scenario symbols: a model's sizes are fixed, never a function
    of the batch or the prompt). Syntax is the expression parser's to judge, when it evaluates."""

    forbid: tuple[str, ...] = ()
    expects = "a number or an expression"

    def fits_kind(self, value: Any) -> bool:
        return isinstance(value, (int, float, str)) and not isinstance(value, bool)

    def check(self, value: Any, at: "_At") -> None:
        super().check(value, at)
        if not (self.forbid and isinstance(value, str)) or value.startswith("$"):
            return
        from engine.language import expr    # here, not at the top: a file without such a text never loads sympy
        try:
            names = expr.names_in(value)
        except expr.ExprError:
            return   # reported, with its own hint, where the expression is evaluated
        bad = sorted(names & set(self.forbid))
        if bad:
            at.fail(f"depends on the scenario ({', '.join(bad)}), which a size of the model cannot",
                    "write a fixed size: a number, or an expression over dims and config.<field> "
                    f"({', '.join(self.forbid)} are bound per deployment point, not by the spec)")


@dataclass(frozen=True, eq=False)
class ListOf(Node):
    """A list of ``item``; ``min_items``/``max_items`` bound its length."""

    item: Node = field(default_factory=Anything)
    min_items: int = 0
    max_items: int | None = None
    expects = "a list"

    def fits_kind(self, value: Any) -> bool:
        return isinstance(value, list)

    def check(self, value: Any, at: "_At") -> None:
        super().check(value, at)
        if len(value) < self.min_items:
            at.fail(f"expected at least {self.min_items} item{'s' if self.min_items > 1 else ''}, "
                    f"got {len(value)}", self.doc or at.hint or "write a longer list")
        if self.max_items is not None and len(value) > self.max_items:
            at.fail(f"expected at most {self.max_items} items, got {len(value)}",
                    self.doc or at.hint or "write a shorter list")
        inner = at.within(self.doc)
        for i, item in enumerate(value):
            self.item.check(item, inner.index(i, item))


@dataclass(frozen=True, eq=False)
class Mapping(Node):
    """``key: value`` pairs: the named ``fields`` (each a node; ``req(...)`` for required ones), and
    any other key with a value of schema ``rest`` (None: other keys are refused)."""

    fields: dict[str, Node] = field(default_factory=dict)
    rest: Node | None = None
    expects = "a mapping"

    def fits_kind(self, value: Any) -> bool:
        return isinstance(value, dict)

    def check(self, value: Any, at: "_At") -> None:
        super().check(value, at)
        inner = at.within(self.doc)
        for key, item in value.items():
            node = self.fields.get(key, self.rest)
            if node is None:
                at.key(key, item).fail(f"unknown field {_quoted(key)}", "allowed: " + ", ".join(self.fields))
            node.check(item, inner.key(key, item))
        for key, node in self.fields.items():
            if node.required and key not in value:
                at.fail(f"missing field {key!r}", f"add `{key}:` ({node.doc})" if node.doc else f"add `{key}:`")


def MapOf(doc: str = "", value: Node | None = None, required: bool = False) -> Mapping:
    """``name: value`` pairs, any names, every value of schema ``value`` (default: anything)."""
    return Mapping(doc, required, rest=value if value is not None else Anything())


@dataclass(frozen=True, eq=False)
class OneOf(Node):
    """One of ``options``, picked by kind (the first whose kind fits); none fits: one error
    listing what each would have been."""

    options: tuple[Node, ...] = ()
    #: What an error says was expected, when the options' kinds joined do not read well.
    says: str = ""

    @property
    def expects(self) -> str:  # type: ignore[override]
        if self.says:
            return self.says
        kinds = list(dict.fromkeys(o.expects for o in self.options))
        return ", ".join(kinds[:-1]) + " or " + kinds[-1] if len(kinds) > 1 else kinds[0]

    def fits_kind(self, value: Any) -> bool:
        return any(o.fits_kind(value) for o in self.options)

    def check(self, value: Any, at: "_At") -> None:
        for option in self.options:
            if option.fits_kind(value):
                option.check(value, at.within(self.doc))
                return
        at.fail(f"expected {self.expects}, got {kind_of(value)}", self.doc or at.hint or f"write {self.expects}")


@dataclass(frozen=True, eq=False)
class Lazy(Node):
    """A node defined later (a recursive schema: a slot fill holds slot fills)."""

    get: Any = None

    def fits_kind(self, value: Any) -> bool:
        return self.get().fits_kind(value)

    def check(self, value: Any, at: "_At") -> None:
        self.get().check(value, at)


# -- where a value is ---------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _At:
    """The place of the value being checked: file, line (of its key or item when the YAML reader
    recorded one) and dotted field path."""

    file: str
    line: int
    path: str
    node: Any = None
    #: What the nearest enclosing node with a doc says: the hint of a node that has none.
    hint: str = ""

    def key(self, key: str, value: Any) -> "_At":
        line = self.node.line_of(key) if hasattr(self.node, "line_of") else self.line
        shown = str(key).encode("ascii", "backslashreplace").decode("ascii")   # a key is hostile text too
        shown = shown if len(shown) <= 40 else shown[:40] + "..."
        return _At(self.file, line or self.line, f"{self.path}.{shown}" if self.path else shown, value, self.hint)

    def index(self, i: int, value: Any) -> "_At":
        line = self.node.line_of_item(i) if hasattr(self.node, "line_of_item") else getattr(value, "line", 0)
        return _At(self.file, line or self.line, f"{self.path}[{i}]", value, self.hint)

    def within(self, doc: str) -> "_At":
        """The same place, with ``doc`` as the hint of what is inside (when there is one)."""
        return replace(self, hint=doc) if doc else self

    def fail(self, problem: str, hint: str) -> None:
        raise SpecError(Where(self.file, self.line, self.path, self.node), problem, hint)


def check(schema: Node, data: Any, file: str) -> None:
    """Check ``data`` (as :func:`engine.language.yamlio.load_yaml` returned it) against ``schema``;
    the first problem is a one-line :class:`SpecError` at file:line: field."""
    schema.check(data, _At(file, getattr(data, "line", 0) or 1, "", data))
