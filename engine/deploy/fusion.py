"""Kernel fusion: a framework's rules (:mod:`engine.deploy.fusion_table`) matched on a placed program
and applied.

Layer: engine.deploy. View ops are transparent. Matching runs after communication insertion, per
phase; overlapping matches are resolved largest first. A fused kernel's FLOPs, weight bytes and link
bytes are the sum of its members'; its HBM bytes are only its boundary: inputs produced outside it
(read once) and outputs used outside it (written once). The unfused program is kept alongside.
Invariants: matching and fusing are pure functions of the program's steps and the table's rules
(their memos, keyed by the objects they hold, give what a fresh computation gives).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from engine.deploy.fusion_table import FusionTable, Rule
from engine.deploy.device_program import ZERO, Program, Step, step_with

MATMULS = ("linear", "head_linear", "embedding")


@dataclass(frozen=True, slots=True)
class Match:
    rule: str
    members: tuple[str, ...]        # step uids in program order
    compute: str = ""               # the rule's compute class (Rule.compute)


# -- matching ----------------------------------------------------------------------------------------

class _Graph:
    """Producer/consumer links between non-view steps (views are looked through)."""

    def __init__(self, program: Program):
        self.program_steps = program.steps
        self.steps = {s.uid: s for s in program.steps}
        self.order = {s.uid: i for i, s in enumerate(program.steps)}
        self._readers: dict[str, list[int]] | None = None
        self._through: dict[str, tuple] = {}    # step uid -> its producers (views looked through)
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

    def producers(self, step: Step) -> tuple[str, ...]:
        """The uids ``step`` reads, each view among them replaced by what the view reads (views
        looked through, recursively). A step of this graph's program (the one its uid names) is
        looked up once per graph: a function of the uid alone, asked for every step by the
        consumers and again by every rule's candidates (a component rule's growth asks each member
        once per round)."""
        if self.steps.get(step.uid) is not step:
            return self._producers(step)
        found = self._through.get(step.uid)
        if found is None:
            found = self._through[step.uid] = self._producers(step)
        return found

    def _producers(self, step: Step) -> tuple[str, ...]:
        out = []
        for uid in step.inputs:
            source = self.steps.get(uid)
            if source is not None and source.view:
                out.extend(self.producers(source))
            else:
                out.append(uid)
        return tuple(out)


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
                    near = (*graph.producers(steps[uid]), *graph.consumers.get(uid, ()))
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
