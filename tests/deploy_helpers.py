"""Helpers shared by the deployment tests: plans are built once per (model, GPU, config, framework)."""
from __future__ import annotations

import functools

from engine.deploy import Options, Scenario, plan
from engine.deploy.fusion import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig

from tests.conftest import _evaluation, MODEL_IDS

GPUS = load_gpus()
TABLES = load_tables()


def model_id(query: str) -> str:
    hits = [m for m in MODEL_IDS if m.endswith(query)]
    assert len(hits) == 1, (query, hits)
    return hits[0]


@functools.lru_cache(maxsize=None)
def make_plan(model: str, gpu: str, framework: str = "none", scenario: Scenario | None = None,
              kv_dtype: str = "bf16", **config):
    ev = _evaluation(model_id(model))
    options = Options(framework=framework, kv_dtype=kv_dtype)
    return plan(ev, GPUS[gpu], ParallelConfig(**config), options, TABLES.get(framework), scenario)


def deploy(model: str, gpu: str, scenario: Scenario, framework: str = "none", kv_dtype: str = "bf16", **config):
    """A Deployment at ``scenario`` (fusions with token limits decided at that scenario)."""
    return make_plan(model, gpu, framework, scenario, kv_dtype, **config).at(scenario)


def op(deployment, phase: str, uid: str) -> dict:
    """The op row whose uid is ``uid`` (exactly one)."""
    rows = [r for r in deployment.ops[phase] if r["op_uid"] == uid]
    assert len(rows) == 1, (uid, [r["op_uid"] for r in deployment.ops[phase]][:80])
    return rows[0]


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)
