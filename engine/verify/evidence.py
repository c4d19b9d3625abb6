"""The evidence a spec is verified against, and the verification registry that explains it.

Layer: engine.verify. Per model the corpus keeps three snapshots side by side in ``corpus/snapshots/``:

* ``<org>--<name>.yaml``: config.json fields (the ones the spec binds plus the ones the
  verification registry names, so a field the spec ignores is visible);
* ``<org>--<name>.tensors.yaml``: the checkpoint tensor manifest (:mod:`engine.verify.manifest`);
* ``<org>--<name>.source.yaml``: the forward methods of the modeling source (anchor text).

``corpus/verification.yaml`` is the registry: canonical checkpoint prefixes, what config.json's
per-layer plans mean, and which config fields are structural. Everything here is loaded lazily;
the build and the site never need it unless they validate.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from engine.verify import manifest as manifest_mod
from engine.language import file_schemas
from engine.language.corpus import Corpus
from engine.language.names import is_snapshot_name, snapshot_path
from engine.language.errors import SpecError, Where
from engine.language.ir import ModelSpec
from engine.verify.manifest import Manifest
from engine.language.yamlio import load_yaml


@dataclass(frozen=True, slots=True)
class LayerPlan:
    field: str
    feature: str
    expect: str
    defaults: dict[str, Any]
    values: tuple[str, ...]
    where: Where
    #: the list (or one-character-per-layer string) has exactly one entry per main-stack layer
    whole: bool = False
    #: what the config holds at ``field`` (:data:`PLAN_KINDS`); an entry applies only to a value of its kind
    kind: str = "scalar"
    #: other config fields ``expect`` reads, with their kinds: the entry applies only where they fit
    reads: dict[str, str] = field(default_factory=dict)
    #: the component a layer this entry marks fills its attention slot with, where the field
    #: names one mixer (``linear_attn_config.kda_layers``: KDA); ``archledger new`` builds templates from it
    fill: str | None = None


@dataclass(frozen=True, slots=True)
class StructuralField:
    field: str          # dotted config path, e.g. rope_scaling.factor
    op: str
    dim: str
    doc: str
    unless: dict[str, Any]
    compare: bool
    cache: str | None   # a cache growth law the field demands (axiom guard)
    where: Where
    same_as: str | None = None   # the same setting under another config path (read either one)


@dataclass(frozen=True, slots=True)
class Switch:
    """A config switch that sets a component option (``mla_use_output_gate`` -> mla_attention's
    ``output_gate``): ``archledger new`` writes the config's value into every fill of the component."""

    field: str          # dotted config path
    component: str
    option: str
    where: Where


@dataclass(frozen=True, slots=True)
class Registry:
    prefixes: tuple[tuple[str, str], ...]
    other_modalities: tuple[str, ...]
    layer_plans: tuple[LayerPlan, ...]
    structural: tuple[StructuralField, ...]
    #: the transformers release every modeling-code evidence file is recorded with (the oracle
    #: extra of pyproject.toml pins the same; ``archledger snapshot --all --meta`` moves both)
    oracle: str | None = None
    switches: tuple[Switch, ...] = ()

    def top_level_fields(self) -> set[str]:
        """Config keys the snapshot records for the guards even when no spec reads them."""
        keys = {p.field.split(".")[0] for p in self.layer_plans}
        keys |= {k for p in self.layer_plans for k in p.defaults}
        keys |= {s.field.split(".")[0] for s in self.structural}
        keys |= {k for s in self.structural for k in s.unless}
        return keys


@lru_cache(maxsize=8)
def _registry(path: str, rel: str) -> Registry:
    data = load_yaml(Path(path), rel, hint="write its canonical:, layer_plans: and structural: sections "
                     "(docs/verification.md)", schema=file_schemas.VERIFICATION)

    def where(node, key, i) -> Where:
        return Where(rel, node.line_of_item(i), f"{key}[{i}]")

    canon = data.get("canonical") or {}   # kinds and fields: the schema's (engine.language.file_schemas)
    prefixes = tuple((p["from"], p["to"]) for p in canon.get("prefixes") or [])
    plans = []
    for i, raw in enumerate(data.get("layer_plans") or []):
        if raw["feature"] not in FEATURES:
            raise SpecError(where(data["layer_plans"], "layer_plans", i), f"unknown feature {raw['feature']!r}",
                            "use one of: " + ", ".join(FEATURES))
        for key, kind in [("kind", raw["kind"])] + [(f"reads.{f}", k) for f, k in (raw.get("reads") or {}).items()]:
            if kind not in PLAN_KINDS:
                raise SpecError(where(data["layer_plans"], "layer_plans", i).at(key), f"unknown kind {kind!r}",
                                "use one of: " + ", ".join(f"{k} ({doc})" for k, doc in PLAN_KINDS.items()))
        plans.append(LayerPlan(raw["field"], raw["feature"], raw["expect"], dict(raw.get("defaults") or {}),
                               tuple(raw.get("values") or ()), where(data["layer_plans"], "layer_plans", i),
                               bool(raw.get("whole", False)), raw["kind"], dict(raw.get("reads") or {}),
                               raw.get("fill")))
    structural = []
    for i, raw in enumerate(data.get("structural") or []):
        structural.append(StructuralField(raw["field"], raw["op"], raw["dim"], raw.get("doc", ""),
                                          dict(raw.get("unless") or {}), bool(raw.get("compare", True)),
                                          raw.get("cache"), where(data["structural"], "structural", i),
                                          raw.get("same_as")))
    switches = tuple(Switch(raw["field"], raw["component"], raw["option"], where(data["switches"], "switches", i))
                     for i, raw in enumerate(data.get("switches") or []))
    oracle = (data.get("oracle") or {}).get("transformers")
    return Registry(prefixes, tuple(canon.get("other_modalities") or ()), tuple(plans), tuple(structural),
                    str(oracle) if oracle is not None else None, switches)


#: What a layer plan's config field holds: the schedule guard applies an entry to a value of its
#: kind only, and says which kinds the registry expects when a config holds another.
PLAN_KINDS = {"per_layer": "a list, or a string of one character, per layer: `entry` is the layer's",
              "layer_set": "a list of layer numbers, read as config.<field> in `expect`",
              "scalar": "one number, flag or name for the whole stack"}

#: Per-layer features the evaluation can state (see guards/schedule.py).
FEATURES = ("moe", "window", "indexer", "hash_routed", "recurrent", "attention")


def clear_registry() -> None:
    """Forget the registries read so far (after ``snapshot --all`` rewrote the pin)."""
    _registry.cache_clear()


def registry(corpus_root: Path) -> Registry:
    path = Path(corpus_root) / "verification.yaml"
    return _registry(str(path), "corpus/verification.yaml")


#: How an evidence file names the transformers release it was recorded with ("transformers 5.24.0 ...").
_TRANSFORMERS = re.compile(r"transformers (\S+)")


def transformers_release(provenance: Any) -> str | None:
    """The transformers release a provenance block was recorded with (its ``transformers``,
    ``tool`` or ``file``), else None (checkpoint-header evidence names none)."""
    if not isinstance(provenance, dict):
        return None
    if provenance.get("transformers"):
        return str(provenance["transformers"])
    for key in ("tool", "file"):
        found = _TRANSFORMERS.match(str(provenance.get(key, "")))
        if found:
            return found[1]
    return None


# -- evidence files ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SourceSnapshot:
    """Forward methods of the modeling source, by ``Class.forward``; anchors must occur in them."""

    source: str
    provenance: dict[str, Any]
    excerpts: dict[str, str]
    where: Where = field(default_factory=Where)

    def contains(self, anchor: str) -> str | None:
        """The excerpt that contains ``anchor`` (whitespace-insensitive), or None."""
        needle = " ".join(anchor.split())
        for name, text in self.excerpts.items():
            if needle in " ".join(text.split()):
                return name
        return None


@dataclass(frozen=True, slots=True)
class Evidence:
    config: dict[str, Any]
    config_source: str
    manifest: Manifest | None
    source: SourceSnapshot | None


def snapshot_name(model: ModelSpec) -> str:
    """The model's snapshot base name. The loader already checked it (engine.language.names.snapshot_path);
    checked again because evidence paths are built from it, and a ModelSpec can be made by hand."""
    name = Path(model.snapshot.where.file).stem
    if not is_snapshot_name(name):
        raise SpecError(model.where.at("snapshot"), f"snapshot {name[:60]!r} is not a snapshot name",
                        "write the file's base name under corpus/snapshots/, e.g. `snapshot: Qwen--Qwen3-8B`")
    return name


def source_path(root: Path, name: str) -> Path:
    """``corpus/snapshots/<name>.source.yaml``; refused if it would leave ``corpus/snapshots/``."""
    return snapshot_path(root, name, Where(f"corpus/snapshots/{name[:60]}.source.yaml"), ".source.yaml")


def load_evidence(corpus: Corpus, model: ModelSpec) -> Evidence:
    name = snapshot_name(model)
    mpath = manifest_mod.manifest_path(corpus.root, name)
    manifest = manifest_mod.load(mpath, corpus.root) if mpath.exists() else None
    spath = source_path(corpus.root, name)
    source = None
    if spath.exists():
        rel = f"corpus/snapshots/{spath.name}"
        data = load_yaml(spath, rel, hint="regenerate the file with `archledger snapshot MODEL`",
                         schema=file_schemas.SOURCE_SNAPSHOT)
        source = SourceSnapshot(data["source"], dict(data.get("provenance") or {}), dict(data["excerpts"]),
                                Where(rel, 1))
    return Evidence(dict(model.snapshot.fields), model.snapshot.source, manifest, source)


def forward_excerpts(text: str) -> dict[str, str]:
    """Every ``forward`` method of every class in a Python source, by ``Class.forward``.

    The source is parsed, never executed."""
    tree = ast.parse(text)
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    segment = ast.get_source_segment(text, item) or ""
                    out[f"{node.name}.forward"] = _dedent(segment)
    return dict(sorted(out.items()))


def _dedent(segment: str) -> str:
    import textwrap
    first, _, rest = segment.partition("\n")
    return (first + "\n" + textwrap.dedent(rest)).rstrip() + "\n"


def dump_source(source: str, provenance: dict[str, Any], excerpts: dict[str, str]) -> str:
    header = ("# Forward methods of the modeling source: the text `src:` anchors must occur in.\n"
              "# Refresh with `archledger snapshot MODEL` (see CONTRIBUTING.md, \"Record evidence\").\n")

    class _Literal(str):
        pass

    def _literal(dumper, data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(_Literal, _literal)
    clean = {k: _Literal("\n".join(line.rstrip() for line in v.replace("\t", "    ").splitlines()) + "\n")
             for k, v in excerpts.items()}
    body = {"source": source, "provenance": provenance, "excerpts": clean}
    return header + yaml.dump(body, Dumper=_Dumper, sort_keys=False, width=200, allow_unicode=True)
