"""A model spec file, from YAML to :class:`ModelSpec`: fills, stacks, quant contexts, checkpoints, config snapshots.

Layer: engine.language. :func:`load_model` reads ``models/<org--name>.yaml`` (or a contract
variant's spec) with its config snapshot (``corpus/snapshots/``), its declared config defaults and
its other published checkpoints; :func:`config_view` is how a text spec reads a multimodal config.

Invariants: a corpus spec's file is named by its id's slug; the spec's ``model_type`` is its
config's; a published config value always wins over a declared default; every template a schedule
names is declared, and there are at most :data:`MAX_TEMPLATES`; every quant scheme is known and
every override key a role, ``role.leaf`` or a valid module-path pattern; checkpoint ids and formats
are unique. Errors are one line naming the file, line, field and the fix.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from engine.language import file_schemas, module_patterns
from engine.language.errors import SpecError, Where
from engine.language.graph_load import _check_edges, _graph
from engine.language.ir import Checkpoint, ConfigDefault, Fill, ModelSpec, Snapshot, StackSpec
from engine.language.module_patterns import is_pattern
from engine.language.names import check_model_id, check_symbol_name, slug, snapshot_path
from engine.language.reader import Reader
from engine.language.yamlio import LineDict

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
