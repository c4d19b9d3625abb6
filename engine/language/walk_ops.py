"""The walk's op rows: an op call -> its node row (shapes, FLOPs, parameters, weight leaves).

Layer: engine.language. :class:`_OpRows` is a mixin of :class:`engine.language.evaluate.Walker`; it reads
the walker's scope, binding and rows (engine.language.walk_records).
"""
from __future__ import annotations


from collections.abc import Mapping
from typing import Any

import sympy


from engine.language import expr, symbols
from engine.language.dtypes import CACHE_DTYPE_ALIASES, CACHE_DTYPE_BYTES
from engine.language.errors import SpecError
from engine.language.ir import CacheSpec, ComponentSpec, NodeSpec
from engine.language.ops import OPS, Leaf, OpCall
from engine.language.shapes import Tensor
from engine.language.walk_records import CacheRow, LeafRow, NodeRow, _Scope, _join, _simplify



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
