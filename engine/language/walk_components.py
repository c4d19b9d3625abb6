"""The walk's component calls: options, dims, slots and the decode variant of a component.

Layer: engine.language. :class:`_Components` is a mixin of :class:`engine.language.evaluate.Walker`.
"""
from __future__ import annotations


from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import sympy


from engine.language import expr
from engine.language.errors import SpecError, Where
from engine.language.ir import ComponentSpec, Fill, NodeSpec
from engine.language.shapes import Tensor
from engine.language.walk_records import ComponentRow, MAX_COPIES, MAX_INSTANCES, _Scope, _check_count, _join, _single



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
