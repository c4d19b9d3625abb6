"""Placement rules of the op families that bring their own parallelism: ``cache`` (split over cp),
``attention`` (ring or Ulysses context parallelism), ``dispatch`` and ``combine`` (experts over ep);
a mixin of :class:`engine.deploy.placement.Placer`.

Layer: engine.deploy. As :mod:`engine.deploy.placement_layout`: each ``place_<family>`` method places
one row through the placer (``emit``, ``reshard``, ``collective``), for either binding.
"""
from __future__ import annotations

from dataclasses import replace

from engine.language.evaluate import NodeRow
from engine.language.shapes import Tensor
from engine.deploy.device_program import ONE, Layout, Step, layout_of
from engine.deploy.expert_comm import Routing
from engine.deploy.parallel import Group
from engine.deploy.placement_arith import _prod


class _ParallelRules:
    """Placement rules of the families that bring their own parallelism: ``cache`` (split over
    cp), ``attention`` (ring or Ulysses context parallelism), ``dispatch`` and ``combine`` (experts
    over ep)."""

    def place_cache(self, row: NodeRow, inputs: list[Step]) -> None:
        inputs = self.resolve_partials(row, inputs)
        have = layout_of(inputs[0])
        cp = self.mesh.world_group("cp", "default")
        shards = (have.shards[0], (cp,) if cp else ()) + tuple(have.shards[2:])
        self.emit(row, inputs, Layout(shards))

    def place_attention(self, row: NodeRow, inputs: list[Step]) -> None:
        inputs = self.resolve_partials(row, inputs)
        cp = self.mesh.world_group("cp", "default")
        ulysses = self.mesh.config.cp_kind == "ulysses"
        if row.op == "attention_score":
            q, k, *selected = inputs   # top-k sparse attention also reads the selected indices
            if cp and cp in layout_of(q).shards[1] and cp in layout_of(k).shards[1]:
                if ulysses:   # sequence -> heads for queries and keys, attention runs on whole sequences
                    q = self.reshard(q, _move(layout_of(q), cp, 1, 2), row)
                    k = self.reshard(k, _move(layout_of(k), cp, 1, 2), row)
                else:         # ring: keys travel around the ring, each device sees all of them
                    k = self.ring_pass(k, row, cp)
            lq, lk = layout_of(q), layout_of(k)
            layout = Layout((lq.shards[0], lq.shards[2], lq.shards[1], lk.shards[1]))
            self.emit(row, [q, k, *selected], layout)
        else:
            p, v = inputs
            lp, lv = layout_of(p), layout_of(v)
            if cp and cp in lv.shards[1] and cp not in lp.shards[3]:
                v = self.reshard(v, _move(lv, cp, 1, 2), row) if ulysses else self.ring_pass(v, row, cp)
                lv = layout_of(v)
            partial = self.mesh.canonical(tuple(g for g in lp.shards[3] if g in lv.shards[1]))
            layout = Layout((lp.shards[0], lp.shards[2], lp.shards[1], lv.shards[3]), partial)
            step = self.emit(row, [p, v], layout)
            if cp and ulysses and cp in lp.shards[1]:
                # Ulysses moved the sequence split onto heads for attention; the output goes back
                # to the sequence split (all-to-all), so the output projection runs on own tokens
                self.out[row.uid] = self.reshard(step, _move(layout, cp, 2, 1), row)

    def ring_pass(self, source: Step, consumer: NodeRow, cp: Group) -> Step:
        """Ring attention: each device receives every other device's K (or V) block once."""
        have = layout_of(source)
        shards = list(have.shards)
        shards[1] = tuple(g for g in shards[1] if g != cp)
        layout = Layout(tuple(shards), have.partial)
        step = self.collective(source, "ring_pass", layout, (cp,), (cp.expr - 1) * source.out_read, consumer)
        return step

    def place_dispatch(self, row: NodeRow, inputs: list[Step]) -> None:
        inputs = self.resolve_partials(row, inputs)
        x, idx = inputs
        have = layout_of(x)
        ep = self.mesh.world_group("ep", "experts")
        dpa = self.mesh.world_group("dp", "default")
        token_groups = tuple(g for gs in have.shards[:-1] for g in gs)
        cp_groups = tuple(g for g in token_groups if g.dim == "cp")
        routed = self.mesh.canonical(cp_groups + ((ep,) if ep else ()))
        layout = Layout((routed, ()))
        tokens = _prod(a.size for a in row.in_shapes[0].axes[:-1]) / _prod(g.expr for g in cp_groups)
        self.routing_tokens[row.component_uid] = tokens
        if dpa and ep:      # tokens live on their attention replica: all-to-all to the experts' owners
            comm = self.local(row.out, layout) * self.types.act_bytes * (ep.expr - 1) / ep.expr
            x = self.collective(x, "all_to_all", Layout(have.shards), (self.mesh.groups["tp"],), comm, row,
                                repeat=row.repeat, routing=self.routing("dispatch", row, ep, x, have))
        elif dpa:           # experts split by features over the whole group: every device needs every token
            target = Layout(tuple(tuple(g for g in gs if g != dpa) for gs in have.shards))
            x = self.reshard(x, target, row)
        self.emit(row, [x, idx], layout)

    def routing(self, direction: str, row: NodeRow, ep: Group, x: Step, have: Layout) -> Routing | None:
        """What an expert all-to-all of ``row`` carries (:class:`~engine.deploy.expert_comm.Routing`):
        the tokens of ``x`` one device holds (layout ``have``) and their width, k from the routing indices, the
        expert count from the router's scores, node-limited routing from the model's ``n_group``
        / ``topk_group`` dims (the config fields of those names) where it declares them. None
        when a size is not a number under ``decide`` (no transport re-prices it then)."""
        router = self.a.rows.get(row.inputs[1]) or self.a.rows.get(row.inputs[1] + "@decode")
        sizes = [self.decide(row.in_shapes[1].axes[-1].size),
                 self.decide(router.in_shapes[0].axes[-1].size) if router is not None else None,
                 self.decide(self.a.values.get("n_group", ONE)), self.decide(self.a.values.get("topk_group", ONE))]
        if any(v is None for v in sizes):
            return None
        k, experts, n_group, topk_group = (int(v) for v in sizes)
        tokens = self.local(Tensor(x.out.axes[:-1]), Layout(have.shards[:-1]))
        routing = Routing(direction, tokens, x.out.axes[-1].size, k, experts, n_group, topk_group,
                          **self.mesh.extent((ep,)))
        self._routed[row.component_uid] = routing
        return routing

    def place_combine(self, row: NodeRow, inputs: list[Step]) -> None:
        y, idx = inputs
        ly, li = layout_of(y), layout_of(idx)
        ep = self.mesh.world_group("ep", "experts")
        dpa = self.mesh.world_group("dp", "default")
        tokens = tuple(li.shards[:-1])
        if dpa is None:     # tokens replicated in the group: each device adds its experts' share
            layout = Layout(tokens + ((),), self.mesh.canonical(ly.partial + ((ep,) if ep else ())))
            self.emit(row, [y, idx], layout)
            return
        if ep:              # all-to-all the expert outputs back to the tokens' attention replica
            comm = self.local(row.in_shapes[0], ly) * self.types.act_bytes * (ep.expr - 1) / ep.expr
            routing = self._routed.get(row.component_uid)
            routing = replace(routing, direction="combine") if routing is not None else None
            y = self.collective(y, "all_to_all", ly, (self.mesh.groups["tp"],), comm, row, repeat=row.repeat,
                                routing=routing)
            self.emit(row, [y, idx], Layout(tokens + ((),), ly.partial))
            return
        # features split over the whole group, tokens gathered: reduce-scatter back to the replicas
        full = Layout(tuple(tuple(g for g in gs if g != dpa) for gs in tokens) + ((),), ly.partial)
        step = self.emit(row, [y, idx], full)
        groups = self.mesh.canonical(ly.partial)
        n = _prod(g.expr for g in groups)
        attn_tp = self.mesh.world_group("tp", "default")
        out = Layout(tokens + ((),), (attn_tp,) if attn_tp else ())
        self.out[row.uid] = self.collective(step, "reduce_scatter", out, groups, (n - 1) / n * step.out_read, row)

def _move(layout: Layout, group: Group, src: int, dst: int) -> Layout:
    shards = list(layout.shards)
    shards[src] = tuple(g for g in shards[src] if g != group)
    shards[dst] = shards[dst] + (group,)
    return Layout(tuple(shards), layout.partial)
