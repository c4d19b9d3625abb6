"""The export side's shortcuts (issue 19) give the text and values of the plain calls they replace.

* the memo printers of :mod:`engine.deploy.op_rows` (:class:`engine.language.memo_printer.MemoStrPrinter`) print every formula as sympy's own printer of
  the same settings does (``str()`` for weights, ``order="none"`` for the per-op formulas), for the
  formulas of a real structure and for nodes whose text depends on where they sit (Floats, square
  roots, negative terms);
* :meth:`engine.batch.columns.Columns.joined` joins runs of constants in one call: the values and
  dtypes of joining chunk by chunk;
* the grid's capacity from :func:`engine.deploy.sol.capacity_terms` shared by the GPU types of a
  structure equals a plain :func:`engine.deploy.sol.capacity` call per GPU.
"""
from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter


def test_memo_printer_consistency_with_sympy_printing():
    from engine.deploy import op_rows     # (the printers moved with the op rows, made on first use)
    from engine.deploy.step_totals import step_totals
    from engine.deploy.fusion_table import load_tables, token_limits
    from engine.deploy.hardware import load_gpus
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.structure_cache import StructureCache
    from engine.language.api import evaluate
    ev = evaluate("Qwen/Qwen3-8B")
    cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    gpu = load_gpus()["H100"]
    exprs = []
    for config in (ParallelConfig(tp=2), ParallelConfig(tp=4, pp=2)):
        limits = token_limits(cache.tables.get("vllm"))
        s = cache.structure(config, gpu.scale_up_domain, "vllm", gpu, (len(limits), 0))
        exprs.append(s.weight_formula)
        exprs += [e for p in s.formulas.values() for step in p.steps for e in step_totals(step)]
    x, y, z = sympy.symbols("batch seq ctx", positive=True)
    exprs += [sympy.Float(0.5) * x + sympy.Float(2.0) * y, sympy.sqrt(x) * y + 1 / sympy.sqrt(z),
              sympy.ceiling(x / 3) - 2 * y * sympy.Max(z, 4) + sympy.Rational(3, 2), x ** -2 - y ** sympy.S.Half,
              sympy.Min(x, y) * sympy.floor(z / 7) - 1]
    assert len(exprs) > 100
    order_none = StrPrinter({"order": "none"})
    plain, unordered = op_rows._printer(), op_rows._printer(order="none")
    for expr in exprs * 2:                       # twice: the second pass prints from the memo
        assert plain.doprint(expr) == str(expr)
        assert unordered.doprint(expr) == order_none.doprint(expr)
    assert plain._memo and unordered._memo      # the memo printers were used
    # the printers the op rows print with are these very objects (one per settings, cached)
    assert op_rows._printer() is plain and op_rows._printer(order="none") is unordered


def test_columns_joined_consistency_with_chunk_by_chunk():
    """:meth:`engine.batch.columns.Columns.joined` (runs of constants in one np.repeat) gives the
    dtype and values of concatenating every chunk on its own (np.full for a constant)."""
    import numpy as np
    from engine.batch.columns import Columns
    chunks = {"f": [1.5, 2.5, np.array([0.25, 3.0]), 7.0, 1.0],            # floats around an array
              "i": [3, 4, np.array([1, 2]), 5, 6, 7],                        # ints
              "mixed": [2, 2.5, np.array([1, 2]), True, 3],                  # int, float, bool: promoted
              "b": [True, False, np.array([True]), True],
              "s": ["a", ["x", "y"], np.array(["u", "v"]), "b"]}             # labels: a list
    counts = [3, 1, 4, 2, 5, 2]
    cols = Columns()
    expected = {}
    for name, parts in chunks.items():
        pieces = []
        for part, count in zip(parts, counts):
            if isinstance(part, (np.ndarray, list)):
                cols.add(name, part)
                pieces.append(np.asarray(part))
            else:
                cols.repeat(name, part, count)
                pieces.append(np.full(count, part))
        expected[name] = np.concatenate(pieces)
    joined = cols.joined()
    for name in ("f", "i", "mixed", "b"):
        assert joined[name].dtype == expected[name].dtype, name
        assert joined[name].tolist() == expected[name].tolist(), name
    assert joined["s"] == ["a"] * 3 + ["x", "y", "u", "v"] + ["b"] * 2
    assert joined["nothing"] == []


def test_capacity_terms_consistency_with_capacity():
    """The grid computes :func:`engine.deploy.sol.capacity_terms` once per structure and reuses them
    for every GPU type of that structure: the capacities are those of a plain call per GPU."""
    import numpy as np
    from engine.deploy.fusion_table import load_tables, token_limits
    from engine.deploy.hardware import load_gpus
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.sol import capacity, capacity_terms
    from engine.deploy.structure_cache import StructureCache
    from engine.language.api import evaluate
    ev = evaluate("Qwen/Qwen3-8B")
    cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    gpus = load_gpus()
    limits = token_limits(cache.tables.get("vllm"))
    s = cache.structure(ParallelConfig(tp=2), 8, "vllm", gpus["H100"], (len(limits), 0))
    inputs = np.tile([1024, 8192, 65536, 262144], 2)
    outs, kv_bytes = np.repeat([256, 8192], 4), np.repeat([2, 1], 4)
    terms = capacity_terms(s, inputs, outs, kv_bytes)
    got = []
    for key in ("H100", "H200", "B200"):
        usable = gpus[key].hbm_bytes * 0.9
        shared = capacity(s, usable, inputs, outs, kv_bytes, terms=terms)
        assert shared.dtype == np.int64 and shared.tolist() == capacity(s, usable, inputs, outs, kv_bytes).tolist()
        got.append(shared.tolist())
    assert got[0] != got[1] and len(set(got[0])) > 2       # GPUs of other memory: other capacities
