"""Communication insertion: the collectives placement inserts where a consumer needs a layout its
producer does not have (a mixin of :class:`engine.deploy.placement.Placer`).

Layer: engine.deploy. Partial -> Replicate is an all-reduce (a reduce-scatter when the target splits
an axis over the same group), Shard -> Replicate an all-gather, Shard(a) -> Shard(b) an all-to-all;
splits only the target has are local slices. Invariant: one reshard per (source, target) per placer
(``self.redist``), and every inserted step is appended to the placer's program in order.
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from engine.language.evaluate import NodeRow
from engine.language.shapes import Tensor
from engine.deploy.device_program import ZERO, Layout, Step, layout_of
from engine.deploy.parallel import Group
from engine.deploy.placement_arith import _prod


class _Collectives:
    """Inserting collectives and reshards into the placer's program."""

    def collective(self, source: Step, op: str, layout: Layout, groups: tuple[Group, ...],
                   comm: sympy.Expr, consumer: NodeRow, repeat: sympy.Expr | None = None,
                   tensor: Tensor | None = None, routing=None, element_bytes: int | None = None) -> Step:
        """Insert a collective after ``source`` producing ``layout``; ``comm`` bytes sent per device;
        ``element_bytes`` of its output (default the activation dtype's)."""
        tensor = tensor or source.out
        out_bytes = self.local(tensor, layout) * (element_bytes or self.types.act_bytes)
        name = "+".join(g.name for g in groups)
        uid = f"{source.uid}>{op}[{name}]"
        step = Step(uid, f"{op}({name})", op, "comm", source.role if source.kind != "input" else consumer.role,
                    source.component or consumer.component, source.component_uid or consumer.component_uid,
                    repeat if repeat is not None else (source.repeat if source.kind != "input" else consumer.repeat),
                    (source.uid,), ZERO, source.out_read + out_bytes, ZERO, comm, "bf16", layout, tensor,
                    out_bytes, group=name, link=self.mesh.link(groups), written=out_bytes,
                    last_token=source.last_token, collective=op, routing=routing, **self.mesh.extent(groups))
        self.steps.append(step)
        self.layouts[uid] = layout
        return step

    def reshard(self, source: Step, target: Layout, consumer: NodeRow) -> Step:
        """Bring ``source``'s output to ``target`` (free where only new splits are added)."""
        have = layout_of(source)
        if have == target:
            return source
        key = (source.uid, target)
        if key in self.redist:
            return self.redist[key]
        step = source
        tensor = source.out
        # 1. partial sums: reduce (scatter when the target splits an axis over the same group)
        pending = [g for g in have.partial if g not in target.partial]
        if pending:
            groups = self.mesh.canonical(pending)
            n = _prod(g.expr for g in groups)
            scatter = [i for i, gs in enumerate(target.shards) if set(groups) <= set(gs)
                       and not set(groups) & set(have.shards[i])]
            shards = list(have.shards)
            # the partial sums travel at DeviceTypes.partial_bytes (BF16 under FP8 activations)
            wire = self.local(tensor, have) * self.types.partial_bytes
            if scatter:
                shards[scatter[0]] = have.shards[scatter[0]] + groups
                op, comm = "reduce_scatter", (n - 1) / n * wire
            else:
                op, comm = "all_reduce", 2 * (n - 1) / n * wire
            layout = Layout(tuple(shards), tuple(g for g in have.partial if g not in groups))
            step = self.collective(step, op, layout, groups, comm, consumer, element_bytes=self.types.partial_bytes)
            have = layout
        # 2. splits the target does not have: move them to another axis, or gather them
        for i, gs in enumerate(have.shards):
            for g in gs:
                if g in target.shards[i]:
                    continue
                dest = next((j for j, ts in enumerate(target.shards) if g in ts and g not in have.shards[j]), None)
                shards = [tuple(x for x in s if x != g) for s in have.shards]
                if dest is not None:
                    shards[dest] = shards[dest] + (g,)
                    op, comm = "all_to_all", (g.expr - 1) / g.expr * step.out_read
                else:
                    op, comm = "all_gather", (g.expr - 1) * step.out_read
                layout = Layout(tuple(shards), have.partial)
                step = self.collective(step, op, layout, (g,), comm, consumer)
                have = layout
        # 3. splits only the target has are local slices (no traffic): relabel the layout
        if have != target:
            step = replace(step, layout=target, out_read=self.local(tensor, target) * self.types.act_bytes)
        self.redist[key] = step
        return step
