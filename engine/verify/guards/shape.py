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
    groups = ctx.checkpoint.groups
    for f, hits in zip(ctx.families, ctx.hits):
        if hits is None:          # a stack outside this evidence
            continue
        differ = {g for g in set(hits) if g is not None and tuple(groups[g].shape) != f.shape}
        for name, g in zip(f.names, hits) if differ else ():
            if g in differ:
                bad[f.uid].append((f.tensor(name), groups[g]))
    out = []
    for uid, pairs in bad.items():
        ours, theirs = pairs[0]
        row = ctx.numeric.rows[uid]
        bound = ", ".join(f"{k} = {v}" for k, v in row.dim_names.items() if k in ("in", "out", "dim", "vocab"))
        message = (f"{ours.name} is {list(theirs.shape)} in the checkpoint, the spec gives {list(ours.shape)}"
                   + (f" ({len(pairs)} tensors)" if len(pairs) > 1 else ""))
        if _transposed(ours.shape, tuple(theirs.shape)) and row.op == "linear":
            # the dims are right, the storage order is not: say how to declare it
            weight = next((l for l in row.leaves if l.name == "weight"), None)
            now = "in_out" if weight is not None and weight.axes[-1].name == row.dim_names.get("out") else "out_in"
            want = "in_out" if now == "out_in" else "out_in"
            hint = (f"the checkpoint stores this matrix transposed ([{'in, out' if want == 'in_out' else 'out, in'}]): "
                    f"set the linear's `layout: {want}` (attrs: {{layout: {want}}}; swiglu_mlp option "
                    f"`layout`, moe option `expert_layout`)")
        else:
            hint = f"check the dims bound to this {row.op}" + (f" ({bound})" if bound else "")
        out.append(Finding(NAME, "error", uid, message, hint))
    return out


def _transposed(ours: tuple, theirs: tuple) -> bool:
    """Same rank and the last two axes swapped (and different): a matrix stored the other way round."""
    return (len(ours) == len(theirs) >= 2 and ours[:-2] == theirs[:-2] and ours[-2:] == theirs[-2:][::-1]
            and ours[-1] != ours[-2])
