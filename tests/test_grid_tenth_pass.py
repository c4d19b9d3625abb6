"""The grid's tenth pass (issue 42): each shortcut held to hand values or, as a consistency test,
to the path it replaces, bit for bit.

* ``plan._group_key``: the expected times' groups without tables are keyed by the compiled
  program's evaluation key, GPU and KV size, so sibling programs (other objects, equal keys) share
  one group; every plan still gets the floats of its own call alone;
* ``cost._repeat``: a step's repeat found by object first, by value after;
* ``measured.resolve`` / ``finish``: asks of one points array share their found pairs, and their
  choices and texts are computed once: the times and texts of the old per-point rule;
* ``op_rows._tiled``: the label lists of one structure's tables on several GPU types are one set
  of lists in a call; every table is its own call's, column for column;
* ``grid_eval._gpu_groups``: a call's (GPU, KV dtype) groups as slices where they are runs, the
  groups and order of a mask per pair.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import sympy

from engine.batch.grid_eval import _gpu_groups
from engine.deploy import PHASES, Scenario, measured
from engine.deploy.cost import _repeat, compile_program
from engine.deploy.hardware import load_gpus
from engine.deploy.measured_tables import load_measured
from engine.deploy.op_rows import op_rows_columns, op_rows_columns_many
from engine.deploy.plan import Plan, _group_key, expected_phase_times_many
from engine.language import kv
from tests.deploy_helpers import make_plan
from tests.test_grid_eighth_pass import _same as _same_values

GPUS = load_gpus()


@pytest.fixture(scope="module")
def twins():
    """A structure and a sibling holding other compiled objects of its very programs (equal
    evaluation keys), as sibling structures of other regimes or frameworks do."""
    s = make_plan("Llama-3.1-8B", "H100", "vllm", None, "bf16", tp=2).structure
    return s, replace(s, compiled={p: compile_program(s.programs[p]) for p in PHASES})


def _same(a, b) -> bool:
    """Equal bit for bit (tests/test_grid_eighth_pass.py's rule), lists element by element."""
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return _same_values(a, b)


def _points(seed: int, n: int = 40):
    rng = np.random.default_rng(seed)
    return (rng.choice([1, 2, 4, 8, 16, 64], n), rng.choice([1024, 4096, 8192], n), rng.choice([512, 2048], n))


def test_group_key_shares_unmeasured_siblings_only(twins):
    """By hand: on a GPU without tables the twins' plans meet in one program group, per GPU and KV
    size; with tables (H100) each keeps its own program's group."""
    s, t = twins
    a100 = load_measured(gpu="A100", framework="vllm")
    h100 = load_measured(gpu="H100", framework="vllm")
    assert not a100 and h100
    assert s.compiled["decode"] is not t.compiled["decode"]
    key = lambda st, gpu, kv_dtype, tables: _group_key(Plan(st, GPUS[gpu], kv_dtype), "decode",
                                                       st.compiled["decode"], tables)
    assert key(s, "A100", "bf16", a100) == key(t, "A100", "bf16", a100)
    assert key(s, "A100", "bf16", a100)[1] != key(s, "A100", "fp8", a100)[1]          # another KV size
    assert key(s, "A100", "bf16", a100)[1] != key(s, "B200", "bf16", {})[1]            # another GPU
    assert key(s, "H100", "bf16", h100)[0] != key(t, "H100", "bf16", h100)[0]
    assert key(s, "A100", "bf16", a100)[0][0] == "unmeasured"


def test_shared_unmeasured_groups_consistency(twins):
    """Consistency test: the twins' plans on GPUs with and without tables, two KV dtypes and
    overlapping points, asked together, get the floats of each plan asked alone (its own group)."""
    s, t = twins
    asked = []
    for seed, (structure, gpu, kv_dtype) in enumerate([(s, "A100", "bf16"), (t, "A100", "bf16"), (t, "A100", "fp8"),
                                                       (s, "A100", "fp8"), (s, "B200", "bf16"), (t, "H100", "bf16"),
                                                       (s, "H100", "bf16")]):
        b, i, o = _points(seed % 3)
        asked.append((Plan(structure, GPUS[gpu], kv_dtype), b, i, o, load_measured(gpu=gpu, framework="vllm")))
    together = expected_phase_times_many(asked)
    for a, got in zip(asked, together):
        assert _same(got, expected_phase_times_many([a])[0])


def test_repeat_by_object_hand_values():
    """By hand: a repeat's float, found again by object and by an equal number of another object."""
    three = sympy.Integer(3)
    assert _repeat(three) == 3.0 and _repeat(three) == 3.0
    assert _repeat(sympy.Rational(7, 2)) == 3.5
    assert _repeat(sympy.Integer(61)) == 61.0 and _repeat(sympy.Integer(61) + 0) == 61.0


def _old_finish_texts(g: measured.Gathered) -> tuple[list, dict]:
    """The per-point rule before this pass: each ask's faster table (the first of equals) and its
    texts written point by point (point p's step r at p x steps + r)."""
    k, n = g.times.shape
    src, path, near = [f"bound / {measured.DEFAULT_EFFICIENCY:g}"] * (n * k), [""] * (n * k), [""] * (n * k)
    picks = []
    for a in g.asks:
        t_all = np.stack([t for t, _ in a.found])
        best = np.argmin(t_all, axis=0)
        picked = np.arange(len(a.at))
        picks.append(t_all[best, picked])
        outside = np.stack([o for _, o in a.found])[best, picked].tolist()
        for p, point, b, out in zip(a.at.tolist(), a.points.tolist(), best.tolist(), outside):
            i = p * k + a.row
            src[i], near[i] = measured._point_text(a.tables[b], tuple(point), bool(out), a.shape)
            path[i] = a.tables[b].path
    return picks, {"src": src, "table": path, "nearest": near}


@pytest.fixture(scope="module")
def op_asked(twins):
    """Per-op tables of one structure on two GPU types with tables and one without, both phases."""
    s, _ = twins
    points = [Scenario(1, 1024, 512), Scenario(8, 4096, 512), Scenario(64, 8192, 2048)]
    return [(Plan(s, GPUS[g], "bf16"), phase, points, load_measured(gpu=g, framework="vllm"))
            for g in ("H100", "H200", "A100") for phase in PHASES]


def test_finish_shared_choices_consistency(op_asked):
    """Consistency test: finish's shared choices and texts (asks of one points array) are the old
    per-point rule's, on the gathered asks of real per-op tables (H100's measured tables)."""
    from engine.deploy.op_rows import _point_rows, _shared_coordinates
    plan, phase, points, tables = op_asked[0]
    compiled, (batch, seq, ctx), keep, _, _ = _point_rows(plan, phase, points)
    values = compiled.evaluate(plan.gpu, batch, seq, ctx, plan.kv_bytes, True)
    g = measured.gather(plan, phase, batch, seq, ctx, tables, values, keep,
                        coordinates=next(_shared_coordinates([(plan, (batch, seq, ctx))])))
    measured.resolve(g.asks)
    shared = {id(a.points) for a in g.asks}
    assert len(g.asks) > len(shared) > 1              # asks do share points arrays
    assert any(len(a.found) > 1 for a in g.asks)       # and some choose between tables
    picks, texts = _old_finish_texts(g)
    _, _, got = measured.finish(g, detail=True)
    assert got == texts
    assert sum(s != "bound / 0.7" for s in got["src"]) == sum(len(a.at) for a in g.asks)
    times = measured.finish(g)[0]
    want = g.times.copy()
    for a, t in zip(g.asks, picks):
        want[a.row, a.at] = np.maximum(t * a.repeat, g.t_sol[a.row, a.at])
    assert times.tobytes() == want.T.reshape(-1).tobytes()


def test_op_tables_together_consistency_and_shared_labels(op_asked):
    """Consistency test: every per-op table asked together is the table asked alone, column for
    column (arrays bit for bit, texts equal); the label lists of one structure's tables on two GPU
    types of one dtype map are one set of lists; the A100's own."""
    together = op_rows_columns_many(op_asked, arrays=True)
    for (plan, phase, points, tables), got in zip(op_asked, together):
        alone = op_rows_columns(plan, phase, points, arrays=True, tables=tables)
        assert got.keys() == alone.keys()
        for name in alone:
            assert _same(got[name], alone[name]), name
    h100, h200 = together[0], together[2]
    assert h100["op_uid"] is h200["op_uid"] and h100["flops_formula"] is h200["flops_formula"]
    assert h100["compute_dtype"] == [GPUS["H100"].compute_dtype(d) for d in _dtypes(op_asked[0])] * 3


def _dtypes(asked) -> list:
    from engine.deploy.op_rows import _labels
    return _labels(asked[0].structure, asked[1])[1]["dtype"]


def test_gpu_groups_hand_values():
    """By hand: runs become slices, a pair met twice its indices; GPUs in first-seen order and each
    GPU's KV dtypes in the call's first-seen order (fp8 before bf16 here)."""
    gpu = ["H100", "H100", "H100", "A100", "A100", "H100"]
    kv_ = ["fp8", "bf16", "bf16", "bf16", "fp8", "fp8"]
    got = _gpu_groups(gpu, kv_)
    assert [(g, k, size) for g, k, _, size in got] == [("H100", "fp8", 2), ("H100", "bf16", 2),
                                                        ("A100", "fp8", 1), ("A100", "bf16", 1)]
    assert got[0][2].tolist() == [0, 5]
    assert got[1][2] == slice(1, 3) and got[2][2] == slice(4, 5) and got[3][2] == slice(3, 4)


def test_gpu_groups_consistency_with_masks():
    """Consistency test: on a grid-like call (buckets of one GPU, KV dtype after KV dtype) and on
    shuffled labels, the groups pick the points, sizes and order of one mask per pair."""
    rng = np.random.default_rng(5)
    blocks = [(g, k) for g in ("B200", "H100", "MI300X") for k in ("bf16", "fp8")]
    grid = [p for p in blocks for _ in range(int(rng.integers(1, 9)))]
    shuffled = [blocks[i] for i in rng.integers(0, len(blocks), 60)]
    for pairs in (grid, shuffled):
        gpu, kv_ = [p[0] for p in pairs], [p[1] for p in pairs]
        g_of, k_of = np.array(gpu), np.array(kv_)
        want = [(g, k, np.flatnonzero((g_of == g) & (k_of == k))) for g in dict.fromkeys(gpu)
                for k in dict.fromkeys(kv_)]
        want = [w for w in want if len(w[2])]
        got = _gpu_groups(gpu, kv_)
        assert [(g, k) for g, k, _, _ in got] == [(g, k) for g, k, _ in want]
        for (_, _, mine, size), (_, _, idx) in zip(got, want):
            assert np.arange(len(gpu))[mine].tolist() == idx.tolist() and size == len(idx)
    assert all(type(m) is slice for _, _, m, _ in _gpu_groups([p[0] for p in grid], [p[1] for p in grid]))
    assert kv.KV_DTYPE_BYTES["fp8"] != kv.KV_DTYPE_BYTES["bf16"]


def test_flat_inputs_picked_consistency(twins):
    """Consistency test: a call's phase inputs flattened once and picked (by a slice: views; by
    indices) are, flattened again, the floats of flattening the picked inputs, and give the same
    expected times as the picked inputs themselves (a GPU without tables and one with)."""
    from engine.deploy.plan import _flat, flat_inputs, pick_inputs
    from engine.deploy.sol import phase_inputs
    s, _ = twins
    b, i, o = _points(4, 48)
    full = phase_inputs(s, b, i, o, s.options.prefill_tokens, mean=True)
    flat = flat_inputs(full)
    for at in (slice(5, 30), np.array([0, 3, 3, 47])):
        got, want = pick_inputs(flat, at), pick_inputs(full, at)
        assert got.keys() == want.keys()
        for name in want:
            shape = np.broadcast_shapes(*(np.shape(x) for x in want[name][1:]))
            for x, y in zip(got[name][1:], want[name][1:]):
                assert _flat(x, shape).tobytes() == _flat(y, shape).tobytes()
        if type(at) is slice:
            assert all(np.shares_memory(x, flat[n][k + 1]) for n in got for k, x in enumerate(got[n][1:])
                       if np.ndim(x))
        asked = [(Plan(s, GPUS[g], "bf16"), b[at], i[at], o[at], load_measured(gpu=g, framework="vllm"))
                 for g in ("A100", "H100")]
        assert all(_same(x, y) for x, y in zip(expected_phase_times_many(asked, [got, got]),
                                                  expected_phase_times_many(asked, [want, want])))


def test_moe_key_once_per_dims_hand_values():
    """By hand: an MoE table's key per (dims object, tp, ep), asked twice; another config's
    degrees and another dims object of other values get their own; a model without the dims none."""
    from types import SimpleNamespace
    from engine.deploy.kernel_spec import _moe_key
    dims = {"hidden": sympy.Integer(7168), "d_ff_expert": sympy.Integer(2048), "top_k": sympy.Integer(8),
            "n_experts": sympy.Integer(256)}
    other = dict(dims, n_experts=sympy.Integer(384))
    ep8, ep4 = SimpleNamespace(tp=8, ep=8), SimpleNamespace(tp=8, ep=4)
    assert _moe_key(dims, ep8) == (7168, 2048, 8, 256, 1, 8) == _moe_key(dims, ep8)
    assert _moe_key(dims, ep4) == (7168, 2048, 8, 256, 2, 4)
    assert _moe_key(other, ep8) == (7168, 2048, 8, 384, 1, 8)
    assert _moe_key({"hidden": 1}, ep8) is None and _moe_key(dims, SimpleNamespace(tp=6, ep=4)) is None
