"""Tensor geometry: named axes with sizes, and per-axis maps that say where each output axis came from.

Layer: engine.language. Dims stay global: an axis is a dim *name* (what the dims table classifies for
sharding) and a size expression in the current binding (a number or a sympy formula). An op's
:class:`AxisMap` is the DTensor-style vocabulary the placement work reuses to carry
``Shard(axis)`` through the op: each output axis is carried from an input axis, split out of one,
merged from several, or new; input axes that vanish are contracted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
import operator

import sympy


@dataclass(frozen=True, slots=True)
class Axis:
    """One tensor axis: ``name`` (a dim name such as ``n_heads``) and ``size`` (number or formula)."""

    name: str
    size: sympy.Expr

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Tensor:
    """A value flowing along an edge: its axes and how many of its elements are meaningful.

    ``valid`` is the count of elements actually computed; it differs from the product of sizes
    only after a masked attention score (causal or windowed), where downstream FLOPs must count
    the unmasked pairs only. ``None`` means all elements.
    """

    axes: tuple[Axis, ...]
    valid: sympy.Expr | None = None

    @property
    def rank(self) -> int:
        return len(self.axes)

    @property
    def numel(self) -> sympy.Expr:
        return reduce(operator.mul, (a.size for a in self.axes), sympy.Integer(1))

    @property
    def computed(self) -> sympy.Expr:
        """Elements that are computed (``valid`` if set, else ``numel``)."""
        return self.numel if self.valid is None else self.valid

    @property
    def sizes(self) -> tuple:
        return tuple(a.size for a in self.axes)

    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    def __str__(self) -> str:
        return "[" + ", ".join(a.name for a in self.axes) + "]"


# -- per-axis map vocabulary (after DTensor's _view_ops) -----------------------------------------

@dataclass(frozen=True, slots=True)
class Carried:
    """Output axis is input ``source``'s axis ``axis``, unchanged (same size, same meaning)."""

    source: int
    axis: int

    def __str__(self) -> str:
        return f"in{self.source}[{self.axis}]"


@dataclass(frozen=True, slots=True)
class Split:
    """Output axis is part ``part`` of ``parts`` factors of input axis ``axis`` (e.g. heads of d_q)."""

    source: int
    axis: int
    part: int
    parts: int

    def __str__(self) -> str:
        return f"split(in{self.source}[{self.axis}], {self.part}/{self.parts})"


@dataclass(frozen=True, slots=True)
class Merged:
    """Output axis flattens input axes ``axes`` (outermost first)."""

    source: int
    axes: tuple[int, ...]

    def __str__(self) -> str:
        return f"merge(in{self.source}{list(self.axes)})"


@dataclass(frozen=True, slots=True)
class New:
    """Output axis does not come from any input axis (a weight's output features, a vocab row...)."""

    def __str__(self) -> str:
        return "new"


AxisSource = Carried | Split | Merged | New


@dataclass(frozen=True, slots=True)
class AxisMap:
    """Where every output axis came from, and which input axes were contracted away."""

    outputs: tuple[AxisSource, ...]
    contracted: tuple[tuple[int, int], ...] = field(default=())

    def __str__(self) -> str:
        out = ", ".join(str(s) for s in self.outputs)
        if self.contracted:
            out += " | contracted " + ", ".join(f"in{i}[{j}]" for i, j in self.contracted)
        return out


def carried_all(tensor: Tensor, source: int = 0) -> tuple[Carried, ...]:
    return tuple(Carried(source, i) for i in range(tensor.rank))
