"""The grid's numbers, eleventh pass (issue 42): rule programs with fewer Python calls per node, a
cell's two capacities from one room, and the steady tokens once per admission policy.

* :func:`engine.language.formula_tree.compile_arrays` reads a node's number or symbol operand in
  the node's own call, calls one-argument ops directly and enters numpy's error state once per
  ``pw``: consistency tests hold every rule program of the engine (engine.deploy.rules,
  engine.serving.rules) to the tree walk it replaces (kept below as the reference: one function
  per node, a list per one-argument op), value and dtype, over arrays and over plain numbers;
  hand values of the fit rule; the unbound symbol's error.
* :func:`engine.deploy.sol.capacities` (both capacities from one room) and
  :func:`engine.deploy.sol.steady_terms` against :func:`engine.deploy.sol.capacity` bit for bit, and
  :func:`engine.deploy.sol.summarize` with its points' steady tokens given (the grid's ``admitted``)
  against the tokens it computes itself, every field.
* :func:`engine.batch.grid_eval._lane_index` by hand.
* :func:`engine.deploy.plan.points_shape` by hand and against ``np.broadcast_shapes`` (consistency,
  every mix of numbers, 1-d, 2-d and mismatched arrays, errors included).
"""
from __future__ import annotations

import operator

import numpy as np
import pytest

import engine.deploy.rules as deploy_rules
import engine.serving.rules as serving_rules
from engine.batch.grid_eval import _lane_index
from engine.deploy import Options
from engine.deploy.admission import steady_tokens
from engine.deploy.fusion_table import token_limits
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.plan import points_shape
from engine.deploy.sol import capacities, capacity, capacity_terms, steady_terms, summarize
from engine.language import formula_tree
from engine.language.formula_tree import run_arrays

from tests.deploy_helpers import structure_cache


# -- the reference: compile_arrays as it was before this pass (one function per node) -------------

def _reference(tree):
    """The tree walk before this pass: every operand through its own function, one-argument ops
    through a list, numpy's error state entered per ``pw`` branch."""
    if isinstance(tree, (int, float)):
        return lambda env: tree
    if isinstance(tree, str):
        return lambda env: env[tree]
    op, args = tree[0], tree[1:]
    if op == "pw":
        pairs = [(_reference(v), _reference(c)) for v, c in args]

        def piecewise(env):
            i = 0
            while i < len(pairs):        # single truth values first: the first true one's value alone
                c = pairs[i][1](env)
                if np.ndim(c):
                    break
                if c:
                    return pairs[i][0](env)
                i += 1
            else:
                return np.nan
            picked = [(pairs[i][0], c)] + [(v, cond(env)) for v, cond in pairs[i + 1:]]
            out = np.nan
            for value, c in picked[::-1]:
                with np.errstate(divide="ignore", invalid="ignore"):
                    out = np.where(c, value(env), out)
            return out
        return piecewise
    if op in ("rank", "rank_le", "at"):
        name, x = args[0], _reference(args[1])
        if op == "at":
            return lambda env: np.asarray(env[name])[x(env)]
        side = "right" if op == "rank_le" else "left"
        return lambda env: np.searchsorted(np.asarray(env[name]), x(env), side=side)
    parts = [_reference(a) for a in args]
    binary = {"+": operator.add, "*": operator.mul, "-": operator.sub, "/": operator.truediv,
              "cdiv": lambda a, b: -(-a // b), "min": np.minimum, "max": np.maximum, "<": np.less,
              "<=": np.less_equal, "==": np.equal, ">": np.greater, ">=": np.greater_equal,
              "!=": np.not_equal, "and": np.logical_and, "or": np.logical_or}.get(op)
    if binary is not None and len(parts) == 2:
        a, b = parts
        return lambda env: binary(a(env), b(env))
    fn = formula_tree._ARRAY_OPS[op]
    return lambda env: fn([p(env) for p in parts])


def _run_reference(program, env):
    out = dict(env)
    for name, tree in program:
        if name not in out:
            out[name] = _reference(tree)(out)
    return out


def _programs() -> list[tuple[str, list]]:
    return [(f"{module.__name__}.{name}", value) for module in (deploy_rules, serving_rules)
            for name, value in vars(module).items()
            if name.isupper() and isinstance(value, list) and value and isinstance(value[0], (list, tuple))
            and len(value[0]) == 2 and isinstance(value[0][0], str)]


def _inputs(program) -> tuple[set, set]:
    """(names the program reads and does not bind, of them the names list ops index)."""
    bound, free, lists = set(), set(), set()

    def walk(tree):
        if isinstance(tree, str):
            if tree not in bound:
                free.add(tree)
        elif isinstance(tree, list) and tree:
            if tree[0] in ("rank", "rank_le", "at"):
                lists.add(tree[1])
                walk(tree[2])
            elif tree[0] == "pw":
                for v, c in tree[1:]:
                    walk(v)
                    walk(c)
            else:
                for a in tree[1:]:
                    walk(a)
    for name, tree in program:
        walk(tree)
        bound.add(name)
    return free - lists, lists


def _env(program, seed: int, arrays: bool) -> dict:
    rng = np.random.default_rng(seed)
    names, lists = _inputs(program)
    env = {name: np.sort(rng.uniform(0, 4096, 12)) for name in lists}
    for name in sorted(names):
        if arrays:           # some zeros and negatives: every branch of a pw taken somewhere
            env[name] = np.where(rng.random(50) < 0.1, 0.0, rng.uniform(-64, 4096, 50).round())
        else:
            env[name] = int(rng.integers(0, 9)) if rng.random() < 0.5 else float(rng.uniform(0.5, 64))
    return env


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("arrays", [True, False])
def test_every_rule_program_consistency_with_the_reference_walk(arrays):
    programs = _programs()
    assert len(programs) >= 20             # the deploy and serving rules are all here
    checked = 0
    for label, program in programs:
        for seed in range(3):
            env = _env(program, seed, arrays)
            with np.errstate(all="ignore"):
                try:
                    want = _run_reference(program, env)
                except (ArithmeticError, IndexError) as e:      # a random env this program cannot take:
                    with pytest.raises(type(e)):              # the same error (numbers divided by 0)
                        run_arrays(program, env)
                    continue
                got = run_arrays(program, env)
            for name, _ in program:
                assert _same(got[name], want[name]), (label, name, seed)
            checked += 1
    assert checked >= 40


def test_fit_rule_hand_values():
    # the largest n with n x kv_dev <= room; no cache per request: max_batch; no room: 0
    env = {"room": np.array([10.0, 9.0, 2.0, -1.0, 5.0]), "kv_dev": np.array([3.0, 3.0, 3.0, 3.0, 0.0]),
           "max_batch": 4096}
    cap = run_arrays(deploy_rules.FIT, env)["cap"]
    assert cap.tolist() == [3.0, 3.0, 0.0, 0.0, 4096.0] and cap.dtype == np.float64
    # a number on the left of a node (the steady room: room x (1 - free fraction))
    assert run_arrays(deploy_rules.STEADY_ROOM, {"room": np.array([100.0]), "free_fraction": 0.25}
                      )["steady_room"].tolist() == [75.0]
    # one-argument ops: ceil and floor of the admission rule, pages of 16 tokens
    got = run_arrays(deploy_rules.ADMISSION, {"input_len": np.array([17.0]), "output_len": np.array([0.0]),
                                              "page_tokens": 16, "reserve_ratio": 0.0, "reserve_clip_tokens": 0},
                     only=("paged_tokens",))["paged_tokens"]
    assert got.tolist() == [32.0]          # a prompt of 17 tokens holds two pages


def test_unbound_symbol_message():
    for tree in ("x", ["+", "x", 1], ["-", 2, "x"], ["*", "x", "y"], ["floor", "x"]):
        with pytest.raises(KeyError, match="formula tree: symbol 'x' is not bound"):
            run_arrays([["out", tree]], {"y": 1.0})


# -- capacities from one room, and the steady tokens given ---------------------------------------

MOE = "Qwen/Qwen3-30B-A3B"


@pytest.fixture(scope="module")
def structures():
    cache = structure_cache(MOE)
    out = []
    for framework in ("vllm", "sglang"):        # two admission policies (pages, a reservation)
        gpu = find_gpu(load_gpus(), "H100")
        limits = token_limits(cache.tables.get(framework))
        s = cache.structure(ParallelConfig(tp=2), gpu.scale_up_domain, framework, gpu, (len(limits), 0),
                            Options(framework=framework))
        out.append((s, gpu))
    return out


def _lanes():
    inputs, outputs = np.array([128, 1024, 8192, 32768]), np.array([1, 256, 2048])
    return (np.tile(inputs, 2 * len(outputs)), np.tile(np.repeat(outputs, len(inputs)), 2),
            np.repeat([2.0, 1.0], len(inputs) * len(outputs)))


def test_capacities_consistency_with_capacity(structures):
    points = _lanes()
    for s, gpu in structures:
        usable = gpu.hbm_bytes * 0.9
        terms = capacity_terms(s, *points)
        tokens = steady_tokens(s.admission, points[0], points[1])
        steady = steady_terms(s, *points, tokens=tokens)
        assert all(_same(a, b) for a, b in zip(steady, steady_terms(s, *points)))
        worst, served = capacities(s, usable, terms, steady)
        assert _same(worst, capacity(s, usable, *points, terms=terms))
        assert _same(served, capacity(s, usable, *points, terms=terms, steady=True))
        assert _same(served, capacity(s, usable, *points, steady=True))
        assert (served >= worst).all() and (worst[points[0] == 32768] < worst[points[0] == 128]).all()


def test_summarize_with_admitted_tokens_consistency(structures):
    rng = np.random.default_rng(7)
    inp, out = rng.choice([128, 1024, 8192], 60), rng.choice([1, 256, 2048], 60)
    kv_bytes, batch = rng.choice([1.0, 2.0], 60), rng.choice([1, 4, 32, 128], 60)
    gpus = load_gpus()
    group = [find_gpu(gpus, "H100"), find_gpu(gpus, "H200")]
    index = rng.integers(0, 2, 60)
    for s, _ in structures:
        assert s.admission.page_tokens > 1 or s.admission.reserve_ratio > 0    # a policy with numbers
        want = summarize(s, group, index, kv_bytes, batch, inp, out)
        got = summarize(s, group, index, kv_bytes, batch, inp, out, admitted=steady_tokens(s.admission, inp, out))
        assert want.keys() == got.keys()
        for name, value in want.items():
            if name == "phases":
                for phase in value:
                    assert all(_same(value[phase][k], got[name][phase][k]) for k in value[phase]), phase
            else:
                assert _same(value, got[name]), name


def test_summarize_reads_the_admitted_tokens(structures):
    s, gpu = structures[0]
    inp, out = np.array([1024, 8192]), np.array([256, 256])
    given = np.array([5000.0, 9000.0])             # not the policy's: the ones given are read
    got = summarize(s, [gpu], np.zeros(2, dtype=int), np.array([2.0, 2.0]), np.array([8, 8]), inp, out,
                    admitted=given)
    assert got["kv_steady_tokens_per_request"].tolist() == [5000.0, 9000.0]
    assert _same(got["kv_bytes_per_request_steady_per_gpu"], np.asarray(s.kv_device_fn(given, np.array([2.0, 2.0])),
                                                                         dtype=float))


def test_lane_index_hand_values():
    # lanes: output after output, each over the prompts in their given (unsorted) order
    place = _lane_index([1024, 128, 8192], [2048, 1])
    got = place(np.array([128, 8192, 1024, 128]), np.array([2048, 2048, 1, 1]))
    assert got.tolist() == [0 * 3 + 1, 0 * 3 + 2, 1 * 3 + 0, 1 * 3 + 1]


def test_points_shape_hand_values_and_consistency_with_numpy():
    n = np.arange(5.0)
    assert points_shape((n, 1.0, n)) == (5,)
    assert points_shape((2, 3.0, np.float64(4))) == ()
    assert points_shape((np.ones(1), n)) == (5,)            # a length-1 array broadcasts
    values = [1.0, 7, np.float64(2), np.ones(1), np.ones(5), np.ones(3), np.ones((2, 5)), np.ones((5, 1)),
              np.ones(0), np.array(3.0)]
    rng = np.random.default_rng(3)
    for _ in range(400):
        picked = [values[i] for i in rng.integers(0, len(values), rng.integers(1, 4))]
        try:
            want = np.broadcast_shapes(*(np.shape(v) for v in picked))
        except ValueError:
            with pytest.raises(ValueError):
                points_shape(picked)
            continue
        assert points_shape(picked) == want, [np.shape(v) for v in picked]
