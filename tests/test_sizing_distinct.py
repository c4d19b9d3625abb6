"""The sizing search's shortcuts give the numbers of the plain evaluation, bit for bit.

* :func:`engine.deploy.sol.summarize` evaluates each distinct (GPU, program batch, lengths) step
  point once and spreads it (:func:`engine.deploy.sol.phase_at_points`): checked against each
  point evaluated alone (nothing to share), on configs where points repeat (DP-attention,
  pipeline, expert parallel; chunked prefill at the step budget) over GPU types of several archs
  and ragged per-GPU batches, for the sizing search's step times and for every field.
* :func:`engine.serving.sizing.batch_list` takes its steps from one precomputed sequence: checked
  against the rule written out here (every batch to 512, then floor(512 x 1.01^k), the capacity).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.deploy import Options
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.serving.sizing import batch_list
from engine.deploy import sol
from engine.deploy.sol import SERVING_FIELDS, summarize
from engine.deploy.structure_cache import StructureCache

from tests.conftest import _evaluation

MOE = "Qwen/Qwen3-30B-A3B"
CONFIGS = [ParallelConfig(tp=1), ParallelConfig(tp=4, ep=4, dp_attn=4), ParallelConfig(tp=2, pp=2),
           ParallelConfig(tp=2, ep=2, dp_attn=2, pp=2), ParallelConfig(tp=8, ep=8, dp_attn=8)]
GPUS = ["H100", "B200", "MI300X"]


@pytest.fixture(scope="module")
def cache():
    ev = _evaluation(MOE)
    return StructureCache(ev, load_tables(ev.corpus.root / "fusion"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
def test_distinct_points_give_summarize_floats(cache, config, monkeypatch):
    monkeypatch.setattr(sol, "DISTINCT_MIN_ELEMENTS", 0)       # the distinct path, whatever the size
    gpus = [find_gpu(load_gpus(), name) for name in GPUS]
    s = cache.live_structure(config, 8, "vllm", gpus[0], (0, 0))
    # ragged: each GPU type its own batches (repeats across GPUs and within the DP-attention ceil)
    batch = np.concatenate([np.arange(1, 70), np.arange(1, 300, 7), np.arange(5, 41)])
    index = np.concatenate([np.zeros(69, int), np.ones(43, int), np.full(36, 2)])
    out_len = np.where(np.arange(len(batch)) % 5 == 0, 1, 1024)      # two context lengths
    for kv_bytes, serving_only in ((2.0, True), (1.0, True), (2.0, False)):
        together = summarize(s, gpus, index, kv_bytes, batch, 8192, out_len, 0.9, 8192, serving_only=serving_only)
        names = SERVING_FIELDS if serving_only else [k for k, v in together.items() if isinstance(v, np.ndarray)
                                                     and v.shape == batch.shape]
        assert set(SERVING_FIELDS) <= set(names)
        step = 1 if serving_only else 3              # the full fields: every third point (time)
        for i in range(0, len(batch), step):
            alone = summarize(s, gpus, index[i:i + 1], kv_bytes, batch[i:i + 1], 8192, out_len[i:i + 1], 0.9, 8192,
                              serving_only=serving_only)
            for name in names:
                a, b = np.asarray(together[name])[i:i + 1], np.asarray(alone[name])
                assert a.dtype == b.dtype and a.shape == b.shape, name
                assert a.tobytes() == b.tobytes(), f"{config.label()} {name} point {i}"
            if not serving_only:
                for phase in ("prefill", "decode"):
                    for name, value in together["phases"][phase].items():
                        assert np.asarray(value)[i:i + 1].tobytes() == np.asarray(alone["phases"][phase][name]).tobytes(), \
                            f"{config.label()} {phase} {name} point {i}"
    # the structure's own programs are left as they were
    assert all(type(c).__name__ == "CompiledProgram" for c in s.compiled.values())


def _rule(cap: int) -> list[int]:
    """docs/deployment.md's batch rule, written out: 1..min(cap, 512), floor(512 x 1.01^k) <= cap, cap."""
    out = set(range(1, min(cap, 512) + 1))
    if cap > 512:
        k = 1
        while True:
            b = math.floor(512 * 1.01 ** k)
            if b > cap:
                break
            out.add(b)
            k += 1
        out.add(cap)
    return sorted(out)


@pytest.mark.parametrize("cap", [0, 1, 5, 512, 513, 517, 518, 600, 1000, 4096, 12345, 200_000])
def test_batch_list_follows_the_rule(cap):
    got = batch_list(cap)
    assert got.dtype == np.int64
    assert got.tolist() == _rule(cap)


def test_batch_list_with_users_keeps_the_per_replica_loads():
    got = batch_list(5000, users=2468).tolist()
    assert -(-2468 // 2) in got and -(-2468 // 3) in got and got == sorted(set(got))
    assert set(_rule(5000)) <= set(got)
