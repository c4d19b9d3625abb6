"""Helpers shared by the deployment tests: plans are built once per (model, GPU, config, framework)."""
from __future__ import annotations

import contextlib
import functools
import io
import json
import math

from engine.deploy import Options, Scenario, plan
from engine.deploy.fusion_table import load_tables
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


def deploy_json(model: str, gpu: str, degrees: dict, framework: str, kv: str, prompt: int, output: int, batch: int,
                extra: tuple = ()) -> dict:
    """``archledger deploy MODEL --gpu G --framework F --kv-dtype D --input I --output O --batch B
    [--tp N ...] [extra] --json``: its printed JSON (deployment, phases, ops), what the browser tests
    hold the pages to."""
    from engine.cli import main
    argv = ["deploy", model, "--gpu", gpu, "--framework", framework, "--kv-dtype", kv, "--input", str(prompt),
            "--output", str(output), "--batch", str(batch), "--json", *extra]
    for name, value in degrees.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(argv)
    out = json.loads(buffer.getvalue())
    assert code == (0 if out["deployment"]["fits"] else 1), (code, out["deployment"]["fits"])
    return out


#: A sizing point's columns (archledger plan, fronts and sizing tables) and the ``archledger deploy``
#: fields they equal at the same config and batch: the search serves by the steady state of
#: continuous batching (docs/deployment.md "Steady-state capacity"), the worst case beside it.
PLAN_FROM_DEPLOY = {"ttft_s": "ttft_s", "tpot_s": "tpot_mean_s", "tpot_last_s": "tpot_s",
                    "tokens_per_s_per_gpu": "tokens_per_s_per_gpu_steady",
                    "max_concurrent_requests": "max_concurrent_requests_steady",
                    "max_concurrent_requests_worst": "max_concurrent_requests"}


def served_in_steady_state(summary: dict, batch: int) -> bool:
    """Whether deploy's summary serves ``batch`` requests per replica as the sizing search does."""
    return bool(summary["fits_steady"]) and batch <= summary["max_concurrent_requests_steady"]


def assert_close(got, want, what) -> None:
    """A page's number against the CLI's: equal truth values for flags, else within 1e-9 relative."""
    if isinstance(want, bool) or isinstance(got, bool):
        assert bool(got) == bool(want), what
        return
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-300), (what, got, want)


def direct_column(compiled, index, args, shape):
    """Column ``index`` of a :class:`engine.deploy.cost.CompiledProgram` with every step function
    called (no table, no value memo): the plain form the cost tests compare the fast paths with."""
    import numpy as np
    fns = compiled._columns[index] if index < 4 else compiled._calls
    out = np.empty((len(fns),) + shape)
    for i, f in enumerate(fns):
        out[i] = f(*args) if callable(f) else f
    return out


def pool_search(model_id: str, gpu_names: list[str], input_len: int, output_len: int, max_gpus: int):
    """(the GPUs, ``archledger plan``'s search over them with prefill pools, vLLM, no SLA bound):
    what the disaggregated sizing tests pair up."""
    from engine.serving.sizing import SLA, search
    gpus = [GPUS[g] for g in gpu_names]
    return gpus, search(_evaluation(model_id), gpus, input_len, output_len, SLA(1e30, 1e30), max_gpus=max_gpus,
                        options=Options(framework="vllm"), fusion=TABLES["vllm"], pools=True)


def pool_pairs(searched) -> list[tuple]:
    """Every (prefill GPU, decode GPU, prefill records, decode search) pair of :func:`pool_search`'s
    result, the prefill records cut at the slowest scale-out link (what disagg_sizing.candidates pairs)."""
    import engine.serving.disagg_sizing as ds
    gpus, res = searched
    slowest = min(g.scale_out_bytes_per_s for g in gpus)
    by_key = {g.key: g for g in gpus}
    return [(by_key[p.gpu], by_key[d.gpu], ds.prefill_records(p, slowest_bytes_per_s=slowest), d)
            for p in res for d in res]

def structure_cache(model_id: str):
    """A fresh :class:`engine.deploy.structure_cache.StructureCache` of a corpus model with the
    corpus's fusion tables (the sizing tests' module fixtures)."""
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.structure_cache import StructureCache
    from tests.conftest import _evaluation
    ev = _evaluation(model_id)
    return StructureCache(ev, load_tables(ev.corpus.root / "fusion"))


def finish_one_ask(table, steps: int, row: int, seconds: float, outside: bool, calls: float):
    """:func:`engine.deploy.measured.finish` with ``detail`` of a hand-made program: ``steps`` steps
    at two points, each bound 1 us; step ``row`` covered by ``table`` at the second point alone (GEMM
    m=64 n=4096 k=2048, its table time ``seconds`` per call, ``outside`` the table's grid or not,
    ``calls`` per step). Returns (times, covered, texts)."""
    import numpy as np
    from engine.deploy import measured
    t_sol = np.full((steps, 2), 1e-6)
    g = measured.Gathered(t_sol / measured.DEFAULT_EFFICIENCY, np.zeros((steps, 2), dtype=bool), t_sol, [])
    a = measured.Ask(row, np.array([1]), np.array([[64.0, 4096.0, 2048.0]]), [table], ("gemm",), calls, "")
    a.found = [(np.array([seconds]), np.array([outside]))]
    g.asks.append(a)
    return measured.finish(g, detail=True)
