"""weight guard: every checkpoint tensor is claimed by exactly one spec node, with its size.

Checkpoint names and spec keys meet in one canonical module path (``corpus/verification.yaml``
``canonical.prefixes``: multimodal checkpoints nest the language model). Then: no tensor claimed
twice, none unclaimed, none invented, element count and bytes equal per tensor, totals equal.
Findings are grouped (one per spec node, one per compressed name pattern) so a missing expert
family is one line, not 15,000.
"""
from __future__ import annotations

from collections import defaultdict
from itertools import repeat

from engine.language.dtypes import stored_bytes
from engine.verify.evidence import Registry
from engine.verify.guards import Context, Finding
from engine.verify.manifest import compress

NAME = "weight"
EVIDENCE = "checkpoint tensor manifest"


def canonical(name: str, registry: Registry) -> str:
    for old, new in registry.prefixes:
        if name.startswith(old):
            return new + name[len(old):]
    return name


def evidence(ctx: Context) -> str:
    m = ctx.evidence.manifest
    if m is None:
        return "no tensor manifest"
    return f"{m.provenance.get('kind')}: {m.source} ({len(m.tensors):,} tensors, {m.total_bytes:,} bytes)"


def check(ctx: Context) -> list[Finding]:
    m = ctx.evidence.manifest
    if m is None:
        return [Finding(NAME, "error", "", "no checkpoint tensor manifest for this model",
                        "record one: archledger snapshot MODEL (hub, --checkpoint DIR or --meta)")]
    out: list[Finding] = []
    table, families = ctx.checkpoint, ctx.families
    groups = table.groups
    covered = [i for i, f in enumerate(families) if f.names and ctx.hits[i] is not None]
    for stack in sorted({f.stack for f in families if f.names and not m.covers(f.stack)}):
        out.append(Finding(NAME, "info", stack, f"the {stack} stack is outside this evidence "
                           f"({m.provenance.get('kind')} covers {', '.join(m.scope)})",
                           "snapshot the checkpoint headers to check it"))
    # claimed: name -> the first family storing it, in the order the spec stores them
    claimed: dict[str, int] = {}
    for i in covered:
        claimed.update(zip(families[i].names, repeat(i)))
    once = len(claimed) == sum(len(families[i].names) for i in covered)
    invented = defaultdict(list)
    sized = defaultdict(list)
    if once:   # each name has one owner: compare family by group, visit names only where one differs
        for i in covered:
            f, hits = families[i], ctx.hits[i]
            bad = {g for g in set(hits) if g is None or _resized(f, groups[g])}
            for name, g in zip(f.names, hits) if bad else ():
                if g not in bad:
                    continue
                if g is None:
                    invented[f.uid].append(name)
                else:
                    sized[f.uid].append((f.tensor(name), groups[g]))
        ours_total = sum(len(families[i].names) * families[i].nbytes for i in covered)
        found = sum(len(ctx.hits[i]) - ctx.hits[i].count(None) for i in covered)
    else:
        owners = defaultdict(list)
        for i in covered:
            for name in families[i].names:
                owners[name].append(i)
        claimed = {name: ids[0] for name, ids in owners.items()}
        for name, ids in owners.items():
            if len(ids) > 1:
                out.append(Finding(NAME, "error", families[ids[1]].uid, f"{name} is claimed twice (also by "
                                   f"{families[ids[0]].uid})",
                                   "give one node another `module:` or share the weight with `shares:`"))
        for name, i in claimed.items():
            f, g = families[i], table.index.get(name)
            if g is None:
                invented[f.uid].append(name)
            elif _resized(f, groups[g]):
                sized[f.uid].append((f.tensor(name), groups[g]))
        ours_total = sum(families[i].nbytes for i in claimed.values())
        found = None
    for uid, names in invented.items():
        out.append(Finding(NAME, "error", uid, f"{len(names)} tensor(s) the spec stores are not in the "
                           f"checkpoint, e.g. {names[0]}",
                           "fix the node's module path (`module:`/`modules:` renames) or remove the leaf"))
    for uid, pairs in sized.items():
        ours, theirs = pairs[0]
        out.append(Finding(NAME, "error", uid, f"{len(pairs)} tensor(s) differ in size, e.g. {ours.name}: "
                           f"checkpoint {theirs.numel:,} elements / {theirs.nbytes:,} B, spec "
                           f"{ours.numel:,} elements / {stored_bytes(ours.dtype, ours.numel):,} B",
                           "check the dims bound to this op and its quant scheme"))
    other = [p for p in ctx.registry.other_modalities]
    unclaimed = table.unclaimed(claimed.keys(), found)
    modal = [t for t in unclaimed if any(t.name.startswith(p) for p in other)]
    text = [t for t in unclaimed if t not in modal]
    if text:
        owner_of = {name.rsplit(".", 1)[0]: f.uid for f in families for name in f.names}
    by_owner = defaultdict(list)
    for t in text:   # the spec node owning the same module (a missing bias), else the nearest parent
        module = t.name.rsplit(".", 1)[0]
        while module and module not in owner_of:
            module = module.rpartition(".")[0]
        by_owner[owner_of.get(module, "")].append(t)
    for uid, tensors in by_owner.items():
        for line in compress(tensors)[:10]:
            out.append(Finding(NAME, "error", uid, f"checkpoint tensor(s) {line} are claimed by no node",
                               "add the leaf or node that stores them, or a `modules:` rename so its key matches"))
    if modal:
        out.append(Finding(NAME, "warning", "", f"{len(modal)} tensors of other modalities are not modeled "
                           f"(e.g. {modal[0].name})", "a text-only spec leaves them out"))
    listed = table.listed
    if listed != m.total_bytes:
        out.append(Finding(NAME, "error", "", f"the manifest's tensors add up to {listed:,} B but its "
                           f"shard total is {m.total_bytes:,} B", "regenerate the manifest"))
    theirs_total = table.looked_up_bytes(modal)
    if ours_total != theirs_total:
        out.append(Finding(NAME, "error", "", f"the spec stores {ours_total:,} B, the checkpoint "
                           f"{theirs_total:,} B (language model tensors)",
                           "the per-tensor findings above say where"))
    return out


def _resized(family, group) -> bool:
    """A tensor of ``family`` stored as one of ``group`` differs in elements or bytes."""
    return family.numel != group.numel or family.nbytes != group.nbytes
