"""Kernel fusion as data: per-framework rule tables (``corpus/fusion/*.yaml``) applied to a program.

Layer: engine.deploy. A rule is a small operator pattern plus conditions:

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

View ops are transparent. Matching runs after communication insertion, per phase; overlapping
matches are resolved largest first. A fused kernel's FLOPs, weight bytes and link bytes are the sum
of its members'; its HBM bytes are only its boundary: inputs produced outside it (read once) and
outputs used outside it (written once). The unfused program is kept alongside.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import sympy

from engine.project import PACKAGE_ROOT
from engine.language import file_schemas
from engine.language.corpus import COMPUTE_CLASSES, Reader
from engine.language.errors import SpecError
from engine.language.filememo import ContentMemo
from engine.language.ops import OPS
from engine.deploy.expert_comm import KERNELS, PAYLOAD_BYTES, A2APolicy
from engine.deploy.admission import NO_ADMISSION, Admission
from engine.deploy.placement import COLLECTIVES, ZERO, Program, Step, step_with

DEFAULT_ROOT = PACKAGE_ROOT / "corpus" / "fusion"
#: The routing of a framework whose table states no ``moe_routing:`` (every expert equally loaded).
BALANCED = "balanced"
MATMULS = ("linear", "head_linear", "embedding")


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


@dataclass(frozen=True, slots=True)
class Match:
    rule: str
    members: tuple[str, ...]        # step uids in program order
    compute: str = ""               # the rule's compute class (Rule.compute)


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


# -- matching ----------------------------------------------------------------------------------------

class _Graph:
    """Producer/consumer links between non-view steps (views are looked through)."""

    def __init__(self, program: Program):
        self.program_steps = program.steps
        self.steps = {s.uid: s for s in program.steps}
        self.order = {s.uid: i for i, s in enumerate(program.steps)}
        self._readers: dict[str, list[int]] | None = None
        self.consumers: dict[str, list[str]] = {}
        for step in program.steps:
            if step.view:
                continue
            for producer in self.producers(step):
                self.consumers.setdefault(producer, []).append(step.uid)

    @property
    def unique(self) -> bool:
        """Whether every step has its own uid (fuse edits steps by uid)."""
        return len(self.order) == len(self.program_steps)

    @property
    def readers(self) -> dict[str, list[int]]:
        """uid -> indices of the steps naming it as an input (views included: fuse renames them);
        built on first use (fuse's), once per program."""
        if self._readers is None:
            self._readers = {}
            for i, step in enumerate(self.program_steps):
                for uid in step.inputs:
                    self._readers.setdefault(uid, []).append(i)
        return self._readers

    def producers(self, step: Step) -> list[str]:
        out = []
        for uid in step.inputs:
            source = self.steps.get(uid)
            if source is not None and source.view:
                out.extend(self.producers(source))
            else:
                out.append(uid)
        return out


#: id(program.steps) -> (the steps, their _Graph, {match: fused step}, {(step uid, inputs): renamed
#: step}): matching and fusing read the same links of a placed program, and the structures of its
#: regimes, arch classes and frameworks fuse many of the same matches. Keyed by the step tuple,
#: all that matching and fusing read of a program: programs holding the same tuple (the MTP draft
#: programs of configs sharing an MTP placement, whose layouts differ) share it.
_PROGRAMS: dict[int, tuple] = {}


def _program_memo(program: Program) -> tuple:
    """``program``'s graph and the fused and renamed steps made of it so far (see _PROGRAMS)."""
    steps = program.steps
    hit = _PROGRAMS.get(id(steps))
    if hit is None or hit[0] is not steps:
        if len(_PROGRAMS) > 4096:      # placements of one model: keep it bounded across models
            _PROGRAMS.clear()
        hit = _PROGRAMS[id(steps)] = (steps, _Graph(program), {}, {})
    return hit


#: id(program) -> [program, base, usable?]: programs whose steps are a base program's followed by
#: steps no rule can take (:func:`note_extension`; usable is checked on first use, by _extension).
_EXTENSIONS: dict[int, tuple] = {}


def note_extension(program: Program, base: Program) -> None:
    """Note that ``program``'s steps are ``base``'s (the same objects) followed by communication
    steps (the pipeline's send/recv, engine.deploy.planner._with_pipeline): :func:`match` and
    :func:`fuse` then reuse ``base``'s candidates, matches and fused steps where the appended
    steps cannot change them (:func:`_extension`), so the structures of configs differing in the
    pipeline degree share fused step objects (and what is compiled of them). Not noted when the
    steps are not so."""
    n = len(base.steps)
    if len(program.steps) <= n or program.steps[:n] != base.steps or \
            any(s.kind == "compute" or s.view for s in program.steps[n:]):
        return
    if len(_EXTENSIONS) > 4096:      # placements of one model: keep it bounded across models
        _EXTENSIONS.clear()
    _EXTENSIONS[id(program)] = [program, base, None]


def _extension(program: Program, table: FusionTable | None = None) -> Program | None:
    """The base ``program`` extends (:func:`note_extension`), when no rule of ``table`` names an
    op of the appended steps: then no candidate of any rule holds or reaches an appended step
    (chains follow consumers of a rule's ops, siblings and extras are of a rule's ops, components
    are compute steps), so the candidates are the base's, at the same positions."""
    hit = _EXTENSIONS.get(id(program))
    if hit is None or hit[0] is not program:
        return None
    base = hit[1]
    if hit[2] is None:     # checked once, on first use: no appended uid is a base step's or one it reads
        graph = _program_memo(base)[1]
        hit[2] = graph.unique and not any(
            s.uid in graph.order or s.uid in graph.readers for s in program.steps[len(base.steps):])
    if not hit[2]:
        return None
    if table is not None:
        ops = {op for r in table.rules for op in r.ops + r.extra}
        if any(s.op in ops for s in program.steps[len(base.steps):]):
            return None
    return base


def _rule_conditions(rule: Rule, gpu, config, phase: str, tokens: int | None) -> bool:
    """The conditions on where the rule runs (arch, phase, degrees, tokens), the same for every
    candidate of the rule."""
    when = rule.when
    if "arch" in when and gpu.arch not in when["arch"]:
        return False
    if "phases" in when and phase not in when["phases"]:
        return False
    for name, least in (when.get("min_degree") or {}).items():
        if getattr(config, name, 1) < least:
            return False
    if "max_tokens" in when and (tokens is None or tokens > when["max_tokens"]):
        return False
    return True


def _member_conditions(rule: Rule, members: list[Step]) -> bool:
    """The conditions on a candidate's steps (dims, weight dtype): a function of the steps alone."""
    when = rule.when
    for name, allowed in (when.get("dims") or {}).items():
        sizes = {int(s.dims[name]) for s in members if name in s.dims and s.dims[name].is_number}
        if not sizes or not sizes <= set(allowed):
            return False
    if "weight_dtype" in when:
        dtypes = {s.compute_dtype.partition("/")[0] for s in members if s.op in MATMULS}   # the weights' class
        if not dtypes or not dtypes <= set(when["weight_dtype"]):
            return False
    return True


def _name_ok(step: Step, name) -> bool:
    return name is None or step.name == name


def _candidates(rule: Rule, graph: _Graph) -> list[list[str]]:
    steps = graph.steps
    found = []
    if rule.kind == "chain":
        for uid, step in steps.items():
            if step.view or step.op != rule.ops[0] or not _name_ok(step, rule.names[0]):
                continue
            path = [uid]
            for op, name in zip(rule.ops[1:], rule.names[1:]):
                nxt = [c for c in graph.consumers.get(path[-1], ())
                       if steps[c].op == op and _name_ok(steps[c], name)]
                if len(nxt) != 1:
                    break
                path.append(nxt[0])
            if len(path) == len(rule.ops):
                found.append(path)
    elif rule.kind == "siblings":
        groups: dict[str, list[str]] = {}
        for uid, step in steps.items():
            if step.op == rule.ops[0] and (not rule.names or step.name in rule.names) and step.inputs:
                producer = graph.producers(step)[0]
                groups.setdefault((producer, step.component_uid), []).append(uid)
        found = [g for g in groups.values() if len(g) > 1]
    else:
        by_component: dict[str, list[str]] = {}
        for uid, step in steps.items():
            if step.kind == "compute" and not step.view and step.role == rule.role:
                by_component.setdefault(step.component_uid, []).append(uid)
        for members in by_component.values():
            members = list(members)
            extras: set[str] = set()   # each extra kind joins once (one dispatch, one combine ...)
            grown = True
            while grown:
                grown = False
                for uid in list(members):
                    near = graph.producers(steps[uid]) + graph.consumers.get(uid, [])
                    for other in near:
                        step = steps.get(other)
                        if step is not None and other not in members and step.op in rule.extra \
                                and step.op not in extras and step.kind == "compute":
                            members.append(other)
                            extras.add(step.op)
                            grown = True
            found.append(members)
    return found


_TEXT: dict = {}


def _text(expr) -> str:
    """``str(expr)``, printed once per distinct expression (match compares the repeats of every
    candidate's members, thousands per structure, and printing is slow)."""
    text = _TEXT.get(expr)
    if text is None:
        text = _TEXT[expr] = str(expr)
    return text


def match(program: Program, table: FusionTable, gpu, config, phase: str,
          tokens: int | None = None) -> list[Match]:
    """The fusions ``table`` applies to ``program`` (non-overlapping, largest first).

    The matches are a function of the program, the table and which rules' own conditions
    (:func:`_rule_conditions`) hold: the candidates and their steps' conditions are the
    program's (:func:`_rule_candidates`). So they are chosen once per program and set of
    passing rules, and every structure of the placement whose GPU, config, phase and tokens
    pass the same rules gets a copy."""
    order, found, chosen = _rule_candidates(program, table)
    passing = tuple(r.enabled and _rule_conditions(r, gpu, config, phase, tokens) for r in table.rules)
    out = chosen.get(passing)
    if out is None:
        candidates = [(-len(members), rank, rule.name, members, rule.compute) for rank, rule, members, steps in found
                      if passing[rank]]
        taken: set[str] = set()
        out = []
        for _, _, name, members, compute in sorted(candidates, key=lambda c: (c[0], c[1])):
            if taken.isdisjoint(members):
                taken.update(members)
                out.append(Match(name, tuple(sorted(members, key=order.get)), compute))
        out = chosen[passing] = sorted(out, key=lambda m: order[m.members[-1]])
    return list(out)


#: (id(program.steps), id(table)) -> (steps, table, (step order, candidates, matches chosen)): every
#: structure of one placement (each GPU arch, token regime and framework) walks the same graph for
#: the same rules; only the rules' own conditions (arch, phase, degrees, tokens) differ, and
#: :func:`match` keeps its choice per set of passing rules in the third item.
_CANDIDATES: dict[tuple, tuple] = {}


def _rule_candidates(program: Program, table: FusionTable) -> tuple[dict, list, dict]:
    """Every enabled rule's candidate member lists in ``program`` whose members run equally often
    (same layer template) and pass the rule's step conditions (:func:`_member_conditions`), as
    (rank, rule, member uids, member steps); the steps' order; and :func:`match`'s memo
    (rules passing -> matches)."""
    key = (id(program.steps), id(table))      # (a function of the steps: see _PROGRAMS)
    hit = _CANDIDATES.get(key)
    if hit is not None and hit[0] is program.steps and hit[1] is table:
        return hit[2]
    base = _extension(program, table)
    if base is not None:        # the base's candidates and choices, its steps at the same positions
        if len(_CANDIDATES) > 4096:
            _CANDIDATES.clear()
        _CANDIDATES[key] = (program.steps, table, _rule_candidates(base, table))
        return _CANDIDATES[key][2]
    graph = _program_memo(program)[1]
    found = []
    for rank, rule in enumerate(table.rules):
        if not rule.enabled:
            continue
        for members in _candidates(rule, graph):
            steps = [graph.steps[u] for u in members]
            if len({_text(s.repeat) for s in steps}) == 1 and _member_conditions(rule, steps):
                found.append((rank, rule, members, steps))
    if len(_CANDIDATES) > 4096:      # placements of one model: keep it bounded across models
        _CANDIDATES.clear()
    _CANDIDATES[key] = (program.steps, table, (graph.order, found, {}))
    return _CANDIDATES[key][2]


def fuse(program: Program, matches: list[Match]) -> Program:
    """Replace each match's members by one fused step (FLOPs summed, bytes at the boundary).

    A fused step is a function of the program and its match alone (its members, the producers
    they read and whether their outputs are read outside it), and a step reading fused outputs
    of its inputs' new names: both are made once per program and reused by later calls."""
    if not matches:
        return program
    _, graph, fused_memo, renamed_memo = _program_memo(program)
    base = _extension(program)
    if base is not None:
        # a fused step reads its members, their inputs' producers and their consumers: only the
        # consumers can differ from the base's, for the steps the appended ones read
        _, base_graph, base_fused, base_renamed = _program_memo(base)
        n_base = len(base.steps)
        read = {p for s in program.steps[n_base:] for p in graph.producers(s)}
    renamed: dict[str, str] = {}
    fused: dict[str, Step] = {}
    for m in matches:
        if base is not None and read.isdisjoint(m.members) and all(u in base_graph.order for u in m.members):
            step = base_fused.get(m)
            if step is None:
                step = base_fused[m] = _fused_step(base_graph, m)
        else:
            step = fused_memo.get(m)
            if step is None:
                step = fused_memo[m] = _fused_step(graph, m)
        fused[m.members[-1]] = step
        for u in m.members:
            renamed[u] = step.uid

    def renamed_step(step: Step, index: int) -> Step:
        # a base step renamed alike in the base (the appended steps' uids are not the base's, and
        # differ in content between extensions: they keep this program's memo)
        memo = base_renamed if base is not None and index < n_base else renamed_memo
        inputs = tuple(renamed.get(i, i) for i in step.inputs)
        new = memo.get((step.uid, inputs))
        if new is None:
            new = memo[(step.uid, inputs)] = step_with(step, inputs=inputs)
        return new

    steps, order = program.steps, graph.order
    if not graph.unique:              # (two steps of one uid: walk every step, the uid naming both)
        out = []
        for i, step in enumerate(steps):
            if step.uid in fused:
                out.append(fused[step.uid])
            elif step.uid not in renamed:
                out.append(renamed_step(step, i) if any(x in renamed for x in step.inputs) else step)
        return replace(program, steps=tuple(out))
    # only the members and the steps reading them change: edit those places of the step list
    # (a program has thousands of steps, a structure's matches touch a few hundred)
    edited: list = list(steps)
    for u in renamed:
        edited[order[u]] = None          # a member: dropped, or its match's fused step (below)
    for u, step in fused.items():
        edited[order[u]] = step
    for i in {i for u in renamed for i in graph.readers.get(u, ())}:
        if steps[i].uid not in renamed:
            edited[i] = renamed_step(steps[i], i)
    return replace(program, steps=tuple(s for s in edited if s is not None))


def _fused_step(graph: _Graph, m: Match) -> Step:
    """The one step replacing match ``m``'s members in ``graph``'s program."""
    steps = graph.steps
    members = [steps[u] for u in m.members]
    inside = set(m.members)
    uid = f"{m.rule}@{members[0].uid}"
    reads, seen = ZERO, set()
    for s in members:
        for src in s.inputs:
            producer = steps.get(src)
            base = graph.producers(producer) if producer is not None and producer.view else [src]
            if inside.isdisjoint(base) and src not in seen:
                seen.add(src)
                reads += producer.out_read if producer is not None else ZERO
    # sympy.Add(*terms) flattens once; sum() would re-flatten a growing Add at every term
    writes = sympy.Add(*(s.written for s in members
                         if not set(graph.consumers.get(s.uid, [])) <= inside or not graph.consumers.get(s.uid)))
    last = members[-1]
    matmul = next((s for s in members if s.op in MATMULS), None)
    comm = next((s for s in members if s.kind == "comm"), None)
    return Step(
        uid, m.rule, m.rule, "fused", last.role, last.component, last.component_uid, last.repeat,
        tuple(dict.fromkeys(i for s in members for i in s.inputs if i not in inside)),
        sympy.Add(*(s.flops for s in members)), reads + writes,
        sympy.Add(*(s.weight_bytes for s in members)), sympy.Add(*(s.comm_bytes for s in members)),
        m.compute or (matmul.compute_dtype if matmul else "bf16"), last.layout, last.out, last.out_read,
        group=comm.group if comm else "", link=comm.link if comm else "", written=writes,
        parts=tuple(m.members), dims=last.dims, last_token=last.last_token,
        collective=comm.collective if comm else "", ranks=comm.ranks if comm else 1,
        nodes=comm.nodes if comm else 1)
