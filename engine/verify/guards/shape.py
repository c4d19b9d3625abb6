"""shape guard: the engine's geometry checks as findings, and every tensor's shape as stored.

The walk already rejects shapes that do not fit (widths, head splits, concatenations); when it
does, :mod:`engine.verify.validate` reports that error here. Against the manifest, a tensor must have
the same rank and extent on every axis: a transposed or mis-sized matrix with the right element
count is caught here, not by the byte totals.
"""
from __future__ import annotations

from collections import defaultdict

from engine.verify.guards import Context, Finding

NAME = "shape"
EVIDENCE = "engine geometry + checkpoint shapes"


def evidence(ctx: Context) -> str:
    m = ctx.evidence.manifest
    return "engine geometry" + (" and checkpoint tensor shapes" if m is not None else "")


def check(ctx: Context) -> list[Finding]:
    m = ctx.evidence.manifest
    if m is None:
        return []
    bad = defaultdict(list)
    for t in ctx.spec_tensors:
        theirs = ctx.checkpoint.get(t.name)
        if theirs is not None and m.covers(t.stack) and tuple(theirs.shape) != t.shape:
            bad[t.uid].append((t, theirs))
    out = []
    for uid, pairs in bad.items():
        ours, theirs = pairs[0]
        row = ctx.numeric.rows[uid]
        bound = ", ".join(f"{k} = {v}" for k, v in row.dim_names.items() if k in ("in", "out", "dim", "vocab"))
        out.append(Finding(NAME, "error", uid, f"{ours.name} is {list(theirs.shape)} in the checkpoint, "
                           f"the spec gives {list(ours.shape)}" + (f" ({len(pairs)} tensors)" if len(pairs) > 1 else ""),
                           f"check the dims bound to this {row.op}" + (f" ({bound})" if bound else "")))
    return out
