"""schedule guard: the per-layer plan covers config.json's per-layer lists, layer by layer.

``corpus/verification.yaml`` (``layer_plans``) says what a config field means for layer ``i``
(``first_k_dense_replace``: layers before k are dense; ``layer_types``: which layers slide...;
``hybrid_override_pattern``: a string of one character per layer, Nemotron-H's ``M*-E``).
The evaluation says what each layer *is* (a feature read from its nodes: routed experts, a
window-capped cache). Every layer must agree, so a plan with the right counts but the wrong
layers is caught too, and a list value the registry does not know is an error, not a guess.
"""
from __future__ import annotations

import sympy

from engine.spec import expr, kv
from engine.verify.guards import Context, Finding

NAME = "schedule"
EVIDENCE = "config per-layer plans"


def evidence(ctx: Context) -> str:
    fields = list(dict.fromkeys(p.field for p in ctx.registry.layer_plans if p.field in ctx.evidence.config))
    return "config " + (", ".join(fields) if fields else "(no per-layer plan fields)")


def layer_features(ctx: Context) -> dict[int, dict[str, bool]]:
    """Per main-stack layer: ``moe`` (routes over experts), ``window`` (window-capped cache) and
    ``indexer`` (runs its own token indexer: an indexer-key cache), ``hash_routed`` (picks
    experts by token id), ``recurrent`` (keeps a recurrent state: a ``growth: state`` cache on a
    recurrent op, i.e. a linear-attention layer) and ``attention`` (attends over a history it
    caches: a cache entry that is not a state)."""
    a = ctx.numeric
    out: dict[int, dict[str, bool]] = {}
    for uid, comp in a.components.items():
        if not comp.template or comp.stack != "main":
            continue
        prefix = uid + "/"
        moe = any(r.role == "experts" for u, r in a.rows.items() if u.startswith(prefix))
        window = any(c.growth == "window" for c in a.caches if c.node_uid.startswith(prefix))
        indexer = any(c.kind == "indexer_key" for c in a.caches if c.node_uid.startswith(prefix))
        hashed = any(r.op == "hash_route" for u, r in a.rows.items() if u.startswith(prefix))
        recurrent = any(kv.is_recurrent(c, a) for c in a.caches if c.node_uid.startswith(prefix))
        attention = any(c.growth != "state" for c in a.caches if c.node_uid.startswith(prefix))
        for layer in comp.layers:
            out[layer] = {"moe": moe, "window": window, "indexer": indexer, "hash_routed": hashed,
                          "recurrent": recurrent, "attention": attention}
    return out


def _resolver(config: dict, defaults: dict):
    def resolve(path: tuple):
        value = config if path[0] in config else defaults
        for key in path:
            if isinstance(key, int):
                value = value[key]
            elif isinstance(value, dict) and key in value:
                value = value[key]
            else:
                raise KeyError(key)
        return value
    return resolve


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    features = layer_features(ctx)
    config = ctx.evidence.config
    layers_uid = next((u.split("[")[0] for u, c in ctx.numeric.components.items()
                       if c.template and c.stack == "main"), "main")
    for plan in ctx.registry.layer_plans:
        if plan.field not in config or not features:
            continue
        value = config[plan.field]
        per_layer = isinstance(value, (list, str))   # a string: one character per layer
        if plan.whole and per_layer and len(value) != len(features):
            out.append(Finding(NAME, "error", layers_uid, f"config.{plan.field} has {len(value)} entries but "
                               f"the spec's main stack has {len(features)} layers",
                               f"repeat the layers once per entry of config.{plan.field}"))
            continue
        if plan.values and per_layer:
            unknown = sorted({v for v in value if v not in plan.values})
            if unknown:
                out.append(Finding(NAME, "error", layers_uid, f"config.{plan.field} holds {unknown}, whose "
                                   "meaning the verification registry does not know",
                                   f"add them to layer_plans[{plan.field}] in corpus/verification.yaml"))
                continue
        wrong, expected_count = [], 0
        for layer in sorted(features):
            try:
                names = {"layer": sympy.Integer(layer)}
                if per_layer:
                    names["entry"] = value[layer] if layer < len(value) else None
                want = expr.evaluate(plan.expect, expr.Scope(names, _resolver(config, plan.defaults)))
            except (expr.ExprError, KeyError, IndexError, TypeError) as exc:
                out.append(Finding(NAME, "error", str(plan.where), f"cannot evaluate {plan.expect!r} at "
                                   f"layer {layer}: {exc}", "fix the registry entry"))
                break
            want = bool(want)
            expected_count += want
            if features[layer][plan.feature] != want:
                wrong.append(layer)
        if wrong:
            have = sum(f[plan.feature] for f in features.values())
            label = {"moe": "MoE", "window": "sliding-window", "indexer": "indexer",
                     "hash_routed": "hash-routed", "recurrent": "linear-attention (recurrent-state)",
                     "attention": "attention (history-cache)"}[plan.feature]
            out.append(Finding(NAME, "error", layers_uid,
                               f"config.{plan.field} = {_short(value)} makes {expected_count} of {len(features)} "
                               f"layers {label}; the spec's schedule makes {have} (layers {_span(wrong)} differ)",
                               f"schedule the templates from config.{plan.field} (schedule: by/map or when:)"))
    return out


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _span(layers: list[int]) -> str:
    text = ", ".join(map(str, layers[:8]))
    return text + (f" and {len(layers) - 8} more" if len(layers) > 8 else "")
