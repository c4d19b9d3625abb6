"""Placement rules of the op families that follow the tensor's layout: ``axis_map``, ``norm``,
``matmul`` and ``rows`` (a mixin of :class:`engine.deploy.placement.Placer`).

Layer: engine.deploy. Each ``place_<family>`` method places one row of that family: it reads its
inputs' layouts, inserts the reshards it needs (``self.reshard``) and emits the step
(``self.emit``); the placer holds the program and the sizes through a layout. Invariant: a rule
reads the placer's mesh, types and decisions only through the placer, so one rule serves the
numeric and the symbolic binding.
"""
from __future__ import annotations

from typing import Callable
import operator

import sympy

from engine.language.evaluate import NodeRow
from engine.language.ops import OPS
from engine.language.shapes import Axis, Carried, Merged, Split
from engine.deploy.device_program import ONE, ZERO, Layout, Step, layout_of
from engine.deploy.parallel import Group
from engine.deploy.placement_arith import _add, _arith, _div, _mul, _prod


class _LayoutRules:
    """Placement rules of the families that follow the tensor's layout: ``axis_map`` (the default),
    ``norm``, ``matmul`` (weights sharded by their worlds) and ``rows`` (gathers of rows)."""

    # -- placement families --------------------------------------------------------------------------
    def resolve_partials(self, row: NodeRow, inputs: list[Step]) -> list[Step]:
        return [self.reshard(s, Layout(layout_of(s).shards), row) if layout_of(s).partial else s
                for s in inputs]

    def leaf_bytes(self, row: NodeRow, axis_groups: Callable[[Axis, int], tuple]) -> tuple[sympy.Expr, str]:
        """Weight bytes this device reads per call, and the compute class of the matmul weight."""
        stored, dtype = ZERO, "bf16"
        local_instances, touched = self.instances(row)
        for leaf, per_instance, compute in self.weights(row):
            split = _prod(self.factor(a, axis_groups(a, i)) for i, a in enumerate(leaf.axes))
            stored = _add(stored, _mul(_div(per_instance, split), local_instances))
            if leaf.name == "weight":
                dtype = compute
        self.stored[row.uid] = stored
        return _mul(stored, touched), dtype

    def instances(self, row: NodeRow) -> tuple[sympy.Expr, sympy.Expr]:
        """Expert instances on this device, and the share of them one step's tokens touch."""
        if row.instances == 1 or self.decide(row.instances) == 1:
            return ONE, ONE
        ep = self.mesh.world_group("ep", "experts")
        local = _div(row.instances, ep.expr if ep else ONE)
        tokens = next((t for uid, t in sorted(self.routing_tokens.items(), key=lambda kv: -len(kv[0]))
                       if row.uid.startswith(uid + "/")), None)
        if tokens is None:
            return local, ONE
        # Tokens choose `active` of `instances` experts: an expert is idle with probability
        # (1 - active/instances)^tokens under uniform routing (expected value).
        # (the same expression through the memo: every config places the same expert rows)
        idle = _arith(operator.pow, _arith(operator.sub, 1, _div(row.active, row.instances)), tokens)
        return local, _arith(operator.sub, 1, idle)

    def place_axis_map(self, row: NodeRow, inputs: list[Step], whole_last: bool = False) -> None:
        op = OPS[row.op]
        layouts = [layout_of(s) for s in inputs]
        # Partial + Partial over the same group is still a partial sum: one reduction serves both
        # (MoE routed + shared experts), unless a producer's value is also read elsewhere.
        same_partial = len(layouts) > 1 and row.op == "add" and layouts[0].partial and \
            all(l.partial == layouts[0].partial for l in layouts) and \
            all(self.consumers.get(s.uid, 0) == 1 for s in inputs)
        # A partial sum times a value that is whole on every device is still a partial sum
        # (sum_i g p_i = g sum_i p_i): a gated shared expert's output stays partial until the
        # add beside the routed experts reduces both at once.
        scaled = [i for i, l in enumerate(layouts) if l.partial]
        scaled_partial = row.op == "mul" and len(scaled) == 1 and \
            self.consumers.get(inputs[scaled[0]].uid, 0) == 1 and \
            not set(layouts[scaled[0]].partial) & layouts[1 - scaled[0]].groups()
        if not same_partial and not scaled_partial:
            inputs = self.resolve_partials(row, inputs)
        if whole_last:
            have = layout_of(inputs[0])
            if have.shards[-1]:
                inputs[0] = self.reshard(inputs[0], Layout(have.shards[:-1] + ((),), have.partial), row)
        if len(inputs) > 1 and (op.shape_kind == "broadcast" or row.op == "concat"):
            # an operand's axis of size 1 broadcast to a larger output axis is never split:
            # every device needs its whole (one) element
            def broadcast(i: int, j: int) -> bool:
                return row.in_shapes[i].axes[j].size == 1 and row.out.axes[j].size != 1

            full = [i for i in range(len(inputs)) if op.shape_kind != "broadcast"
                    or not any(broadcast(i, j) for j in range(row.out.rank))] or list(range(len(inputs)))
            best = max(full, key=lambda i: sum(len(gs) for gs in layout_of(inputs[i]).shards))
            target = layout_of(inputs[best])

            def wanted(i: int, s: Step) -> Layout:
                if row.op == "concat":
                    shards = target.shards[:-1] + (layout_of(s).shards[-1],)
                else:
                    shards = tuple(() if broadcast(i, j) else gs for j, gs in enumerate(target.shards))
                return Layout(shards, layout_of(s).partial)

            inputs = [s if i == best else self.reshard(s, wanted(i, s), row) for i, s in enumerate(inputs)]
        layouts = [layout_of(s) for s in inputs]
        shards = []
        for j, src in enumerate(row.axis_map.outputs):
            if isinstance(src, Carried):
                shards.append(layouts[src.source].shards[src.axis])
            elif isinstance(src, Split):
                shards.append(layouts[src.source].shards[src.axis] if src.part == 0 else ())
            elif isinstance(src, Merged):
                shards.append(layouts[src.source].shards[src.axes[0]])
            elif op.shape_kind in ("axis_select", "axis_concat") and j == row.out.rank - 1:
                shards.append(layouts[0].shards[-1])
            else:
                shards.append(())
        partial = tuple(g for s, a in row.axis_map.contracted for g in layouts[s].shards[a])
        kept = layouts[0].partial if same_partial else layouts[scaled[0]].partial if scaled_partial else ()
        # work divides over the splits and the partial sums this op creates (contracted axes); a
        # partial sum it only carries is a whole-size tensor on every device
        work = Layout(tuple(shards), self.mesh.canonical(partial))
        partial = self.mesh.canonical(partial + kept)
        names = {a.name: gs for l, s in zip(layouts, inputs) for a, gs in zip(s.out.axes, l.shards)}
        weights = self.leaf_bytes(row, lambda a, i: names.get(a.name, ()))
        self.emit(row, inputs, Layout(tuple(shards), partial), weights=weights, work=work)

    def place_norm(self, row: NodeRow, inputs: list[Step]) -> None:
        self.place_axis_map(row, inputs, whole_last=True)

    def weight_groups(self, row: NodeRow) -> dict[str, tuple[Group, ...]]:
        """Axis name -> groups, for the weight axes ``weight_axes`` declares sharded."""
        out = {}
        for param, world in row.weight_axes.items():
            group = self.mesh.world_group(world, self.region(row))
            if group is not None:
                out[row.dim_names[param]] = (group,)
        return out

    def place_matmul(self, row: NodeRow, inputs: list[Step]) -> None:
        inputs = self.resolve_partials(row, inputs)
        x = inputs[0]
        have = layout_of(x)
        by_name = self.weight_groups(row)
        w_in = by_name.get(row.dim_names["in"], ())
        w_out = by_name.get(row.dim_names["out"], ())
        if have.shards[-1] and have.shards[-1] != w_in:
            x = self.reshard(x, Layout(have.shards[:-1] + ((),)), row)   # gather (or move) the contracted axis
            have = layout_of(x)
        x_axes = {a.name: gs for a, gs in zip(x.out.axes, have.shards)}
        shards = tuple(have.shards[:-1]) + (w_out,)
        partial = self.mesh.canonical(w_in)

        def groups(axis: Axis, index: int) -> tuple:
            if axis.name == row.dim_names["in"]:
                return w_in
            if axis.name == row.dim_names["out"]:
                return w_out
            return x_axes.get(axis.name, ())   # head_linear: per-head weights follow the heads

        self.emit(row, [x], Layout(shards, partial), weights=self.leaf_bytes(row, groups))

    def place_rows(self, row: NodeRow, inputs: list[Step]) -> None:
        ids = inputs[0]
        by_name = self.weight_groups(row)
        vocab = by_name.get(row.dim_names["vocab"], ())
        layout = Layout(layout_of(ids).shards + ((),), self.mesh.canonical(vocab))
        weights = self.leaf_bytes(row, lambda a, i: vocab if a.name == row.dim_names["vocab"] else ())
        # a lookup reads one row per token, not the table
        step_weights = (self.local(row.out, layout) * self.types.act_bytes, weights[1])
        self.emit(row, [ids], layout, weights=step_weights)
