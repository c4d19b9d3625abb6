"""Consistency tests for the sizing step's speed paths of engine/serving/sizing.py and engine/serving/fronts.py:
each fast path gives the plain path's answers, bit for bit, on real corpus models.

* :func:`engine.serving.pareto.front` (only the points a sample of them does not strictly dominate
  are sorted) returns the indices, in the order, of sorting every point, on a real search's points
  (with a sample of every point down to one in 64) and on random points with ties, infinities and NaNs.
* :func:`engine.serving.fronts.evaluate_model`'s disagg columns (appended per column) are the
  per-row appends' values, types included.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options
from engine.serving import pareto
from engine.serving.disagg import links
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import find_gpu, load_gpus
from engine.serving.pareto import front
from engine.serving.sizing import SLA, search

from tests.conftest import _evaluation

MODEL = "Qwen/Qwen3-8B"


@pytest.fixture(scope="module")
def pooled():
    """A pooled search on two GPU types of two archs (vllm: the build's disagg framework)."""
    ev = _evaluation(MODEL)
    tables = load_tables(ev.corpus.root / "fusion")
    gpus = [find_gpu(load_gpus(), name) for name in ("H100", "B200")]
    return ev, gpus, search(ev, gpus, 8192, 1024, SLA(1e30, 1e30), max_gpus=4, options=Options(framework="vllm"),
                            fusion=tables["vllm"], pools=True)


def plain_front(x, y) -> np.ndarray:
    """The front by sorting every point (x decreasing, then y decreasing, stable)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not x.size:
        return np.zeros(0, dtype=int)
    order = np.lexsort((-y, -x))
    ys = y[order]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(ys)[:-1]))
    return order[ys > best_before]


def same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("sample", [64, 7, 1])
def test_front_consistency_on_search_points(pooled, monkeypatch, sample):
    monkeypatch.setattr(pareto, "FRONT_SAMPLE", sample)
    _, _, results = pooled
    for res in results:
        p = res.points
        assert len(p["batch"]) > 1000
        x, y = p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]
        got = front(x, y)
        assert same(got, plain_front(x, y)) and len(got) > 3
        # with exact duplicates of every point (the first of each is kept)
        assert same(front(np.tile(x, 2), np.tile(y, 2)), plain_front(np.tile(x, 2), np.tile(y, 2)))


@pytest.mark.parametrize("sample", [64, 3, 1])
def test_front_consistency_on_ties_and_non_finite(monkeypatch, sample):
    monkeypatch.setattr(pareto, "FRONT_SAMPLE", sample)
    rng = np.random.default_rng(11)
    for trial in range(600):
        n = int(rng.integers(0, 300))
        if trial % 2:
            x, y = rng.integers(0, 9, n).astype(float), rng.integers(0, 9, n).astype(float)
        else:
            x, y = rng.random(n), rng.random(n)
        for values, special in ((x, np.nan), (y, np.nan), (x, np.inf), (y, np.inf), (x, -np.inf)):
            if n and rng.random() < 0.2:
                values[rng.integers(0, n, 3)] = special
        assert same(front(x, y), plain_front(x, y)), trial


def test_disagg_columns_consistency_with_rows(tmp_path):
    """The disagg columns equal what appending row by row gave (the pre-column code, replayed here)."""
    from engine.serving import fronts
    from engine.serving.disagg_sizing import candidates, records
    from engine.serving.disagg import transfer_bytes
    from engine.language.kv import KV_DTYPE_BYTES
    grid = tmp_path / "corpus" / "grid.yaml"
    grid.parent.mkdir()
    grid.write_text("sizing:\n  scenarios: [{input: 8192, output: 1024}]\n  gpus: [H100, B200]\n"
                    "  frameworks: [vllm]\n  kv_dtypes: [bf16]\n  max_gpus: 2\n")
    ev = _evaluation(MODEL)
    disagg: dict = {}
    fronts.evaluate_model(ev, grid, None, None, disagg)
    assert len(disagg["model_id"]) > 100
    gpus = [find_gpu(load_gpus(), name) for name in ("H100", "B200")]
    results = search(ev, gpus, 8192, 1024, SLA(1e30, 1e30), max_gpus=2, options=Options(framework="vllm"),
                     fusion=load_tables(ev.corpus.root / "fusion")["vllm"], pools=True)
    prefill, decode = candidates(results, gpus, 1024)
    kv_request = float(transfer_bytes(ev, 8192, KV_DTYPE_BYTES["bf16"]))
    want: dict = {k: [] for k in fronts.DISAGG_SCHEMA}
    for gpu in gpus:
        rows = []
        pres = prefill[gpu.key]
        for c, cfg in enumerate(pres.pool_configs):
            t, b = records(pres, c)
            rows += [("prefill", cfg, int(bb), float(tt), None) for tt, bb in zip(t.tolist(), b.tolist())]
        dres = decode[gpu.key]
        if dres.points:
            p = dres.points
            rows += [("decode", dres.configs[int(k)], int(bb), float(tt), float(tp))
                     for k, bb, tt, tp in zip(p["config"].tolist(), p["batch"].tolist(), p["ttft_s"].tolist(),
                                              p["tpot_s"].tolist())]
        share = {**pres.kv_share, **dres.kv_share}
        up, out = links(gpu, gpu)
        ranks = {"prefill": 0, "decode": 0}
        for pool, cfg, batch, ttft, tpot in rows:
            row = {"model_id": ev.model.model_id, "gpu": gpu.key, "framework": "vllm", "kv_dtype": "bf16",
                   "input_len": 8192, "output_len": 1024, "extrapolated": 8192 + 1024 > int(ev.numeric.max_context),
                   "max_gpus": 2, "pool": pool, "rank": ranks[pool], "config": cfg.label(), "n_gpus": cfg.n_gpus,
                   "tp": cfg.tp, "ep": cfg.ep, "dp_attn": cfg.dp_attn, "pp": cfg.pp, "batch": batch, "ttft_s": ttft,
                   "tpot_s": tpot, "kv_share_bytes": float(share[cfg]), "kv_transfer_bytes": kv_request,
                   "usd_per_gpu_hour": gpu.price_usd_per_hour, "scale_up_domain": int(gpu.scale_up_domain),
                   "scale_up_alpha_s": float(up.alpha_s), "scale_up_bytes_per_s": float(up.bytes_per_s),
                   "scale_out_alpha_s": float(out.alpha_s), "scale_out_bytes_per_s": float(out.bytes_per_s),
                   "pairs_with": "H100,B200"}     # both vendor: NVIDIA (gpus/h100-sxm.yaml, gpus/b200.yaml)
            ranks[pool] += 1
            for k, v in row.items():
                want[k].append(v)
    assert disagg.keys() == want.keys()
    for k in want:
        assert [(type(v), v) for v in disagg[k]] == [(type(v), v) for v in want[k]], k
