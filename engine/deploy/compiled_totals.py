"""A compiled program's phase sums at points on GPUs: totals, times, the bound split, the lower
bound and the step time (a mixin of :class:`engine.deploy.cost.CompiledProgram`).

Layer: engine.deploy. The arithmetic is :mod:`engine.deploy.cost`'s module doc's (t_compute,
t_memory, t_comm, SOL per step, computed by :mod:`engine.deploy.roofline`; t_sol, t_bound,
t_comm_stream per phase). Two paths: small grids stack every step into one (steps, ...) array per
term (:data:`STACKED_ELEMENTS`), large ones go step by step. Invariant: both add the steps in
program order, so they give identical sums (tests/test_cost_paths.py), and
:meth:`_Totals.step_time` is :meth:`_Totals.totals`' ``t_sol`` to the bit.
"""
from __future__ import annotations

import math

import numpy as np

from engine.deploy import roofline
from engine.deploy.hardware import GPU

#: Largest steps x points a program's totals stack at once (8 MB per term); above it, step by step.
STACKED_ELEMENTS = 1 << 20


class _Totals:
    """The sums of a :class:`~engine.deploy.cost.CompiledProgram` (its ``rates``, ``columns``,
    ``latency`` and step kinds)."""

    def _points(self, args, at, hbm, peaks) -> tuple[list, tuple, np.ndarray | None]:
        """(arguments, shape of the sums, ``at`` or None) of :meth:`totals` and :meth:`step_time`.

        ``at`` (optional) picks, per point of the sums, a point of the 1-d ``args`` (the rates are
        already per picked point): the stacked columns are evaluated at ``args``' own points and
        gathered (:meth:`_stacked`), a pure copy, so the floats are those of evaluating at the
        picked arguments; the step-by-step path gets the picked arguments themselves."""
        if at is None:
            return args, np.broadcast_shapes(*(a.shape for a in args), np.shape(hbm), np.shape(peaks)[1:]), None
        at = np.asarray(at, dtype=np.intp)
        own = np.broadcast_shapes(*(a.shape for a in args))
        shape = np.broadcast_shapes(at.shape, np.shape(hbm), np.shape(peaks)[1:])
        if len(own) == 1 and at.ndim == 1 and self._stacks(shape):
            return args, shape, at
        return [np.broadcast_to(a, own)[at] for a in args], shape, None

    def _stacked(self, indices, args, shape, at) -> list[np.ndarray]:
        """The stacked columns ``indices`` at the sums' points (see :meth:`_points`), each a
        C-ordered block of one new array of this call's own (:meth:`columns`)."""
        if at is None:
            return list(self.columns(indices, args, shape))
        own = np.broadcast_shapes(*(a.shape for a in args))
        return list(self.columns(indices, args, own, None, at))

    def step_time(self, rates, batch, seq, ctx, kv_bytes, at=None) -> np.ndarray:
        """The ``t_sol`` of :meth:`totals` alone (the sizing search's hot path): the same terms,
        summed in the same order, so the same floats, without the other sums and the bound split."""
        peaks, links, hbm, alphas = self.rates(rates) if isinstance(rates, GPU) else rates
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        args, shape, at = self._points(args, at, hbm, peaks)
        if self._stacks(shape):              # as totals() does: stacked on small grids, same floats
            f, b, c, calls = self._stacked((0, 1, 2, 4), args, shape, at)
            per_step = _per_step(shape)
            # the terms of totals(), each written over the column it is made from (the stacked
            # columns are this call's own arrays): no new array per term, the same floats
            latency = np.multiply(calls, per_step(np.asarray(alphas)), out=calls)
            return _add_steps(roofline.times(f, b, c, latency, per_step(np.asarray(peaks)), hbm,
                                             per_step(np.asarray(links)), into=True, sol_out=f)[3])
        total = np.zeros(shape)
        cols = self._columns
        for i in range(len(self.program.steps)):
            f, b, c = (fn(*args) if callable(fn) else fn for fn in (cols[0][i], cols[1][i], cols[2][i]))
            total += roofline.times(f, b, c, self.latency(i, args, alphas), peaks[i], hbm, links[i])[3]
        return total

    def totals(self, rates, batch, seq, ctx, kv_bytes, at=None, unmeasured: float | None = None) -> dict[str, np.ndarray]:
        """Phase sums over the broadcast shape: flops, bytes, weight_bytes, comm_bytes, t_compute,
        t_memory, t_comm, t_sol, and t_sol split by the term bounding each step (``by_bound``, shape
        (3, ...)); the phase's lower bound ``t_bound`` and the ``comm`` steps' share of t_sol
        ``t_comm_stream`` (module doc). ``rates`` is a GPU or the (peaks, links, hbm, alphas) of :meth:`rates_for`.

        Two paths, the same floats: a small grid (the build's buckets hold tens of points, the
        sizing search and ``archledger deploy`` single points) stacks every step into one
        (steps, ...) array per term and sums over the steps axis (:func:`_add_steps`), a few numpy
        calls per program instead of a dozen per step; a large one (the bench's 204,800 points)
        goes step by step, each step at the shape it depends on (stacked blocks of the full shape
        measured 27x slower there). Both add the steps in program order, so they give identical
        sums (tests/test_cost_paths.py). ``at``: the points are ``args[at]`` (:meth:`_points`).
        ``unmeasured`` (a divisor, the default efficiency): on the stacked path over points along one
        axis, also ``t_unmeasured``, each point's steps' ``t_sol / unmeasured`` summed point-major
        (:func:`point_major_divided`, the rows summed: engine.deploy.plan.expected_phase_times_many's
        sums of a program no table covers); absent on the other path."""
        peaks, links, hbm, alphas = self.rates(rates) if isinstance(rates, GPU) else rates
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        args, shape, at = self._points(args, at, hbm, peaks)
        if self._stacks(shape):
            return self._totals_stacked(peaks, links, hbm, alphas, args, shape, at, unmeasured)
        return self._totals_by_step(peaks, links, hbm, alphas, args, shape)

    def _stacks(self, shape) -> bool:
        """Whether sums over ``shape`` stack the steps (see :meth:`totals`)."""
        size, n_steps = math.prod(shape), len(self.program.steps)
        return bool(n_steps) and 1 <= size and n_steps * size <= STACKED_ELEMENTS

    def _totals_stacked(self, peaks, links, hbm, alphas, args, shape, at=None,
                        unmeasured: float | None = None) -> dict[str, np.ndarray]:
        """:meth:`totals` with every step stacked on axis 0 (small grids and single points)."""
        f, b, c, w, calls = self._stacked((0, 1, 2, 3, 4), args, shape, at)
        per_step = _per_step(shape)
        add = _add_steps
        sums = {"flops": add(f), "bytes": add(b), "weight_bytes": add(w), "comm_bytes": add(c)}
        # the times written over the columns they are made from, once summed (the stacked columns
        # are this call's own arrays): no new array per term, the same floats
        latency = np.multiply(calls, per_step(np.asarray(alphas)), out=calls)
        tc, tm, tl, sol = roofline.times(f, b, c, latency, per_step(np.asarray(peaks)), hbm,
                                         per_step(np.asarray(links)), into=True, sol_out=w)
        if unmeasured is not None and len(shape) == 1:
            sums["t_unmeasured"] = point_major_divided(sol, unmeasured).sum(axis=1)
        masks = roofline.bound_masks(tc, tm, tl)
        sums.update({"t_compute": add(tc), "t_memory": add(tm), "t_comm": add(tl), "t_sol": add(sol)})
        sums.update(self._bound_terms(lambda rows, x: add(x[rows]), tl, sol, sums, shape))
        part = calls                          # each bound's share: sol where it bounds, else 0
        shares = []
        for mask in masks:
            part.fill(0.0)
            np.copyto(part, sol, where=mask)
            shares.append(add(part))
        sums["by_bound"] = np.stack(shares)
        return sums

    def _totals_by_step(self, peaks, links, hbm, alphas, args, shape) -> dict[str, np.ndarray]:
        """:meth:`totals` one step at a time, each step's values at the shape they depend on (a
        weight read is one float, a KV read a context vector): large grids."""
        sums = {k: np.zeros(shape) for k in ("flops", "bytes", "weight_bytes", "comm_bytes", "t_compute",
                                              "t_memory", "t_comm", "t_sol")}
        by_bound = np.zeros((3,) + shape)
        cols = self._columns
        links_at, per_link, comm_stream = self._kinds[1][1], {}, 0.0
        for i in range(len(self.program.steps)):
            f, b, c, w = (fn(*args) if callable(fn) else fn for fn in (cols[0][i], cols[1][i], cols[2][i], cols[3][i]))
            tc, tm, tl, sol = roofline.times(f, b, c, self.latency(i, args, alphas), peaks[i], hbm, links[i])
            for key, value in (("flops", f), ("bytes", b), ("weight_bytes", w), ("comm_bytes", c),
                               ("t_compute", tc), ("t_memory", tm), ("t_comm", tl), ("t_sol", sol)):
                sums[key] += value
            for k, mask in enumerate(roofline.bound_masks(tc, tm, tl)):
                by_bound[k] += np.where(mask, sol, 0.0)
            link = links_at[i]
            per_link[link] = per_link.get(link, 0.0) + tl
            if self._comm_steps[i]:
                comm_stream = comm_stream + sol
        sums["by_bound"] = by_bound
        sums["t_bound"] = np.maximum(np.maximum(sums["t_compute"], sums["t_memory"]),
                                     np.maximum.reduce([np.broadcast_to(v, shape) for v in per_link.values()])
                                     if per_link else 0.0)
        sums["t_comm_stream"] = np.broadcast_to(comm_stream, shape).copy()
        return sums

    def _bound_terms(self, add_rows, tl, sol, sums, shape) -> dict[str, np.ndarray]:
        """``t_bound`` and ``t_comm_stream`` (module doc) from the stacked (steps, ...) link times
        ``tl`` and step times ``sol``: ``add_rows(rows, x)`` sums the rows ``rows`` of ``x`` in
        program order."""
        if self._bound_rows is None:       # once per program: the steps of each link class, the comm steps
            # (steps on no link, kernels, send nothing: their t_comm is 0)
            links, l_at = self._kinds[1]
            self._bound_rows = ([np.flatnonzero(l_at == i) for i, link in enumerate(links) if link],
                                np.flatnonzero(self._comm_steps))
        per_link, comm = self._bound_rows
        busiest = np.maximum(sums["t_compute"], sums["t_memory"])
        for rows in per_link:               # each link class serves its collectives one at a time
            busiest = np.maximum(busiest, add_rows(rows, tl))
        stream = add_rows(comm, sol) if len(comm) else np.zeros(shape)
        return {"t_bound": np.broadcast_to(busiest, shape).copy(), "t_comm_stream": np.broadcast_to(stream, shape).copy()}
def _add_steps(x: np.ndarray) -> np.ndarray:
    """The sum over axis 0 (the steps) of a C-ordered (steps, ...) array, row after row in program
    order (the step-by-step loop's order, so the same floats). Over axis 0 numpy adds row after row
    when a row holds two numbers or more; a single point would make the steps the inner loop, summed
    pairwise, so there the running sum (accumulate, sequential by definition) is taken."""
    if x[0].size >= 2:
        return np.add.reduce(x, axis=0)
    return np.add.accumulate(x, axis=0)[-1]


def point_major_divided(t_sol: np.ndarray, divisor: float) -> np.ndarray:
    """``t_sol / divisor`` of a (steps, points) array, written point-major: (points, steps), each
    point's steps one C-ordered row (engine.deploy.measured.unmeasured_times: each step at its
    bound over the default efficiency). A row's sum over axis 1 reads that row alone, in step
    order, so it is the same float at any point set holding the point."""
    return np.divide(t_sol.T, divisor, out=np.empty(t_sol.shape[::-1]))


def _per_step(shape):
    """Per-step rates are (steps,) or (steps, points): a function aligning them with (steps, *shape)
    on the right."""
    return lambda r: np.reshape(r, (r.shape[0],) + (1,) * (len(shape) + 1 - r.ndim) + r.shape[1:])
