"""weight guard: every checkpoint tensor is claimed by exactly one spec node, with its size.

Checkpoint names and spec keys meet in one canonical module path (``corpus/verification.yaml``
``canonical.prefixes``: multimodal checkpoints nest the language model). Then: no tensor claimed
twice, none unclaimed, none invented, element count and bytes equal per tensor, totals equal.
Findings are grouped (one per spec node, one per compressed name pattern) so a missing expert
family is one line, not 15,000.
"""
from __future__ import annotations

from collections import defaultdict

from engine.spec.dtypes import stored_bytes
from engine.verify.evidence import Registry
from engine.verify.guards import Context, Finding
from engine.verify.manifest import ManifestTensor, compress

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
    claimed = defaultdict(list)
    for t in ctx.spec_tensors:
        if m.covers(t.stack):
            claimed[t.name].append(t)
    for stack in sorted({t.stack for t in ctx.spec_tensors if not m.covers(t.stack)}):
        out.append(Finding(NAME, "info", stack, f"the {stack} stack is outside this evidence "
                           f"({m.provenance.get('kind')} covers {', '.join(m.scope)})",
                           "snapshot the checkpoint headers to check it"))
    for name, owners in claimed.items():
        if len(owners) > 1:
            out.append(Finding(NAME, "error", owners[1].uid, f"{name} is claimed twice (also by {owners[0].uid})",
                               "give one node another `module:` or share the weight with `shares:`"))
    invented = defaultdict(list)
    sized = defaultdict(list)
    for name, owners in claimed.items():
        ours = owners[0]
        theirs = ctx.checkpoint.get(name)
        if theirs is None:
            invented[ours.uid].append(name)
        elif ours.numel != theirs.numel or stored_bytes(ours.dtype, ours.numel) != theirs.nbytes:
            sized[ours.uid].append((ours, theirs))
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
    unclaimed = [t for n, t in ctx.checkpoint.items() if n not in claimed]
    modal = [t for t in unclaimed if any(t.name.startswith(p) for p in other)]
    text = [t for t in unclaimed if t not in modal]
    owner_of = {t.name.rsplit(".", 1)[0]: t.uid for t in ctx.spec_tensors}
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
    listed = sum(t.nbytes for t in m.tensors)
    if listed != m.total_bytes:
        out.append(Finding(NAME, "error", "", f"the manifest's tensors add up to {listed:,} B but its "
                           f"shard total is {m.total_bytes:,} B", "regenerate the manifest"))
    ours_total = sum(stored_bytes(t.dtype, t.numel) for owners in claimed.values() for t in owners[:1])
    modal_names = {t.name for t in modal}
    theirs_total = sum(t.nbytes for t in ctx.checkpoint.values() if t.name not in modal_names)
    if ours_total != theirs_total:
        out.append(Finding(NAME, "error", "", f"the spec stores {ours_total:,} B, the checkpoint "
                           f"{theirs_total:,} B (language model tensors)",
                           "the per-tensor findings above say where"))
    return out
