"""Verification guards: each module checks one kind of fact and returns structured findings.

Layer: engine.verify. A guard is a module with ``NAME``, ``EVIDENCE`` (what it reads, for the guard
table) and ``check(ctx) -> list[Finding]``. :mod:`engine.verify.validate` runs them in :data:`ORDER`.
A finding names the node (a walk uid, or a corpus file:line) and says what to change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Sequence

from engine.language.corpus import Corpus
from engine.language.evaluate import Analysis
from engine.verify.evidence import Evidence, Registry
from engine.language.ir import ModelSpec
from engine.verify.manifest import Manifest, ManifestTensor, TensorGroup

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class Finding:
    guard: str
    severity: str      # error blocks publication; warning and info are shown
    node: str          # walk uid or corpus place the finding is about ("" for the whole model)
    message: str
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"guard": self.guard, "severity": self.severity, "node": self.node,
                "message": self.message, "hint": self.hint}

    def one_line(self) -> str:
        where = f"{self.node}: " if self.node else ""
        text = f"{self.severity} [{self.guard}] {where}{self.message}"
        return " ".join((text + (f" — {self.hint}" if self.hint else "")).split())


@dataclass(frozen=True, slots=True)
class SpecTensor:
    """One concrete stored tensor of the spec (layer and expert indices filled in)."""

    name: str          # canonical name
    dtype: str
    shape: tuple[int, ...]
    uid: str
    stack: str
    role: str
    leaf: str
    scheme: str

    @property
    def numel(self) -> int:
        out = 1
        for d in self.shape:
            out *= d
        return out


@dataclass(frozen=True, slots=True)
class SpecFamily:
    """The concrete tensors of one stored leaf tensor of the spec: one canonical name per layer and
    expert (in that order, layer outermost), everything else shared. The guards compare a family
    with a checkpoint group once and visit its names only when they differ."""

    names: list[str]
    dtype: str
    shape: tuple[int, ...]
    uid: str
    stack: str
    role: str
    leaf: str
    scheme: str
    numel: int
    nbytes: int        # stored bytes of one tensor

    def tensor(self, name: str) -> SpecTensor:
        return SpecTensor(name, self.dtype, self.shape, self.uid, self.stack, self.role, self.leaf, self.scheme)


def canonical_names(names: Sequence[str], head: str, prefixes: Sequence[tuple[str, str]]) -> Sequence[str]:
    """``names`` with the registry's first matching prefix rewritten (:func:`weight.canonical` of
    each). ``head`` is a text every name starts with: it decides a prefix no longer than it for all
    the names, and rules out a longer one that does not continue it; only the rest is tried name
    by name."""
    if not prefixes or not names:
        return names
    open_ = [(old, new) for old, new in prefixes
             if (head.startswith(old) if len(old) <= len(head) else old.startswith(head))]
    if not open_:
        return names
    old, new = open_[0]
    if len(old) <= len(head):        # the first prefix that can match matches every name
        cut = len(old)
        return [new + n[cut:] for n in names]
    out = []
    for name in names:
        for old, new in open_:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        out.append(name)
    return out


class CheckpointTable:
    """The manifest's tensors by canonical name, as the guards look them up: ``index`` maps a
    canonical name to its group in ``groups`` (dtype, shape, size). Where two tensors share a
    canonical name (the same name twice, or a prefix rewritten onto another tensor's name) the
    later in name order is the one looked up, as a dict filled in name order would hold."""

    def __init__(self, manifest: Manifest, prefixes: Sequence[tuple[str, str]]):
        self.groups: tuple[TensorGroup, ...] = manifest.tensor_groups()
        self.count = sum(len(g.names) for g in self.groups)
        #: bytes of every tensor listed (a name listed twice counts twice)
        self.listed = sum(len(g.names) * g.nbytes for g in self.groups)
        self.index: dict[str, int] = {}
        self._canonical: list[Sequence[str]] = []
        for gid, group in enumerate(self.groups):
            names = canonical_names(group.names, _head(group.names), prefixes)
            self._canonical.append(names)
            self.index.update(zip(names, repeat(gid)))
        #: canonical -> (raw name, group) in name order of the first raw name, when names collide
        self._entries: dict[str, tuple[str, int]] | None = None
        if len(self.index) != self.count:
            gid_of = {(g.dtype, tuple(g.shape)): gid for gid, g in enumerate(self.groups)}
            self._entries = {}
            for t in manifest.tensors:   # name order
                name = canonical_names([t.name], t.name, prefixes)[0]
                self._entries[name] = (t.name, gid_of[(t.dtype, tuple(t.shape))])
            self.index = {c: gid for c, (_, gid) in self._entries.items()}

    def __contains__(self, name: str) -> bool:
        return name in self.index

    def tensor(self, name: str) -> ManifestTensor:
        """The tensor looked up under canonical ``name`` (its own, raw name is only kept for the
        unclaimed ones: the findings that compare a tensor print its dtype, shape and size)."""
        return self.groups[self.index[name]].tensor(name)

    def unclaimed(self, claimed, found: int | None = None) -> list[ManifestTensor]:
        """The looked-up tensors (raw names) whose canonical name is not in ``claimed``, in name order.
        ``found``: how many of the (distinct) ``claimed`` names are looked-up names, if known."""
        if self._entries is not None:
            return [self.groups[gid].tensor(raw) for c, (raw, gid) in self._entries.items() if c not in claimed]
        if found == len(self.index):
            return []
        left = self.index.keys() - claimed
        if not left:
            return []
        out = []
        for gid, group in enumerate(self.groups):
            names = self._canonical[gid]
            if not left.isdisjoint(names):
                out += [group.tensor(raw) for raw, n in zip(group.names, names) if n in left]
        out.sort(key=lambda t: t.name)     # no two share a name here: no ties to keep in order
        return out

    def looked_up_bytes(self, skip: list[ManifestTensor]) -> int:
        """Bytes of the looked-up tensors, less those in ``skip`` (some of :meth:`unclaimed`)."""
        if self._entries is not None:
            names = {t.name for t in skip}
            return sum(self.groups[gid].nbytes for raw, gid in self._entries.values() if raw not in names)
        return self.listed - sum(t.nbytes for t in skip)   # every tensor is looked up, once


def _head(names: list[str]) -> str:
    """The longest text every name of a group starts with (its names vary after it)."""
    if len(names) < 2:
        return names[0] if names else ""
    first, last = min(names), max(names)
    cut = 0
    while cut < len(first) and cut < len(last) and first[cut] == last[cut]:
        cut += 1
    return first[:cut]


@dataclass
class Context:
    corpus: Corpus
    model: ModelSpec
    evidence: Evidence
    registry: Registry
    numeric: Analysis
    symbolic: Analysis
    #: every stored tensor of the spec, by leaf tensor (layer and expert indices filled in)
    families: list[SpecFamily] = field(default_factory=list)
    #: the manifest by canonical name (filled by validate when a manifest exists)
    checkpoint: CheckpointTable | None = None
    #: per family: the checkpoint group of each of its names (None: not in the checkpoint), for
    #: the families of stacks the evidence covers (None for the others)
    hits: list[list[int | None] | None] = field(default_factory=list)

    @property
    def spec_tensors(self) -> list[SpecTensor]:
        """Every stored tensor one by one (slow on a large MoE: the guards use :attr:`families`)."""
        return [f.tensor(n) for f in self.families for n in f.names]
