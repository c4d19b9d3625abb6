"""The grid's fifth-pass memos and batched paths (issue 42) never merge inputs that differ in what
they read, and give the values written here by hand.

* ``kernel_spec._numeric_dims`` (a step's numeric dims by value), ``measured.distil``'s constants by
  point, ``measured_tree._tree`` (a coordinate's formula tree by expression), ``measured._point_text``
  (a per-op row's expected-time texts by table, point, outside? and shape), ``measured.kernel_steps``
  (which steps have a kernel class, by program, member ops and phase), ``grid_eval.grid_batches``
  (the batch rule by capacities and their types);
* ``measured.finish``'s point-major texts (hand-made lookups, the order written out);
* ``plan.expected_phase_times_many`` at a group's distinct points and ``op_rows.op_rows_columns_many``
  (every table's lookups resolved together): consistency tests, each answer compared with the
  same call made alone (hand values of the rule itself: tests/test_measured.py).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import sympy

from engine.batch.grid_eval import grid_batches
from engine.deploy import kernel_spec, measured, measured_tree
from engine.deploy.kernel_spec import kernel_steps
from engine.deploy.measured_tables import Table, load_measured
from engine.deploy.measured_tree import distil
from engine.deploy.op_rows import op_rows_columns, op_rows_columns_many
from engine.deploy.device_program import step_with
from engine.deploy.plan import expected_phase_times, expected_phase_times_many
from engine.deploy.structure import Scenario
from engine.language import symbols
from tests.deploy_helpers import finish_one_ask, make_plan

BATCH, SEQ = symbols.dim(symbols.BATCH), symbols.dim(symbols.SEQ)


def _table(name="bf16", path="gpus/measured/x/gemm-bf16.yaml") -> Table:
    """A hand-made 3-axis GEMM table: m 1, 16, 256, 4096; n 1024, 4096; k 1024, 4096."""
    values = (np.array([1.0, 16.0, 256.0, 4096.0]), np.array([1024.0, 4096.0]), np.array([1024.0, 4096.0]))
    seconds = np.arange(1, 17, dtype=float).reshape(4, 2, 2) * 1e-6
    return Table("gemm", name, "H100", "vllm", "0.1", ("m", "n", "k"), values, seconds, path, "pkg 1.0")


def test_numeric_dims_by_value():
    """The numbers among a step's dims, in order; dims differing in one number, or in whether a
    position holds a number, get their own answer."""
    a = {"batch": BATCH, "hidden": sympy.Integer(4096), "heads": sympy.Integer(32)}
    b = {"batch": BATCH, "hidden": sympy.Integer(2048), "heads": sympy.Integer(32)}
    c = {"batch": BATCH, "hidden": 2 * BATCH, "heads": sympy.Integer(32)}
    assert kernel_spec._numeric_dims(a) == (4096, 32)
    assert kernel_spec._numeric_dims(b) == (2048, 32)
    assert kernel_spec._numeric_dims(c) == (32,)
    assert kernel_spec._numeric_dims({"n": 7, "m": BATCH}) == (7,)       # a Python int is a number


def test_distil_constants_by_point():
    """A lookup's part keeps, on a numeric axis, the two measured values of the span the number
    lies in (the whole axis where the coordinate is symbolic); points differing in one constant
    get their own part: m = 100 lies in 16..256, m = 300 in 256..4096, a symbolic m keeps all four."""
    t = _table()
    k = sympy.Integer(2048)
    low = distil(t, (sympy.Integer(100), BATCH, k))
    high = distil(t, (sympy.Integer(300), BATCH, k))
    free = distil(t, (BATCH, BATCH, k))
    assert low.values[0].tolist() == [16.0, 256.0]
    assert high.values[0].tolist() == [256.0, 4096.0]
    assert free.values[0].tolist() == [1.0, 16.0, 256.0, 4096.0]
    assert low.values[1].tolist() == [1024.0, 4096.0] and low.values[2].tolist() == [1024.0, 4096.0]
    # the seconds follow the cut: m rows 1 and 2 of the 4 x 2 x 2 grid (1..16 us, row-major)
    assert (low.seconds * 1e6).round().tolist() == [[[5, 6], [7, 8]], [[9, 10], [11, 12]]]


def test_tree_memo_keeps_integer_and_float_apart():
    """sympy's Integer(2) and Float(2.0) hash alike but are different expressions: their trees
    (2 and 2.0, two JSON texts) are never each other's."""
    assert repr(measured_tree._tree(sympy.Integer(2))) == "2"
    assert repr(measured_tree._tree(sympy.Float(2.0))) == "2.0"
    assert repr(measured_tree._tree(sympy.Integer(2))) == "2"
    assert measured_tree._tree(BATCH * SEQ) == ["*", "batch", "seq"]
    assert measured_tree._tree(sympy.Eq(SEQ, 1)) == ["==", "seq", 1]


def test_point_text_by_table_point_outside_and_shape():
    """The per-op row's source and nearest-measured texts, by hand; another table, point, outside
    flag or MoE shape each gives its own text."""
    t, other = _table(), _table("fp8", "gpus/measured/x/gemm-fp8.yaml")
    src, near = measured._point_text(t, (64.0, 4096.0, 2048.0), False, "")
    assert src == "gemm-bf16 vllm 0.1 (pkg 1.0) at m=64 n=4096 k=2048"
    assert near == "m 16..256 n 4096 k 1024..4096"
    assert measured._point_text(t, (64.0, 4096.0, 2048.0), True, "")[0] == \
        "gemm-bf16 vllm 0.1 (pkg 1.0) at m=64 n=4096 k=2048, extrapolated"
    assert measured._point_text(other, (64.0, 4096.0, 2048.0), False, "")[0] == \
        "gemm-fp8 vllm 0.1 (pkg 1.0) at m=64 n=4096 k=2048"
    assert measured._point_text(t, (8.0, 4096.0, 2048.0), False, "")[1] == "m 1..16 n 4096 k 1024..4096"
    assert measured._point_text(t, (64.0, 4096.0, 2048.0), False, " top_k=8") == \
        ("gemm-bf16 vllm 0.1 (pkg 1.0) at m=64 n=4096 k=2048 top_k=8", "m 16..256 n 4096 k 1024..4096 top_k=8")


def test_finish_texts_point_major():
    """Two steps at two points, the second step covered by one table at the second point only:
    the texts run point by point, each point's steps in turn (step 0 then 1 at point 0, then at
    point 1), and the covered one's time is the table's (3 us x 2 calls, above its 1 us bound)."""
    t = _table()
    times, covered, text = finish_one_ask(t, 2, 1, 3e-6, False, 2.0)
    fallback = f"bound / {measured.DEFAULT_EFFICIENCY:g}"
    assert text["src"] == [fallback, fallback, fallback, "gemm-bf16 vllm 0.1 (pkg 1.0) at m=64 n=4096 k=2048"]
    assert text["table"] == ["", "", "", t.path]
    assert text["nearest"] == ["", "", "", "m 16..256 n 4096 k 1024..4096"]
    assert covered.tolist() == [False, False, False, True]
    assert times[3] == pytest.approx(6e-6) and times[0] == pytest.approx(1e-6 / measured.DEFAULT_EFFICIENCY)


def test_kernel_steps_by_program_members_and_phase():
    """A fused ``flash_mla`` step is decode MLA attention in decode and no kernel in prefill; a
    ``linear`` compute step is a GEMM in both; a norm is none. The answer is the program's, the
    member ops' and the phase's: two programs, or two phases of one, never share one."""
    base = make_plan("Llama-3.1-8B", "H100", "sglang", None, "bf16", tp=2)
    o_proj = next(st for st in base.structure.programs["decode"].steps if st.uid.endswith("self_attn/o_proj"))
    mla = step_with(o_proj, op="flash_mla", kind="fused")
    norm = step_with(o_proj, op="rmsnorm")
    program = SimpleNamespace(steps=[o_proj, mla, norm])
    members: dict = {}
    assert kernel_steps(program, members, "decode") == [True, True, False]
    assert kernel_steps(program, members, "prefill") == [True, False, False]
    other = SimpleNamespace(steps=[norm, o_proj])
    assert kernel_steps(other, members, "decode") == [False, True]


def test_grid_batches_by_capacities_and_their_types():
    """The grid's batches up to the larger capacity, plus that capacity below the largest batch
    (hand values); capacities differing only in type or by a fraction get the rule's own answer
    (a whole float is written as an int by the rule, a fraction kept)."""
    batches = [1, 2, 4, 8, 16]
    assert grid_batches(batches, (5, 3)) == [1, 2, 4, 5]
    assert grid_batches(batches, (3, 12)) == [1, 2, 4, 8, 12]
    assert grid_batches(batches, (0, 0)) == [1]
    assert grid_batches(batches, (5.5, 3.0)) == [1, 2, 4, 5.5]
    got = grid_batches(batches, (5.0, 3.0))
    assert got == [1, 2, 4, 5] and isinstance(got[-1], int)
    again = grid_batches(batches, (5, 3))
    again.append(99)                                  # a caller's list is its own
    assert grid_batches(batches, (5, 3)) == [1, 2, 4, 5]
    assert grid_batches([1, 2, 4], (5, 3)) == [1, 2, 4]       # other batches: another answer


@pytest.fixture(scope="module")
def llama_plan():
    return make_plan("Llama-3.1-8B", "H100", "vllm", None, "bf16", tp=2)


def test_expected_times_at_repeated_points_consistency(llama_plan):
    """Consistency test: a call whose points repeat (the group evaluated at its distinct points and
    spread back) gives every point the floats of that point asked alone."""
    tables = load_measured(gpu="H100", framework="vllm")
    batch, inp, out = np.array([1, 64, 1, 64, 8]), np.array([4096, 4096, 4096, 4096, 1024]), np.full(5, 1024)
    together = expected_phase_times(llama_plan, batch, inp, out, tables)
    for i in range(5):
        alone = expected_phase_times(llama_plan, batch[i:i + 1], inp[i:i + 1], out[i:i + 1], tables)
        for name, value in alone.items():
            assert together[name][i] == value[0], (name, i)
    assert together["prefill"][0] == together["prefill"][2] and together["decode"][1] == together["decode"][3]
    many = expected_phase_times_many([(llama_plan, batch, inp, out, tables), (llama_plan, batch[:1], inp[:1],
                                                                              out[:1], tables)])
    assert all(many[1][name][0] == together[name][0] for name in together)


def test_op_rows_many_consistency(llama_plan):
    """Consistency test: the per-op tables of several plans resolved together are each the table of
    its own call (every column, floats and texts alike)."""
    tables = load_measured(gpu="H100", framework="vllm")
    points = [Scenario(1, 4096, 1024), Scenario(64, 4096, 1024)]
    fp8 = make_plan("Llama-3.1-8B", "H100", "vllm", None, "fp8", tp=2)
    asked = [(llama_plan, "decode", points, tables), (llama_plan, "prefill", points, tables),
             (fp8, "decode", points[:1], tables)]
    for (plan, phase, pts, tabs), got in zip(asked, op_rows_columns_many(asked)):
        alone = op_rows_columns(plan, phase, pts, tables=tabs)
        assert got.keys() == alone.keys()
        for name in alone:
            assert got[name] == alone[name], name
    assert any(op_rows_columns(llama_plan, "decode", points, tables=tables)["measured"])
