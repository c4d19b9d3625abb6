"""Graphs of nodes (a component's, a model stack's) and component files, from YAML to the IR.

Layer: engine.language. :func:`_graph` turns a ``graph:`` block into :class:`NodeSpec` values (with a
repeat node's schedule and streams), :func:`_check_edges` checks every ``in:`` names something, and
:func:`_load_component` reads a component file (graph, outputs, caches, decode variant).

Invariants: a node's fields and their kinds are its file's schema's (engine.language.file_schemas.NODE);
what is checked here is how fields go together: one kind per node, streams only on a layer stack
(exactly one carried), ``take:`` only on a ``reads:`` node, no ``in:`` reaching into a layer stack,
a cache entry on a kv_cache node or a recurrent op's state. Errors are one line with the fix.
"""
from __future__ import annotations

import re
from pathlib import Path

from engine.language import file_schemas
from engine.language.dtypes import CACHE_DTYPE_ALIASES, CACHE_DTYPE_BYTES
from engine.language.errors import SpecError, Where
from engine.language.ir import (CacheSpec, ComponentSpec, NodeSpec, RoleInfo, Schedule, ScheduleRule, StreamSpec,
                                VariantSpec)
from engine.language.names import check_name
from engine.language.ops import GROWTHS, OPS
from engine.language.reader import Reader
from engine.language.yamlio import LineDict

SHARD_WORLDS = ("none", "tp", "ep", "cp", "dp")
NODE_KINDS = ("op", "component", "slot", "repeat", "reads")
#: How a ``reads`` node takes a stream: internal streams give their ``value``; append streams
#: give the latest visible element (``value``: e.g. the token ids every layer may read), ``each``
#: reading layer its own element, ``all`` (the visible history as a new axis) or ``concat`` (the
#: visible history joined along the last axis).
TAKES = {"internal": ("value",), "append": ("value", "each", "all", "concat")}


# -- graphs --------------------------------------------------------------------------------------
#
# A node's fields and the kind of each (and of its streams and schedule) are its file's schema's
# (engine.language.file_schemas.NODE); what is checked here is how fields go together.

def _node(reader: Reader, name: str, raw: LineDict, field: str, roles: dict[str, RoleInfo]) -> NodeSpec:
    kinds = [k for k in NODE_KINDS if k in raw]
    where = reader.where(raw, field)
    if len(kinds) != 1:
        raise SpecError(where, f"node {name!r} must have exactly one of op/component/slot/repeat/reads",
                        "e.g. `q_proj: {op: linear, in: x, dims: {in: hidden, out: d_q}}`")
    kind = kinds[0]
    target = raw[kind]
    schedule = None
    streams = {}
    if kind == "repeat":
        schedule = _schedule(reader, raw, field)
        streams = _streams(reader, raw, field)
        target = str(target)
    if kind != "repeat" and "streams" in raw:
        raise SpecError(reader.where(raw, f"{field}.streams", "streams"), "only a layer stack declares streams",
                        "move `streams:` to the `repeat:` node of the stack")
    if "take" in raw and kind != "reads":
        raise SpecError(reader.where(raw, f"{field}.take", "take"), "`take:` belongs to a `reads:` node",
                        "write e.g. `history: {reads: hidden_history, take: all}`")
    if "stream_out" in raw and kind in ("repeat", "reads"):
        raise SpecError(reader.where(raw, f"{field}.stream_out", "stream_out"),
                        "`stream_out:` names a stream and goes on an op, component or slot node",
                        "write `stream_out: <stream declared under the layer stack's streams:>`")
    if kind == "reads" and "in" in raw:
        raise SpecError(reader.where(raw, f"{field}.in", "in"), "a `reads:` node takes its value from the stream",
                        "remove `in:`; the engine finds the stream's producer")
    role = raw.get("role")   # kinds of role, in, dims, attrs, with, modules, weight_axes: file_schemas.NODE
    if role is not None and role not in roles:
        raise SpecError(reader.where(raw, f"{field}.role", "role"), f"unknown role {role!r}",
                        "use one of: " + ", ".join(sorted(roles)) + " (or add it to corpus/roles.yaml)")
    for axis, world in (raw.get("weight_axes") or {}).items():
        if world not in SHARD_WORLDS:
            raise SpecError(reader.where(raw["weight_axes"], f"{field}.weight_axes.{axis}", axis),
                            f"unknown parallel world {world!r}", "use one of: " + ", ".join(SHARD_WORLDS))
    return NodeSpec(
        name=name, kind=kind, target=target, where=where,
        inputs=reader.names(raw.get("in"), f"{field}.in", raw, "in"),
        dims=raw.get("dims") or {}, attrs=raw.get("attrs") or {}, options=raw.get("with") or {},
        when=raw.get("when"), instances=raw.get("instances"), active=raw.get("active"),
        stacked=raw.get("stacked", False), role=role, module=raw.get("module"),
        modules=raw.get("modules") or {}, weight_axes=raw.get("weight_axes") or {},
        schedule=schedule, index_from=raw.get("index_from"), shares=raw.get("shares"),
        src=raw.get("src"), stream_out=raw.get("stream_out"),
        take=raw.get("take", "value") if kind == "reads" else None, streams=streams)


def _streams(reader: Reader, raw: LineDict, field: str) -> dict[str, StreamSpec]:
    """A layer stack's ``streams:``; exactly one is carried (the residual line has no default)."""
    where = reader.where(raw, field)
    if "streams" not in raw:
        raise SpecError(where, "a layer stack declares the streams it carries",
                        'add `streams: {hidden: {carries: true, src: "<the forward line that calls a layer>"}}`')
    out = {}
    for name, entry in raw["streams"].items():
        at = f"{field}.streams.{name}"
        src = entry["src"]
        here = reader.where(entry, at)
        if entry.get("carries"):
            extra = [k for k in ("from", "after", "before", "count") if k in entry]
            if extra:
                raise SpecError(here.at(extra[0]), f"carried stream {name!r} cannot have `{extra[0]}:`",
                                "the carried stream is each layer's input and output; archive it with a "
                                "separate append stream (`from: " + str(name) + "`)")
            kind = "carried"
        elif "from" in entry:
            if ("after" in entry) + ("before" in entry) + ("count" in entry) > 1:
                raise SpecError(here, f"append stream {name!r} takes one of after/before/count",
                                "`after:`/`before:` a condition on `layer` archives the carried stream; "
                                "`count:` gives the number of elements a stack node holds (default 1)")
            kind = "append"
        else:
            for key in ("after", "before", "count"):
                if key in entry:
                    raise SpecError(here.at(key), f"`{key}:` needs `from:`",
                                    "write `from: <carried stream or stack node>`")
            kind = "internal"
        out[name] = StreamSpec(str(name), kind, src, here, entry.get("from"), entry.get("after"),
                               entry.get("before"), entry.get("count"))
    carried = [s.name for s in out.values() if s.kind == "carried"]
    if len(carried) != 1:
        raise SpecError(reader.where(raw, f"{field}.streams", "streams"),
                        f"a layer stack carries exactly one stream, found {len(carried)}"
                        + (f" ({', '.join(carried)})" if carried else ""),
                        "mark the residual line `carries: true` (hyper-connections widen it, they do not add one)")
    return out


def _schedule(reader: Reader, raw: LineDict, field: str) -> Schedule:
    if "template" in raw:
        return Schedule(rules=(ScheduleRule(raw["template"], where=reader.where(raw, field)),))
    sched = raw.get("schedule")
    where = reader.where(raw, f"{field}.schedule", "schedule")
    if isinstance(sched, list):
        rules = []
        for i, rule in enumerate(sched):
            rules.append(ScheduleRule(rule["template"], rule.get("when"),
                                      reader.where(rule, f"{field}.schedule[{i}]")))
        return Schedule(rules=tuple(rules))
    if isinstance(sched, dict):
        return Schedule(by=sched["by"], mapping=dict(sched["map"]))
    raise SpecError(where, "a repeat node needs `template:` or `schedule:`",
                    "write `template: block`, a list of {template, when} rules, or "
                    "`schedule: {by: config.layer_types, map: {...}}`")


def _graph(reader: Reader, raw: LineDict, field: str, roles) -> dict[str, NodeSpec]:
    return {name: _node(reader, name, node, f"{field}.{name}", roles) for name, node in raw.items()}


def _check_edges(graph: dict[str, NodeSpec], known: set[str], where: Where, extra: set[str] = frozenset()) -> None:
    """Every `in:` names an input, an earlier/later node (DAG checked at walk time), or node.output."""
    names = set(graph) | set(known) | set(extra)
    for node in graph.values():
        for ref in (a for r in node.inputs for a in r.split("|")):
            base, _, sub = ref.partition(".")
            stack = base.split("[")[0]
            if stack in graph and graph[stack].kind == "repeat" and (base != stack or sub.isdigit()):
                raise SpecError(node.where.at("in"), f"`in: {ref}` reaches into the layer stack {stack!r}",
                                f"a stack's value is its last layer's carried stream; to use an earlier "
                                f"layer's value declare an append stream under {stack}.streams, e.g. "
                                f"`h_i: {{from: hidden, after: \"layer == i\", src: ...}}`, and read it "
                                f"with `{{reads: h_i, take: each}}`")
            if ref.split(".")[0] not in names:
                raise SpecError(node.where.at("in"), f"`in: {ref}` names no node or input",
                                "use one of: " + ", ".join(sorted(names)))


def _load_component(path: Path, root: Path, roles, draft: bool) -> ComponentSpec:
    reader = Reader(path, root, file_schemas.COMPONENT)   # kinds and fields: its schema
    data = reader.data
    name = check_name(data["component"], reader.where(data, "component", "component"),
                      "component name", "`component: gqa_attention`")
    if name != path.stem:
        raise SpecError(reader.where(data, "component", "component"),
                        f"component name {name!r} differs from its file name", f"name the file {name}.yaml")
    role = data["role"]
    if role not in roles:
        raise SpecError(reader.where(data, "role", "role"), f"unknown role {role!r}",
                        "use one of: " + ", ".join(sorted(roles)) + " (or add it to corpus/roles.yaml)")
    inputs = reader.names(data.get("inputs", ["x"]), "inputs", data, "inputs")
    graph = _graph(reader, data["graph"], "graph", roles)
    _check_edges(graph, set(inputs), reader.where(data, "graph"))
    outputs = data.get("outputs") or {"out": list(graph)[-1]}
    if isinstance(outputs, str):
        outputs = {"out": outputs}
    for out_name, node_name in outputs.items():
        if node_name not in graph and node_name not in inputs:
            raise SpecError(reader.where(data, f"outputs.{out_name}", "outputs"),
                            f"output names no node {node_name!r}", "use one of: " + ", ".join(graph))
    caches = []
    for i, entry in enumerate(data.get("cache") or []):
        field = f"cache[{i}]"
        where = reader.where(entry, field)
        target = graph[entry["node"]] if entry["node"] in graph else None
        stateful = target is not None and target.kind == "op" and target.target in OPS \
            and OPS[target.target].state is not None
        if target is None or (target.target != "kv_cache" and not stateful):
            raise SpecError(where.at("node"), f"cache entry names {entry['node']!r}, not a kv_cache node "
                            "or a recurrent op", "point it at a node with `op: kv_cache`, or at a "
                            "recurrent op (" + ", ".join(n for n, o in OPS.items() if o.state) + ") with growth: state")
        if entry["growth"] not in GROWTHS:
            raise SpecError(where.at("growth"), f"unknown growth {entry['growth']!r}",
                            "use one of: " + ", ".join(GROWTHS))
        if stateful and entry["growth"] != "state":
            raise SpecError(where.at("growth"), f"a recurrent op's state has growth: state, not {entry['growth']!r}",
                            "its size is fixed per request")
        dtype = entry.get("dtype")
        if isinstance(dtype, str) and dtype.startswith("$"):
            if dtype[1:] not in (data.get("options") or {}):
                raise SpecError(where.at("dtype"), f"cache dtype {dtype!r} names no option",
                                "declare it under options: (e.g. state_dtype: f32) or write a dtype")
        elif "dtype" in entry and CACHE_DTYPE_ALIASES.get(dtype, dtype) not in CACHE_DTYPE_BYTES:
            raise SpecError(where.at("dtype"), f"unknown cache dtype {entry['dtype']!r}",
                            "use one of: " + ", ".join(CACHE_DTYPE_BYTES) + ", or $<option>")
        scale = entry.get("scale")
        if scale is not None:
            if "dtype" not in entry:
                raise SpecError(where.at("scale"), "a cache scale needs the entry's own `dtype:`",
                                "write e.g. `dtype: fp8, scale: {dtype: f32, block: 128}`")
            if scale["dtype"] not in CACHE_DTYPE_BYTES:   # kinds and the block's range: the schema's
                raise SpecError(where.at("scale.dtype"), f"unknown scale dtype {scale['dtype']!r}",
                                "use one of: " + ", ".join(CACHE_DTYPE_BYTES))
            scale = (scale["dtype"], scale["block"])
        if entry["growth"] == "window" and "window" not in entry:
            raise SpecError(where, "a window-capped cache needs `window:`")
        if entry["growth"] == "compressed" and "every" not in entry:
            raise SpecError(where, "a compressed cache needs `every:` (tokens per entry)")
        caches.append(CacheSpec(entry["name"], entry["node"], entry["kind"], entry["growth"], where,
                                entry.get("window"), entry.get("every"), entry.get("dtype"), scale))
    for node in graph.values():
        if node.target == "kv_cache" and node.kind == "op" and not any(c.node == node.name for c in caches):
            raise SpecError(node.where, f"kv_cache node {node.name!r} has no `cache:` entry",
                            "declare it under cache: with its kind and growth law")
    variant = None
    if "decode_variant" in data:
        raw = data["decode_variant"]
        vgraph = _graph(reader, raw["graph"], "decode_variant.graph", roles)
        remove = reader.names(raw.get("remove"), "decode_variant.remove", raw, "remove")
        for gone in remove:
            if gone not in graph:
                raise SpecError(reader.where(raw, "decode_variant.remove", "remove"),
                                f"removes {gone!r}, which is not in the graph")
        _check_edges(vgraph, set(inputs) | set(graph), reader.where(raw))
        variant = VariantSpec(remove, vgraph, reader.where(raw, "decode_variant"))
    label = data.get("label", re.sub(r"_(attention|mixer)$", "", name))
    if not isinstance(label, str) or not label.strip():
        raise SpecError(reader.where(data, "label", "label"), f"label {label!r} is not a short name",
                        "write e.g. `label: gqa` (the mixer's name in the gallery)")
    return ComponentSpec(name, role, str(data["doc"]), reader.where(data), dict(data.get("options") or {}),
                         inputs, dict(data.get("dims") or {}), graph, dict(outputs), tuple(caches),
                         variant, draft, label.strip())

