"""The roofline of one step, written once for the engine: its three times, its SOL time and its bound.

Layer: engine.deploy (numpy only; no engine state). For a step on a GPU (engine.deploy.cost's module
doc states the terms):

* t_compute = flops / peak (the peak of the step's compute dtype),
* t_memory  = bytes / hbm,
* t_comm    = comm_bytes / link + latency (calls x the collective's per-call latency; a step on no
  link has an infinite link rate, so only its latency is left),
* t_sol     = max(max(t_compute, t_memory), t_comm),
* its bound: compute where t_compute is the largest, else memory where t_memory is at least
  t_comm, else comm (ties go to compute, then memory: the order of :data:`engine.deploy.cost.BOUNDS`).

Every engine path computes these here: :class:`engine.deploy.cost.CompiledProgram`'s per-step
times (``step_times``, ``step_sol``), :mod:`engine.deploy.compiled_totals`' phase sums on both of
its paths and the per-op rows' bound (engine.deploy.op_rows). Two restatements remain, each in
the representation its reader needs: the deploy page's rule program
:data:`engine.deploy.rules.STEP` (run by the browser's interpreter) and the playground's trees
(engine.playground.steps); tests/test_roofline.py holds STEP equal to :func:`times` bit for bit,
and the browser tests hold the page to ``archledger deploy``.

Invariant: ``into=True`` writes each term over the array it is made from, with the same IEEE
operations in the same order per element as the allocating form, so both give the same floats
(the hot paths evaluate in place: no new array per term).
"""
from __future__ import annotations

import numpy as np


def times(flops, traffic, comm, latency, peak, hbm, link, *, into: bool = False, sol_out=None):
    """(t_compute, t_memory, t_comm, t_sol) elementwise (the module doc's rule); the rates broadcast
    against the columns. ``into``: ``flops``, ``traffic`` and ``comm`` are the caller's own arrays
    and become t_compute, t_memory and t_comm; ``sol_out``: an array of the result's shape to write
    t_sol into (one of the three, or the caller's scratch), else a new one."""
    if into:
        t_compute = np.divide(flops, peak, out=flops)
        t_memory = np.divide(traffic, hbm, out=traffic)
        t_comm = np.divide(comm, link, out=comm)
        t_comm += latency
    else:
        t_compute, t_memory, t_comm = flops / peak, traffic / hbm, comm / link + latency
    t_sol = np.maximum(np.maximum(t_compute, t_memory, out=sol_out), t_comm, out=sol_out)
    return t_compute, t_memory, t_comm, t_sol


def bound_masks(t_compute, t_memory, t_comm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each term bounds the step (the module doc's ties): three disjoint boolean arrays
    covering every element, in :data:`engine.deploy.cost.BOUNDS`' order."""
    compute = (t_compute >= t_memory) & (t_compute >= t_comm)
    memory = ~compute & (t_memory >= t_comm)
    return compute, memory, ~compute & ~memory


def bound_index(t_compute, t_memory, t_comm) -> np.ndarray:
    """The bound of each element as an index into :data:`engine.deploy.cost.BOUNDS`: the first of
    the largest term (numpy's argmax keeps the first of equal maxima: the ties of
    :func:`bound_masks`)."""
    return np.argmax(np.stack([t_compute, t_memory, t_comm]), axis=0)
