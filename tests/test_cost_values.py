"""The step functions' value memo (engine.deploy.point_values._VALUES) gives the floats of a fresh call.

A program's column is evaluated from stored values when another program (or an earlier call) used
the same function at the same point set. Checked against the functions called directly, with the
memo cold, warm, after the caller changed its input arrays in place (values are keyed by the
inputs' bytes) and after the stored columns were written to (each call returns its own array).
"""
from __future__ import annotations

import numpy as np

from engine.deploy import Options, plan
from engine.deploy import point_values
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.structure import PHASES
from tests.deploy_helpers import direct_column

MODEL = "Qwen/Qwen3-8B"


def test_memo_gives_the_floats_of_a_fresh_call(evaluation):
    gpu = load_gpus()["H100"]
    structure = plan(evaluation(MODEL), gpu, ParallelConfig(tp=2), Options()).structure
    batch = np.array([1.0, 3.0, 64.0])
    ctx = np.array([1024.0, 5000.0, 9000.0])
    for phase in PHASES:
        compiled = structure.compiled[phase]
        seq = ctx.copy() if phase == "prefill" else np.ones(3)
        args = [batch, seq, ctx, np.array(2.0)]
        point_values._VALUES.clear()
        point_values._VALUES_SIZE[0] = 0
        for index in range(5):
            want = direct_column(compiled, index, args, (3,))
            cold = compiled.column(index, args, (3,))
            warm = compiled.column(index, args, (3,))
            assert cold.tobytes() == want.tobytes() == warm.tobytes(), (phase, index)
            warm[:] = -1.0                                  # a caller writing to its column
            assert compiled.column(index, args, (3,)).tobytes() == want.tobytes(), (phase, index)
        # the caller changes its arrays in place: the values follow the new contents
        batch_before = batch.copy()
        batch *= 2
        for index in range(5):
            assert compiled.column(index, args, (3,)).tobytes() == direct_column(compiled, index, args, (3,)).tobytes()
        batch[:] = batch_before
