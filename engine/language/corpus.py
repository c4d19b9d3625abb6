"""Load the corpus (YAML) into SpecIR with a schema check; every error names file:line and the fix.

Layer: engine.language. Layout under the corpus root::

    dims.yaml   roles.yaml   quant/*.yaml   components/library/*.yaml   components/drafts/*.yaml
    models/*.yaml   snapshots/*.yaml

A draft component is visible only to a model whose spec lists it under ``drafts:``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from engine.project import PACKAGE_ROOT
from engine.language import expr, file_schemas, module_patterns, symbols, variants as variant_rules
from engine.language.module_patterns import is_pattern
from engine.language.dtypes import CACHE_DTYPE_ALIASES, CACHE_DTYPE_BYTES, DTYPE_BYTES
from engine.language.errors import SpecError, Where
from engine.language.ir import (CacheSpec, Checkpoint, ComponentSpec, ConfigDefault, DimInfo, Fill, ModelSpec, NodeSpec, QuantScheme,
                       RoleInfo, Schedule, ScheduleRule, Snapshot, StackSpec, StoredTensor,
                       StreamSpec, VariantSpec)
from engine.language.ops import GROWTHS, OPS
from engine.language.schema import kind_of
from engine.language.yamlio import LineDict, LineList, load_yaml

DEFAULT_ROOT = PACKAGE_ROOT / "corpus"
SHARD_WORLDS = ("none", "tp", "ep", "cp", "dp")
NODE_KINDS = ("op", "component", "slot", "repeat", "reads")
#: How a ``reads`` node takes a stream: internal streams give their ``value``; append streams
#: give the latest visible element (``value``: e.g. the token ids every layer may read), ``each``
#: reading layer its own element, ``all`` (the visible history as a new axis) or ``concat`` (the
#: visible history joined along the last axis).
TAKES = {"internal": ("value",), "append": ("value", "each", "all", "concat")}
#: Operand classes a quant scheme's matmuls run in (the GPU table maps them to native dtypes).
COMPUTE_CLASSES = ("fp4", "fp8", "bf16")


@dataclass(frozen=True, slots=True)
class Corpus:
    """Everything loaded: tables, schemes, components (library and drafts) and model specs."""

    root: Path
    dims: dict[str, DimInfo]
    roles: dict[str, RoleInfo]
    schemes: dict[str, QuantScheme]
    components: dict[str, ComponentSpec]
    drafts: dict[str, ComponentSpec]
    models: dict[str, ModelSpec]
    #: What may fill each slot name (``slots.yaml``), for variants' swaps.
    slot_contracts: dict[str, "variant_rules.SlotContract"] = field(default_factory=dict)
    #: What-if variants (``variants/*.yaml``) by name: never among ``models`` (never verified).
    variants: dict[str, "variant_rules.ModelVariant"] = field(default_factory=dict)

    def find_variant(self, query: str) -> "variant_rules.ModelVariant":
        """A variant by name, ``what-if/<name>`` or a case-insensitive part of its name picking one."""
        name = query.removeprefix(variant_rules.VARIANT_ORG + "/")
        if name in self.variants:
            return self.variants[name]
        hits = [v for v in self.variants.values() if name.lower() in v.name.lower()]
        if len(hits) == 1:
            return hits[0]
        known = ", ".join(sorted(self.variants)) or "none (add corpus/variants/<name>.yaml)"
        raise SpecError(Where("<command line>"), f"{query!r} is {'no' if not hits else 'more than one'} variant",
                        f"known: {known}")

    def component_for(self, model: ModelSpec, name: str, where: Where) -> ComponentSpec:
        """Resolve a component name as seen from ``model`` (library, plus its listed drafts)."""
        if name in self.components:
            return self.components[name]
        if name in self.drafts:
            if name in model.drafts:
                return self.drafts[name]
            raise SpecError(where, f"component {name!r} is a draft",
                            f"list it under drafts: in {model.where.file} to use it")
        known = ", ".join(sorted(self.components))
        raise SpecError(where, f"unknown component {name!r}", f"use one of: {known}")

    def find_model(self, query: str) -> ModelSpec:
        """A model by HF id, file stem, or a case-insensitive part of its id that picks one model."""
        picked, hits = pick_model(query, self.models)
        if picked is not None:
            return self.models[picked]
        known = ", ".join(sorted(self.models))
        if not hits:
            raise SpecError(Where("<command line>"), f"unknown model {query!r}", f"known: {known}")
        raise SpecError(Where("<command line>"), f"{query!r} matches several models",
                        "one of: " + ", ".join(sorted(hits)))


def pick_model(query: str, ids) -> tuple[str | None, list[str]]:
    """(the model id of ``ids`` that ``query`` names, or None; the ids it matches): the HF id itself,
    a file stem, or a case-insensitive part of an id that picks one (an exact last name first)."""
    if query in ids:
        return query, [query]
    wanted = query.lower().replace("--", "/")
    hits = [i for i in ids if wanted in i.lower()]
    exact = [i for i in hits if i.lower().split("/")[-1] == wanted.split("/")[-1]]
    if len(exact) == 1:
        return exact[0], hits
    return (hits[0] if len(hits) == 1 else None), hits


# -- small schema helpers ------------------------------------------------------------------------

class Reader:
    """Schema checks on one YAML file, producing :class:`Where` values with lines."""

    def __init__(self, path: Path, root: Path, schema: Any = None):
        try:
            self.display = str(path.relative_to(root.parent))
        except ValueError:
            self.display = str(path)
        self.data = load_yaml(path, self.display, schema=schema)

    def where(self, mapping: Any, field: str = "", key: str | None = None) -> Where:
        """``field`` at ``mapping`` (or at its ``key``); sub-fields resolve to their own lines."""
        line, node = 0, mapping
        if isinstance(mapping, LineDict):
            line = mapping.line_of(key) if key is not None else mapping.line
            node = mapping.get(key) if key is not None else mapping
        elif isinstance(mapping, LineList):
            line = mapping.line
        return Where(self.display, line, field, node)

    def mapping(self, value: Any, field: str, parent: Any = None, key: str | None = None) -> LineDict:
        if not isinstance(value, dict):
            raise SpecError(self.where(parent, field, key), f"expected a mapping, got {kind_of(value)}",
                            "write `key: value` pairs here")
        return value

    def keys(self, mapping: LineDict, field: str, allowed: tuple, required: tuple = ()) -> None:
        for key in mapping:
            if key not in allowed:
                raise SpecError(self.where(mapping, f"{field}.{key}" if field else str(key), key),
                                f"unknown field {key!r}", "allowed: " + ", ".join(allowed))
        for key in required:
            if key not in mapping:
                raise SpecError(self.where(mapping, field), f"missing field {key!r}",
                                f"add `{key}:`")

    def names(self, value: Any, field: str, parent: Any, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        if isinstance(value, list):
            value = next(v for v in value if not isinstance(v, str))
            got = f"a list containing {kind_of(value)}"
        else:
            got = kind_of(value)
        raise SpecError(self.where(parent, field, key), f"expected a name or list of names, got {got}",
                        f"write `{key}: name` or `{key}: [name, name]`")


# -- identity and paths --------------------------------------------------------------------------
#
# Names become file names and URL path segments (``build/site/models/<org--name>/``,
# ``corpus/snapshots/<name>.yaml``, ``/components/<name>/``), and specs arrive in pull requests: a
# name like ``..`` or ``/etc/passwd`` would overwrite the gallery or read a file outside the corpus.
# So every such name follows one grammar, the Hugging Face Hub's rule for a repo name part.

#: What a name may be, as the hint of every error about one.
NAME_RULE = ("letters, digits, '-', '_' and '.', at most 96 characters, not starting or ending "
             "with '-' or '.', no '--' or '..'")
_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")


def shown_value(value: Any, limit: int = 60) -> str:
    """``repr`` of a hostile value, escaped (no control characters) and cut to keep one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_name(text: Any) -> bool:
    """A Hub-style name part (see :data:`NAME_RULE`). ``--`` is refused because it is the slug
    separator: ``a--b/c`` and ``a/b--c`` would share the folder ``a--b--c``."""
    return isinstance(text, str) and bool(_NAME.fullmatch(text)) and "--" not in text and ".." not in text


def check_name(text: Any, where: Where, what: str, example: str) -> str:
    """``text`` if it is a valid name (:func:`is_name`), else a one-line :class:`SpecError`."""
    if not is_name(text):
        raise SpecError(where, f"{what} {shown_value(text)} is not a valid name", f"write e.g. {example} ({NAME_RULE})")
    return text


def check_symbol_name(text: Any, where: Where, what: str, example: str) -> str:
    """``text`` if it can name a sympy symbol (:func:`engine.language.symbols.is_symbol_name`: dims and
    layer templates, whose layer groups become symbols), else a one-line :class:`SpecError`."""
    if not symbols.is_symbol_name(text):
        raise SpecError(where, f"{what} {shown_value(text)} is not an identifier",
                        f"write e.g. {example} ({symbols.SYMBOL_RULE})")
    return text


def check_model_id(model_id: Any, where: Where) -> str:
    """A model id is the Hub's ``org/name``: two names (:func:`is_name`) joined by one ``/``."""
    parts = model_id.split("/") if isinstance(model_id, str) else []
    if len(parts) != 2 or not all(is_name(p) for p in parts):
        raise SpecError(where, f"model id {shown_value(model_id)} is not a Hugging Face id `org/name`",
                        f"write e.g. `model: Qwen/Qwen3-8B` (org and name: {NAME_RULE})")
    return model_id


def slug(model_id: str) -> str:
    """``org/name`` -> ``org--name``: the model's file, snapshot and site folder name (one-to-one,
    as names hold no ``--``)."""
    return model_id.replace("/", "--")


def is_snapshot_name(name: Any) -> bool:
    """A snapshot file's base name: a slug ``org--name`` or a single name; never a path."""
    parts = name.split("--") if isinstance(name, str) else []
    return 1 <= len(parts) <= 2 and all(is_name(p) for p in parts)


def snapshot_path(root: Path, name: Any, where: Where, suffix: str = ".yaml") -> Path:
    """``corpus/snapshots/<name><suffix>``, refused unless ``name`` is a snapshot name and the path
    stays inside ``corpus/snapshots/`` (checked twice: by grammar, and on the resolved path)."""
    folder = Path(root) / "snapshots"
    if not is_snapshot_name(name):
        raise SpecError(where, f"snapshot {shown_value(name)} is not a snapshot name",
                        "write the file's base name under corpus/snapshots/, e.g. `snapshot: Qwen--Qwen3-8B` "
                        f"(one name or org--name; {NAME_RULE})")
    path = folder / f"{name}{suffix}"
    if not path.resolve().is_relative_to(folder.resolve()):
        raise SpecError(where, f"snapshot {shown_value(name)} resolves outside corpus/snapshots/",
                        "commit the snapshot file itself under corpus/snapshots/")
    return path


def refuse_symlinks(path: Path, below: Path, shown: str = "") -> None:
    """Refuse a symbolic link at ``path``, on the way down to it from ``below``, or anywhere under it.

    Specs, static files and docs arrive in pull requests, and a committed link can point anywhere
    on the machine that builds (``/proc/self/environ``, ``~/.ssh/``): whatever it points at would be
    read and could be published. Nothing in the repo needs a link, so links are refused outright
    (no resolve-and-compare that ``..``, a link to a link or a later change of the target could
    talk around). Errors name the link as ``shown/<path below below>``."""
    path, below = Path(path), Path(below)

    def refuse(link: Path) -> None:
        rel = link.relative_to(below).as_posix()
        name = f"{shown}/{rel}" if shown else rel
        raise SpecError(Where(name), "is a symbolic link, which could publish a file from outside the repository",
                        "commit the file itself")

    parts = path.relative_to(below).parts
    for i in range(1, len(parts) + 1):
        if below.joinpath(*parts[:i]).is_symlink():
            refuse(below.joinpath(*parts[:i]))
    if not path.is_dir():
        return
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_symlink():
                    refuse(Path(entry.path))
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))


# -- tables --------------------------------------------------------------------------------------

def _load_dims(root: Path) -> dict[str, DimInfo]:
    reader = Reader(root / "dims.yaml", root, file_schemas.DIMS)   # kinds and fields: its schema
    out = {}
    for name, row in reader.data.items():
        check_symbol_name(name, reader.where(reader.data, name, name), "dim name", "n_kv_heads")
        shard = row["shard"]
        if shard not in SHARD_WORLDS:
            raise SpecError(reader.where(row, f"{name}.shard", "shard"), f"unknown world {shard!r}",
                            "use one of: " + ", ".join(SHARD_WORLDS))
        out[name] = DimInfo(name, row["kind"], shard, row["doc"], row.get("replicate", False))
    return out


def _load_roles(root: Path) -> dict[str, RoleInfo]:
    reader = Reader(root / "roles.yaml", root, file_schemas.ROLES)
    return {name: RoleInfo(name, doc) for name, doc in reader.data.items()}


_MATRIX_AXES = {"rows": symbols.dim("rows"), "cols": symbols.dim("cols")}


def _load_scheme(path: Path, root: Path) -> QuantScheme:
    reader = Reader(path, root, file_schemas.QUANT_SCHEME)   # kinds and fields: its schema
    data = reader.data
    for key in ("compute", "activations"):
        if key in data and data[key] not in COMPUTE_CLASSES:
            raise SpecError(reader.where(data, key, key), f"unknown compute class {data[key]!r}",
                            "use one of: " + ", ".join(COMPUTE_CLASSES))
    tensors = []
    for i, entry in enumerate(data["matrix"] or []):
        try:
            entry["key"].format(weight="w", module="m")
        except (AttributeError, KeyError, IndexError, ValueError):
            raise SpecError(reader.where(entry, f"matrix[{i}].key", "key"), f"bad key template {entry['key']!r}",
                            'write "{weight}", "{weight}_scale" or "{module}.input_scale"') from None
        where = reader.where(entry, f"matrix[{i}].shape", "shape")
        for text in entry["shape"]:  # checked here so a bad scheme fails at load, not mid-build
            try:
                expr.evaluate(text, expr.Scope(_MATRIX_AXES, unknown="a scheme shape can use rows and cols"))
            except expr.ExprError as exc:
                raise SpecError(where, str(exc), exc.hint) from None
        if entry["dtype"] not in DTYPE_BYTES:
            raise SpecError(reader.where(entry, f"matrix[{i}].dtype", "dtype"), f"unknown dtype {entry['dtype']!r}",
                            "use one of: " + ", ".join(DTYPE_BYTES))
        tensors.append(StoredTensor(entry["key"], entry["dtype"], tuple(entry["shape"])))
    check_name(data["scheme"], reader.where(data, "scheme", "scheme"), "scheme name", "`scheme: fp8_block128`")
    if data["scheme"] != path.stem:
        raise SpecError(reader.where(data, "scheme", "scheme"),
                        f"scheme name {data['scheme']!r} differs from its file name",
                        f"name the file {data['scheme']}.yaml")
    if data["vector_dtype"] not in DTYPE_BYTES:
        raise SpecError(reader.where(data, "vector_dtype", "vector_dtype"), f"unknown dtype {data['vector_dtype']!r}",
                        "use one of: " + ", ".join(DTYPE_BYTES))
    return QuantScheme(data["scheme"], data["doc"], tuple(tensors), data["vector_dtype"],
                       reader.where(data), data["compute"], data.get("activations", ""), dict(data.get("hf") or {}),
                       dict(data.get("hf_layer") or {}))


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


# -- models --------------------------------------------------------------------------------------

#: Layer templates one model may declare: the site's playground evaluates a swap in every non-empty
#: subset of a model's templates (engine.playground.whatif.template_subsets: 2^n - 1 of them, 127 for
#: DeepSeek-V4's seven, the corpus's most), so their number is bounded before any work starts.
MAX_TEMPLATES = 10

def _fill(reader: Reader, raw: Any, field: str, parent: LineDict) -> Fill:
    if isinstance(raw, str):   # else a mapping of the schema's fields (engine.language.file_schemas.FILL)
        return Fill(raw, reader.where(parent, field, field.rsplit(".", 1)[-1]))
    slots = {name: _fill(reader, sub, f"{field}.slots.{name}", raw["slots"])
             for name, sub in (raw.get("slots") or {}).items()}
    return Fill(raw["component"], reader.where(raw, field), dict(raw.get("with") or {}),
                dict(raw.get("dims") or {}), dict(raw.get("modules") or {}), slots, raw.get("module"))


#: The nested config a multimodal checkpoint keeps its language model's settings in.
TEXT_CONFIG = "text_config"


def config_view(fields: Mapping[str, Any]) -> dict:
    """Config fields as a text spec reads them: a multimodal checkpoint's ``text_config`` settings
    are visible at the top level (Qwen3.5, Gemma 4, Llama 4); a top-level field of the same name
    wins (``model_type`` stays the checkpoint's)."""
    nested = fields.get(TEXT_CONFIG)
    if not isinstance(nested, dict):
        return fields
    view = LineDict({**nested, **fields})
    view.line = getattr(fields, "line", 0)
    view.key_lines = {**getattr(nested, "key_lines", {}), **getattr(fields, "key_lines", {})}
    return view


def _config_defaults(reader: Reader, data: LineDict, fields: Mapping[str, Any]) -> dict[str, ConfigDefault]:
    """``config_defaults: {field: {value, src}}``: the value the modeling code gives a config field
    that config.json omits (Llama 4's ``no_rope_layer_interval``), with ``src`` saying where in the
    modeling code (file: line). A published value always wins (``applied`` is then False)."""
    raw = data.get("config_defaults")
    if raw is None:
        return {}
    out = {}   # kinds and fields: the schema's (engine.language.file_schemas.MODEL)
    for name, entry in raw.items():
        field = f"config_defaults.{name}"
        if not name.isidentifier():
            raise SpecError(reader.where(raw, field, name), f"{name!r} is not a config field name",
                            "name a top-level config field (a multimodal checkpoint's text_config fields are top-level)")
        value, src = entry["value"], entry["src"]
        out[name] = ConfigDefault(name, value, src, reader.where(entry, field), name not in fields)
    return out


def with_config_defaults(fields: Mapping[str, Any], defaults: Mapping[str, ConfigDefault]) -> Mapping[str, Any]:
    """The config view with each declared default filled in where the config lacks the field
    (the published fields untouched); what the walk and every guard read."""
    if not any(d.field not in fields for d in defaults.values()):
        return fields
    view = LineDict({**{d.field: d.value for d in defaults.values()}, **fields})
    view.line = getattr(fields, "line", 0)
    view.key_lines = dict(getattr(fields, "key_lines", {}))
    return view


def _load_snapshot(root: Path, name: str, where: Where, missing_ok: bool = False) -> Snapshot:
    path = snapshot_path(root, name, where)
    if not path.exists() and missing_ok:   # `archledger snapshot` is about to record it
        return Snapshot("", {}, Where(f"corpus/snapshots/{name}.yaml"))
    if not path.exists():
        raise SpecError(where, f"snapshot {name!r} not found at corpus/snapshots/{name}.yaml",
                        "record the config fields the spec binds there (source + fields)")
    reader = Reader(path, root, file_schemas.SNAPSHOT)   # kinds and fields: its schema
    data = reader.data
    return Snapshot(data["source"], config_view(data["fields"]), reader.where(data))


def load_model(path: Path, root: Path, roles, schemes, missing_snapshot_ok: bool = False) -> ModelSpec:
    reader = Reader(path, root, file_schemas.MODEL)   # kinds and fields: its schema
    data = reader.data
    model_id = check_model_id(data.get("model"), reader.where(data, "model", "model"))
    if path.parent == root / "models" and path.stem != slug(model_id):
        # a corpus spec is found by its slug (tests, snapshots, the site); contract variants are not
        raise SpecError(reader.where(data, "model", "model"), f"model id {model_id!r} differs from its file name",
                        f"name the file corpus/models/{slug(model_id)}.yaml")
    snapshot_name = data.get("snapshot", slug(model_id))
    snapshot = _load_snapshot(root, snapshot_name, reader.where(data, "snapshot", "snapshot"), missing_snapshot_ok)
    config_defaults = _config_defaults(reader, data, snapshot.fields)
    snapshot = Snapshot(snapshot.source, with_config_defaults(snapshot.fields, config_defaults), snapshot.where)
    declared_type = snapshot.fields.get("model_type")
    if declared_type is not None and declared_type != data["model_type"]:
        raise SpecError(reader.where(data, "model_type", "model_type"),
                        f"model_type {data['model_type']!r} differs from the config's {declared_type!r}",
                        f"write model_type: {declared_type}")
    dims = data["dims"]
    slots = {name: _fill(reader, raw, f"slots.{name}", data["slots"])
             for name, raw in (data.get("slots") or {}).items()}
    templates = {check_symbol_name(name, reader.where(data["templates"], f"templates.{name}", name),
                                   "layer template name", "block"):
                 _fill(reader, raw, f"templates.{name}", data["templates"])
                 for name, raw in (data.get("templates") or {}).items()}
    if len(templates) > MAX_TEMPLATES:
        raise SpecError(reader.where(data, "templates", "templates"), f"{len(templates)} layer templates, more than "
                        f"the limit of {MAX_TEMPLATES}", "merge templates that differ only in a dim (a fill dim may "
                        "read `layer`): the playground evaluates every subset of a model's templates (2^n - 1)")
    stacks = {}
    raw_stacks = data["stacks"]
    if "main" not in raw_stacks:
        raise SpecError(reader.where(data, "stacks", "stacks"), "no `main` stack",
                        "declare stacks: {main: {inputs: {tokens: [batch, seq]}, graph: ...}}")
    for name, raw in raw_stacks.items():
        field = f"stacks.{name}"
        inputs = {k: tuple(v) for k, v in raw["inputs"].items()}
        graph = _graph(reader, raw["graph"], f"{field}.graph", roles)
        _check_edges(graph, set(inputs), reader.where(raw, field))
        for node in graph.values():
            if node.kind == "repeat":
                used = [(r.template, r.where.at("template")) for r in node.schedule.rules]
                used += [(t, node.where.at(f"schedule.map.{k}")) for k, t in node.schedule.mapping.items()]
                for template, where in used:
                    if template not in templates:
                        raise SpecError(where, f"unknown template {template!r}",
                                        "declare it under templates: (known: " + ", ".join(templates) + ")")
        stacks[name] = StackSpec(name, inputs, graph, reader.where(raw, field))
    quant = _quant_context(reader, data.get("quant_context") or {"default": "bf16"}, "quant_context", roles, schemes)
    checkpoints = _checkpoints(reader, data, model_id, root, roles, schemes, missing_snapshot_ok, config_defaults)
    drafts = reader.names(data.get("drafts"), "drafts", data, "drafts")
    return ModelSpec(model_id, data["model_type"], data["family"], str(data.get("name", model_id.split("/")[-1])),
                     str(data.get("notes", "")), reader.where(data), dims, data["max_context"], slots,
                     templates, stacks, quant, drafts, snapshot, config_defaults,
                     unverified=" ".join(str(data.get("unverified", "")).split()), checkpoints=checkpoints)


def _quant_context(reader: "Reader", raw_quant: Any, field: str, roles, schemes) -> dict[str, str]:
    """A ``quant_context`` block (the spec's or a checkpoint's) as ``{"*": default, key: scheme}``,
    every scheme known, every key a role, ``role.leaf`` or a valid module-path pattern."""
    quant = {"*": raw_quant["default"]}
    quant_where = {"*": reader.where(raw_quant, f"{field}.default", "default")}
    overrides = raw_quant.get("overrides") or {}
    for key, scheme in overrides.items():
        quant[key] = scheme
        quant_where[key] = reader.where(overrides, f"{field}.overrides.{key}", key)
    for key, scheme in quant.items():
        if scheme not in schemes:
            raise SpecError(quant_where[key], f"unknown quant scheme {scheme!r}",
                            "use one of: " + ", ".join(sorted(schemes)) + " (or add corpus/quant/<name>.yaml)")
        role = key.split(".")[0]
        if is_pattern(key):   # a module path pattern: a valid glob or regex, checked here
            try:
                module_patterns.matches(key, "")
            except re.error as exc:
                raise SpecError(quant_where[key], f"bad pattern {key!r}: {exc}",
                                "write a glob over module paths (`*.indexer.weights_proj`) or `re:<regex>`") from None
        elif key != "*" and role not in roles:
            raise SpecError(quant_where[key], f"unknown role {role!r}",
                            "use one of: " + ", ".join(sorted(roles)))
    return quant


#: A weight-format name: lower case, digits and ``-`` (it is a CLI value and a results key).
_FORMAT_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")


def _checkpoints(reader: "Reader", data: Any, model_id: str, root: Path, roles, schemes, missing_ok: bool,
                 config_defaults) -> tuple[Checkpoint, ...]:
    """The spec's ``checkpoints:`` list: each id a Hub id other than the spec's and the others',
    each format name well formed, unique and not ``checkpoint`` (the spec's own storage), each
    quant context checked as the spec's, each config snapshot loaded from
    ``corpus/snapshots/<org>--<name>.yaml`` (with the spec's ``config_defaults`` filled in)."""
    out: list[Checkpoint] = []
    raw = data.get("checkpoints") or []
    for i, entry in enumerate(raw):
        field = f"checkpoints.{i}"
        at = reader.where(entry, field)
        cid = check_model_id(entry.get("model"), reader.where(entry, f"{field}.model", "model"))
        fmt = entry.get("format")
        fwhere = reader.where(entry, f"{field}.format", "format")
        if not _FORMAT_NAME.fullmatch(fmt or "") or fmt == "checkpoint":
            raise SpecError(fwhere, f"format {str(fmt)[:40]!r} is not a weight-format name",
                            "write a lower-case name other than `checkpoint`, e.g. `format: fp8` or `format: nvfp4`")
        if cid == model_id or any(c.model_id == cid for c in out):
            raise SpecError(reader.where(entry, f"{field}.model", "model"), f"checkpoint {cid!r} is listed twice",
                            "list each published checkpoint once (the spec's own id is its `checkpoint` format)")
        if any(c.format == fmt for c in out):
            raise SpecError(fwhere, f"format {fmt!r} names two checkpoints",
                            "give each checkpoint its own format name, e.g. `fp8` and `fp8-static`")
        quant = _quant_context(reader, entry["quant_context"], f"{field}.quant_context", roles, schemes)
        snap = _load_snapshot(root, slug(cid), at, missing_ok)
        snap = Snapshot(snap.source, with_config_defaults(snap.fields, config_defaults), snap.where)
        out.append(Checkpoint(cid, fmt, quant, snap, str(entry.get("notes", "")), at))
    return tuple(out)


def load_corpus(root: Path | str | None = None, missing_snapshots_ok: bool = False) -> Corpus:
    """Read and schema-check the whole corpus. Raises :class:`SpecError` on the first problem.

    ``missing_snapshots_ok`` lets a model without its config snapshot load (with no fields), so
    ``archledger snapshot`` can record the first one."""
    root = Path(root) if root else DEFAULT_ROOT
    if not (root / "dims.yaml").exists():
        raise SpecError(Where(str(root)), "not a corpus folder (no dims.yaml)",
                        "pass --corpus pointing at the corpus/ directory")
    shared = load_shared(root)
    models: dict[str, ModelSpec] = {}
    for path in sorted((root / "models").glob("*.yaml")):
        model = load_model(path, root, shared.roles, shared.schemes, missing_snapshots_ok)
        if model.model_id in models:
            raise SpecError(model.where, f"model {model.model_id!r} is declared twice",
                            f"also in {models[model.model_id].where.file}; keep one")
        models[model.model_id] = model
    corpus = replace(shared, models=models)
    found = {}
    for path in sorted((root / "variants").glob("*.yaml")):
        # the name becomes the id what-if/<name>, a results partition and a page anchor
        check_name(path.stem, Where(f"corpus/variants/{path.name}"), "variant file name", "DeepSeek-V3-DSA.yaml")
        found[path.stem] = variant_rules.load(Reader(path, root, file_schemas.VARIANT), path.stem, corpus)
    return replace(corpus, variants=found)


def load_shared(root: Path) -> Corpus:
    """The corpus without its model specs and variants (``models`` empty): the tables, quant
    schemes, components (library and drafts) and slot contracts every model may use, each
    schema-checked as :func:`load_corpus` checks it. ``root`` must hold ``dims.yaml``."""
    refuse_symlinks(root, root, root.name)   # before reading anything: a link could read any file
    dims = _load_dims(root)
    roles = _load_roles(root)
    schemes = {p.stem: _load_scheme(p, root) for p in sorted((root / "quant").glob("*.yaml"))}
    components = {p.stem: _load_component(p, root, roles, False)
                  for p in sorted((root / "components" / "library").glob("*.yaml"))}
    drafts = {p.stem: _load_component(p, root, roles, True)
              for p in sorted((root / "components" / "drafts").glob("*.yaml"))}
    for name in drafts:
        if name in components:
            raise SpecError(drafts[name].where, f"draft {name!r} has the name of a library component",
                            "rename the draft")
    return Corpus(root, dims, roles, schemes, components, drafts, {}, _load_slot_contracts(root, roles))


def _load_slot_contracts(root: Path, roles: dict[str, RoleInfo]) -> dict[str, "variant_rules.SlotContract"]:
    path = root / "slots.yaml"
    if not path.exists():
        return {}
    reader = Reader(path, root, file_schemas.SLOTS)   # kinds, fields and counts: its schema
    out = {}
    for name, row in reader.data.items():
        kinds = reader.names(row["roles"], f"{name}.roles", row, "roles")
        for role in kinds:
            if role not in roles:
                raise SpecError(reader.where(row, f"{name}.roles", "roles"), f"unknown role {role!r}",
                                "use one of: " + ", ".join(sorted(roles)))
        out[name] = variant_rules.SlotContract(name, kinds, row["inputs"], row["doc"])
    return out
