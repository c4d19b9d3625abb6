"""The per-tensor verification of the weight, packing and shape guards as it was before they
compared tensor families with manifest groups (engine/verify/validate.py): every tensor expanded,
every manifest line expanded and sorted, one dict per name. Kept for tests/test_verify_fast.py,
which checks that the grouped guards give the same verdicts, finding for finding.

Only the three guards that read the manifest are here; the others are the engine's own.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from engine.language import storage
from engine.language.dtypes import DTYPE_BITS, stored_bytes
from engine.language.errors import SpecError, Where
from engine.language.evaluate import Analysis, Binding, walk_model
from engine.verify.evidence import Evidence, load_evidence, registry
from engine.verify.guards import Finding, SpecTensor, axiom, schedule, source, structural
from engine.language.module_patterns import first_match, is_pattern
from engine.verify.guards import packing as packing_mod, shape as shape_mod, weight as weight_mod
from engine.verify.guards.weight import canonical
from engine.verify.manifest import KINDS, Manifest, ManifestTensor, _RANGE, compress
from engine.verify.validate import GuardResult, Report


def reference_validate(corpus, model) -> Report:
    """The verdict as validate() gave it with per-tensor guards (same order, statuses, evidence)."""
    reg = registry(corpus.root)
    evidence = load_evidence(corpus, model)
    if evidence.manifest is not None:   # the manifest as load() read it: eagerly, one tensor at a time
        from engine.verify.evidence import snapshot_name
        from engine.verify.manifest import manifest_path
        m = load(manifest_path(corpus.root, snapshot_name(model)), corpus.root)
        evidence = Evidence(evidence.config, evidence.config_source, m, evidence.source)
    kind = evidence.manifest.kind if evidence.manifest else ""
    label = KINDS.get(kind, "config only")
    numeric = walk_model(corpus, model, Binding("numeric"))
    symbolic = walk_model(corpus, model, Binding("symbolic"))
    ctx = SimpleNamespace(corpus=corpus, model=model, evidence=evidence, registry=reg, numeric=numeric,
                          symbolic=symbolic, spec_tensors=[], checkpoint={})
    ctx.spec_tensors = expand_tensors(ctx, numeric)
    if evidence.manifest is not None:
        ctx.checkpoint = {canonical(t.name, reg): t for t in evidence.manifest.tensors}
    checks = {"weight": weight_check, "packing": packing_check, "shape": shape_check}
    results = []
    for guard in (weight_mod, packing_mod, shape_mod, schedule, structural, axiom, source):
        findings = tuple(checks.get(guard.NAME, guard.check)(ctx))
        severities = {f.severity for f in findings}
        status = "fail" if "error" in severities else "warn" if "warning" in severities else "pass"
        results.append(GuardResult(guard.NAME, guard.evidence(ctx), status, findings))
    return Report(model.model_id, kind, label, tuple(results))


def expand_tensors(ctx, analysis: Analysis) -> list[SpecTensor]:
    """Every tensor the spec stores, with ``{layer}`` and ``{expert}`` filled in, canonical names."""
    templates = [(uid, c) for uid, c in analysis.components.items() if c.template]
    out = []
    for t in storage.checkpoint_tensors(analysis, ctx.model, ctx.corpus):
        row = analysis.rows[t.uid]
        layers: list[Any] = [None]
        if "{layer}" in t.key:
            owner = max((c for u, c in templates if t.uid.startswith(u + "/")),
                        key=lambda c: len(c.uid), default=None)
            layers = list(owner.layers) if owner else []
        experts: list[Any] = [None]
        if "{expert}" in t.key:
            experts = list(range(int(row.instances)))
        shape_ = tuple(int(d) for d in t.shape)
        for layer in layers:
            for expert in experts:
                name = t.key.replace("{layer}", str(layer)).replace("{expert}", str(expert))
                out.append(SpecTensor(canonical(name, ctx.registry), t.dtype, shape_, t.uid,
                                      t.stack, t.role, t.leaf, t.scheme))
    return out


def weight_check(ctx) -> list[Finding]:
    m = ctx.evidence.manifest
    if m is None:
        return [Finding("weight", "error", "", "no checkpoint tensor manifest for this model",
                        "record one: archledger snapshot MODEL (hub, --checkpoint DIR or --meta)")]
    out: list[Finding] = []
    claimed = defaultdict(list)
    for t in ctx.spec_tensors:
        if m.covers(t.stack):
            claimed[t.name].append(t)
    for stack in sorted({t.stack for t in ctx.spec_tensors if not m.covers(t.stack)}):
        out.append(Finding("weight", "info", stack, f"the {stack} stack is outside this evidence "
                           f"({m.provenance.get('kind')} covers {', '.join(m.scope)})",
                           "snapshot the checkpoint headers to check it"))
    for name, owners in claimed.items():
        if len(owners) > 1:
            out.append(Finding("weight", "error", owners[1].uid, f"{name} is claimed twice (also by {owners[0].uid})",
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
        out.append(Finding("weight", "error", uid, f"{len(names)} tensor(s) the spec stores are not in the "
                           f"checkpoint, e.g. {names[0]}",
                           "fix the node's module path (`module:`/`modules:` renames) or remove the leaf"))
    for uid, pairs in sized.items():
        ours, theirs = pairs[0]
        out.append(Finding("weight", "error", uid, f"{len(pairs)} tensor(s) differ in size, e.g. {ours.name}: "
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
            out.append(Finding("weight", "error", uid, f"checkpoint tensor(s) {line} are claimed by no node",
                               "add the leaf or node that stores them, or a `modules:` rename so its key matches"))
    if modal:
        out.append(Finding("weight", "warning", "", f"{len(modal)} tensors of other modalities are not modeled "
                           f"(e.g. {modal[0].name})", "a text-only spec leaves them out"))
    listed = sum(t.nbytes for t in m.tensors)
    if listed != m.total_bytes:
        out.append(Finding("weight", "error", "", f"the manifest's tensors add up to {listed:,} B but its "
                           f"shard total is {m.total_bytes:,} B", "regenerate the manifest"))
    ours_total = sum(stored_bytes(t.dtype, t.numel) for owners in claimed.values() for t in owners[:1])
    modal_names = {t.name for t in modal}
    theirs_total = sum(t.nbytes for t in ctx.checkpoint.values() if t.name not in modal_names)
    if ours_total != theirs_total:
        out.append(Finding("weight", "error", "", f"the spec stores {ours_total:,} B, the checkpoint "
                           f"{theirs_total:,} B (language model tensors)",
                           "the per-tensor findings above say where"))
    return out


def packing_check(ctx) -> list[Finding]:
    m = ctx.evidence.manifest
    if m is None:
        return []
    out: list[Finding] = []
    dtype_bad = defaultdict(list)
    count_bad = defaultdict(list)
    for t in ctx.spec_tensors:
        theirs = ctx.checkpoint.get(t.name)
        if theirs is None or not m.covers(t.stack):
            continue
        if t.dtype != theirs.dtype:
            dtype_bad[(t.uid, t.scheme)].append((t, theirs))
        if t.numel != theirs.numel:
            count_bad[(t.uid, t.scheme)].append((t, theirs))
    for (uid, scheme), pairs in dtype_bad.items():
        ours, theirs = pairs[0]
        out.append(Finding("packing", "error", uid, f"{len(pairs)} tensor(s) stored as {theirs.dtype} in the "
                           f"checkpoint, {ours.dtype} by scheme {scheme}, e.g. {ours.name}",
                           f"set quant_context for role {ours.role!r} (or {ours.role}.{ours.leaf}, or a "
                           "module-path pattern) to the scheme that stores this dtype"))
    for (uid, scheme), pairs in count_bad.items():
        ours, theirs = pairs[0]
        out.append(Finding("packing", "error", uid, f"{len(pairs)} tensor(s) hold {theirs.numel:,} elements in the "
                           f"checkpoint, {ours.numel:,} under scheme {scheme}, e.g. {ours.name}",
                           "check the scheme's packing (elements per byte, block shapes) and the op's dims"))
    for key, scheme in ctx.model.quant.items():
        if key == "*":
            continue
        if is_pattern(key):   # the tensors whose scheme this pattern picked
            hits = [t for t in ctx.spec_tensors if t.scheme == scheme
                    and first_match(ctx.model.quant_patterns, _leaf_module(ctx, t)) == key]
        else:
            hits = [t for t in ctx.spec_tensors if key in (t.role, f"{t.role}.{t.leaf}")]
        stored = [t for t in hits if t.name in ctx.checkpoint]
        if hits and not any(m.covers(t.stack) for t in hits):
            out.append(Finding("packing", "info", str(ctx.model.where.at(f"quant_context.overrides.{key}")),
                               f"override {key}: {scheme} applies to the {hits[0].stack} stack only, "
                               "outside this evidence", "snapshot the checkpoint headers to check it"))
        elif not stored:
            where = ctx.model.where.at(f"quant_context.overrides.{key}")
            out.append(Finding("packing", "error", str(where),
                               f"override {key}: {scheme} stores no checkpoint tensor"
                               + ("" if hits else (" (it covers no module path of the spec)" if is_pattern(key)
                                                   else " (no leaf has this role)")),
                               "use a module-path pattern, a role (or role.leaf) from the spec, or delete the override"))
    return out


def _leaf_module(ctx, t) -> str:
    key = next(leaf.key for leaf in ctx.numeric.rows[t.uid].leaves if leaf.name == t.leaf)
    return key.rsplit(".", 1)[0]


def shape_check(ctx) -> list[Finding]:
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
        out.append(Finding("shape", "error", uid, message, hint))
    return out


def _transposed(ours: tuple, theirs: tuple) -> bool:
    """Same rank and the last two axes swapped (and different): a matrix stored the other way round."""
    return (len(ours) == len(theirs) >= 2 and ours[:-2] == theirs[:-2] and ours[-2:] == theirs[-2:][::-1]
            and ours[-1] != ours[-2])


# -- the manifest reader as it was ---------------------------------------------------------------

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


def load(path: Path, root: Path | None = None) -> Manifest:
    """Read a manifest file; a malformed line is a one-line error naming the file and line."""
    from engine.language.yamlio import load_yaml
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
