"""Consistency (the engine with itself): placement's and the planner's memos and fast paths give
what the plain computation gives, on corpus models.

* :func:`engine.deploy.stage_memory._memory` (weights per stage, the weight formula, KV per device) with
  its memos (:func:`_stage_rows`, :func:`_sum`, :func:`_stage_bytes`, :func:`_layers_on_stage`)
  equals the same function computed by the plain code it replaced (sympy.Add of every term, a
  scan of the components and the stage per cache entry), for MTP, hybrid (windowed, compressed,
  state caches) and pipelined configs.
"""
from __future__ import annotations

import pytest
import sympy

from engine.deploy import legality, planner, replay, stage_memory
from engine.deploy.parallel import ParallelConfig
from engine.deploy.device_program import ZERO
from engine.deploy.structure import Options

MODELS = ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V4-Flash", "nvidia/Nemotron-H-56B-Base-8K")


def _plain_stage_rows(stored, ev, pp):
    return stage_memory._stage_rows_of(stored, ev, pp)


def _plain_layers_on_stage(ev, uid, stage):
    template = next((c.uid for c in ev.numeric.components.values()
                     if c.template and uid.startswith(c.uid + "/")), None)
    for row_uid, n in stage:
        if template and row_uid.startswith(template + "/"):
            return n
    return ZERO


def _plain_memory(ev, config, options, numeric, symbolic, monkeypatch):
    """_memory with every memo of this change replaced by the plain code (and its own memo off)."""
    with monkeypatch.context() as m:
        m.setattr(stage_memory, "_MEMORY", {})
        m.setattr(stage_memory, "_stage_rows", _plain_stage_rows)
        m.setattr(stage_memory, "_sum", lambda terms: sympy.Add(*terms))
        m.setattr(stage_memory, "_stage_bytes",
                  lambda stored, rows: sympy.Add(*(stage_memory._mul(stored[u], n) for u, n in rows)))
        m.setattr(stage_memory, "_layers_on_stage", _plain_layers_on_stage)
        return stage_memory._memory(ev, config, options, numeric, symbolic)


@pytest.mark.parametrize("model", MODELS)
def test_consistency_memory_figures_equal_plain(evaluation, model, monkeypatch):
    ev = evaluation(model)
    options = [Options()]
    if legality.mtp_modules(ev):
        options.append(Options(mtp_tokens=1))
    for config in (ParallelConfig(tp=8), ParallelConfig(tp=4, pp=2), ParallelConfig(tp=2, pp=4),
                   ParallelConfig(tp=8, pp=2)):
        if legality.check(ev, config):
            continue
        for opts in options:
            numeric = planner.place(ev, config, 8, opts, False)
            symbolic = planner.place(ev, config, 8, opts, True)
            for sym in (numeric, symbolic):          # the search's (formulas off) and the grid's
                want = _plain_memory(ev, config, opts, numeric, sym, monkeypatch)
                for _ in range(2):                    # the second round answers from the memos
                    stage_memory._MEMORY.clear()
                    got = stage_memory._memory(ev, config, opts, numeric, sym)
                    assert got[0] == want[0] and type(got[0]) is type(want[0])
                    assert sympy.srepr(got[1]) == sympy.srepr(want[1])
                    assert sympy.srepr(got[2]) == sympy.srepr(want[2])


def test_stage_rows_memo_sees_other_rows_and_degrees(evaluation):
    ev = evaluation(MODELS[0])
    stored = planner.place(ev, ParallelConfig(tp=8), 8, Options(), False)["prefill"][0].stored
    for pp in (1, 2, 4):
        assert stage_memory._stage_rows(stored, ev, pp) == stage_memory._stage_rows_of(stored, ev, pp)
    fewer = dict(list(stored.items())[:-3])
    assert stage_memory._stage_rows(fewer, ev, 2) == stage_memory._stage_rows_of(fewer, ev, 2)
    assert stage_memory._stage_rows(fewer, ev, 2) != stage_memory._stage_rows(stored, ev, 2)


def test_sum_memo_and_stage_bytes_integer_path_equal_sympy_add():
    x, y = sympy.symbols("x y", positive=True)
    cases = [(), (sympy.Integer(3), sympy.Integer(4), sympy.S.Zero), (sympy.Integer(2), sympy.Rational(1, 2)),
             (x * 2, sympy.Integer(5), y), (sympy.Integer(7), sympy.Float(0.1))]
    for terms in cases:
        for _ in range(2):
            got = stage_memory._sum(terms)
            assert sympy.srepr(got) == sympy.srepr(sympy.Add(*terms))
    # another tuple of other objects is its own entry
    assert stage_memory._sum((sympy.Integer(3), sympy.Integer(5))) == 8
    stored = {"a": sympy.Integer(10), "b": sympy.Integer(6)}
    rows = [("a", sympy.Integer(3)), ("b", sympy.Integer(2))]
    assert sympy.srepr(stage_memory._stage_bytes(stored, rows)) == sympy.srepr(sympy.Integer(42))
    stored["b"] = sympy.Rational(3, 2)
    assert stage_memory._stage_bytes(stored, rows) == sympy.Add(30, sympy.Integer(3))


# -- prefill rows repeated across stage configs (planner._PhasePlacer with a library) ---------------

REPLAY_MODELS = ("deepseek-ai/DeepSeek-V3", "nvidia/Nemotron-H-56B-Base-8K", "openai/gpt-oss-20b",
                 "Qwen/Qwen3.5-35B-A3B")
REPLAY_CONFIGS = [dict(tp=8), dict(tp=8, ep=8), dict(tp=8, dp_attn=8), dict(tp=8, ep=8, dp_attn=8),
                  dict(tp=8, ep=2, dp_attn=4), dict(tp=4, cp=2), dict(tp=4, cp=2, cp_kind="ulysses"),
                  dict(tp=4, ep=4, cp=2), dict(tp=2), dict(tp=2, ep=2, pp=2)]


def _text(placed) -> str:
    """Everything a placement hands on, groups with their names and expressions (reprs hold them)."""
    return repr([(p, program.steps, sorted(program.layouts.items()), sorted(program.stored.items()))
                 for p, (program, _) in placed.items()])


@pytest.mark.parametrize("model", REPLAY_MODELS)
def test_consistency_rows_repeated_across_configs_place_as_alone(evaluation, model, monkeypatch):
    """Every config placed after the others (its prefill rows repeated from their records where
    they place alike) equals the config placed alone (no records of other configs), numeric and
    symbolic, both phases, down to the group names in its layouts."""
    ev = evaluation(model)
    configs = [c for c in (ParallelConfig(**d) for d in REPLAY_CONFIGS) if not legality.check(ev, c)]
    assert len(configs) >= 5
    planner._STAGES.clear()
    planner._LIBRARIES.clear()
    shared = [(_text(planner.place(ev, c, 8, Options(), s)), c, s) for c in configs for s in (False, True)]
    assert any(len(records) > 1 for _, (_, rows) in planner._LIBRARIES.items() for records in rows.values())
    with monkeypatch.context() as m:
        m.setattr(planner, "_library", lambda *args: None)
        for text, config, symbolic in shared:
            planner._STAGES.clear()
            assert _text(planner.place(ev, config, 8, Options(), symbolic)) == text, (config, symbolic)
    planner._STAGES.clear()


def test_rows_repeated_across_configs_share_step_objects(evaluation):
    """The library is used (tp8-ep8 repeats tp8's attention rows: the same step objects), and a row
    whose mesh answers otherwise (the routed experts: ep splits them) is placed anew."""
    ev = evaluation("deepseek-ai/DeepSeek-V3")
    planner._STAGES.clear()
    planner._LIBRARIES.clear()
    a = planner.place(ev, ParallelConfig(tp=8), 8, Options(), False)["prefill"][0]
    b = planner.place(ev, ParallelConfig(tp=8, ep=8), 8, Options(), False)["prefill"][0]
    by_uid = {s.uid: s for s in a.steps}
    same = [s for s in b.steps if by_uid.get(s.uid) is s]
    assert len(same) > len(b.steps) // 4
    experts = [s for s in b.steps if s.role == "experts" and s.kind == "compute"]
    assert experts and not any(by_uid.get(s.uid) is s for s in experts)
    assert any(g.name == "ep" for s in experts for gs in s.layout.shards for g in gs)
    planner._STAGES.clear()


def test_strict_tells_groups_of_equal_ranks_apart():
    from engine.deploy.parallel import Mesh
    from engine.deploy.device_program import Layout
    mesh = Mesh(ParallelConfig(tp=8, ep=8), 8)
    tp, ep = mesh.groups["tp"], mesh.groups["ep"]
    assert tp == ep and not replay._strict(tp, ep) and replay._strict(tp, Mesh(ParallelConfig(tp=8), 8).groups["tp"])
    assert Layout(((tp,),)) == Layout(((ep,),)) and not replay._strict(Layout(((tp,),)), Layout(((ep,),)))
    assert not replay._strict((tp,), (tp, tp)) and replay._strict(None, None) and not replay._strict(tp, None)
    symbolic = Mesh(ParallelConfig(tp=8), 8, True).groups["tp"]
    assert symbolic == tp and not replay._strict(symbolic, tp)
