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
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, Iterable

import yaml

from engine.spec.dtypes import DTYPE_BITS, stored_bytes
from engine.spec.errors import SpecError, Where

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
class Manifest:
    """Every tensor of a checkpoint (``tensors`` sorted by name) and the evidence it came from.

    ``provenance['kind']`` is one of :data:`KINDS`; ``scope`` lists the stacks the evidence covers
    (modeling code builds the main stack only: multi-token-prediction layers are not in the HF class).
    """

    source: str
    provenance: dict[str, Any]
    total_bytes: int
    tensors: tuple[ManifestTensor, ...]
    scope: tuple[str, ...] = ("*",)
    where: Where = field(default_factory=Where)

    @property
    def kind(self) -> str:
        return self.provenance.get("kind", "")

    def covers(self, stack: str) -> bool:
        return "*" in self.scope or stack in self.scope


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


def _expand_set(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        low, _, high = part.partition("..")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def expand_line(line: str) -> list[ManifestTensor]:
    """``name dtype [shape]`` (name possibly with ranges) -> the tensors it stands for."""
    name, dtype, shape_text = line.split(" ", 2)
    shape = tuple(int(x) for x in shape_text.strip("[]").replace(" ", "").split(",") if x)
    if dtype not in DTYPE_BITS:
        raise ValueError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})")
    names = [name]
    while any(_RANGE.search(n) for n in names):
        names = [n[:m.start()] + str(i) + n[m.end():]
                 for n in names for m in [_RANGE.search(n)] for i in _expand_set(m[1])]
    return [ManifestTensor(n, dtype, shape) for n in names]


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
    from engine.spec.yamlio import load_yaml
    rel = str(path.relative_to(root.parent)) if root and path.is_relative_to(root.parent) else str(path)
    data = load_yaml(path, rel, hint="regenerate the file with `archledger snapshot MODEL`")
    where = Where(rel, 1)
    for key in ("source", "provenance", "total_bytes", "tensors"):
        if key not in data:
            raise SpecError(Where(rel, 1, key), f"missing field {key!r}",
                            "regenerate the file with `archledger snapshot MODEL`")
    tensors: list[ManifestTensor] = []
    lines = data["tensors"]
    for i, line in enumerate(lines):
        line_no = getattr(lines, "line", 0) + i   # block style: one line per entry
        try:
            tensors.extend(expand_line(str(line)))
        except (ValueError, IndexError) as exc:
            raise SpecError(Where(rel, line_no, f"tensors[{i}]"), f"cannot read {line!r}: {exc}",
                            "write `name DTYPE [d0, d1, ...]`") from None
    count = data.get("tensor_count")
    if count is not None and count != len(tensors):
        raise SpecError(Where(rel, 1, "tensor_count"), f"the lines expand to {len(tensors)} tensors, "
                        f"not {count}", "regenerate the file with `archledger snapshot MODEL`")
    tensors.sort(key=lambda t: t.name)
    return Manifest(str(data["source"]), dict(data["provenance"]), int(data["total_bytes"]),
                    tuple(tensors), tuple(data.get("scope") or ("*",)), where)
