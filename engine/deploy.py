"""Deployment accounting: a model on GPUs under a parallel config -> memory, capacity, SOL times.

Layer: engine. :func:`plan` does the structural work once per (model, GPU, config, options):
placement propagation with communication insertion and fusion for prefill and decode, under the
numeric binding (numbers in the scenario symbols) and the symbolic one (formulas over dims and
parallel degrees), then compiles the numeric programs for vectorized evaluation. :meth:`Plan.at`
evaluates a scenario point; the grid build calls :meth:`Plan.evaluate` with arrays.

Conventions (also on the methodology page):
* ``batch`` is the number of requests one model replica (``tp * pp * cp`` GPUs) holds; ``dp``
  replicas multiply GPUs, not per-GPU numbers.
* prefill runs the whole prompt of ``batch`` requests (TTFT); decode produces one token for each of
  ``batch`` requests at the last context position ``input + output`` (TPOT, an upper bound over
  the generation); logits are computed for the last position only in prefill.
* pipeline: ``k = min(pp, batch)`` micro-batches are in flight; programs are evaluated at one
  micro-batch, whose path through all stages is a decode round (TPOT); TTFT is that path times
  ``(pp + k - 1) / pp``. Memory is that of the fullest stage. Only the main stack is deployed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from math import floor
from typing import Any, Mapping

import numpy as np
import sympy

from engine import kv, quantities, storage, symbols
from engine.api import Evaluation
from engine.cost import CompiledProgram, bound_of, compile_program, intensity, scenario_point, step_totals
from engine.errors import SpecError, Where
from engine.fusion import FusionTable, fuse, match
from engine.hardware import GPU
from engine.parallel import Mesh, ParallelConfig, enumerate_configs
from engine.shapes import Tensor
from engine.placement import ZERO, DeviceTypes, Layout, Placer, Program, Step, phase_rows

PHASES = ("prefill", "decode")
ACT_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
LENGTH = symbols.dim(symbols.LENGTH)


@dataclass(frozen=True, slots=True)
class Options:
    """Everything besides GPU and parallel config that changes the answer."""

    framework: str = "none"          # fusion table (corpus/fusion/<name>.yaml) or "none"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    weight_format: str = "checkpoint"  # or a quant scheme name applied to every matrix
    hbm_fraction: float = 0.9


@dataclass(frozen=True, slots=True)
class Scenario:
    batch: int = 1
    input_len: int = 4096
    output_len: int = 1024


def _where(field_name: str) -> Where:
    return Where("<command line>", field=field_name)


def check(ev: Evaluation, config: ParallelConfig) -> list[str]:
    """Why ``config`` cannot run this model (empty when it can)."""
    problems = config.problems()
    if problems:
        return problems
    mesh = Mesh(config, domain=1 << 30)
    rows = [r for r in ev.numeric.rows.values() if r.stack == "main"]
    dims_table = ev.corpus.dims
    seen = set()
    for row in rows:
        region = "experts" if row.role == "experts" else "default"
        for param, world in row.weight_axes.items():
            group = mesh.world_group(world, region)
            if group is None:
                continue
            name = row.dim_names[param]
            unit = _unit_dim(name, ev, dims_table)
            if unit is None or (unit, group.name) in seen:
                continue
            seen.add((unit, group.name))
            count = int(ev.numeric.values[unit])
            replicable = dims_table[unit].replicate
            if count % group.size and not (replicable and group.size % count == 0):
                what = {"attn_tp": "attention TP (tp / dp_attn)", "moe_tp": "expert TP (tp / ep)"}.get(
                    group.name, group.name)
                problems.append(f"{unit} = {count} is not divisible by {what} = {group.size}")
    experts = [r for r in rows if r.role == "experts" and r.instances != 1]
    if config.ep > 1 and not experts:
        problems.append(f"ep = {config.ep} but the model has no routed experts")
    for row in experts[:1]:
        count = int(row.instances)
        if count % config.ep:
            problems.append(f"n_experts = {count} is not divisible by ep = {config.ep}")
    layers = int(quantities.n_layers(ev.numeric))
    if config.pp > layers:
        problems.append(f"pp = {config.pp} is more than the {layers} layers")
    if config.cp > 1 and config.cp_kind == "ulysses":
        heads = next((int(ev.numeric.values[u]) for u in ("n_heads",) if u in ev.numeric.values), None)
        if heads is not None and heads % (config.attn_tp * config.cp):
            problems.append(f"Ulysses needs n_heads = {heads} divisible by attention TP x cp = "
                            f"{config.attn_tp * config.cp}")
    return problems


def configs_for(ev: Evaluation, n_gpus: int, **limits) -> tuple[list[ParallelConfig], list[tuple]]:
    """The legal configs of ``ev`` on ``n_gpus`` GPUs, and the rejected ones with their reasons."""
    moe = any(r.role == "experts" for r in ev.numeric.rows.values())
    legal, rejected = [], []
    for config in enumerate_configs(n_gpus, moe=moe, **limits):
        problems = check(ev, config)
        if problems:
            rejected.append((config, problems))
        else:
            legal.append(config)
    return legal, rejected


def _unit_dim(name: str, ev: Evaluation, dims_table) -> str | None:
    from engine import expr as exprs
    try:
        parsed = exprs.evaluate(name, exprs.Scope({k: symbols.dim(k) for k in ev.numeric.values}))
    except exprs.ExprError:
        return None
    found = [s.name for s in getattr(parsed, "free_symbols", ()) if s.name in dims_table
             and dims_table[s.name].shard != "none"]
    return found[0] if len(found) == 1 else None


@dataclass
class Plan:
    """The structural result for one (model, GPU, config, options): programs and compiled costs."""

    ev: Evaluation
    gpu: GPU
    config: ParallelConfig
    options: Options
    programs: dict[str, Program]          # numeric, after fusion
    formulas: dict[str, Program]          # symbolic, same steps
    unfused: dict[str, Program]           # numeric, before fusion
    unfused_formulas: dict[str, Program]  # symbolic, before fusion
    compiled: dict[str, CompiledProgram]
    weight_bytes_per_gpu: float
    weight_formula: sympy.Expr
    kv_device_per_request: sympy.Expr    # bytes one device holds per request, in `length`
    act_peak: dict[str, Any] = field(default_factory=dict)

    @property
    def model_id(self) -> str:
        return self.ev.model.model_id

    def evaluate(self, phase: str, batch, seq, ctx) -> dict[str, np.ndarray]:
        return self.compiled[phase].evaluate(batch, seq, ctx)

    def at(self, scenario: Scenario) -> "Deployment":
        return Deployment.build(self, scenario)

    def without_fusion(self) -> "Plan":
        """The same plan with the programs as they were before fusion."""
        compiled = {p: compile_program(self.unfused[p], self.gpu) for p in self.unfused}
        return replace(self, programs=self.unfused, formulas=self.unfused_formulas, compiled=compiled)


def _weights_fn(ev: Evaluation, options: Options):
    corpus, model = ev.corpus, ev.model
    override = None
    if options.weight_format != "checkpoint":
        if options.weight_format not in corpus.schemes:
            raise SpecError(_where("--weight-format"), f"unknown weight format {options.weight_format!r}",
                            "use checkpoint or one of: " + ", ".join(sorted(corpus.schemes)))
        override = replace(model, quant={"*": options.weight_format})
    cache: dict[tuple, list] = {}

    def weights(row):
        key = (row.uid, id(row))
        if key not in cache:
            spec = override or model
            numeric = not any(isinstance(l.numel, sympy.Expr) and l.numel.free_symbols for l in row.leaves)
            cache[key] = [(leaf, *storage.leaf_storage(row, leaf, spec, corpus, numeric)) for leaf in row.leaves]
        return cache[key]
    return weights


def _decider(bound: Mapping[str, sympy.Expr]):
    subs = {symbols.dim(k): v for k, v in bound.items()}

    def decide(value: sympy.Expr) -> int | None:
        if isinstance(value, int):
            return value
        if value.is_number:
            return int(value)
        value = value.subs(subs)
        return int(value) if value.is_number else None
    return decide


def _stage_of_layers(ev: Evaluation, pp: int) -> dict[str, list[int]]:
    """Template component uid -> its layer count on each pipeline stage."""
    total = int(quantities.n_layers(ev.numeric))
    out = {}
    for comp in ev.numeric.components.values():
        if comp.template and comp.stack == "main":
            counts = Counter(min(pp - 1, i * pp // total) for i in comp.layers)
            out[comp.uid] = [counts.get(s, 0) for s in range(pp)]
    return out


def _stage_rows(stored: Mapping[str, sympy.Expr], ev: Evaluation, pp: int) -> list[list[tuple[str, sympy.Expr]]]:
    """Per stage: (row uid, layers of it on the stage). Layers go to stages in order; rows outside
    the layer stack go to the first (embedding) or the last (everything after the stack) stage."""
    per_template = _stage_of_layers(ev, pp)
    stages: list[list] = [[] for _ in range(pp)]
    for uid in stored:
        row = ev.numeric.rows[uid]
        template = next((t for t in per_template if uid.startswith(t + "/")), None)
        if template is not None:
            for s, n in enumerate(per_template[template]):
                if n:
                    stages[s].append((uid, sympy.Integer(n) if pp > 1 else row.repeat))
        else:
            stages[0 if row.role == "embedding" else pp - 1].append((uid, row.repeat))
    return stages


def micro_batches(config: ParallelConfig, scenario: Scenario) -> int:
    """Micro-batches in flight through the pipeline: one per stage, at most one per request."""
    return max(1, min(config.pp, scenario.batch))


def tokens_per_device(config: ParallelConfig, scenario: Scenario) -> dict[str, int]:
    """Tokens one device works on per kernel call, by phase (what fusion size limits are stated in)."""
    batch = scenario.batch / micro_batches(config, scenario)
    prefill = batch * scenario.input_len / (config.dp_attn * config.cp)
    return {"prefill": int(-(-prefill // 1)), "decode": int(-(-batch // config.dp_attn))}


def plan(ev: Evaluation, gpu: GPU, config: ParallelConfig, options: Options = Options(),
         fusion: FusionTable | None = None, scenario: Scenario | None = None) -> Plan:
    """Place, fuse and compile ``ev`` on ``gpu`` under ``config`` (raises SpecError if illegal).

    ``scenario`` only decides fusions with a token limit (``max_tokens``); without it they are
    not applied."""
    problems = check(ev, config)
    if problems:
        raise SpecError(_where("parallel config"), f"{config.label()} cannot run {ev.model.model_id}: "
                        + "; ".join(problems), "pick degrees that divide the model's heads, experts and layers")
    if options.kv_dtype not in kv.KV_DTYPE_BYTES:
        raise SpecError(_where("--kv-dtype"), f"unknown KV dtype {options.kv_dtype!r}",
                        "use one of: " + ", ".join(kv.KV_DTYPE_BYTES))
    if options.act_dtype not in ACT_DTYPE_BYTES:
        raise SpecError(_where("--act-dtype"), f"unknown activation dtype {options.act_dtype!r}",
                        "use one of: " + ", ".join(ACT_DTYPE_BYTES))
    if not 0 < options.hbm_fraction <= 1:
        raise SpecError(_where("--hbm-fraction"), f"{options.hbm_fraction} is not in (0, 1]", "e.g. 0.9")
    domain = min(gpu.scale_up_domain, config.gpus_per_node or gpu.scale_up_domain)
    types = DeviceTypes(ACT_DTYPE_BYTES[options.act_dtype], kv.KV_DTYPE_BYTES[options.kv_dtype])
    weights = _weights_fn(ev, options)
    decide = _decider(ev.bound)
    programs, formulas, unfused, unfused_sym, placers = {}, {}, {}, {}, {}
    for phase in PHASES:
        built = []
        for analysis, symbolic in ((ev.numeric, False), (ev.symbolic, True)):
            placer = Placer(analysis, Mesh(config, domain, symbolic), phase, ev.corpus.dims, weights, types, decide)
            built.append((_with_pipeline(placer.run(phase_rows(analysis, phase)), placer), placer))
        (num, num_placer), (sym, sym_placer) = built
        unfused[phase], unfused_sym[phase], placers[phase] = num, sym, (num_placer, sym_placer)
        tokens = tokens_per_device(config, scenario)[phase] if scenario else None
        matches = match(num, fusion, gpu, config, phase, tokens) if fusion else []
        programs[phase], formulas[phase] = fuse(num, matches), fuse(sym, matches)
    compiled = {p: compile_program(programs[p], gpu) for p in PHASES}
    # memory: the fullest pipeline stage (weights are stored as the prefill placement says)
    stored, sym_stored = unfused["prefill"].stored, unfused_sym["prefill"].stored
    stages = _stage_rows(stored, ev, config.pp)
    per_stage = [sum((stored[u] * n for u, n in rows), ZERO) for rows in stages]
    worst = max(range(config.pp), key=lambda s: float(per_stage[s]))
    weight_formula = sum((sym_stored[u] * (n if config.pp > 1 else ev.symbolic.rows[u].repeat)
                          for u, n in stages[worst]), ZERO)
    kv_dev = _kv_per_device(ev, unfused["decode"], placers["decode"][0], types, stages[worst])
    return Plan(ev, gpu, config, options, programs, formulas, unfused, unfused_sym, compiled, float(per_stage[worst]),
                weight_formula, kv_dev)


def _kv_per_device(ev: Evaluation, program: Program, placer: Placer, types: DeviceTypes,
                   stage: list[tuple[str, sympy.Expr]]) -> sympy.Expr:
    """Cache bytes one device holds for one request at context ``length`` (its stage's layers)."""
    total = ZERO
    for cache in kv.caches(ev.numeric):
        row = ev.numeric.rows[cache.node_uid]
        layout = program.layouts.get(cache.node_uid)
        if layout is None:
            continue
        split = placer.split(Tensor(row.out.axes[1:]), Layout(layout.shards[1:]))
        count = _layers_on_stage(ev, cache.node_uid, stage)
        total += kv.tokens_kept(cache, LENGTH) * cache.per_token * types.kv_bytes / split * count
    return total


def _layers_on_stage(ev: Evaluation, uid: str, stage: list[tuple[str, sympy.Expr]]) -> sympy.Expr:
    """Layers of ``uid``'s template on a stage, read off any weighted row of the same template."""
    template = next((c.uid for c in ev.numeric.components.values()
                     if c.template and uid.startswith(c.uid + "/")), None)
    for row_uid, n in stage:
        if template and row_uid.startswith(template + "/"):
            return n
    return ZERO


def _with_pipeline(program: Program, placer: Placer) -> Program:
    """Add the stage-boundary send/recv of the hidden state leaving the layer stack (pp - 1 hops)."""
    config = placer.mesh.config
    if config.pp == 1:
        return program
    steps = {s.uid: s for s in program.steps}
    in_layers = {s.uid for s in program.steps if "[" in s.component_uid}   # template uids: layers[t]
    after = next((s for s in program.steps if s.uid not in in_layers and s.kind != "input"
                  and any(i in in_layers for i in s.inputs)), None)
    if after is None:
        return program
    source = steps[next(i for i in after.inputs if i in in_layers)]
    link = "scale_up" if config.cp * config.tp * config.pp <= placer.mesh.domain else "scale_out"
    step = Step(f"{source.uid}>send_recv[pp]", "send_recv(pp)", "send_recv", "comm", "pipeline",
                after.component, after.component_uid, placer.mesh.degrees["pp"] - 1, (source.uid,), ZERO,
                2 * source.out_read, ZERO, source.out_read, "bf16", source.layout, source.out,
                source.out_read, group="pp", link=link, written=source.out_read)
    return replace(program, steps=program.steps + (step,))


def _scalar(value) -> float:
    return float(np.asarray(value).reshape(-1)[0])


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
        ev, gpu, config, options = plan.ev, plan.gpu, plan.config, plan.options
        if scenario.batch < 1 or scenario.input_len < 1 or scenario.output_len < 0:
            raise SpecError(_where("--batch/--input/--output"), f"bad scenario {scenario}",
                            "batch and input must be positive, output not negative")
        max_ctx = int(ev.numeric.max_context)
        length = scenario.input_len + scenario.output_len
        k = micro_batches(config, scenario)
        phases, ops = {}, {}
        for phase in PHASES:
            point = scenario_point(phase, scenario.input_len, scenario.output_len)
            values = plan.evaluate(phase, scenario.batch / k, point["seq"], point["ctx"])
            program, formulas = plan.programs[phase], plan.formulas[phase]
            rows = []
            for i, (step, sym) in enumerate(zip(program.steps, formulas.steps)):
                if step.view:
                    continue     # views move no data and launch no kernel
                v = {k: _scalar(values[k][i]) for k in values}
                f_sym, b_sym, c_sym, w_sym = step_totals(sym)
                rows.append({
                    "op_uid": step.uid, "op_name": step.name, "op": step.op, "component": step.component,
                    "role": step.role, "kind": step.kind, "repeat": int(step.repeat) if step.repeat.is_number else None,
                    "flops": v["flops"], "bytes": v["bytes"], "weight_bytes": v["weight_bytes"],
                    "comm_bytes": v["comm_bytes"],
                    "intensity": intensity(v["flops"], v["bytes"]),
                    "t_compute_s": v["t_compute"], "t_memory_s": v["t_memory"], "t_comm_s": v["t_comm"],
                    "t_sol_s": v["t_sol"], "bound": bound_of(v["t_compute"], v["t_memory"], v["t_comm"]),
                    "link": step.link, "group": step.group, "compute_dtype": gpu.compute_dtype(step.compute_dtype),
                    "parts": list(step.parts),
                    "flops_formula": str(f_sym), "bytes_formula": str(b_sym), "comm_bytes_formula": str(c_sym),
                    "weight_bytes_formula": str(w_sym),
                })
            ops[phase] = rows
            t = {k: sum(r[k] for r in rows) for k in ("t_compute_s", "t_memory_s", "t_comm_s", "t_sol_s")}
            phases[phase] = {"step_time_s": t["t_sol_s"], "compute_time_s": t["t_compute_s"],
                             "memory_time_s": t["t_memory_s"], "comm_time_s": t["t_comm_s"],
                             "flops": sum(r["flops"] for r in rows), "bytes": sum(r["bytes"] for r in rows),
                             "weight_bytes": sum(r["weight_bytes"] for r in rows),
                             "comm_bytes": sum(r["comm_bytes"] for r in rows),
                             "bound": _phase_bound(rows)}
        summary = _capacity(plan, scenario, length)
        replica = config.tp * config.pp * config.cp
        # one micro-batch's path through all stages is a decode round (every request gets a token);
        # the last of k prefill micro-batches leaves the pipeline (pp + k - 1) stage-times in
        ttft = phases["prefill"]["step_time_s"] * (config.pp + k - 1) / config.pp
        tpot = phases["decode"]["step_time_s"]
        summary.update({
            "model_id": ev.model.model_id, "gpu": gpu.key, "n_gpus": config.n_gpus,
            "gpus_per_node": min(gpu.scale_up_domain, config.gpus_per_node or gpu.scale_up_domain),
            "tp": config.tp, "ep": config.ep, "dp_attn": config.dp_attn, "pp": config.pp, "cp": config.cp,
            "cp_kind": config.cp_kind if config.cp > 1 else "", "dp": config.dp,
            "framework": options.framework, "weight_format": options.weight_format,
            "kv_dtype": options.kv_dtype, "act_dtype": options.act_dtype,
            "batch": scenario.batch, "micro_batches": k,
            "input_len": scenario.input_len, "output_len": scenario.output_len,
            "ttft_s": ttft, "tpot_s": tpot,
            "prefill_tokens_per_s_per_gpu": scenario.batch * scenario.input_len / ttft / replica,
            "tokens_per_s_per_gpu": scenario.batch / tpot / replica,
            "extrapolated": length > max_ctx, "max_context": max_ctx,
        })
        return Deployment(plan, scenario, summary, phases, ops)


def _phase_bound(rows) -> str:
    totals = {b: sum(r["t_sol_s"] for r in rows if r["bound"] == b) for b in ("compute", "memory", "comm")}
    return max(totals, key=totals.get)


def _capacity(plan: Plan, scenario: Scenario, length: int) -> dict[str, Any]:
    """Memory per GPU, KV budget and the requests that fit (per model replica)."""
    ev, gpu, config, options = plan.ev, plan.gpu, plan.config, plan.options
    usable = gpu.hbm_bytes * options.hbm_fraction
    weights = plan.weight_bytes_per_gpu
    budget = usable - weights
    kv_dev = float(plan.kv_device_per_request.subs(LENGTH, length))
    kv_dev_prompt = float(plan.kv_device_per_request.subs(LENGTH, scenario.input_len))
    kv_request = float(kv.bytes_per_request(ev.numeric, length, options.kv_dtype))
    per_rank = -(-scenario.batch // config.dp_attn)      # requests on the fullest attention replica
    max_requests = config.dp_attn * floor(budget / kv_dev) if budget > 0 and kv_dev > 0 else 0
    # prefill activations: the largest kernel working set (activations, no weights) of one
    # request's prompt step; a replica holds one micro-batch's worth at a time
    one = plan.evaluate("prefill", config.dp_attn, scenario.input_len, scenario.input_len)
    act_per_request = max(((_scalar(one["bytes"][i]) - _scalar(one["weight_bytes"][i])) / float(s.repeat)
                           for i, s in enumerate(plan.programs["prefill"].steps)
                           if s.kind != "comm" and float(s.repeat) > 0), default=0.0)
    in_flight = -(-per_rank // micro_batches(config, scenario))
    max_prefill = config.dp_attn * floor(budget / (kv_dev_prompt + act_per_request)) if budget > 0 else 0
    decode_need = weights + per_rank * kv_dev
    prefill_need = weights + per_rank * kv_dev_prompt + in_flight * act_per_request
    need = max(decode_need, prefill_need)
    return {
        "hbm_bytes_per_gpu": gpu.hbm_bytes, "usable_bytes_per_gpu": usable,
        "weight_bytes_per_gpu": weights, "kv_bytes_per_request": kv_request,
        "kv_bytes_per_request_per_gpu": kv_dev, "kv_budget_bytes_per_gpu": max(budget, 0.0),
        "kv_bytes_per_gpu": per_rank * kv_dev, "activation_bytes_per_gpu": in_flight * act_per_request,
        "max_concurrent_requests": max_requests, "max_prefill_batch": max_prefill,
        "fits": need <= usable, "shortfall_bytes": max(need - usable, 0.0),
    }
