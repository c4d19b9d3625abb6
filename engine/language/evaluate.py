"""The walk: SpecIR -> Analysis tables. One walk, two bindings (numbers or sympy formulas).

Layer: engine.language. :func:`walk_model` expands a model's stacks, layer templates, slots and components
into primitive node rows keyed by a stable uid, computing shapes (with per-axis maps), FLOPs,
parameters and weight leaves for each, plus cache declarations. A layer template is walked once
and carries its layer count as ``repeat``; an expert component carries ``instances`` (experts
stored) and ``active`` (experts used per token). Whether values are numbers or formulas depends
only on the :class:`Binding`; the code path is the same, so a formula evaluated at the numeric
binding equals the number (tested for every node of every model).
"""
from __future__ import annotations


from collections.abc import Mapping
from typing import Any

import sympy


from engine.language import config_reads, expr, symbols
from engine.language.corpus import Corpus
from engine.language.errors import SpecError, Where
from engine.language.ir import Fill, ModelSpec, NodeSpec, StackSpec
from engine.language.shapes import Axis, Tensor
from engine.language.streams import StreamRow
from engine.language.yamlio import NonFinite
from engine.language.walk_records import (Analysis, Binding, CacheRow, ComponentRow, LeafRow, MAX_COPIES, MAX_INSTANCES, MAX_LAYERS, NodeRow, ONE, PHASES, _Scope, is_monomial)
from engine.language.walk_ops import _OpRows
from engine.language.walk_components import _Components
from engine.language.walk_stacks import _LayerStacks, _LayerStreams

#: the walk's public interface (the records live in engine.language.walk_records; importers read them here)
__all__ = ["Analysis", "Binding", "CacheRow", "ComponentRow", "LeafRow", "MAX_COPIES", "MAX_INSTANCES", "MAX_LAYERS",
           "NodeRow", "Walker", "is_monomial", "walk_model"]


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
        """The snapshot's field at ``path`` (KeyError when absent); reported to an open
        :func:`engine.language.config_reads.recording` either way."""
        return config_reads.noted(self.model.snapshot, path, self._config)

    def _config(self, path: tuple) -> Any:
        """:meth:`config` unreported: what the dims' binding texts read (their values stand for
        them where reads are compared, engine.batch.twins)."""
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
            value = self._eval(text, expr.Scope(numeric, self._config), where)
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


def walk_model(corpus: Corpus, model: ModelSpec, binding: Binding) -> Analysis:
    """Evaluate ``model`` under ``binding`` into :class:`Analysis` tables."""
    return Walker(corpus, model, binding).walk()
