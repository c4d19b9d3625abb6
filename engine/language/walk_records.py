"""The walk's records and shared helpers: node, leaf, component and cache rows, the Analysis
tables, the Binding (numbers or formulas) and the limits a walk checks.

Layer: engine.language. Data types and small helpers only; the walk itself is
:class:`engine.language.evaluate.Walker` (its jobs: walk_ops, walk_components, walk_stacks).
"""
from __future__ import annotations

import functools

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy


from engine.language.dtypes import cache_entry_bytes
from engine.language.errors import SpecError, Where
from engine.language.ir import Fill
from engine.language.shapes import Axis, AxisMap, Tensor
from engine.language.streams import StreamRow



ONE = sympy.Integer(1)
PHASES = frozenset({"prefill", "decode"})

#: Work bounds of one spec, checked before the walk loops over them (specs arrive in pull requests:
#: a ``repeat:`` or a config's ``num_hidden_layers`` of 10^8 would otherwise walk for minutes and
#: take gigabytes). The deepest published model has 126 layers, the widest MoE layer 512
#: experts and the largest layers x experts of one weight 23,040 (tests/test_bounds.py holds
#: the corpus under every bound): each is about 16x or more of headroom. A layer stack is expanded
#: per layer (schedules, stream plans); an expert weight's checkpoint names per layer and expert
#: (engine.verify.validate), hence the product bound.
MAX_LAYERS = 4096
MAX_INSTANCES = 16384
MAX_COPIES = 2 ** 19


def is_monomial(e) -> bool:
    """A product of a positive whole coefficient and symbols (each to a positive whole power), e.g.
    ``d_head*n_kv_heads`` or ``32*d_head``: already its own simplest form, which ``sympy.simplify``
    hands back unchanged (tests/test_deploy_fast.py checks it against sympy on the corpus's caches
    and on hand-written products)."""
    if not isinstance(e, sympy.Mul):
        return False
    for f in e.args:
        if isinstance(f, sympy.Pow):
            if not (f.base.is_Symbol and f.exp.is_Integer and f.exp > 0):
                return False
        elif not (f.is_Symbol or (f.is_Integer and f > 0)):
            return False
    return True


@functools.lru_cache(maxsize=8192, typed=True)
def _simplify(e):
    """sympy.simplify, once per expression per process (a cache's per-token size recurs in every
    layer template, site walk and model; typed: a Python number and sympy's equal one differ in
    type). A monomial (:func:`is_monomial`, most caches' size: ``d_head*n_kv_heads``) is its own
    answer without the call: simplify's first call on a product imports ``sympy.physics.units``
    (0.15 s of a cold ``archledger deploy``) only to ask whether it holds a physical quantity."""
    return e if is_monomial(e) else sympy.simplify(e)


@dataclass(frozen=True, slots=True)
class LeafRow:
    """A weight leaf of a node: checkpoint ``key`` template, axes, kind, the role it is stored under."""

    name: str
    key: str
    axes: tuple[Axis, ...]
    kind: str
    matrix: bool
    role: str

    @property
    def numel(self) -> sympy.Expr:
        return Tensor(self.axes).numel


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One primitive op instance in the program (per-instance values; multiply by the counts).

    ``repeat`` multiplies FLOPs and parameters (layers); ``instances`` multiplies parameters only
    (experts: the walk already routes all tokens through one expert instance, so its FLOPs cover
    every expert); ``active`` is the per-token share of ``instances`` (top-k).
    """

    uid: str
    name: str
    op: str
    stack: str
    component_uid: str
    component: str
    role: str
    phases: frozenset
    inputs: tuple[str, ...]
    in_shapes: tuple[Tensor, ...]
    out: Tensor
    axis_map: AxisMap
    flops: sympy.Expr
    params: sympy.Expr
    leaves: tuple[LeafRow, ...]
    repeat: sympy.Expr
    instances: sympy.Expr
    active: sympy.Expr
    stacked: bool
    weight_axes: Mapping[str, str]
    shares: str | None
    where: Where
    #: The op's dim parameters -> the dim expression text they were bound to (axis names).
    dim_names: Mapping[str, str] = field(default_factory=dict)
    #: The op's dim parameters -> their values in this binding (numbers, or formulas over dims).
    dim_values: Mapping[str, sympy.Expr] = field(default_factory=dict)
    #: A ``src:`` anchor: text the model's forward source must contain (the source guard).
    src: str | None = None
    #: The bare names in ``dim_names`` -> their values where this op ran: a template or component
    #: may rebind a dim (Gemma 4's global layers: ``d_head: d_head_global``; per-layer dims), so
    #: the model-level value of a name is not always the one an axis was built from.
    name_values: Mapping[str, sympy.Expr] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ComponentRow:
    """A component instance: its uid, name, role and counts; ``layers`` lists layer indices for templates."""

    uid: str
    component: str
    role: str
    stack: str
    repeat: sympy.Expr
    instances: sympy.Expr
    active: sympy.Expr
    template: str | None = None
    layers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CacheRow:
    """A cache entry at a kv_cache node: ``per_token`` elements per instance, growth law, counts."""

    uid: str
    node_uid: str
    name: str
    kind: str
    growth: str
    per_token: sympy.Expr
    window: sympy.Expr | None
    every: sympy.Expr | None
    repeat: sympy.Expr
    stack: str
    #: The entry's own element type (a recurrent state in f32); None: the deployment's KV dtype.
    dtype: str | None = None
    #: ``(scale dtype, block)`` stored beside the entry's own dtype (an FP8 cache with f32 scales).
    scale: tuple[str, int] | None = None

    @property
    def own_bytes(self) -> sympy.Expr | None:
        """Bytes per element in the entry's own dtype (scales included); None: the KV dtype's."""
        return cache_entry_bytes(self.dtype, self.scale) if self.dtype else None


@dataclass(frozen=True, slots=True)
class Analysis:
    """The tables of one binding. ``values`` maps every dim name to its value in this binding."""

    model_id: str
    mode: str
    rows: Mapping[str, NodeRow]
    components: Mapping[str, ComponentRow]
    caches: tuple[CacheRow, ...]
    values: Mapping[str, sympy.Expr]
    scenario: Mapping[str, sympy.Expr]
    max_context: sympy.Expr
    stacks: tuple[str, ...]
    streams: tuple[StreamRow, ...] = ()


@dataclass(frozen=True, slots=True)
class Binding:
    """How dims are valued: ``numeric`` (config numbers) or ``symbolic`` (sympy symbols)."""

    mode: str
    scenario: Mapping[str, sympy.Expr] = field(default_factory=dict)

    @property
    def numeric(self) -> bool:
        return self.mode == "numeric"


@dataclass(slots=True)
class _Scope:
    """The lexical environment of one component instance during the walk."""

    dims: dict[str, Any]
    options: dict[str, Any]
    slots: Mapping[str, Fill]
    repeat: sympy.Expr
    instances: sympy.Expr
    active: sympy.Expr
    stacked: bool
    module: str
    renames: Mapping[str, str]
    role: str
    component: str
    uid: str
    stack: str
    phases: frozenset
    where: Where


def _check_count(count: Any, limit: int, where: Where, what: str, unit: str, why: str) -> None:
    """Refuse a count the walk would loop over that is above ``limit`` (:data:`MAX_LAYERS` ...),
    before any loop runs (a float too: ``range(int(1e9))`` loops as long). A count that is not a
    number is left to the code that uses it."""
    if isinstance(count, (int, float, sympy.Number)) and not isinstance(count, bool) and count > limit:
        shown = f"{int(count):,}" if count == int(count) else str(count)
        raise SpecError(where, f"{what} {shown} {unit}, more than the limit of {limit:,}",
                        f"check the count and the config field it reads ({why}; the bound is "
                        f"engine/language/evaluate.py's)")


def _join(prefix: str, segment: str) -> str:
    if not segment:
        return prefix
    return f"{prefix}.{segment}" if prefix else segment


def _single(value: Any) -> tuple[Tensor, str]:
    if isinstance(value, dict):
        return next(iter(value.values()))
    return value


class _Defer(Exception):
    """A layer group reads an internal stream whose first producer is not walked yet."""
