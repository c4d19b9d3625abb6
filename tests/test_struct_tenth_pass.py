"""The tenth pass's structure shortcuts (docs/scaling.md, "Structures, playground and export, tenth pass").

* MiniMax-M2.7 is placed as MiniMax-M2.5 (engine/deploy/same_walk.py, ``UNPLACED``): the two walk
  to the same tables but for the model's name, the source lines and ``max_context``, which
  placing never reads. Checked by hand (which fields differ), against a planted change, and by
  consistency: M2.7 built after M2.5 in one process (M2.5's placed, fused and compiled objects)
  writes every file byte for byte as M2.7 placed afresh, over a grid whose prompt lengths and
  extrapolation flags differ between the two maximum contexts.
"""
from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import yaml

from engine.batch import model_build
from engine.deploy import same_walk as same_walk_module
from engine.deploy.planner import _quant_context
from engine.deploy.same_walk import UNPLACED, placing_key, same_walk
from engine.language.api import evaluate_spec
from engine.language.corpus import load_corpus

from tests.test_struct_speed8 import _forget_walks, assert_written_as_alone

BASE, TUNE = "MiniMaxAI/MiniMax-M2.5", "MiniMaxAI/MiniMax-M2.7"
TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"


def _differing(a, b) -> set[str]:
    return {f.name for f in dataclasses.fields(a)
            if not same_walk_module._same(getattr(a, f.name), getattr(b, f.name))}


def test_m2_7_differs_from_m2_5_only_in_unplaced_fields_and_is_keyed_by_it():
    """By hand: under both bindings the two Analyses differ in exactly ``model_id`` and
    ``max_context`` (196,608 and 204,800 tokens, their configs' max_position_embeddings), the dims
    bound alike; so M2.7 is keyed by M2.5. A copy of M2.7 with one row's FLOPs changed (a planted
    change) is keyed by itself, and ``max_context`` alone is what UNPLACED adds to the names."""
    _forget_walks()
    corpus = load_corpus()
    base, tune = (evaluate_spec(corpus, corpus.models[m]) for m in (BASE, TUNE))
    for binding in ("numeric", "symbolic"):
        assert _differing(getattr(base, binding), getattr(tune, binding)) == {"model_id", "max_context"}
    assert (int(base.numeric.max_context), int(tune.numeric.max_context)) == (196608, 204800)
    assert base.bound == tune.bound
    assert UNPLACED == {"model_id", "max_context"}
    assert placing_key(base, "checkpoint", _quant_context) is base
    assert placing_key(tune, "checkpoint", _quant_context) is base
    uid = next(u for u, r in tune.numeric.rows.items() if r.flops != 0)
    row = tune.numeric.rows[uid]
    planted = replace(tune, numeric=replace(tune.numeric, rows={**tune.numeric.rows,
                                                                 uid: replace(row, flops=row.flops + 1)}))
    assert not same_walk(planted.numeric, base.numeric)
    assert placing_key(planted, "checkpoint", _quant_context) is planted


def _between_grid(tmp_path: Path) -> Path:
    """grid_tiny with a prompt of 200,000 tokens and prompts up to 1 x the max context: M2.7
    (204,800) evaluates it, M2.5 (196,608) does not; and at 4,096 + 1,024 neither extrapolates."""
    grid = yaml.safe_load(TINY.read_text())
    grid["scenarios"]["input_lengths"] = [4096, 200000]
    grid["scenarios"]["beyond_max_context"] = 1
    path = tmp_path / "grid_between.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def test_consistency_m2_7_after_m2_5_writes_what_it_writes_alone(tmp_path):
    """M2.7 built after M2.5's grid half in one process (it shares M2.5's placements) and built
    again keyed by itself (placed afresh): every file byte for byte, over a grid whose prompt
    lengths differ between the two maximum contexts; and the shared structures' maximum context
    is M2.7's own."""
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.structure_cache import StructureCache
    from engine.deploy.fusion_table import load_tables
    corpus = load_corpus()
    grid = _between_grid(tmp_path)
    _forget_walks()
    chained = tmp_path / "chain"
    model_build.build_model(str(corpus.root), BASE, str(grid), None, str(chained), "h", None, corpus=corpus,
                            part="grid")
    model_build.build_model(str(corpus.root), TUNE, str(grid), None, str(chained), "h", None, corpus=corpus)
    assert any(ev is not owner and ev.model.model_id == TUNE for ev, owner in same_walk_module._KEYS.values())
    tune = evaluate_spec(corpus, corpus.models[TUNE])
    base = next(owner for ev, owner in same_walk_module._KEYS.values() if owner.model.model_id == BASE)
    tables = load_tables()
    from engine.deploy.hardware import find_gpu, load_gpus
    gpu = find_gpu(load_gpus(), "B200")
    mine = StructureCache(tune, tables).structure(ParallelConfig(tp=8), 8, "sglang", gpu, (0, 0))
    theirs = StructureCache(base, tables).structure(ParallelConfig(tp=8), 8, "sglang", gpu, (0, 0))
    assert mine.programs["decode"] is theirs.programs["decode"]          # it did share
    assert (mine.max_context, theirs.max_context) == (204800, 196608)
    assert_written_as_alone(corpus, TUNE, grid, chained, tmp_path / "alone")
