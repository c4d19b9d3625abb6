"""packing guard: storage dtype and element count per tensor, checked separately per quant scheme.

Bytes alone can hide two errors that cancel (an FP8 payload counted as BF16 with half the
elements); here dtype and element count are compared on their own. Every ``quant_context``
override must store at least one checkpoint tensor, or it is dead (and probably misspelt).
"""
from __future__ import annotations

from collections import defaultdict

from engine.language.module_patterns import first_match, is_pattern
from engine.verify.guards import Context, Finding

NAME = "packing"
EVIDENCE = "checkpoint dtypes + quant_context"


def evidence(ctx: Context) -> str:
    schemes = sorted(set(ctx.model.quant.values()))
    return f"dtypes in the manifest; schemes {', '.join(schemes)}"


def check(ctx: Context) -> list[Finding]:
    m = ctx.evidence.manifest
    if m is None:
        return []
    out: list[Finding] = []
    dtype_bad = defaultdict(list)
    count_bad = defaultdict(list)
    groups = ctx.checkpoint.groups
    for f, hits in zip(ctx.families, ctx.hits):
        if hits is None:          # a stack outside this evidence
            continue
        differ = {g: (f.dtype != groups[g].dtype, f.numel != groups[g].numel) for g in set(hits) if g is not None}
        if not any(d or c for d, c in differ.values()):
            continue
        for name, g in zip(f.names, hits):   # in order: the first tensor that differs is the example
            if g is None:
                continue
            dtype_differs, count_differs = differ[g]
            if dtype_differs:
                dtype_bad[(f.uid, f.scheme)].append((f.tensor(name), groups[g]))
            if count_differs:
                count_bad[(f.uid, f.scheme)].append((f.tensor(name), groups[g]))
    for (uid, scheme), pairs in dtype_bad.items():
        ours, theirs = pairs[0]
        out.append(Finding(NAME, "error", uid, f"{len(pairs)} tensor(s) stored as {theirs.dtype} in the "
                           f"checkpoint, {ours.dtype} by scheme {scheme}, e.g. {ours.name}",
                           f"set quant_context for role {ours.role!r} (or {ours.role}.{ours.leaf}, or a module-path pattern) to the "
                           "scheme that stores this dtype"))
    for (uid, scheme), pairs in count_bad.items():
        ours, theirs = pairs[0]
        out.append(Finding(NAME, "error", uid, f"{len(pairs)} tensor(s) hold {theirs.numel:,} elements in the "
                           f"checkpoint, {ours.numel:,} under scheme {scheme}, e.g. {ours.name}",
                           "check the scheme's packing (elements per byte, block shapes) and the op's dims"))
    for key, scheme in ctx.model.quant.items():
        if key == "*":
            continue
        if is_pattern(key):   # the leaves whose scheme this pattern picked
            hits = [f for f in ctx.families if f.names and f.scheme == scheme
                    and first_match(ctx.model.quant_patterns, _module(ctx, f)) == key]
        else:
            hits = [f for f in ctx.families if f.names and key in (f.role, f"{f.role}.{f.leaf}")]
        if hits and not any(m.covers(f.stack) for f in hits):
            out.append(Finding(NAME, "info", str(ctx.model.where.at(f"quant_context.overrides.{key}")),
                               f"override {key}: {scheme} applies to the {hits[0].stack} stack only, "
                               "outside this evidence", "snapshot the checkpoint headers to check it"))
        elif not any(not ctx.checkpoint.index.keys().isdisjoint(f.names) for f in hits):
            where = ctx.model.where.at(f"quant_context.overrides.{key}")
            out.append(Finding(NAME, "error", str(where),
                               f"override {key}: {scheme} stores no checkpoint tensor"
                               + ("" if hits else (" (it covers no module path of the spec)" if is_pattern(key)
                                                   else " (no leaf has this role)")),
                               "use a module-path pattern, a role (or role.leaf) from the spec, or delete the override"))
    return out


def _module(ctx: Context, family) -> str:
    """The module path a family's leaf is keyed under (``model.layers.{layer}.mlp.gate_proj``)."""
    row = ctx.numeric.rows[family.uid]
    key = next(leaf.key for leaf in row.leaves if leaf.name == family.leaf)
    return key.rsplit(".", 1)[0]
