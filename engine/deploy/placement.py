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

from functools import reduce
from typing import Callable, Mapping

import sympy

from engine.language import expr as exprs
from engine.language.evaluate import Analysis, NodeRow
from engine.language.ops import OPS
from engine.deploy.device_program import ONE, ZERO, DeviceTypes, Layout, Program, Step, layout_of
from engine.deploy.expert_comm import Routing
from engine.deploy.parallel import EXPERT_ROLES, Group, Mesh
from engine.deploy.placement_arith import _add, _div, _mul, _prod
from engine.deploy.placement_comm import _Collectives
from engine.deploy.placement_layout import _LayoutRules
from engine.deploy.placement_parallel import _ParallelRules
from engine.language.shapes import Axis, Tensor
from engine.language import symbols


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


class Placer(_LayoutRules, _ParallelRules, _Collectives):
    """Propagates placements over one phase of an Analysis and emits the device program.

    This class holds the program (sizes through a layout, steps); the placement rule of each op
    family (``OPS[op].placement``) is a ``place_<family>`` method of a mixin: per-axis, norm, matmul
    and row families in :class:`~engine.deploy.placement_layout._LayoutRules`; cache, attention
    (context parallelism) and expert dispatch/combine in
    :class:`~engine.deploy.placement_parallel._ParallelRules`; the collectives and reshards they
    insert in :class:`~engine.deploy.placement_comm._Collectives`."""

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
