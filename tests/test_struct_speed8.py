"""The eighth pass's shortcuts in building structures (docs/scaling.md, "Structures, eighth pass"):
each memo against a hand derivation and against the computation it replaces, bit for bit.

* fusion's graph finds each step's producers (views looked through) once per graph
  (:meth:`engine.deploy.fusion._Graph.producers`).
"""
from __future__ import annotations

import sympy

from engine.deploy import Scenario
from engine.deploy.device_program import ONE, ZERO, Layout, Program, Step
from engine.deploy.fusion import _Graph, _candidates
from engine.deploy.fusion_table import load_tables
from engine.language.shapes import Tensor

from tests.deploy_helpers import make_plan


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
