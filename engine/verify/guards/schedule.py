"""schedule guard: the per-layer plan covers config.json's per-layer lists, layer by layer.

``corpus/verification.yaml`` (``layer_plans``) says what a config field means for layer ``i``
(``first_k_dense_replace``: layers before k are dense; ``layer_types``: which layers slide...;
``hybrid_override_pattern``: a string of one character per layer, Nemotron-H's ``M*-E``).
The evaluation says what each layer *is* (a feature read from its nodes: routed experts, a
window-capped cache). Every layer must agree, so a plan with the right counts but the wrong
layers is caught too, and a list value the registry does not know is an error, not a guess.

A field is a config path, nested sections included (``linear_attn_config.kda_layers``; an entry's
``expect`` may read ``config.block_configs[layer].attention.no_op``). Each registry entry is typed
(``kind``: per_layer, layer_set, scalar): it applies to a value of its kind only, so one field may
mean one thing as a number and another as a per-layer list (``moe_layer_freq``); an entry's
``reads`` types the other fields its ``expect`` reads, and it applies only where they fit. A value
that fits none of its field's entries (nor any ``reads``) is one error saying which kinds the
registry expects, and an ``expect`` that uses a list as a number names the field and what it holds.
"""
from __future__ import annotations

import re
from typing import Any

import sympy

from engine.language import expr, kv
from engine.verify.evidence import PLAN_KINDS
from engine.verify.guards import Context, Finding

NAME = "schedule"
EVIDENCE = "config per-layer plans"


def evidence(ctx: Context) -> str:
    fields = list(dict.fromkeys(p.field for p in ctx.registry.layer_plans
                                if lookup(ctx.evidence.config, p.field) is not _MISSING))
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


_MISSING = object()
_CONFIG_PATH = re.compile(r"\bconfig\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def lookup(config: dict, dotted: str) -> Any:
    """The value at a dotted config path (``linear_attn_config.kda_layers``), or ``_MISSING``."""
    value: Any = config
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def fits(kind: str, value: Any) -> bool:
    """Whether a config value is of a registry entry's kind (engine.verify.evidence.PLAN_KINDS)."""
    if kind == "per_layer":
        return isinstance(value, (list, str))
    if kind == "layer_set":
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def described(value: Any) -> str:
    """What a config value is, in the words of an error (``a list of 62 entries``)."""
    if isinstance(value, list):
        return f"a list of {len(value)} entries"
    if isinstance(value, dict):
        return f"a mapping ({', '.join(list(value)[:4])}{', ...' if len(value) > 4 else ''})"
    if isinstance(value, str):
        return f"the string {_short(repr(value))}"
    return f"the {type(value).__name__} {value!r}"


def _kind_findings(ctx: Context, layers_uid: str) -> tuple[list[Finding], set[str]]:
    """One error per config field whose value fits none of its registry entries' kinds; and the
    fields the check found so (their entries are skipped)."""
    out, skipped = [], set()
    by_field: dict[str, list] = {}
    for plan in ctx.registry.layer_plans:
        by_field.setdefault(plan.field, []).append(plan)
    declared: dict[str, set[str]] = {}   # kinds other entries' `reads:` accept for a field
    for plan in ctx.registry.layer_plans:
        for name, kind in plan.reads.items():
            declared.setdefault(name, set()).add(kind)
    for field, plans in by_field.items():
        value = lookup(ctx.evidence.config, field)
        if value is _MISSING or any(fits(k, value) for k in {p.kind for p in plans} | declared.get(field, set())):
            continue
        skipped.add(field)
        kinds = sorted({p.kind for p in plans} | declared.get(field, set()))
        lines = ", ".join(f"line {p.where.line}" for p in plans if p.where.line)
        want = " or ".join(f"{k} ({PLAN_KINDS[k]})" for k in kinds)
        hint = (f"add a layer_plans entry `{{field: {field}, kind: per_layer, ...}}` whose `expect` reads `entry`"
                if isinstance(value, (list, str)) else
                f"add a layer_plans entry for config.{field} of the kind it holds here")
        out.append(Finding(NAME, "error", layers_uid,
                           f"config.{field} is {described(value)}; corpus/verification.yaml reads it as {want}"
                           + (f" ({lines})" if lines else ""), hint))
    return out, skipped


def _evaluation_error(plan, exc: Exception, layer: int, config: dict) -> tuple[str, str]:
    """(message, hint) for an ``expect`` that cannot be evaluated: a config field of another kind
    than the expression uses, or missing, is named with what was expected."""
    for path in _CONFIG_PATH.findall(plan.expect):
        value = lookup(config, path)
        if value is _MISSING and path not in plan.defaults:
            return (f"`{plan.expect}` reads config.{path}, which this config does not have",
                    f"give the entry `defaults: {{{path}: <the modeling code's value>}}`")
        if isinstance(value, (list, dict)) and not re.search(rf"config\.{re.escape(path)}\s*\[|in\s+config\.{re.escape(path)}\b|len\(config\.{re.escape(path)}\)", plan.expect):
            return (f"`{plan.expect}` uses config.{path} as one value, but this config holds "
                    f"{described(value)} there",
                    f"add a `kind: per_layer` entry for config.{path} (its `entry` is the layer's element)")
    return (f"cannot evaluate {plan.expect!r} at layer {layer}: {exc}",
            "correct the entry's `expect` in corpus/verification.yaml")


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    features = layer_features(ctx)
    config = ctx.evidence.config
    layers_uid = next((u.split("[")[0] for u, c in ctx.numeric.components.items()
                       if c.template and c.stack == "main"), "main")
    if not features:
        return out
    out, skipped = _kind_findings(ctx, layers_uid)
    # a per-layer list that one of its entries says names every layer (``whole``) but whose length is
    # not the stack's: one error for the field, and none of its entries is evaluated (the layers past
    # a short list's end would read as "no entry" and fail as if the registry were wrong)
    misfit = dict.fromkeys(p.field for p in ctx.registry.layer_plans     # (in the registry's order)
                           if p.whole and p.kind == "per_layer" and fits(p.kind, lookup(config, p.field))
                           and len(lookup(config, p.field)) != len(features))
    for field in misfit:
        out.append(Finding(NAME, "error", layers_uid, f"config.{field} has {len(lookup(config, field))} entries "
                           f"but the spec's main stack has {len(features)} layers",
                           f"repeat the layers once per entry of config.{field}"))
    for plan in ctx.registry.layer_plans:
        value = lookup(config, plan.field)
        if value is _MISSING or plan.field in skipped or plan.field in misfit or not fits(plan.kind, value):
            continue
        if any(lookup(config, name) is not _MISSING and not fits(kind, lookup(config, name))
               for name, kind in plan.reads.items()):
            continue   # another entry reads that field in the kind it holds here
        per_layer = plan.kind == "per_layer"   # a string: one character per layer
        if plan.values and per_layer:
            unknown = sorted({v for v in value if isinstance(v, (str, int, float)) and v not in plan.values}, key=str)
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
                message, hint = _evaluation_error(plan, exc, layer, config)
                out.append(Finding(NAME, "error", str(plan.where), message, hint))
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
