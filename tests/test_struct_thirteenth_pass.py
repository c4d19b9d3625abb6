"""What the thirteenth pass's structure measurement rests on (docs/scaling-2.md, "Structures,
thirteenth pass").

The pass measured, and did not build, a numeric placement path in Python ints and fractions "where
every value is a bound number": under the numeric binding a placed step's FLOPs and bytes are not
bound numbers but polynomials (or Min / floor forms) in the scenario symbols ``batch``, ``seq``,
``ctx`` and ``kv_bytes`` (engine.deploy.step_functions.ARGS), which the compiler turns into numpy
functions of the point; only their coefficients are numbers. Checked here on real placements, by
hand: a compute step's work is per request, so its FLOPs carry ``batch``; no other symbol is free
in any numeric value (the compiler's functions take ARGS alone); and the symbolic binding's steps,
the formulas, do carry model dims and degrees.
"""
from __future__ import annotations

from engine.deploy import Options
from engine.deploy.parallel import ParallelConfig
from engine.deploy.planner import place
from engine.deploy.step_functions import ARGS
from engine.deploy.structure import PHASES
from engine.language import symbols

BATCH = symbols.dim("batch")
CASES = (("Qwen/Qwen3-8B", ParallelConfig(tp=2)), ("Qwen/Qwen3.5-35B-A3B", ParallelConfig(tp=2, ep=2)))


def _values(step):
    return (step.flops, step.bytes, step.weight_bytes, step.comm_bytes)


def test_numeric_step_values_are_expressions_of_the_scenario_symbols_not_numbers(evaluation):
    """Every value of every numeric step is an expression of ARGS alone, and every compute step
    with work has ``batch`` in its FLOPs: the numeric binding leaves the point free, so Python
    numbers could stand in only for the coefficients (the docs' count: 862 of the 7,580 new
    placement products of a four-model build had two number operands)."""
    for model, config in CASES:
        ev = evaluation(model)
        placed = place(ev, config, 8, Options(), False)
        compute = 0
        for phase in PHASES:
            for step in placed[phase][0].steps:
                for value in _values(step):
                    assert value.free_symbols <= set(ARGS), (model, phase, step.uid, value)
                if step.kind == "compute" and not step.view and step.flops != 0:
                    compute += 1
                    assert BATCH in step.flops.free_symbols, (model, phase, step.uid, step.flops)
        assert compute > 20, model


def test_the_symbolic_placement_carries_dims_the_numeric_one_binds(evaluation):
    """The other binding of the same placement (the formulas): its FLOPs name model dims or
    parallel degrees beyond ARGS, which the numeric placement has bound to numbers."""
    model, config = CASES[0]
    ev = evaluation(model)
    numeric, symbolic = (place(ev, config, 8, Options(), s)["prefill"][0] for s in (False, True))
    beyond = [s for s in symbolic.steps if s.flops.free_symbols - set(ARGS)]
    assert beyond
    by_uid = {s.uid: s for s in numeric.steps}
    for step in beyond:
        assert by_uid[step.uid].flops.free_symbols <= set(ARGS)
