"""Consistency: the memos and shared printers of the playground and model-document export vs their slow paths.

Each fast path below (engine.playground.steps._step_trees's memo, engine.language.storage._axis's,
engine.batch.export._reference_bytes's per-expression division, model_facts printed by the
document's printer) must give exactly what the plain computation gives; these tests compare the two
paths on a corpus model. They are consistency tests of one engine with itself, so the name says so.
"""
from __future__ import annotations

from engine.batch import export, landscape
from engine.playground import playground_sol, steps, trees
from engine.playground.whatif import _tables
from engine.playground.catalog import PLAYGROUND
from engine.deploy import Options, place
from engine.deploy.step_totals import step_totals
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.language import expr, storage

MODEL = "Qwen/Qwen3-30B-A3B"


def test_step_trees_memo_consistency(evaluation):
    """A memoized step's trees equal the trees computed afresh, also for a step that differs only by uid."""
    from dataclasses import replace
    ev = evaluation(MODEL)
    gpu = find_gpu(load_gpus(), PLAYGROUND["gpu"])
    bases = playground_sol.Bases(ev, gpu, _tables(ev.corpus.root / "fusion").get("vllm"), 32768, "vllm", "bf16")
    config = ParallelConfig(tp=2, ep=2)
    programs = bases.programs(config)
    env = bases.env(config)
    checked = 0
    for phase in ("prefill", "decode"):
        for step in programs[phase].steps:
            fresh = steps._step_trees_of(gpu, step, env[phase])
            assert steps._step_trees(gpu, step, env[phase]) == fresh
            renamed = replace(step, uid=step.uid + "/other")
            assert steps._step_trees(gpu, renamed, env[phase]) == fresh
            checked += 1
    assert checked > 10
    playground_sol.forget()


def test_scheme_axis_memo_consistency(evaluation):
    """checkpoint_tensors through the memoized axes equals expr.evaluate of every scheme axis."""
    ev = evaluation(MODEL)
    for analysis in (ev.symbolic, ev.numeric):
        for t in storage.checkpoint_tensors(analysis, ev.model, ev.corpus):
            assert all(dim is not None for dim in t.shape)
    for scheme in ev.corpus.schemes.values():
        for tensor in scheme.matrix:
            for text in tensor.shape:
                for rows, cols in ((ev.symbolic.values["hidden"], 4096), (7168, 2048)):
                    want = expr.evaluate(text, expr.Scope({"rows": rows, "cols": cols}))
                    assert storage._axis(text, rows, cols) == want
                    assert type(storage._axis(text, rows, cols)) is type(want)


def test_reference_bytes_consistency(evaluation):
    """_reference_bytes (one division and evaluation per distinct step expression) equals each
    compute step's own bytes per call at the reference point."""
    ev = evaluation(MODEL)
    formulas: dict = {}
    got = export._reference_bytes(ev, formulas)
    stacks = sorted({row.stack for row in ev.numeric.rows.values()})
    n = 0
    for stack in stacks:
        for phase, (program, _) in place(ev, ParallelConfig(), 8, Options(), False, stack).items():
            for step in program.steps:
                if step.kind == "compute":
                    per_call = step_totals(step)[1] / step.repeat
                    assert got[step.uid][phase] == float(per_call.subs(export._point(phase)))
                    assert formulas[step.uid][phase] == per_call
                    n += 1
    assert n > 10


def test_model_facts_printer_consistency(evaluation):
    """model_facts printed by the document's printer equals model_facts printed by str."""
    ev = evaluation(MODEL)
    decode = export._point("decode")
    formulas: dict = {}
    bytes_at = export._reference_bytes(ev, formulas)
    flops_at = {u: export._at(r.flops, decode) for u, r in ev.numeric.rows.items() if "decode" in r.phases}
    overview = ev.overview()
    plain = landscape.model_facts(ev, decode, flops_at, bytes_at, formulas, overview)
    shared = landscape.model_facts(ev, decode, flops_at, bytes_at, formulas, overview, export._Texts())
    assert shared == plain
    assert plain["attention_decode"]


def test_divisible_memo_consistency(evaluation):
    """_divisible's memo (per rows list, config, dims table and names in scope) equals the conditions computed afresh."""
    ev = evaluation(MODEL)
    rows = [r for r in ev.symbolic.rows.values() if r.weight_axes][:40]
    for config in (ParallelConfig(tp=2, ep=2), ParallelConfig(tp=4)):
        fresh = playground_sol._divisible_of(rows, config, ev.corpus.dims, ev.symbolic.values)
        assert playground_sol._divisible(rows, config, ev.corpus.dims, ev.symbolic.values) == fresh
        assert playground_sol._divisible(rows, config, ev.corpus.dims, dict(ev.symbolic.values)) == fresh
    playground_sol.forget()


def test_printer_term_order_consistency(evaluation):
    """The document's printer orders every sum's terms as sympy's as_ordered_terms does, and prints
    every formula of a model (each row's and component's sums) exactly as str() does."""
    import sympy
    ev = evaluation("deepseek-ai/DeepSeek-V3")
    texts = export._Texts()
    sym = ev.symbolic
    formulas = [r.flops for r in sym.rows.values()] + [r.params * r.repeat * r.instances for r in sym.rows.values()]
    formulas.append(sympy.Add(*(r.flops * r.repeat for r in sym.rows.values())))
    sums = [e for f in formulas if isinstance(f, sympy.Basic) for e in sympy.preorder_traversal(f)
            if isinstance(e, sympy.Add)]
    assert len(sums) > 50
    for e in sums:
        assert texts._printer._as_ordered_terms(e) == e.as_ordered_terms()
    for f in formulas:
        assert texts(f) == str(f)


def test_summed_memo_consistency():
    """_summed equals _fold of the same trees, and gives one object for one list of tree objects."""
    a, b = ["*", 2, "x"], ["+", "y", 3]
    assert steps._summed([a, b]) == trees._fold("+", [0, a, b])
    assert steps._summed([a, b]) is steps._summed([a, b])
    assert steps._summed([]) == 0
    assert steps._summed([b, a]) == trees._fold("+", [0, b, a])
    playground_sol.forget()
