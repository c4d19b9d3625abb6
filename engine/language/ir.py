"""SpecIR: the corpus as frozen values. YAML is read once (engine.language.corpus); nothing downstream re-reads it.

Layer: engine.language. Raw expression texts are kept as written (strings/numbers) and are only turned into
sympy by :mod:`engine.language.expr` during evaluation, under the binding at hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.language.errors import Where
from engine.language.module_patterns import is_pattern


@dataclass(frozen=True, slots=True)
class DimInfo:
    """A row of the global dims table: what a dim is and which parallel world may shard it."""

    name: str
    kind: str
    shard: str
    doc: str
    #: A parallel group larger than this dim's count keeps one unit per device and replicates
    #: (KV heads under a TP group wider than the KV head count, as vLLM does).
    replicate: bool = False


@dataclass(frozen=True, slots=True)
class RoleInfo:
    """A row of the roles table."""

    name: str
    doc: str


@dataclass(frozen=True, slots=True)
class StoredTensor:
    """One tensor a quant scheme writes for a matrix leaf: key template, dtype, shape over rows/cols."""

    key: str
    dtype: str
    shape: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class QuantScheme:
    """A storage format, as data: what a matrix leaf becomes on disk, and the dtype of vectors."""

    name: str
    doc: str
    matrix: tuple[StoredTensor, ...]
    vector_dtype: str
    where: Where
    #: The weights' operand class (``bf16``, ``fp8``, ``fp4``) and the activations' in the kernels
    #: frameworks run on this format (``activations == compute``: W/A quantized, e.g. FP8 W8A8;
    #: ``bf16`` activations: weight-only, e.g. MXFP4 W4A16). :attr:`operands` joins them; the GPU
    #: decides the dtype the matmul runs at (engine.deploy.hardware.GPU.compute_dtype).
    compute: str = "bf16"
    activations: str = ""
    #: ``quantization_config`` keys (config.json) that identify this format in a published
    #: checkpoint, e.g. ``{quant_method: fp8, weight_block_size: [128, 128]}``; empty for plain dtypes.
    hf: Mapping[str, Any] = field(default_factory=dict)
    #: The entry of ModelOpt's per-module ``quantized_layers`` map (a MIXED_PRECISION checkpoint)
    #: that names this format for one module, e.g. ``{quant_algo: FP8}``; empty if none.
    hf_layer: Mapping[str, Any] = field(default_factory=dict)

    @property
    def operands(self) -> str:
        """``weights`` or ``weights/activations`` when they differ (the token a step carries)."""
        acts = self.activations or self.compute
        return self.compute if acts == self.compute else f"{self.compute}/{acts}"


@dataclass(frozen=True, slots=True)
class ScheduleRule:
    """Layers matching ``when`` (first match wins; ``None`` matches all) use ``template``."""

    template: str
    when: Any = None
    where: Where = field(default_factory=Where)  # the rule (or the node's `template:`), for error lines


@dataclass(frozen=True, slots=True)
class Schedule:
    """Per-layer template choice: a list of rules, or ``by`` a config list with a value->template map."""

    rules: tuple[ScheduleRule, ...] = ()
    by: str | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A graph node. ``kind`` is op, component, slot or repeat; ``target`` names what it runs."""

    name: str
    kind: str
    target: str
    where: Where
    inputs: tuple[str, ...] = ()
    dims: Mapping[str, Any] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    when: Any = None
    instances: Any = None
    active: Any = None
    stacked: Any = False
    role: str | None = None
    module: str | None = None
    modules: Mapping[str, str] = field(default_factory=dict)
    weight_axes: Mapping[str, str] = field(default_factory=dict)
    schedule: Schedule | None = None
    index_from: Any = None
    shares: str | None = None
    #: Text the model's forward source contains where this node happens (checked by the source guard).
    src: str | None = None
    #: Publish this node's value on the layer stack's internal stream of that name.
    stream_out: str | None = None
    #: A ``reads`` node: how it takes the stream (``value`` for internal streams; ``each``, ``all``
    #: or ``concat`` for append streams).
    take: str | None = None
    #: A ``repeat`` node: its declared streams, in order.
    streams: Mapping[str, "StreamSpec"] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A value that crosses layers of a layer stack, declared under the repeat node's ``streams:``.

    ``carried``: the residual line, the template's input and output (exactly one per stack).
    ``internal``: a node publishes with ``stream_out``, a later layer's ``reads`` node takes the
    value of the latest earlier publication. ``append``: the value ``source`` (the carried stream,
    or a stack node holding ``count`` elements) is archived after/before the layers matching
    ``after`` / ``before``; readers take ``each``, ``all`` or ``concat``.
    """

    name: str
    kind: str
    src: str
    where: Where
    source: str | None = None
    after: Any = None
    before: Any = None
    count: Any = None


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """A value that survives between decode steps: the ``kv_cache`` node and its growth law."""

    name: str
    node: str
    kind: str
    growth: str
    where: Where
    window: Any = None
    every: Any = None
    #: Element type of this entry (engine.language.dtypes.CACHE_DTYPE_BYTES); None: the KV dtype.
    dtype: str | None = None
    #: ``(scale dtype, block)``: one scale per ``block`` elements stored beside them (needs ``dtype``).
    scale: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """A decode form: nodes ``remove``d from the main graph and nodes added or replaced."""

    remove: tuple[str, ...]
    graph: Mapping[str, NodeSpec]
    where: Where


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    """A YAML DAG of primitives and components with a role, options, derived dims and caches."""

    name: str
    role: str
    doc: str
    where: Where
    options: Mapping[str, Any]
    inputs: tuple[str, ...]
    dims: Mapping[str, Any]
    graph: Mapping[str, NodeSpec]
    outputs: Mapping[str, str]
    cache: tuple[CacheSpec, ...] = ()
    decode_variant: VariantSpec | None = None
    draft: bool = False
    #: The short name of the mixer it is, as the gallery lists it ("gqa", "gdn", "mamba2"); the
    #: component name without a trailing ``_attention`` / ``_mixer`` unless the YAML says ``label:``.
    label: str = ""


@dataclass(frozen=True, slots=True)
class Fill:
    """What fills a slot or a layer template: a component plus options, dim overrides, renames."""

    component: str
    where: Where
    options: Mapping[str, Any] = field(default_factory=dict)
    dims: Mapping[str, Any] = field(default_factory=dict)
    modules: Mapping[str, str] = field(default_factory=dict)
    slots: Mapping[str, "Fill"] = field(default_factory=dict)
    module: str | None = None


@dataclass(frozen=True, slots=True)
class StackSpec:
    """A top-level graph (``main``; ``mtp`` and others are reported separately)."""

    name: str
    inputs: Mapping[str, tuple[str, ...]]
    graph: Mapping[str, NodeSpec]
    where: Where


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The config fields a spec binds, with where they came from."""

    source: str
    fields: Mapping[str, Any]
    where: Where


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model: config snapshot, dim bindings, slot fillings, layer templates, stacks, storage."""

    model_id: str
    model_type: str
    family: str
    display_name: str
    notes: str
    where: Where
    dims: Mapping[str, Any]
    max_context: Any
    slots: Mapping[str, Fill]
    templates: Mapping[str, Fill]
    stacks: Mapping[str, StackSpec]
    quant: Mapping[str, str]
    drafts: tuple[str, ...]
    snapshot: Snapshot
    #: Config fields the modeling code supplies when config.json omits them (``config_defaults:``),
    #: already merged into ``snapshot.fields`` where absent.
    config_defaults: Mapping[str, "ConfigDefault"] = field(default_factory=dict)
    #: Why the spec cannot be verified (``unverified:``: transformers lacks the architecture and no
    #: checkpoint headers are recorded), or "" for a spec held to every guard. A declared spec is
    #: evaluated for ``show`` and ``edit`` but never published: the build lists it, with this reason,
    #: instead of failing ``--strict`` on it, and the gallery says why it is absent.
    unverified: str = ""
    #: Other published checkpoints of this same model (``checkpoints:``): the same architecture
    #: stored another way (FP8, NVFP4, ...), each a weight format of the spec with its own evidence.
    checkpoints: tuple["Checkpoint", ...] = ()

    @property
    def quant_patterns(self) -> tuple[str, ...]:
        """The ``quant_context`` keys that are module-path patterns, in file order (the first that
        covers a leaf picks its scheme; engine.language.storage.scheme_for)."""
        return tuple(k for k in self.quant if k != "*" and is_pattern(k))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A published checkpoint of a spec's model in another storage (``checkpoints:`` entry): its Hub
    id, the weight-format name it is asked for by (``--weight-format``, results' ``weight_format``),
    its quant context (same keys as the spec's) and its own config snapshot
    (``corpus/snapshots/<org>--<name>.yaml``, beside its tensors and source evidence).

    Invariant (checked by :mod:`engine.verify.validate`): its config equals the spec's own up to
    storage fields (engine.language.checkpoints.STORAGE_KEYS), so the spec's walk is its walk too."""

    model_id: str
    format: str
    quant: Mapping[str, str]
    snapshot: Snapshot
    notes: str
    where: Where


@dataclass(frozen=True, slots=True)
class ConfigDefault:
    """A config field's default as the modeling code supplies it: its value and ``src``, the
    place in the modeling code that sets it (e.g. ``configuration_llama4.py: ... = 4``)."""

    field: str
    value: Any
    src: str
    where: Where
    applied: bool      # False when config.json has the field (the published value wins)
