"""Consistency (the engine with itself): the per-process memos of structure building change no result.

Fusing keeps, per placed program, the fused step of each match and the renamed steps reading
fused outputs (engine.deploy.fusion.fuse); placement keeps the products and quotients it builds
(engine.deploy.placement_arith._arith). The reference is the same computation without the memo: a
fresh copy of the program (no memo entry) fused with the same matches, and Python's own
operators. A planted bug this catches: a renamed step kept from a call with other matches (its
inputs renamed to a fusion that is not there), a memo key that makes 2 and 2.0 one entry.
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from engine.deploy import Options, plan
from engine.deploy.fusion import fuse, match
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.placement_arith import _div, _mul
from engine.language import symbols


def test_fusing_subsets_of_matches_equals_fusing_afresh(corpus, evaluation):
    gpu = load_gpus()["H100"]
    table = load_tables(corpus.root / "fusion")["vllm"]
    config = ParallelConfig(tp=2)
    structure = plan(evaluation("meta-llama/Meta-Llama-3.1-8B"), gpu, config, Options(framework="vllm"),
                     table).structure
    program = structure.unfused["decode"]
    found = match(program, table, gpu, config, "decode", 1)
    assert len(found) >= 4
    # all matches, then every other one, then the first half: each call reuses the earlier calls'
    # fused and renamed steps, and must equal fusing an unseen copy of the program
    for subset in (found, found[::2], found[: len(found) // 2], found):
        fresh = replace(program, steps=tuple(program.steps))
        assert fuse(program, subset) == fuse(fresh, subset)


def test_placement_arithmetic_memo_keeps_types_apart():
    x = symbols.dim("hidden")
    assert _mul(x, 2) == 2 * x and _mul(x, 2.0) == 2.0 * x
    assert _mul(x, 2) != _mul(x, 2.0)       # 2 == 2.0 in Python; the products differ
    assert _div(x, sympy.Integer(4)) == x / 4 and _div(x, 4.0) == x / 4.0
