"""Speed-of-light results of a plan at scenario points: phase times, capacity, the deployment row.

Layer: engine. :func:`summarize` is vectorized: ``batch``, ``input_len`` and ``output_len`` may be
broadcastable arrays, and every field comes back as an array of their broadcast shape. The grid
build calls it with whole sweeps; ``archledger deploy`` (:meth:`Deployment.build`) with one
point, then adds the per-op table. Field names and units are those of the Parquet schema.

* ``step_time_s`` of a phase = sum over its steps of SOL = max(t_compute, t_memory, t_comm);
  ``bound`` = the term whose steps take most of that time.
* TTFT = prefill path x (pp + k - 1) / pp and TPOT = decode path, k = micro-batches in flight.
* Capacity per GPU: usable = hbm_fraction x HBM; KV budget = usable - weights; requests =
  dp_attn x floor(budget / KV per request per GPU); prefill also holds the largest kernel working
  set of the prompt step per request in flight.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import kv
from engine.cost import BOUNDS, bound_of, intensity, step_totals
from engine.deploy import PHASES, Plan, Scenario, _where, micro_batches
from engine.errors import SpecError


def _ceil_div(a, b):
    return -(-np.asarray(a) // b)


def phase_times(plan: Plan, phase: str, batch, seq, ctx) -> dict[str, np.ndarray]:
    """Phase totals over the broadcast shape of the inputs (times in seconds, bytes, FLOPs)."""
    v = plan.evaluate(phase, batch, seq, ctx, weights=True)
    terms = np.stack([v["t_compute"], v["t_memory"], v["t_comm"]])        # (3, steps, ...)
    which = np.argmax(terms, axis=0)                                       # bound of each step
    by_bound = np.stack([np.where(which == i, v["t_sol"], 0.0).sum(axis=0) for i in range(3)])
    return {"step_time_s": v["t_sol"].sum(axis=0), "compute_time_s": v["t_compute"].sum(axis=0),
            "memory_time_s": v["t_memory"].sum(axis=0), "comm_time_s": v["t_comm"].sum(axis=0),
            "flops": v["flops"].sum(axis=0), "bytes": v["bytes"].sum(axis=0),
            "weight_bytes": v["weight_bytes"].sum(axis=0), "comm_bytes": v["comm_bytes"].sum(axis=0),
            "bound": np.asarray(BOUNDS)[np.argmax(by_bound, axis=0)]}


def activation_per_request(plan: Plan, input_len) -> np.ndarray:
    """Largest kernel working set (activations and caches, no weights) of one request's prompt step."""
    config = plan.structure.config
    inp = np.asarray(input_len, dtype=float)
    v = plan.evaluate("prefill", config.dp_attn, inp, inp, weights=True)   # one request per replica
    steps = plan.structure.programs["prefill"].steps
    keep = [i for i, s in enumerate(steps) if s.kind != "comm" and float(s.repeat) > 0]
    if not keep:
        return np.zeros_like(inp)
    repeat = np.array([float(steps[i].repeat) for i in keep]).reshape((-1,) + (1,) * inp.ndim)
    return ((v["bytes"][keep] - v["weight_bytes"][keep]) / repeat).max(axis=0)


def summarize(plan: Plan, batch, input_len, output_len) -> dict[str, Any]:
    """Every deployment field at the broadcast of ``batch`` x ``input_len`` x ``output_len``."""
    s, gpu, options = plan.structure, plan.gpu, plan.options
    config, ev = s.config, s.ev
    batch, input_len, output_len = (np.asarray(x) for x in (batch, input_len, output_len))
    length = input_len + output_len
    k = micro_batches(config, batch)
    prefill = phase_times(plan, "prefill", batch / k, input_len, input_len)
    decode = phase_times(plan, "decode", batch / k, 1.0, length)
    usable = gpu.hbm_bytes * options.hbm_fraction
    weights = s.weight_bytes_per_gpu
    budget = usable - weights
    kv_dev = np.asarray(s.kv_device_fn(length, plan.kv_bytes), dtype=float)
    kv_dev_prompt = np.asarray(s.kv_device_fn(input_len, plan.kv_bytes), dtype=float)
    per_rank = _ceil_div(batch, config.dp_attn)           # requests on the fullest attention replica
    act = activation_per_request(plan, input_len)
    in_flight = _ceil_div(per_rank, k)
    positive = budget > 0
    max_requests = np.where(positive & (kv_dev > 0),
                            config.dp_attn * np.floor(np.maximum(budget, 0) / np.where(kv_dev > 0, kv_dev, 1)), 0)
    max_prefill = np.where(positive, config.dp_attn * np.floor(np.maximum(budget, 0) / (kv_dev_prompt + act)), 0)
    need = np.maximum(weights + per_rank * kv_dev, weights + per_rank * kv_dev_prompt + in_flight * act)
    replica = config.tp * config.pp * config.cp
    ttft = prefill["step_time_s"] * (config.pp + k - 1) / config.pp
    tpot = decode["step_time_s"]
    max_ctx = int(ev.numeric.max_context)
    shape = np.broadcast_shapes(batch.shape, input_len.shape, output_len.shape)

    def full(x):
        return np.broadcast_to(np.asarray(x), shape)

    return {
        "model_id": ev.model.model_id, "gpu": gpu.key, "n_gpus": config.n_gpus,
        "gpus_per_node": s.domain, "tp": config.tp, "ep": config.ep, "dp_attn": config.dp_attn,
        "pp": config.pp, "cp": config.cp, "cp_kind": config.cp_kind if config.cp > 1 else "", "dp": config.dp,
        "config": config.label(), "framework": options.framework, "weight_format": options.weight_format,
        "kv_dtype": options.kv_dtype, "act_dtype": options.act_dtype,
        "batch": full(batch), "micro_batches": full(k), "input_len": full(input_len),
        "output_len": full(output_len),
        "hbm_bytes_per_gpu": gpu.hbm_bytes, "usable_bytes_per_gpu": usable, "weight_bytes_per_gpu": weights,
        "kv_bytes_per_request": full(kv.bytes_per_request_fn(ev.numeric, options.kv_dtype)(length)),
        "kv_bytes_per_request_per_gpu": full(kv_dev), "kv_budget_bytes_per_gpu": max(budget, 0.0),
        "kv_bytes_per_gpu": full(per_rank * kv_dev), "activation_bytes_per_gpu": full(in_flight * act),
        "max_concurrent_requests": full(max_requests.astype(np.int64)),
        "max_prefill_batch": full(max_prefill.astype(np.int64)),
        "fits": full(need <= usable), "shortfall_bytes": full(np.maximum(need - usable, 0.0)),
        "ttft_s": full(ttft), "tpot_s": full(tpot),
        "prefill_tokens_per_s_per_gpu": full(batch * input_len / ttft / replica),
        "tokens_per_s_per_gpu": full(batch / tpot / replica),
        "extrapolated": full(length > max_ctx), "max_context": max_ctx,
        "phases": {"prefill": {k2: full(v) for k2, v in prefill.items()},
                   "decode": {k2: full(v) for k2, v in decode.items()}},
    }


def _scalar(value) -> Any:
    value = np.asarray(value).reshape(-1)[0] if isinstance(value, np.ndarray) else value
    return value.item() if hasattr(value, "item") else value


@dataclass
class Deployment:
    """One scenario point of a plan: the summary (Parquet field names) and per-phase op tables."""

    plan: Plan
    scenario: Scenario
    summary: dict[str, Any]
    phases: dict[str, dict[str, Any]]
    ops: dict[str, list[dict[str, Any]]]

    @staticmethod
    def build(plan: Plan, scenario: Scenario) -> "Deployment":
        if scenario.batch < 1 or scenario.input_len < 1 or scenario.output_len < 0:
            raise SpecError(_where("--batch/--input/--output"), f"bad scenario {scenario}",
                            "batch and input must be positive, output not negative")
        out = summarize(plan, scenario.batch, scenario.input_len, scenario.output_len)
        raw = out.pop("phases")
        phases = {p: {k: _scalar(v) for k, v in raw[p].items()} for p in PHASES}
        summary = {k: _scalar(v) for k, v in out.items()}
        k = int(summary["micro_batches"])
        ops = {p: op_rows(plan, p, scenario.batch / k, scenario) for p in PHASES}
        return Deployment(plan, scenario, summary, phases, ops)


def op_rows(plan: Plan, phase: str, batch: float, scenario: Scenario) -> list[dict[str, Any]]:
    """The per-op SOL table of one phase at one point, each row with its formulas."""
    from engine.cost import scenario_point
    point = scenario_point(phase, scenario.input_len, scenario.output_len)
    values = plan.evaluate(phase, batch, point["seq"], point["ctx"], weights=True)
    program, formulas = plan.structure.programs[phase], plan.structure.formulas[phase]
    rows = []
    for i, (step, sym) in enumerate(zip(program.steps, formulas.steps)):
        if step.view:
            continue     # views move no data and launch no kernel
        v = {key: float(np.asarray(values[key][i]).reshape(-1)[0]) for key in values}
        f_sym, b_sym, c_sym, w_sym = step_totals(sym)
        rows.append({
            "op_uid": step.uid, "op_name": step.name, "op": step.op, "component": step.component,
            "role": step.role, "kind": step.kind,
            "repeat": int(step.repeat) if step.repeat.is_number else None,
            "flops": v["flops"], "bytes": v["bytes"], "weight_bytes": v["weight_bytes"],
            "comm_bytes": v["comm_bytes"], "intensity": intensity(v["flops"], v["bytes"]),
            "t_compute_s": v["t_compute"], "t_memory_s": v["t_memory"], "t_comm_s": v["t_comm"],
            "t_sol_s": v["t_sol"], "bound": bound_of(v["t_compute"], v["t_memory"], v["t_comm"]),
            "link": step.link, "group": step.group,
            "compute_dtype": plan.gpu.compute_dtype(step.compute_dtype), "parts": list(step.parts),
            "flops_formula": str(f_sym), "bytes_formula": str(b_sym), "comm_bytes_formula": str(c_sym),
            "weight_bytes_formula": str(w_sym),
        })
    return rows
