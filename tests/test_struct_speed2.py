"""Consistency (the engine with itself): the building shortcuts of the struct speed work give what
the plain paths give.

* Decode placement repeating prefill's rows (engine.deploy.planner._PhasePlacer) equals a plain
  :class:`~engine.deploy.placement.Placer` run of decode, step for step (every field, group names
  and expressions included), on corpus models with KV caches, recurrent states, MoE dispatch and
  context parallelism (whose stack inputs differ between the phases). Planted bugs this catches:
  a repeated logits step keeping prefill's ``last_token``, a repeated recurrent step keeping
  prefill's state traffic, a row repeated under cp reading a split its decode input lacks, a
  reshard repeated where decode already made it (a doubled collective).
* The compiled step functions (engine.deploy.step_functions._lambdify, lambdify given the parameter list as
  text) have the source ``sympy.lambdify(ARGS, ...)`` writes, and its floats, on a model's real
  step expressions.
"""
from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pytest
import sympy

from engine.deploy import planner, step_functions, step_totals
from engine.deploy.step_functions import KV_BYTES
from engine.deploy.parallel import Mesh, ParallelConfig
from engine.deploy.placement import Placer, phase_rows
from engine.deploy.device_program import DeviceTypes
from engine.deploy.structure import Options

CASES = [
    ("Qwen/Qwen3-8B", [dict(tp=2), dict(tp=4, pp=2), dict(tp=2, cp=2), dict(tp=2, cp=2, cp_kind="ulysses")]),
    ("Qwen/Qwen3-30B-A3B", [dict(tp=4, ep=4), dict(tp=4, ep=2, dp_attn=2), dict(tp=8, ep=8, dp_attn=8)]),
    ("Qwen/Qwen3.5-35B-A3B", [dict(tp=2, ep=2), dict(tp=4, dp_attn=4, ep=4)]),    # recurrent states
    ("nvidia/Nemotron-H-56B-Base-8K", [dict(tp=2), dict(tp=8, cp=2)]),            # Mamba states
]


def _plain_decode(ev, config: ParallelConfig, domain: int, symbolic: bool):
    """Decode placed by a plain Placer (no record, nothing repeated), as _placed_stage places it."""
    analysis = ev.symbolic if symbolic else ev.numeric
    stage = replace(config, pp=1, dp=1, gpus_per_node=None)
    placer = Placer(analysis, Mesh(stage, min(domain, config.tp * config.cp), symbolic), "decode", ev.corpus.dims,
                    planner._weights_fn(ev, Options()), DeviceTypes(2, KV_BYTES), planner._model_decider(ev))
    return placer.run(phase_rows(analysis, "decode"))


@pytest.mark.parametrize("model,configs", CASES, ids=[c[0] for c in CASES])
def test_consistency_decode_repeating_prefill_equals_plain_decode(evaluation, model, configs):
    ev = evaluation(model)
    planner._STAGES.clear()           # place afresh: prefill records, decode repeats
    repeated = 0
    for degrees in configs:
        config = ParallelConfig(**degrees)
        for symbolic in (False, True):
            prefill = planner._placed_stage(ev, config, 8, Options(), symbolic, "main", "prefill")[0]
            got = planner._placed_stage(ev, config, 8, Options(), symbolic, "main", "decode")[0]
            want = _plain_decode(ev, config, 8, symbolic)
            assert got.steps == want.steps and got.layouts == want.layouts and got.stored == want.stored
            # Group's name and expression are not compared by ==: their texts are
            assert [repr(s) for s in got.steps] == [repr(s) for s in want.steps]
            assert {k: repr(v) for k, v in got.layouts.items()} == {k: repr(v) for k, v in want.layouts.items()}
            mine = {id(s) for s in prefill.steps}
            repeated += sum(id(s) in mine for s in got.steps)
    assert repeated > 0               # the shortcut was taken


def test_consistency_repeated_rows_keep_phase_reads_apart(evaluation):
    ev = evaluation("Qwen/Qwen3.5-35B-A3B")
    planner._STAGES.clear()
    config = ParallelConfig(tp=2)
    prefill = planner._placed_stage(ev, config, 8, Options(), False, "main", "prefill")[0]
    decode = planner._placed_stage(ev, config, 8, Options(), False, "main", "decode")[0]
    first = {s.uid: s for s in prefill.steps}
    heads = [s for s in decode.steps if s.role == "lm_head" and s.kind == "compute"]
    assert heads and all(not s.last_token and first[s.uid].last_token for s in heads)
    state = {c.node_uid.removesuffix("@decode") for c in ev.numeric.caches if c.growth == "state"}
    recurrent = [s for s in decode.steps if s.uid.removesuffix("@decode") in state]
    assert recurrent and all(s is not first.get(s.uid) for s in recurrent)


def test_repeat_is_refused_when_the_state_it_read_differs(evaluation):
    ev = evaluation("Qwen/Qwen3-30B-A3B")
    planner._STAGES.clear()
    config = ParallelConfig(tp=4, ep=2, dp_attn=2)
    planner._placed_stage(ev, config, 8, Options(), False, "main", "prefill")
    prefill = planner._STAGES[next(k for k in planner._STAGES if k[-1] == "prefill")][2]
    record = dict(prefill.record)
    decode = planner._PhasePlacer(ev.numeric, prefill.mesh, "decode", ev.corpus.dims,
                                  planner._weights_fn(ev, Options()), DeviceTypes(2, KV_BYTES),
                                  planner._model_decider(ev), prefill=prefill)
    decode.consumers = {}
    made = next(hit for hit in record.values() if hit[5])
    inputs = list(made[1])
    decode.consumers = {s.uid: c for s, c in zip(inputs, made[2])}
    assert decode._repeats(made, inputs)
    decode.redist[made[5][0]] = inputs[0]               # a reshard it made exists already
    assert not decode._repeats(made, inputs)
    decode.redist.clear()
    routed = next(hit for hit in record.values() if hit[7])
    inputs = list(routed[1])
    decode.consumers = {s.uid: c for s, c in zip(inputs, routed[2])}
    decode.routing_tokens.update(routed[7])
    assert decode._repeats(routed, inputs)
    key = next(iter(routed[7]))
    decode.routing_tokens[key] = routed[7][key] * 2    # other routing tokens
    assert not decode._repeats(routed, inputs)
    decode.routing_tokens[key] = routed[7][key]
    decode.consumers[inputs[0].uid] = (made[2][0] or 0) + 7     # other consumer counts
    assert not decode._repeats(routed, inputs)


def test_consistency_compiled_step_functions_are_lambdify_s(evaluation):
    ev = evaluation("Qwen/Qwen3-30B-A3B")
    placed = planner.place(ev, ParallelConfig(tp=4, ep=4, pp=2), 8, Options(), False)
    exprs = []
    for phase in ("prefill", "decode"):
        for step in placed[phase][0].steps:
            exprs.extend(t for t in step_totals.step_totals(step) if not t.is_number)
    exprs = list(dict.fromkeys(exprs))
    assert len(exprs) > 30
    args = (np.array([1.0, 3.0, 64.0])[:, None], np.array([1.0, 17.0, 8192.0])[:, None],
            np.array([1.0, 1000.0, 131072.0])[None, :], np.array(2.0))
    for expr in exprs:
        theirs = sympy.lambdify(step_functions.ARGS, expr, modules=step_functions._MODULES, docstring_limit=0)
        ours = step_functions._lambdify(expr)
        assert inspect.getsource(ours) == inspect.getsource(theirs)
        assert np.array_equal(ours(*args), theirs(*args))


def test_consistency_step_with_is_dataclasses_replace(evaluation):
    from engine.deploy.device_program import step_with
    ev = evaluation("Qwen/Qwen3-30B-A3B")
    placed = planner.place(ev, ParallelConfig(tp=4, ep=2, dp_attn=2, pp=2), 8, Options(), True)
    steps = [s for phase in ("prefill", "decode") for s in placed[phase][0].steps]
    assert len(steps) > 50
    for s in steps:
        for changes in ({"inputs": s.inputs + ("x",)}, {"repeat": s.repeat * 3, "last_token": not s.last_token}, {}):
            got, want = step_with(s, **changes), replace(s, **changes)
            assert got == want and repr(got) == repr(want) and hash(got.uid) == hash(want.uid)
            assert all(getattr(got, f) is getattr(want, f) for f in type(s).__slots__)
