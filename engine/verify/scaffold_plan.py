"""``archledger new``: what a config says beyond its dims, carried into the spec text.

Layer: engine.verify (called by :mod:`engine.verify.scaffold`). Three mechanical steps, each on
the lines of the spec being written:

* **aliases** (:func:`aliases`): a field the base spec reads that this config stores under another
  name its transformers config class maps (``attribute_map``: Kimi Linear's ``num_experts_per_tok``
  is ``num_experts_per_token``; ``n_routed_experts`` is DeepSeek-V3's ``num_local_experts``, which
  Kimi Linear stores as ``num_experts``) is read under that name;
* **layer plans** (:func:`plan_templates`): a registry layer plan with a ``fill`` component (corpus/
  verification.yaml: ``linear_attn_config.kda_layers`` marks KDA layers) that the config holds and
  the spec does not read becomes templates: each template of the base's schedule gets a copy whose
  attention slot is the fill, chosen first by the plan's own ``expect`` condition; the dims the fill
  reads are bound as another corpus spec using it binds them, where this config has those paths;
* **switches** (:func:`apply_switches`): a registry switch the config holds sets its component's
  option in every fill of that component (``mla_use_output_gate: true`` -> ``output_gate: true``).

Invariant: each step only rewrites lines it understands; anything else is one line in ``todo``.
The field names, plans and switches are data (corpus/verification.yaml, transformers' config
classes), never a model's name.
"""
from __future__ import annotations

import json
import re
from typing import Any

def config_path(view: dict[str, Any], path: str) -> tuple[bool, Any]:
    """(found, value) of a dotted config path in ``view``."""
    value: Any = view
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


# -- aliases --------------------------------------------------------------------------------------

def aliases(text_config: dict[str, Any], base_text_config: dict[str, Any]) -> dict[str, str]:
    """Read name -> this config's name, from the two families' transformers config classes: a
    canonical attribute this config's class maps (``num_experts_per_tok -> num_experts_per_token``),
    and the base's stored name of a canonical attribute both classes map (``n_routed_experts`` of
    ``num_local_experts`` -> ``num_experts``). Empty where transformers knows neither class."""
    from engine.verify import modeling_code
    mine, theirs = modeling_code.attribute_map(text_config), modeling_code.attribute_map(base_text_config)
    out = dict(mine)
    for canonical, stored in theirs.items():
        if canonical in mine and stored != mine[canonical]:
            out.setdefault(stored, mine[canonical])
    return out


def apply_aliases(lines: list[str], reads: set[str], view: dict[str, Any], names: dict[str, str],
                  notes: list[str]) -> list[str]:
    """``lines`` with each read of a field this config lacks renamed to its alias in ``view``."""
    for key in sorted(reads):
        alias = names.get(key)
        if key in view or alias is None or alias not in view:
            continue
        lines = [re.sub(rf"\bconfig\.{re.escape(key)}\b", f"config.{alias}", line) for line in lines]
        notes.append(f"config.{key} read as config.{alias} (the transformers config class's attribute_map)")
    return lines


# -- spec text helpers ----------------------------------------------------------------------------

def _block(lines: list[str], start: int) -> int:
    """The end (exclusive) of the block opened by ``lines[start]``: the lines indented deeper."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return end


def _matching(text: str, at: int) -> int:
    """The index of the ``}`` closing the ``{`` at ``text[at]``."""
    depth = 0
    for i in range(at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def _with_option(mapping: str, option: str, value: str) -> str:
    """A flow mapping ``{component: x, ...}`` with ``option: value`` in its ``with:``."""
    found = re.search(r"\bwith: \{", mapping)
    if found is None:
        head = re.match(r"\{component: [\w-]+", mapping)
        return mapping[:head.end()] + f", with: {{{option}: {value}}}" + mapping[head.end():]
    inner_start = found.end() - 1
    inner_end = _matching(mapping, inner_start)
    inner = mapping[inner_start + 1:inner_end]
    if re.search(rf"(^|,\s*){re.escape(option)}:", inner):
        inner = re.sub(rf"((?:^|,\s*){re.escape(option)}: )[^,}}]+", rf"\g<1>{value}", inner)
    else:
        inner = f"{option}: {value}" + (", " + inner if inner.strip() else "")
    return mapping[:inner_start + 1] + inner + mapping[inner_end:]


def set_option(lines: list[str], component: str, option: str, value: str, slots: set[str]) -> int:
    """Set ``option: value`` on every fill of ``component`` in ``lines`` (in place); the count.

    Understood: a flow fill ``{component: c, ...}``, a slot shorthand ``<slot>: c``, and a block
    fill (``component: c`` on its own line, its ``with:`` a flow mapping beside it or none)."""
    count = 0
    name = re.escape(component)
    i = 0
    while i < len(lines):
        line = lines[i]
        block = re.match(rf"^(\s+)component: {name}\s*$", line)
        if block:
            indent = block[1]
            end = _block(lines, i - 1) if i else i + 1
            sibling = next((j for j in range(i + 1, max(end, i + 1))
                            if lines[j].startswith(indent + "with:")), None)
            if sibling is None:
                lines.insert(i + 1, f"{indent}with: {{{option}: {value}}}")
            elif "{" in lines[sibling]:
                at = lines[sibling].index("{")
                lines[sibling] = lines[sibling][:at] + _with_option("{component: x, with: " + lines[sibling][at:] + "}",
                                                                     option, value)[len("{component: x, with: "):-1]
            else:
                lines.insert(sibling + 1, f"{indent}  {option}: {value}")
            count += 1
            i += 1
            continue
        pos = 0
        while True:
            found = re.compile(rf"\{{component: {name}(?=[,}}])").search(line, pos)
            if found is None:
                break
            end = _matching(line, found.start())
            new = _with_option(line[found.start():end + 1], option, value)
            line = line[:found.start()] + new + line[end + 1:]
            pos = found.start() + len(new)
            count += 1
        slot_names = "|".join(re.escape(s) for s in sorted(slots))
        line, n = re.subn(rf"(?<![\w.])({slot_names}): {name}(?=\s*(?:,|}}|$))",
                          rf"\1: {{component: {component}, with: {{{option}: {value}}}}}", line)
        count += n
        lines[i] = line
        i += 1
    return count


# -- switches -------------------------------------------------------------------------------------

def apply_switches(lines: list[str], view: dict[str, Any], switches, components, slots: set[str],
                   todo: list[str], notes: list[str]) -> set[str]:
    """Each switch the config holds written into the fills of its component (module doc); the
    top-level config keys settled so."""
    settled = set()
    for switch in switches:
        found, value = config_path(view, switch.field)
        if not found or value is None:
            continue
        settled.add(switch.field.split(".")[0])
        component = components.get(switch.component)
        if component is None or switch.option not in component.options:
            todo.append(f"corpus/verification.yaml switch {switch.field}: {switch.component} has no option "
                        f"{switch.option!r} — fix the registry entry")
            continue
        default = component.options[switch.option]
        used = any(re.search(rf"(component|\w+): {re.escape(switch.component)}\b", line) for line in lines)
        if not used:
            if value != default:
                todo.append(f"config.{switch.field} = {json.dumps(value)} sets {switch.component}'s {switch.option}, "
                            f"but the spec uses no {switch.component} — add it where the checkpoint has it")
            continue
        if value == default and not any(f"{switch.option}:" in line for line in lines):
            continue
        n = set_option(lines, switch.component, switch.option, json.dumps(value), slots)
        if n:
            notes.append(f"config.{switch.field} = {json.dumps(value)}: {switch.component}'s {switch.option} "
                         f"in {n} fill(s)")
        else:
            todo.append(f"config.{switch.field} = {json.dumps(value)}: set {switch.option} on the spec's "
                        f"{switch.component} fills (written in a form archledger new does not edit)")
    return settled


# -- layer plans ----------------------------------------------------------------------------------

#: ``- {template: name, when: "..."}`` or ``- {template: name}`` of a schedule's rule list.
_RULE = re.compile(r'^(\s+)- \{template: ([\w-]+)(?:, when: "([^"]*)")?\}\s*$')


def _rows(lines: list[str]) -> tuple[int, int, list[tuple[str, str | None]]] | None:
    """(start, end, [(template, when)]) of the main stack's schedule, or of its single
    ``template:``, as lines [start, end) to replace; None when written otherwise."""
    for i, line in enumerate(lines):
        if re.match(r"^\s+schedule:\s*$", line):
            end = _block(lines, i)
            rows = [_RULE.match(lines[j]) for j in range(i + 1, end)]
            if all(rows) and rows:
                return i, end, [(r[2], r[3]) for r in rows]
            return None
        single = re.match(r"^(\s+)template: ([\w-]+)\s*$", line)
        if single:
            return i, i + 1, [(single[2], None)]
    return None


def _template_span(lines: list[str], name: str) -> tuple[int, int] | None:
    start = next((i for i, line in enumerate(lines) if line == "templates:"), None)
    if start is None:
        return None
    end = _block(lines, start)
    at = next((i for i in range(start + 1, end) if lines[i] == f"  {name}:"), None)
    return (at, _block(lines, at)) if at is not None else None


def _with_attention(block: list[str], fill: str) -> list[str] | None:
    """A template block (its lines) with ``fill`` in its attention slot; None when not understood."""
    out = list(block)
    for i, line in enumerate(out):
        flow = re.match(r"^(\s+)slots: \{(.*)\}\s*$", line)
        if flow:
            inner = re.sub(r"attention: (\{[^{}]*(\{[^{}]*\})?[^{}]*\}|[\w-]+),?\s*", "", flow[2]).strip().rstrip(",")
            out[i] = f"{flow[1]}slots: {{attention: {fill}" + (f", {inner}" if inner else "") + "}"
            return out
        if re.match(r"^\s+slots:\s*$", line):
            indent = " " * (len(line) - len(line.lstrip()) + 2)
            end = _block(out, i)
            kept, skip = [], None   # the slot's other fills; a block-style attention fill's lines go
            for j in range(i + 1, end):
                if skip is not None and j < skip:
                    continue
                if out[j].startswith(indent + "attention:"):
                    skip = _block(out, j)
                    continue
                kept.append(out[j])
            return out[:i + 1] + [f"{indent}attention: {fill}"] + kept + out[end:]
    if len(out) >= 2:   # no slots: add one
        indent = out[1][:len(out[1]) - len(out[1].lstrip())]
        return out + [f"{indent}slots: {{attention: {fill}}}"]
    return None


def plan_templates(lines: list[str], view: dict[str, Any], reads: set[str], plans, corpus,
                   model_id: str, todo: list[str], notes: list[str]) -> tuple[list[str], set[str]]:
    """``lines`` with templates for each layer plan with a ``fill`` the config holds and the spec
    does not read (module doc), and the top-level config keys it settled."""
    settled: set[str] = set()
    for plan in plans:
        if plan.fill is None or plan.field.split(".")[0] in reads:
            continue
        found, value = config_path(view, plan.field)
        if not found or not value:
            continue
        top = plan.field.split(".")[0]
        rows = _rows(lines)
        if rows is None:
            todo.append(f"config.{plan.field}: its layers are {plan.fill} — the main stack's schedule is not a list "
                        f"of {{template, when}} rules archledger new can extend; add the {plan.fill} layers by hand")
            settled.add(top)
            continue
        start, end, rules = rows
        indent = re.match(r"^(\s*)", lines[start])[1]
        made: dict[str, str] = {}
        for template, _ in rules:
            span = _template_span(lines, template)
            block = _with_attention(lines[span[0]:span[1]], plan.fill) if span else None
            if block is None:
                todo.append(f"template {template}: not found or not in a form archledger new copies — add its "
                            f"{plan.fill} twin by hand")
                break
            name = f"{template}_{plan.fill}"
            made[template] = name
            block[0] = f"  {name}:"
            lines[span[1]:span[1]] = block
        else:
            rows = _rows(lines)   # the templates' lines moved: the schedule's with them
            start, end, rules = rows
            new_rules = []
            for template, when in rules:
                cond = f"{when} and {plan.expect}" if when else plan.expect
                new_rules.append(f'{indent}  - {{template: {made[template]}, when: "{cond}"}}')
            new_rules += [f'{indent}  - {{template: {t}' + (f', when: "{w}"' if w else "") + "}" for t, w in rules]
            lines[start:end] = [f"{indent}schedule:"] + new_rules
            notes.append(f"config.{plan.field}: {len(made)} template(s) with {plan.fill} as attention, "
                         f"scheduled where {plan.expect}")
            _bind_fill_dims(lines, view, plan.fill, corpus, model_id, todo, notes)
        settled.add(top)
    return lines, settled


def _bind_fill_dims(lines: list[str], view: dict[str, Any], fill: str, corpus, model_id: str,
                    todo: list[str], notes: list[str]) -> None:
    """Bind the dims ``fill`` reads that the spec lacks, as another corpus spec using it binds
    them, where this config has the field they read; a line each for the rest."""
    component = corpus.components.get(fill)
    if component is None:
        todo.append(f"{fill}: no such component in corpus/components — fix the registry's fill")
        return
    exprs = [e for node in component.graph.values() for e in (node.dims or {}).values()]
    exprs += list((component.dims or {}).values())
    # the names in its dim expressions that are corpus dims (``$option`` references are not)
    wanted = {n for e in exprs if isinstance(e, str) for n in re.findall(r"(?<![\w$.])[A-Za-z_]\w*", e)}
    wanted &= set(corpus.dims)
    dims_at = next((i for i, line in enumerate(lines) if line == "dims:"), None)
    if dims_at is None:
        return
    dims_end = _block(lines, dims_at)
    bound = {re.match(r"^  (\w+):", lines[i])[1] for i in range(dims_at + 1, dims_end) if re.match(r"^  (\w+):", lines[i])}
    missing = sorted(wanted - bound)
    added = []
    for dim in missing:
        source = next((m.dims[dim] for m in corpus.models.values()
                       if m.model_id != model_id and dim in m.dims and isinstance(m.dims[dim], str)
                       and re.fullmatch(r"config\.[\w.]+", m.dims[dim])
                       and config_path(view, m.dims[dim][len("config."):])[0]), None)
        if source is None:
            todo.append(f"dims.{dim}: {fill} reads it and no corpus spec binds it to a field this config has — bind it")
            continue
        added.append(f"  {dim}: {source}")
    lines[dims_end:dims_end] = added
    if added:
        notes.append(f"{fill}'s dims bound as the corpus binds them: " + ", ".join(a.strip() for a in added))
