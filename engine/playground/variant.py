"""A what-if variant beside its base model, old -> new: the command line's swaps, binds and config,
and the comparison per layer group and for the whole model (``archledger edit``).

Layer: engine.playground (on engine.deploy and engine.language). Both sides are evaluated by the same
walk (:func:`engine.api.evaluate_spec`) and deployed by the same planner (:func:`engine.deploy.plan`)
on one GPU, parallel config and scenario, so every difference is the swap's (:data:`METRICS`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
import sympy
from engine.deploy import Options, Scenario, plan
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import GPU
from engine.deploy.parallel import ParallelConfig
from engine.language import kv, quantities, symbols
from engine.language import variants as variant_rules
from engine.language.api import Evaluation, evaluate_spec
from engine.language.corpus import Corpus
from engine.language.errors import SpecError, Where
from engine.language.ir import Fill


#: (key, label, unit) of every compared number, in print order.
METRICS = (
    ("params", "params", ""),
    ("weight_bytes", "weight bytes", "B"),
    ("kv_bytes_per_token", "KV per token", "B"),
    ("kv_bytes_per_request", "KV per request", "B"),
    ("prefill_flops", "prefill FLOPs", ""),
    ("prefill_sol_s", "prefill SOL", "s"),
    ("decode_bytes", "decode bytes/GPU", "B"),
    ("decode_sol_s", "decode SOL", "s"),
)


_CLI = Where("<command line>")


_CONFIG = re.compile(r"(tp|ep|dp_attn|pp|cp)(\d+)")


@dataclass(frozen=True, slots=True)
class Setting:
    """Where both sides are deployed: GPU, parallel config, framework, KV dtype, batch, context."""

    gpu: GPU
    config: ParallelConfig
    framework: str = "vllm"
    kv_dtype: str = "bf16"
    batch: int = 1
    context: int = 8192


def parse_config(text: str) -> ParallelConfig:
    """``tp8-ep8-dp_attn8`` (the deploy page's label, ``8x `` prefix allowed) -> a config."""
    body = text.split(" ", 1)[-1].strip()
    degrees = {}
    for part in body.split("-"):
        match = _CONFIG.fullmatch(part)
        if not match:
            raise SpecError(_CLI.at("--config"), f"{part!r} in {text!r} is not a degree",
                            "write e.g. tp8, tp8-ep8 or tp8-ep8-dp_attn8 (tp, ep, dp_attn, pp, cp)")
        degrees[match[1]] = int(match[2])
    config = ParallelConfig(**degrees)
    if config.problems():
        raise SpecError(_CLI.at("--config"), "; ".join(config.problems()), "fix the degrees")
    return config


def _side(ev: Evaluation, gpu: GPU, config: ParallelConfig, setting: Setting) -> dict[str, Any]:
    """Every metric for the whole model and per layer group (group uid -> metrics)."""
    tables = load_tables(ev.corpus.root / "fusion")
    # the whole prompt in one prefill step, so the per-op table is the whole prefill
    options = Options(framework=setting.framework, kv_dtype=setting.kv_dtype,
                      prefill_tokens=max(8192, setting.batch * setting.context))
    scenario = Scenario(batch=setting.batch, input_len=setting.context, output_len=0)
    deployment = plan(ev, gpu, config, options, tables.get(setting.framework), scenario).at(scenario)
    a = ev.numeric
    point = {symbols.dim(symbols.BATCH): setting.batch, symbols.dim(symbols.SEQ): setting.context,
             symbols.dim(symbols.CTX): setting.context}
    groups = {uid: c for uid, c in a.components.items() if c.template and c.stack == "main"}
    tensors = [t for t in ev.tensors() if t.stack == "main"]

    def metrics(prefix: str | None) -> dict[str, float]:
        def mine(uid: str) -> bool:
            uid = uid.split("@", 1)[-1]
            return prefix is None or uid == prefix or uid.startswith(prefix + "/")
        caches = [c for c in kv.caches(a) if mine(c.node_uid)]
        per_token = sum(float(kv.per_context_token(c) * kv.cache_element_bytes(c, setting.kv_dtype))
                        for c in caches if c.growth in ("every_token", "compressed"))
        per_request = sum(float(kv.entry_bytes_per_request(c, setting.context, setting.kv_dtype)) for c in caches)
        rows = [r for r in a.rows.values() if r.stack == "main" and "prefill" in r.phases and not r.shares
                and mine(r.uid)]
        flops = sum((r.flops * r.repeat for r in quantities.phase_rows(a, "prefill") if mine(r.uid)), sympy.Integer(0))
        prefill = [r for r in deployment.ops["prefill"] if mine(r["op_uid"])]
        decode = [r for r in deployment.ops["decode"] if mine(r["op_uid"])]
        out = {
            "params": float(sum(r.params * r.repeat * r.instances for r in rows)),
            "weight_bytes": float(sum(t.total_bytes for t in tensors if mine(t.uid))),
            "kv_bytes_per_token": per_token,
            "kv_bytes_per_request": per_request,
            "prefill_flops": float(flops.subs(point)),      # the whole model's, not one GPU's
            "prefill_sol_s": sum(r["t_sol_s"] for r in prefill),
            "decode_bytes": sum(r["bytes"] for r in decode),
            "decode_sol_s": sum(r["t_sol_s"] for r in decode),
        }
        if prefix is None:   # the whole model: the planner's own totals (step time, not a sum of ops)
            out["prefill_sol_s"] = deployment.summary["ttft_s"]
            out["decode_sol_s"] = deployment.summary["tpot_s"]
            out["decode_bytes"] = deployment.phases["decode"]["bytes"]
        return out

    return {"model": metrics(None), "fits": bool(deployment.summary["fits"]),
            "groups": {uid: {"template": c.template, "layers": len(c.layers), **metrics(uid)}
                       for uid, c in groups.items()}}


def compare(corpus: Corpus, variant: variant_rules.ModelVariant, setting: Setting,
            old_ev: Evaluation | None = None, new_ev: Evaluation | None = None) -> dict[str, Any]:
    """Old -> new for every metric, whole model and per layer group (JSON-ready); the two
    evaluations are made here unless given."""
    old_ev = old_ev or evaluate_spec(corpus, corpus.models[variant.base])
    new_ev = new_ev or evaluate_spec(corpus, variant.spec)
    old = _side(old_ev, setting.gpu, setting.config, setting)
    new = _side(new_ev, setting.gpu, setting.config, setting)
    groups = []
    for uid in dict.fromkeys([*old["groups"], *new["groups"]]):
        o, n = old["groups"].get(uid), new["groups"].get(uid)
        groups.append({"group": uid.removeprefix("main/"), "layers_old": o["layers"] if o else 0,
                       "layers_new": n["layers"] if n else 0,
                       "old": {k: o[k] for k, _, _ in METRICS} if o else None,
                       "new": {k: n[k] for k, _, _ in METRICS} if n else None})
    return {
        "variant": variant.name, "model_id": variant.model_id, "variant_of": variant.base, "label": variant_rules.LABEL,
        "swaps": [swap_text(s) for s in variant.swaps],
        "binds": {b.dim: {"value": b.value if isinstance(b.value, (int, str)) else str(b.value),
                          "bound": int(new_ev.bound[b.dim]), "src": b.src} for b in variant.binds},
        "setting": {"gpu": setting.gpu.name, "config": setting.config.label(), "n_gpus": setting.config.n_gpus,
                    "framework": setting.framework, "kv_dtype": setting.kv_dtype, "batch": setting.batch,
                    "context": setting.context},
        "fits": {"old": old["fits"], "new": new["fits"]},
        "model": {"old": old["model"], "new": new["model"]},
        "groups": groups,
    }


def swap_text(swap: variant_rules.Swap) -> str:
    """A swap in the command line's form: ``layers[dense,moe].attention=dsa_attention``."""
    where = ",".join(swap.templates) + (f" if {swap.when}" if swap.when else "")
    opts = ",".join(f"{k}={v}" for k, v in swap.fill.options.items())
    return f"layers[{where}].{swap.slot}={swap.fill.component}" + (f"({opts})" if opts else "")


_SWAP = re.compile(r"\s*(\w+)\s*(?:\[([^\]]*)\])?\s*\.\s*(\w+)\s*=\s*(\w+)\s*(?:\((.*)\))?\s*")


def parse_swap(text: str) -> variant_rules.Swap:
    """``layers[dense,moe].attention=dsa_attention(rope_theta=rope_theta)``; the brackets may end
    with ``if <condition on layer>`` (``layers[block if layer % 4 != 3].attention=gated_deltanet``)."""
    match = _SWAP.fullmatch(text)
    where = _CLI.at("--swap")
    if not match:
        raise SpecError(where, f"{text!r} is not a swap",
                        "write e.g. --swap 'layers[dense,moe].attention=dsa_attention' "
                        "(optionally `layers[block if layer % 4 != 3]...`, `...=moe(shared_experts=true)`)")
    _, inside, slot, component, opts = match.groups()
    inside = inside or ""
    when = None
    if " if " in f" {inside} ":
        inside, when = re.split(r"(?:^|\s)if\s", inside, maxsplit=1)
        when = when.strip()
    templates = tuple(t.strip() for t in inside.split(",") if t.strip() and t.strip() != "*")
    options = {}
    for item in filter(None, (p.strip() for p in (opts or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError(where, f"option {item!r} has no value", "write key=value, e.g. shared_experts=true")
        options[key.strip()] = _literal(value.strip())
    fill = Fill(component, where, options)
    return variant_rules.Swap(slot, templates, fill, where, when)


def _literal(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def parse_bind(corpus: Corpus, text: str) -> variant_rules.Bind:
    """``dim=value``; ``dim`` may also be the config field a corpus model binds that dim to
    (``index_n_heads`` -> ``n_index_heads``, as DeepSeek-V3.2 does)."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise SpecError(_CLI.at("--bind"), f"{text!r} is not a binding", "write --bind dim=value, e.g. --bind index_topk=2048")
    dim = name if name in corpus.dims else config_aliases(corpus).get(name)
    if dim is None:
        raise SpecError(_CLI.at("--bind"), f"{name!r} is neither a dim of corpus/dims.yaml nor a config field a corpus model binds",
                        "write the dim's name (see corpus/dims.yaml)")
    return variant_rules.Bind(dim, _literal(value), f"command line ({text})", _CLI.at("--bind"))


def config_aliases(corpus: Corpus) -> dict[str, str]:
    """Config field -> the dim corpus models bind to exactly ``config.<field>`` (one dim only)."""
    seen: dict[str, set[str]] = {}
    for model in corpus.models.values():
        if model.unverified:       # never published (as component_dims)
            continue
        for dim, text in model.dims.items():
            if isinstance(text, str) and re.fullmatch(r"config\.\w+", text.strip()):
                seen.setdefault(text.strip()[7:], set()).add(dim)
    return {field: dims.pop() for field, dims in seen.items() if len(dims) == 1}


def variant_yaml(variant: variant_rules.ModelVariant) -> dict[str, Any]:
    """The variant as ``corpus/variants/<name>.yaml`` data (``archledger edit --save``)."""
    swaps = []
    for s in variant.swaps:
        entry: dict[str, Any] = {"slot": s.slot}
        if s.templates:
            entry["templates"] = list(s.templates)
        if s.when:
            entry["when"] = s.when
        entry["component"] = s.fill.component
        if s.fill.options:
            entry["with"] = dict(s.fill.options)
        if s.fill.module is not None:
            entry["module"] = s.fill.module
        swaps.append(entry)
    out = {"variant": variant.name, "base": variant.base, "name": variant.display_name, "notes": variant.notes,
           "swaps": swaps}
    if variant.binds:
        out["bind"] = {b.dim: {"value": b.value, "src": b.src} for b in variant.binds}
    return out
