"""What every op is made of: :class:`Op` (a name, a doc line and small pure rules), the
:class:`OpCall` its rules read, the :class:`Leaf` weights it owns, and the shape helpers the op
families share.

Layer: engine.language. Parameters are never declared separately: an op declares its weight *leaves*
(name, axes, parameter or buffer) and the parameter count is the sum of the parameter leaves'
element counts. Bytes moved are derived from shapes elsewhere, never declared.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy

from engine.language.errors import SpecError, Where
from engine.language.shapes import Axis, AxisMap, Tensor, carried_all


ZERO = sympy.Integer(0)


@dataclass(frozen=True, slots=True)
class Leaf:
    """A weight tensor an op owns: ``name`` (checkpoint leaf, e.g. ``weight``), its axes, its kind.

    ``kind`` is ``param`` (counted as a model parameter) or ``buffer`` (stored in the checkpoint,
    not a parameter: DeepSeek's routing correction bias). ``matrix`` marks the leaves that quant
    schemes apply to (a linear's weight); vectors stay in the scheme's fallback dtype.
    """

    name: str
    axes: tuple[Axis, ...]
    kind: str = "param"
    matrix: bool = False

    @property
    def numel(self) -> sympy.Expr:
        return Tensor(self.axes).numel


@dataclass(frozen=True, slots=True)
class OpCall:
    """Everything a rule may read: the node's bound dims/attrs, input tensors, the scenario."""

    node: str
    where: Where
    dims: Mapping[str, sympy.Expr]
    dim_names: Mapping[str, str]
    attrs: Mapping[str, Any]
    inputs: tuple[Tensor, ...]
    scenario: Mapping[str, sympy.Expr]
    check: bool

    def axis(self, param: str) -> Axis:
        """An axis named after the dim expression bound to ``param`` (e.g. ``d_ff``)."""
        return Axis(self.dim_names[param], self.dims[param])

    def fail(self, problem: str, hint: str = "") -> SpecError:
        return SpecError(self.where, f"node {self.node!r}: {problem}", hint)

    def require_equal(self, a: sympy.Expr, b: sympy.Expr, what: str, hint: str = "") -> None:
        """Geometry check. Decided on the numeric binding; formulas are not compared."""
        if self.check and a.is_number and b.is_number and a != b:
            raise self.fail(f"{what}: {a} != {b}", hint)

    def require_rank(self, index: int, rank: int | tuple, what: str) -> None:
        ranks = (rank,) if isinstance(rank, int) else rank
        if self.inputs[index].rank not in ranks:
            raise self.fail(f"{what} must have rank {' or '.join(map(str, ranks))}, "
                            f"got {self.inputs[index]}",
                            "check the `in:` edge feeding this node")


Rule = Callable[[OpCall], Any]


@dataclass(frozen=True, slots=True)
class Op:
    """A primitive op. ``shape`` returns ``(Tensor, AxisMap)``; ``flops`` gets the call and output."""

    name: str
    doc: str
    shape_kind: str
    arity: tuple[int, int]
    shape: Rule
    flops: Callable[[OpCall, Tensor], sympy.Expr] = lambda call, out: ZERO
    leaves: Rule = lambda call: ()
    dims: tuple[str, ...] = ()
    optional_dims: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    #: How placements cross the op (see engine/deploy/placement.py): ``axis_map`` (follow the per-axis
    #: map), ``norm`` (axis_map, last axis must be whole), ``matmul``, ``rows`` (table lookup),
    #: ``cache``, ``attention``, ``dispatch``, ``combine``.
    placement: str = "axis_map"
    #: A view moves no data: it costs nothing and its consumers read its source's storage.
    view: bool = False
    #: A view of part of its source (a slice, gathered rows): consumers read only that part.
    partial: bool = False
    #: Bytes per output element when the output is not an activation (int32 token indices);
    #: None: the deployment's activation dtype.
    out_element_bytes: int | None = None
    #: The output is cache storage (the KV dtype): a cache, or rows gathered from one.
    cache_output: bool = False
    #: A recurrent op's state per request (``None``: stateless): the tensor a ``growth: state``
    #: cache entry naming this node keeps between decode steps.
    state: Callable[[OpCall], Tensor] | None = None
    #: The state is a rolling buffer of a window's rows, not a recurrence (DeepSeek-V4's compressor
    #: keeps the not-yet-pooled tokens of its window): a decode step writes one row and the whole
    #: buffer is read once per ``every`` steps to pool it, so a step moves 2 / every of it (a
    #: recurrent state is read and written whole every step); the layer is no linear mixer.
    rolling_state: bool = False

    def params(self, call: OpCall) -> sympy.Expr:
        """Parameter count: the parameter leaves' element counts (buffers excluded)."""
        return sum((leaf.numel for leaf in self.leaves(call) if leaf.kind == "param"), ZERO)


def _rows(tensor: Tensor) -> sympy.Expr:
    """Element count of all axes but the last (tokens x anything leading)."""
    return Tensor(tensor.axes[:-1]).numel


def _preserve(call: OpCall) -> tuple[Tensor, AxisMap]:
    x = call.inputs[0]
    return x, AxisMap(carried_all(x))


def _last_is(call: OpCall, param: str, what: str) -> None:
    x = call.inputs[0]
    call.require_equal(x.axes[-1].size, call.dims[param],
                       f"{what}: last axis {x.axes[-1].name} does not match {param}",
                       f"feed a tensor whose last axis is {call.dim_names[param]}")
