"""Consistency (the engine with itself): CompiledProgram.totals' two paths give identical sums.

Small grids stack every step and sum over the steps axis; large ones go step by step. The grid
build uses the first, the bench and single big grids the second, so a difference would make a
number depend on how many points were asked at once. Equality is exact (np.array_equal): both add
the steps in the same order. A planted bug this catches: a per-step rate aligned on the wrong
axis, a latency dropped from one path, a bound split that differs.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options, plan
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.structure import PHASES

CASES = [
    # (model, GPU, config): dense TP with all-reduces; MoE with EP and DP-attention; a hybrid with PP
    ("meta-llama/Meta-Llama-3.1-8B", "H100", ParallelConfig(tp=2)),
    ("Qwen/Qwen3-30B-A3B", "B200", ParallelConfig(tp=4, ep=4, dp_attn=4)),
    ("Qwen/Qwen3.5-27B", "H200", ParallelConfig(tp=2, pp=2)),
]


@pytest.mark.parametrize("model_id,gpu_name,config", CASES, ids=[c[0].split("/")[-1] for c in CASES])
def test_stacked_and_step_by_step_totals_are_identical(model_id, gpu_name, config, corpus, evaluation):
    gpus = load_gpus()
    gpu = gpus[gpu_name]
    other = next(g for k, g in gpus.items() if k != gpu_name)
    table = load_tables(corpus.root / "fusion")["vllm"]
    structure = plan(evaluation(model_id), gpu, config, Options(framework="vllm"), table).structure
    # a grid, and single points (a (1,) or () shape is where a numpy reduction switches to pairwise
    # summation: the sums must still add the steps in order)
    for batch, ctx in ((np.array([1, 3, 64, 200.0])[:, None], np.array([1024, 5000, 131072.0])[None, :]),
                       (np.array([1, 64.0]), np.array([8192.0])), (np.array([64.0]), np.array([8192.0])),
                       (np.array(7.0), np.array(3000.0))):
        _check_paths(structure, gpu, other, batch, ctx)


def _check_paths(structure, gpu, other, batch, ctx):
    for phase in PHASES:
        compiled = structure.compiled[phase]
        seq = ctx if phase == "prefill" else np.ones_like(ctx)
        shape = np.broadcast_shapes(batch.shape, ctx.shape)
        if np.prod(shape) < 2:
            # a single point (archledger deploy) equals the same point inside a grid (the build)
            alone = compiled.totals(gpu, batch, seq, ctx, np.array(2.0))
            twice = compiled.totals(gpu, np.resize(batch, 2), np.resize(seq, 2), np.resize(ctx, 2), np.array(2.0))
            for key, value in alone.items():
                assert np.array_equal(np.asarray(value).reshape(-1), twice[key][..., 0].reshape(-1)), (phase, key)
            assert np.array_equal(compiled.step_time(gpu, batch, seq, ctx, np.array(2.0)), alone["t_sol"])
            continue
        # one GPU (rates per step) and two GPUs mixed point by point (rates per step and point)
        index = np.resize(np.array([0, 1, 0]), np.shape(ctx)[-1:])
        for rates in (gpu, compiled.rates_for([gpu, other], index)):
            args = (rates, batch, seq, ctx, np.array(2.0))
            peaks, links, hbm, alphas = compiled.rates(rates) if rates is gpu else rates
            inputs = [np.asarray(v, dtype=float) for v in args[1:]]
            stacked = compiled._totals_stacked(peaks, links, hbm, alphas, inputs, shape)
            by_step = compiled._totals_by_step(peaks, links, hbm, alphas, inputs, shape)
            assert stacked.keys() == by_step.keys()
            for key in stacked:
                assert np.array_equal(stacked[key], by_step[key]), (phase, key)
            # the public entry takes the stacked path here and returns the same
            public = compiled.totals(*args)
            assert all(np.array_equal(public[k], by_step[k]) for k in by_step)
            # the sizing search's step time alone is the same t_sol
            assert np.array_equal(compiled.step_time(*args), by_step["t_sol"])
            assert public["t_sol"].shape == shape and np.all(public["t_sol"] > 0)
