"""The in-process estimate's shortcuts (issue 42, seventh pass): each gives what the plain
computation gives, and a planted stale case is recomputed.

* the measured tables of a point (engine.deploy.measured_tables.shared_measured): one dict per
  content, trusted on the tree's stat only once it has settled (engine.language.filememo.StampMemo);
  an edit that keeps a table's size and mtime is seen, settled or not; a new table, a removed one
  and a planted link are seen;
* a deployment's per-op rows are made on first read, the same rows as made with the summary;
* a plan's formulas (symbolic placement, fusion, weight formula) are made on first read, the same
  objects' values as a structure built with both placements at once;
* the legality check substitutes only the dims an axis reads (legality._relevant), the window's
  Min once per (length, window), request-size functions once per expression, the measured
  coordinates compiled as step functions are: the same values.
"""
from __future__ import annotations

import os
import pickle
import time

import numpy as np
import pytest
import sympy

from engine.deploy import Options, Scenario, plan
from engine.deploy import measured_tables
from engine.deploy.measured_tables import load_measured, shared_measured
from engine.deploy.op_rows import op_rows
from engine.deploy.planner import build_structure, place
from engine.deploy.structure import PHASES, tokens_per_device
from engine.language import filememo, kv, symbols
from tests.deploy_helpers import GPUS, TABLES, make_plan
from tests.file_helpers import same_stat_edit
from tests.test_measured import write_table

SCENARIO = Scenario(batch=3, input_len=2000, output_len=100)


# -- the measured tables, trusted on a settled stat ---------------------------------------------------

def _tiny_root(tmp_path):
    root = tmp_path / "gpus" / "measured"
    path = write_table(root, [[10, 100], [20, 400]])
    return root, path


def _us(tables, point=(2, 1000)) -> float:
    """The table's measured µs at a grid point (its seconds, read directly)."""
    t = tables[("H100", "nccl", "all_reduce", "nccl")]
    return float(t.seconds[t.values[0].tolist().index(point[0]), t.values[1].tolist().index(point[1])]) * 1e6


def _after_ctime_tick(path, outside) -> None:
    """Return once a change made now gets a ctime other than ``path``'s (the file system's
    timestamp tick has passed): the edit a test makes next is then a change a stat can see. The
    probe file lives in ``outside``, a folder outside the stamped tree."""
    probe = outside / ".tick"
    probe.write_bytes(b"")
    deadline = time.monotonic() + 10
    while os.stat(probe).st_ctime_ns <= os.stat(path).st_ctime_ns:
        assert time.monotonic() < deadline, "the file system's clock did not advance"
        os.utime(probe)
    probe.unlink()


def test_settled_tables_are_one_dict_and_a_same_stat_edit_is_seen(tmp_path, monkeypatch):
    root, path = _tiny_root(tmp_path)
    # the tree looks settled: the clock reads 10 s ahead of the files' times
    monkeypatch.setattr(measured_tables._STAMPS, "clock", lambda: time.time() + 10)
    first = shared_measured(root, "H100", "nccl")
    assert ("measured", str(root), "H100", "nccl") in measured_tables._STAMPS._values    # stamped
    assert shared_measured(root, "H100", "nccl") is first           # trusted on the stamp: no read
    assert load_measured(root, gpu="H100", framework="nccl") == first
    assert load_measured(root, gpu="H100", framework="nccl") is not first   # callers get their own dict
    assert _us(first) == pytest.approx(10)
    _after_ctime_tick(path, tmp_path)
    same_stat_edit(path, "- - 10\n", "- - 70\n")                     # same size, same mtime
    edited = shared_measured(root, "H100", "nccl")
    assert edited is not first and _us(edited) == pytest.approx(70)
    # a table added to the GPU's folder, then one removed: each seen
    _after_ctime_tick(path, tmp_path)
    write_table(root, [[10, 100], [20, 400]], framework="vllm", variant="custom_eager", version="0.11.0")
    added = root / "h100" / "vllm-0.11.0" / "all_reduce-custom_eager.yaml"
    assert ("H100", "vllm", "all_reduce", "custom_eager") in shared_measured(root, "H100", "vllm")
    _after_ctime_tick(added.parent, tmp_path)      # (the faked clock: the real rule would not stamp yet)
    added.unlink()
    assert ("H100", "vllm", "all_reduce", "custom_eager") not in shared_measured(root, "H100", "vllm")


def test_a_racy_edit_is_seen_and_a_planted_link_refused(tmp_path, monkeypatch):
    """Within SETTLED_S of the files' last change the stamp is not trusted: an edit in the same
    timestamp tick as the load (same size, mtime and, possibly, ctime) is still seen; a link planted
    under another GPU's folder is refused as without the memo."""
    root, path = _tiny_root(tmp_path)
    # the load begins the moment the table changed (however slow the host is)
    monkeypatch.setattr(measured_tables._STAMPS, "clock", lambda: os.stat(path).st_ctime_ns / 1e9)
    first = shared_measured(root, "H100", "nccl")
    assert ("measured", str(root), "H100", "nccl") not in measured_tables._STAMPS._values
    same_stat_edit(path, "- - 10\n", "- - 70\n")
    assert _us(shared_measured(root, "H100", "nccl")) == pytest.approx(70)
    assert _us(first) == pytest.approx(10)                           # what a caller holds stays
    other = root / "b200" / "nccl-2.29.2"
    other.mkdir(parents=True)
    (other / "all_reduce-nccl.yaml").symlink_to(path)
    with pytest.raises(Exception, match="symbolic link"):
        shared_measured(root, "H100", "nccl")


def test_stamp_memo_keeps_nothing_for_a_recent_or_a_missing_file(tmp_path):
    """A StampMemo by hand: a value read from files changed within SETTLED_S, or from a file that
    is gone when stamped, is returned but not kept (the loader runs again)."""
    path = tmp_path / "a.txt"
    path.write_text("1")
    memo, calls = filememo.StampMemo(clock=lambda: os.stat(path).st_ctime_ns / 1e9), []    # just changed

    def load(files):
        calls.append(1)
        return len(calls), files
    assert memo.get(("h",), tmp_path, lambda: load([path])) == 1
    assert memo.get(("h",), tmp_path, lambda: load([path])) == 2        # recent: not kept
    memo.clock = lambda: time.time() + 10
    assert memo.get(("h",), tmp_path, lambda: load([path])) == 3        # settled: kept
    assert memo.get(("h",), tmp_path, lambda: load([path])) == 3
    assert memo.get(("g",), tmp_path, lambda: load([tmp_path / "gone"])) == 4
    assert memo.get(("g",), tmp_path, lambda: load([tmp_path / "gone"])) == 5


# -- a deployment's per-op rows, a plan's formulas -----------------------------------------------------

def test_consistency_per_op_rows_on_first_read_are_the_rows_made_with_the_summary():
    p = make_plan("Qwen3-8B", "H100", "vllm", SCENARIO, tp=2)
    d = p.at(SCENARIO)
    assert d._ops is None                                            # not made by .at()
    tables = shared_measured(gpu="H100", framework="vllm")
    want = {phase: op_rows(p, phase, SCENARIO, tables) for phase in PHASES}
    assert d.ops == want and d.ops is d.ops
    assert all(r["t_expected_s"] > 0 for r in d.ops["decode"])


def test_consistency_formulas_on_first_read_are_the_eager_structures():
    """plan()'s structure makes its symbolic side when a formula is read; it equals the one
    build_structure makes from both placements at once (the grid's path), and a pickled structure
    carries its formulas."""
    cached = make_plan("gpt-oss-20b", "H100", "vllm", SCENARIO, tp=2).structure
    lazy = plan(cached.ev, GPUS["H100"], cached.config, Options(framework="vllm", kv_dtype="bf16"),
                TABLES.get("vllm"), SCENARIO).structure
    assert lazy.symbolic._value is None                              # nothing symbolic placed yet
    ev, config, options = lazy.ev, lazy.config, lazy.options
    tokens = tokens_per_device(config, SCENARIO, options.prefill_tokens, options.decode_seq)
    eager = build_structure(ev, config, options, lazy.domain, TABLES.get("vllm"), GPUS["H100"], tokens,
                            (place(ev, config, lazy.domain, options, False), place(ev, config, lazy.domain, options, True)))
    for phase in PHASES:
        assert [s.flops for s in lazy.formulas[phase].steps] == [s.flops for s in eager.formulas[phase].steps]
        assert [s.uid for s in lazy.unfused_formulas[phase].steps] == [s.uid for s in eager.unfused_formulas[phase].steps]
    assert lazy.weight_formula == eager.weight_formula
    assert lazy.weight_formula.free_symbols                          # a formula over dims, not a number
    again = pickle.loads(pickle.dumps(lazy.symbolic))
    assert again.value[2] == lazy.weight_formula


# -- the sympy shortcuts ----------------------------------------------------------------------------

def test_relevant_substitutions_give_subs_own_value():
    from engine.deploy.legality import _relevant
    a, b, c, d = (symbols.dim(n) for n in "abcd")
    subs = {a: 2 * c, c: sympy.Integer(3), b: sympy.Integer(4), d: sympy.Integer(5)}
    expr = a / b                         # a brings in c: 2 x 3 / 4 = 3/2, as with every pair
    assert _relevant(expr, subs) == {a: 2 * c, c: 3, b: 4}
    assert expr.subs(_relevant(expr, subs)) == expr.subs(subs) == sympy.Rational(3, 2)


def test_consistency_unit_counts_with_the_relevant_dims(evaluation):
    from engine.deploy import legality
    from engine.deploy.placement import shard_unit
    for model in ("deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b"):
        ev = evaluation(model)
        for row in ev.numeric.rows.values():
            for param in row.weight_axes:
                name = row.dim_names[param]
                unit = shard_unit(name, ev.corpus.dims)
                if unit is None:
                    continue
                values = {**ev.numeric.values, **row.name_values}
                from engine.language import expr as exprs
                parsed = exprs.evaluate(name, exprs.Scope({k: symbols.dim(k) for k in {*values, unit}}))
                axis = next(x for axes in (row.out.axes, *(t.axes for t in row.in_shapes),
                                           *(l.axes for l in row.leaves)) for x in axes if x.name == name)
                plain = int(axis.size / (parsed / symbols.dim(unit)).subs(
                    {symbols.dim(k): v for k, v in values.items()}))
                assert legality._unit_count(row, name, unit, ev.numeric.values) == plain


def test_window_min_is_mins_own_object():
    """kv._window_min builds Min(length, w) without comparing for whole windows w >= 2: the same
    expression as Min's own (srepr, hash, argument order); a window of 1 (Min decides: 1) and a
    symbolic length that is not a positive integer go through Min."""
    length = symbols.dim(symbols.LENGTH)
    assert length.is_integer and length.is_positive
    for w in (2, 3, 7, 128, 4096, 131072, 2 ** 40):
        mine, plain = kv._window_min(length, w), sympy.Min(length, w)
        assert sympy.srepr(mine) == sympy.srepr(plain) and hash(mine) == hash(plain) and mine.args == plain.args
        assert kv._window_min(length, sympy.Integer(w)) == plain
    assert kv._window_min(length, 1) == 1                            # Min's decision: length >= 1
    x = sympy.Symbol("x")
    assert kv._window_min(x, 5) == sympy.Min(x, 5)


def test_window_min_and_request_functions_once_per_expression(evaluation):
    length = symbols.dim(symbols.LENGTH)
    ev = evaluation("openai/gpt-oss-20b")
    windowed = [c for c in kv.caches(ev.numeric) if c.growth == "window"]
    assert windowed
    for cache in windowed:
        assert kv.tokens_kept(cache, length) == sympy.Min(length, cache.window)
        assert kv.tokens_kept(cache, length) is kv.tokens_kept(cache, length)
    lengths = np.array([1.0, 127.0, 128.0, 129.0, 5000.5])
    for part in (None, *kv.PARTS):
        elements, own = kv.request_terms(ev.numeric, "main", part)
        for expr, fn in ((elements, kv.elements_per_request_fn(ev.numeric, "main", part)),
                         (own, kv.own_dtype_bytes_per_request_fn(ev.numeric, "main", part))):
            plain = symbols.checked_lambdify(length, expr, modules=list(symbols.NUMPY_MODULES))
            assert np.array_equal(fn(lengths), plain(lengths) + np.zeros_like(lengths))


def test_consistency_measured_coordinates_are_lambdifys_floats():
    """Every coordinate expression the lookups of a plan's point compiled (engine.deploy.measured._at)
    gives lambdify's own floats, bit for bit, at non-integer points."""
    from engine.deploy import measured
    from engine.deploy.step_functions import ARGS
    for model, tp in (("Llama-3.1-8B", 2), ("gpt-oss-20b", 1)):
        make_plan(model, "H100", "vllm", SCENARIO, tp=tp).at(SCENARIO)
    rng = np.random.default_rng(7)
    args = [rng.uniform(1, 5000, 9) for _ in ARGS]
    checked = 0
    for expr, fn in list(measured._FUNCS.items()):
        plain = symbols.checked_lambdify(ARGS, expr, modules=list(symbols.NUMPY_MODULES))
        got = np.broadcast_to(np.asarray(fn(*args), dtype=float), (9,))
        want = np.broadcast_to(np.asarray(plain(*args), dtype=float), (9,))
        assert np.array_equal(got, want), expr
        checked += 1
    assert checked > 5
