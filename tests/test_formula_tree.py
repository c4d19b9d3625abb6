"""Formula trees (engine/language/formula_tree.py) and their browser evaluator (static/js/formula.js).

Hand cases first (values worked out here), then a consistency test on the engine's own expressions:
every step formula of DeepSeek-V3's decode and prefill programs (TP8 EP8 DP-attention 8 on H100, SGLang fusions: Min,
Max, ceiling, rationals, the MoE expected-coverage power) evaluates the same through sympy, through
the tree in Python and through the tree in Chromium.
"""
from __future__ import annotations

import math

import pytest
import sympy

from engine.deploy.step_functions import ARGS
from engine.deploy.step_totals import step_totals
from engine.language import formula_tree as ft
from site_builder.sources import REPO
from tests.deploy_helpers import make_plan
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its Chromium page twice.
pytestmark = pytest.mark.xdist_group("formula_tree")

b, L = sympy.symbols("batch length", positive=True)

# (expression, environment, value by hand)
HAND = [
    (sympy.ceiling(b / 8), {"batch": 17}, 3),                         # 17 requests over 8 ranks: 3 on the fullest
    (sympy.floor(b / 8), {"batch": 17}, 2),
    (sympy.Min(L, 4096) * 2, {"length": 131072}, 8192),               # a sliding window's cache
    (sympy.Max(b, 3) + sympy.Rational(1, 3), {"batch": 2}, 3 + 1 / 3),
    (sympy.Mod(b, 4), {"batch": 10}, 2),
    (256 * (1 - (1 - sympy.Rational(8, 256)) ** b), {"batch": 1}, 8),  # expected experts hit by one token: top-k
    (sympy.Piecewise((b, b < 4), (4, True)), {"batch": 9}, 4),
    (sympy.Piecewise((b, b < 4), (4, True)), {"batch": 2}, 2),
    (sympy.log(sympy.E ** 2 * b), {"batch": 1}, 2),
]


@pytest.mark.parametrize("expr,env,value", HAND)
def test_hand_values(expr, env, value):
    assert ft.evaluate(ft.to_tree(expr), env) == pytest.approx(value, rel=1e-15)
    assert ft.free_names(ft.to_tree(expr)) == {s.name for s in expr.free_symbols}


def test_rationals_stay_exact_and_integers_stay_integers():
    assert ft.to_tree(sympy.Rational(7, 3)) == ["/", 7, 3]
    assert ft.to_tree(sympy.Integer(2) ** 40) == 1 << 40
    assert ft.to_tree(3 * b) == ["*", 3, "batch"]


def test_unsupported_node_is_named():
    with pytest.raises(TypeError, match="sin"):
        ft.to_tree(sympy.sin(b))
    with pytest.raises(KeyError, match="length"):
        ft.evaluate(ft.to_tree(L + 1), {"batch": 1})


def _engine_formulas() -> list:
    """Every step total (flops, bytes, comm bytes, weight bytes) of DeepSeek-V3's programs."""
    plan = make_plan("DeepSeek-V3", "H100", "sglang", tp=8, ep=8, dp_attn=8)
    out = []
    for phase in ("prefill", "decode"):
        for step in plan.structure.programs[phase].steps:
            out.extend(e for e in step_totals(step) if not sympy.sympify(e).is_number)
    return out


POINTS = [(1, 1, 4096, 2), (37, 1, 8191, 1), (3, 8192, 8192, 2)]   # batch, seq, ctx, kv_bytes


def test_engine_formulas_consistency_python():
    """Consistency (engine vs itself): tree evaluation equals sympy's at off-grid points."""
    formulas = _engine_formulas()
    assert len(formulas) > 50
    names = [a.name for a in ARGS]
    for point in POINTS:
        env = dict(zip(names, point))
        for expr in formulas:
            want = float(expr.subs({a: v for a, v in zip(ARGS, point)}))
            assert math.isclose(ft.evaluate(ft.to_tree(expr), env), want, rel_tol=1e-12), expr


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811
    tab = _open(browser, production=False)
    tab.page.set_content("<p>formula</p>")
    tab.page.add_script_tag(path=str(REPO / "static" / "js" / "formula.js"))
    yield tab
    tab.context.close()


def test_browser_equals_python(page):
    """Consistency: formula.js gives Python's tree values (hand cases and DeepSeek-V3's formulas)."""
    trees = [ft.to_tree(e) for e, _, _ in HAND]
    envs = [env for _, env, _ in HAND]
    names = [a.name for a in ARGS]
    for expr in _engine_formulas():
        for point in POINTS:
            trees.append(ft.to_tree(expr))
            envs.append(dict(zip(names, point)))
    shown = page.page.evaluate("c => c.map(([t, e]) => window.archFormula.evaluate(t, e))",
                               [list(p) for p in zip(trees, envs)])
    for got, tree, env in zip(shown, trees, envs):
        assert math.isclose(got, ft.evaluate(tree, env), rel_tol=1e-12), (tree, env)
    assert not page.errors, page.errors


# -- selection rules: the grid's batches (engine/batch/grid_eval.py GRID_BATCHES) --------------------

#: (worst, steady) capacities -> the batches of the grid [1, 2, 4, 8, 16, 32, 64] kept, by hand: the
#: batches up to the larger capacity, then that capacity if it is >= 1, below 64 and not a grid batch
BATCH_CASES = [((0, 0), [1]),                        # nothing fits: batch 1 (its row says by how much)
               ((3, 5), [1, 2, 4, 5]),               # 5 is below 64 and no grid batch: added
               ((8, 3), [1, 2, 4, 8]),               # the larger capacity is a grid batch: once
               ((1, 0), [1]),
               ((64, 10), [1, 2, 4, 8, 16, 32, 64]),
               ((100, 200), [1, 2, 4, 8, 16, 32, 64])]   # past the largest batch: not a row
GRID = [1, 2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize("caps,kept", BATCH_CASES)
def test_grid_batches_by_hand(caps, kept):
    from engine.batch.grid_eval import grid_batches
    got = grid_batches(GRID, caps)
    assert got == kept and all(type(b) is int for b in got)


def test_browser_selects_the_same_batches(page):
    """formula.js ``select`` reads the build's rule (GRID_BATCHES, as index.json ships it) and keeps
    the hand-derived batches."""
    from engine.deploy.rules import GRID_BATCHES
    shown = page.page.evaluate("([rule, grid, cases]) => cases.map(c => window.archFormula.select(rule, grid,"
                               " {worst: c[0], steady: c[1]}))", [GRID_BATCHES, GRID, [c for c, _ in BATCH_CASES]])
    assert shown == [k for _, k in BATCH_CASES]


# -- the lookup node: a measured table's time at a point (engine.deploy.measured.node_lookup) ---------

#: A 2 x 3 all-reduce table, gpus [2, 8] x bytes [1e3, 1e4, 1e5], µs [[10, 30, 100], [20, 80, 400]]
#: (3 bytes values: a lookup reading the seconds in the wrong axis order reads other corners).
LOOKUP_TABLE = {"axes": ["gpus", "bytes"], "values": [[2, 8], [1e3, 1e4, 1e5]],
                "us": [10, 30, 100, 20, 80, 400], "name": "all_reduce-nccl (hand)",
                "path": "hand"}
# (point, µs by hand): log-space interpolation; outside the range, the edge span's power law clipped
# to the roofline's (an all-reduce: bytes x 2(g-1)/g)
LOOKUP_HAND = [
    ((2, 1e4), 30.0),                               # on the grid: the measured number
    ((4, 1e4), math.sqrt(30 * 80)),                 # gpus halfway in log (ln 2 / ln 4): sqrt(30 x 80) = 48.99
    ((2, 10 ** 3.5), math.sqrt(10 * 30)),           # bytes halfway in log: 17.32 (linear in bytes: 16.5)
    ((4, 10 ** 4.5), (30 * 100 * 80 * 400) ** 0.25),  # both halfway: the corners' geometric mean, 89.9
    ((2, 3e5), 300.0),                              # above: the last span's slope ln(100/30) / ln 10 = 0.52 (< the
                                                    # roof's 1): 100 x 3^0.523 = 177.6 µs, 1.7e9 per s, above the
                                                    # grid's best rate ((2, 1e5): 1e5 x 2(2-1)/2 in 100 µs = 1e9;
                                                    # (8, 1e5) 4.4e8; (2, 1e4) 3.3e8): the floor 3e5 / 1e9 s
    ((2, 1e2), 10 / 3),                             # below: the first span's slope ln 3 / ln 10 over one decade down
    ((32, 1e4), 80 * 1.75),                         # gpus past 8: the edge span's slope ln(8/3) / ln 4 = 0.71, clipped
                                                    # to the roof's ln(1.75) / ln 4 = 0.40 (2(g-1)/g: 1 at 2, 1.75 at
                                                    # 8), over ln 4: x 1.75 = 140 µs
]


def _lookup_table(**extra):
    from engine.deploy.measured import roof_expr
    return dict(LOOKUP_TABLE, roof=ft.to_tree(roof_expr(("all_reduce",))), **extra)


#: The same table carrying a rate of its own (a distilled part carries its whole table's
#: engine.deploy.measured.peak_rate, which its own few grid points may not reach): 2e9 per s here,
#: twice its grid's 1e9. Outside the range the time is at least the roofline's work over that rate:
#: (point, µs by hand).
LOOKUP_RATE = 2e9
LOOKUP_RATE_HAND = [
    ((2, 1e4), 30.0),                   # inside: the measurement, never the floor
    ((2, 1e6), 1e6 / 2e9 * 1e6),        # the power law's 100 x 10^0.523 = 333.3 µs: the floor 500 µs
    ((2, 3e5), 100 * 3 ** (math.log(100 / 30) / math.log(10))),   # 177.6 µs against the floor 150 µs
    ((2, 1e2), 10 / 3),                 # below the range the floor is 0.05 µs: the power law stands
    ((32, 1e4), 80 * 1.75),             # 140 µs against 1e4 x 2 x 31/32 / 2e9 = 9.7 µs: the power law
]


def test_lookup_node_floor_of_the_tables_best_rate_python():
    """A lookup node whose table carries its whole table's peak rate (a distilled part in a page's
    trees) applies the out-of-range floor; hand values above."""
    from engine.deploy.measured import node_lookup
    lookup = node_lookup({0: _lookup_table(rate=LOOKUP_RATE)})
    for (g, size), us in LOOKUP_RATE_HAND:
        assert math.isclose(ft.evaluate(["lookup", 0, g, size], {}, lookup) * 1e6, us, rel_tol=1e-12), (g, size)


def test_lookup_node_floor_of_the_tables_best_rate_in_the_browser(page):
    """formula.js applies the same floor from the table's ``rate`` (the same hand values)."""
    trees = [["lookup", 0, g, size] for (g, size), _ in LOOKUP_RATE_HAND]
    shown = page.page.evaluate("([ts, tables]) => ts.map(t => window.archFormula.evaluate(t, {}, tables))",
                               [trees, {"0": _lookup_table(rate=LOOKUP_RATE)}])
    for got, ((g, size), us) in zip(shown, LOOKUP_RATE_HAND):
        assert math.isclose(got * 1e6, us, rel_tol=1e-12), (g, size, got * 1e6, us)
    assert not page.errors, page.errors


def test_lookup_node_hand_values_python():
    """The lookup node's meaning (engine.deploy.measured.node_lookup) at hand-computed points."""
    from engine.deploy.measured import node_lookup
    lookup = node_lookup({0: _lookup_table()})
    for (g, size), us in LOOKUP_HAND:
        tree = ["lookup", 0, ["*", g, 1], size]        # coordinates are trees too
        assert math.isclose(ft.evaluate(tree, {}, lookup) * 1e6, us, rel_tol=1e-12), (g, size)
    assert ft.free_names(["lookup", 0, "batch", ["*", "seq", 2]]) == {"batch", "seq"}     # the ref is no symbol
    with pytest.raises(ValueError, match="lookup"):
        ft.evaluate(["lookup", 0, 2, 1e4], {})


def test_lookup_node_hand_values_in_the_browser(page):
    """formula.js evaluates the lookup node generically (the table travels with the tree's caller): the
    same hand values. Kills an interpolation in linear space, on the wrong axis, or a seconds array read
    in the wrong axis order (benchmarks/mutants.py)."""
    trees = [["lookup", 0, g, size] for (g, size), _ in LOOKUP_HAND]
    shown = page.page.evaluate("([ts, tables]) => ts.map(t => window.archFormula.evaluate(t, {}, tables))",
                               [trees, {"0": _lookup_table()}])
    for got, ((g, size), us) in zip(shown, LOOKUP_HAND):
        assert math.isclose(got * 1e6, us, rel_tol=1e-12), (g, size, got * 1e6, us)
    # which tables an evaluation read (the per-op "measured" flag): a piecewise branch not taken reads none
    read = page.page.evaluate("""tables => [1, 0].map(x => { const r = [];
        window.archFormula.evaluate(['pw', [['lookup', 0, 2, 1e4], ['>', 'x', 0]], [0, 1]], {x: x}, tables, r); return r; })""",
                              {"0": _lookup_table()})
    assert read == [[0], []]
    assert not page.errors, page.errors


# -- rule programs (issue 37): list nodes, run_arrays, formula.js run ------------------------------

#: [name, tree] bindings over a list "limits" and scalars; each value worked by hand below
PROGRAM = [["per_rank", ["cdiv", "batch", "dp"]],                 # ceil(37 / 8) = 5
           ["spare", ["-", ["*", "per_rank", "dp"], "batch"]],   # 5 x 8 - 37 = 3
           ["regime", ["rank", "limits", "tokens"]],               # limits < 256: 64, 128 -> 2 (256 is not < 256)
           ["regime_le", ["rank_le", "limits", "tokens"]],         # limits <= 256: 64, 128, 256 -> 3
           ["picked", ["at", "limits", ["-", "regime_le", 1]]],    # limits[2] = 256
           ["fill", ["pw", [["+", "spare", 100], [">", "pp", 1]], ["spare", 1]]]]   # pp = 1: 3
PROGRAM_ENV = {"batch": 37, "dp": 8, "tokens": 256, "limits": [64, 128, 256, 512], "pp": 1}
PROGRAM_HAND = {"per_rank": 5, "spare": 3, "regime": 2, "regime_le": 3, "picked": 256, "fill": 3}


def test_rule_program_hand_values():
    """Each binding of PROGRAM at PROGRAM_ENV, by hand; the scalar reference (``evaluate``) and the
    numpy evaluation (``run_arrays``) agree with it."""
    out = ft.run_arrays(PROGRAM, PROGRAM_ENV)
    scope = dict(PROGRAM_ENV)
    for name, tree in PROGRAM:
        scope[name] = ft.evaluate(tree, scope)
        assert scope[name] == PROGRAM_HAND[name] == out[name], name


def test_rule_program_over_arrays_keeps_integers_and_reads_only_the_branch_taken():
    """Over arrays: ceil(batch / dp) of integers stays an integer array (-(-b // d), numpy's), a
    per-point ``pw`` picks per point, and a ``pw`` on one truth value evaluates only its branch (the
    pipeline's fill time is bound only when pp > 1)."""
    import numpy as np
    out = ft.run_arrays(PROGRAM, {**PROGRAM_ENV, "batch": np.array([1, 8, 9, 37])})
    assert out["per_rank"].dtype.kind == "i" and out["per_rank"].tolist() == [1, 1, 2, 5]
    assert out["fill"].tolist() == [7, 0, 7, 3]                      # spare: 8 - 1, 0, 16 - 9, 3
    per_point = [["x", ["pw", [1.5, [">", "b", 2]], [-1.5, 1]]]]
    assert ft.run_arrays(per_point, {"b": np.array([1, 3])})["x"].tolist() == [-1.5, 1.5]
    lazy = [["ttft", ["pw", [["+", "prefill", "fill"], [">", "pp", 1]], ["prefill", 1]]]]
    assert ft.run_arrays(lazy, {"prefill": 2.0, "pp": 1})["ttft"] == 2.0      # "fill" never read


def test_run_arrays_only_evaluates_what_is_asked_and_keeps_given_bindings():
    """``only``: the bindings asked and those they read (an unbound input of a later one is never
    read); a binding the caller gives is the caller's."""
    out = ft.run_arrays(PROGRAM, {"batch": 9, "dp": 8}, only=("spare",))
    assert (out["per_rank"], out["spare"]) == (2, 7) and "regime" not in out
    assert ft.run_arrays(PROGRAM, {"batch": 9, "dp": 8, "per_rank": 4}, only=("spare",))["spare"] == 23


def test_browser_runs_rule_programs_as_python(page):
    """formula.js ``run`` gives PROGRAM's hand values; ``fold`` sums and maxes a list as the tree
    [op, ...values] (empty: 0 and -Infinity)."""
    got = page.page.evaluate("([p, e]) => window.archFormula.run(p, e)", [PROGRAM, PROGRAM_ENV])
    assert {k: got[k] for k in PROGRAM_HAND} == PROGRAM_HAND
    folds = page.page.evaluate("() => [archFormula.fold('+', [0.1, 0.2, 0.3]), archFormula.fold('max', [1, 5, 2]),"
                               " archFormula.fold('+', []), archFormula.fold('max', []) === -Infinity]")
    assert folds == [(0.1 + 0.2) + 0.3, 5, 0, True]
