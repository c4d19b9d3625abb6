"""The grid's eighth pass (issue 42): the shortcuts it added, each held to hand values or, as a
consistency test, to the path it replaces, bit for bit.

* ``measured.finish`` writes every ask's times of a program in one assignment: hand values on two
  asks (one of two tables), and a float32 table's times keep the per-ask product's dtype;
* ``measured._table_kernels``: the kernel classes a table set holds for one GPU (hand-made keys);
* ``plan.pick_inputs``: a call's phase inputs picked at some of its points are phase_inputs at
  those points (consistency test) and the hand-derived decode context (prompt + output);
* ``summarize_many(inputs=)`` and ``expected_phase_times_many(inputs=)`` with given phase inputs
  give the floats of computing them;
* ``Plan.options`` and ``plan._comm_steps``: one object per value (hand-made inputs).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.deploy import measured
from engine.deploy.hardware import load_gpus
from engine.deploy.measured_tables import load_measured
from engine.deploy.plan import Plan, _comm_steps, expected_phase_times_many, pick_inputs
from engine.deploy.sol import phase_inputs, summarize, summarize_many
from engine.language import kv
from tests.deploy_helpers import make_plan

GPUS = load_gpus()


def _gathered(t_sol: np.ndarray, asks: list) -> measured.Gathered:
    return measured.Gathered(t_sol / measured.DEFAULT_EFFICIENCY, np.zeros(t_sol.shape, dtype=bool), t_sol, asks)


def test_finish_writes_every_ask_at_once_hand_values():
    """Three steps at two points, each bound 1 us (fallback 1/0.7 us). Step 0 covered at point 1
    by one table (2 us per call, 3 calls: 6 us); step 2 covered at both points by two tables
    (0.1 us and 0.2 us per call at point 0, 0.3 us and 0.25 us at point 1; 2 calls): the faster
    x 2 = 0.2 us and 0.5 us, never below the 1 us bound: 1 us at both. Point-major output."""
    t_sol = np.full((3, 2), 1e-6)
    a = measured.Ask(0, np.array([1]), np.zeros((1, 3)), [object()], ("gemm",), 3.0, "")
    a.found = [(np.array([2e-6]), np.array([False]))]
    b = measured.Ask(2, np.array([0, 1]), np.zeros((2, 3)), [object(), object()], ("gemm",), 2.0, "")
    b.found = [(np.array([1e-7, 3e-7]), np.array([False, False])), (np.array([2e-7, 2.5e-7]), np.array([False, False]))]
    times, covered, text = measured.finish(_gathered(t_sol, [a, b]))
    fb = 1e-6 / 0.7
    assert times.tolist() == pytest.approx([fb, fb, 1e-6, 6e-6, fb, 1e-6], rel=1e-15)
    assert covered.tolist() == [False, False, True, True, False, True]
    assert text is None


def test_finish_at_once_consistency_and_float32():
    """Consistency test: the one assignment gives each ask's own product and maximum, bit for bit
    (random times, repeats and bounds over many asks); a float32 table's times x a repeat stay the
    per-ask float32 product (the shortcut would multiply in float64)."""
    rng = np.random.default_rng(8)
    steps, n = 40, 30
    t_sol = rng.random((steps, n)) * 1e-5
    asks = []
    for row in range(0, steps, 2):
        at = np.flatnonzero(rng.random(n) < 0.6)
        a = measured.Ask(row, at, np.zeros((len(at), 3)), [object()], ("gemm",), float(rng.integers(1, 90)), "")
        a.found = [(rng.random(len(at)) * 1e-6, np.zeros(len(at), dtype=bool))]
        asks.append(a)
    want = t_sol / measured.DEFAULT_EFFICIENCY
    for a in asks:
        want[a.row, a.at] = np.maximum(a.found[0][0] * a.repeat, t_sol[a.row, a.at])
    assert measured.finish(_gathered(t_sol, asks))[0].tolist() == want.T.reshape(-1).tolist()
    for a in asks:
        a.found = [(a.found[0][0].astype(np.float32), a.found[0][1])]
    want = t_sol / measured.DEFAULT_EFFICIENCY
    for a in asks:
        want[a.row, a.at] = np.maximum(a.found[0][0] * a.repeat, t_sol[a.row, a.at])
    assert measured.finish(_gathered(t_sol, asks))[0].tolist() == want.T.reshape(-1).tolist()


def test_table_kernels_hand_values():
    """A table set's keys are (GPU, framework, kernel class, ...): H100's classes are gemm and
    attention, H200's gemm alone; another set object (even equal) is read again."""
    tables = {("H100", "vllm", "gemm", "bf16"): 1, ("H100", "vllm", "attention", "bf16"): 2,
              ("H200", "vllm", "gemm", "fp8"): 3}
    assert measured._table_kernels(tables, "H100") == {"gemm", "attention"}
    assert measured._table_kernels(tables, "H200") == {"gemm"}
    assert measured._table_kernels(tables, "A100") == frozenset()
    other = {("A100", "vllm", "moe", "bf16"): 4}
    assert measured._table_kernels(other, "A100") == {"moe"}


@pytest.fixture(scope="module")
def plan8b():
    return make_plan("Llama-3.1-8B", "H100", "vllm", None, "bf16", tp=2)


def _same(a, b) -> bool:
    """Equal bit for bit: the same keys, dtypes and bytes (NaN included), recursively."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return type(a) is type(b) and (a == b or (a != a and b != b))


def _points(n: int = 96):
    """A bucket's points: every batch at a few (prompt, output, KV dtype, GPU) rows, shuffled."""
    rng = np.random.default_rng(3)
    batch = np.tile(np.array([1, 2, 4, 8, 16, 32, 64, 128]), n // 8)
    inp = np.repeat(np.array([1024, 4096, 8192, 1024, 4096, 16384]), n // 6)
    out = np.repeat(np.array([1024, 1024, 1024, 4096, 4096, 4096]), n // 6)
    kvb = np.repeat(np.array([kv.KV_DTYPE_BYTES["bf16"], kv.KV_DTYPE_BYTES["fp8"]] * 3, dtype=float), n // 6)
    gi = np.repeat(np.array([0, 1, 0, 1, 1, 0]), n // 6)
    order = rng.permutation(n)
    return gi[order], kvb[order], batch[order], inp[order], out[order]


def test_pick_inputs_consistency_and_hand_values(plan8b):
    """Consistency test: phase_inputs at all points, picked at some, are phase_inputs at those
    points (every value, bit for bit); by hand, the decode context is prompt + output."""
    _, _, batch, inp, out = _points()
    at = np.array([5, 0, 17, 40, 41, 95])
    s = plan8b.structure
    picked = pick_inputs(phase_inputs(s, batch, inp, out, s.options.prefill_tokens, mean=True), at)
    alone = phase_inputs(s, batch[at], inp[at], out[at], s.options.prefill_tokens, mean=True)
    assert picked.keys() == alone.keys()
    for name in alone:
        assert picked[name][0] is alone[name][0]
        assert all(_same(np.asarray(x), np.asarray(y)) for x, y in zip(picked[name][1:], alone[name][1:]))
    assert picked["decode"][3].tolist() == [int(i) + int(o) for i, o in zip(inp[at], out[at])]


def test_summaries_with_given_inputs_consistency(plan8b):
    """Consistency test: a call's phase inputs given to summarize_many give every field of
    computing them, bit for bit (a bucket's 96 points on two GPU types and two KV sizes)."""
    gi, kvb, batch, inp, out = _points()
    gpus = [GPUS["H100"], GPUS["H200"]]
    s = plan8b.structure
    calls = [(s, gi, kvb, batch, inp, out)]
    given = [phase_inputs(s, batch, inp, out, mean=True)]
    got, want = summarize_many(gpus, calls, inputs=given)[0], summarize_many(gpus, calls)[0]
    assert _same(got, want)
    assert _same(want, summarize(s, gpus, gi, kvb, batch, inp, out))


def test_expected_times_with_given_inputs_consistency(plan8b):
    """Consistency test: the expected times with each plan's phase inputs picked out of its call's
    are those of computing them (two GPU types, one without tables, two KV dtypes)."""
    _, _, batch, inp, out = _points()
    s = plan8b.structure
    full = phase_inputs(s, batch, inp, out, s.options.prefill_tokens, mean=True)
    parts = [np.arange(0, 96, 2), np.arange(1, 96, 2)]
    asked, given = [], []
    for g in ("H100", "A100"):
        for kv_dtype, at in zip(("bf16", "fp8"), parts):
            asked.append((Plan(s, GPUS[g], kv_dtype), batch[at], inp[at], out[at], load_measured(gpu=g, framework="vllm")))
            given.append(pick_inputs(full, at))
    assert all(_same(a, b) for a, b in zip(expected_phase_times_many(asked, given), expected_phase_times_many(asked)))


def test_plan_options_once_per_value(plan8b):
    """A plan's options with its KV dtype: one object per (options, KV dtype), the KV dtype set and
    nothing else changed; no KV dtype: the structure's own."""
    s = plan8b.structure
    a, b = Plan(s, GPUS["H100"], "fp8"), Plan(s, GPUS["H200"], "fp8")
    assert a.options is b.options and a.options.kv_dtype == "fp8"
    assert a.options.prefill_tokens == s.options.prefill_tokens and a.options.framework == s.options.framework
    assert Plan(s, GPUS["H100"], "bf16").options.kv_dtype == "bf16"
    assert Plan(s, GPUS["H100"]).options is s.options


def test_comm_steps_hand_values():
    """Steps of kinds compute, comm, fused, comm: the mask marks the second and fourth; the same
    program object gives the same (read-only) array."""
    program = SimpleNamespace(steps=[SimpleNamespace(kind=k) for k in ("compute", "comm", "fused", "comm")])
    mask = _comm_steps(program)
    assert mask.tolist() == [False, True, False, True]
    assert _comm_steps(program) is mask and not mask.flags.writeable
