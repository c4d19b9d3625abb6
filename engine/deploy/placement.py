"""Placement propagation: one phase of an Analysis -> a per-device program with communication.

Layer: engine.deploy. Like DTensor/GSPMD, every tensor has, per axis, the groups of devices it is split
over (``Shard``), and the groups over which its values are partial sums (``Partial``); anything
else is replicated. Weights get their placement from the node's ``weight_axes`` (a world such as
``tp``, read as a group for the node's region by :class:`~engine.deploy.parallel.Mesh`) and experts are
split over ``ep``. Each op carries placements through its per-axis map (``placement`` family on
the op). Where a consumer needs a placement its producer does not have, a collective step is
inserted: Partial -> Replicate is an all-reduce, Shard -> Replicate an all-gather, Shard(a) ->
Shard(b) an all-to-all, token routing to remote experts an all-to-all dispatch/combine, ring
context parallelism passes K/V around the ring, and a pipeline stage boundary is a send/recv.

Dims stay global. A step records per-device values (FLOPs, bytes read/written, weight bytes, bytes
sent on a link) as expressions of the binding it was built from: with the numeric Analysis they
are numbers in the scenario symbols ``batch``/``seq``/``ctx``; with the symbolic Analysis and a
symbolic mesh they are formulas over dims and degrees. One code path builds both; decisions
(is this group bigger than the head count?) are taken on the numeric values of ``decide``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Callable, Mapping
import operator

import sympy

from engine.language import expr as exprs
from engine.language.evaluate import Analysis, NodeRow
from engine.language.ops import OPS
from engine.deploy.expert_comm import Routing
from engine.deploy.parallel import EXPERT_ROLES, Group, Mesh
from engine.language.shapes import Axis, Carried, Merged, Split, Tensor
from engine.language import symbols

ONE = sympy.Integer(1)
ZERO = sympy.Integer(0)
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "ring_pass", "send_recv")


@dataclass(frozen=True, slots=True)
class Layout:
    """Per axis, the groups splitting it (outermost first); plus the groups holding partial sums."""

    shards: tuple[tuple[Group, ...], ...]
    partial: tuple[Group, ...] = ()

    @staticmethod
    def replicated(rank: int) -> "Layout":
        return Layout(tuple(() for _ in range(rank)))

    def groups(self) -> set[Group]:
        return {g for axis in self.shards for g in axis} | set(self.partial)

    def describe(self, tensor: Tensor) -> str:
        parts = [f"{a.name}/{'*'.join(g.name for g in gs)}" for a, gs in zip(tensor.axes, self.shards) if gs]
        if self.partial:
            parts.append("partial:" + "*".join(g.name for g in self.partial))
        return ", ".join(parts) or "replicated"


@dataclass(frozen=True, slots=True)
class Step:
    """One kernel (or collective) of a device's program, per call; ``repeat`` calls per step.

    ``flops``/``bytes``/``weight_bytes``/``comm_bytes`` are per device and per call. ``bytes`` is
    the HBM traffic of activations and caches (inputs read + outputs written); ``weight_bytes``
    the weights read (experts: only those routed tokens touch). ``comm_bytes`` is what the device
    sends on ``link`` with the collective's algorithm factor already applied.
    """

    uid: str
    name: str
    op: str
    kind: str                       # compute | comm | fused
    role: str
    component: str
    component_uid: str
    repeat: sympy.Expr
    inputs: tuple[str, ...]
    flops: sympy.Expr
    bytes: sympy.Expr
    weight_bytes: sympy.Expr
    comm_bytes: sympy.Expr
    compute_dtype: str
    layout: Layout
    out: Tensor
    out_read: sympy.Expr            # bytes a consumer reads when it reads this step's output
    group: str = ""
    link: str = ""
    view: bool = False
    written: sympy.Expr = ZERO      # bytes this step writes (a cache step: only the new tokens)
    parts: tuple[str, ...] = ()     # fused: the member step uids
    dims: Mapping[str, sympy.Expr] = field(default_factory=dict)
    last_token: bool = False        # prefill computes it for the last position only (logits)
    collective: str = ""            # the collective this step runs (alone or fused), its ranks and
    ranks: int = 1                  # the scale-up domains they span: its per-call latency
    nodes: int = 1                  # (GPU.collective_latency)
    routing: Routing | None = None  # an expert all-to-all: its expert_comm.Routing (a framework's
                                    # transport re-prices it, engine.deploy.expert_comm.transport)

    @property
    def total_bytes(self) -> sympy.Expr:
        return self.bytes + self.weight_bytes


_SET = object.__setattr__
_STEP_FIELDS = Step.__slots__


def step_with(step: Step, **changes) -> Step:
    """``dataclasses.replace(step, **changes)`` at half its cost: a new Step holding ``step``'s
    fields but ``changes`` (Step has no ``__post_init__`` and every field is an ``__init__``
    argument, so the two build equal steps; fusion renames inputs of tens of thousands of steps)."""
    new = object.__new__(Step)
    for name in _STEP_FIELDS:
        _SET(new, name, changes[name] if name in changes else getattr(step, name))
    return new


@dataclass(frozen=True, slots=True)
class Program:
    """A phase's per-device program: steps in execution order, plus the layout of every row."""

    phase: str
    steps: tuple[Step, ...]
    layouts: Mapping[str, Layout]
    stored: Mapping[str, sympy.Expr] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceTypes:
    """Element sizes of what is not a weight: activations and cache entries."""

    act_bytes: int = 2
    kv_bytes: int = 2

    @property
    def partial_bytes(self) -> int:
        """Element size of partial sums on the wire: at least BF16's 2 bytes. An FP8 GEMM writes
        its output at BF16 and the reduction of a row-parallel GEMM's partial sums runs on that
        output; FP8 comes after the reduction (TensorRT-LLM's all-reduce + RMSNorm + FP8-quant
        fusion, AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_FP8, and vLLM's
        AllReduceFusedAddRMSNormStaticQuantFP8Pattern take the BF16 sum and quantize the norm's
        output), so ``act_dtype fp8`` does not halve an all-reduce or reduce-scatter message."""
        return max(self.act_bytes, 2)


def _prod(values) -> sympy.Expr:
    """The product of ``values`` (from ``ONE``), by the memoized :func:`_mul`.

    ``ONE * v`` is ``v`` itself for a sympy ``v`` (a plain ``int`` or ``float`` would become a
    sympy number, so only sympy values skip the product): the first factor costs no lookup."""
    it = iter(values)
    first = next(it, ONE)
    if not isinstance(first, sympy.Basic):
        first = _mul(ONE, first)
    return reduce(_mul, it, first)


#: (operator, a, b, type(a), type(b)) -> a op b. Placement repeats the same few products and
#: quotients under every config and phase (a row's FLOPs over a split of 2, 4, 8; the same
#: activation sizes in every layer template), and building a sympy expression is most of its
#: time. The types are part of the key because 2 == 2.0 in Python while x*2 and x*2.0 differ.
_ARITH: dict[tuple, object] = {}


#: (operator, id(a), id(b)) -> (a, b, a op b): the same operand objects recur (a row's sizes, the
#: memo's own results), and a key of ids skips hashing the expressions. The entry holds the operands,
#: so an id cannot be reused by another object while it is in the memo; the same objects have the
#: same types, so 2 and 2.0 stay apart here too. Misses fall through to :data:`_ARITH`.
_ARITH_BY_ID: dict[tuple, tuple] = {}


def _arith(op, a, b):
    """``op(a, b)`` for the sympy arithmetic of placement, computed once per operand pair (bounded)."""
    hit = _ARITH_BY_ID.get((op, id(a), id(b)))
    if hit is not None and hit[0] is a and hit[1] is b:
        return hit[2]
    key = (op, a, b, type(a), type(b))
    found = _ARITH.get(key)
    if found is None:
        if len(_ARITH) > 500_000:
            _ARITH.clear()
        found = _ARITH[key] = op(a, b)
    if len(_ARITH_BY_ID) > 500_000:
        _ARITH_BY_ID.clear()
    _ARITH_BY_ID[(op, id(a), id(b))] = (a, b, found)
    return found


def _mul(a, b):
    return _arith(operator.mul, a, b)


def _div(a, b):
    return _arith(operator.truediv, a, b)


def _add(a, b):
    return _arith(operator.add, a, b)


def shard_unit(name: str, dims_table: Mapping) -> str | None:
    """The one shardable dim inside an axis name (``n_kv_heads`` in ``n_kv_heads * d_head``), or
    None when the name is not an expression of dims or mentions several shardable ones."""
    try:
        parsed = exprs.evaluate(name, exprs.Scope({k: symbols.dim(k) for k in dims_table}))
    except exprs.ExprError:
        return None
    found = [s.name for s in getattr(parsed, "free_symbols", ()) if dims_table[s.name].shard != "none"]
    return found[0] if len(found) == 1 else None


#: (axis name, id(dims table)) -> (the table, :func:`shard_unit` of the name): a pure function of
#: the two (the corpus's dims table is loaded once and not changed), asked by every placer of every
#: config and phase; parsing the name is most of a placer's cost of a new axis name.
_UNITS: dict[tuple, tuple] = {}


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


class Placer(_LayoutRules, _ParallelRules):
    """Propagates placements over one phase of an Analysis and emits the device program.

    This class holds the program (sizes through a layout, steps, collectives and reshards); the
    placement rule of each op family (``OPS[op].placement``) is a ``place_<family>`` method of a
    mixin above: per-axis, norm, matmul and row families in :class:`_LayoutRules`; cache,
    attention (context parallelism) and expert dispatch/combine in :class:`_ParallelRules`."""

    def __init__(self, analysis: Analysis, mesh: Mesh, phase: str, dims_table: Mapping,
                 weights: Callable[[NodeRow], list], types: DeviceTypes, decide: Callable):
        self.a = analysis
        self.mesh = mesh
        self.phase = phase
        self.dims_table = dims_table
        self.weights = weights          # row -> [(LeafRow, bytes per instance, compute class)]
        self.types = types
        self.decide = decide            # expression -> int (numeric value) or None
        self.steps: list[Step] = []
        self.out: dict[str, Step] = {}  # producer uid -> step whose output consumers read
        self.layouts: dict[str, Layout] = {}
        self.redist: dict[tuple, Step] = {}
        self.routing_tokens: dict[str, sympy.Expr] = {}
        self._routed: dict[str, Routing] = {}      # component uid -> its dispatch's Routing (combine's too)
        self.stored: dict[str, sympy.Expr] = {}   # row uid -> weight bytes this device stores per layer
        self._units: dict[str, tuple] = {}
        self._factors: dict[tuple, sympy.Expr] = {}
        self._locals: dict[tuple, sympy.Expr] = {}
        self._state_caches = {c.node_uid.removesuffix("@decode"): c for c in analysis.caches
                              if c.growth == "state" and OPS[analysis.rows[c.node_uid].op].state is not None}
        # kv_cache node uid (decode suffix dropped) -> bytes per element of an entry with its own
        # dtype (the indexer's FP8 keys with f32 scales); the others take the KV dtype
        self._own_cache_bytes = {c.node_uid.removesuffix("@decode"): c.own_bytes for c in analysis.caches
                                 if c.dtype and c.growth != "state"}

    # -- sizes through a layout --------------------------------------------------------------------
    def unit(self, name: str) -> tuple[str, sympy.Expr] | None:
        """The replicable dim inside an axis name (``n_kv_heads`` in ``n_kv_heads * d_head``).
        The name's shardable dim is parsed once per process (:data:`_UNITS`), its value per placer."""
        if name not in self._units:
            key = (name, id(self.dims_table))
            found = _UNITS.get(key)
            if found is None or found[0] is not self.dims_table:
                found = _UNITS[key] = (self.dims_table, shard_unit(name, self.dims_table))
            unit = found[1]
            replicable = unit is not None and self.dims_table[unit].replicate and unit in self.a.values
            self._units[name] = (unit, self.a.values[unit]) if replicable else None
        return self._units[name]

    def factor(self, axis: Axis, groups: tuple[Group, ...]) -> sympy.Expr:
        """How many ways ``axis`` is split: the groups' product, or the unit count when the group
        is larger (more devices than KV heads: each device keeps one head, heads replicate).
        Memoized per placer; the key holds each group's expression, since groups of equal ranks
        compare equal whatever their names (``ep`` and ``dp_attn`` over the same GPUs)."""
        if not groups:
            return ONE
        key = (axis, groups, tuple(g.expr for g in groups))
        found = self._factors.get(key)
        if found is None:
            found = self._factors[key] = self._factor(axis, groups)
        return found

    def _factor(self, axis: Axis, groups: tuple[Group, ...]) -> sympy.Expr:
        product = _prod(g.expr for g in groups)
        size = _prod(g.size for g in groups)
        unit = self.unit(axis.name)
        if unit is not None:
            # an axis that is the unit itself carries its own count: a template may rebind it
            # (Gemma 4's global layers: n_kv_heads: n_kv_heads_global), so prefer it to the model's
            value = axis.size if axis.name == unit[0] else unit[1]
            count = self.decide(value)
            if count is not None and count < size:
                return sympy.Min(value, product)
        return product

    def local(self, tensor: Tensor, layout: Layout, computed: bool = False) -> sympy.Expr:
        """Elements of ``tensor`` one device holds (``computed``: the unmasked ones). Memoized per
        placer like :meth:`factor` (the same activations recur in every layer template)."""
        key = (tensor, layout, computed, tuple(g.expr for gs in layout.shards for g in gs))
        found = self._locals.get(key)
        if found is None:
            # Tensor.computed / numel, with the sizes multiplied through _prod's memo (numel
            # multiplies them afresh)
            total = tensor.valid if computed and tensor.valid is not None else _prod(a.size for a in tensor.axes)
            found = self._locals[key] = _div(total, _prod(self.factor(a, gs) for a, gs in zip(tensor.axes, layout.shards)))
        return found

    def split(self, tensor: Tensor, layout: Layout) -> sympy.Expr:
        """Ways the work producing ``tensor`` is divided: its shards and its partial groups."""
        return _mul(_prod(self.factor(a, gs) for a, gs in zip(tensor.axes, layout.shards)),
                    _prod(g.expr for g in layout.partial))

    def region(self, row: NodeRow) -> str:
        return "experts" if row.role in EXPERT_ROLES else "default"

    # -- program --------------------------------------------------------------------------------------
    def run(self, rows: list[NodeRow]) -> Program:
        self.consumers: dict[str, int] = {}
        uids = {r.uid for r in rows}      # a set: the playground places hundreds of whole analyses
        for row in rows:
            for uid in row.inputs:
                uid = uid + "@decode" if uid + "@decode" in uids else uid
                self.consumers[uid] = self.consumers.get(uid, 0) + 1
        for row in rows:
            self.place(row)
        return Program(self.phase, tuple(self.steps), dict(self.layouts), dict(self.stored))

    def source(self, uid: str, tensor: Tensor) -> Step:
        """A stack input: token axes split over the worlds the dims table names (not ``seq`` in decode)."""
        if uid in self.out:
            return self.out[uid]
        shards = []
        for axis in tensor.axes:
            world = self.dims_table[axis.name].shard if axis.name in self.dims_table else "none"
            group = self.mesh.world_group(world, "default") if world != "none" else None
            if axis.name == symbols.SEQ and self.phase == "decode":
                group = None
            shards.append((group,) if group else ())
        layout = Layout(tuple(shards))
        step = Step(uid, uid.split(":")[-1], "input", "input", "input", "", "", ONE, (), ZERO, ZERO, ZERO,
                    ZERO, "bf16", layout, tensor, self.local(tensor, layout) * self.types.act_bytes)
        self.out[uid] = step
        self.layouts[uid] = layout
        return step

    def producer(self, row: NodeRow, index: int) -> Step:
        uid = row.inputs[index]
        if uid in self.out:
            return self.out[uid]
        if uid + "@decode" in self.out:
            return self.out[uid + "@decode"]
        return self.source(uid, row.in_shapes[index])

    def emit(self, row: NodeRow, inputs: list[Step], layout: Layout, **kw) -> Step:
        """Record a compute step for ``row`` with output ``layout``."""
        op = OPS[row.op]
        cache_bytes = self._own_cache_bytes.get(row.uid.removesuffix("@decode"), self.types.kv_bytes) \
            if op.cache_output else None
        element = cache_bytes if op.cache_output else op.out_element_bytes or self.types.act_bytes
        out_bytes = _mul(self.local(row.out, layout), element)
        work = kw.pop("work", layout)   # the layout dividing the work (default: the output's)
        if op.view:
            source = inputs[0].out_read if inputs else ZERO
            read = out_bytes if op.partial else source
            step = self._step(row, inputs, layout, ZERO, ZERO, ZERO, "bf16", read, view=True)
        else:
            flops = _div(row.flops, self.split(row.out, work)) if row.flops != 0 else ZERO
            written = (_mul(self.local(row.in_shapes[0], layout_of(inputs[0])), cache_bytes)
                       if op.cache_output else out_bytes)
            traffic = _add(_add(reduce(_add, (s.out_read for s in inputs), ZERO), written),
                           self.state_traffic(row, layout))
            weight_bytes, dtype = kw.pop("weights", (ZERO, "bf16"))
            step = self._step(row, inputs, layout, flops, traffic, weight_bytes, dtype, out_bytes,
                              written=written, **kw)
        self.steps.append(step)
        self.out[row.uid] = step
        self.layouts[row.uid] = layout
        return step

    def state_bytes(self, row: NodeRow, layout: Layout) -> sympy.Expr:
        """Bytes of the recurrent state this device keeps for its requests at ``row`` (a ``growth:
        state`` cache entry naming the node): the state shards with the output's non-token axes
        (heads, channels), the requests with the batch axis."""
        cache = self.state_caches().get(row.uid.removesuffix("@decode"))
        if cache is None:
            return ZERO
        element = cache.own_bytes if cache.dtype else self.types.kv_bytes
        shards = self.split(Tensor(row.out.axes[2:]), Layout(layout.shards[2:]))
        batch = self.local(Tensor(row.out.axes[:1]), Layout(layout.shards[:1]))
        return batch * cache.per_token / shards * element

    def state_traffic(self, row: NodeRow, layout: Layout) -> sympy.Expr:
        """A recurrent state is read and written once per decode step; a prompt writes it once. A
        rolling window buffer (a compressor's, ``rolling_state``) moves 2 / every of itself per
        decode step: one row written, the whole read once per ``every`` steps to pool it."""
        state = self.state_bytes(row, layout)
        if state is ZERO or self.phase != "decode":
            return state                                                  # 0 * n is 0
        if OPS[row.op].rolling_state:
            return state * 2 / row.dim_values["every"]
        return state * 2

    def state_caches(self) -> dict:
        """Node uid (decode suffix dropped) -> the state cache entry a recurrent op keeps."""
        return self._state_caches

    def _step(self, row, inputs, layout, flops, traffic, weight_bytes, dtype, read, **kw) -> Step:
        return Step(row.uid, row.name, row.op, "compute", row.role, row.component, row.component_uid,
                    row.repeat, tuple(s.uid for s in inputs), flops, traffic, weight_bytes, ZERO, dtype,
                    layout, row.out, read, dims=_row_dims(row),
                    last_token=row.role == "lm_head" and self.phase == "prefill", **kw)

    def place(self, row: NodeRow) -> None:
        """Place one row by its op family's rule (a ``place_<family>`` method of a mixin)."""
        inputs = [self.producer(row, i) for i in range(len(row.inputs))]
        family = OPS[row.op].placement
        getattr(self, "place_" + family)(row, inputs)

    # -- collectives ---------------------------------------------------------------------------------
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


def layout_of(step: Step) -> Layout:
    return step.layout


def _move(layout: Layout, group: Group, src: int, dst: int) -> Layout:
    shards = list(layout.shards)
    shards[src] = tuple(g for g in shards[src] if g != group)
    shards[dst] = shards[dst] + (group,)
    return Layout(tuple(shards), layout.partial)


#: id(row) -> (row, its _row_dims): a row is placed under every config and phase, and its steps
#: only read the mapping (fused steps share their last member's), so one dict serves them all.
_ROW_DIMS: dict[int, tuple] = {}


def _row_dims(row: NodeRow) -> dict[str, sympy.Expr]:
    """Named sizes a fusion condition may test: the op's bound dims by the names they were bound
    to. Memoized per row object (the memo holds the row, so its id is not reused); read-only."""
    hit = _ROW_DIMS.get(id(row))
    if hit is None or hit[0] is not row:
        if len(_ROW_DIMS) > 20_000:     # a few models' rows: the memo keeps rows alive
            _ROW_DIMS.clear()
        hit = _ROW_DIMS[id(row)] = (row, _row_dims_of(row))
    return hit[1]


def _row_dims_of(row: NodeRow) -> dict[str, sympy.Expr]:
    out = {}
    for tensor in (row.out,) + tuple(row.in_shapes):
        for axis in tensor.axes:
            out.setdefault(axis.name, axis.size)
    return out


def phase_rows(analysis: Analysis, phase: str, stack: str = "main") -> list[NodeRow]:
    """The rows of one phase in dependency order (decode variants replace what they override)."""
    rows = {r.uid: r for r in analysis.rows.values() if phase in r.phases and r.stack == stack}
    order: list[NodeRow] = []
    done: set[str] = set()

    def visit(uid: str) -> None:
        if uid in done or uid not in rows:
            return
        done.add(uid)
        for dep in rows[uid].inputs:
            visit(dep + "@decode" if dep + "@decode" in rows else dep)
        order.append(rows[uid])

    for uid in rows:
        visit(uid)
    return order
