"""The walk's layer stacks: ``repeat:`` schedules, layer templates walked once with their count,
and the streams between layer groups (:class:`_LayerStreams`; the rules: engine.language.streams).

Layer: engine.language. :class:`_LayerStacks` is a mixin of :class:`engine.language.evaluate.Walker`.
"""
from __future__ import annotations


from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import sympy

import math

from engine.language import expr, streams as stream_rules, symbols
from engine.language.graph_load import TAKES
from engine.language.errors import SpecError, Where
from engine.language.ir import Fill, NodeSpec, StreamSpec
from engine.language.shapes import Tensor
from engine.language.streams import StreamRow
from engine.language.walk_records import MAX_LAYERS, _Defer, _Scope, _check_count, _join, _single



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


class _LayerStreams:
    """The streams of one layer stack while its layer groups are walked (engine.language.streams has the rules).

    Records every publication (layer, node uid) and every reader; :meth:`finish` resolves them
    into :class:`StreamRow` values. Layer indices here count from 0 within the stack.
    """

    def __init__(self, walker: Any, node: NodeSpec, uid: str, inputs: list, templates: list[str],
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
