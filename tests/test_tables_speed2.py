"""Consistency (the engine with itself): the grid's table building takes shortcuts that give the plain forms' values.

* engine.deploy.cost shares one table layout between the programs whose columns hold the very same
  functions and constants (``point_values._LAYOUTS``): checked against the plain loop on real corpus
  programs, and not shared where the entries or their split into columns differ.
* ``CompiledProgram.evaluation_key``: programs built apart with the same entries and rate kinds
  share it, and :func:`engine.deploy.sol.phases_many` evaluates one of them for all, over one point
  set of every program's points, each program picking its own (``_picked_table``, both ways of
  filling it): each call's phases equal its own program's :func:`phase_at_points`, bit for bit.
* Columns asked together (``evaluate``, the prefill working set) equal columns asked one by one;
  step repeats as memoized floats; GPU rates read once per (GPU, kinds) equal the GPU's figures,
  and another GPU object with other figures gets its own; ``sol._distinct_codes`` equals numpy.unique.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options, cost, plan, point_values
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.device_program import Program
from engine.deploy.structure import PHASES

MODEL = "Qwen/Qwen3-30B-A3B"          # MoE with expert parallelism: collectives, weight reads, zeros


def plain_layout(columns: list[list]) -> tuple[np.ndarray, np.ndarray, list]:
    """The layout the plain way: one loop over every entry, numbering distinct constants (by
    their exact float text) and distinct functions as first seen."""
    constants: dict[str, int] = {}
    functions: dict = {}
    marks = []
    for fns in columns:
        mine = []
        for f in fns:
            if callable(f):
                mine.append(~functions.setdefault(f, len(functions)))
            else:
                mine.append(constants.setdefault(float(f).hex(), len(constants)))
        marks.append(mine)
    marks = np.array(marks, dtype=np.intp).reshape(len(columns), len(columns[0]))
    rows = np.where(marks < 0, len(constants) + ~marks, marks)
    return rows, np.array([float.fromhex(k) for k in constants], dtype=float), list(functions)


@pytest.fixture(scope="module")
def structures(evaluation):
    ev, gpus = evaluation(MODEL), load_gpus()
    config = ParallelConfig(tp=2, ep=2, dp_attn=2)
    return [plan(ev, gpus[g], config, Options(framework=f)).structure
            for g in ("H100", "B200") for f in ("none", "vllm")]


def test_table_layout_consistency_with_plain_loop(structures):
    for s in structures:
        for phase in PHASES:
            compiled = s.compiled[phase]
            for indices in ((0, 1, 2, 4), (0, 1, 2, 4, 3), (1,), (3,), (1, 3)):
                rows, constants, functions, token = compiled._table_layout(indices)
                columns = [compiled._columns[i] if i < 4 else compiled._calls for i in indices]
                want_rows, want_constants, want_functions = plain_layout(columns)
                assert rows.tolist() == want_rows.tolist(), (phase, indices)
                assert constants.tobytes() == want_constants.tobytes()
                assert functions == want_functions
                # the token names the layout's functions and constants
                assert point_values._LAYOUT_TOKENS[(tuple(functions), tuple(float(c).hex() for c in constants))] == token


def test_shared_layout_follows_changed_entries_consistency():
    def program(columns, calls):
        compiled = cost.CompiledProgram(Program(phase="decode", steps=(), layouts={}))
        compiled._columns, compiled._calls = columns, calls
        return compiled

    f, g = (lambda *a: a[0]), (lambda *a: a[1])
    a = program([[f, 0.0, g, f]] * 4, [0.0] * 4)
    b = program([[f, 0.0, g, f]] * 4, [0.0] * 4)
    assert a._table_layout((0, 1))[0] is b._table_layout((0, 1))[0]      # the same entries: one layout
    # a changed function, a constant's sign, or the same entries split into other columns: another layout
    c = program([[f, 0.0, f, f]] * 4, [0.0] * 4)
    d = program([[f, -0.0, g, f]] * 4, [0.0] * 4)
    e = program([[f, 0.0], [g, f], [f, 0.0], [g, f]], [0.0] * 2)
    for other, indices in ((c, (0, 1)), (d, (0, 1)), (e, (0, 1, 2, 3))):
        got = other._table_layout(indices)
        columns = [other._columns[i] for i in indices]
        want_rows, want_constants, want_functions = plain_layout(columns)
        assert got[0].tolist() == want_rows.tolist() and got[1].tobytes() == want_constants.tobytes()
        assert got[2] == want_functions
    assert np.signbit(d._table_layout((0, 1))[1]).tolist() == [True]
    assert e._table_layout((0, 1, 2, 3))[0].shape == (4, 2) and a._table_layout((0, 1))[0].shape == (2, 4)


def test_phases_many_by_evaluation_key_consistency_with_own_program(evaluation):
    # two caches build the same structures apart: other program objects, the very same entries
    from engine.deploy import planner, sol
    from engine.deploy.fusion_table import load_tables, token_limits
    from engine.deploy.hardware import find_gpu
    from engine.deploy.structure_cache import StructureCache
    ev = evaluation(MODEL)
    gpus = [find_gpu(load_gpus(), name) for name in ("H100", "B200", "MI300X")]
    caches = [StructureCache(ev, load_tables(ev.corpus.root / "fusion")) for _ in range(2)]
    structures = []
    for config in (ParallelConfig(tp=2, ep=2, dp_attn=2, pp=2), ParallelConfig(tp=4, ep=4)):
        limits = token_limits(caches[0].tables.get("vllm"))
        for c in caches:
            if c is caches[1]:      # placed and fused apart from the first cache's (planner's memos)
                planner._PLACED.clear()
                planner._FUSED_MEMOS.clear()
            structures.append(c.structure(config, 8, "vllm", gpus[0], (len(limits), 0)))
    a, b = structures[0].compiled["decode"], structures[1].compiled["decode"]
    assert a is not b and a.evaluation_key() == b.evaluation_key()         # the case merged
    assert a.evaluation_key() != structures[0].compiled["prefill"].evaluation_key()
    assert a.evaluation_key() != structures[2].compiled["decode"].evaluation_key()
    rng = np.random.default_rng(5)
    asked = []
    for s in structures:
        n = int(rng.integers(1, 50))
        inputs = sol.phase_inputs(s, rng.integers(1, 300, n), rng.choice([1024, 8192], n), rng.choice([1, 1024], n))
        asked.append((inputs, rng.integers(0, len(gpus), n), rng.choice([1.0, 2.0], n)))
    for times_only in (False, True):
        many = sol.phases_many(gpus, asked, times_only)
        for (inputs, index, kv_bytes), got in zip(asked, many):
            assert got.keys() == inputs.keys()
            for name, (compiled, b_, seq, ctx) in inputs.items():
                alone = sol.phase_at_points(compiled, gpus, index, b_, seq, ctx, kv_bytes, times_only)
                for field, value in alone.items():
                    assert np.asarray(got[name][field]).tobytes() == np.asarray(value).tobytes(), (name, field)


def test_evaluation_key_follows_rate_kinds():
    # the same entries with another operand dtype (other peaks) or link: another key
    f = lambda *a: a[0]                                   # noqa: E731
    keys = []
    for kinds in ((["bf16"], ["none"]), (["fp8"], ["none"]), (["bf16"], ["scale_up"])):
        compiled = cost.CompiledProgram(Program(phase="decode", steps=(), layouts={}))
        compiled._columns, compiled._calls = [[f, 0.0]] * 4, [0.0, 0.0]
        at = np.zeros(2, dtype=np.intp)
        compiled._kinds = [(kinds[0], at), (kinds[1], at), ([None], at)]
        keys.append(compiled.evaluation_key())
    assert len(set(keys)) == 3


def test_columns_together_consistency_with_column_by_column(structures):
    # evaluate() and the prefill working set ask their columns in one table: the floats of one
    # column at a time
    batch, ctx = np.array([1.0, 3.0, 64.0]), np.array([1024.0, 5000.0, 77.0])
    for s in structures:
        for phase in PHASES:
            compiled = s.compiled[phase]
            args = [batch, ctx, ctx, np.array(2.0)]
            together = compiled.columns((0, 1, 2, 4, 3), args, (3,))
            for k, i in enumerate((0, 1, 2, 4, 3)):
                assert together[k].tobytes() == compiled.column(i, args, (3,)).tobytes(), (phase, i)
            keep, repeats = compiled.kernel_steps()
            steps = compiled.program.steps
            assert keep == [i for i, st in enumerate(steps) if st.kind != "comm" and float(st.repeat) > 0]
            assert repeats.tolist() == [float(steps[i].repeat) for i in keep]


def test_picked_columns_consistency_with_columns_at_every_point(structures):
    # columns at picked points (phases_many picks each program's points out of one point set of
    # all of them): the columns at every point, gathered; both ways of filling the picked table
    rng = np.random.default_rng(3)
    n = 40
    batch, ctx = rng.integers(1, 300, n).astype(float), rng.choice([77.0, 1024.0, 8192.0], n)
    for s in structures[:2]:
        for phase in PHASES:
            compiled = s.compiled[phase]
            args = [batch, ctx if phase == "prefill" else np.ones(n), ctx, np.full(n, 2.0)]
            every = compiled.columns((0, 1, 2, 3, 4), args, (n,))
            for at in (np.array([5]), np.array([3, 3, 0]), rng.integers(0, n, 30), np.arange(n)[::-1]):
                picked = compiled.columns((0, 1, 2, 3, 4), args, (n,), at=at)
                assert picked.flags.c_contiguous and picked.tobytes() == np.ascontiguousarray(every[:, :, at]).tobytes()


def test_distinct_codes_consistency_with_numpy_unique():
    from engine.deploy.sol import _distinct_codes
    rng = np.random.default_rng(9)
    for size, n in ((50, 200), (5000, 10), (13, 13), (1, 4)):
        codes = rng.integers(0, size, n)
        got, want = _distinct_codes(codes, size), np.unique(codes, return_inverse=True)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_kind_rates_consistency_with_gpu_figures(structures):
    # the rates read once per (GPU, kinds) are the GPU's own figures per step; another GPU object
    # (the same key, other figures) gets its own
    import dataclasses
    from engine.deploy.cost import link_bandwidth
    gpus = load_gpus()
    for s in structures:
        for phase in PHASES:
            steps = s.compiled[phase].program.steps
            for name in ("H100", "MI300X"):
                gpu = gpus[name]
                fresh = cost.CompiledProgram(s.compiled[phase].program)
                peaks, links, hbm, alphas = fresh.rates(gpu)
                assert peaks.tolist() == [gpu.peak_flops(st.compute_dtype) for st in steps]
                assert links.tolist() == [link_bandwidth(gpu, st.link) for st in steps]
                assert alphas.tolist() == [gpu.collective_latency(st.collective, st.ranks, st.nodes) if st.collective
                                           else 0.0 for st in steps]
                assert hbm == gpu.hbm_bytes_per_s
    gpu = gpus["H100"]
    faster = dataclasses.replace(gpu, scale_up=dataclasses.replace(gpu.scale_up, value=gpu.scale_up.value * 2))
    program = structures[0].compiled["decode"].program
    mine = cost.CompiledProgram(program).rates(gpu)[1]
    theirs = cost.CompiledProgram(program).rates(faster)[1]
    scale_up = np.array([st.link == "scale_up" for st in program.steps])
    assert scale_up.any() and (theirs[scale_up] == 2 * mine[scale_up]).all()
