"""How a measured table is read: log-space interpolation between its points, the rule outside its
range, and the rooflines that bound both (engine.deploy.measured's module doc states the rule).

Layer: engine.deploy. One rule, one place: the browser reads a table by the same rule through the
formula tree's ``lookup`` node (static/js/formula.js), whose Python meaning is
engine.deploy.measured.node_lookup; tests/test_measured.py and tests/test_formula_tree.py hold
both to hand values.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import sympy   # annotations; imported where used (a stored deploy never loads sympy)

from engine.language import symbols
from engine.deploy.measured_tables import KERNELS, Table

# -- interpolation ----------------------------------------------------------------------------------

#: Each axis of :data:`KERNELS` as a symbol: the variables of a roofline (:func:`roof_expr`) and
#: of a lookup node's table in the formula trees (:func:`expected_tree`).
@functools.lru_cache(maxsize=None)
def _axes() -> dict:
    """:data:`AXIS`, made on first use (a table read from a build's document makes no symbol)."""
    import sympy
    return {name: sympy.Symbol(name, positive=True) for names in KERNELS.values() for name in names}


def __getattr__(name: str):
    if name == "AXIS":
        return _axes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.lru_cache(maxsize=4096)
def roof_expr(key: tuple) -> sympy.Expr:
    """The roofline of a lookup by its key, an expression of its kernel's :data:`KERNELS` axes
    (:data:`AXIS`): ("gemm", peak FLOP/s, HBM bytes/s, element bytes): max(2mnk / peak, (mk + nk
    + mn) x element bytes / HBM); a collective (kernel,): bytes x its algorithm's share (2(g-1)/g
    for an all-reduce, (g-1)/g otherwise); decode attention: batch x KV heads x context (the KV
    cache read); prefill attention: prompts x prompt length² x heads (the scores); decode MLA:
    batch x query heads x context (one shared latent cache; the heads' work grows with them);
    prefill MLA: prompts x prompt length² x heads; an MLA BMM: tokens x heads (one (d x rank)
    matmul per head and token); ("moe",): the tokens (work grows with them at most linearly). Only the ratios of the collective, attention
    and MoE roofs are used (the out-of-range rule's slope). One definition: :func:`_roof` (numpy)
    and the formula trees' lookup nodes (the browser) both come from here."""
    import sympy
    a = _axes()
    if key[0] == "gemm":
        peak, hbm, element = (sympy.Float(float(x)) for x in key[1:])
        m, n, k = a["m"], a["n"], a["k"]
        return sympy.Max(2 * m * n * k / peak, (m * k + n * k + m * n) * element / hbm)
    if key[0] == "decode_attention":
        return a["batch"] * a["kv_heads"] * a["ctx"]
    if key[0] == "prefill_attention":
        return a["batch"] * a["isl"] ** 2 * a["kv_heads"] * a["q_per_kv"]
    if key[0] == "decode_mla":
        return a["batch"] * a["heads"] * a["ctx"]
    if key[0] == "prefill_mla":
        return a["batch"] * a["isl"] ** 2 * a["heads"]
    if key[0] == "mla_bmm":
        return a["tokens"] * a["heads"]
    if key[0] == "moe":
        return a["tokens"]
    share = (a["gpus"] - 1) / a["gpus"]
    return a["bytes"] * (2 * share if key[0] == "all_reduce" else share)


_ROOFS: dict[tuple, Callable] = {}


def _roof(key: tuple) -> Callable:
    """:func:`roof_expr` of ``key`` as a numpy function of its kernel's axes (numbers or arrays of
    points), compiled once per key."""
    f = _ROOFS.get(key)
    if f is None:
        axes = [_axes()[n] for n in KERNELS["gemm" if key[0] == "gemm" else key[0]]]
        f = _ROOFS[key] = symbols.checked_lambdify(axes, roof_expr(key), modules=list(symbols.NUMPY_MODULES))
    return f


def gemm_roof(peak_flops: float, hbm_bytes_per_s: float, element_bytes: float) -> Callable:
    """The roofline of a GEMM at (m, n, k) (numbers or arrays of points): :func:`roof_expr`'s."""
    return _roof(("gemm", float(peak_flops), float(hbm_bytes_per_s), float(element_bytes)))


def collective_roof(kernel: str) -> Callable:
    """Proportional to a collective's bandwidth time at (gpus, bytes): :func:`roof_expr`'s."""
    return _roof((kernel,))


def attention_roof(kernel: str) -> Callable:
    """Proportional to an attention kernel's roofline: :func:`roof_expr`'s."""
    return _roof((kernel,))


_LOGS: dict[int, tuple] = {}        # id(table.seconds) -> (seconds, log seconds): tables are read-only


def _log_seconds(table: Table) -> np.ndarray:
    found = _LOGS.get(id(table.seconds))
    if found is None or found[0] is not table.seconds:
        if len(_LOGS) > 1_000:
            _LOGS.clear()
        found = _LOGS[id(table.seconds)] = (table.seconds, np.log(table.seconds))
    return found[1]


def _lower(table: Table, points: np.ndarray) -> list[np.ndarray]:
    """Per axis, the index of the measured value at or below each point's value (points inside
    the range; the last span's lower end at its top): ``searchsorted`` on the sorted axis."""
    return [np.maximum(np.minimum(np.searchsorted(v, points[:, d], side="right") - 1, len(v) - 2), 0)
            for d, v in enumerate(table.values)]


_CORNERS: dict[int, np.ndarray] = {}      # axes -> (2^axes, axes) of 0/1: each corner's side per axis


def _inside(table: Table, points: np.ndarray) -> np.ndarray:
    """Log time at points inside the grid (``points``: (P, axes)): multilinear in log time over
    log axis values, the sum over the 2^axes corners of each point's cell of the corner's log time
    x the product over axes of its weight (f on the upper side, 1 - f on the lower), all points
    and corners at once."""
    axes = len(table.values)
    bits = _CORNERS.get(axes)
    if bits is None:
        bits = _CORNERS[axes] = (np.arange(1 << axes)[:, None] >> np.arange(axes)) & 1
    lo = _lower(table, points)
    frac = np.empty(points.shape)
    index = []
    for d, (i, v) in enumerate(zip(lo, table.values)):
        if len(v) == 1:                           # a one-value axis: its only value
            frac[:, d] = 0.0
            index.append(np.broadcast_to(i[:, None], (len(i), len(bits))))
            continue
        lv = np.log(v)
        frac[:, d] = (np.log(points[:, d]) - lv[i]) / (lv[i + 1] - lv[i])
        index.append(i[:, None] + bits[:, d])
    weights = np.where(bits[None, :, :] == 1, frac[:, None, :], 1.0 - frac[:, None, :]).prod(axis=2)
    return (weights * _log_seconds(table)[tuple(index)]).sum(axis=1)


def _clamped(table: Table, points: np.ndarray) -> np.ndarray:
    """``points`` each clamped into the measured range of each axis."""
    low = np.array([v[0] for v in table.values])
    high = np.array([v[-1] for v in table.values])
    return np.minimum(np.maximum(points, low), high)


def interpolate_many(table: Table, points, roof: Callable) -> tuple[np.ndarray, np.ndarray]:
    """(seconds at each of ``points`` ((P, axes), or one point's values), whether each lies outside
    the measured range), by the module's rule, every point at once.

    Inside: :func:`_inside`. Outside on an axis: from the clamped point (the nearest on the grid's
    range) the time continues as the power law of the axis's last measured span (its slope in
    log time over log value between the edge value and the one next to it), the slope clipped to
    [0, the roofline's slope over the same span]: a kernel grows no faster than its roofline (one
    overhead-dominated edge point does not scale like the work) and never gets faster with more
    work. Axes outside add their log steps. A point outside on any axis also takes at least the
    roofline's work there over :func:`peak_rate` (the highest rate any measured point reaches):
    beyond the grid a kernel is never more efficient than the best the table measured (a
    sub-linear last span, e.g. decode attention's batch 64 -> 128 before HBM saturates, would
    otherwise let the efficiency grow without end)."""
    x = np.atleast_2d(np.asarray(points, dtype=float))
    clamped = _clamped(table, x)
    at_clamped = _inside(table, clamped)
    log_t = at_clamped.copy()
    outside = np.zeros(len(x), dtype=bool)
    for a, v in enumerate(table.values):
        out = x[:, a] != clamped[:, a]
        if not out.any() or len(v) == 1:
            outside |= out
            continue
        outside |= out
        c = clamped[out]
        inner = c.copy()                                  # one measured value inward
        inner[:, a] = np.where(c[:, a] == v[-1], v[-2], v[1])
        span = np.log(c[:, a]) - np.log(inner[:, a])
        slope = (at_clamped[out] - _inside(table, inner)) / span
        roof_slope = (np.log(roof(*c.T)) - np.log(roof(*inner.T))) / span
        log_t[out] += np.minimum(np.maximum(slope, 0.0), np.maximum(roof_slope, 0.0)) * \
            (np.log(x[out, a]) - np.log(c[:, a]))
    if outside.any():
        # never more efficient than the best the table measured: the roofline's work at the point
        # over the highest rate (roofline work per second) of any measured point
        floor = np.log(roof(*x[outside].T)) - math.log(peak_rate(table, roof))
        log_t[outside] = np.maximum(log_t[outside], floor)
    return np.exp(log_t), outside


_RATES: dict = {}       # (id(table.seconds), id(roof)) -> (seconds, roof, rate): tables are read-only


def peak_rate(table: Table, roof: Callable) -> float:
    """The highest rate any measured point of ``table`` reaches: max over its grid of the
    roofline's work there (``roof``: :func:`roof_expr` of the lookup, in its units) / the measured
    seconds (a distilled part, :func:`distil`, carries its whole table's in ``table.rate``)."""
    if table.rate is not None:
        return table.rate
    key = (id(table.seconds), id(roof))
    found = _RATES.get(key)
    if found is None or found[0] is not table.seconds or found[1] is not roof:
        grid = np.meshgrid(*table.values, indexing="ij")
        work = np.broadcast_to(np.asarray(roof(*(g.reshape(-1) for g in grid)), dtype=float), (table.seconds.size,))
        if len(_RATES) > 10_000:
            _RATES.clear()
        found = _RATES[key] = (table.seconds, roof, float(np.max(work / table.seconds.reshape(-1))))
    return found[2]


def interpolate(table: Table, point: tuple[float, ...], roof: Callable) -> tuple[float, bool]:
    """(seconds at one ``point``, whether it lies outside the measured range):
    :func:`interpolate_many` at that point alone (one rule for one point and for a grid)."""
    t, outside = interpolate_many(table, [tuple(float(p) for p in point)], roof)
    return float(t[0]), bool(outside[0])


def nearest(table: Table, point: tuple[float, ...]) -> str:
    """The measured values around one point, per axis (its value on the grid, the two values it
    lies between, or the edge it continues from): e.g. ``m 64..128 n 4096 k 4096``."""
    parts = []
    for name, v, x in zip(table.axes, table.values, point):
        c = min(max(float(x), v[0]), v[-1])
        i = int(np.searchsorted(v, c))                  # v[i] >= c
        ends = [c] if v[i] == c else [v[i - 1], v[i]]
        parts.append(f"{name} " + "..".join(f"{e:g}" for e in ends))
    return " ".join(parts)
