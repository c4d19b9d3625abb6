"""Per-op rows of a plan at scenario points (the ``ops`` table, ``archledger deploy``'s per-op
listing) and the formula texts of each step (the per-op table's and the deploy page's formulas).

Layer: engine.deploy. Values come from the compiled programs (:class:`engine.deploy.plan.Plan`'s
structure, :mod:`engine.deploy.cost`), expected times from :mod:`engine.deploy.measured`; the texts
are printed once per distinct step (structures share their step objects). Field names are the
Parquet schema's.
"""
from __future__ import annotations

import functools
import weakref
from typing import Any

import numpy as np

from engine.deploy import roofline
from engine.deploy.cost import BOUNDS, intensity
from engine.deploy.structure import Scenario, Structure, prefill_program_batch, program_batch
from engine.deploy.measured import SharedCoordinates, finish, gather, resolve
from engine.deploy.sol import distinct_rows
from engine.deploy.stored import StoredProgram
from engine.language.memo import remembered_for

#: ``plan`` arguments below are :class:`engine.deploy.plan.Plan` (which imports this module: not
#: imported here)


_TEXT: dict = {}
#: The per-op formulas' printers: sympy's own, with the terms of a sum in the expression's stored
#: order (sympy's canonical one, the same in every process) instead of re-sorted by degree for
#: display; that sort was two thirds of printing the tens of thousands of distinct op formulas a
#: build writes. Made on first use (sympy's): rows read from a build's document print nothing.
@functools.lru_cache(maxsize=None)
def _printer(**settings):
    from engine.language.memo_printer import MemoStrPrinter
    return MemoStrPrinter(settings) if settings else MemoStrPrinter()


def _text(expr) -> str:
    """A per-op formula as text; printing is slow and the same formula recurs across configs, GPUs
    and frameworks (degrees are symbols), so each distinct formula is printed once per process."""
    text = _TEXT.get(expr)
    if text is None:
        text = _TEXT[expr] = _printer(order="none").doprint(expr)
    return text


_PLAIN: dict = {}
#: ``str(expr)``'s printer is ``_printer()`` (sympy's default settings)
_PLAIN_BY_ID: dict[int, tuple] = {}        # id(formula) -> (formula, text): structures share formula objects


def weight_text(expr) -> str:
    """A weights-per-GPU formula as ``str()`` prints it (the deployments table's
    ``weight_bytes_per_gpu_formula`` and the deploy page's config rows), printed once per process:
    the same formula recurs across every regime, framework and domain of a config, and across
    configs whose degrees are symbols."""
    def make() -> str:          # by value: an equal formula of another structure
        text = _PLAIN.get(expr)
        if text is None:
            text = _PLAIN[expr] = _printer().doprint(expr)
        return text
    return remembered_for(_PLAIN_BY_ID, expr, make, 200_000)     # the same object: no formula compared term by term


#: id(symbolic step) -> (step, its four texts): structures share most of their steps (the same
#: objects), and looking a step's totals up by their expressions compares large formulas.
_STEP_TEXT: dict[int, tuple] = {}


def _step_text(step) -> tuple[str, str, str, str]:
    """The four totals of one symbolic step as text (:func:`_text`), once per step object."""
    def make() -> tuple:
        from engine.deploy.step_totals import step_totals     # sympy's: a stored step has its texts
        return tuple(_text(e) for e in step_totals(step))
    return remembered_for(_STEP_TEXT, step, make, 200_000)    # steps are shared within one model: bounded


#: id(symbolic program) -> (program, its steps' texts): structures of other regimes, domains and
#: GPUs hold the very same program objects (planner._fused's memo).
_PROGRAM_TEXT: dict[int, tuple] = {}


def formula_text(structure: Structure, phase: str) -> list[tuple[str, str, str, str]]:
    """The four formulas of every step as text (GPU- and point-free: once per symbolic program)."""
    program = structure.formulas[phase]
    if isinstance(program, StoredProgram):        # the build's texts (engine.deploy.stored)
        return [step.formulas for step in program.steps]
    mine = _PROGRAM_TEXT.get(id(program))
    if mine is not None and mine[0] is program:   # the same object (an id alone can be reused)
        return mine[1]
    text = [_step_text(sym) for sym in program.steps]
    if len(_PROGRAM_TEXT) > 5_000:                # programs are shared within one model: keep it bounded
        _PROGRAM_TEXT.clear()
    _PROGRAM_TEXT[id(program)] = (program, text)
    return text


#: :data:`engine.deploy.cost.BOUNDS` as an array: a row's bound is one gather, not a lookup per row.
_BOUND_NAMES = np.asarray(BOUNDS, dtype=object)

#: (id(numeric program), id(symbolic program)) -> (numeric, symbolic, their op rows' GPU-free labels)
_LABELS: dict[tuple, tuple] = {}

#: (ids of the numeric, symbolic and compiled programs, the phase, config, prefill budget, decode
#: seq, KV bytes, points) -> (those three programs, the GPU-free part of their op rows there): the
#: grid asks the same structure at the same points once per GPU type of its class, and only the
#: times divide by the GPU's rates.
_POINT_ROWS: dict[tuple, tuple] = {}


def _point_rows(plan, phase: str, points: list[Scenario]) -> tuple:
    """(the compiled program, (batch, seq, ctx) of the points, kept step indices, one point's
    labels, the GPU-free value columns point-major) of :func:`op_rows_columns`, once per program
    pair, KV size and point set (:data:`_POINT_ROWS`; the arrays are read-only, shared by callers)."""
    from engine.deploy.cost import scenario_point
    s = plan.structure
    numeric, symbolic, compiled = s.programs[phase], s.formulas[phase], s.compiled[phase]
    options = s.options
    key = (id(numeric), id(symbolic), id(compiled), phase, s.config, options.prefill_tokens, options.decode_seq,
           plan.kv_bytes, tuple((p.batch, p.input_len, p.output_len) for p in points))
    mine = _POINT_ROWS.get(key)
    if mine is not None and mine[0] is numeric and mine[1] is symbolic and mine[2]() is compiled:
        return (compiled, *mine[3])
    budget = options.prefill_tokens
    batch = np.array([prefill_program_batch(s.config, p.batch, p.input_len, budget) if phase == "prefill"
                      else program_batch(s.config, p.batch) for p in points], dtype=float)
    where = [scenario_point(phase, p.input_len, p.output_len, options.decode_seq) for p in points]
    seq = np.array([w["seq"] for w in where], dtype=float)
    ctx = np.array([w["ctx"] for w in where], dtype=float)
    keep, one = _labels(s, phase)
    values = compiled.evaluate(plan.gpu, batch, seq, ctx, plan.kv_bytes, True)
    # point-major: the kept steps of each point in turn (one gather of every value, already in
    # that order: each is (steps, points))
    names = ("flops", "bytes", "weight_bytes", "comm_bytes")
    v = dict(zip(names, np.stack([values[name] for name in names])[:, keep].transpose(0, 2, 1).reshape(len(names), -1)))
    v["intensity"] = intensity(v["flops"], v["bytes"])
    for array in (batch, seq, ctx, *v.values()):
        array.flags.writeable = False            # shared by every GPU type that asks
    found = (compiled, (batch, seq, ctx), keep, one, v)
    if len(_POINT_ROWS) > 5_000:                  # a model's structures and points: keep it bounded
        _POINT_ROWS.clear()
    # the compiled program by a weak reference (its own caches are large; the structure holds it), the
    # programs as _LABELS holds them; the entry stored has no strong reference to the compiled program
    _POINT_ROWS[key] = (numeric, symbolic, weakref.ref(compiled), found[1:])
    return found


def _labels(s: Structure, phase: str) -> tuple:
    """(kept step indices, their op rows' GPU-free labels for one point), once per (numeric,
    symbolic) program pair: several GPU types, and structures of other regimes and domains,
    share the very same programs."""
    key = (id(s.programs[phase]), id(s.formulas[phase]))
    mine = _LABELS.get(key)
    if mine is None or mine[0] is not s.programs[phase] or mine[1] is not s.formulas[phase]:
        if len(_LABELS) > 5_000:                  # programs are shared within one model: keep it bounded
            _LABELS.clear()
        text = formula_text(s, phase)
        steps = s.programs[phase].steps
        keep = [i for i, step in enumerate(steps) if not step.view]          # views launch nothing
        mine = _LABELS[key] = (s.programs[phase], s.formulas[phase], np.array(keep, dtype=np.intp), {
            "op_uid": [steps[i].uid for i in keep], "op_name": [steps[i].name for i in keep],
            "op": [steps[i].op for i in keep], "component": [steps[i].component for i in keep],
            "role": [steps[i].role for i in keep], "kind": [steps[i].kind for i in keep],
            "repeat": [_count(steps[i].repeat) for i in keep],
            "link": [steps[i].link for i in keep], "group": [steps[i].group for i in keep],
            "flops_formula": [text[i][0] for i in keep], "bytes_formula": [text[i][1] for i in keep],
            "comm_bytes_formula": [text[i][2] for i in keep], "weight_bytes_formula": [text[i][3] for i in keep],
            "parts": [list(steps[i].parts) for i in keep], "dtype": [steps[i].compute_dtype for i in keep]})
    return mine[2], mine[3]


def _count(repeat) -> int | None:
    """A step's calls as the op rows print them: a whole number (a stored step's is a float), None
    for a repeat that is not a number."""
    return int(repeat) if getattr(repeat, "is_number", True) else None


def op_rows_columns(plan, phase: str, scenario: Scenario | list[Scenario], arrays: bool = False,
                    tables=None) -> dict[str, list]:
    """The per-op SOL table of one phase at one or several points, as columns (Parquet names),
    formulas included; several points are evaluated in one vectorized call, point-major. With
    ``arrays`` the numeric columns are NumPy arrays (the build's tables), else lists of floats.

    Values are those of one pipeline micro-batch (the unit the phase totals are made of): for prefill
    one chunked-prefill step (:func:`engine.deploy.structure.prefill_steps`). The GPU-free part (labels,
    FLOPs and bytes, intensity) comes from :func:`_point_rows`, computed once per program pair and
    point set (with ``arrays`` those columns are its read-only arrays, shared by the GPU types that
    ask); only the times are this GPU's. ``tables`` (engine.deploy.measured.load_measured): add
    each op's expected time ``t_expected_s``, whether a measured table gave it (``measured``),
    which (``expected_src``: its kernel, framework, version and source package at the op's point,
    or the default efficiency; ``expected_table``: its file; ``expected_nearest``: the measured
    values around the point), engine.deploy.measured's rule. :func:`op_rows_columns_many` of this
    one table."""
    points = scenario if isinstance(scenario, list) else [scenario]
    return op_rows_columns_many([(plan, phase, points, tables)], arrays)[0]


def op_rows_columns_many(asked: list[tuple], arrays: bool = False) -> list[dict[str, list]]:
    """``[op_rows_columns(plan, phase, points, arrays, tables) for each (plan, phase, points,
    tables) of asked]``, every table's lookups gathered first and each measured table interpolated
    once over the points of all of them (engine.deploy.measured.gather / resolve / finish): the
    grid asks a few points of each of hundreds of structures, and an interpolation's cost is
    mostly per call. Every number is per-point arithmetic, so each gets its own call's floats."""
    rows = [_point_rows(plan, phase, points) for plan, phase, points, _ in asked]
    coordinates = _shared_coordinates([(plan, r[1]) for (plan, *_, tables), r in zip(asked, rows)
                                       if tables is not None])
    started = []
    for (plan, phase, points, tables), (compiled, (batch, seq, ctx), keep, one, v) in zip(asked, rows):
        values = compiled.evaluate(plan.gpu, batch, seq, ctx, plan.kv_bytes, True)
        g = gather(plan, phase, batch, seq, ctx, tables, values, keep, coordinates=next(coordinates)) \
            if tables is not None else None
        started.append((plan, len(points), keep, one, v, values, g))
    resolve([a for *_, g in started if g is not None for a in g.asks])
    tiled: dict | None = {} if arrays else None
    return [_columns(*s, arrays, tiled) for s in started]


def _shared_coordinates(asked: list[tuple]):
    """For each (plan, (batch, seq, ctx)) of ``asked`` in turn, the lookups' coordinates at its
    points (:class:`engine.deploy.measured.SharedCoordinates` at them): each coordinate evaluated
    once over the distinct (batch, seq, ctx, KV size) points of all of them (the tables of one
    structure on every GPU type ask the same points; a coordinate reads the point and the KV size
    alone, per point: the floats of evaluating at each table's own points). None for a structure
    made from a build's document (it evaluates its own)."""
    mine = [(plan, p) for plan, p in asked if not hasattr(plan.structure, "gather")]
    shared, where = None, iter(())
    if mine:
        n = sum(len(p[0]) for _, p in mine)
        keys, inverse = distinct_rows([np.concatenate([p[k] for _, p in mine]) for k in range(3)]
                                      + [np.concatenate([np.full(len(p[0]), float(plan.kv_bytes)) for plan, p in mine])],
                                      n)
        shared = SharedCoordinates(*keys)
        starts = np.cumsum([0] + [len(p[0]) for _, p in mine])
        where = iter(inverse[a:b] for a, b in zip(starts[:-1], starts[1:]))
    for plan, _ in asked:
        yield None if hasattr(plan.structure, "gather") else shared.at(next(where))


def _columns(plan, n: int, keep, one: dict, v: dict, values: dict, g, arrays: bool,
             tiled: dict | None = None) -> dict[str, list]:
    """One :func:`op_rows_columns` table from its started parts (``g``: its gathered lookups,
    resolved, or None without tables). ``tiled``: the label lists already made in this call
    (:func:`_tiled`), or None to make this table's own."""
    def numbers(values: np.ndarray):
        return values if arrays else values.tolist()

    dtype = {d: plan.gpu.compute_dtype(d) for d in set(one["dtype"])}
    label = _tiled(one, n, dtype, tiled)
    names = ("t_compute", "t_memory", "t_comm", "t_sol")
    t = dict(zip(names, np.stack([values[name] for name in names])[:, keep].transpose(0, 2, 1).reshape(len(names), -1)))

    extra = {}
    if g is not None:
        t_exp, measured, text = finish(g, detail=True)
        extra = {"t_expected_s": numbers(t_exp), "measured": numbers(measured), "expected_src": text["src"],
                 "expected_table": text["table"], "expected_nearest": text["nearest"]}
    return {
        "op_uid": label["op_uid"], "op_name": label["op_name"], "op": label["op"], "component": label["component"],
        "role": label["role"], "kind": label["kind"], "repeat": label["repeat"],
        "flops": numbers(v["flops"]), "bytes": numbers(v["bytes"]), "weight_bytes": numbers(v["weight_bytes"]),
        "comm_bytes": numbers(v["comm_bytes"]), "intensity": numbers(v["intensity"]),
        "t_compute_s": numbers(t["t_compute"]), "t_memory_s": numbers(t["t_memory"]),
        "t_comm_s": numbers(t["t_comm"]), "t_sol_s": numbers(t["t_sol"]), **extra,
        "bound": _BOUND_NAMES[roofline.bound_index(t["t_compute"], t["t_memory"], t["t_comm"])].tolist(),
        "link": label["link"], "group": label["group"],
        "compute_dtype": label["compute_dtype"],
        "parts": label["parts"],
        "flops_formula": label["flops_formula"], "bytes_formula": label["bytes_formula"],
        "comm_bytes_formula": label["comm_bytes_formula"], "weight_bytes_formula": label["weight_bytes_formula"],
    }


def _tiled(one: dict, n: int, dtype: dict, tiled: dict | None) -> dict[str, list]:
    """The label lists of a table of ``n`` points, point-major (one point's labels ``one`` n
    times over) and its ``compute_dtype`` list (the GPU's dtype of each operand class, ``dtype``).
    ``tiled``: the lists made earlier in one :func:`op_rows_columns_many` call, keyed by the
    labels' object (held by :data:`_LABELS`: its id names it during the call), ``n`` and the dtype
    map, which are all they read: the GPU types of one structure share one set of lists (the
    build's tables: read-only, as their shared value arrays); None: lists of this table's own."""
    key = (id(one), n, tuple(sorted(dtype.items())))
    found = tiled.get(key) if tiled is not None else None
    if found is None:
        found = {name: values * n for name, values in one.items()}
        found["compute_dtype"] = [dtype[d] for d in one["dtype"]] * n
        if tiled is not None:
            tiled[key] = found
    return found


def op_rows(plan, phase: str, scenario: Scenario, tables=None) -> list[dict[str, Any]]:
    """:func:`op_rows_columns` as one dict per op."""
    columns = op_rows_columns(plan, phase, scenario, tables=tables)
    return [dict(zip(columns, values)) for values in zip(*columns.values())]
