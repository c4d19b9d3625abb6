"""The walk: SpecIR -> Analysis tables. One walk, two bindings (numbers or sympy formulas).

Layer: engine.spec. :func:`walk_model` expands a model's stacks, layer templates, slots and components
into primitive node rows keyed by a stable uid, computing shapes (with per-axis maps), FLOPs,
parameters and weight leaves for each, plus cache declarations. A layer template is walked once
and carries its layer count as ``repeat``; an expert component carries ``instances`` (experts
stored) and ``active`` (experts used per token). Whether values are numbers or formulas depends
only on the :class:`Binding`; the code path is the same, so a formula evaluated at the numeric
binding equals the number (tested for every node of every model).
"""
from __future__ import annotations

import functools

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import sympy

import math

from engine.spec import expr, streams as stream_rules, symbols
from engine.spec.corpus import TAKES, Corpus
from engine.spec.dtypes import CACHE_DTYPE_ALIASES, CACHE_DTYPE_BYTES, cache_entry_bytes
from engine.spec.errors import SpecError, Where
from engine.spec.ir import CacheSpec, ComponentSpec, Fill, ModelSpec, NodeSpec, StackSpec, StreamSpec
from engine.spec.ops import OPS, Leaf, OpCall
from engine.spec.shapes import Axis, AxisMap, Tensor
from engine.spec.streams import StreamRow
from engine.spec.yamlio import NonFinite

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


class _OpRows:
    """Walker job: a primitive op call -> its node row (shapes, FLOPs, weight leaves, cache entry)."""

    # -- ops ----------------------------------------------------------------------------------------
    def walk_op(self, node: NodeSpec, inputs: list, scope: _Scope, uid: str) -> Tensor:
        op = OPS.get(node.target)
        if op is None:
            raise SpecError(node.where.at("op"), f"unknown op {node.target!r}",
                            "use one of: " + ", ".join(sorted(OPS)))
        low, high = op.arity
        if not low <= len(inputs) <= high:
            raise SpecError(node.where.at("in"), f"op {op.name} takes {low}..{high} inputs, got {len(inputs)}",
                            "write `in: name`" if high == 1 else f"write `in: [a, b]` with {low}..{high} names")
        names = self.names(scope)
        dims, dim_names = {}, {}
        cache = None
        if node.target == "kv_cache":
            cache = self._cache_decl(node, scope)
        state_cache = self._cache_decl(node, scope, required=False) if op.state is not None else None
        raw_dims = dict(node.dims)
        growth = None
        if cache is not None:
            growth = cache.growth
            if cache.window is not None:
                window = self._attr(cache.window, scope, node, "cache.window")
                if window is not None:
                    raw_dims["window"] = cache.window
                    growth = "window"
            if cache.every is not None:
                raw_dims["every"] = cache.every
        for key, text in list(raw_dims.items()):
            if isinstance(text, str) and text.startswith("$"):
                text = self._attr(text, scope, node, f"dims.{key}")
                if text is None:
                    continue
                if isinstance(text, sympy.Basic):
                    dims[key] = text
                    dim_names[key] = raw_dims[key][1:]
                    continue
            if key not in op.dims and key not in op.optional_dims:
                raise SpecError(node.where.at(f"dims.{key}"), f"op {op.name} has no dim {key!r}",
                                "its dims are: " + ", ".join(op.dims + op.optional_dims) if op.dims + op.optional_dims
                                else f"op {op.name} takes no dims")
            dims[key] = self._eval(text, expr.Scope(names), node.where.at(f"dims.{key}"))
            dim_names[key] = text if isinstance(text, str) else str(text)
        for key in op.dims:
            if key not in dims:
                raise SpecError(node.where.at("dims"), f"op {op.name} needs dim {key!r}",
                                f"add dims: {{{key}: <expression>}}")
        attrs = dict(op.attrs)
        for key, value in node.attrs.items():
            if key not in op.attrs:
                raise SpecError(node.where.at(f"attrs.{key}"), f"op {op.name} has no attr {key!r}",
                                "its attrs are: " + ", ".join(op.attrs) if op.attrs else f"op {op.name} takes no attrs")
            attrs[key] = self._attr(value, scope, node, f"attrs.{key}")
        if cache is not None:
            attrs["growth"] = growth
        tensors = tuple(t for t, _ in inputs)
        call = OpCall(uid, node.where, dims, dim_names, attrs, tensors, self.scenario, self.binding.numeric)
        out, axis_map = op.shape(call)
        leaves = tuple(self._leaf(leaf, node, scope) for leaf in op.leaves(call))
        if leaves and scope.phases == frozenset({"decode"}) and not node.shares:
            raise SpecError(node.where, f"decode-only node {node.name!r} has weights but no `shares:`",
                            "name the main-graph node whose weights it reads, e.g. `shares: kv_b_proj`")
        row = NodeRow(uid=uid, name=node.name, op=op.name, stack=scope.stack, component_uid=scope.uid,
                      component=scope.component, role=node.role or scope.role, phases=scope.phases,
                      inputs=tuple(u for _, u in inputs), in_shapes=tensors, out=out, axis_map=axis_map,
                      flops=op.flops(call, out), params=op.params(call), leaves=leaves,
                      repeat=scope.repeat, instances=scope.instances, active=scope.active,
                      stacked=scope.stacked, weight_axes=dict(node.weight_axes), shares=node.shares,
                      where=node.where, dim_names=dim_names, dim_values=dict(dims),
                      src=self._attr(node.src, scope, node, "src") if node.src else None,
                      name_values=self._name_values(dim_names, names))
        self.rows[uid] = row
        if cache is not None:
            per_token = tensors[0].numel / (self.scenario[symbols.BATCH] * self.scenario[symbols.SEQ])
            self.caches.append(CacheRow(f"{scope.uid}#{cache.name}", uid, cache.name, cache.kind, growth,
                                        _simplify(per_token), dims.get("window"), dims.get("every"),
                                        scope.repeat, scope.stack, self._cache_dtype(cache, scope, node),
                                        cache.scale))
        if state_cache is not None:
            # a recurrent op's state: fixed per request, kept once whether the prefill (chunked)
            # or the decode (recurrent) form of the node is walked
            cache_uid = f"{scope.uid}#{state_cache.name}"
            if not any(c.uid == cache_uid for c in self.caches):
                self.caches.append(CacheRow(cache_uid, uid, state_cache.name, state_cache.kind, "state",
                                            _simplify(op.state(call).numel), None, None,
                                            scope.repeat, scope.stack,
                                            self._cache_dtype(state_cache, scope, node)))
        return out

    @staticmethod
    def _name_values(dim_names: Mapping[str, str], names: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for text in dim_names.values():
            try:
                found = expr.names_in(text)
            except expr.ExprError:
                continue
            out.update({n: names[n] for n in found if isinstance(names.get(n), sympy.Basic)})
        return out
    def _cache_dtype(self, cache: CacheSpec, scope: _Scope, node: NodeSpec) -> str | None:
        """The entry's element type: a literal, or ``$option`` (the model passes e.g. the config's
        ``mamba_ssm_cache_dtype``); torch names (float32, bfloat16, float16) read as f32, bf16, fp16."""
        value = self._attr(cache.dtype, scope, node, "cache.dtype")
        if value is None:
            return None
        value = CACHE_DTYPE_ALIASES.get(value, value)
        if value not in CACHE_DTYPE_BYTES:
            raise SpecError(cache.where.at("dtype"), f"cache {cache.name!r} gets dtype {value!r}, not a cache dtype",
                            "pass one of: " + ", ".join([*CACHE_DTYPE_BYTES, *CACHE_DTYPE_ALIASES]))
        return value

    def _cache_decl(self, node: NodeSpec, scope: _Scope, required: bool = True) -> CacheSpec | None:
        component = self._component_spec(scope)
        for entry in component.cache if component else ():
            if entry.node == node.name:
                return entry
        if not required:
            return None
        raise SpecError(node.where, f"kv_cache node {node.name!r} has no `cache:` entry")

    def _component_spec(self, scope: _Scope) -> ComponentSpec | None:
        name = scope.component
        if name.startswith("stack:"):
            return None
        return self.corpus.component_for(self.model, name, scope.where)

    def _attr(self, value: Any, scope: _Scope, node: NodeSpec, key: str) -> Any:
        """A literal, or ``$option``: the value of the enclosing component's option."""
        if isinstance(value, str) and value.startswith("$"):
            option = value[1:]
            if option not in scope.options:
                raise SpecError(node.where.at(key), f"unknown option {option!r}",
                                "declare it under options: in the component (known: "
                                + ", ".join(scope.options) + ")")
            return scope.options[option]
        return value

    def _leaf(self, leaf: Leaf, node: NodeSpec, scope: _Scope) -> LeafRow:
        # A caller's rename (`modules:`) wins over the component's own `module:` (MiniMax-M2 keeps
        # the router's correction bias beside the gate, not inside it).
        segment = scope.renames.get(node.name, node.name if node.module is None else node.module)
        module = _join(scope.module, segment)
        if scope.stacked:
            key = module if leaf.name == "weight" else f"{module}_{leaf.name}"
        else:
            key = f"{module}.{leaf.name}"
        return LeafRow(leaf.name, key, leaf.axes, leaf.kind, leaf.matrix, node.role or scope.role)


class _Components:
    """Walker job: a component call -> its options, dims and graph (and decode variant), walked in a
    child scope."""

    # -- components ---------------------------------------------------------------------------------
    def walk_component(self, node: NodeSpec, fill: Fill, inputs: list, scope: _Scope, uid: str) -> Any:
        spec = self.corpus.component_for(self.model, fill.component, fill.where)
        names = self.names(scope)
        given = {k: self._attr(v, scope, node, f"with.{k}") for k, v in node.options.items()}
        options = self._options(spec, fill.options, names, fill.where)
        options = self._options(spec, given, names, node.where, base=options)
        stacked = self._attr(node.stacked, scope, node, "stacked")
        dims = dict(scope.dims)
        for source, written in ((fill.dims, fill.where), (node.dims, node.where)):
            for key, text in source.items():
                text = self._attr(text, scope, node, f"dims.{key}")   # `$option`: an expression option
                at = written.at(f"dims.{key}")
                dims[key] = self._eval(text, self._fill_dim_scope(names, text, at) if source is fill.dims
                                       else expr.Scope(names), at)
        repeat = scope.repeat
        instances, active = scope.instances, scope.active
        if node.instances is not None:
            count = self._eval(node.instances, expr.Scope(names), node.where.at("instances"))
            if self.binding.numeric:
                where = node.where.at("instances")
                _check_count(count, MAX_INSTANCES, where, f"{node.name!r} has", "instances",
                             "each instance's weights are named and checked one by one")
                _check_count(repeat * count, MAX_COPIES, where, f"{node.name!r} has", "copies (layers x instances)",
                             "each copy's weights are named and checked one by one")
            instances = instances * count
            active = active * (self._eval(node.active, expr.Scope(names), node.where.at("active"))
                               if node.active is not None else count)
        segment = fill.module if fill.module is not None else (
            node.module if node.module is not None else scope.renames.get(node.name, node.name))
        module = _join(scope.module, segment)
        if node.instances is not None and not stacked:
            module = _join(module, "{expert}")
        slots = dict(scope.slots)
        slots.update(fill.slots)
        renames = {k.split(".", 1)[1]: v for k, v in scope.renames.items()
                   if "." in k and k.split(".", 1)[0] == node.name}
        renames.update(fill.modules)
        renames.update(node.modules)
        child = _Scope(dims=dims, options=options, slots=slots, repeat=repeat, instances=instances,
                       active=active, stacked=scope.stacked or bool(stacked), module=module, renames=renames,
                       role=node.role or spec.role, component=spec.name, uid=uid, stack=scope.stack,
                       phases=scope.phases, where=spec.where)
        child_names = self.names(child)
        for key, text in spec.dims.items():
            child.dims[key] = self._eval(text, expr.Scope(child_names), spec.where.at(f"dims.{key}"))
            child_names[key] = child.dims[key]
        if len(inputs) != len(spec.inputs):
            raise SpecError(node.where.at("in"), f"component {spec.name} takes {len(spec.inputs)} inputs "
                            f"({', '.join(spec.inputs)}), got {len(inputs)}",
                            f"write `in: [...]` with {len(spec.inputs)} name(s), one per input")
        self.components[uid] = ComponentRow(uid, spec.name, child.role, scope.stack, repeat, instances, active)
        values = {name: value for name, value in zip(spec.inputs, inputs)}
        main = self.walk_graph(spec.graph, dict(values), child)
        off = self.last_off
        # a switched-off node aliases its input; a component's single output stands for it
        outputs = {k: _single(main[v][0]) if isinstance(main[v][0], dict) and len(main[v][0]) == 1 else main[v]
                   for k, v in spec.outputs.items()}
        if spec.decode_variant is not None and "decode" in scope.phases:
            self._walk_decode(spec, values, main, child, off)
        return outputs

    def _walk_decode(self, spec: ComponentSpec, inputs: dict, main: dict, scope: _Scope,
                     off: Mapping[str, str]) -> None:
        variant = spec.decode_variant
        gone = set(variant.remove) | set(variant.graph)
        prefill_only = scope.phases - {"decode"}
        for name in gone:
            uid = f"{scope.uid}/{name}"
            for row_uid in [u for u in self.rows if u == uid or u.startswith(uid + "/")]:
                self.rows[row_uid] = replace(self.rows[row_uid], phases=prefill_only)
        kept = {k: v for k, v in main.items() if k not in gone}
        for name, node in spec.graph.items():
            if name in kept:
                for ref in node.inputs:
                    if ref.split(".")[0] in variant.remove and ref.split(".")[0] not in variant.graph:
                        raise SpecError(variant.where, f"decode variant removes {ref!r} but {name!r} still reads it",
                                        f"replace {ref!r} in decode_variant.graph or remove {name!r} too")
        decode_scope = replace(scope, phases=frozenset({"decode"}) & scope.phases)
        values = dict(inputs)
        produced = self.walk_graph(variant.graph, values, decode_scope, fallback=kept,
                                   replaced=set(spec.graph) & set(variant.graph),
                                   switched_off={k: v for k, v in off.items() if k not in variant.graph})
        for name in variant.graph:
            if name in main and name in produced and self.binding.numeric:   # not switched off here
                before, after = main[name][0], produced[name][0]
                if isinstance(before, Tensor) and before.sizes != after.sizes:
                    raise SpecError(variant.graph[name].where,
                                    f"decode variant changes the shape of {name!r}: {before.sizes} -> {after.sizes}",
                                    "a replaced node must keep its output shape")

    def _fill_dim_scope(self, names: dict, text: Any, where: Where) -> expr.Scope:
        """The scope of a fill's dim: a dim reading ``layer`` (a per-layer template dim) also reads
        config.<field>, with ``layer`` the first layer of the group being walked (every layer of a
        group evaluates it to the same value: :meth:`_LayerStacks.layer_key`)."""
        if "layer" not in self._names_in(text, where):
            return expr.Scope(names)
        if self.layer_index is None:
            raise SpecError(where, "this dim reads `layer` outside a layer stack",
                            "per-layer dims belong in a layer template's fill (or a slot fill it uses)")
        return expr.Scope({**names, "layer": sympy.Integer(self.layer_index)}, self.config)

    def _names_in(self, text: Any, where: Where) -> set[str]:
        try:
            return expr.names_in(text)
        except expr.ExprError as exc:
            raise SpecError(where, str(exc), exc.hint) from None

    def _options(self, spec: ComponentSpec, given: Mapping, names: dict, where: Where,
                 base: dict | None = None) -> dict:
        options = dict(base) if base is not None else {}
        if base is None:
            for key, default in spec.options.items():
                options[key] = self._option_value(default, default, names, where.at(f"options.{key}"))
        for key, value in given.items():
            if key not in spec.options:
                raise SpecError(where.at(f"with.{key}"), f"component {spec.name} has no option {key!r}",
                                "its options are: " + ", ".join(spec.options) if spec.options
                                else f"component {spec.name} takes no options")
            options[key] = self._option_value(value, spec.options[key], names, where.at(f"with.{key}"))
        return options

    def _option_value(self, value: Any, default: Any, names: dict, where: Where) -> Any:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(default, str) and isinstance(value, str):
            if value.startswith("config."):
                # a string option read from config.json (Nemotron's mamba_ssm_cache_dtype: "float32")
                read = self._eval(value, expr.Scope({}, self.config), where)
                if not isinstance(read, str):
                    raise SpecError(where, f"{value} is {read!r}, not a string this option can take",
                                    "pass a config field holding a string, or a literal")
                return read
            return value
        if isinstance(default, bool):
            return self._bool_option(value, where)
        return self._eval(value, expr.Scope(names), where)

    def _bool_option(self, value: Any, where: Where) -> bool:
        """A boolean option given as a config field (``qk_norm: config.use_qk_norm``): the field
        must hold true or false (a config default counts); anything else is refused."""
        if not (isinstance(value, str) and value.startswith("config.")):
            raise SpecError(where, f"expected true or false, got {value!r}",
                            "write true or false, or a boolean config field (config.<field>)")
        got = self._eval(value, expr.Scope({}, self.config), where)
        if got is sympy.true or got is sympy.false:
            got = bool(got)
        if not isinstance(got, bool):
            raise SpecError(where, f"{value} is {got!r}, not true or false",
                            "name a boolean config field, or write true or false")
        return got


def _check_count(count: Any, limit: int, where: Where, what: str, unit: str, why: str) -> None:
    """Refuse a count the walk would loop over that is above ``limit`` (:data:`MAX_LAYERS` ...),
    before any loop runs (a float too: ``range(int(1e9))`` loops as long). A count that is not a
    number is left to the code that uses it."""
    if isinstance(count, (int, float, sympy.Number)) and not isinstance(count, bool) and count > limit:
        shown = f"{int(count):,}" if count == int(count) else str(count)
        raise SpecError(where, f"{what} {shown} {unit}, more than the limit of {limit:,}",
                        f"check the count and the config field it reads ({why}; the bound is "
                        f"engine/spec/evaluate.py's)")


class _LayerStacks:
    """Walker job: a ``repeat:`` stack -> layer groups by schedule and template, walked once per
    group with the stack's streams (:class:`_LayerStreams`) and rolled back when a group waits for
    a stream."""

    # -- layer stacks --------------------------------------------------------------------------------
    def walk_repeat(self, node: NodeSpec, inputs: list, scope: _Scope, uid: str) -> Any:
        where = node.where
        if self.layer_ctx is not None:
            raise SpecError(where, "a layer stack inside a layer stack",
                            "put the inner repeat in its own stack under stacks:")
        count_sym = self._eval(node.target, expr.Scope(self.names(scope)), where.at("repeat"))
        count = self._eval(node.target, expr.Scope(self.numeric_dims), where.at("repeat"))
        _check_count(count, MAX_LAYERS, where.at("repeat"), f"{node.name!r} repeats", "layers",
                     "a layer stack is expanded layer by layer")
        offset = 0
        if node.index_from is not None:
            offset = int(self._eval(node.index_from, expr.Scope(self.numeric_dims, self.config),
                                    where.at("index_from")))
        templates = [self._template_for(node, layer) for layer in range(int(count))]
        if not templates:
            raise SpecError(where, f"{node.name!r} repeats zero layers", "check the repeat count")
        ctx = _LayerStreams(self, node, uid, inputs, templates, scope)
        groups = ctx.groups()
        by_template = {t for t, _, _ in groups}
        queue, output = list(groups), None
        while queue:
            progressed = False
            for template, layers, tag in list(queue):
                mark = (set(self.rows), set(self.components), len(self.caches), dict(self.values))
                ctx.start(template, layers)
                try:
                    result = self._walk_layers(node, inputs, scope, uid, template, tag, layers, count_sym,
                                               len(groups) == 1 and len(by_template) == 1, offset)
                except _Defer:
                    self._rollback(mark)
                    ctx.abandon()
                    continue
                ctx.done()
                queue.remove((template, layers, tag))
                progressed = True
                if output is not None and self.binding.numeric:
                    before, after = _single(output)[0].sizes, _single(result)[0].sizes
                    if before != after:
                        raise SpecError(where, f"templates of {node.name!r} produce different shapes",
                                        "every layer template must map the carried stream to its own shape")
                output = result
            if not progressed:
                raise ctx.unproduced()
        self.streams.extend(ctx.finish())
        return output

    def _walk_layers(self, node, inputs, scope, uid, template, tag, layers, count_sym, whole, offset):
        """Walk one layer group (a template, and a history length where it reads one) once."""
        if whole:
            repeat = count_sym
        else:
            # the group's symbol joins names that are identifiers (a `repeat:` that is an expression
            # is named `layers`; templates are checked at load; tags are letters, digits and _)
            base = node.target if symbols.is_symbol_name(node.target) else "layers"
            name = f"{base}_{template}" + (f"_{tag}" if tag else "")
            repeat = sympy.Integer(len(layers)) if self.binding.numeric else symbols.dim(name)
            self.values[name] = repeat
        fill = self.model.templates[template]
        layer_scope = replace(scope, repeat=scope.repeat * repeat,
                              module=_join(_join(scope.module, node.module or node.name), "{layer}"))
        group_uid = f"{uid}[{template}" + (f":{tag}" if tag else "") + "]"
        self.layer_index = layers[0]   # per-layer dims: the group's layers all evaluate alike
        try:
            result = self.walk_component(NodeSpec(node.name, "component", fill.component, node.where, module=""),
                                         fill, inputs, layer_scope, group_uid)
        finally:
            self.layer_index = None
        row = self.components[group_uid]
        self.components[group_uid] = replace(row, template=template, layers=tuple(i + offset for i in layers))
        return result

    def layer_key(self, template: str, layer: int) -> tuple:
        """The values a template's per-layer dims take at ``layer`` (empty when it has none).

        A per-layer dim is a fill dim reading ``layer`` (in the template's fill or a slot fill it
        can reach); layers of a template with equal keys form one group, walked once. The key is
        evaluated at the config's numbers, so the grouping is the same in both bindings."""
        dims = self._per_layer_dims(template)
        if not dims:
            return ()
        names = {**self.numeric_dims, "layer": sympy.Integer(layer)}
        return tuple(self._eval(text, expr.Scope(names, self.config,
                                                 "a dim that reads `layer` may name model dims, `layer` "
                                                 "and config.<field>"), where)
                     for text, where in dims)

    def _per_layer_dims(self, template: str) -> list[tuple[Any, Where]]:
        cached = self._layer_dims_cache.get(template)
        if cached is not None:
            return cached
        found: list[tuple[Any, Where]] = []
        seen: set[int] = set()

        def visit(fill: Fill, slots: Mapping[str, Fill]) -> None:
            if id(fill) in seen:
                return
            seen.add(id(fill))
            for key, text in fill.dims.items():
                at = fill.where.at(f"dims.{key}")
                if "layer" in self._names_in(text, at):
                    found.append((text, at))
            inner = {**slots, **fill.slots}
            for sub in inner.values():
                visit(sub, inner)

        visit(self.model.templates[template], self.model.slots)
        self._layer_dims_cache[template] = found
        return found

    def _rollback(self, mark) -> None:
        rows, components, n_caches, values = mark
        for uid in set(self.rows) - rows:
            del self.rows[uid]
        for uid in set(self.components) - components:
            del self.components[uid]
        del self.caches[n_caches:]
        self.values = values

    def walk_reads(self, node: NodeSpec, scope: _Scope, uid: str) -> Tensor:
        ctx = self.layer_ctx
        if ctx is None:
            raise SpecError(node.where, f"`reads: {node.target}` outside a layer stack",
                            "streams cross the layers of a `repeat:` node; read the value with `in:` here")
        spec = ctx.spec(node)
        tensor, source, dims = ctx.read(spec, node, uid)
        read = NodeSpec(node.name, "op", "stream_read", node.where, attrs={"take": node.take}, dims=dims,
                        role=node.role, src=node.src)
        return self.walk_op(read, [(tensor, source)], scope, uid)

    def _template_for(self, node: NodeSpec, layer: int) -> str:
        schedule = node.schedule
        where = node.where.at("schedule")
        if schedule.by is not None:
            values = self._eval(schedule.by, expr.Scope({}, self.config), where.at("by"))
            # a list of per-layer values, or a string of one character per layer (Nemotron-H's
            # hybrid_override_pattern "M-M*...": M Mamba2, * attention, - MLP, E MoE)
            if not isinstance(values, (list, str)) or layer >= len(values):
                raise SpecError(where.at("by"), f"{schedule.by} has no entry for layer {layer}",
                                "the per-layer list must cover every repeated layer")
            key = values[layer]
            if isinstance(key, (list, dict)) or key not in schedule.mapping:
                raise SpecError(where.at("map"), f"layer {layer} is {key!r}, which the map does not cover",
                                f"add `{key}: <template>` to the map")
            return schedule.mapping[key]
        for rule in schedule.rules:
            if rule.when is None:
                return rule.template
            hit = self._eval(rule.when, expr.Scope({"layer": layer}, self.config,
                                                   "schedule conditions read `layer` and config.<field>"),
                             rule.where.at("when"))
            if not isinstance(hit, bool):
                raise SpecError(rule.where.at("when"), "schedule `when:` must be a condition")
            if hit:
                return rule.template
        raise SpecError(where, f"no schedule rule matches layer {layer}",
                        "end the list with a rule without `when:`")


class Walker(_OpRows, _Components, _LayerStacks):
    """One walk of one model under one binding: binds the dims, walks every stack's graph node by
    node and collects the rows of an :class:`Analysis`. Its three jobs beyond the graph walk are
    the mixins above: op rows (:class:`_OpRows`), component calls (:class:`_Components`) and layer
    stacks with their schedules, templates and streams (:class:`_LayerStacks`)."""

    def __init__(self, corpus: Corpus, model: ModelSpec, binding: Binding):
        self.corpus = corpus
        self.model = model
        self.binding = binding
        self.rows: dict[str, NodeRow] = {}
        self.components: dict[str, ComponentRow] = {}
        self.caches: list[CacheRow] = []
        self.streams: list[StreamRow] = []
        self.stack_values: dict = {}
        self.layer_ctx: _LayerStreams | None = None
        self.layer_index: int | None = None   # the stack-local layer a group is walked at
        self._layer_dims_cache: dict[str, list] = {}
        self.values: dict[str, sympy.Expr] = {}
        self.config_reads: set[tuple] = set()
        scenario = {name: symbols.dim(name) for name in symbols.SCENARIO_DIMS}
        scenario.update(binding.scenario)
        self.scenario = scenario

    # -- config and dims ------------------------------------------------------------------------
    def config(self, path: tuple) -> Any:
        value: Any = self.model.snapshot.fields
        for key in path:
            if isinstance(key, int):
                # a per-layer list, or a string of one character per layer (schedule `by:` reads both)
                if not isinstance(value, (list, str)) or key >= len(value):
                    raise KeyError(key)
                value = value[key]
            else:
                if not isinstance(value, dict) or key not in value:
                    raise KeyError(key)
                value = value[key]
        if isinstance(value, NonFinite):   # NaN/Infinity in a config.json field a spec reads
            raise value.error()
        self.config_reads.add(path)
        return value

    def model_dims(self) -> dict[str, Any]:
        """Bind the model's dims: numbers from config, or one symbol per dim."""
        spec = self.model
        numeric: dict[str, Any] = {}
        for name, text in spec.dims.items():
            where = Where(spec.where.file, spec.dims.line_of(name), f"dims.{name}")
            if name not in self.corpus.dims:
                raise SpecError(where, f"dim {name!r} is not in the dims table",
                                "add it to corpus/dims.yaml with its kind and shard world, or use a known dim")
            value = self._eval(text, expr.Scope(numeric, self.config), where)
            if not (isinstance(value, sympy.Integer) and value > 0):
                raise SpecError(where, f"dim {name!r} evaluates to {value}, not a positive integer",
                                "use // for integer division or check the config field")
            numeric[name] = value
        self.numeric_dims = numeric
        if self.binding.numeric:
            self.values.update(numeric)
            return dict(numeric)
        symbolic = {name: symbols.dim(name) for name in numeric}
        self.values.update(symbolic)
        return symbolic

    def _eval(self, text: Any, scope: expr.Scope, where: Where) -> Any:
        try:
            return expr.evaluate(text, scope)
        except expr.ExprError as exc:
            raise SpecError(where, str(exc), exc.hint) from None

    def names(self, scope: _Scope) -> dict[str, Any]:
        names = dict(self.scenario)
        names.update(scope.dims)
        names.update({k: v for k, v in scope.options.items() if v is not None})
        return names

    # -- stacks -----------------------------------------------------------------------------------
    def walk(self) -> Analysis:
        dims = self.model_dims()
        where = self.model.where
        max_ctx = self._eval(self.model.max_context, expr.Scope(dims, self.config), where.at("max_context"))
        if self.binding.numeric and not (isinstance(max_ctx, sympy.Integer) and max_ctx > 0):
            raise SpecError(where.at("max_context"), f"max_context evaluates to {max_ctx!r}, not a positive integer",
                            "write e.g. config.max_position_embeddings")
        for stack in self.model.stacks.values():
            self.walk_stack(stack, dims)
        return Analysis(self.model.model_id, self.binding.mode, self.rows, self.components,
                        tuple(self.caches), dict(self.values), dict(self.scenario), max_ctx,
                        tuple(self.model.stacks), tuple(self.streams))

    def walk_stack(self, stack: StackSpec, dims: dict[str, Any]) -> None:
        scope = _Scope(dims=dims, options={}, slots=self.model.slots, repeat=ONE, instances=ONE,
                       active=ONE, stacked=False, module="", renames={}, role="model",
                       component=f"stack:{stack.name}", uid=stack.name, stack=stack.name,
                       phases=PHASES, where=stack.where)
        values = {}
        for name, axes in stack.inputs.items():
            tensor_axes = []
            for axis in axes:
                if not isinstance(axis, str) or (axis not in scope.dims and axis not in self.scenario):
                    raise SpecError(stack.where.at(f"inputs.{name}"), f"unknown dim {axis!r}",
                                    "use batch, seq or a bound dim")
                tensor_axes.append(Axis(axis, self.names(scope)[axis]))
            values[name] = (Tensor(tuple(tensor_axes)), f"{stack.name}:{name}")
        self.components[stack.name] = ComponentRow(stack.name, scope.component, "model", stack.name, ONE, ONE, ONE)
        self.stack_values = values   # append streams may archive a stack node (`from:`)
        self.walk_graph(stack.graph, values, scope)

    # -- graphs -----------------------------------------------------------------------------------
    def walk_graph(self, graph: Mapping[str, NodeSpec], values: dict, scope: _Scope,
                   fallback: Mapping | None = None, replaced: set | None = None,
                   switched_off: Mapping[str, str] | None = None) -> dict:
        """Walk nodes in dependency order; ``values`` maps a name to (Tensor or dict, producer uid).

        ``switched_off``: the main graph's switched-off nodes, so a decode variant's ``a|b`` picks
        the same alternative the main graph did. The graph's own are left in ``self.last_off``."""
        pending = dict(graph)
        bypass: dict[str, str] = dict(switched_off or {})
        while pending:
            progressed = False
            for name, node in list(pending.items()):
                alternatives = [a for r in node.inputs for a in r.split("|")]
                if any(a.split(".")[0] in pending for a in alternatives):
                    continue
                refs = [self._base(r, bypass) for r in alternatives]
                if any(r not in values and r in pending for r in refs):
                    continue
                del pending[name]
                progressed = True
                if node.when is not None and not self._when(node, scope):
                    if node.kind == "reads":
                        bypass[name] = ""   # a switched-off reader has no value; `a|reader` skips it
                        continue
                    if not node.inputs:
                        raise SpecError(node.where.at("when"), "a node with no input cannot be switched off",
                                        "give it an `in:` (it then passes its first input through) or remove `when:`")
                    bypass[name] = node.inputs[0]
                    continue
                inputs = [self.resolve(self._pick(r, bypass), values, fallback, bypass, node)
                          for r in node.inputs]
                uid = f"{scope.uid}/{name}" + ("@decode" if replaced and name in replaced else "")
                values[name] = (self.walk_node(node, inputs, scope, uid), uid)
                if node.stream_out and self.layer_ctx is not None and "prefill" in scope.phases:
                    self.layer_ctx.publish(node, values[name])
            if not progressed:
                raise SpecError(next(iter(pending.values())).where, "the graph has a cycle",
                                "nodes in a cycle: " + ", ".join(pending))
        for name in bypass:
            base = self._base(name, bypass)
            if base in values:
                values[name] = values[base]
        self.last_off = bypass
        return values

    @staticmethod
    def _pick(ref: str, bypass: Mapping[str, str]) -> str:
        """``a|b``: the first alternative whose node is switched on (or is not a node here)."""
        if "|" not in ref:
            return ref
        options = ref.split("|")
        for option in options:
            if option.split(".")[0] not in bypass:
                return option
        return options[-1]

    @staticmethod
    def _base(ref: str, bypass: Mapping[str, str]) -> str:
        base = ref.split(".")[0]
        while base in bypass:
            base = bypass[base].split(".")[0]
        return base

    def resolve(self, ref: str, values: Mapping, fallback: Mapping | None, bypass: Mapping[str, str],
                node: NodeSpec) -> tuple[Tensor, str]:
        written = ref
        while ref.split(".")[0] in bypass:
            ref = bypass[ref.split(".")[0]]
        if not ref:
            raise SpecError(node.where.at("in"), f"`in: {written}` is a stream reader switched off here",
                            f"write `in: <node>|{written}` so the node is used where the reader is off")
        base, _, sub = ref.partition(".")
        source = values if base in values else (fallback or {})
        if base not in source:
            raise SpecError(node.where.at("in"), f"`in: {ref}` names no node or input")
        value, uid = source[base]
        if isinstance(value, dict):
            if not sub:
                if len(value) != 1:
                    raise SpecError(node.where.at("in"), f"{base!r} has several outputs",
                                    "write one of: " + ", ".join(f"{base}.{k}" for k in value))
                sub = next(iter(value))
            if sub not in value:
                raise SpecError(node.where.at("in"), f"{base!r} has no output {sub!r}",
                                "use one of: " + ", ".join(value))
            return value[sub]
        if sub:
            raise SpecError(node.where.at("in"), f"{base!r} has a single output; write `in: {base}`")
        return value, uid

    def _when(self, node: NodeSpec, scope: _Scope) -> bool:
        unknown = ("a node of a model's stack has no options to test; remove `when:`"
                   if scope.component.startswith("stack:")
                   else f"`when:` tests options; declare it under options: in {scope.where.file}")
        value = self._eval(node.when, expr.Scope(scope.options, unknown=unknown), node.where.at("when"))
        if not isinstance(value, bool):
            raise SpecError(node.where.at("when"), "`when:` must be a condition on options",
                            "e.g. `when: qk_norm` or `when: not fused_gate_up`")
        return value

    def walk_node(self, node: NodeSpec, inputs: list, scope: _Scope, uid: str) -> Any:
        if node.kind == "op":
            return self.walk_op(node, inputs, scope, uid)
        if node.kind == "repeat":
            return self.walk_repeat(node, inputs, scope, uid)
        if node.kind == "reads":
            return self.walk_reads(node, scope, uid)
        if node.kind == "slot":
            fill = scope.slots.get(node.target)
            if fill is None:
                raise SpecError(node.where, f"slot {node.target!r} is not filled",
                                f"add slots: {{{node.target}: <component>}} to {self.model.where.file}")
            return self.walk_component(node, fill, inputs, scope, uid)
        fill = Fill(node.target, node.where)
        return self.walk_component(node, fill, inputs, scope, uid)


class _Defer(Exception):
    """A layer group reads an internal stream whose first producer is not walked yet."""


class _LayerStreams:
    """The streams of one layer stack while its layer groups are walked (engine.spec.streams has the rules).

    Records every publication (layer, node uid) and every reader; :meth:`finish` resolves them
    into :class:`StreamRow` values. Layer indices here count from 0 within the stack.
    """

    def __init__(self, walker: "Walker", node: NodeSpec, uid: str, inputs: list, templates: list[str],
                 scope: _Scope):
        self.w, self.node, self.uid, self.templates = walker, node, uid, templates
        self.stack = scope.stack
        self.specs: Mapping[str, StreamSpec] = node.streams
        self.carried = inputs[0]
        self.publications: dict[str, list[tuple[int, str, tuple]]] = {s: [] for s in self.specs}
        self.first_value: dict[str, tuple] = {}
        self.readers: dict[str, list] = {s: [] for s in self.specs}
        for s in self.specs.values():     # a stack node's elements are listed one by one
            if s.kind == "append" and s.count is not None:
                _check_count(self._hit(s.count, None), MAX_LAYERS, s.where.at("count"), f"stream {s.name!r} archives",
                             "elements", "a stream's elements are listed one by one")
        self.points = {s.name: stream_rules.archive_points(s, len(templates), self._hit)
                       for s in self.specs.values() if s.kind == "append"}
        self.reads = {t: self._scan(walker.model.templates[t], walker.model.slots, set())
                      for t in dict.fromkeys(templates)}
        self.each_index: dict[str, dict[int, int]] = {}
        for name in self.points:
            layers = [i for i, t in enumerate(templates) if (name, "each") in self.reads[t]]
            self.each_index[name] = {layer: k for k, layer in enumerate(layers)}
        self.layers: list[int] = []
        self.pending: list = []
        self.deferred: tuple | None = None

    # -- layer plan ---------------------------------------------------------------------------------
    def _hit(self, condition: Any, layer: int | None) -> Any:
        scope = expr.Scope({"layer": layer} if layer is not None else dict(self.w.numeric_dims), self.w.config,
                           "stream conditions read `layer`, dims and config.<field>")
        value = self.w._eval(condition, scope, self.node.where.at("streams"))
        if layer is not None and not isinstance(value, bool):
            raise SpecError(self.node.where.at("streams"), f"`{condition}` is not a condition on `layer`",
                            'write e.g. `after: "layer % 4 == 3"`')
        return value

    def _scan(self, fill: Fill, slots: Mapping, seen: set) -> set[tuple[str, str]]:
        """(stream, take) of every ``reads`` node a template can reach (through components and slots)."""
        spec = self.w.corpus.component_for(self.w.model, fill.component, fill.where)
        slots = {**slots, **fill.slots}
        graphs = [spec.graph] + ([spec.decode_variant.graph] if spec.decode_variant else [])
        out = set()
        for graph in graphs:
            for n in graph.values():
                if n.kind == "reads":
                    out.add((n.target, n.take))
                elif n.kind == "component" and n.target not in seen:
                    out |= self._scan(Fill(n.target, n.where), slots, seen | {n.target})
                elif n.kind == "slot" and n.target in slots:
                    out |= self._scan(slots[n.target], slots, seen)
        return out

    def groups(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(template, layers, tag) in order of first layer: a template's layers split by the history
        length of the append streams it reads whole (``all`` / ``concat``) and by the values of its
        per-layer dims (:meth:`_LayerStacks.layer_key`); layers alike in both are walked once."""
        plan: dict[tuple, list[int]] = {}
        for layer, template in enumerate(self.templates):
            history = tuple(stream_rules.visible(self.points[s], layer)
                            for s, take in sorted(self.reads[template])
                            if take in ("all", "concat") and s in self.points)
            plan.setdefault((template, history, self.w.layer_key(template, layer)), []).append(layer)
        # a template whose per-layer dims split it: each group is tagged by its first layer
        sizes: dict[str, set] = {}
        for t, _, key in plan:
            sizes.setdefault(t, set()).add(key)
        groups = []
        for (t, h, _), layers in plan.items():
            tag = ["h" + "_".join(map(str, h))] if h else []     # part of a symbol's name: no '.'
            if len(sizes[t]) > 1:
                tag.append(f"L{layers[0]}")
            groups.append((t, tuple(layers), "_".join(tag)))
        return groups

    # -- while a group is walked --------------------------------------------------------------------
    def start(self, template: str, layers: tuple[int, ...]) -> None:
        self.template, self.layers, self.pending, self.group_pubs = template, layers, [], {}
        self.w.layer_ctx = self

    def abandon(self) -> None:
        self.w.layer_ctx = None

    def done(self) -> None:
        self.w.layer_ctx = None
        for kind, name, item in self.pending:
            (self.publications if kind == "pub" else self.readers)[name].append(item)
            if kind == "pub":
                self.first_value.setdefault(name, item[2])

    def publish(self, node: NodeSpec, value: tuple) -> None:
        name = node.stream_out
        if name not in self.specs or self.specs[name].kind != "internal":
            return   # a reusable component may publish a stream this stack does not carry
        uid = value[1]
        if name in self.group_pubs and self.group_pubs[name] != uid:
            raise SpecError(node.where.at("stream_out"), f"stream {name!r} has two producers in template "
                            f"{self.template!r}: {self.group_pubs[name]} and {uid}",
                            "publish each internal stream from one node per layer")
        self.group_pubs[name] = uid
        for layer in self.layers:
            self.pending.append(("pub", name, (layer, uid, value)))

    def spec(self, node: NodeSpec) -> StreamSpec:
        spec = self.specs.get(node.target)
        if spec is None:
            raise SpecError(node.where.at("reads"), f"stream {node.target!r} is not declared",
                            f"declare it under {self.node.name}.streams (declared: {', '.join(self.specs)})")
        if spec.kind == "carried":
            raise SpecError(node.where.at("reads"), f"{spec.name!r} is the carried stream",
                            "the carried stream is the layer's input: take it with `in: x`")
        if node.take not in TAKES[spec.kind]:
            raise SpecError(node.where.at("take"), f"`take: {node.take}` does not apply to {spec.kind} "
                            f"stream {spec.name!r}", "use one of: " + ", ".join(TAKES[spec.kind]))
        return spec

    def read(self, spec: StreamSpec, node: NodeSpec, uid: str) -> tuple[Tensor, str, dict]:
        """The value a reads node takes in the current group, its source uid and the op's dims."""
        if spec.kind == "internal":
            first = self.first_value.get(spec.name) or next(
                (v for k, n, v in self.pending if k == "pub" and n == spec.name), None)
            if first is None:
                self.deferred = (spec, node)
                raise _Defer()
            self.pending.append(("read", spec.name, (list(self.layers), uid, node.take, node.where)))
            return first[0], first[1], {}
        value = self._element(spec)
        points = self.points[spec.name]
        if node.take == "each":
            index = self.each_index[spec.name]
            if len(points) < len(index):
                raise SpecError(node.where.at("take"), f"`take: each` on stream {spec.name!r}: {len(index)} "
                                f"layers read it but it has {len(points)} elements",
                                "archive one element per reading layer, or read fewer layers")
            for layer in self.layers:
                k = index[layer]
                if points[k] > layer:
                    raise SpecError(node.where.at("take"), f"`take: each` on stream {spec.name!r}: layer "
                                    f"{layer} takes element {k}, which is archived after it runs",
                                    "archive the element earlier (`before:`/`after:`) or read it later")
            dims = {}
        else:   # value (the latest element), all, concat: the group's layers see the same history
            n = stream_rules.visible(points, self.layers[0])
            if n == 0:
                raise SpecError(node.where.at("take"), f"layer {self.layers[0]} reads stream {spec.name!r} "
                                "before any element is archived", "archive before this layer or read later")
            dims = {} if node.take == "value" else {"count": n}
        self.pending.append(("read", spec.name, (list(self.layers), uid, node.take, node.where)))
        return value[0], value[1], dims

    def _element(self, spec: StreamSpec) -> tuple:
        if spec.source in self.specs and self.specs[spec.source].kind == "carried":
            return self.carried
        if spec.source in self.w.stack_values:
            return self.w.stack_values[spec.source]
        raise SpecError(spec.where.at("from"), f"stream {spec.name!r} archives {spec.source!r}, which is "
                        "neither the carried stream nor a node walked before the layer stack",
                        "write `from: <carried stream>` or list the stack node before the layers")

    def unproduced(self) -> SpecError:
        spec, node = self.deferred
        return SpecError(node.where.at("reads"), f"no layer publishes stream {spec.name!r}",
                         f"publish it with `stream_out: {spec.name}` on a node of an earlier layer")

    # -- after the stack ------------------------------------------------------------------------------
    def finish(self) -> list[StreamRow]:
        rows = []
        layer_of = lambda i: self.templates[i]
        for spec in self.specs.values():
            uid = f"{self.uid}~{spec.name}"
            if spec.kind == "carried":
                rows.append(StreamRow(uid, spec.name, "carried", self.stack, spec.src, spec.where,
                                      producers=((-1, self.carried[1]),)))
                continue
            readers = self.readers[spec.name]
            if spec.kind == "internal":
                pubs = [(l, u) for l, u, _ in self.publications[spec.name]]
                self._same_shapes(spec)
                rows.append(stream_rules.resolve_internal(spec, uid, self.stack, pubs, readers, layer_of))
                continue
            points = self.points[spec.name]
            source = self._element(spec)[1]
            producers = tuple((math.floor(p), source) for p in points)
            pairs = []
            for layers, ruid, take, _ in readers:
                for layer in layers:
                    seen = [math.floor(p) for p in points if p < layer]
                    chosen = ([seen[self.each_index[spec.name][layer]]] if take == "each"
                              else seen[-1:] if take == "value" else seen)
                    pairs.extend((p, layer, ruid) for p in chosen)
            rows.append(StreamRow(uid, spec.name, "append", self.stack, spec.src, spec.where,
                                  tuple(dict.fromkeys(t for _, _, t, _ in readers)), producers,
                                  tuple(sorted((l, u) for ls, u, _, _ in readers for l in ls)),
                                  tuple(sorted(pairs)), tuple(dict.fromkeys(u for _, u, _, _ in readers))))
        return rows

    def _same_shapes(self, spec: StreamSpec) -> None:
        if not self.w.binding.numeric:
            return
        shapes = {v[0].sizes for _, _, v in self.publications[spec.name]}
        if len(shapes) > 1:
            raise SpecError(spec.where, f"stream {spec.name!r} is published with different shapes: "
                            + ", ".join(str(s) for s in shapes), "every producer must publish the same shape")


def _join(prefix: str, segment: str) -> str:
    if not segment:
        return prefix
    return f"{prefix}.{segment}" if prefix else segment


def _single(value: Any) -> tuple[Tensor, str]:
    if isinstance(value, dict):
        return next(iter(value.values()))
    return value


def walk_model(corpus: Corpus, model: ModelSpec, binding: Binding) -> Analysis:
    """Evaluate ``model`` under ``binding`` into :class:`Analysis` tables."""
    return Walker(corpus, model, binding).walk()
