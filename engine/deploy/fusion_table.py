"""Fusion rule tables as data: one per framework (``corpus/fusion/*.yaml``), read and checked.

Layer: engine.deploy. This module holds what a table says and the questions asked of it without a
program (its token regimes, the rules live on a GPU and config, its runtime reserve, overlap,
admission and routing); :mod:`engine.deploy.fusion` matches the rules on a program and fuses.
Invariants: a loaded table is frozen (dataclasses) and read once per process and content of its
files (:func:`load_tables`); every bad field is a one-line SpecError naming file, line and field.

A rule is a small operator pattern plus conditions:

* ``chain: [op, ...]`` (optional ``names:``): each member's output feeds the next;
* ``siblings: {op, names}``: two or more nodes reading the same input run as one kernel;
* ``component: {role}`` with ``extra: [op, ...]``: all ops of one component instance, plus
  adjacent ops of the listed kinds;
* ``when:`` ``arch``, ``phases``, ``min_degree``, ``max_tokens`` (tokens per device per step),
  ``dims`` (a named size takes one of the listed values), ``weight_dtype``; ``enabled: false``
  lists a real but opt-in fusion without applying it; ``compute:`` the dtype the fused kernel's
  MMAs run in when the framework's kernel quantizes its operands (DeepGEMM's FP8 indexer logits).

A table also states the framework's runtime reserve (``runtime_reserve:``): memory per GPU the
runtime holds beside weights, the prefill working set and the KV cache (non-torch allocations such
as NCCL and custom all-reduce buffers, CUDA graph pools where the framework counts them before
sizing the KV cache, attention metadata), each entry with its figure (``mib:`` or ``gib:``, times
tp x pp with ``per: tp_pp``; ``when: {min_replica_gpus: n}`` when only multi-GPU replicas hold it)
and its ``src:``. :func:`reserve_bytes` sums what applies to a parallel config. ``expert_all_to_all:``
names the library running the expert dispatch/combine (DeepEP: kernels per phase, payload dtypes),
read into :class:`~engine.deploy.expert_comm.A2APolicy` (``FusionTable.a2a``) and applied after
fusion by :func:`engine.deploy.transport.transport`.
``overlap:`` lists the
schedule overlap policies the framework can run (``two_batch``; ``enabled:`` true when on by
default), each with its ``src:``: engine.deploy.sol's schedule estimate under it.
``kv_admission:``
states its KV page size and admission headroom (engine.deploy.admission), with its ``src:``.
``moe_routing:`` names the expert routing whose measured MoE tables an expert-parallel fused MoE
reads (``distribution: power_law_1.2``, the variant suffix of gpus/measured's ``moe-<dtype>_<distribution>``
tables; left out: ``balanced``), with its ``src:`` (engine.deploy.measured; docs/deployment.md
"Uneven expert routing").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from engine.project import PACKAGE_ROOT
from engine.language import file_schemas
from engine.language.corpus import COMPUTE_CLASSES, Reader
from engine.language.errors import SpecError
from engine.language.filememo import ContentMemo
from engine.language.ops import OPS
from engine.deploy.expert_comm import KERNELS, PAYLOAD_BYTES, A2APolicy
from engine.deploy.admission import NO_ADMISSION, Admission
from engine.deploy.device_program import COLLECTIVES

DEFAULT_ROOT = PACKAGE_ROOT / "corpus" / "fusion"
#: The routing of a framework whose table states no ``moe_routing:`` (every expert equally loaded).
BALANCED = "balanced"


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    doc: str
    src: str
    kind: str                       # chain | siblings | component
    ops: tuple[str, ...]
    names: tuple
    role: str | None
    extra: tuple[str, ...]
    when: Mapping
    enabled: bool
    where: object
    compute: str = ""               # the dtype the fused kernel's MMAs run in, when not its matmul's


@dataclass(frozen=True, slots=True)
class Reserve:
    """One entry of a framework's runtime reserve: ``bytes`` per GPU (times tp x pp when ``per`` is
    ``tp_pp``), held when the model replica spans at least ``min_replica_gpus`` GPUs."""
    name: str
    doc: str
    src: str
    bytes: float
    per: str = ""
    min_replica_gpus: int = 1

    def for_config(self, config) -> float:
        """Bytes per GPU under ``config`` (a ParallelConfig)."""
        if config.tp * config.pp * config.cp < self.min_replica_gpus:
            return 0.0
        return self.bytes * (config.tp * config.pp if self.per == "tp_pp" else 1)


@dataclass(frozen=True, slots=True)
class FusionTable:
    framework: str
    version: str
    doc: str
    rules: tuple[Rule, ...]
    reserve: tuple[Reserve, ...] = ()
    a2a: A2APolicy | None = None        # the expert all-to-all's library (expert_all_to_all:)
    #: schedule overlap policies the framework can run (``overlap:``), policy -> on by default
    overlap: Mapping = None
    #: KV paging and admission (``kv_admission:``): the steady-state capacity's policy
    admission: Admission = NO_ADMISSION
    #: the routing an expert-parallel MoE's measured table is read at (``moe_routing:``)
    moe_routing: str = BALANCED


#: The schedule overlap policies engine.deploy.sol models (``none``: one kernel after another).
OVERLAP_POLICIES = ("none", "two_batch")


def overlap_default(table: "FusionTable | None") -> str:
    """The policy the framework runs without being asked: a declared policy with ``enabled:``
    true (left out: false, an opt-in server flag), else ``none``."""
    on = [p for p, enabled in ((table.overlap or {}).items() if table else ()) if enabled]
    return on[0] if on else "none"


def _overlap(reader: Reader, raw_list) -> dict:
    """``overlap:`` entries: policy -> enabled by default."""
    out = {}
    for i, raw in enumerate(raw_list or ()):
        policy = raw["policy"]
        if policy not in OVERLAP_POLICIES[1:] or policy in out:
            raise SpecError(reader.where(raw, f"overlap[{i}].policy", "policy"),
                            f"overlap policy {policy!r} is unknown or declared twice",
                            "declare each of: " + ", ".join(OVERLAP_POLICIES[1:]) + " at most once")
        out[policy] = bool(raw.get("enabled", False))
    return out


def token_limits(table: "FusionTable | None") -> list[int]:
    """Every enabled rule's ``max_tokens`` limit, sorted: the fusion token regimes of a table (a
    point's regime is how many limits its tokens per device exceed; points of one regime fuse alike)."""
    if table is None:
        return []
    return sorted({r.when["max_tokens"] for r in table.rules if r.enabled and "max_tokens" in r.when})


def live_rules(table: "FusionTable | None", gpu, config, phase: str) -> tuple[Rule, ...]:
    """The enabled rules whose token-free conditions (arch, phases, min_degree; :func:`_conditions`
    checks them whatever the tokens) hold for ``phase`` on ``gpu`` under ``config``: the only rules
    that can match there. Two GPUs with the same live rules fuse a phase alike at equal tokens."""
    if table is None:
        return ()
    out = []
    for r in table.rules:
        when = r.when
        if not r.enabled or ("arch" in when and gpu.arch not in when["arch"]):
            continue
        if "phases" in when and phase not in when["phases"]:
            continue
        if any(getattr(config, name, 1) < least for name, least in (when.get("min_degree") or {}).items()):
            continue
        out.append(r)
    return tuple(out)


def live_token_limits(table: "FusionTable | None", gpu, config, phase: str) -> list[int]:
    """The limits of the rules that can apply to ``phase`` on ``gpu`` under ``config``
    (:func:`live_rules`). A rule that is not live never matches, so its limit cannot change this
    phase's program."""
    return sorted({r.when["max_tokens"] for r in live_rules(table, gpu, config, phase) if "max_tokens" in r.when})


def representative_tokens(limits: list[int], regime: int) -> int | None:
    """A token count in regime ``regime`` of ``limits`` (None without limits: nothing to decide)."""
    if not limits:
        return None
    return limits[regime] if regime < len(limits) else limits[-1] + 1


def admission_of(table: "FusionTable | None") -> Admission:
    """The framework's KV paging and admission policy (:data:`NO_ADMISSION` without a table)."""
    return table.admission if table else NO_ADMISSION


def moe_routing_of(table: "FusionTable | None") -> str:
    """The expert routing an expert-parallel MoE's measured table is read at (:data:`BALANCED`
    without a table or a ``moe_routing:``)."""
    return table.moe_routing if table else BALANCED


def reserve_bytes(table: "FusionTable | None", config) -> float:
    """The runtime reserve per GPU of ``table``'s framework under ``config`` (0 without a table)."""
    return float(sum(r.for_config(config) for r in table.reserve)) if table else 0.0


def _reserve(reader: Reader, raw_list) -> tuple[Reserve, ...]:
    """``runtime_reserve:`` entries (kinds, sources and ranges: the schema's, engine.language.file_schemas.RESERVE)."""
    out, seen = [], set()
    for i, raw in enumerate(raw_list or ()):
        field = f"runtime_reserve[{i}]"
        units = [k for k in ("mib", "gib") if k in raw]
        if len(units) != 1:
            raise SpecError(reader.where(raw, field), f"reserve {raw['name']!r} needs one size in MiB or GiB",
                            "write exactly one of `mib: <number>` or `gib: <number>` (>= 0)")
        value = raw[units[0]]
        per = raw.get("per", "")
        if per not in ("", "tp_pp"):
            raise SpecError(reader.where(raw, f"{field}.per", "per"), f"unknown scaling {per!r}",
                            "leave out `per:` (per GPU) or write `per: tp_pp` (times tp x pp)")
        when = raw.get("when") or {}
        if raw["name"] in seen:
            raise SpecError(reader.where(raw, f"{field}.name", "name"), f"reserve {raw['name']!r} is declared twice",
                            "give every entry its own name")
        seen.add(raw["name"])
        scale = 1 << 20 if units[0] == "mib" else 1 << 30
        out.append(Reserve(raw["name"], raw.get("doc", ""), raw["src"], float(value) * scale, per,
                           int(when.get("min_replica_gpus", 1))))
    return tuple(out)


def load_table(path: Path, root: Path | None = None) -> FusionTable:
    reader = Reader(path, root or path.parent, file_schemas.FUSION)   # kinds and fields: its schema
    data = reader.data
    known_ops = set(OPS) | set(COLLECTIVES)
    rules, seen = [], set()
    for i, raw in enumerate(data["rules"] or []):
        field = f"rules[{i}]"
        shapes = [k for k in ("chain", "siblings", "component") if k in raw]
        if len(shapes) != 1:
            raise SpecError(reader.where(raw, field), f"rule {raw.get('name')!r} needs exactly one pattern",
                            "write one of chain: [...], siblings: {op, names}, component: {role}")
        kind = shapes[0]
        names: tuple = ()
        role, extra = None, tuple(raw.get("extra") or ())
        if kind == "chain":
            ops = tuple(raw["chain"])
            names = tuple(raw.get("names") or (None,) * len(ops))
            if len(names) != len(ops):
                raise SpecError(reader.where(raw, f"{field}.names", "names"), "names and chain differ in length",
                                "give one name (or null) per chain member")
        elif kind == "siblings":
            sib = raw["siblings"]
            ops, names = (sib["op"],), tuple(sib.get("names") or ())
        else:
            ops, role = (), raw["component"]["role"]
        for op in ops + extra:
            if op not in known_ops:
                raise SpecError(reader.where(raw, field), f"unknown op {op!r} in rule {raw['name']!r}",
                                "use a primitive op or a collective: " + ", ".join(sorted(known_ops)))
        when = raw.get("when") or {}
        if raw["name"] in seen:
            raise SpecError(reader.where(raw, f"{field}.name", "name"), f"rule {raw['name']!r} is declared twice",
                            "give every rule its own name")
        seen.add(raw["name"])
        compute = raw.get("compute", "")
        if compute and compute not in COMPUTE_CLASSES:
            raise SpecError(reader.where(raw, f"{field}.compute", "compute"), f"unknown compute class {compute!r}",
                            "use one of: " + ", ".join(COMPUTE_CLASSES))
        rules.append(Rule(raw["name"], raw["doc"], raw["src"], kind, ops, names, role, extra,
                          dict(when), raw.get("enabled", True), reader.where(raw, field), compute))
    raw = data.get("kv_admission")
    admission = NO_ADMISSION if raw is None else Admission(
        int(raw["page_tokens"]), float(raw.get("free_fraction", 0.0)), float(raw.get("reserve_ratio", 0.0)),
        int(raw.get("reserve_clip_tokens", 0)), raw["src"])
    return FusionTable(data["framework"], data["version"], data["doc"], tuple(rules),
                       _reserve(reader, data.get("runtime_reserve")), _a2a(reader, data.get("expert_all_to_all")),
                       _overlap(reader, data.get("overlap")), admission, _moe_routing(reader, data.get("moe_routing")))


def _moe_routing(reader: Reader, raw) -> str:
    """The table's ``moe_routing:`` distribution (:data:`BALANCED` without one): ``balanced`` or a
    power law ``power_law_<alpha>``, the routings the measured MoE tables are imported at."""
    if raw is None:
        return BALANCED
    value = raw["distribution"]
    alpha = value.removeprefix("power_law_")
    if value != BALANCED and (alpha == value or not alpha.replace(".", "", 1).isdigit()):
        raise SpecError(reader.where(raw, "moe_routing.distribution", "distribution"),
                        f"unknown expert routing {value!r}", "write balanced or power_law_<alpha>, e.g. power_law_1.2")
    return value


def _a2a(reader: Reader, raw) -> A2APolicy | None:
    """The table's ``expert_all_to_all:`` block (None without one: a plain all-to-all)."""
    if raw is None:
        return None
    kernels = raw.get("kernels") or {}
    for phase, kernel in kernels.items():
        if phase not in ("prefill", "decode") or kernel not in KERNELS:
            raise SpecError(reader.where(raw, f"expert_all_to_all.kernels.{phase}", "kernels"),
                            f"unknown phase or kernel {phase}: {kernel}",
                            "write kernels: {prefill: normal, decode: low_latency}")
    dispatch, combine = raw["dispatch"], raw["combine"]
    for field, value in (("dispatch", dispatch["dtype"]), ("combine", combine["dtype"])):
        if value not in PAYLOAD_BYTES:
            raise SpecError(reader.where(raw, f"expert_all_to_all.{field}", field), f"unknown payload dtype {value!r}",
                            "use one of: " + ", ".join(PAYLOAD_BYTES))
    return A2APolicy(raw["library"], tuple(sorted(kernels.items())), dispatch["dtype"],
                     int(dispatch.get("scale_block", 128)), int(dispatch.get("scale_bytes", 4)),
                     bool(dispatch.get("needs_block_fp8_experts", False)), combine["dtype"], raw["doc"],
                     tuple(raw["src"]))


def load_tables(root: Path | str | None = None) -> dict[str, FusionTable]:
    """Every table under ``root`` (default: the corpus's ``fusion/``), keyed by framework; read once
    per process and content of the files (a build asks per model). Tables are frozen, the dict is
    each caller's own."""
    root = Path(root) if root else DEFAULT_ROOT
    return dict(_TABLES.get(("fusion", str(root)), table_files(root), lambda: _load_tables(root)))


_TABLES = ContentMemo()


def table_files(root: Path | str | None = None) -> list[Path]:
    """The files :func:`load_tables` reads (what a memo of anything built from them is keyed by)."""
    return sorted((Path(root) if root else DEFAULT_ROOT).glob("*.yaml"))


def _load_tables(root: Path) -> dict[str, FusionTable]:
    tables = {}
    for path in table_files(root):
        table = load_table(path, root.parent)
        tables[table.framework] = table
    return tables
