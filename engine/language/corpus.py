"""Load the corpus (YAML) into SpecIR with a schema check; every error names file:line and the fix.

Layer: engine.language. Layout under the corpus root::

    dims.yaml   roles.yaml   quant/*.yaml   components/library/*.yaml   components/drafts/*.yaml
    models/*.yaml   snapshots/*.yaml

A draft component is visible only to a model whose spec lists it under ``drafts:``.

Here: the :class:`Corpus`, the corpus-wide tables (dims, roles, quant schemes, slot contracts) and
:func:`load_corpus` / :func:`load_shared`; a model spec is read by :mod:`engine.language.model_load`,
a graph and a component file by :mod:`engine.language.graph_load`, any file through
:class:`engine.language.reader.Reader`; names and paths are :mod:`engine.language.names`'s.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.project import PACKAGE_ROOT
from engine.language import expr, file_schemas, symbols, variants as variant_rules
from engine.language.dtypes import DTYPE_BYTES
from engine.language.errors import SpecError, Where
from engine.language.filememo import ContentMemo
from engine.language.graph_load import SHARD_WORLDS, _load_component
from engine.language.ir import ComponentSpec, DimInfo, ModelSpec, QuantScheme, RoleInfo, StoredTensor
from engine.language.model_load import load_model
# re-exported for the importers that read them here (engine/deploy, engine/serving, engine/verify/scaffold.py)
from engine.language.names import (  # noqa: F401
    check_model_id, check_name, check_symbol_name, pick_model, refuse_symlinks, shown_value, slug)
from engine.language.reader import Reader

DEFAULT_ROOT = PACKAGE_ROOT / "corpus"
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



#: Corpora this process loaded (:func:`load_corpus`), by the folder, the mode and the bytes of every
#: file below it (engine.language.filememo: a link or a file over the input cap makes no key).
_LOADED = ContentMemo()


def load_corpus(root: Path | str | None = None, missing_snapshots_ok: bool = False) -> Corpus:
    """Read and schema-check the whole corpus. Raises :class:`SpecError` on the first problem.

    ``missing_snapshots_ok`` lets a model without its config snapshot load (with no fields), so
    ``archledger snapshot`` can record the first one.

    A corpus whose files (names and bytes) this process already loaded from the same folder is that
    same object: loading is a pure function of those files (it reads nothing else and no
    environment), and nothing mutates a loaded corpus (frozen dataclasses; a change is a copy, e.g.
    ``dataclasses.replace``). One load is ~0.3 CPU-s, and a test worker's commands and fixtures loaded
    the unchanged repository corpus about a hundred times. A link anywhere below the folder, or a
    file over the input cap, makes no key (the load runs and refuses it, as without the memo); a
    load that fails, or whose files changed while it read them, is not kept."""
    root = Path(root) if root else DEFAULT_ROOT
    return _LOADED.get(("corpus", str(root), str(root.resolve()), missing_snapshots_ok), _entries(root),
                       lambda: _load_corpus(root, missing_snapshots_ok))


def _entries(root: Path) -> list[Path]:
    """Every file below ``root`` and every link (a linked folder is listed, not entered), sorted."""
    out = []
    for folder, dirs, files in os.walk(root):
        out += [Path(folder) / name for name in files]
        out += [Path(folder) / name for name in dirs if os.path.islink(os.path.join(folder, name))]
    return sorted(out)


def forget_loaded() -> None:
    """Empty :func:`load_corpus`'s memo: the next load reads every file (``archledger bench`` times
    real loads, and walks of a fresh corpus object each run)."""
    _LOADED.clear()


def _load_corpus(root: Path, missing_snapshots_ok: bool) -> Corpus:
    """:func:`load_corpus`'s reading, every time."""
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
