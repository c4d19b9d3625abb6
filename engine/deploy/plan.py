"""A plan (a structure on one GPU type) and its deployment at a scenario point: summary, phase
totals and per-op tables, with the expected times from measured kernels.

Layer: engine.deploy. :class:`Plan` and :class:`Deployment` are what ``archledger deploy`` and the
planner hand around; the numbers are :mod:`engine.deploy.sol`'s (:func:`~engine.deploy.sol.summarize`
at the plan's points) and the per-op rows :mod:`engine.deploy.op_rows`'. :mod:`engine.deploy.planner`
(which makes plans) imports this module, never the reverse.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine.language import kv
from engine.deploy.cost import compile_program
from engine.deploy.structure import PHASES, Formulas, Options, Scenario, Structure, option_where
from engine.deploy.hardware import GPU
from engine.deploy.measured import (SharedCoordinates, finish, gather, looks_up, resolve, shared_measured,
                                    unmeasured_times)
from engine.deploy.op_rows import op_rows
from engine.deploy.sol import _distinct_codes, distinct_rows, phase_at_points, phase_inputs, summarize, two_batch_time
from engine.language.errors import SpecError


_OPTIONS: dict[tuple, tuple] = {}     # (id(a structure's options), KV dtype) -> (them, Plan.options' copy)


@dataclass
class Plan:
    """A structure on one GPU type: what :meth:`at` and the grid build evaluate."""

    structure: Structure
    gpu: GPU
    kv_dtype: str = ""                    # empty: the structure's options (KV size is a free symbol)

    def __getattr__(self, name):          # programs, formulas, weights ... live on the structure
        if name == "structure":
            raise AttributeError(name)
        return getattr(self.structure, name)

    @property
    def options(self) -> Options:
        s = self.structure.options
        if not self.kv_dtype:
            return s
        # one copy per (options, KV dtype): Options is frozen, and the grid asks this per group
        # and step (dataclasses.replace was about a twentieth of its expected times)
        key = (id(s), self.kv_dtype)
        found = _OPTIONS.get(key)
        if found is None or found[0] is not s:
            if len(_OPTIONS) > 10_000:
                _OPTIONS.clear()
            found = _OPTIONS[key] = (s, replace(s, kv_dtype=self.kv_dtype))
        return found[1]

    @property
    def model_id(self) -> str:
        return self.structure.ev.model.model_id

    @property
    def kv_bytes(self) -> int:
        # options' KV dtype without the dataclass copy :attr:`options` makes (the per-op tables ask per call)
        return kv.KV_DTYPE_BYTES[self.kv_dtype or self.structure.options.kv_dtype]

    def evaluate(self, phase: str, batch, seq, ctx, weights: bool = False) -> dict[str, np.ndarray]:
        """Per-step arrays at (batch, seq, ctx) (broadcastable arrays) on this plan's GPU."""
        return self.structure.compiled[phase].evaluate(self.gpu, batch, seq, ctx, self.kv_bytes, weights)

    def at(self, scenario: Scenario):
        """The deployment at one scenario point (summary, phase totals, per-op table)."""
        return Deployment.build(self, scenario)

    def without_fusion(self) -> "Plan":
        """The same plan with the programs as they were before fusion."""
        s = self.structure
        unfused = replace(s, programs=s.unfused, compiled={p: compile_program(s.unfused[p]) for p in PHASES},
                          symbolic=Formulas(make=lambda: (s.unfused_formulas, s.unfused_formulas, s.weight_formula)))
        return Plan(unfused, self.gpu, self.kv_dtype)


def expected_phase_times(plan: Plan, batch, input_len, output_len, tables) -> dict[str, np.ndarray]:
    """Each of :func:`phase_inputs`' step times from measured kernels: the sum over the program's
    steps of their expected times (engine.deploy.measured.expected_steps) at the input's points,
    one kernel after another; under the ``two_batch`` overlap :func:`two_batch_time` of the
    half-batch's expected kernels and collectives (the estimate's rule, expected times in place
    of SOL). Never below the input's bound (each op's expected time is at least its SOL).
    :func:`expected_phase_times_many` of this one plan."""
    return expected_phase_times_many([(plan, batch, input_len, output_len, tables)])[0]


def expected_phase_times_many(asked: list[tuple], inputs: list | None = None) -> list[dict[str, np.ndarray]]:
    """``[expected_phase_times(plan, batch, input_len, output_len, tables) for each of asked]``,
    with each program looked up once over the points of every plan that runs it on one GPU, KV
    dtype, framework, config and table set (the grid's buckets of one structure and their
    sibling structures ask the same programs over a few dozen points each; a lookup's cost is
    mostly per call): every program's lookups are gathered first and each measured table is
    interpolated once over all of them (engine.deploy.measured.gather / resolve / finish). A
    program's GPU-independent work (its columns and its lookups' coordinates at the points) is
    done once over the points of all its GPUs and KV dtypes (:func:`_program_points`). Every
    number is per-point arithmetic, so each plan gets the floats its own call gives. ``inputs``: each
    plan's :func:`phase_inputs` at its points (with its options' prefill budget and ``mean``) when
    the caller has them (the grid: picked out of its call's, :func:`pick_inputs`)."""
    groups: dict[tuple, dict] = {}    # (program, framework, config, phase) -> (GPU, KV dtype, tables) -> group
    given, inputs = inputs, []        # each plan's phase_inputs (read again below)
    for i, (plan, batch, input_len, output_len, tables) in enumerate(asked):
        structure = plan.structure
        halves = (False, True) if (structure.options.overlap or "none") == "two_batch" else (False,)
        inputs.append(given[i] if given is not None else
                      phase_inputs(structure, batch, input_len, output_len, plan.options.prefill_tokens, mean=True))
        for name, (compiled, b, seq, ctx) in inputs[-1].items():
            shape = points_shape((b, seq, ctx))
            b, seq, ctx = (_flat(x, shape) for x in (b, seq, ctx))
            phase = "decode" if name.startswith("decode") else "prefill"
            key, member = _group_key(plan, phase, compiled, tables)
            runs = groups.setdefault(key, {}).setdefault(member, (plan, phase, compiled, tables, []))[4]
            for half in halves:
                runs.append((i, name, half, b / 2 if half else b, seq, ctx, shape))
    # every program's lookups first, then each table interpolated once over all of them; each
    # group at its distinct (batch, seq, ctx) points only (prefill does not read the output length,
    # a program batch saturates, decode and its mean share points: about half of a group's points
    # repeat another), spread back after (every number is per point, so the same floats)
    # (a group nothing can be looked up for, a GPU type without tables: most of them, takes its
    # times point-major at once, measured.unmeasured_times: finish's floats, no gathered copy)
    # (every group's (batch, seq, ctx, KV size) points in one point set, :func:`_every_point`: the
    # programs' step functions and the lookups' coordinates are evaluated once over it and each
    # program picks its points out)
    every, where = _every_point([list(g.values()) for g in groups.values()])
    shared = _Lazy(lambda: SharedCoordinates(*every))
    gathered, spread, members = [], [], []
    for program_groups, positions in zip(groups.values(), where):
        for (plan, phase, compiled, tables, runs), (points, inverse, values, coordinates) in \
                zip(program_groups.values(), _program_points(list(program_groups.values()), every, positions,
                                                             shared)):
            spread.append(inverse)
            members.append((plan, phase, compiled, tables, runs))
            gathered.append(gather(plan, phase, *points, tables, values, coordinates=coordinates)
                            if looks_up(plan, tables) else unmeasured_times(values["t_sol"]))
    resolve([a for g in gathered if type(g) is not np.ndarray for a in g.asks])
    found: dict[tuple, dict] = {}
    for (plan, phase, compiled, tables, runs), g, inverse in zip(members, gathered, spread):
        if type(g) is np.ndarray:       # point-major already: each point's steps
            times = g
        else:
            times = finish(g)[0].reshape(g.times.shape[1], -1)
        comm = _comm_steps(plan.structure.programs[phase])
        total, stream = times.sum(axis=1)[inverse], times[:, comm].sum(axis=1)[inverse]
        start = 0
        for i, name, half, rb, _, _, _ in runs:
            cut = slice(start, start + len(rb))
            found[(i, name, half)] = {"step_time_s": total[cut], "comm_stream_s": stream[cut]}
            start += len(rb)
    out = []
    for i, (plan, batch, input_len, output_len, tables) in enumerate(asked):
        structure = plan.structure
        mine = {}
        for name, (compiled, b, seq, ctx) in inputs[i].items():
            shape = points_shape((b, seq, ctx))
            full = found[(i, name, False)]
            if (structure.options.overlap or "none") == "two_batch":
                b, seq, ctx = (np.broadcast_to(np.asarray(x, dtype=float), shape).reshape(-1) for x in (b, seq, ctx))
                bound = phase_at_points(compiled, [plan.gpu], 0, b, seq, ctx, plan.kv_bytes)["step_bound_s"]
                full = dict(full, step_time_s=two_batch_time(found[(i, name, True)], dict(full, step_bound_s=bound),
                                                             b / structure.config.dp_attn))
            mine[name] = full["step_time_s"].reshape(shape)
        out.append(mine)
    return out


def _group_key(plan: Plan, phase: str, compiled, tables) -> tuple[tuple, tuple]:
    """(program key, member key) of one phase input of ``plan`` in
    :func:`expected_phase_times_many`: its runs join the group of every other input with both keys.

    A plan that looks something up (:func:`looks_up`) reads what ``gather`` reads: its program and
    compiled form, framework and config (the program key), its GPU, KV dtype and tables (the
    member key). One that looks nothing up (a GPU type without tables: most of the grid's) reads
    only the compiled program's numbers (its step functions, constants and rate kinds, the steps'
    collective mask: all in :meth:`~engine.deploy.cost.CompiledProgram.evaluation_key`, the key
    :func:`engine.deploy.sol.phases_many` already evaluates sibling programs by), the GPU and the
    KV size: each step's ``t_sol / DEFAULT_EFFICIENCY`` (:func:`unmeasured_times`). So the
    programs of other frameworks, fusion regimes and domains with one evaluation key share one
    group per (GPU, KV size), evaluated once over the distinct points of all their runs (the
    grid: DeepSeek-V4-Pro 1,200 such groups of 736 keys). Every number is per point, so each run
    gets the floats of its own program's group (tests/test_grid_tenth_pass.py). The two kinds of
    program key never meet (the first is tagged)."""
    if looks_up(plan, tables):
        structure = plan.structure
        return ((id(structure.programs[phase]), id(compiled), structure.options.framework, structure.config, phase),
                (plan.gpu.key, plan.options.kv_dtype, id(tables)))
    return ("unmeasured", compiled.evaluation_key()), (plan.gpu.key, float(plan.kv_bytes))


def pick_inputs(inputs: dict[str, tuple], at: np.ndarray) -> dict[str, tuple]:
    """:func:`phase_inputs` of some points (``inputs``: its answer at 1-D points) at the points ``at``
    picks: each per-point array's picks, a single number as it is. Every value of phase_inputs is
    per-point arithmetic (a point's batch, seq and ctx read its own batch and lengths), so these are
    the values :func:`phase_inputs` gives at the picked points themselves
    (tests/test_grid_eighth_pass.py)."""
    return {name: (compiled, *(x[at] if np.ndim(x) == 1 else x for x in values))
            for name, (compiled, *values) in inputs.items()}


def flat_inputs(inputs: dict[str, tuple]) -> dict[str, tuple]:
    """:func:`phase_inputs`' answer at 1-D points with each input of a phase whose values are per
    point (its broadcast shape the points') as floats over the points (:func:`_flat`, what
    :func:`expected_phase_times_many` makes of them), others as they are. Per point, so
    :func:`pick_inputs` of these at any points, flattened again there, gives the floats of flattening
    the picked inputs; picked by a slice they are views (the grid's groups: no copy, no conversion
    per group)."""
    out = {}
    for name, (compiled, *values) in inputs.items():
        shape = points_shape(values)
        out[name] = (compiled, *(_flat(x, shape) for x in values)) if len(shape) == 1 else (compiled, *values)
    return out


def points_shape(values) -> tuple:
    """``np.broadcast_shapes`` of the shapes of ``values`` (numbers and arrays): where each is a number
    or a 1-d array of one length (the grid's phase inputs: a point's batch, seq and ctx, or one
    number for every point) that length, found without numpy's general machinery (asked per
    group and phase input: about a microsecond each instead of five); any other mix goes to numpy
    (the same answer, or its error)."""
    shape = ()
    for x in values:
        mine = x.shape if type(x) is np.ndarray else np.shape(x)
        if not mine or mine == shape:
            continue
        if shape or len(mine) != 1:
            return np.broadcast_shapes(*(np.shape(v) for v in values))
        shape = mine
    return shape


def _flat(x, shape: tuple) -> np.ndarray:
    """``x`` as floats over the points of ``shape``, flattened: the array itself (as floats) where
    it has that shape already (most phase inputs), else broadcast (the same values either way)."""
    a = np.asarray(x, dtype=float)
    return a.reshape(-1) if a.shape == shape else np.broadcast_to(a, shape).reshape(-1)


def _comm_steps(program) -> np.ndarray:
    """Which of ``program``'s steps are collectives (a bool per step: the communication stream's
    share of the step time), once per program (its groups on every GPU type and KV dtype ask)."""
    found = _COMM.get(id(program))
    if found is None or found[0] is not program:
        if len(_COMM) > 5_000:
            _COMM.clear()
        mask = np.array([s.kind == "comm" for s in program.steps], dtype=bool)
        mask.flags.writeable = False
        found = _COMM[id(program)] = (program, mask)
    return found[1]


_COMM: dict[int, tuple] = {}      # id(program) -> (it, _comm_steps' mask)


def _every_point(programs: list[list[tuple]]) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """One point set of the (batch, seq, ctx, KV size) points of every group of every program
    (``programs``: each program's members, as :func:`_program_points` takes them): its four columns
    (the distinct points, :func:`distinct_rows`' order, which depends on the set of points alone)
    and, per program and member, each of the member's points' position in it.

    Each step function is evaluated once over this set and every program picks its points out of
    it (engine.deploy.compiled_tables: a gather, the floats of evaluating there). The grid's
    summaries (:func:`engine.deploy.sol.phases_many`) ask the very same set of points (the same
    phase inputs of the same points and KV sizes), so they find the step functions' values there
    already (engine.deploy.point_values keys a point set by its arrays' bytes)."""
    columns: list[list[np.ndarray]] = [[], [], [], []]
    sizes = []
    for members in programs:
        for plan, _, _, _, runs in members:
            kv_bytes = float(plan.kv_bytes)
            n = 0
            for r in runs:
                for k in range(3):
                    columns[k].append(r[3 + k])
                columns[3].append(np.full(len(r[3]), kv_bytes))
                n += len(r[3])
            sizes.append(n)
    total = sum(sizes)
    keys, inverse = distinct_rows([np.concatenate(c) if c else np.zeros(0) for c in columns], total)
    where, start, m = [], 0, 0
    for members in programs:
        mine = []
        for _ in members:
            mine.append(inverse[start:start + sizes[m]])
            start += sizes[m]
            m += 1
        where.append(mine)
    return list(keys), where


class _Lazy:
    """A value made by ``make()`` on first use (:func:`expected_phase_times_many`'s coordinates:
    not made when every program is a stored one, which evaluates its own)."""

    def __init__(self, make):
        self.make, self.value = make, None

    def __call__(self):
        if self.value is None:
            self.value = self.make()
        return self.value


def _program_points(members: list[tuple], every: list[np.ndarray] | None = None,
                    positions: list[np.ndarray] | None = None, shared: "_Lazy | None" = None) -> list[tuple]:
    """For the groups of one program (``members``: (plan, phase, compiled, tables, runs) of each
    GPU, KV dtype and table set that runs it), each group's distinct (batch, seq, ctx) points (in
    the order :func:`distinct_rows` gives them: by context, then seq, then batch), the inverse that
    spreads them back over the group's runs, the program's evaluation there on the group's GPU
    (``t_sol``: what :func:`engine.deploy.measured.gather` reads) and the lookups' coordinates
    there (:class:`engine.deploy.measured.SharedCoordinates`; None for a structure made from a
    build's document, which evaluates its own).

    The columns and the coordinates do not read the GPU, only the point and the KV size: the
    groups of one KV size are evaluated once over the distinct points of them all (KV size as the
    one number each group's own evaluation gets) and each group takes its points out (a pure
    copy), then divides by its GPU's rates (CompiledProgram.step_sol, per point). So each group
    gets the floats of its own evaluation (tests/test_grid_gpu_shared.py). With ``every``
    (:func:`_every_point`'s point set, ``positions`` each member's points' places in it) the
    columns are picked out of that set's values instead, and with ``shared`` (its
    :class:`SharedCoordinates`, made on first use) the coordinates too (the same floats: per point)."""
    compiled = members[0][2]
    stored = hasattr(members[0][0].structure, "gather")
    points = [tuple(np.concatenate([r[k] for r in runs]) for k in (3, 4, 5)) for *_, runs in members]
    by_kv: dict[float, list[int]] = {}
    for m, (plan, *_) in enumerate(members):
        by_kv.setdefault(float(plan.kv_bytes), []).append(m)
    out: list = [None] * len(members)
    for kv_bytes, mine in by_kv.items():
        sizes = [len(points[m][0]) for m in mine]
        if every is None:
            union, inverse = distinct_rows([np.concatenate([points[m][k] for m in mine]) for k in range(3)],
                                           sum(sizes))
            b, seq, ctx = union
            columns = compiled.point_columns(b, seq, ctx, kv_bytes)
        else:
            # the union: the distinct places of these groups' points in the whole point set, in its
            # order (at one KV size: by ctx, then seq, then batch, distinct_rows' order of the three)
            in_every, inverse = _distinct_codes(np.concatenate([positions[m] for m in mine]), len(every[0]))
            b, seq, ctx = (every[k][in_every] for k in range(3))
            columns = compiled.columns((0, 1, 2, 4), every, every[0].shape, at=in_every)
        # the lookups' coordinates: the whole point set's (the union's points at their places), or the union's
        coordinates = None if stored else SharedCoordinates(b, seq, ctx, kv_bytes) if shared is None else shared()
        places = np.arange(len(b)) if shared is None else in_every
        start = 0
        for m, size in zip(mine, sizes):
            # the group's distinct points: its rows of the union, in the union's order
            at, spread = _distinct_codes(inverse[start:start + size], len(b))
            start += size
            t_sol = compiled.step_sol(members[m][0].gpu, columns.take(at, axis=2))
            out[m] = ((b[at], seq[at], ctx[at]), spread, {"t_sol": t_sol},
                      None if coordinates is None else coordinates.at(places[at]))
    return out


def summarize_plan(plan: Plan, batch, input_len, output_len, tables=None) -> dict[str, Any]:
    """:func:`summarize` for one plan (one GPU, one KV dtype), with the plan's labels; ``tables``
    (engine.deploy.measured.load_measured): add the expected times."""
    return summarize_plans([(plan, batch, input_len, output_len, tables)])[0]


def summarize_plans(asked: list[tuple]) -> list[dict[str, Any]]:
    """``[summarize_plan(plan, batch, input_len, output_len, tables) for each of asked]``, the
    expected times of all of them from one :func:`expected_phase_times_many` (each measured table
    interpolated once over every plan's points: plan's answers read a config's fusion regimes
    together); every number is per-point arithmetic, so each gets its own call's floats."""
    with_tables = [a for a in asked if a[4] is not None]
    found = iter(expected_phase_times_many(with_tables) if with_tables else [])
    out = []
    for plan, batch, input_len, output_len, tables in asked:
        options = plan.options
        expected = None if tables is None else next(found)
        s = summarize(plan.structure, [plan.gpu], 0, plan.kv_bytes, batch, input_len, output_len,
                      options.hbm_fraction, options.prefill_tokens, expected=expected)
        s.update({"model_id": plan.model_id, "gpu": plan.gpu.key, "framework": options.framework,
                  "weight_format": options.weight_format, "kv_dtype": options.kv_dtype,
                  "act_dtype": options.act_dtype})
        out.append(s)
    return out


def _scalar(value) -> Any:
    value = np.asarray(value).reshape(-1)[0] if isinstance(value, np.ndarray) else value
    return value.item() if hasattr(value, "item") else value


@dataclass
class Deployment:
    """One scenario point of a plan: the summary (Parquet field names) and per-phase op tables.

    The per-op tables (:attr:`ops`) are made on their first read, from the plan, scenario and
    measured tables the summary was evaluated with (the same rows as when they were made with the
    summary): a caller that reads only the summary and phase totals (plan's search, the
    in-process estimate) does not pay for them (about a third of a point's evaluation, and, on a
    fresh plan, printing every step's formulas)."""

    plan: Plan
    scenario: Scenario
    summary: dict[str, Any]
    phases: dict[str, dict[str, Any]]
    tables: Any = field(default=None, repr=False)     # the measured tables the summary read
    _ops: dict | None = field(default=None, repr=False)

    @property
    def ops(self) -> dict[str, list[dict[str, Any]]]:
        """Per phase, the per-op rows (engine.deploy.op_rows.op_rows) at this point."""
        if self._ops is None:
            self._ops = {p: op_rows(self.plan, p, self.scenario, self.tables) for p in PHASES}
        return self._ops

    @staticmethod
    def build(plan: Plan, scenario: Scenario, tables=None) -> "Deployment":
        """The deployment at ``scenario``; ``tables``: measured kernel tables for the expected
        times (engine.deploy.measured.load_measured; default: the repo's, this GPU's)."""
        if scenario.batch < 1 or scenario.input_len < 1 or scenario.output_len < 0:
            raise SpecError(option_where("--batch/--input/--output"), f"bad scenario {scenario}",
                            "batch and input must be positive, output not negative")
        if tables is None:
            # this GPU's measured kernels under this framework (gpus/measured/): one dict while the
            # files are unchanged (engine.deploy.measured_tables.shared_measured), only read
            tables = shared_measured(gpu=plan.gpu.key, framework=plan.options.framework)
        out = summarize_plan(plan, scenario.batch, scenario.input_len, scenario.output_len, tables)
        raw = out.pop("phases")
        phases = {p: {k: _scalar(v) for k, v in raw[p].items()} for p in PHASES}
        summary = {k: _scalar(v) for k, v in out.items()}
        return Deployment(plan, scenario, summary, phases, tables)
