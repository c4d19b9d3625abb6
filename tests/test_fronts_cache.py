"""The build's sizing step through the structure cache the grid evaluation filled
(engine/deploy/structure_cache.py) gives the rows of a fresh ``archledger plan`` search, point for
point, on GPU types of several archs (shared placements across scale-up domains, shared structures
across archs whose live fusion rules agree) and both frameworks; the front rows are non-dominated
and each is a point the search evaluated; and a point the cache shares across GPU types is the one
``archledger deploy`` computes on its own plan."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from engine.batch import grid_eval
from engine.serving import fronts
from engine.deploy import Options, Scenario
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.serving.sizing import SLA, search
from engine.deploy.structure_cache import StructureCache

from tests.conftest import _evaluation
from tests.deploy_helpers import PLAN_FROM_DEPLOY, deploy

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its grid and sizing evaluation twice.
pytestmark = pytest.mark.xdist_group("fronts_cache")

REPO = Path(__file__).resolve().parent.parent
MODEL, MODEL_ID = "Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B"
# Hopper, Blackwell (8- and 72-GPU domains: one placement), Ampere and CDNA: every fusion signature class
GPUS = ["H100", "B200", "GB200-NVL72", "A100", "MI300X"]
FRAMEWORKS = ["vllm", "sglang"]
INPUT, OUTPUT, MAX_GPUS = 2048, 256, 2
POINTS = ("config", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu", "max_concurrent_requests", "n_gpus",
          "replicas", "total_gpus", "requests_per_s", "tokens_per_s_per_user", "meets_sla")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """(fronts, sizing columns through the grid's cache, the cache, structures the sizing step built,
    fresh searches per framework)."""
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid.update({"gpus": GPUS, "gpu_counts": [1, 2], "frameworks": FRAMEWORKS})
    grid["sizing"] = {"scenarios": [{"input": INPUT, "output": OUTPUT}], "gpus": GPUS, "frameworks": FRAMEWORKS,
                      "kv_dtypes": ["bf16"], "max_gpus": MAX_GPUS}
    path = tmp_path_factory.mktemp("grid") / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    ev = _evaluation(MODEL_ID)
    cache = StructureCache(ev, load_tables())
    grid_eval.evaluate_model(ev, path, None, {}, cache)
    before = cache.built
    f, s = fronts.evaluate_model(ev, path, None, cache)
    gpus = load_gpus()
    fresh = {fw: {r.gpu: r for r in search(ev, [gpus[g] for g in GPUS], INPUT, OUTPUT, SLA(1e30, 1e30),
                                            max_gpus=MAX_GPUS, options=Options(framework=fw),
                                            fusion=load_tables()[fw])}
             for fw in FRAMEWORKS}
    return ev, path, f, s, cache, cache.built - before, fresh


def test_cache_path_rows_equal_a_fresh_plan_search(shared):
    ev, path, f, s, cache, _, fresh = shared
    # the same tables as without the cache (each its own fresh search), value for value
    f0, s0 = fronts.evaluate_model(ev, path)
    assert f == f0 and s == s0
    # and every point of the search (not only the kept ones) through a cache the grid filled
    for fw in FRAMEWORKS:
        again = search(ev, [load_gpus()[g] for g in GPUS], INPUT, OUTPUT, SLA(1e30, 1e30), max_gpus=MAX_GPUS,
                       options=Options(framework=fw), fusion=cache.tables[fw], cache=cache)
        for res in again:
            want = fresh[fw][res.gpu]
            assert [c.label() for c in res.configs] == [c.label() for c in want.configs]
            for name in POINTS:
                assert np.array_equal(res.points[name], want.points[name]), (fw, res.gpu, name)


def test_sizing_step_reuses_the_grids_structures(shared):
    """Over these GPUs and configs the grid already compiled what the search needs at one and
    two GPUs of TP (the grid has no PP-only configs): the step builds only those."""
    _, _, f, _, cache, built, fresh = shared
    fresh_cache = StructureCache(_evaluation(MODEL_ID), load_tables())
    for fw in FRAMEWORKS:
        search(_evaluation(MODEL_ID), [load_gpus()[g] for g in GPUS], INPUT, OUTPUT, SLA(1e30, 1e30),
               max_gpus=MAX_GPUS, options=Options(framework=fw), fusion=fresh_cache.tables[fw], cache=fresh_cache)
    assert 0 < built < fresh_cache.built


def test_front_rows_are_non_dominated_points_of_the_search(shared):
    _, _, f, _, _, _, fresh = shared
    rows = list(zip(*(f[k] for k in ("framework", "gpu", "config", "batch", "rank", "tokens_per_s_per_user",
                                      "tokens_per_s_per_gpu", "ttft_s", "tpot_s"))))
    assert {(r[0], r[1]) for r in rows} == {(fw, g) for fw in FRAMEWORKS for g in GPUS}
    for fw, gpu, config, batch, rank, x0, y0, ttft, tpot in rows:
        res = fresh[fw][gpu]
        p = res.points
        x, y = p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]
        assert not ((x >= x0) & (y >= y0) & ((x > x0) | (y > y0))).any(), (fw, gpu, config, batch)
        k = [c.label() for c in res.configs].index(config)
        hit = np.flatnonzero((p["config"] == k) & (p["batch"] == batch))
        assert hit.size == 1
        assert (p["ttft_s"][hit[0]], p["tpot_s"][hit[0]], x[hit[0]], y[hit[0]]) == (ttft, tpot, x0, y0)
    # ranks run 0.. per (framework, GPU), tokens/s per user decreasing
    for fw in FRAMEWORKS:
        for gpu in GPUS:
            mine = sorted((r[4], r[5]) for r in rows if r[0] == fw and r[1] == gpu)
            assert [m[0] for m in mine] == list(range(len(mine)))
            assert all(a[1] >= b[1] for a, b in zip(mine, mine[1:]))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_shared_structures_give_deploys_numbers(shared, fw):
    """A100 and MI300X (different archs, both without the arch-bound fusions at TP 1) and B200 and
    GB200-NVL72 (one placement for an 8- and a 72-GPU domain) share structures in the cache;
    each point equals ``archledger deploy``'s on its own plan, at both ends of each front."""
    _, _, _, _, _, _, fresh = shared
    for gpu in ("A100", "MI300X", "B200", "GB200-NVL72"):
        res = fresh[fw][gpu]
        front = res.front()
        for r in (front[0], front[-1]):
            config = dict(tp=r["tp"], ep=r["ep"], dp_attn=r["dp_attn"], pp=r["pp"])
            got = deploy(MODEL, gpu, Scenario(r["batch"], INPUT, OUTPUT), fw, **config).summary
            for name in ("ttft_s", "tpot_s", "tpot_last_s", "tokens_per_s_per_gpu"):
                assert got[PLAN_FROM_DEPLOY[name]] == r[name], (gpu, r["config"], r["batch"], name)


def test_sizing_block_takes_every_gpu_and_model(tmp_path):
    """`gpus: all` and `models: all` (the default grid's block): every GPU file and every model."""
    grid = yaml.safe_load((REPO / "tests" / "data" / "grid_tiny.yaml").read_text())
    grid["sizing"] = {"scenarios": [{"input": INPUT, "output": OUTPUT}], "gpus": "all", "frameworks": FRAMEWORKS,
                      "kv_dtypes": ["bf16"], "max_gpus": MAX_GPUS, "models": "all"}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    spec = fronts.load_sizing(path)
    assert spec.gpus is None and spec.models is None and spec.frameworks == tuple(FRAMEWORKS)
    fronts.check(path, load_gpus(), {MODEL_ID})
    grid["sizing"]["gpus"] = "H100"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    with pytest.raises(Exception, match="sizing.gpus"):
        fronts.load_sizing(path)
