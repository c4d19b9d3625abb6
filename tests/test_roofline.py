"""The one roofline rule (engine.deploy.roofline): hand-worked steps, its ties, and its restatement
for the deploy page (engine.deploy.rules.STEP) equal to it bit for bit."""
from __future__ import annotations

import numpy as np

from engine.deploy import roofline, rules
from engine.deploy.cost import BOUNDS
from engine.language.formula_tree import run_arrays


def test_hand_worked_steps_on_an_h100_like_gpu():
    """Three steps by hand at 989e12 FLOP/s, 3.35e12 B/s of HBM and 450e9 B/s of link with an 8 us
    per-call latency:
    * a GEMM of 2 x 4096 x 4096 x 8192 FLOPs and 64 MiB: 0.2779 ms of compute, 0.0200 ms of memory,
      so compute-bound at the compute time;
    * a decode GEMV of 2 x 4096 x 4096 FLOPs reading 32 MiB: 10.0 us of memory over 0.034 us of compute;
    * an all-reduce of 1 MiB over one call, reading and writing its buffer (2 MiB of HBM, 0.63 us):
      1 MiB / 450e9 + 8 us = 10.33 us, comm-bound (the largest term, not the sum of them)."""
    flops = np.array([2 * 4096 * 4096 * 8192, 2 * 4096 * 4096, 0.0])
    traffic = np.array([64 * 2**20, 32 * 2**20, 2 * 2**20], dtype=float)
    comm = np.array([0.0, 0.0, 2**20])
    latency = np.array([0.0, 0.0, 1 * 8e-6])
    for into in (False, True):      # the allocating form and the hot paths' in-place one
        _check_hand_steps(*roofline.times(flops.copy(), traffic.copy(), comm.copy(), latency, 989e12, 3.35e12,
                                          450e9, into=into))


def _check_hand_steps(t_compute, t_memory, t_comm, t_sol):
    assert np.allclose(t_compute, [274877906944 / 989e12, 33554432 / 989e12, 0.0], rtol=0, atol=0)
    assert np.allclose(t_memory, [67108864 / 3.35e12, 33554432 / 3.35e12, 2097152 / 3.35e12], rtol=0, atol=0)
    assert t_comm[2] == 1048576 / 450e9 + 8e-6
    assert t_sol.tolist() == [t_compute[0], t_memory[1], t_comm[2]]
    assert abs(t_sol[0] - 0.27794e-3) < 1e-8 and abs(t_sol[1] - 10.016e-6) < 1e-9 and abs(t_sol[2] - 10.330e-6) < 1e-9
    assert [BOUNDS[i] for i in roofline.bound_index(t_compute, t_memory, t_comm)] == ["compute", "memory", "comm"]


def test_ties_go_to_compute_then_memory():
    """Equal terms: compute wins over memory and comm, memory over comm (cost.BOUNDS' order); the
    masks and the index agree, and the masks cover every element once."""
    tc = np.array([1.0, 1.0, 0.5, 0.5, 2.0])
    tm = np.array([1.0, 0.5, 1.0, 1.0, 1.0])
    tl = np.array([1.0, 1.0, 1.0, 2.0, 2.0])
    want = ["compute", "compute", "memory", "comm", "compute"]
    assert [BOUNDS[i] for i in roofline.bound_index(tc, tm, tl)] == want
    masks = roofline.bound_masks(tc, tm, tl)
    assert (sum(m.astype(int) for m in masks) == 1).all()
    assert [BOUNDS[int(np.flatnonzero([m[j] for m in masks])[0])] for j in range(len(want))] == want


def test_in_place_form_gives_the_same_floats_consistency():
    """Consistency (the rule with itself): writing each term over its own column gives the floats of
    the allocating form, at random magnitudes and on a (steps, points) grid with per-step rates."""
    rng = np.random.default_rng(7)
    shape = (37, 53)
    cols = [10.0 ** rng.uniform(0, 15, shape) for _ in range(3)]
    latency = rng.uniform(0, 1e-4, shape)
    peak, link = 10.0 ** rng.uniform(12, 16, (37, 1)), 10.0 ** rng.uniform(9, 12, (37, 1))
    want = roofline.times(*cols, latency, peak, 3.35e12, link)
    own, scratch = [c.copy() for c in cols], np.empty(shape)
    got = roofline.times(*own, latency, peak, 3.35e12, link, into=True, sol_out=scratch)
    for w, g, column in zip(want, got, own + [scratch]):
        assert np.array_equal(w, g) and g is column     # each term over its own column
    # t_sol over t_compute's column (the hot paths that read t_sol alone): the same floats
    own = [c.copy() for c in cols]
    assert np.array_equal(roofline.times(*own, latency, peak, 3.35e12, link, into=True, sol_out=own[0])[3], want[3])


def test_the_pages_step_program_is_the_same_rule_consistency():
    """Consistency: rules.STEP (what the deploy page's interpreter runs) gives roofline.times'
    floats bit for bit, so the page and the engine cannot drift apart."""
    rng = np.random.default_rng(11)
    n = 4000
    env = {"flops": 10.0 ** rng.uniform(0, 15, n), "bytes": 10.0 ** rng.uniform(0, 12, n),
           "comm": np.where(rng.random(n) < 0.5, 0.0, 10.0 ** rng.uniform(0, 10, n)),
           "calls": rng.integers(0, 64, n).astype(float), "alpha": rng.uniform(1e-6, 2e-5, n),
           "peak": 10.0 ** rng.uniform(12, 16, n), "hbm": rng.uniform(1e12, 8e12, n),
           "link": np.where(rng.random(n) < 0.2, np.inf, rng.uniform(5e10, 9e11, n)),
           "weights": np.zeros(n), "repeat": np.ones(n), "times": np.ones(n)}
    page = run_arrays(rules.STEP, env)
    t_compute, t_memory, t_comm, t_sol = roofline.times(env["flops"], env["bytes"], env["comm"],
                                                        env["calls"] * env["alpha"], env["peak"], env["hbm"],
                                                        env["link"])
    for name, value in (("t_compute", t_compute), ("t_memory", t_memory), ("t_comm", t_comm), ("t_sol", t_sol)):
        assert np.array_equal(np.asarray(page[name]), value), name
