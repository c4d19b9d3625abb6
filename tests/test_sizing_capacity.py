"""The sizing search skips a config's structure only when no request can fit: checked against the
capacity of the structure itself.

:meth:`engine.serving.sizing._Evaluator.cannot_fit` decides from the placements alone (weights,
runtime reserve, KV per request per GPU); :meth:`_Evaluator.capacity` reads the fused and compiled
structure (with the prefill working set). Whenever the first says "cannot fit", the second must
say 0 requests, on configs with pipeline stages, expert parallelism and DP-attention, at the
sizing scenario's output and at a prefill pool's one token; and the shortcut must fire on some of
them (models too large for a few GPUs), or the test would prove nothing.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options
from engine.serving.disagg import PREFILL_OUTPUT
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import find_gpu, load_gpus
from engine.serving.sizing import _Evaluator, _stored_bytes, legal_configs
from engine.deploy.structure_cache import StructureCache

from tests.conftest import _evaluation

INPUT, OUTPUT = 8192, 1024


@pytest.mark.parametrize("model_id, gpus, moe", [
    ("meta-llama/Meta-Llama-3.1-405B", ["H100", "B200", "MI355X"], False),     # dense: tp, pp, dp_attn
    ("moonshotai/Kimi-K2-Instruct", ["B300", "MI355X"], True),                 # MoE: ep, dp_attn, pp
])
def test_cannot_fit_only_where_the_structure_holds_no_request(model_id, gpus, moe):
    ev = _evaluation(model_id)
    tables = load_tables(ev.corpus.root / "fusion")
    cache = StructureCache(ev, tables)
    ev_ = _Evaluator(ev, Options(framework="vllm"), tables["vllm"], cache)
    stored = _stored_bytes(ev)
    outs = np.array([OUTPUT, PREFILL_OUTPUT])
    skipped = checked = 0
    kinds = set()
    for name in gpus:
        gpu = find_gpu(load_gpus(), name)
        usable = gpu.hbm_bytes * 0.9
        for config in legal_configs(ev, 8):
            if stored / config.n_gpus >= usable:        # the search's weights bound comes first
                continue
            checked += 1
            if ev_.cannot_fit(config, gpu, INPUT, outs):
                skipped += 1
                kinds.add((config.pp > 1, config.ep > 1, config.dp_attn > 1))
                assert ev_.capacity(config, gpu, INPUT, outs).tolist() == [0, 0], config.label()
            elif ev_.cannot_fit(config, gpu, INPUT, np.array([OUTPUT])):
                assert ev_.capacity(config, gpu, INPUT, np.array([OUTPUT])).tolist() == [0], config.label()
    assert skipped and skipped < checked, (skipped, checked)
    assert any(pp for pp, _, _ in kinds) and any(dp for _, _, dp in kinds), kinds
    assert not moe or any(ep for _, ep, _ in kinds), kinds
