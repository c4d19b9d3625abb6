"""Measured kernel times (``gpus/measured/``): each op's expected time at the grid's points.

Layer: engine.deploy. The tables are written by ``benchmarks/import_kernels.py`` from the public
aiconfigurator-core package (one file per GPU x framework x version x kernel class; their schema:
engine.language.file_schemas.MEASURED) and are input like a GPU file: a damaged, truncated or absurd
table is one line naming the file and field (exit 2). Nothing here reads the package itself.
The rule below lives in four modules, one job each: the tables (engine.deploy.measured_tables),
how one is read (engine.deploy.interpolation), which table covers a step and at what point
(engine.deploy.kernel_spec), the rule as the browser's formula trees (engine.deploy.measured_tree);
this one evaluates it at the grid's points (:func:`gather`, :func:`resolve`, :func:`finish`).

Invariants:

* **Interpolation** (:func:`interpolate`): multilinear in log(latency) over log(axis value)
  between the measured grid points, so a point on the grid returns its measured time and time
  scales as a power law between two neighbours. Outside the measured range of an axis the time
  continues from the nearest point of the range as the power law of the axis's last measured
  span, its slope clipped to [0, the slope of the kernel class's roofline over that span]
  (:func:`gemm_roof`, :func:`collective_roof`, :func:`attention_roof`): never steeper than the
  work grows, never faster with more work; a GEMM beyond the largest measured m grows as its
  FLOPs once the edge is compute-bound, a message below the smallest keeps its latency floor; and
  never more efficient than the table's best measured point (:func:`peak_rate`: the time at least
  the roofline's work over the highest work per second the grid reaches).
* **Expected time of an op** (:func:`expected_steps`): the measured time per call x calls where a
  table covers the op's kernel class on this GPU and framework, never below the op's bound
  (``t_sol_s``: no kernel beats the speed of light, whatever a table or its extrapolation says);
  elsewhere the bound / :data:`DEFAULT_EFFICIENCY`, flagged ``measured: false``.
* Which table covers which op (:func:`kernel_of`): a dense ``linear`` step (or a fused step whose
  members all are: QKV, gate-up) is a GEMM at m = its output rows on one GPU, k = its input
  features (split by the partial-sum groups of a row-parallel matmul), n = its FLOPs per call /
  2mk; its dtype is the GPU's compute dtype of its operands, FP8 reading the per-tensor ``fp8``
  table, else ``fp8_block``. A collective step inside one scale-up domain is its collective at the
  step's ranks and message bytes (the output it writes per call; a fused all-reduce + norm: its
  link bytes over the algorithm's share); an all-reduce takes the faster of the framework's
  custom all-reduce (its CUDA-graph table for decode, eager for prefill; a framework with one
  table, TensorRT-LLM, that one: ``custom``) and NCCL's, as the
  frameworks switch between them by size. A fused attention step (the ``flash_attention`` rule,
  plain GQA/MHA dims) is decode or prefill attention of its head size and KV-cache dtype at
  (requests, KV heads per GPU, query heads per KV head, context) or (prompts, prompt tokens, KV
  heads, query heads per KV head), requests and query heads as one GPU holds them (its output's
  local sizes), KV heads in the model's proportion (at least one); not with context parallelism
  or several query tokens per decode step. A fused MoE step (``fused_moe``) reads the curve of
  its exact expert shape and split (:data:`KEYED`: the model's hidden, d_ff_expert, top_k,
  n_experts; moe_tp = tp / ep, moe_ep = ep) at the layer's tokens (the point's batch x seq: one
  attention replica's tokens x dp_attn, the source's num_tokens); under expert parallelism
  (moe_ep > 1) the table of the framework's routing (its fusion table's ``moe_routing``, e.g.
  ``fp8_power_law_1.2``: every rank waits for the busiest), else the balanced one. An absorbed-MLA decode
  attention step (the ``flash_mla`` rule: scores, softmax and the latent-space output over the
  latent + rotary cache) is ``decode_mla`` of its KV-cache dtype and latent rank
  (``<kv dtype>_r<kv_lora_rank>``) at (requests, query heads, context) as one GPU holds them; one
  query token per request, no context parallelism. The two per-head matmuls around it in decode
  (``head_linear`` steps: the query's absorption into the latent, ``pre``, and the latent output's
  up-projection, ``post``) are ``mla_bmm`` of their side, the GPU's compute dtype and the latent
  rank (``pre_bf16_r512``) at (tokens, heads) on one GPU. An MLA model's prefill attention (a
  fused attention step whose value heads are ``d_v_head``: K and V decompressed from the latent)
  is ``prefill_mla`` of its KV dtype and latent rank at (prompts, prompt tokens, query heads) on
  one GPU, where the prompt has no cached prefix (its context = its tokens). All three only where
  the model has the source's one MLA shape (:data:`MLA_SHAPE`) and attends to the whole context
  (a sparse DSA step, ``kv_len`` min(2048, ctx), reads none). Other ops (norms, elementwise) have
  no table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.language import symbols
from engine.deploy.interpolation import _roof, nearest
from engine.deploy.kernel_spec import DEFAULT_EFFICIENCY, Lookup, _kernel, kernel_of, step_spec  # noqa: F401
from engine.deploy.measured_tables import Tables
from engine.deploy.cost import _repeat
from engine.deploy.compiled_totals import point_major_divided
from engine.deploy.sol import distinct_rows
# re-exported for importers that read them here: the tables (their classes, one table, loading),
# how a table is read (interpolation), which table covers a step (kernel_spec) and the rule as a
# formula tree (measured_tree) moved out of this module, one job each
from engine.deploy.interpolation import (  # noqa: F401
    attention_roof, collective_roof, gemm_roof, interpolate, interpolate_many, peak_rate, roof_expr)
from engine.deploy.kernel_spec import _gemm_point, _gemm_point_of, _tables_for  # noqa: F401
from engine.deploy.measured_tables import (  # noqa: F401
    MAX_POINTS, Table, adopt_tables, folder, load_measured, load_table, parsed_tables, shared_measured)
from engine.deploy.measured_tree import expected_tree, node_lookup, spec_tree  # noqa: F401

# -- expected time of each step of a compiled program ---------------------------------------------

_FUNCS: dict = {}


def _at(expr, args: dict) -> np.ndarray:
    """A step expression's values at the points (``args``: symbol -> 1-D array of the points),
    as an array over them; compiled once per expression (NumPy: lambdify's function, or one doing
    what its source does, engine.deploy.step_functions.numpy_function: the same floats)."""
    # the compile path's (sympy): a stored structure never gets here
    from engine.deploy.step_functions import ARGS, numpy_function
    f = _FUNCS.get(expr)
    if f is None:
        if len(_FUNCS) > 50_000:        # the step expressions of a model or two: keep it bounded
            _FUNCS.clear()
        f = _FUNCS[expr] = numpy_function(expr)
    n = len(args[ARGS[0]])
    value = np.asarray(f(*(args[a] for a in ARGS)), dtype=float)
    return value if value.shape == (n,) else np.broadcast_to(value, (n,))


def _at_once(expr, args: dict, values: dict) -> np.ndarray:
    """:func:`_at` of ``expr`` over ``args``, once per expression in ``values`` (for these args alone)."""
    found = values.get(expr)
    if found is None:
        found = values[expr] = _at(expr, args)
    return found


@dataclass
class Ask:
    """One step's lookups: at its points ``at`` (rows of ``points``) in each of ``tables`` under the
    roofline ``roof``; :func:`resolve` fills ``found`` (per table: seconds, outside?)."""

    row: int                            # the step's row in its Gathered
    at: np.ndarray                      # indices of the points a table covers
    points: np.ndarray                  # (len(at), axes): the step's point on the tables' axes
    tables: list
    roof: object                        # the roofline's key (interpolation._roof), or its function
    repeat: float
    shape: str                          # an MoE table's key, as text
    found: list = None


def _ask(step, lookup: Lookup, member_ops: dict, args: dict, t_sol: np.ndarray, row: int,
         values: dict | None = None, coordinates=None) -> Ask | None:
    """The step's lookups at every point (``args``: symbol -> 1-D array of the points; ``t_sol``:
    the step's bound over its calls there): its :class:`Spec` evaluated there; a table applies
    where the step's bound and every coordinate of its point are positive and the spec's
    condition holds. None where no table covers it at any point. ``values``: expression -> its
    :func:`_at` over these very ``args`` (a program's steps share most coordinates: ``batch``,
    a shard's heads), filled as the steps ask; the arrays are only read. ``coordinates``: instead,
    expression -> its values at the points (:meth:`SharedCoordinates.at`)."""
    spec = step_spec(step, lookup, member_ops)
    if spec is None:
        return None
    if coordinates is not None:         # the point and where it applies, evaluated for every GPU at once
        positive = t_sol > 0
        if positive.all():              # (most steps) where the spec applies: once per spec and group
            at, points = coordinates.applying(spec)
        else:
            picked, points, ok = coordinates.point(spec)
            at = np.flatnonzero(positive & ok)
            points = points[picked[at]]
        if not len(at):
            return None
        return Ask(row, at, points, list(spec.tables), spec.roof, _repeat(step.repeat), spec.shape)
    at = _at if values is None else lambda e, a: _at_once(e, a, values)
    points = np.column_stack([at(e, args) for e in spec.point])
    return ask_where(row, points, at(spec.applies, args), t_sol, spec.tables, spec.roof, _repeat(step.repeat),
                     spec.shape)


class SharedCoordinates:
    """The lookups' coordinates (:func:`_at` of a spec's point and condition) over one point set,
    each expression evaluated once there and handed to the groups of points picked out of it: the
    coordinates read the point and the KV size, never the GPU, so a program's groups on every GPU
    type of one KV size share them (engine.deploy.plan.expected_phase_times_many). Per point, so a
    group's picked values are the floats of evaluating at its own points."""

    def __init__(self, batch, seq, ctx, kv_bytes):
        """``kv_bytes``: one KV size for every point, or one per point (engine.deploy.plan: the
        point set of every program and KV size at once)."""
        from engine.deploy.step_functions import KV_BYTES
        n = len(batch)
        dims = [symbols.dim(d) for d in symbols.SCENARIO_DIMS]     # (batch, seq, ctx)
        self.args = {d: np.broadcast_to(np.asarray(x, dtype=float), (n,)) for d, x in zip(dims, (batch, seq, ctx))}
        self.args[KV_BYTES] = np.array(kv_bytes, dtype=float) if np.ndim(kv_bytes) else np.full(n, float(kv_bytes))
        self.values: dict = {}          # expression -> its values (by value)
        self.by_id: dict = {}           # id(expression) -> (it, its values)
        self.points: dict = {}          # (id(spec point), id(condition)) -> (them, points, applies_at)
        self.matrices: dict = {}        # ids of the coordinates' and condition's values -> (points, applies_at)

    def at(self, picked: np.ndarray) -> "_Picked":
        """The coordinates at the points ``picked`` (indices into the point set)."""
        return _Picked(self, picked)

    def value(self, expr) -> np.ndarray:
        """``expr``'s values over the whole point set: by object first (a step's spec, kernel_spec's
        memos, hands every GPU the same point objects, and a lookup by value compares sympy
        expressions term by term), then by value."""
        found = self.by_id.get(id(expr))
        if found is None or found[0] is not expr:
            found = self.by_id[id(expr)] = (expr, _at_once(expr, self.args, self.values))
        return found[1]

    def point(self, spec) -> tuple[np.ndarray, np.ndarray]:
        """(a spec's point over the whole point set, one column per coordinate; where it applies
        there, :func:`applies_at`), once per point and condition object, and one pair of arrays
        per distinct list of coordinates' and condition's values (the specs of a program's layers
        are other objects of equal expressions: DeepSeek-V4-Pro's grid, 758 spec objects of 60
        such lists; :meth:`_Picked.applying` and :func:`resolve` read the shared arrays once)."""
        key = (id(spec.point), id(spec.applies))
        found = self.points.get(key)
        if found is None or found[0] is not spec.point or found[1] is not spec.applies:
            columns = [self.value(e) for e in spec.point]
            applies = self.value(spec.applies)
            # the values are held in self.values for the coordinates' life: their ids name them
            same = (tuple(map(id, columns)), id(applies))
            shared = self.matrices.get(same)
            if shared is None:
                points = np.column_stack(columns)
                shared = self.matrices[same] = (points, applies_at(points, applies))
            found = self.points[key] = (spec.point, spec.applies, *shared)
        return found[2], found[3]


class _Picked:
    """:class:`SharedCoordinates` at some of its points: a coordinate's values there (a call), or
    a spec's point and where it applies (:meth:`point`: the picks, the whole set's point and the
    picked points' flags)."""

    __slots__ = ("coordinates", "picked", "applies")

    def __init__(self, coordinates: SharedCoordinates, picked: np.ndarray):
        self.coordinates, self.picked = coordinates, picked
        self.applies: dict = {}         # id(a spec's whole-set points) -> applying()'s answer

    def __call__(self, expr) -> np.ndarray:
        return self.coordinates.value(expr)[self.picked]

    def point(self, spec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        points, ok = self.coordinates.point(spec)
        return self.picked, points, ok[self.picked]

    def applying(self, spec) -> tuple[np.ndarray, np.ndarray]:
        """(the picked points where ``spec`` applies, the spec's point there): what :func:`_ask`
        takes for a step whose bound is positive at every point, once per spec point and
        condition's values (:meth:`SharedCoordinates.point`: a group's layers repeat their steps'
        specs; DeepSeek-V4-Pro's grid asks ~15k lookups of a few dozen such per group).
        Read-only arrays, shared by those steps' asks, so :func:`resolve` interpolates each once."""
        whole, ok = self.coordinates.point(spec)
        found = self.applies.get(id(whole))         # (whole is held by the coordinates: its id names it)
        if found is None:
            at = np.flatnonzero(ok[self.picked])
            points = whole[self.picked[at]]
            at.flags.writeable = points.flags.writeable = False
            found = self.applies[id(whole)] = (at, points)
        return found


def ask_where(row: int, points: np.ndarray, applies: np.ndarray, t_sol: np.ndarray, tables, roof, repeat: float,
              shape: str) -> Ask | None:
    """The module's rule of where a step's tables apply, once its point (``points``: one column per
    coordinate) and condition (``applies``) are evaluated: where the step's bound and every
    coordinate are positive and the condition holds. None where that is nowhere. The compiled path
    (:func:`_ask`) and a structure made from the build's document (engine.deploy.stored) both ask
    through it."""
    at = np.flatnonzero((t_sol > 0) & applies_at(points, applies))
    if not len(at):
        return None
    return Ask(row, at, points[at], list(tables), roof, repeat, shape)


def applies_at(points: np.ndarray, applies: np.ndarray) -> np.ndarray:
    """:func:`ask_where`'s rule without the bound: where every coordinate is positive and the
    condition holds (an empty shape: nowhere). Per point, so it may be taken over a larger point set
    and picked (:meth:`SharedCoordinates.point`)."""
    return (applies != 0) & (points.min(axis=1) > 0)


def fallback(t_sol: np.ndarray) -> Gathered:
    """A program's gathered steps before any lookup: every step at its bound / the default
    efficiency, none measured (the times a step no table covers keeps)."""
    return Gathered(t_sol / DEFAULT_EFFICIENCY, np.zeros(t_sol.shape, dtype=bool), t_sol, [])



def resolve(asks: list[Ask]) -> None:
    """Interpolate every ask's points, each table once over the points of all the asks that read it
    under one roofline (:func:`interpolate_many`): the grid gathers thousands of asks of a few
    dozen points each, and an interpolation's cost is mostly per call."""
    by_table: dict[tuple, tuple] = {}
    for a in asks:
        a.found = [None] * len(a.tables)
        roof = a.roof
        for i, table in enumerate(a.tables):
            users = by_table.get((id(table), roof))
            if users is None:
                users = by_table[(id(table), roof)] = (table, [])
            users[1].append((a, i))
    for (_, roof), (table, users) in by_table.items():
        # each points array once (asks of one spec in one group share theirs: _Picked.applying)
        cuts: dict[int, slice] = {}
        arrays, start = [], 0
        for a, _ in users:
            if id(a.points) not in cuts:
                cuts[id(a.points)] = slice(start, start + len(a.points))
                arrays.append(a.points)
                start += len(a.points)
        points = np.concatenate(arrays)
        # each distinct point once (the grid's asks repeat a few thousand points about a hundred
        # times: a shard's GEMM at every bucket, both KV dtypes' programs), spread back after; the
        # distinct points C-ordered as the asks' own, so every axis is read as before (per point:
        # the same floats)
        keys, inverse = distinct_rows(list(points.T), len(points))
        t, outside = interpolate_many(table, np.ascontiguousarray(keys.T), roof if callable(roof) else _roof(roof))
        t, outside = t[inverse], outside[inverse]
        # one (times, outside?) pair of views per points array, handed to every ask that reads it
        # (the views of one cut: the same floats each ask's own views gave; only read)
        found = {k: (t[cut], outside[cut]) for k, cut in cuts.items()}
        for a, i in users:
            a.found[i] = found[id(a.points)]


@dataclass
class Gathered:
    """One program's expected times over its points before the lookups are resolved: every step
    at its bound / :data:`DEFAULT_EFFICIENCY`, ``asks`` the lookups of the steps a table covers."""

    times: np.ndarray                   # (kept steps, points)
    measured: np.ndarray
    t_sol: np.ndarray
    asks: list


def gather(plan, phase: str, batch, seq, ctx, tables: Tables, values: dict, keep=None,
           coordinates=None) -> Gathered:
    """The lookups of a program's kept steps (``keep``: indices into its steps, default all) at the
    points (``batch``, ``seq``, ``ctx``: 1-D arrays), each step a table may cover at all the points
    at once; ``values``: the compiled program's evaluation there (engine.deploy.cost: ``t_sol``,
    ``flops``, ``comm_bytes``, each (steps, points)); ``coordinates``: the lookups' coordinates at
    these points (:meth:`SharedCoordinates.at`; default: evaluated here)."""
    s = plan.structure
    if hasattr(s, "gather"):        # a structure made from the build's document: its own trees (engine.deploy.stored)
        return s.gather(plan, phase, batch, seq, ctx, values, keep)
    steps = s.programs[phase].steps
    keep = list(range(len(steps)) if keep is None else keep)
    n = len(batch)
    t_sol = _rows(values["t_sol"], keep, n)
    out = fallback(t_sol)
    if not looks_up(plan, tables):
        return out
    lookup = Lookup(plan.gpu, s.options.framework, phase, tables, plan.options.kv_dtype, s.config, s.ev.bound,
                    s.moe_routing)
    members = member_ops(s, phase)
    covered = _covered(plan, phase, lookup, members, keep)
    if covered:
        args: dict = {}
        if coordinates is None:
            dims = [symbols.dim(d) for d in symbols.SCENARIO_DIMS]     # (batch, seq, ctx)
            args = {d: np.broadcast_to(np.asarray(x, dtype=float), (n,)) for d, x in zip(dims, (batch, seq, ctx))}
            from engine.deploy.step_functions import KV_BYTES
            args[KV_BYTES] = np.full(n, float(plan.kv_bytes))
        values: dict = {}       # each coordinate's values at these points, once per expression
        for j in covered:
            step = steps[keep[j]]
            a = _ask(step, lookup, members, args, t_sol[j], j, values, coordinates)
            if a is not None:
                out.asks.append(a)
    return out


def looks_up(plan, tables) -> bool:
    """Whether :func:`gather` may look any step of ``plan`` up in ``tables``: not without tables
    (a GPU type and framework nothing was measured on), where every step is at its bound / the
    default efficiency (:func:`fallback`, :func:`unmeasured_times`); a structure made from the
    build's document (engine.deploy.stored) gathers by its own trees, always."""
    return bool(tables) or hasattr(plan.structure, "gather")


def unmeasured_times(t_sol: np.ndarray) -> np.ndarray:
    """:func:`finish`'s expected times of a program no table covers (``t_sol``: each step's bound
    over the points, (steps, points)), as one point-major (points, steps) array: each step's bound /
    :data:`DEFAULT_EFFICIENCY`, the very division :func:`fallback` makes, written point-major at
    once (the grid's GPU types without tables: most groups; no gathered copy, no flags)."""
    return point_major_divided(t_sol, DEFAULT_EFFICIENCY)


def finish(g: Gathered, detail: bool = False) -> tuple[np.ndarray, np.ndarray, dict | None]:
    """A gathered program's expected times once :func:`resolve` ran: at a covered point the faster
    table's time x calls, never below the step's bound; point-major (expected seconds, measured?,
    with ``detail`` {src, table, nearest}: per row the source text, the table file and the
    measured points around the point, "" or ``bound / 0.7`` where no table covers it)."""
    if not g.asks and not detail:       # nothing covered: the fallback's times, point-major
        return g.times.T.reshape(-1), g.measured.T.reshape(-1), None
    times, measured = g.times.copy(), g.measured
    k, n = times.shape
    text = None
    if detail:      # point-major, as the times: point p's step r at p x k + r
        src, path, near = [f"bound / {DEFAULT_EFFICIENCY:g}"] * (n * k), [""] * (n * k), [""] * (n * k)
        text = {"src": src, "table": path, "nearest": near}
    picks = []          # each ask's times at its points (written at once below: each (row, point) is one ask's)
    chosen: dict = {}   # the ids of an ask's found pairs (and its shape) -> _chosen's answer
    for a in g.asks:
        if len(a.found) == 1 and not detail:            # one table: its times (argmin's only choice)
            t = a.found[0][0]
        else:
            # asks of one points array and table list share their found pairs (resolve), so
            # their choices and texts are one computation (a step's layers repeat its spec)
            key = (tuple(map(id, a.found)), a.shape if detail else None)
            got = chosen.get(key)
            if got is None:
                got = chosen[key] = _chosen(a, detail)
            t = got[0]
            if detail:      # (the grid's per-op points: a few per ask, a loop beats numpy's calls)
                row = a.row
                for p, (src_text, near_text, table_path) in zip(a.at.tolist(), got[1]):
                    i = p * k + row
                    src[i], near[i], path[i] = src_text, near_text, table_path
        picks.append(t)
    if picks and not all(t.dtype == np.float64 for t in picks):     # (a float32 table's times x a float: float32)
        for a, t in zip(g.asks, picks):
            times[a.row, a.at] = np.maximum(t * a.repeat, g.t_sol[a.row, a.at])
            measured[a.row, a.at] = True
    elif picks:
        # t x calls, never below the bound: per element the product and maximum each ask's own
        # arrays gave (one assignment instead of one per ask; tests/test_grid_eighth_pass.py)
        sizes = [len(a.at) for a in g.asks]
        rows = np.repeat(np.array([a.row for a in g.asks], dtype=np.intp), sizes)
        at = np.concatenate([a.at for a in g.asks])
        repeat = np.repeat(np.array([a.repeat for a in g.asks], dtype=float), sizes)
        times[rows, at] = np.maximum(np.concatenate(picks) * repeat, g.t_sol[rows, at])
        measured[rows, at] = True
    return times.T.reshape(-1), measured.T.reshape(-1), text


def _chosen(a: Ask, detail: bool) -> tuple[np.ndarray, list | None]:
    """(the faster table's times at each of the ask's points (the first of equals), with ``detail``
    each point's (src, nearest, table file) texts, else None): a function of the ask's found pairs,
    points, tables and MoE shape alone (:func:`finish` shares it between asks holding the very same
    found pairs, which :func:`resolve` hands only to asks of one points array and one table list)."""
    t_all = np.stack([t for t, _ in a.found])
    best = np.argmin(t_all, axis=0)
    picked = np.arange(len(a.at))
    t = t_all[best, picked]
    if not detail:
        return t, None
    outside = np.stack([o for _, o in a.found])[best, picked].tolist()
    return t, [(*_point_text(a.tables[b], tuple(point), bool(out), a.shape), a.tables[b].path)
               for point, b, out in zip(a.points.tolist(), best.tolist(), outside)]


_TEXTS: dict[tuple, tuple] = {}      # (id(table), point, outside?, shape) -> (table, src, nearest)


def _point_text(table: Table, point: tuple, outside: bool, shape: str) -> tuple[str, str]:
    """(the per-op table's ``expected_src`` and ``expected_nearest`` of a lookup of ``table`` at
    ``point`` (its coordinates as floats), outside its measured range or not, of an MoE table's
    ``shape`` text), once per distinct (table, point, outside, shape): the grid's op points repeat
    the same coordinates (a shard of a matmul, a message size) under many steps, configs and GPUs."""
    key = (id(table), point, outside, shape)
    found = _TEXTS.get(key)
    if found is None or found[0] is not table:
        where = " ".join(f"{ax}={x:.0f}" for ax, x in zip(table.axes, point)) + shape
        if len(_TEXTS) > 100_000:
            _TEXTS.clear()
        found = _TEXTS[key] = (table, f"{table.name} ({table.source}) at {where}{', extrapolated' if outside else ''}",
                               nearest(table, point) + shape)
    return found[1], found[2]


def member_ops(structure, phase: str) -> dict[str, str]:
    """Step uid -> op of the phase's unfused program (what a fused step's members are); one dict
    per program object (structures of other regimes share their unfused programs), which callers
    only read, so :func:`step_spec` can key on it by identity."""
    program = structure.unfused[phase]
    found = _MEMBERS.get(id(program))
    if found is None or found[0] is not program:
        if len(_MEMBERS) > 20_000:
            _MEMBERS.clear()
        found = _MEMBERS[id(program)] = (program, {s.uid: s.op for s in program.steps})
    return found[1]


_MEMBERS: dict[int, tuple] = {}      # id(unfused program) -> (program, its member_ops)


_COVERED: dict[tuple, tuple] = {}


def _covered(plan, phase: str, lookup: Lookup, members: dict, keep) -> list[int]:
    """The positions in ``keep`` of the steps a table may cover (a kernel class with a table of
    this GPU and framework: the others are bound / the default efficiency at every point), once
    per program, GPU, framework, KV dtype and config (the grid asks the same again and again)."""
    program = plan.structure.programs[phase]
    steps = program.steps
    key = (id(program), id(lookup.tables), lookup.gpu.key, lookup.framework, phase, lookup.kv_dtype,
           lookup.config, len(keep), keep[0] if keep else -1, keep[-1] if keep else -1)
    found = _COVERED.get(key)
    if found is None or found[0] is not program or found[1] is not lookup.tables or found[3] != keep:
        if len(_COVERED) > 20_000:
            _COVERED.clear()
        out = []
        kernels = _table_kernels(lookup.tables, lookup.gpu.key)
        for j, i in enumerate(keep):
            step = steps[i]
            kernel = _kernel(step, members, phase)     # (a step of no calls asks nothing: step_spec's None)
            if kernel and kernel in kernels:
                out.append(j)
        found = _COVERED[key] = (program, lookup.tables, out, list(keep))
    return found[2]


def _table_kernels(tables: Tables, gpu_key: str) -> frozenset:
    """The kernel classes ``tables`` holds a table of for GPU ``gpu_key`` (a key's first and third
    parts), once per table set and GPU: :func:`_covered` asks it of every step of every program."""
    key = (id(tables), gpu_key)
    found = _KERNELS.get(key)
    if found is None or found[0] is not tables:
        if len(_KERNELS) > 1_000:
            _KERNELS.clear()
        found = _KERNELS[key] = (tables, frozenset(k[2] for k in tables if k[0] == gpu_key))
    return found[1]


_KERNELS: dict[tuple, tuple] = {}     # (id(tables), GPU key) -> (the tables, _table_kernels' set)


def _rows(value, keep: list[int], n: int) -> np.ndarray:
    """The kept steps' rows of an evaluation (steps, points) over the ``n`` points."""
    rows = np.asarray(value, dtype=float)[keep]
    return rows if rows.shape == (len(keep), n) else np.broadcast_to(rows, (len(keep), n))


def expected_steps(plan, phase: str, batch, seq, ctx, tables: Tables, values: dict,
                   keep=None, detail: bool = False) -> tuple[np.ndarray, np.ndarray, dict | None]:
    """Per kept step (``keep``: indices into the program's steps, default all) and point
    (``batch``, ``seq``, ``ctx``: 1-D arrays of the points), point-major like the per-op table:
    (expected seconds, measured?, with ``detail`` {src, table, nearest}: lists of text, else None).
    ``values``: the compiled program's evaluation at those points (engine.deploy.cost: ``t_sol``,
    ``flops``, ``comm_bytes``, each (steps, points)). :func:`gather`, :func:`resolve` and
    :func:`finish` of one program; the build runs the three over many programs at once
    (engine.deploy.plan.expected_phase_times_many), the same arithmetic per point."""
    g = gather(plan, phase, batch, seq, ctx, tables, values, keep)
    resolve(g.asks)
    return finish(g, detail)
