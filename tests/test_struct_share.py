"""Consistency (the engine with itself): what structures share gives what building alone gives.

The reference is each program fused from scratch (a copy holding a new step tuple, so no memo of
the original answers for it) by the plain algorithm fusion used before the sharing (walk every
step, rename its inputs, build every fused step). Planted bugs this catches: a pipelined program
(stage program + send/recv) reusing a fused step whose member the send reads (its bytes written
differ), a match memo answering for other passing rules (tokens past a limit), a fuse that drops or
misorders the steps reading a member, the search's structures merged across different content.
"""
from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import sympy

from engine.deploy import fusion, planner, stage_memory
from engine.deploy.fusion import _fused_step, _Graph, fuse, match
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.device_program import Program
from engine.deploy.structure import Options, PHASES
from engine.deploy.structure_cache import StructureCache

MODEL = "Qwen/Qwen3-30B-A3B"          # MoE, 48 layers: pipelined configs, expert and attention rules


def _fresh(program: Program) -> Program:
    """An equal program holding a new step tuple (nothing memoized of the original applies)."""
    return Program(program.phase, tuple(list(program.steps)), program.layouts, program.stored)


def _plain_fuse(program: Program, matches) -> Program:
    """fuse() as it was before its memos and edits: every step walked, every fused step built."""
    graph = _Graph(program)
    renamed, fused = {}, {}
    for m in matches:
        step = _fused_step(graph, m)
        fused[m.members[-1]] = step
        for u in m.members:
            renamed[u] = step.uid
    out = []
    for step in program.steps:
        if step.uid in fused:
            out.append(fused[step.uid])
        elif step.uid not in renamed:
            if any(i in renamed for i in step.inputs):
                step = replace(step, inputs=tuple(renamed.get(i, i) for i in step.inputs))
            out.append(step)
    return replace(program, steps=tuple(out))


@pytest.fixture(scope="module")
def setup(evaluation):
    ev = evaluation(MODEL)
    return ev, load_tables(), find_gpu(load_gpus(), "H200")


@pytest.mark.parametrize("degrees", [dict(tp=2, pp=2), dict(tp=4, ep=4, pp=4)])
def test_consistency_pipelined_programs_fuse_as_alone(setup, degrees):
    ev, tables, gpu = setup
    config = ParallelConfig(**degrees)
    # the test compares objects: a memo at its bound (other tests' placements in this process) is
    # cleared at its next insert, between the two placements below, and places the stage anew
    planner._STAGES.clear()
    stage = planner.place(ev, replace(config, pp=1), 8, Options(), False)
    placed = planner.place(ev, config, 8, Options(), False)
    shared = 0
    for framework in ("vllm", "sglang"):
        table = tables[framework]
        for phase in PHASES:
            program, base = placed[phase][0], stage[phase][0]
            assert program.steps[:len(base.steps)] == base.steps and fusion._extension(program, table) is base
            for tokens in (None, 1, 64, 10**6):
                found = match(program, table, gpu, config, phase, tokens)
                alone = _fresh(program)
                assert found == match(alone, table, gpu, config, phase, tokens)
                assert match(program, table, gpu, config, phase, tokens) == found      # (from the memo)
                got = fuse(program, found)
                assert got == _plain_fuse(alone, found) and got == fuse(alone, found)
                base_steps = {id(s) for s in fuse(base, match(base, table, gpu, config, phase, tokens)).steps}
                shared += sum(id(s) in base_steps for s in got.steps if s.kind == "fused")
    assert shared          # the pipelined programs do reuse the stage program's fused steps


def test_consistency_an_appended_reader_keeps_its_members_fused_step_apart(setup):
    """A step appended after the stage program that reads a match's member changes what that
    member writes outside its kernel: the pipelined program's fused step is its own."""
    ev, tables, gpu = setup
    config = ParallelConfig(tp=2)
    base = planner.place(ev, config, 8, Options(), False)["prefill"][0]
    table = tables["vllm"]
    found = match(base, table, gpu, config, "prefill", 10**6)
    graph = _Graph(base)
    # a member all of whose consumers are inside its match (its output never leaves the kernel)
    member = next(u for m in found for u in m.members[:-1]
                  if graph.consumers.get(u) and set(graph.consumers[u]) <= set(m.members))
    comm = next(s for s in base.steps if s.kind == "comm")
    reader = replace(comm, uid=f"{member}>send_recv[pp]", inputs=(member,), op="send_recv", collective="send_recv")
    program = replace(base, steps=base.steps + (reader,))
    fusion.note_extension(program, base)
    assert fusion._extension(program, table) is base
    got = fuse(program, found)
    assert got == _plain_fuse(_fresh(program), found)
    assert got.steps[:-1] != fuse(base, found).steps      # the member's kernel now writes its output


def test_consistency_programs_of_one_step_tuple_fuse_alike(setup):
    ev, tables, gpu = setup
    config = ParallelConfig(tp=2)
    program = planner.place(ev, config, 8, Options(), False)["decode"][0]
    other = replace(program, layouts={}, stored={})          # the same steps (an MTP draft program's case)
    found = match(program, tables["vllm"], gpu, config, "decode", 1)
    assert found and match(other, tables["vllm"], gpu, config, "decode", 1) == found
    got, again = fuse(program, found), fuse(other, found)
    assert got.steps == _plain_fuse(_fresh(program), found).steps
    assert again.steps == got.steps and all(a is b for a, b in zip(again.steps, got.steps))
    assert again.layouts == {} and got.layouts == program.layouts


def test_consistency_kv_per_device_is_plain_arithmetic(setup, monkeypatch):
    """stage_memory._kv_per_device through placement's arithmetic memo equals the same function with
    Python's operators in its place (the memo's invariant: the same sympy tree)."""
    import operator

    def plain(*args):
        with monkeypatch.context() as m:
            for name, op in (("_add", operator.add), ("_mul", operator.mul), ("_div", operator.truediv)):
                m.setattr(stage_memory, name, op)
            return stage_memory._kv_per_device(*args)

    ev = setup[0]
    for config in (ParallelConfig(tp=2, pp=2), ParallelConfig(tp=4, pp=4), ParallelConfig(tp=8)):
        for _ in range(2):           # the second round answers from the memo
            program, placer = planner.place(ev, config, 8, Options(), False)["decode"]
            stages = stage_memory._stage_rows(program.stored, ev, config.pp)
            for rows in stages:
                got, want = stage_memory._kv_per_device(ev, program, placer, rows), plain(ev, program, placer, rows)
                assert sympy.srepr(got) == sympy.srepr(want)


def test_consistency_search_structures_of_equal_content_are_one(setup):
    ev, tables, gpu = setup
    cache = StructureCache(ev, tables)
    config = ParallelConfig(tp=2)
    tokens = {"prefill": 10**6, "decode": 1}
    a = cache._build(config, 8, "vllm", gpu, tokens, Options(), False)
    b = cache._build(config, 8, "vllm", gpu, tokens, Options(), False)
    assert a is not b and cache._one_of(a) is a and cache._one_of(b) is a
    relabelled = copy.copy(b)
    relabelled.domain = 72
    assert cache._one_of(relabelled) is relabelled                        # another field: kept apart
    other = cache._build(config, 8, "sglang", gpu, tokens, Options(), False)
    assert cache._one_of(other) is other                                  # another framework
    # what the search reads of the one kept is what the other holds
    assert b.programs == a.programs and b.weight_bytes_per_gpu == a.weight_bytes_per_gpu
    assert b.kv_device_per_request == a.kv_device_per_request and b.compiled == a.compiled
