"""Disaggregated sizing answers, precomputed: the few prefill and decode points that decide
``archledger plan``'s ``answer_disaggregated`` for every TTFT and TPOT bound (one replica, no load).

Layer: engine.serving (on engine.serving.sizing; nothing here evaluates a point itself). The site's
sizing form runs :func:`engine.serving.pairing.pair_points`' arithmetic (static/js/sizing.js, a port:
same formulas, same tie-breaks) over the points :func:`candidates` keeps, so what it must keep is
every point that is part of an answer for some bounds, and nothing it drops may change an answer.

What is kept, per GPU type:

* prefill: per pool config, only its *records* (in TTFT order, the points whose requests/s beat
  every shorter-TTFT point of the config): ``pair_points`` reads a config's points through their
  running maximum, whose values and arg-max are records; records *dominated* by an earlier config's
  (:func:`dominated`) are never the pick of its choice. With these two cuts ``pair_points`` chooses
  the same outcome (:func:`prefill_records`); they also leave few records, so few TTFT breakpoints
  to search. Of what is left, only the records some answer picks.
* decode: only the points that are some answer's decode point.

Why dropping the rest changes no answer (for bounds a, b): the answer at (a, b) is the first point,
in plan's order (fewest GPUs, most tokens/s/GPU, the search's order), among the decode points
within both bounds. A decode point that is no answer anywhere can go. Keeping fewer prefill records
only raises a prefill config's replicas or moves its pick to a later record (its key, GPUs then
TTFT, never improves), so every decode point's outcome is the same or worse; the answer's own
outcome is unchanged, because its pick is kept: the running maximum within the bound is still at
least the pick's throughput, so the replica count is the same (the pick meets the demand per
replica; no kept record beyond it within the bound gives more than the full set's maximum), and
the records before the pick were below that demand. So the answer stays first.

How the answers are found, exactly: for fixed bounds the outcome of a decode point (its prefill
choice, GPUs, tokens/s/GPU) depends on the TTFT bound ``a`` only through which prefill records fit
under ``a`` minus the KV transfer bound: it is constant between *breakpoints* (a record's TTFT plus
a transfer time) and gets no worse as ``a`` grows (more records fit: fewer replicas, or the same
replicas at the same pick). At fixed ``a`` the answers over every TPOT bound are a *staircase*
(plan's order; each next answer has a strictly smaller TPOT). Because every outcome improves
monotonically in ``a``, a staircase equal at two TTFT bounds is equal between them, so a bisection
over the breakpoints (probing each breakpoint and the midpoints between them) visits every
staircase. Each probe evaluates only the decode points that can be on a staircase inside its
interval: one whose outcome at the interval's top is not better than the worst, at its bottom, of a
point with a smaller TPOT never is (and, before any of it, none whose demand exceeds that of a
point of its config with no larger TPOT by more than any prefill replica completes).

Cost: the bisection runs level by level, every interval of a level at once (arrays of rows, one
per interval and point it searches), and a level's midpoints are probed in one
``prefill_choice`` pass (a bound per row); each probe's outcomes are sorted in plan's order once,
for both intervals it ends. The intervals, their points and the answers found are the same as
one interval at a time would give (each interval's arithmetic is its own). Two cuts leave the
answers found as they were (tests/test_disagg_sizing_speed.py searches with and without them):

* a midpoint probes only the rows whose outcome differs at the interval's two ends (about half);
  the others' outcome in between is the same, by the monotonicity above: a point's fewest GPUs is
  the same at both ends, so in between; a prefill config that reaches it in between reaches it at
  the top too, with the same pick (the same replicas pick the same record), and the config chosen
  at both ends has the shortest TTFT of those at the top (the first on a tie), so of those in
  between;
* a decode point equal to a smaller one in everything a probe reads is searched once
  (:func:`_distinct`: about a sixth of an MoE model's points, expert-parallel variants).

What no other side of a pair changes is computed once per GPU type (:func:`all_records`,
:func:`decode_side`), not per ordered pair.

Floats: the probes are plan's own columns (``pair_points``' arithmetic, :class:`_Pairing`: the same
operations on the same values, tests/test_disagg_sizing_fast.py), so what they find is exact; the
reasoning that no bound between probes holds another answer (and the midpoint cut's) is made in
exact arithmetic. Plan's ceilings take a 1e-12 relative margin and its tie-break between prefill
configs of equal GPUs divides TTFTs by 2a, so a near-tie within a few ulps is where it could fail;
tests/test_site_sizing_disagg.py compares the kept points' answers with plan's at bounds equal to
the answers' own TTFT and TPOT.
"""
from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from engine.serving.disagg import ROUND, links
from engine.deploy.hardware import GPU
from engine.serving.sizing import GPUSearch
from engine.serving.pairing import DEFAULT_PAIRS, pair_allowed, prefill_choice, prefill_staircases, prefix_argmax

def records(pres: GPUSearch, c: int) -> tuple[np.ndarray, np.ndarray]:
    """(ttft_s, batch) of pool config ``c``'s records, in ``pair_points``' order (TTFT, stable)."""
    sel = np.flatnonzero(pres.prefill["config"] == c)
    order = np.argsort(pres.prefill["ttft_s"][sel], kind="stable")
    t, b = pres.prefill["ttft_s"][sel][order], pres.prefill["batch"][sel][order]
    first = prefix_argmax(b / t)                 # non-decreasing: its distinct values where it steps
    first = first[_starts(first)]                # (where the running maximum of requests/s rises)
    return t[first], b[first]


def all_records(pres: GPUSearch) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`records` of every pool config of ``pres``, in order: one sort for them all (by config,
    then TTFT, stable: each config's points in the same order)."""
    if not pres.pool_configs:
        return []
    p = pres.prefill
    order = np.lexsort((p["ttft_s"], p["config"]))
    edge = np.searchsorted(p["config"][order], np.arange(len(pres.pool_configs) + 1))
    out = []
    for lo, hi in zip(edge[:-1], edge[1:]):
        t, b = p["ttft_s"][order[lo:hi]], p["batch"][order[lo:hi]]
        first = prefix_argmax(b / t)
        first = first[_starts(first)]
        out.append((t[first], b[first]))
    return out


def dominated(pres: GPUSearch, slowest_bytes_per_s: float | None = None,
              recs: list[tuple[np.ndarray, np.ndarray]] | None = None) -> list[np.ndarray]:
    """Per pool config, which of its :func:`records` ``pair_points`` never picks for a chosen config
    (a mask over them, in their order): record ``r`` of ``c2`` is dominated by an earlier config
    ``c1`` whose GPU count divides its own (``m = n2 / n1``, a power of two), whose KV share per GPU
    is no larger (so its transfer bound is no longer, for any decode config), and which has a record
    of no longer TTFT with at least 1/m of ``r``'s requests/s. With ``slowest_bytes_per_s`` (the
    least scale-out bandwidth of any link the pairing uses), a larger share of ``c1`` is allowed
    when its record's TTFT plus the extra transfer time at that bandwidth (the most the larger share
    can add for any decode share: ``max(share, s)`` grows by at most the difference) is still no
    longer than ``r``'s, with a margin of a billionth for the float subtraction of the transfer
    time from the bound. Wherever ``r`` fits, so does that
    record: ``c1`` needs at most as many GPUs for any demand and, on a tie, picks a record of no
    longer TTFT and wins by index, so ``c2`` is never chosen with pick ``r``. Dropping ``r`` leaves
    every outcome of ``c2`` with another pick as it was (that pick still meets the same replica
    count's demand, and the running maximum within the bound is still at least it) and only
    worsens the others, so the chosen config and its outcome stay the same for every bound and
    demand. Dominance is transitive (divisors, shares, TTFTs and the 1/m factors compose), so
    every dominated record can go at once. A config all of whose records are dominated is never
    chosen. (``recs``: :func:`all_records` of ``pres``, computed when not given.)"""
    recs = all_records(pres) if recs is None else recs
    # every config's records at once (rows), and per earlier config c1 one pass over the records of
    # every later config it may dominate: the same comparisons as config pair by config pair, each
    # on the same doubles (a row's reach, c1's last record within it, m times its requests/s)
    if not recs:
        return []
    n = np.array([cfg.n_gpus for cfg in pres.pool_configs])
    share = np.array([pres.kv_share[cfg] for cfg in pres.pool_configs], dtype=float)
    x = [b / t for t, b in recs]
    t_all, x_all = np.concatenate([t for t, _ in recs]), np.concatenate(x)
    of = np.repeat(np.arange(len(recs)), [len(t) for t, _ in recs])      # each row's config
    shrunk = t_all * (1 - 1e-9)
    drop = np.zeros(len(t_all), dtype=bool)
    for c1, (t1, _) in enumerate(recs):
        if not len(t1):
            continue
        extra = share[c1] - share                     # per config c2
        later = (np.arange(len(recs)) > c1) & (n % n[c1] == 0)
        if slowest_bytes_per_s is None:
            later &= extra <= 0
        rows = np.flatnonzero(later[of] & ~drop)          # (a dropped row stays dropped)
        if not len(rows):
            continue
        e = extra[of[rows]]
        reach = t_all[rows]
        far = np.flatnonzero(e > 0)
        if len(far):
            reach = reach.copy()
            reach[far] = shrunk[rows[far]] - e[far] / slowest_bytes_per_s
        # the records of c1 have increasing requests/s: the last one within reach is the most
        j = np.searchsorted(t1, reach, side="right") - 1
        drop[rows] = (j >= 0) & ((n[of[rows]] // n[c1]) * x[c1][np.maximum(j, 0)] >= x_all[rows])
    return np.split(drop, np.cumsum([len(t) for t, _ in recs])[:-1])


def prefill_records(pres: GPUSearch, keep: dict[int, set[int]] | None = None,
                    slowest_bytes_per_s: float | None = None,
                    recs: list[tuple[np.ndarray, np.ndarray]] | None = None) -> GPUSearch:
    """A copy of ``pres`` whose prefill points are its pool configs' undominated records
    (:func:`dominated` at ``slowest_bytes_per_s``; ``keep``: only these batches of each config, by its index in
    ``pres.pool_configs``), configs with none left out, the others renumbered in their order;
    ``pair_points`` chooses the same outcome for every decode point and bounds with it (config
    indices aside; ``recs``: :func:`all_records` of ``pres``, computed when not given)."""
    recs = all_records(pres) if recs is None else recs
    drop = dominated(pres, slowest_bytes_per_s, recs)
    configs, cols = [], {"config": [], "batch": [], "ttft_s": []}
    for c, cfg in enumerate(pres.pool_configs):
        if keep is not None and not keep.get(c):
            continue
        t, b = recs[c]
        t, b = t[~drop[c]], b[~drop[c]]
        if keep is not None:
            sel = np.isin(b, sorted(keep[c]))
            t, b = t[sel], b[sel]
        if not len(t):
            continue
        configs.append(cfg)
        cols["config"].append(np.full(len(t), len(configs) - 1))
        cols["batch"].append(b)
        cols["ttft_s"].append(t)
    prefill = {k: np.concatenate(v) for k, v in cols.items()} if configs else {}
    return replace(pres, pool_configs=configs, prefill=prefill, kv_share=dict(pres.kv_share))


def decode_subset(dres: GPUSearch, index) -> GPUSearch:
    """A copy of ``dres`` with only the decode points ``index`` (ascending: the search's order kept)."""
    index = np.asarray(index, dtype=int)
    return replace(dres, points={k: v[index] for k, v in dres.points.items()} if dres.points else {})


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
        bps.append(t + scale_out.time(np.maximum(share, s)))
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
        self.configs = prefill_staircases(pres, lambda c: self.out.time(np.maximum(self.share_p[c], self.share_d)))
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


class _Outcomes(NamedTuple):
    """:func:`_probe`'s columns for some rows."""

    total: np.ndarray
    tokens: np.ndarray
    config: np.ndarray
    batch: np.ndarray

    def take(self, index) -> _Outcomes:
        return _Outcomes(*(a[index] for a in self))

    def differs(self, other: _Outcomes) -> np.ndarray:
        """Per row, whether any column differs from ``other``'s."""
        return (self.total != other.total) | (self.tokens != other.tokens) | (self.config != other.config) | (
            self.batch != other.batch)

    def then(self, other: _Outcomes) -> _Outcomes:
        return _Outcomes(*map(np.concatenate, zip(self, other)))


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


def decode_side(dres: GPUSearch, output_len: int) -> DecodeSide:
    """:class:`DecodeSide` of ``dres`` (with decode points)."""
    p = dres.points
    x = p["batch"] / (output_len * p["tpot_s"])
    floor = np.empty(len(x))
    # TPOTs as their dense ranks (np.unique's inverse: the same comparisons), whole numbers the
    # sorts below take as 16-bit keys (radix sorts) where they fit; every config's points by TPOT
    # (stable) in one sort: by config, then TPOT, then index (as each config's own stable sort)
    tp = _dense_rank(p["tpot_s"])
    by = np.lexsort((_small(tp), _small(p["config"])))
    edge = np.flatnonzero(_starts(p["config"][by])).tolist() + [len(by)]
    for lo, hi in zip(edge[:-1], edge[1:]):
        order = by[lo:hi]
        t = p["tpot_s"][order]
        low = np.minimum.accumulate(x[order])
        floor[order] = low[np.searchsorted(t, t, side="right") - 1]
    return DecodeSide(tp, twins(dres, tp), x, floor)


def _dense_rank(v: np.ndarray) -> np.ndarray:
    """Per value of ``v``, how many distinct values are smaller (``np.unique``'s inverse)."""
    order = np.argsort(v, kind="stable")
    s = v[order]
    out = np.empty(len(v), dtype=np.intp)
    out[order] = np.cumsum(np.concatenate(([0], s[1:] != s[:-1])))
    return out


def twins(dres: GPUSearch, tp: np.ndarray | None = None) -> np.ndarray:
    """Per decode point of ``dres``, a number shared by exactly the points equal to it in everything
    a probe reads of one (TPOT, batch, GPUs, KV share; :func:`_distinct`). (``tp``: the TPOTs' dense
    ranks, :func:`_dense_rank`, computed when not given: the TPOT and the share are sorted and
    compared as their ranks, the same order and equalities as the doubles.)"""
    p = dres.points
    tp = _dense_rank(p["tpot_s"]) if tp is None else tp
    share = _dense_rank(np.array([dres.kv_share[c] for c in dres.configs]))[p["config"]]
    keys = tuple(_small(k) for k in (tp, p["batch"], p["n_gpus"], share))
    order = np.lexsort(keys)
    differ = np.zeros(len(order), dtype=bool)
    for key in keys:
        differ[1:] |= key[order][1:] != key[order][:-1]
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.cumsum(differ)
    return out


def _distinct(twin: np.ndarray, every: np.ndarray) -> np.ndarray:
    """``every`` (decode points by TPOT, ties in the search's order) less each point :func:`twins`
    ``twin`` of one before it: such a point has the same outcome at every bound as that smaller one
    (the same operations on the same values: those are all a probe reads of a decode point), comes
    after it in plan's order and has its TPOT, so it is never a step of a staircase, nor needed as a
    competitor (the smaller one keeps out every point it would)."""
    return every[np.sort(np.unique(_small(twin[every]), return_index=True)[1])]


def pair_candidates(pgpu: GPU, dgpu: GPU, pres: GPUSearch, dres: GPUSearch, output_len: int,
                    side: DecodeSide | None = None) -> set[tuple[int, int, int]]:
    """Every (decode point, prefill config, prefill batch) that is ``pair_points``' answer for some
    TTFT and TPOT bounds (one replica), the prefill config indexing ``pres.pool_configs`` (pass
    :func:`prefill_records`' copy: the same answers, fewer points to scan; ``side``:
    :func:`decode_side` of ``dres``, computed when not given)."""
    if not pres.prefill or not dres.points:
        return set()
    probes, feasible = _breakpoints(pgpu, dgpu, pres, dres)
    shares = sorted({dres.kv_share[c] for c in dres.configs})
    share_of = np.array([dres.kv_share[c] for c in dres.configs])[dres.points["config"]]
    # per point, the least bound with a prefill choice (a hair above: the float subtraction of the
    # transfer time may round up to a record's TTFT); below it the point has none
    opens = np.array(feasible)[np.searchsorted(shares, share_of)] * (1 + 1e-9)
    # only the columns pair_points reads, and each point's KV share (its prefill choice exists from
    # its share's first bound on: the bisection starts split there, so that within an interval a
    # point's competitors of its share have an outcome at the interval's bottom)
    dres = replace(dres, points={k: dres.points[k] for k in ("config", "batch", "tpot_s", "n_gpus")})
    side = decode_side(dres, output_len) if side is None else side
    every = _within_reach(pres, side)

    pairing = _Pairing(pgpu, dgpu, pres, dres, output_len)

    # a level of the bisection: intervals [lo_i, hi_i] of probes, and as rows (by interval, each
    # interval's by TPOT, ties in the search's order) the points each searches, with their outcomes
    # at both ends and, per end, the rows with an outcome there in plan's order
    tp = side.tp
    # (by TPOT as its rank, side.tp: the same order and ties, a 16-bit radix sort where it fits)
    every = _distinct(side.twin, every[np.argsort(_small(tp[every]), kind="stable")])
    cuts = np.array(sorted({0, len(probes) - 1, *(int(np.searchsorted(probes, f)) for f in feasible)}))
    n, k = len(every), len(cuts) - 1
    end = np.repeat(np.arange(k + 1), n)
    ends = _Outcomes(*_probe(pairing, probes[cuts], end, np.tile(every, k + 1), opens))
    # (one end at a time: a few large sorts cost less apart)
    by_end = np.concatenate([e * n + _plan_order(end[:n], every, ends.take(slice(e * n, (e + 1) * n)))
                             for e in range(k + 1)])
    # interval i runs from end i to end i + 1: its rows are end i's, and end i + 1's less n
    lo_i, hi_i = cuts[:-1], cuts[1:]
    seg, point = end[:k * n], np.tile(every, k)
    lo, hi = ends.take(slice(0, k * n)), ends.take(slice(n, (k + 1) * n))
    by_lo, by_hi = by_end[by_end < k * n], by_end[by_end >= n] - n
    seg, point, lo, hi, by_lo, by_hi = _drop_inert(seg, point, lo, hi, by_lo, by_hi)
    # the (point, prefill config, batch) answers as one whole number each (far below 2**63: points,
    # configs and batches number thousands at most), repeats too, made distinct once at the end
    n_config, n_batch = len(pres.pool_configs), int(pres.prefill["batch"].max()) + 1
    found = []
    while len(lo_i):
        rank = tp[point]
        keep = _can_answer(seg, point, rank, lo, hi, by_lo)
        # each end's staircase among the rows kept
        s_lo, s_hi = (_staircases(seg, rank, rows[keep[rows]]) for rows in (by_lo, by_hi))
        done = _same_staircases(len(lo_i), seg, point, lo, s_lo, hi, s_hi) | (hi_i - lo_i <= 1)
        for steps, out in ((s_lo, lo), (s_hi, hi)):
            steps = steps[done[seg[steps]]]
            found.append((point[steps] * n_config + out.config[steps]) * n_batch + out.batch[steps])
        # the others split at their midpoints, probed in one pass: split interval j's (lo, mid) and
        # (mid, hi) are intervals j and (splits) + j of the next level, each with j's rows kept
        split, mid_i = np.flatnonzero(~done), (lo_i + hi_i) // 2
        rows = np.flatnonzero(keep & ~done[seg])
        j = (np.cumsum(~done) - 1)[seg[rows]]
        # a row whose outcome is the same at both ends has it in between (the module doc's Cost):
        # only the others are probed
        # the next level's ends, (lo, mid) and (mid, hi): mid is lo but where probed, so both
        # start from lo (and hi) of the rows kept, then take the probes' columns (mid: a view)
        n_rows = len(rows)
        lo, hi = _next_ends(lo, hi, rows)
        moves = np.flatnonzero(lo.take(slice(n_rows)).differs(hi.take(slice(n_rows, None))))
        for c_lo, c_hi, value in zip(lo, hi, _probe(pairing, probes[mid_i[split]], j[moves], point[rows[moves]], opens)):
            c_lo[n_rows + moves] = value
            c_hi[moves] = value
        by_mid = _plan_order(j, point[rows], lo.take(slice(n_rows, None)))
        place = np.full(len(seg), -1)                 # a kept row's place among rows
        place[rows] = np.arange(n_rows)
        by_lo = np.concatenate([_kept(place[by_lo]), n_rows + by_mid])
        by_hi = np.concatenate([by_mid, n_rows + _kept(place[by_hi])])
        seg, point = np.concatenate([j, len(split) + j]), np.tile(point[rows], 2)
        lo_i, hi_i = np.concatenate([lo_i[split], mid_i[split]]), np.concatenate([mid_i[split], hi_i[split]])
    if not found:
        return set()
    found = np.unique(np.concatenate(found))
    point, found = np.divmod(found, n_config * n_batch)
    return set(zip(point.tolist(), *(a.tolist() for a in np.divmod(found, n_batch))))


def candidates(results: list[GPUSearch], gpus: list[GPU], output_len: int, pairs: str = DEFAULT_PAIRS
               ) -> tuple[dict[str, GPUSearch], dict[str, GPUSearch]]:
    """Per GPU type (``search(..., pools=True)``'s results), the prefill side (:func:`prefill_records`
    kept to the records some answer picks) and the decode side (:func:`decode_subset` kept to the
    points some answer holds), over every ordered pair of the GPU types that ``pairs`` allows
    (:func:`engine.serving.pairing.pair_allowed`, plan's rule and default): what the sizing form needs
    to give ``answer_disaggregated`` for any bounds."""
    by_key = {g.key: g for g in gpus}
    slowest = min(float(g.scale_out_bytes_per_s) for g in gpus)     # every pair's scale-out is at least this
    recs = {r.gpu: all_records(r) for r in results}
    pools = {r.gpu: prefill_records(r, slowest_bytes_per_s=slowest, recs=recs[r.gpu]) for r in results}
    sides = {r.gpu: decode_side(r, output_len) for r in results if r.points}     # once per GPU type
    picked: dict[str, dict[int, set[int]]] = {r.gpu: {} for r in results}
    held: dict[str, set[int]] = {r.gpu: set() for r in results}
    for pres in results:
        pr = pools[pres.gpu]
        position = {cfg: k for k, cfg in enumerate(pres.pool_configs)}
        for dres in results:
            if not pair_allowed(by_key[pres.gpu], by_key[dres.gpu], pairs):
                continue
            found = pair_candidates(by_key[pres.gpu], by_key[dres.gpu], pr, dres, output_len,
                                    sides.get(dres.gpu))
            for d, c, b in found:
                held[dres.gpu].add(d)
                picked[pres.gpu].setdefault(position[pr.pool_configs[c]], set()).add(b)
    prefill = {r.gpu: prefill_records(r, picked[r.gpu], recs=recs[r.gpu]) for r in results}
    decode = {r.gpu: decode_subset(r, sorted(held[r.gpu])) if r.points else r for r in results}
    return prefill, decode
