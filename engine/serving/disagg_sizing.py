"""Disaggregated sizing answers, precomputed: the few prefill and decode points that decide
``archledger plan``'s ``answer_disaggregated`` for every TTFT and TPOT bound (one replica, no load).

Layer: engine.serving (on engine.serving.sizing; nothing here evaluates a point itself). The site's
sizing form runs :func:`engine.serving.pairing.pair_points`' arithmetic (engine.serving.rules'
programs, run by static/js/formula.js; sizing.js keeps the same tie-breaks) over the points :func:`candidates` keeps, so what it must keep is
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
  (:func:`_distinct`: about a sixth of an MoE model's points, expert-parallel variants);
* once more than a :data:`FOLD_SHARE`-th of a level's kept rows are *fixed* (their outcome the
  same at their interval's two ends), every end's staircase is recorded and the levels below
  carry only the moving rows: a fixed row's outcome is the same all through its interval (the
  monotonicity above), so on a staircase anywhere in it, it is on the bottom's (its competitors
  are at their worst there); what it keeps out of a staircase is folded into each row's *bound*
  (:func:`engine.serving.disagg_probe._fold`: the first outcome in plan's order among the fixed
  rows of no larger TPOT), which a moving row must precede to be kept or recorded. Deep levels
  hold long staircases of fixed rows around a few moving ones (MiMo-V2-Flash: 236,076 rows at
  one level, 990 probed), so they shrink to the moving rows; where most rows move the fold costs
  more than it saves, hence the share (tests/test_disagg_fixed_rows.py).

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

import hashlib
import pickle
from collections import OrderedDict
from dataclasses import replace

import numpy as np

from engine.deploy.hardware import GPU
from engine.serving.sizing import GPUSearch
from engine.serving.pairing import DEFAULT_PAIRS, pair_allowed
from engine.serving.staircase import prefix_argmax
from engine.serving.disagg_probe import (DecodeSide, _Outcomes, _Pairing, _breakpoints, _can_answer, _can_answer_at,
                                        _drop_inert, _fold, _kept, _next_ends, _plan_order, _positions, _precedes,
                                        _probe, _runs, _same_staircases, _small, _staircases, _starts, _within_reach)

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


def _none_dropped(recs: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """:func:`dominated`'s masks dropping nothing (one per config of ``recs``)."""
    return [np.zeros(len(t), dtype=bool) for t, _ in recs]


def prefill_records(pres: GPUSearch, keep: dict[int, set[int]] | None = None,
                    slowest_bytes_per_s: float | None = None,
                    recs: list[tuple[np.ndarray, np.ndarray]] | None = None, picked: bool = False) -> GPUSearch:
    """A copy of ``pres`` whose prefill points are its pool configs' undominated records
    (:func:`dominated` at ``slowest_bytes_per_s``; ``keep``: only these batches of each config, by its index in
    ``pres.pool_configs``), configs with none left out, the others renumbered in their order;
    ``pair_points`` chooses the same outcome for every decode point and bounds with it (config
    indices aside; ``recs``: :func:`all_records` of ``pres``, computed when not given).

    ``picked``: ``keep`` holds only records undominated at some bandwidth (what :func:`_picks`
    picks, out of the records left at the slowest link), so :func:`dominated` without a bandwidth
    is not evaluated: it drops none of them. (Without a bandwidth a row is dropped only by an
    earlier config of no larger share, by the very comparison :func:`dominated` makes with one;
    those configs are among the ones it tries with a bandwidth, so what is dropped without one is
    dropped with one too; and a config's batches are distinct, so ``keep`` names records.)"""
    recs = all_records(pres) if recs is None else recs
    drop = _none_dropped(recs) if picked else dominated(pres, slowest_bytes_per_s, recs)
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
    :func:`decode_side` of ``dres``, computed when not given). :func:`candidate_arrays` as a set."""
    return set(zip(*(a.tolist() for a in candidate_arrays(pgpu, dgpu, pres, dres, output_len, side))))


_NONE = (np.zeros(0, dtype=np.int64),) * 3
#: The bisection folds its fixed rows (module doc, Cost) from the first level where they are more
#: than 1 / FOLD_SHARE of the rows kept: over the corpus's 102 searches a third did best (the
#: candidates' CPU 8% below never folding, 1% below folding from the first level; 0 never folds).
FOLD_SHARE = 3.0


def candidate_arrays(pgpu: GPU, dgpu: GPU, pres: GPUSearch, dres: GPUSearch, output_len: int,
                     side: DecodeSide | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`pair_candidates`' triples as three arrays (decode point, prefill config, prefill
    batch), each triple once, ordered by decode point, then config, then batch."""
    if not pres.prefill or not dres.points:
        return _NONE
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

    def record(steps: np.ndarray, out: _Outcomes, point: np.ndarray) -> None:
        found.append((point[steps] * n_config + out.config[steps]) * n_batch + out.batch[steps])

    # the staircase bisection, level by level, while most rows still move
    while len(lo_i):
        rank = tp[point]
        keep = _can_answer(seg, point, rank, lo, hi, by_lo)
        moves = lo.differs(hi)
        if (keep & ~moves).sum() * FOLD_SHARE > keep.sum():
            break
        # each end's staircase among the rows kept
        s_lo, s_hi = (_staircases(seg, rank, rows[keep[rows]]) for rows in (by_lo, by_hi))
        done = _same_staircases(len(lo_i), seg, point, lo, s_lo, hi, s_hi) | (hi_i - lo_i <= 1)
        for steps, out in ((s_lo, lo), (s_hi, hi)):
            record(steps[done[seg[steps]]], out, point)
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
    if not len(lo_i):
        return _answers(found, n_config, n_batch)
    # then, once most rows are fixed: every end's whole staircase among the rows kept recorded
    # (every end is some interval's bottom or top)
    # (rank, keep and moves: the level's, from the loop above)
    last = _runs(seg, rank)[1]
    at_lo = _positions(by_lo, len(seg))
    for rows, out in ((by_lo, lo), (by_hi, hi)):
        record(_staircases(seg, rank, rows[keep[rows]]), out, point)
    # then only the rows whose outcome differs at their interval's two ends go on (the module doc's
    # Cost: a fixed row's steps are its bottom's, and what it keeps out is its bound, :func:`_fold`)
    bound = _fold(last, seg, point, lo, np.where(keep & ~moves, at_lo, -1))
    rows = np.flatnonzero(keep & moves & (hi_i - lo_i > 1)[seg])
    seg, lo_i, hi_i = _renumbered(seg[rows], lo_i, hi_i)
    point, lo, hi, bound, at_lo = point[rows], lo.take(rows), hi.take(rows), bound.take(rows), at_lo[rows]
    while len(lo_i):
        # every row's midpoint probed in one pass, and the midpoint's steps among the rows recorded
        # (those no fixed row of their interval keeps out)
        mid_i = (lo_i + hi_i) // 2
        mid = _Outcomes(*_probe(pairing, probes[mid_i], seg, point, opens))
        rank = tp[point]
        by_mid = _plan_order(seg, point, mid)
        steps = _staircases(seg, rank, by_mid)
        record(steps[_precedes(mid.take(steps), point[steps], bound.take(steps))], mid, point)
        # the halves, (lo, mid) and (mid, hi), with the rows' order and runs: a row whose outcome is
        # the same at a half's two ends is fixed there (its outcome the midpoint's), folded into the
        # bounds of that half; the moving rows that can still answer go on
        at_mid = _positions(by_mid, len(seg))
        before, last = _runs(seg, rank)
        halves = []
        for a, b, at_a, a_i, b_i in ((lo, mid, at_lo, lo_i, mid_i), (mid, hi, at_mid, mid_i, hi_i)):
            moves = a.differs(b)
            rows = np.flatnonzero(moves & (b_i - a_i > 1)[seg])
            limit = _fold(last, seg, point, mid, np.where(moves, -1, at_mid), bound.take(rows), rows)
            b_rows = b.take(rows)
            keep = _can_answer_at(before, seg, point, a, b, at_a)[rows] & _precedes(b_rows, point[rows], limit)
            rows = rows[keep]
            halves.append((rows, a.take(rows), b_rows.take(keep), limit.take(keep), at_a[rows]))
        # (lo, mid) is interval j of the next level, (mid, hi) interval m + j, then only those with rows
        m = len(lo_i)
        (r1, *one), (r2, *two) = halves
        seg, lo_i, hi_i = _renumbered(np.concatenate([seg[r1], m + seg[r2]]), np.concatenate([lo_i, mid_i]),
                                      np.concatenate([mid_i, hi_i]))
        point = np.concatenate([point[r1], point[r2]])
        lo, hi, bound = (x.then(y) for x, y in zip(one[:3], two[:3]))
        # (the places distinct over both halves: the second's above the first's)
        shift = int(one[3].max()) + 1 if len(r1) else 0
        at_lo = np.concatenate([one[3], np.where(two[3] >= 0, two[3] + shift, -1)])
    return _answers(found, n_config, n_batch)


def _answers(found: list, n_config: int, n_batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct answers of ``found`` (whole numbers) as (decode point, prefill config, batch)."""
    if not found:
        return _NONE
    found = np.unique(np.concatenate(found))
    point, found = np.divmod(found, n_config * n_batch)
    return (point, *np.divmod(found, n_batch))


def _renumbered(seg: np.ndarray, lo_i: np.ndarray, hi_i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows' intervals ``seg`` (non-decreasing) renumbered to only the intervals that hold a row, in
    their order, and those intervals' ends."""
    used = np.flatnonzero(np.bincount(seg, minlength=len(lo_i)))
    return np.searchsorted(used, seg), lo_i[used], hi_i[used]


#: How many :func:`candidates` answers a process keeps (the latest; a build's worker runs a family's
#: models one after the other, two searches each). An answer is kept as what it picks (per GPU type,
#: pool configs' batches and decode points' indices: kilobytes), never as the searches.
MEMO_ENTRIES = 64
_ANSWERS: OrderedDict[bytes, tuple] = OrderedDict()


def candidates(results: list[GPUSearch], gpus: list[GPU], output_len: int, pairs: str = DEFAULT_PAIRS
               ) -> tuple[dict[str, GPUSearch], dict[str, GPUSearch]]:
    """Per GPU type (``search(..., pools=True)``'s results), the prefill side (:func:`prefill_records`
    kept to the records some answer picks) and the decode side (:func:`decode_subset` kept to the
    points some answer holds), over every ordered pair of the GPU types that ``pairs`` allows
    (:func:`engine.serving.pairing.pair_allowed`, plan's rule and default): what the sizing form needs
    to give ``answer_disaggregated`` for any bounds.

    What the answer picks (:func:`_picks`) is remembered by :func:`inputs_digest` (the last
    :data:`MEMO_ENTRIES`): it is a function of the arguments alone (no global state is read; the
    code is the process's), and the digest encodes everything it reads of them injectively, so
    equal digests are equal inputs. A family's fine-tunes with the same dims
    (DeepSeek-R1 of V3, MiniMax-M2.7 of M2.5, ...) search to the very same points: the second
    model's searches reuse the first's picks, cut out of its own searches."""
    key = inputs_digest(results, gpus, output_len, pairs)
    recs = {r.gpu: all_records(r) for r in results}
    found = _ANSWERS.get(key)
    if found is None:
        found = _ANSWERS[key] = _picks(results, gpus, output_len, pairs, recs)
        while len(_ANSWERS) > MEMO_ENTRIES:
            _ANSWERS.popitem(last=False)
    else:
        _ANSWERS.move_to_end(key)
    picked, held = found
    prefill = {r.gpu: prefill_records(r, picked[r.gpu], recs=recs[r.gpu], picked=True) for r in results}
    decode = {r.gpu: decode_subset(r, held[r.gpu]) if r.points else r for r in results}
    return prefill, decode


#: The columns of a search :func:`_picks` reads (decode points, prefill-pool points): the rest of a
#: search's points (its other figures: worst case, replicas, prices) it never reads, and the answer's
#: searches are cut out of the caller's own (:func:`candidates`).
READ_COLUMNS = {"points": ("config", "batch", "tpot_s", "n_gpus"), "prefill": ("config", "batch", "ttft_s")}


def inputs_digest(results: list[GPUSearch], gpus: list[GPU], output_len: int, pairs: str) -> bytes:
    """SHA-256 of everything :func:`_picks` reads of :func:`candidates`' arguments: the GPUs whole, the
    output length, the pair policy and, per search in order, its GPU, configs, pool configs, KV shares
    and :data:`READ_COLUMNS` (each array's dtype, shape and raw bytes). The bytes hashed are a length-
    prefixed pickle of everything but the arrays' contents (which fixes each array's dtype and shape,
    so its byte length), then those contents in that order: an injective encoding, so equal digests are
    equal inputs to :func:`_picks`, which reads nothing else (no global state). The arrays are hashed
    from their buffers, not pickled (no copy of the searches' megabytes). Equal inputs may still
    encode apart (0.0 and -0.0, dicts filled in another order): a miss, never a wrong answer."""
    arrays, head = [], []
    for r in results:
        shapes = {}
        for table, names in READ_COLUMNS.items():
            columns = getattr(r, table)
            shapes[table] = None if not columns else tuple(_described(columns[n], arrays) for n in names)
        head.append((r.gpu, r.configs, r.pool_configs, list(r.kv_share.items()), shapes))
    header = pickle.dumps((gpus, output_len, pairs, head), protocol=5)
    digest = hashlib.sha256(len(header).to_bytes(8, "little"))
    digest.update(header)
    for a in arrays:
        digest.update(a)
    return digest.digest()


def _described(column, arrays: list) -> tuple:
    """(dtype, shape) of ``column`` as an array, which joins ``arrays`` (C-contiguous, to be hashed
    from its buffer); an array of Python objects is described by its pickle instead (its buffer holds
    pointers). The dtype itself, not its short name, goes into the header: a structured dtype's name
    (``|V16``) does not say its fields."""
    a = np.ascontiguousarray(column)
    if a.dtype.hasobject:
        return ("pickled", pickle.dumps(a, protocol=5))
    arrays.append(a)
    return (a.dtype, a.shape)


def _picks(results: list[GPUSearch], gpus: list[GPU], output_len: int, pairs: str, recs: dict[str, list]
           ) -> tuple[dict[str, dict[int, set[int]]], dict[str, np.ndarray]]:
    """What :func:`candidates` keeps, per GPU type: (pool config (its index in the search) -> the
    batches some answer picks, the decode points some answer holds, ascending). (``recs``: per GPU
    type, :func:`all_records` of its search.)"""
    by_key = {g.key: g for g in gpus}
    slowest = min(float(g.scale_out_bytes_per_s) for g in gpus)     # every pair's scale-out is at least this
    pools = {r.gpu: prefill_records(r, slowest_bytes_per_s=slowest, recs=recs[r.gpu]) for r in results}
    sides = {r.gpu: decode_side(r, output_len) for r in results if r.points}     # once per GPU type
    # the answers' decode points per decode GPU, and their (pool config in the search's numbering,
    # batch) per prefill GPU, as arrays gathered over the pairs (the triples number ten thousands)
    held: dict[str, list] = {r.gpu: [] for r in results}
    chosen: dict[str, list] = {r.gpu: [] for r in results}
    for pres in results:
        pr = pools[pres.gpu]
        position = {cfg: k for k, cfg in enumerate(pres.pool_configs)}
        renumber = np.array([position[cfg] for cfg in pr.pool_configs], dtype=np.int64)
        for dres in results:
            if not pair_allowed(by_key[pres.gpu], by_key[dres.gpu], pairs):
                continue
            d, c, b = candidate_arrays(by_key[pres.gpu], by_key[dres.gpu], pr, dres, output_len, sides.get(dres.gpu))
            held[dres.gpu].append(d)
            chosen[pres.gpu].append((renumber[c], b))
    return ({gpu: _picked(c) for gpu, c in chosen.items()},
            {gpu: np.unique(np.concatenate(h)) if h else np.zeros(0, dtype=int) for gpu, h in held.items()})


def _picked(chosen: list[tuple[np.ndarray, np.ndarray]]) -> dict[int, set[int]]:
    """Pool config (its index in the search) -> the batches some answer picks, from the (configs,
    batches) arrays of every pair; a config no answer picks is absent."""
    if not chosen:
        return {}
    config = np.concatenate([c for c, _ in chosen])
    batch = np.concatenate([b for _, b in chosen])
    return {int(k): set(batch[config == k].tolist()) for k in np.unique(config).tolist()}
