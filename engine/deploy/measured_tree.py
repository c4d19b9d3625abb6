"""A step's expected time as a formula tree: engine.deploy.measured's rule for the browser.

Layer: engine.deploy. The deploy page evaluates each step's expected time at any point from a
tree (engine.language.formula_tree, its ``lookup`` node reading a measured table distilled to the
part the step can read); :func:`spec_tree` writes it from the step's
:class:`engine.deploy.kernel_spec.Spec`, the same rule :func:`engine.deploy.measured.expected_steps`
evaluates at the grid's points, and :func:`node_lookup` is the lookup node's meaning
(static/js/formula.js mirrors it; tests/test_site_offgrid.py holds the two to each other).
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Callable

import numpy as np

from engine.language.memo import remembered
from engine.language import formula_tree
from engine.language.formula_tree import to_tree
from engine.deploy.interpolation import _lower, _roof, interpolate, peak_rate, roof_expr
from engine.deploy.kernel_spec import DEFAULT_EFFICIENCY, Lookup, Spec, step_spec
from engine.deploy.measured_tables import Table

#: The symbol of a step's bound (its t_sol over its calls) in :func:`expected_tree`: the evaluator of
#: the step's formula trees computes it beside (static/js/deploy_eval.js stepValues).
T_SOL = "t_sol"


def distil(table: Table, point: tuple) -> Table:
    """The part of ``table`` a lookup at ``point`` (expressions of the point) can read: on an axis
    whose coordinate is a number, the two measured values of the span it lies in (or of the edge
    span it continues from), the only ones the interpolation and the out-of-range rule read
    there; the whole axis elsewhere. Interpolating the part gives the whole table's floats."""
    constants = _CONSTANTS.get(point)
    if constants is None:           # (once per point: is_number and float() are sympy work)
        if len(_CONSTANTS) > 20_000:
            _CONSTANTS.clear()
        constants = _CONSTANTS[point] = tuple(float(e) if getattr(e, "is_number", False) else None for e in point)
    found = _DISTILLED.get((id(table), constants))
    if found is not None and found[0] is table:
        return found[1]
    values, cut = [], []
    for v, e in zip(table.values, point):
        if getattr(e, "is_number", False) and len(v) > 2:
            i = int(_lower(replace(table, values=(v,)), np.array([[float(e)]]))[0][0])
            cut.append(slice(i, i + 2))
        else:
            cut.append(slice(None))
        values.append(v[cut[-1]])
    part = replace(table, values=tuple(values), seconds=table.seconds[tuple(cut)], keys=None)
    if len(_DISTILLED) > 20_000:
        _DISTILLED.clear()
    _DISTILLED[(id(table), constants)] = (table, part)
    return part


_CONSTANTS: dict[tuple, tuple] = {}     # a lookup's point -> its coordinates that are numbers, as floats
_DISTILLED: dict = {}        # (id(table), the point's constants) -> (table, its part): tables are read-only
_ENTRIES: dict = {}          # (id(part), roof) -> (part, its JSON)


def lookup_table(table: Table, roof: tuple, rate: float | None = None) -> dict:
    """A lookup node's table as JSON: the axes' names and values, the latencies over them in µs as
    the table file writes them (flat, last axis fastest; seconds = µs x 1e-6, as :func:`load_table`
    reads them), the roofline as a formula tree of the axes (:func:`roof_expr`), and what the
    per-op tooltip names (the kernel and source, the file); with ``rate`` (a distilled part: its
    whole table's :func:`peak_rate`) that rate, the out-of-range floor's."""
    found = _ENTRIES.get((id(table), roof, rate))
    if found is not None and found[0] is table:
        return found[1]
    entry = {"axes": list(table.axes), "values": [[_short(x) for x in v.tolist()] for v in table.values],
             "us": [_short(float(f"{x * 1e6:.12g}")) for x in table.seconds.reshape(-1).tolist()],
             "roof": _roof_tree(roof), "name": f"{table.name} ({table.source})", "path": table.path}
    if rate is not None:
        entry["rate"] = float(rate)
    if len(_ENTRIES) > 20_000:
        _ENTRIES.clear()
    _ENTRIES[(id(table), roof, rate)] = (table, entry)
    return entry


@functools.lru_cache(maxsize=4096)
def _roof_tree(roof: tuple) -> list:
    return to_tree(roof_expr(roof))


@functools.lru_cache(maxsize=4096)
def _roof_fn(roof: tuple):
    """The roofline's compiled function (interpolation._roof) as [its parameters, its tree in its
    evaluation order] (engine.deploy.printed_tree; None where it has none): a stored lookup reads
    it without sympy, the same floats."""
    import inspect
    from engine.deploy.printed_tree import lambdified_tree
    fn = _roof(roof)
    tree = lambdified_tree(fn)
    return None if tree is None else [list(inspect.signature(fn).parameters), tree]


def _short(x: float):
    """A whole float as an int (shorter JSON; the same number)."""
    return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x


def expected_tree(step, lookup: Lookup, member_ops: dict, table_ref: Callable[[dict], object]) -> list:
    """The step's expected time as a formula tree of the point and its bound :data:`T_SOL`, by the
    module's rule (what :func:`expected_steps` gives at any point): where a table applies, max(calls
    x the faster table's time, the bound); elsewhere the bound / :data:`DEFAULT_EFFICIENCY`. A
    table is a ``lookup`` node ``["lookup", ref, coordinate trees...]``, ``ref`` what ``table_ref``
    gives for the :func:`lookup_table` of its distilled table (:func:`distil`; the file's table index)."""
    spec = step_spec(step, lookup, member_ops)
    return spec_tree(spec, float(step.repeat) if spec is not None else 0.0, table_ref)


def spec_tree(spec: Spec | None, repeat: float, table_ref: Callable[[dict], object]) -> list:
    """:func:`expected_tree` of a step whose :func:`step_spec` is ``spec`` and whose calls are
    ``repeat``: the tree reads nothing else of the step (so steps of one spec and repeat share
    one tree; ``repeat`` is unused where ``spec`` is None)."""
    fallback = ["/", T_SOL, DEFAULT_EFFICIENCY]
    if spec is None:
        return fallback
    point = [_tree(e) for e in spec.point]
    # each entry with what :func:`resolve` and :func:`finish` read besides (the roofline's key, the
    # MoE key's text, the table's labels): a stored program's lookups (engine.deploy.stored) go
    # through them too
    nodes = [["lookup", table_ref(_stored_entry(t, spec)), *point] for t in spec.tables]
    time = nodes[0] if len(nodes) == 1 else ["min", *nodes]
    applies = ["and", [">", T_SOL, 0], *([">", p, 0] for p in point), _tree(spec.applies)]
    return ["pw", [["max", ["*", repeat, time], T_SOL], applies], [fallback, 1]]


_STORED_ENTRIES: dict = {}      # (id(table), the spec's point, roof, shape) -> (table, the entry)


def _stored_entry(table: Table, spec: Spec) -> dict:
    """A lookup node's entry (:func:`lookup_table` of the distilled table) with the fields only the
    stored path reads (:data:`STORED_ONLY`); one object per table, point, roofline and MoE key (the
    export finds an entry it has by its object first)."""
    key = (id(table), spec.point, spec.roof, spec.shape)
    found = _STORED_ENTRIES.get(key)
    if found is None or found[0] is not table:
        if len(_STORED_ENTRIES) > 20_000:
            _STORED_ENTRIES.clear()
        entry = {**lookup_table(distil(table, spec.point), spec.roof, peak_rate(table, _roof(spec.roof))),
                 "roof_key": list(spec.roof), "roof_fn": _roof_fn(spec.roof), "shape": spec.shape,
                 "table": [table.kernel, table.variant, table.gpu, table.framework, table.version, table.source]}
        found = _STORED_ENTRIES[key] = (table, entry)
    return found[1]


#: The fields of a lookup entry (:func:`spec_tree`) only the stored path reads (engine.deploy.stored:
#: resolve and finish of a document's lookups); the deploy page's data leaves them out (site_builder.data).
STORED_ONLY = ("roof_key", "roof_fn", "shape", "table")


_TREES: dict = {}       # a coordinate or condition of a Spec -> its formula tree (read-only, shared)


def _tree(expr) -> object:
    """``to_tree(expr)``, once per distinct expression: the specs of one step under every GPU, KV
    dtype and framework hold the same point (sympy compares structurally: equal expressions, equal
    trees). The trees are shared between the trees that hold them, which are only encoded."""
    return remembered(_TREES, expr, lambda: to_tree(expr), 50_000)


def node_lookup(tables: dict) -> Callable[[object, list], float]:
    """The ``lookup`` of :func:`engine.language.formula_tree.evaluate` for trees whose lookup nodes
    refer to ``tables`` (ref -> :func:`lookup_table`'s JSON): :func:`interpolate` of that table at
    the node's point under its roofline tree. This is the lookup node's meaning; static/js/formula.js
    mirrors it."""
    def lookup(ref, point: list) -> float:
        entry = tables[ref]
        axes = tuple(entry["axes"])
        values = tuple(np.asarray(v, dtype=float) for v in entry["values"])
        seconds = np.asarray(entry["us"], dtype=float).reshape([len(v) for v in values]) * 1e-6
        table = Table("", "", "", "", "", axes, values, seconds, entry["path"], entry["name"], rate=entry.get("rate"))

        def roof(*columns):
            return np.array([formula_tree.evaluate(entry["roof"], dict(zip(axes, p))) for p in zip(*columns)])
        return interpolate(table, tuple(point), roof)[0]
    return lookup
