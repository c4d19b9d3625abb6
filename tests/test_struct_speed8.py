"""The eighth pass's shortcuts in building structures (docs/scaling.md, "Structures, eighth pass"):
each memo against a hand derivation and against the computation it replaces, bit for bit.

* fusion's graph finds each step's producers (views looked through) once per graph
  (:meth:`engine.deploy.fusion._Graph.producers`);
* a fine-tune is placed as its base (engine/deploy/same_walk.py: the planner's placements, the
  fused and compiled programs and the export's draft placements are the base's objects).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.deploy import Scenario
from engine.deploy.device_program import ONE, ZERO, Layout, Program, Step
from engine.deploy.fusion import _Graph, _candidates
from engine.deploy.fusion_table import load_tables
from engine.deploy.planner import _quant_context
from engine.deploy import same_walk as same_walk_module
from engine.deploy.same_walk import placing_key, same_walk
from engine.batch import model_build
from engine.language.api import evaluate_spec
from engine.language.corpus import load_corpus
from engine.language.shapes import Tensor

from tests.deploy_helpers import make_plan
from tests.file_helpers import files_of


def _step(uid: str, inputs: tuple[str, ...], view: bool = False, op: str = "linear") -> Step:
    return Step(uid, uid, op, "compute", "attention", "c", "c", ONE, inputs, ZERO, ZERO, ZERO, ZERO, "bf16",
                Layout(()), Tensor(()), ZERO, view=view)


def test_views_are_looked_through_by_hand():
    """a -> v1 (view) -> v2 (view) -> b, and c reads v2 and a: b's producers are [a]; c's [a, a]
    (one per input, in input order); the views read nothing but through themselves."""
    program = Program("prefill", (_step("a", ()), _step("v1", ("a",), view=True), _step("v2", ("v1",), view=True),
                                  _step("b", ("v2",)), _step("c", ("v2", "a"))), {}, {})
    graph = _Graph(program)
    steps = {s.uid: s for s in program.steps}
    assert graph.producers(steps["b"]) == ("a",)
    assert graph.producers(steps["c"]) == ("a", "a")
    assert graph.consumers == {"a": ["b", "c", "c"]}
    # a step that is not the graph's own (another object of the same uid) is looked up afresh
    assert graph.producers(_step("b", ("a",))) == ("a",)


def test_a_new_graph_looks_again():
    """The looked-through views are kept per graph: the same uids in another program (v1 now
    reading z) give that program's producers (a planted change recomputes)."""
    first = Program("prefill", (_step("a", ()), _step("v1", ("a",), view=True), _step("b", ("v1",))), {}, {})
    second = Program("prefill", (_step("z", ()), _step("v1", ("z",), view=True), _step("b", ("v1",))), {}, {})
    assert _Graph(first).producers(first.steps[2]) == ("a",)
    assert _Graph(second).producers(second.steps[2]) == ("z",)


def _reference_producers(steps: dict, step: Step) -> list[str]:
    """The rule as written before the memo: recurse through every view on every call."""
    out = []
    for uid in step.inputs:
        source = steps.get(uid)
        if source is not None and source.view:
            out.extend(_reference_producers(steps, source))
        else:
            out.append(uid)
    return out


def test_consistency_memoized_views_against_the_recursion_on_real_programs():
    """Every step's producers, the consumers and every rule's candidates of DeepSeek-V3's and
    Qwen3-30B-A3B's placed programs (views, MoE dispatch/combine, MLA) as the plain recursion gives."""
    tables = load_tables()
    for model, config in (("DeepSeek-V3", dict(tp=8, dp_attn=8, ep=8)), ("Qwen3-30B-A3B", dict(tp=2))):
        s = make_plan(model, "H200", "sglang", Scenario(4, 1024, 32), **config).structure
        for phase in ("prefill", "decode"):
            program = s.unfused[phase]
            steps = {st.uid: st for st in program.steps}
            assert any(st.view for st in program.steps)
            graph = _Graph(program)
            consumers: dict = {}
            for st in program.steps:
                assert list(graph.producers(st)) == _reference_producers(steps, st)
                if not st.view:
                    for p in _reference_producers(steps, st):
                        consumers.setdefault(p, []).append(st.uid)
            assert graph.consumers == consumers
            fresh = _Graph(program)
            fresh.producers = lambda step, steps=steps: _reference_producers(steps, step)
            for rule in tables["sglang"].rules:
                assert _candidates(rule, graph) == _candidates(rule, fresh)


# -- a fine-tune placed as its base (engine/deploy/same_walk.py) ------------------------------------

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
BASE, TUNE = "zai-org/GLM-5", "zai-org/GLM-5.1"       # the same graph, dims and quant; other names


def test_a_fine_tune_shares_its_bases_placements_and_nothing_else_does():
    """GLM-5.1's walks equal GLM-5's but for names and source lines: the planner keys its
    placements by GLM-5 (the first seen); Qwen3-8B's (other dims) and a copy of GLM-5.1 with one
    row's FLOPs changed (a planted change) are keyed by themselves, as is a weight format whose
    quant differs from the base's."""
    _forget_walks()
    corpus = load_corpus()
    base, tune = (evaluate_spec(corpus, corpus.models[m]) for m in (BASE, TUNE))
    other = evaluate_spec(corpus, corpus.models["Qwen/Qwen3-8B"])
    assert base.numeric is not tune.numeric and base.numeric.model_id != tune.numeric.model_id
    assert placing_key(base, "checkpoint", _quant_context) is base
    assert placing_key(tune, "checkpoint", _quant_context) is base
    assert placing_key(other, "checkpoint", _quant_context) is other
    # a third of the family (the base walked again: another object) is placed as the first
    again = evaluate_spec(corpus, corpus.models[BASE])
    assert placing_key(again, "checkpoint", _quant_context) is base
    uid = next(iter(tune.numeric.rows))
    row = tune.numeric.rows[uid]
    planted = replace(tune, numeric=replace(tune.numeric, rows={**tune.numeric.rows,
                                                                 uid: replace(row, flops=row.flops + 1)}))
    assert not same_walk(planted.numeric, base.numeric)
    assert placing_key(planted, "checkpoint", _quant_context) is planted
    requant = replace(tune, model=replace(tune.model, quant={"*": "fp8"}))
    assert placing_key(requant, "checkpoint", _quant_context) is requant
    # the source lines and the name alone differ: equal once they are left out
    assert same_walk(base.symbolic, tune.symbolic)
    assert any(base.numeric.rows[u].where != tune.numeric.rows[u].where for u in base.numeric.rows)


def _forget_walks() -> None:
    """No model seen before: the next one placed is keyed by itself."""
    same_walk_module._OWNERS.clear()
    same_walk_module._KEYS.clear()


def test_consistency_a_fine_tune_after_its_base_writes_what_it_writes_alone(tmp_path):
    """GLM-5.1 built after GLM-5 in one process (placed, fused and compiled as GLM-5's objects) and
    built again keyed by itself (no model seen before it, so placed afresh): every file byte for
    byte (the process's expression-keyed memos are tests/test_family_chains.py's)."""
    corpus = load_corpus()
    _forget_walks()
    chained = tmp_path / "chain"
    # the base's grid half places, fuses and compiles what the fine-tune's both halves ask for
    model_build.build_model(str(corpus.root), BASE, str(TINY), None, str(chained), "h", None, corpus=corpus,
                            part="grid")
    model_build.build_model(str(corpus.root), TUNE, str(TINY), None, str(chained), "h", None, corpus=corpus)
    assert any(ev is not owner for ev, owner in same_walk_module._KEYS.values())     # it did share
    assert_written_as_alone(corpus, TUNE, TINY, chained, tmp_path / "alone")


def assert_written_as_alone(corpus, tune: str, grid: Path, chained: Path, alone: Path) -> None:
    """``tune``'s files under ``chained`` (built after its base) equal, byte for byte, those of
    ``tune`` built again into ``alone`` with no model seen before it (placed afresh)."""
    _forget_walks()
    model_build.build_model(str(corpus.root), tune, str(grid), None, str(alone), "h", None, corpus=corpus)
    mine = {k: v for k, v in files_of(chained).items() if model_build.slug(tune) in k}
    apart = files_of(alone)
    assert len(mine) >= 5 and sorted(mine) == sorted(apart)
    for name in mine:
        assert mine[name] == apart[name], f"{name}: {tune} after its base differs from {tune} placed afresh"


def test_placements_are_kept_while_their_stages_are():
    """place() hands back the same placements while the stage placements they were made of are
    kept; once those are gone (cleared: a planted change of what placing reads) it places again,
    to equal programs."""
    from engine.deploy import planner
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.structure import Options
    corpus = load_corpus()
    ev = evaluate_spec(corpus, corpus.models["Qwen/Qwen3-8B"])
    config = ParallelConfig(tp=2, pp=2)
    first = planner.place(ev, config, 8, Options(), False)
    assert planner.place(ev, config, 8, Options(), False) is first
    planner._STAGES.clear()
    again = planner.place(ev, config, 8, Options(), False)
    assert again is not first
    for phase in ("prefill", "decode"):
        assert again[phase][0] is not first[phase][0] and again[phase][0] == first[phase][0]
