"""Checkpoint tensor manifests: every stored tensor's name, dtype and shape, plus where they came from.

Layer: engine.verify. A manifest is evidence the weight, packing and shape guards check a spec against.
It is stored in the corpus as ``snapshots/<org>--<name>.tensors.yaml`` so validation runs
offline. Tens of thousands of per-layer, per-expert names compress losslessly: indices that vary
together are written as ranges, ``model.layers.{3..60}.mlp.experts.{0..255}.gate_proj.weight``.

Invariants: :func:`expand` of :func:`compress` gives back exactly the input tensors (a test checks
it); ``total_bytes`` is the shard total the evidence reported (for header evidence the sum of the
shards' data sections), and every tensor's bytes are ``numel x dtype size``.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from operator import attrgetter
from pathlib import Path
from typing import Any, Iterable

import yaml

from engine.language.dtypes import DTYPE_BITS, stored_bytes
from engine.language.errors import SpecError, Where

#: Evidence kinds and how the site names them ("verified against ...").
KINDS = {"checkpoint-headers": "checkpoint headers", "modeling-code": "modeling code"}


@dataclass(frozen=True, slots=True)
class ManifestTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return stored_bytes(self.dtype, self.numel)


@dataclass(frozen=True, slots=True)
class TensorGroup:
    """Tensors that differ only in their names (one manifest line, expanded): the guards compare a
    group's dtype and shape once, not once per name. ``names`` keep the line's expansion order."""

    names: tuple[str, ...]
    dtype: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int

    @classmethod
    def of(cls, names: Sequence[str], dtype: str, shape: tuple[int, ...]) -> "TensorGroup":
        numel = prod(shape)
        return cls(tuple(names), dtype, shape, numel, stored_bytes(dtype, numel))

    def tensor(self, name: str) -> ManifestTensor:
        return ManifestTensor(name, self.dtype, self.shape)


class SortedTensors(Sequence):
    """A loaded manifest's tensors sorted by name, made from its groups on first use (validation
    reads the groups and never needs a million tensor objects). Equal to the tuple it stands for."""

    __slots__ = ("_groups", "_count", "_items")

    def __init__(self, groups: Sequence[TensorGroup]):
        self._groups = tuple(groups)
        self._count = sum(len(g.names) for g in self._groups)
        self._items: tuple[ManifestTensor, ...] | None = None

    def _all(self) -> tuple[ManifestTensor, ...]:
        if self._items is None:      # file order, then a stable sort by name: what load always did
            items = [ManifestTensor(n, g.dtype, g.shape) for g in self._groups for n in g.names]
            items.sort(key=attrgetter("name"))
            self._items = tuple(items)
        return self._items

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self._all()[index]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other) -> bool:
        if isinstance(other, (SortedTensors, tuple, list)):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"SortedTensors({len(self)} tensors)"


@dataclass(frozen=True, slots=True)
class Manifest:
    """Every tensor of a checkpoint (``tensors`` sorted by name) and the evidence it came from.

    ``provenance['kind']`` is one of :data:`KINDS`; ``scope`` lists the stacks the evidence covers
    (modeling code builds the main stack only: multi-token-prediction layers are not in the HF class).
    ``groups`` is the same tensors grouped by line as :func:`load` read them (``None`` for a
    manifest built from tensors: :meth:`tensor_groups` groups those).
    """

    source: str
    provenance: dict[str, Any]
    total_bytes: int
    tensors: Sequence[ManifestTensor]
    scope: tuple[str, ...] = ("*",)
    where: Where = field(default_factory=Where)
    groups: tuple[TensorGroup, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return self.provenance.get("kind", "")

    def covers(self, stack: str) -> bool:
        return "*" in self.scope or stack in self.scope

    def tensor_groups(self) -> tuple[TensorGroup, ...]:
        """Every tensor exactly once, in groups sharing dtype and shape."""
        if self.groups is not None:
            return self.groups
        by: dict[tuple, list[str]] = defaultdict(list)
        for t in self.tensors:
            by[(t.dtype, tuple(t.shape))].append(t.name)
        return tuple(TensorGroup.of(names, dtype, shape) for (dtype, shape), names in by.items())


# -- range compression ---------------------------------------------------------------------------

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
_RANGE = re.compile(r"\{([0-9.,]+)\}")


def _ranges(values: Iterable[int]) -> str:
    values = sorted(values)
    parts, start = [], values[0]
    for prev, cur in zip(values, values[1:] + [None]):
        if cur != prev + 1 if cur is not None else True:
            parts.append(str(start) if start == prev else f"{start}..{prev}")
            start = cur
    return ",".join(parts)


def _compress_tuples(tuples: list[tuple[int, ...]]) -> list[tuple[str, ...]]:
    """Cover a set of index tuples with products of index sets (first index outermost)."""
    if not tuples or not tuples[0]:
        return [()]
    rest_of: dict[int, list] = defaultdict(list)
    for t in tuples:
        rest_of[t[0]].append(t[1:])
    by_rest: dict[frozenset, list[int]] = defaultdict(list)
    for first, rest in rest_of.items():
        by_rest[frozenset(rest)].append(first)
    out = []
    for rest, firsts in sorted(by_rest.items(), key=lambda kv: min(kv[1])):
        for tail in _compress_tuples(sorted(rest)):
            out.append((_ranges(firsts),) + tail)
    return out


def compress(tensors: Iterable[ManifestTensor]) -> list[str]:
    """Lines ``name dtype [shape]`` with varying indices folded into ``{a..b,c}`` ranges."""
    groups: dict[tuple, list[tuple[int, ...]]] = defaultdict(list)
    for t in tensors:
        indices = tuple(int(m) for m in _INDEX.findall(t.name))
        groups[(_INDEX.sub("{}", t.name), t.dtype, t.shape)].append(indices)
    lines = []
    for (template, dtype, shape), tuples in groups.items():
        for sets in _compress_tuples(sorted(set(tuples))):
            name = template.format(*(s if s.isdigit() else "{" + s + "}" for s in sets))
            lines.append((name, f"{name} {dtype} [{', '.join(map(str, shape))}]"))
    return [line for _, line in sorted(lines, key=lambda pair: _natural(pair[0]))]


def _natural(name: str) -> list:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]


#: Bound of the tensors one manifest's lines stand for, counted before any range is expanded: the
#: largest real checkpoint has 142,773 (tests/test_bounds.py); a range such as ``{0..999999999}``
#: in a manifest from a pull request would otherwise expand for minutes and take gigabytes.
MAX_TENSORS = 2 ** 21


class TooManyTensors(ValueError):
    """A manifest line would expand past the tensors left of :data:`MAX_TENSORS`."""


def _set_size(text: str) -> int:
    """How many indices ``_expand_set(text)`` gives, counted without making them."""
    return sum(max(0, int(high or low) - int(low) + 1) for low, _, high in (p.partition("..") for p in text.split(",")))


def _expand_set(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        low, _, high = part.partition("..")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def expand_line(line: str) -> list[ManifestTensor]:
    """``name dtype [shape]`` (name possibly with ranges) -> the tensors it stands for."""
    group = expand_group(line)
    return [ManifestTensor(n, group.dtype, group.shape) for n in group.names]


def expand_group(line: str, budget: int = MAX_TENSORS) -> TensorGroup:
    """:func:`expand_line` as one group: the names in the same order, dtype and shape once.
    :class:`TooManyTensors` (before expanding) when the names would be more than ``budget``."""
    name, dtype, shape_text = line.split(" ", 2)
    shape = tuple(int(x) for x in shape_text.strip("[]").replace(" ", "").split(",") if x)
    if dtype not in DTYPE_BITS:
        raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})")
    return TensorGroup.of(_expand_name(name, budget), dtype, shape)


def _expand_name(name: str, budget: int = MAX_TENSORS) -> list[str]:
    """Each name a ranged name stands for, the first range outermost (at most ``budget``)."""
    parts = _RANGE.split(name)          # literal, set, literal, set, ..., literal
    literals = parts[0::2]
    if any("{" in p or "}" in p for p in literals):
        return _expand_name_stepwise(name, budget)   # braces around a range: substitute one at a time
    count = 1
    for text in parts[1::2]:              # counted in expansion order: an empty set ends it, as below
        count *= _set_size(text)
        if not count:
            return []
    if count > budget:
        raise TooManyTensors(name)
    names = [literals[0]]
    for text, literal in zip(parts[1::2], literals[1:]):
        values = _expand_set(text)
        if not values:
            return []
        names = [n + str(i) + literal for n in names for i in values]
    return names


def _expand_name_stepwise(name: str, budget: int = MAX_TENSORS) -> list[str]:
    """The reference expansion: replace the first range until none is left (a substituted index can
    complete a new range, as in ``{{1}}``); each step counted before it is made."""
    names = [name]
    while any(_RANGE.search(n) for n in names):
        if sum(_set_size(m[1]) if m else 1 for m in map(_RANGE.search, names)) > budget:
            raise TooManyTensors(name)
        names = [n[:m.start()] + str(i) + n[m.end():]
                 for n in names for m in [_RANGE.search(n)] for i in _expand_set(m[1])]
    return names


# -- files ---------------------------------------------------------------------------------------

def manifest_path(root: Path, snapshot_name: str) -> Path:
    return root / "snapshots" / f"{snapshot_name}.tensors.yaml"


def dump(manifest: Manifest) -> str:
    """The YAML text of a manifest file (header comment, provenance, totals, compressed lines)."""
    header = ("# Checkpoint tensor manifest: every stored tensor as `name dtype [shape]`;\n"
              "# `{a..b,c}` in a name stands for each of those indices. Refresh with\n"
              "# `archledger snapshot MODEL` (see CONTRIBUTING.md, \"Record evidence\").\n")
    body = {"source": manifest.source, "provenance": manifest.provenance,
            "scope": list(manifest.scope), "tensor_count": len(manifest.tensors),
            "total_bytes": manifest.total_bytes, "tensors": compress(manifest.tensors)}
    return header + yaml.safe_dump(body, sort_keys=False, width=120)


def load(path: Path, root: Path | None = None) -> Manifest:
    """Read a manifest file; a malformed line is a one-line error naming the file and line."""
    from engine.language import file_schemas
    from engine.language.yamlio import load_yaml
    rel = str(path.relative_to(root.parent)) if root and path.is_relative_to(root.parent) else str(path)
    data = load_yaml(path, rel, hint="regenerate the file with `archledger snapshot MODEL`",
                     schema=file_schemas.TENSOR_MANIFEST)
    where = Where(rel, 1)
    groups: list[TensorGroup] = []
    lines = data["tensors"]
    left = MAX_TENSORS
    for i, line in enumerate(lines):
        line_no = lines.line_of_item(i)
        try:
            groups.append(expand_group(str(line), left))
            left -= len(groups[-1].names)
        except TooManyTensors:
            raise SpecError(Where(rel, line_no, f"tensors[{i}]"), f"the lines up to this one stand for more "
                            f"than {MAX_TENSORS:,} tensors", "a checkpoint manifest lists the real tensors: "
                            "regenerate the file with `archledger snapshot MODEL`") from None
        except (ValueError, IndexError) as exc:
            raise SpecError(Where(rel, line_no, f"tensors[{i}]"), f"cannot read {line!r}: {exc}",
                            "write `name DTYPE [d0, d1, ...]`") from None
    tensors = SortedTensors(groups)
    count = data.get("tensor_count")
    if count is not None and count != len(tensors):
        raise SpecError(Where(rel, 1, "tensor_count"), f"the lines expand to {len(tensors)} tensors, "
                        f"not {count}", "regenerate the file with `archledger snapshot MODEL`")
    return Manifest(data["source"], dict(data["provenance"]), data["total_bytes"],
                    tensors, tuple(data.get("scope") or ("*",)), where, tuple(groups))
