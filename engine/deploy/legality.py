"""Whether a model can run under a parallel config and deployment options: the checks before placing.

Layer: engine.deploy. :func:`check` lists why a config cannot run a model (degrees that do not divide
its heads, experts or layers); :func:`configs_for` enumerates the legal configs of a GPU count;
:func:`validate_options` refuses bad options with a one-line SpecError naming the option. Invariant:
these read the model's numeric analysis and dims table only, never a placement; the per-model memo
(:data:`_SHARDED`) holds the analysis it was computed from.
"""
from __future__ import annotations

from typing import Mapping

import sympy

from engine.language import kv, quantities, symbols
from engine.language.api import Evaluation
from engine.language.errors import SpecError
from engine.deploy.parallel import Mesh, ParallelConfig, enumerate_configs, is_count
from engine.deploy.placement import shard_unit
from engine.deploy.structure import ACT_DTYPE_BYTES, MAX_TOKENS, MTP_STACK, Options, option_where


def check(ev: Evaluation, config: ParallelConfig) -> list[str]:
    """Why ``config`` cannot run this model (empty when it can)."""
    problems = config.problems()
    if problems:
        return problems
    mesh = Mesh(config, domain=1 << 30)
    rows = [r for r in ev.numeric.rows.values() if r.stack == "main"]
    dims_table = ev.corpus.dims
    seen = set()
    for region, world, unit, count in _sharded_axes(ev):
        group = mesh.world_group(world, region)
        if group is not None:
            if isinstance(count, Exception):
                raise count
            if (unit, count, group.name) in seen:
                continue
            seen.add((unit, count, group.name))
            replicable = dims_table[unit].replicate
            if count % group.size and not (replicable and group.size % count == 0):
                what = {"attn_tp": "attention TP (tp / dp_attn)", "moe_tp": "expert TP (tp / ep)"}.get(
                    group.name, group.name)
                where = " (experts)" if region == "experts" else ""
                problems.append(f"{unit}{where} = {count} is not divisible by {what} = {group.size}")
    experts = [r for r in rows if r.role == "experts" and r.instances != 1]
    if config.ep > 1 and not experts:
        problems.append(f"ep = {config.ep} but the model has no routed experts")
    for row in experts[:1]:
        count = int(row.instances)
        if count % config.ep:
            problems.append(f"n_experts = {count} is not divisible by ep = {config.ep}")
    layers = int(quantities.n_layers(ev.numeric))
    if layers and config.pp > layers:
        problems.append(f"pp = {config.pp} is more than the {layers} layers")
    if config.cp > 1 and config.cp_kind == "ulysses":
        for dim, info in dims_table.items():   # query heads move to the sequence's GPUs
            if info.kind == "heads" and not info.replicate and dim in ev.numeric.values:
                heads = int(ev.numeric.values[dim])
                if heads % (config.attn_tp * config.cp):
                    problems.append(f"Ulysses needs {dim} = {heads} divisible by attention TP x cp = "
                                    f"{config.attn_tp * config.cp}")
    return problems


_SHARDED: list = []      # [(numeric analysis, its sharded axes)]: the last model checked


def _sharded_axes(ev: Evaluation) -> list[tuple[str, str, str, int]]:
    """(region, world, shardable unit, units in the axis) of every weight axis of the main stack
    that a parallel world shards, in row order. Config-free, so computed once per model and read
    by every config :func:`check` looks at (the grid checks hundreds; the count is a sympy subs)."""
    if _SHARDED and _SHARDED[0][0] is ev.numeric:
        return _SHARDED[0][1]
    out = []
    for row in ev.numeric.rows.values():
        if row.stack != "main":
            continue
        region = "experts" if row.role == "experts" else "default"
        for param, world in row.weight_axes.items():
            name = row.dim_names[param]
            unit = shard_unit(name, ev.corpus.dims)
            if unit is not None:
                try:
                    count = _unit_count(row, name, unit, ev.numeric.values)
                except Exception as exc:     # raised where a config shards it, as before
                    count = exc
                out.append((region, world, unit, count))
    _SHARDED[:] = [(ev.numeric, out)]
    return out


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


def _unit_count(row, name: str, unit: str, values: Mapping[str, sympy.Expr]) -> int:
    """How many units of ``unit`` an axis named ``name`` holds in this row (component-local
    bindings such as an expert's ``d_ff: d_ff_expert`` keep the name but change the size)."""
    from engine.language import expr as exprs
    axis = next(a for axes in (row.out.axes, *(t.axes for t in row.in_shapes), *(l.axes for l in row.leaves))
                for a in axes if a.name == name)
    values = {**values, **row.name_values}   # the names' values where the row was walked
    parsed = exprs.evaluate(name, exprs.Scope({k: symbols.dim(k) for k in {*values, unit}}))
    per_unit = parsed / symbols.dim(unit)
    per_unit = per_unit.subs(_relevant(per_unit, {symbols.dim(k): v for k, v in values.items()}))
    return int(axis.size / per_unit)


def _relevant(expr: sympy.Expr, subs: dict) -> dict:
    """The pairs of ``subs`` that ``expr.subs(subs)`` can apply: those of its free symbols, of
    the symbols their values bring in, and so on. ``subs`` applies the pairs one at a time in an
    order fixed by the pairs themselves, and a pair whose symbol is absent when its turn comes
    changes nothing, so the result is the same (a model's numeric values number in the hundreds;
    an axis name reads one or two)."""
    out: dict = {}
    todo = list(getattr(expr, "free_symbols", ()))
    while todo:
        symbol = todo.pop()
        if symbol in subs and symbol not in out:
            out[symbol] = subs[symbol]
            todo.extend(getattr(subs[symbol], "free_symbols", ()))
    return out


def mtp_modules(ev: Evaluation) -> int:
    """MTP modules of the model: the layers of its ``mtp`` stack's templates (one draft token each)."""
    return sum(len(c.layers) for c in ev.numeric.components.values() if c.template and c.stack == MTP_STACK)


def validate_options(options: Options, ev: Evaluation | None = None) -> None:
    if options.kv_dtype not in kv.KV_DTYPE_BYTES:
        raise SpecError(option_where("--kv-dtype"), f"unknown KV dtype {options.kv_dtype!r}",
                        "use one of: " + ", ".join(kv.KV_DTYPE_BYTES))
    if options.act_dtype not in ACT_DTYPE_BYTES:
        raise SpecError(option_where("--act-dtype"), f"unknown activation dtype {options.act_dtype!r}",
                        "use one of: " + ", ".join(ACT_DTYPE_BYTES))
    if not 0 < options.hbm_fraction <= 1:
        raise SpecError(option_where("--hbm-fraction"), f"{options.hbm_fraction} is not in (0, 1]", "e.g. 0.9")
    if not is_count(options.prefill_tokens, 1, MAX_TOKENS):
        raise SpecError(option_where("--prefill-tokens"), f"{options.prefill_tokens!r} is not a token count",
                        "e.g. --prefill-tokens 8192 (vLLM's max_num_batched_tokens)")
    k, a = options.mtp_tokens, options.mtp_acceptance
    if not is_count(k, 0, 64):
        raise SpecError(option_where("--mtp"), f"{k!r} is not a number of draft tokens",
                        "write --mtp K with K a whole number from 0 (off) to the model's MTP modules, e.g. --mtp 1")
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a <= 1:
        raise SpecError(option_where("--acceptance"), f"{a!r} is not an acceptance rate in [0, 1]",
                        "write --acceptance A with 0 <= A <= 1, e.g. --acceptance 0.85 (DeepSeek-V3's reported rate)")
    if ev is not None and k:
        modules = mtp_modules(ev)
        if k > modules:
            has = f"has {modules} MTP module(s)" if modules else "has no MTP stack"
            raise SpecError(option_where("--mtp"), f"{ev.model.model_id} {has}; --mtp {k} needs one per draft token",
                            f"write --mtp {modules}" if modules else "leave out --mtp (or write --mtp 0) for this model")
