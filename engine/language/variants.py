"""What-if variants: a corpus model with one slot swapped for another library component.

Layer: engine.language. A variant (``corpus/variants/<name>.yaml``, or ``archledger edit`` on the command
line) names a base model, swaps (a slot in chosen layer templates, optionally only in the layers a
condition on ``layer`` selects -> a library component with options) and binds every dim the new
component needs that the base does not. :func:`resolve` turns it into an ordinary
:class:`~engine.language.ir.ModelSpec` (id ``what-if/<name>``), so the same walk evaluates it and the
same planner deploys it; nothing downstream knows it is a variant except by :data:`VARIANT_ORG`.

Invariants:

* a variant is never "verified": it has no evidence of its own (its snapshot is the base's) and is
  labelled ``what-if`` wherever it is shown;
* every dim the swapped-in component needs is bound by the base or by ``bind:``: a missing one is a
  one-line error naming each dim and its meaning from ``corpus/dims.yaml`` (no silent defaults);
* a swap fits its slot's contract (``corpus/slots.yaml``: the roles a slot takes, the inputs a
  filler takes), else a one-line error saying why;
* swapped layers are a new template ``<template>_<component>`` scheduled before the old one where the
  swap's ``when:`` holds, so the other layers keep their base template (and their groups' numbers).

This module never imports :mod:`engine.language.corpus` (which loads variants through it): the corpus
and its YAML reader are passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

import sympy

from engine.language import expr, symbols
from engine.language.errors import SpecError, Where
from engine.language.ir import ComponentSpec, Fill, ModelSpec, Schedule, ScheduleRule, StackSpec
from engine.language.yamlio import LineDict

if TYPE_CHECKING:   # type names only: corpus imports this module
    from engine.language.corpus import Corpus

#: The org part of every variant's model id: ``what-if/<name>`` (never a Hub org in the corpus).
VARIANT_ORG = "what-if"
#: What a variant is called wherever it is shown (never "verified").
LABEL = "what-if"


@dataclass(frozen=True, slots=True)
class Swap:
    """Fill ``slot`` with ``fill`` in ``templates`` (empty: every template reaching the slot), in the
    layers where ``when`` holds (None: all of them)."""

    slot: str
    templates: tuple[str, ...]
    fill: Fill
    where: Where
    when: str | None = None


@dataclass(frozen=True, slots=True)
class Bind:
    """A dim the base does not bind: its value (a number or an expression over the model's dims and
    ``config.<field>``) and where the value comes from."""

    dim: str
    value: Any
    src: str
    where: Where


@dataclass(frozen=True, slots=True)
class ModelVariant:
    """A resolved variant: its declaration and the model spec the walk evaluates."""

    name: str
    base: str
    display_name: str
    notes: str
    swaps: tuple[Swap, ...]
    binds: tuple[Bind, ...]
    spec: ModelSpec
    where: Where
    #: base template -> the template its swapped layers use (the layer groups that change).
    changed: Mapping[str, str]

    @property
    def model_id(self) -> str:
        return self.spec.model_id


@dataclass(frozen=True, slots=True)
class SlotContract:
    """A row of ``corpus/slots.yaml``: what may fill a slot of that name."""

    name: str
    roles: tuple[str, ...]
    inputs: int
    doc: str


# -- loading -------------------------------------------------------------------------------------

def load(reader: Any, stem: str, corpus: "Corpus") -> ModelVariant:
    """One ``corpus/variants/<stem>.yaml`` (``reader``: the corpus loader's YAML reader, which has
    checked its schema, engine.language.file_schemas.VARIANT), resolved against the loaded corpus."""
    data = reader.data   # kinds and fields: engine.language.file_schemas.VARIANT
    name = data["variant"]
    if name != stem:
        raise SpecError(reader.where(data, "variant", "variant"), f"variant name {name!r} differs from its file name",
                        f"name the file corpus/variants/{name}.yaml or write `variant: {stem}`")
    swaps = []
    for i, raw in enumerate(data["swaps"]):
        field = f"swaps[{i}]"
        where = reader.where(raw, field)
        templates = reader.names(raw.get("templates"), f"{field}.templates", raw, "templates")
        fill = Fill(raw["component"], where, dict(raw.get("with") or {}),
                    dict(raw.get("dims") or {}), dict(raw.get("modules") or {}), {}, raw.get("module"))
        swaps.append(Swap(raw["slot"], templates, fill, where, raw.get("when")))
    binds = []
    raw_bind = data.get("bind") or LineDict()
    for dim, entry in raw_bind.items():
        binds.append(Bind(dim, entry["value"], entry["src"], reader.where(raw_bind, f"bind.{dim}", dim)))
    return resolve(corpus, name, data["base"], swaps, binds, reader.where(data),
                   data.get("name", name), data.get("notes", ""))


# -- resolution ----------------------------------------------------------------------------------

def resolve(corpus: "Corpus", name: str, base: str, swaps: list[Swap], binds: list[Bind], where: Where,
            display_name: str = "", notes: str = "") -> ModelVariant:
    """The variant as a model spec: swaps applied to the base's templates, bindings added to its
    dims; refused (one line) when a swap does not fit or a needed dim is unbound."""
    base_spec = _base(corpus, base, where)
    templates = dict(base_spec.templates)
    stacks = dict(base_spec.stacks)
    changed: dict[str, str] = {}
    for swap in swaps:
        component = _component(corpus, swap)
        _fits(corpus, swap, component)
        targets = _targets(corpus, base_spec, swap)
        for template in targets:
            old = templates[template]
            new = _with_slot(old, swap.slot, inherit(swap.fill, component,
                                                     slots_reached(corpus, base_spec, old)[swap.slot]))
            if swap.when is None:
                templates[template] = new
                changed[template] = template
                continue
            _check_when(swap)
            new_name = f"{template}_{component.name}"
            if not symbols.is_symbol_name(new_name):     # its layer group becomes a symbol
                raise SpecError(swap.where.at("component"), f"the swapped layers' template {new_name!r} "
                                "is not an identifier", f"swap in a component whose name is one ({symbols.SYMBOL_RULE})")
            templates[new_name] = new
            changed[template] = new_name
            stacks = {k: _reschedule(s, template, new_name, swap.when, swap.where) for k, s in stacks.items()}
    dims = LineDict(base_spec.dims)
    dims.line = getattr(base_spec.dims, "line", 0)
    dims.key_lines = {}   # the base's lines are in another file: point at the variant's
    for bind in binds:
        if bind.dim not in corpus.dims:
            raise SpecError(bind.where, f"dim {bind.dim!r} is not in the dims table",
                            "bind a dim of corpus/dims.yaml (its name, not a config field's)")
        if bind.dim in base_spec.dims:
            raise SpecError(bind.where, f"{base_spec.model_id} already binds {bind.dim!r}",
                            "a variant binds only the dims the base does not; swap in another component to change it")
        dims[bind.dim] = bind.value
        dims.key_lines[bind.dim] = bind.where.line
    missing = _missing(corpus, base_spec, swaps, set(dims))
    if missing:
        parts = "; ".join(f"{d} ({corpus.dims[d].doc.rstrip('.')})" for d in missing)
        raise SpecError(where.at("bind"), f"unbound dims the swapped-in component needs: {parts}",
                        "bind each: " + ", ".join(f"{d}: {{value: N, src: \"...\"}}" for d in missing)
                        + " (command line: " + " ".join(f"--bind {d}=N" for d in missing) + ")")
    model_id = f"{VARIANT_ORG}/{name}"
    spec = replace(base_spec, model_id=model_id, display_name=display_name or name,
                   notes=notes or f"{base_spec.display_name} with " + ", ".join(
                       f"{s.slot} -> {s.fill.component}" for s in swaps),
                   where=where, dims=dims, templates=templates, stacks=stacks)
    return ModelVariant(name, base_spec.model_id, display_name or name, spec.notes, tuple(swaps), tuple(binds),
                        spec, where, changed)


def _base(corpus: "Corpus", base: str, where: Where) -> ModelSpec:
    if base in corpus.models:
        return corpus.models[base]
    try:
        return corpus.find_model(base)
    except SpecError as exc:
        raise SpecError(where.at("base"), exc.problem, exc.hint) from None


def _component(corpus: "Corpus", swap: Swap) -> ComponentSpec:
    name = swap.fill.component
    if name not in corpus.components:
        raise SpecError(swap.where.at("component"), f"unknown library component {name!r}",
                        "use one of: " + ", ".join(sorted(corpus.components)))
    return corpus.components[name]


def _fits(corpus: "Corpus", swap: Swap, component: ComponentSpec) -> None:
    """The slot's contract: the roles it takes and its one input (x [batch, seq, hidden])."""
    contract = corpus.slot_contracts.get(swap.slot)
    if contract is None:
        raise SpecError(swap.where.at("slot"), f"no contract for slot {swap.slot!r}",
                        "use one of: " + ", ".join(sorted(corpus.slot_contracts)) + " (corpus/slots.yaml)")
    if component.role not in contract.roles:
        raise SpecError(swap.where.at("component"),
                        f"{component.name} does not fit slot {swap.slot!r}: it is a {component.role} component "
                        f"({corpus.roles[component.role].doc.rstrip('.') if component.role in corpus.roles else ''}), "
                        f"the slot takes {' or '.join(contract.roles)} ({contract.doc})",
                        "swap in one of: " + ", ".join(sorted(n for n, c in corpus.components.items()
                                                             if c.role in contract.roles)))
    if len(component.inputs) != contract.inputs:
        raise SpecError(swap.where.at("component"),
                        f"{component.name} does not fit slot {swap.slot!r}: it takes {len(component.inputs)} inputs "
                        f"({', '.join(component.inputs)}), the slot gives {contract.inputs} ({contract.doc})",
                        "swap in a component with one input x [batch, seq, hidden]")


def slots_reached(corpus: "Corpus", model: ModelSpec, fill: Fill, outer: Mapping[str, Fill] | None = None) -> dict[str, Fill]:
    """Slot name -> the fill it has, for every slot a template's fill reaches (nested blocks too)."""
    found: dict[str, Fill] = {}
    scope = {**(model.slots if outer is None else outer), **fill.slots}

    def visit(component: str, scope: Mapping[str, Fill], seen: set) -> None:
        spec = corpus.components.get(component) or corpus.drafts.get(component)
        if spec is None or component in seen:
            return
        seen = seen | {component}
        for node in spec.graph.values():
            if node.kind == "slot":
                inner = scope.get(node.target)
                if inner is None:
                    continue
                found.setdefault(node.target, inner)
                visit(inner.component, {**scope, **inner.slots}, seen)
            elif node.kind == "component":
                visit(node.target, scope, seen)

    visit(fill.component, scope, set())
    return found


def _targets(corpus: "Corpus", model: ModelSpec, swap: Swap) -> tuple[str, ...]:
    reach = {t: slots_reached(corpus, model, f) for t, f in model.templates.items()}
    for template in swap.templates:
        if template not in model.templates:
            raise SpecError(swap.where.at("templates"), f"{model.model_id} has no layer template {template!r}",
                            "its templates: " + ", ".join(model.templates))
        if swap.slot not in reach[template]:
            raise SpecError(swap.where.at("slot"), f"template {template!r} has no slot {swap.slot!r}",
                            "its slots: " + (", ".join(reach[template]) or "none"))
    targets = swap.templates or tuple(t for t in model.templates if swap.slot in reach[t])
    if not targets:
        raise SpecError(swap.where.at("slot"), f"no template of {model.model_id} has a slot {swap.slot!r}",
                        "slots: " + ", ".join(sorted({s for r in reach.values() for s in r})))
    return targets


def inherit(fill: Fill, component: ComponentSpec, replaced: Fill) -> Fill:
    """The new fill keeps the options of the fill it replaces that its component also declares and
    the swap does not set (``rope_theta: rope_theta`` from MLA to DSA): the same model settings."""
    kept = {k: v for k, v in replaced.options.items() if k in component.options and k not in fill.options}
    return replace(fill, options={**kept, **fill.options}) if kept else fill


def _with_slot(fill: Fill, slot: str, new: Fill) -> Fill:
    """``fill`` with ``slot`` filled by ``new`` at its level and wherever a nested fill sets it."""
    inner = {k: _with_slot(v, slot, new) for k, v in fill.slots.items() if k != slot}
    inner[slot] = new
    return replace(fill, slots=inner)


def _check_when(swap: Swap) -> None:
    try:
        names = expr.names_in(swap.when)
    except expr.ExprError as exc:
        raise SpecError(swap.where.at("when"), str(exc), exc.hint) from None
    if names - {"layer"}:
        raise SpecError(swap.where.at("when"), f"a swap's condition reads {', '.join(sorted(names - {'layer'}))}",
                        'a condition on `layer` and config.<field> only, e.g. "layer % 4 != 3"')


def _reschedule(stack: StackSpec, old: str, new: str, when: str, where: Where) -> StackSpec:
    """Layers of ``old`` where ``when`` holds use ``new``: a rule before each rule choosing ``old``
    (a ``by:`` map first becomes rules reading the same config list)."""
    graph = dict(stack.graph)
    for name, node in graph.items():
        if node.kind != "repeat" or node.schedule is None:
            continue
        schedule = node.schedule
        rules = list(schedule.rules)
        if schedule.by is not None:
            if old not in schedule.mapping.values():
                continue
            rules = [ScheduleRule(t, f"{schedule.by}[layer] == {k!r}", where) for k, t in schedule.mapping.items()]
        if not any(r.template == old for r in rules):
            continue
        out = []
        for rule in rules:
            if rule.template == old:
                cond = when if rule.when is None else f"({rule.when}) and ({when})"
                out.append(ScheduleRule(new, cond, where.at("when")))
            out.append(rule)
        graph[name] = replace(node, schedule=Schedule(rules=tuple(out)))
    return replace(stack, graph=graph)


# -- the dims a component needs ------------------------------------------------------------------

def missing_dims(corpus: "Corpus", model: ModelSpec, swaps: list[Swap]) -> list[str]:
    """The dims the swaps' components need that ``model`` does not bind (what :func:`resolve`
    refuses without a ``bind:`` for each), sorted."""
    return _missing(corpus, model, swaps, set(model.dims))


def _missing(corpus: "Corpus", model: ModelSpec, swaps: list[Swap], bound: set[str]) -> list[str]:
    """Dims of the dims table the swapped-in components read (through their options, nested
    components and decode forms, skipping nodes their options switch off) that nothing binds."""
    need: set[str] = set()
    for swap in swaps:
        spec = corpus.components[swap.fill.component]
        defined = set(swap.fill.dims)
        need |= required_dims(corpus, spec, swap.fill.options) - defined
        for text in swap.fill.dims.values():
            need |= _names(text)
    skip = set(symbols.SCENARIO_DIMS) | {"layer"}
    return sorted(d for d in need if d in corpus.dims and d not in bound and d not in skip)


def required_dims(corpus: "Corpus", spec: ComponentSpec, given: Mapping[str, Any], depth: int = 0) -> set[str]:
    """Names a component's expressions read that it does not define itself (its derived dims and
    options), under the options ``given`` (defaults otherwise)."""
    if depth > 16:
        return set()
    options = {**spec.options, **given}
    flags = {k: v for k, v in options.items() if isinstance(v, bool)}
    need: set[str] = set()

    def text_of(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("$"):
            return options.get(value[1:])
        return value

    for key, value in given.items():   # options given as dim expressions (rope_theta: rope_theta)
        default = spec.options.get(key)
        if isinstance(value, str) and not isinstance(default, bool) and not value.startswith("config."):
            need |= _names(value)
    nodes = list(spec.graph.values())
    if spec.decode_variant is not None:
        nodes += list(spec.decode_variant.graph.values())
    for node in nodes:
        if node.when is not None and not _on(node.when, flags):
            continue
        for value in (*node.dims.values(), node.instances, node.active):
            need |= _names(text_of(value))
        if node.kind == "component" and node.target in corpus.components:
            child = corpus.components[node.target]
            child_given = {k: text_of(v) for k, v in node.options.items()}
            need |= required_dims(corpus, child, child_given, depth + 1) - set(node.dims)
    for text in spec.dims.values():
        need |= _names(text)
    for cache in spec.cache:
        for value in (cache.window, cache.every):
            need |= _names(text_of(value))
    return need - set(spec.dims) - set(options)


def _names(text: Any) -> set[str]:
    if not isinstance(text, str) or text.startswith("$"):
        return set()
    try:
        return expr.names_in(text)
    except expr.ExprError:
        return set()


def _on(when: Any, flags: Mapping[str, bool]) -> bool:
    """A node's ``when:`` under the options' booleans; anything it cannot decide counts as on."""
    try:
        got = expr.evaluate(when, expr.Scope(flags))
    except expr.ExprError:
        return True
    return not (got is False or got is sympy.false)
