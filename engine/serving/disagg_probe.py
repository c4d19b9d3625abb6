"""The probes behind the disaggregated candidates: one (prefill GPU, decode GPU) pair's
:func:`engine.serving.pairing.pair_points` arithmetic reduced to what a probe needs (:class:`_Pairing`),
its outcomes at a batch of TTFT bounds, and the bisection's bookkeeping (breakpoints, plan order,
the staircases an answer can change on).

Layer: engine.serving (on engine.serving.pairing's rules; :mod:`engine.serving.disagg_sizing`
decides with them which points the sizing page keeps).
"""
from __future__ import annotations

from typing import NamedTuple
import numpy as np
from engine.serving.disagg import ROUND, links
from engine.deploy.hardware import GPU
from engine.serving.sizing import GPUSearch
from engine.serving.pairing import prefill_choice, prefill_staircases, transfer_time


def _breakpoints(pgpu: GPU, dgpu: GPU, pres: GPUSearch, dres: GPUSearch) -> tuple[np.ndarray, list[float]]:
    """TTFT bounds to probe: every record's TTFT plus each transfer bound it can have, the midpoints
    between them, and one below and one above them all; and, per KV share of a decode config, the
    least bound at which its decode points have a prefill choice at all."""
    _, scale_out = links(pgpu, dgpu)
    shares = sorted({dres.kv_share[c] for c in dres.configs})
    bps, first = [], {s: np.inf for s in shares}
    # every record at once per decode share (each the same sum as per config: its TTFT plus the
    # transfer time of its config's share and s; the breakpoints are made distinct and sorted, the
    # least taken over all, so the order of the records does not matter)
    t = pres.prefill["ttft_s"]
    share = np.array([pres.kv_share[cfg] for cfg in pres.pool_configs])[pres.prefill["config"]]
    for s in shares:
        bps.append(t + transfer_time(scale_out, share, s))
        first[s] = min(first[s], float(bps[-1].min()))
    bps = np.unique(np.concatenate(bps))
    return np.unique(np.concatenate([bps, (bps[1:] + bps[:-1]) / 2, [bps[0] / 2, bps[-1] * 2]])), list(first.values())


class _Pairing:
    """:func:`engine.serving.pairing.pair_points`' arithmetic for one pair, reduced to what a probe
    reads (per decode point: total GPUs, tokens/s/GPU, TTFT, prefill config and batch at a TTFT
    bound, no TPOT bound, no load), with what does not depend on the bound computed once: the
    probes call it once per bisection level, on its probes' points (thousands of probes in all),
    where pair_points' set-up (per config sorts and running maxima, the transfer times, join's
    other columns) would cost more than the points. The prefill pool is chosen by pair_points' own
    code (pairing.prefill_staircases once, pairing.prefill_choice per level, a bound per point);
    join's columns a probe reads (a decode point's requests/s computed once, the KV transfer time
    per pair of configs once, join's multiplications by the one decode replica left out: exact) are
    the same numpy operations in the same order, so the same doubles (tests/test_disagg_sizing_fast.py
    compares it with pair_points column for column)."""

    def __init__(self, pgpu: GPU, dgpu: GPU, pres: GPUSearch, dres: GPUSearch, output_len: int):
        d = dres.points
        self.kd = d["config"].astype(int)
        self.share_d = np.array([dres.kv_share[c] for c in dres.configs])
        self.share_p = np.array([pres.kv_share[c] for c in pres.pool_configs])
        self.n_p = np.array([c.n_gpus for c in pres.pool_configs])
        self.up, self.out = links(pgpu, dgpu)
        self.domain = pgpu.scale_up_domain
        self.output_len, self.round = output_len, ROUND
        self.batch_d, self.tpot_d, self.n_d = d["batch"], d["tpot_s"], d["n_gpus"]
        # a decode replica's requests/s: the demand on the prefill pool (one decode replica, no load)
        self.x_d = np.asarray(self.batch_d, dtype=float) / (output_len * np.asarray(self.tpot_d, dtype=float))
        self.configs = prefill_staircases(pres, lambda c: transfer_time(self.out, self.share_p[c], self.share_d))
        # join's KV transfer time per (prefill config, decode config), on each link: the same
        # elementwise operations on the same shares as join's per point, done once per pair, so a
        # probe gathers them (the flat index c * n_decode_configs + k) instead of recomputing them
        link_bytes = np.maximum(self.share_p.astype(float)[:, None], self.share_d.astype(float)[None, :]).ravel()
        self.n_kd = len(self.share_d)
        self.seconds_out = self.out.time(link_bytes)
        self.seconds_up = self.up.time(link_bytes) if self.up is not None else None

    def outcome(self, a, i: np.ndarray, which: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """(points of ``i`` with a prefill choice, their total GPUs, tokens/s/GPU, TTFT, prefill
        config, prefill batch) at TTFT bound ``a`` (or bounds ``a`` and ``which`` the one of each
        point, as :func:`engine.serving.pairing.prefill_choice`)."""
        kd = self.kd[i]
        choice, cost, ttft, batch = prefill_choice(self.configs, a, kd, self.x_d[i], self.n_p, which)
        at = np.flatnonzero(np.isfinite(cost))
        if len(at) < len(i):
            c, k, b_p, t_p, i = choice[at], kd[at], batch[at], ttft[at], i[at]
        else:                       # every point has a choice (most probes): the arrays as they are
            c, k, b_p, t_p = choice, kd, batch, ttft
        # engine.serving.disagg.join and replicas, the columns read
        # (one decode replica: join's multiplications by its count, 1, are left out, being exact)
        x_p = np.asarray(b_p, dtype=float) / np.asarray(t_p, dtype=float)
        x_d = self.x_d[i]
        prefill = np.maximum(1, np.ceil(x_d / x_p * self.round)).astype(np.int64)
        total = prefill * self.n_p[c] + self.n_d[i]
        link = c * self.n_kd + k
        seconds = self.seconds_out[link]
        if self.up is not None:
            seconds = np.where(total <= self.domain, self.seconds_up[link], seconds)
        tokens = np.minimum(prefill * x_p, x_d) * self.output_len
        return at, total, tokens / total, np.asarray(t_p, dtype=float) + seconds, c, b_p


def _probe(pairing: _Pairing, bounds: np.ndarray, which: np.ndarray, point: np.ndarray,
           opens: np.ndarray) -> tuple[np.ndarray, ...]:
    """The outcomes of decode points ``point`` at TTFT bounds ``bounds[which]`` (a whole bisection
    level's probes in one pass; each row's numbers are those it has probed alone), a point
    evaluated only from its ``opens`` on: plan's order key (GPUs, tokens/s/GPU) and prefill pick
    (config, batch), total inf where a point has none (not evaluated, no prefill choice, or its
    TTFT over the bound)."""
    n = len(point)
    out = (np.full(n, np.inf), np.zeros(n), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    row = np.flatnonzero(opens[point] <= bounds[which])
    if not len(row):
        return out
    if len(row) < n:
        point, which = point[row], which[row]
    at, total, tokens, ttft, c, b = pairing.outcome(bounds, point, which)
    ok = ttft <= bounds[which[at] if len(at) < len(point) else which]
    columns = (total.astype(float), tokens, c.astype(np.int64), b.astype(np.int64))
    if len(at) == n and ok.all():       # every row has an outcome (most probes): its columns as they are
        return columns
    row = row[at[ok]]
    for column, value in zip(out, columns):
        column[row] = value[ok]
    return out


def _take(columns, index):
    """A tuple of per-row columns (:class:`_Outcomes`, :class:`_Bound`) at the rows ``index``."""
    return type(columns)._make(a[index] for a in columns)


def _then(columns, other):
    """Two tuples of per-row columns of one kind, ``columns``' rows first."""
    return type(columns)._make(map(np.concatenate, zip(columns, other)))


class _Outcomes(NamedTuple):
    """:func:`_probe`'s columns for some rows."""

    total: np.ndarray
    tokens: np.ndarray
    config: np.ndarray
    batch: np.ndarray

    take = _take
    then = _then

    def differs(self, other: _Outcomes) -> np.ndarray:
        """Per row, whether any column differs from ``other``'s."""
        return (self.total != other.total) | (self.tokens != other.tokens) | (self.config != other.config) | (
            self.batch != other.batch)


def _next_ends(lo: _Outcomes, hi: _Outcomes, rows: np.ndarray) -> tuple[_Outcomes, _Outcomes]:
    """``lo.take(rows).then(lo.take(rows))`` and ``lo.take(rows).then(hi.take(rows))``, each column
    gathered straight into its half of one array (no gathered copies concatenated)."""
    n = len(rows)
    first, second = [], []
    for a, b in zip(lo, hi):
        x, y = np.empty(2 * n, dtype=a.dtype), np.empty(2 * n, dtype=b.dtype)
        np.take(a, rows, out=x[:n], mode="clip")        # (rows are in range: clip changes none)
        x[n:] = x[:n]
        y[:n] = x[:n]
        np.take(b, rows, out=y[n:], mode="clip")
        first.append(x)
        second.append(y)
    return _Outcomes(*first), _Outcomes(*second)


def _starts(seg: np.ndarray) -> np.ndarray:
    """Where each run of equal ``seg`` begins (a mask)."""
    return np.concatenate(([True], seg[1:] != seg[:-1])) if len(seg) else np.zeros(0, dtype=bool)


def _prefix_min(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """``np.minimum.accumulate(x)`` within each run of equal ``seg`` (non-decreasing), ``x``
    non-negative integers: each run is lifted above every later one, so no running minimum
    reaches back into an earlier run."""
    if not len(x):
        return x
    lift = seg[-1] - seg.astype(np.int64, copy=False)
    lift *= int(x.max()) + 1
    out = x + lift
    np.minimum.accumulate(out, out=out)
    out -= lift
    return out


def _plan_order(seg: np.ndarray, point: np.ndarray, out: _Outcomes) -> np.ndarray:
    """The rows with an outcome, by interval ``seg``, then in plan's order: fewest GPUs, most
    tokens/s/GPU, then the search's order (the smaller decode point first)."""
    r = np.flatnonzero(np.isfinite(out.total))
    seg, total, tokens = seg[r], out.total[r], out.tokens[r]
    if not len(r):
        return r
    # the same order from cheaper keys: positive doubles order as their bit patterns, so their
    # complement (an integer) orders tokens/s/GPU most first, ties kept (integers sort faster than
    # doubles); interval and GPUs as one 16-bit key when they fit (one radix pass, not two)
    most = ~tokens.view(np.uint64) if tokens.min() > 0 else -tokens
    top = int(total.max()) + 1
    if int(seg.max()) * top + top <= 2 ** 16:
        return r[np.lexsort((_small(point[r]), most, (seg * top + total.astype(np.int64)).astype(np.uint16)))]
    return r[np.lexsort((_small(point[r]), most, _small(total), _small(seg)))]


def _small(key: np.ndarray) -> np.ndarray:
    """Whole numbers ``key`` as uint16 where they fit (the same order; numpy's stable sort of a
    16-bit key is a radix sort, several times faster than of a 64-bit one), else as they are."""
    return key.astype(np.uint16) if len(key) and 0 <= key.min() and key.max() < 2 ** 16 else key


def _can_answer(seg: np.ndarray, point: np.ndarray, tp: np.ndarray, lo: _Outcomes, hi: _Outcomes,
                by_lo: np.ndarray) -> np.ndarray:
    """Which rows can be on a staircase for a TTFT bound inside their interval, a mask (rows by
    interval ``seg``, each interval's by TPOT rank ``tp``, ties in the search's order; ``by_lo``:
    :func:`_plan_order` at ``lo``): their outcome at ``hi`` (their best) comes before, in plan's
    order, the outcome at ``lo`` (their worst) of every point of the interval with a smaller TPOT
    (between two points' outcomes tied in GPUs and tokens/s/GPU, the smaller point's first)."""
    never = len(by_lo)
    rank = np.full(len(seg), never)
    rank[by_lo] = np.arange(never)
    run = _prefix_min(rank, seg)
    # the best outcome at lo of the points with a strictly smaller TPOT: the running minimum before
    # each TPOT's first row in the interval
    start = _starts(seg)
    first_tp = start.copy()
    first_tp[1:] |= tp[1:] != tp[:-1]
    first = np.maximum.accumulate(np.where(first_tp, np.arange(len(seg)), 0))
    best = np.where(start[first], never, run[np.maximum(first - 1, 0)])
    keep = np.isfinite(hi.total)
    p = np.flatnonzero(keep & (best < never))
    q = by_lo[best[p]]
    t_p, t_q, x_p, x_q = hi.total[p], lo.total[q], hi.tokens[p], lo.tokens[q]
    keep[p] = (t_p < t_q) | ((t_p == t_q) & ((x_p > x_q) | ((x_p == x_q) & (point[p] < point[q]))))
    return keep


def _positions(order: np.ndarray, n: int) -> np.ndarray:
    """Per row (of ``n``), its place in ``order`` (rows in plan's order); -1 for a row not in it."""
    at = np.full(n, -1, dtype=np.int64)
    at[order] = np.arange(len(order))
    return at


def _runs(seg: np.ndarray, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows by interval ``seg``, each interval's by TPOT rank ``tp``: per row, the last row before
    its (interval, TPOT) run (-1 where the run begins its interval), and the last row of its run."""
    n = len(seg)
    begins = _starts(seg)
    start = begins.copy()
    start[1:] |= tp[1:] != tp[:-1]
    first = np.flatnonzero(start)
    run = np.cumsum(start) - 1                     # each row's run
    before = np.where(begins[first], -1, first - 1)[run]
    last = np.append(first[1:] - 1, n - 1)[run]
    return before, last


def _least_before(index: np.ndarray, seg: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per entry of ``index`` (a row, or -1: none), the row of least place ``at`` (distinct whole
    numbers; -1: a row without one) among the rows of that row's interval ``seg`` up to it, and
    whether there is one."""
    has = at >= 0
    never = int(at.max()) + 1 if len(at) else 0
    place = np.where(has, at, never)
    run = _prefix_min(place, seg)
    best = np.where(index >= 0, run[np.maximum(index, 0)], never)
    found = best < never
    row = np.zeros(never + 1, dtype=np.intp)         # the row at each place
    row[place[has]] = np.flatnonzero(has)
    return row[np.where(found, best, 0)], found


def _can_answer_at(before: np.ndarray, seg: np.ndarray, point: np.ndarray, lo: _Outcomes, hi: _Outcomes,
                   at_lo: np.ndarray) -> np.ndarray:
    """:func:`_can_answer` with the rows' runs (``before``: :func:`_runs`) and plan's order at
    ``lo`` given as ``at_lo`` (per row a whole number, distinct among the rows with an outcome at
    ``lo`` and in plan's order within each interval; -1 for a row without one)."""
    # the best outcome at lo of the points with a strictly smaller TPOT: the least place up to the
    # row before the row's TPOT run
    q, found = _least_before(before, seg, at_lo)
    keep = np.isfinite(hi.total)
    p = np.flatnonzero(keep & found)
    q = q[p]
    t_p, t_q, x_p, x_q = hi.total[p], lo.total[q], hi.tokens[p], lo.tokens[q]
    keep[p] = (t_p < t_q) | ((t_p == t_q) & ((x_p > x_q) | ((x_p == x_q) & (point[p] < point[q]))))
    return keep


def _staircases(seg: np.ndarray, tp: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each interval's answers over every TPOT bound: of ``rows`` (by interval, each interval's in
    plan's order at one end, all with an outcome there; ``seg``, ``tp``: every row's interval and
    TPOT rank), those with a smaller TPOT than every row before them in their interval."""
    s, t = seg[rows], tp[rows]
    low = _prefix_min(t, s)
    keep = _starts(s)
    keep[1:] |= t[1:] < low[:-1]
    return rows[keep]


def _kept(rows: np.ndarray) -> np.ndarray:
    """``rows`` less the -1s (rows not kept)."""
    return rows[rows >= 0]


def _same_staircases(n: int, seg: np.ndarray, point: np.ndarray, lo: _Outcomes, s_lo: np.ndarray,
                     hi: _Outcomes, s_hi: np.ndarray) -> np.ndarray:
    """Per interval (of ``n``), whether its staircases at ``lo`` (rows ``s_lo``) and at ``hi``
    (``s_hi``) are the same (decode point, prefill config, batch) step for step."""
    same = np.bincount(seg[s_lo], minlength=n) == np.bincount(seg[s_hi], minlength=n)
    # of intervals with as many steps, the steps line up position by position
    a, b = s_lo[same[seg[s_lo]]], s_hi[same[seg[s_hi]]]
    differ = (point[a] != point[b]) | (lo.config[a] != hi.config[b]) | (lo.batch[a] != hi.batch[b])
    same[seg[a[differ]]] = False
    return same


def _drop_inert(seg: np.ndarray, point: np.ndarray, lo: _Outcomes, hi: _Outcomes, by_lo: np.ndarray,
                by_hi: np.ndarray) -> tuple:
    """The first level's rows less those with an outcome at neither end of their interval (points
    not yet open at its top: most of an interval's below a share's first bound), the others in their
    order (``by_lo``, ``by_hi`` renumbered). Such a row is never kept (no outcome at the top), on a
    staircase nor a competitor (in neither plan order), so nothing the bisection reads changes."""
    live = np.flatnonzero(np.isfinite(lo.total) | np.isfinite(hi.total))
    if len(live) == len(seg):
        return seg, point, lo, hi, by_lo, by_hi
    place = np.full(len(seg), -1)
    place[live] = np.arange(len(live))
    return seg[live], point[live], lo.take(live), hi.take(live), place[by_lo], place[by_hi]


def _within_reach(pres: GPUSearch, side: DecodeSide) -> np.ndarray:
    """The decode points that can be an answer at all: a point whose requests/s exceed those of a
    point of its config with no larger TPOT by more than the most any prefill replica completes
    needs more prefill GPUs than that point at every bound (its GPUs are n_d plus the fewest prefill
    GPUs for its demand; the same level holds demands less than one replica's throughput apart), and
    that point meets every bound it meets (``side``: :func:`decode_side`)."""
    x_most = max(float(np.max(pres.prefill["batch"] / pres.prefill["ttft_s"])), 0.0) * (1 + 1e-9)
    return np.flatnonzero(side.demand <= side.floor + x_most)


class DecodeSide(NamedTuple):
    """What :func:`pair_candidates` reads of a decode side that no prefill side changes (computed
    once per GPU type, not per ordered pair): per decode point its TPOT rank (the same comparisons
    as the TPOTs), :func:`twins`, requests/s per replica and the least of these among its config's
    points of no larger TPOT (ties of TPOT included)."""

    tp: np.ndarray
    twin: np.ndarray
    demand: np.ndarray
    floor: np.ndarray


class _Bound(NamedTuple):
    """Per row, the first outcome in plan's order among the fixed rows of its interval with no
    larger TPOT (:func:`_fold`): what they keep out of a staircase for the whole interval. A row
    without one has ``total`` inf."""

    total: np.ndarray
    tokens: np.ndarray
    point: np.ndarray

    take = _take
    then = _then


def _precedes(out, point: np.ndarray, bound: _Bound) -> np.ndarray:
    """Per row, whether outcome ``out`` of decode point ``point`` comes before ``bound`` in plan's
    order (fewer GPUs, then more tokens/s/GPU, then the smaller point: :func:`_plan_order`'s keys,
    compared as :func:`_can_answer` compares them); never where ``out`` has no outcome."""
    t, x, b = out.total, out.tokens, bound
    after = (x > b.tokens) | ((x == b.tokens) & (point < b.point))       # of equal GPUs
    return np.isfinite(t) & ((t < b.total) | ((t == b.total) & after))


def _fold(last: np.ndarray, seg: np.ndarray, point: np.ndarray, out: _Outcomes, at: np.ndarray,
          bound: _Bound | None = None, rows: np.ndarray | None = None) -> _Bound:
    """Per row (by interval ``seg``, each interval's by TPOT rank; ``last``: :func:`_runs`), the
    first outcome ``out`` in plan's order among the fixed rows of its interval with a TPOT no larger
    than its own (the row itself included when fixed), or ``bound``'s where that comes first.
    ``at``: per fixed row with an outcome, a whole number distinct among them and in plan's order
    within each interval; -1 for every other row. ``rows``: only at these rows (``bound`` is
    theirs), in their order."""
    n = len(seg) if rows is None else len(rows)
    if bound is None:
        bound = _Bound(np.full(n, np.inf), np.zeros(n), np.full(n, -1, dtype=np.int64))
    if not (at >= 0).any():
        return bound
    q, found = _least_before(last if rows is None else last[rows], seg, at)
    got = np.flatnonzero(found)
    q = q[got]
    fixed = _Bound(out.total[q], out.tokens[q], point[q])
    first = _precedes(fixed, fixed.point, bound.take(got))
    got, fixed = got[first], fixed.take(first)
    total, tokens, pt = (np.array(c) for c in bound)
    total[got], tokens[got], pt[got] = fixed
    return _Bound(total, tokens, pt)
