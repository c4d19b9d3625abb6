"""source guard: every ``src:`` anchor occurs in the model's forward-source snapshot, and that
snapshot is the pinned oracle's.

An anchor ties a node (and, with streams, a cross-layer dataflow) to the line of the modeling
code that does it; if the code says something else the anchor is stale or invented. Matching is
whitespace-insensitive and searches the forward methods recorded in ``<model>.source.yaml``.
Anchors are checked against that recorded source, never the installed transformers; so the
recorded source must be the one the corpus pins (``oracle.transformers`` in
``corpus/verification.yaml``): modeling-code evidence names its release and the sha256 of the
modeling file, and the manifest was built from the same file.
"""
from __future__ import annotations

from engine.verify.evidence import transformers_release
from engine.verify.guards import Context, Finding

NAME = "source"
EVIDENCE = "forward-source snapshot"


def anchors(ctx: Context) -> dict[str, str]:
    """Anchor text -> the first node uid that declares it (templates repeat the same anchors)."""
    out: dict[str, str] = {}
    for uid, row in ctx.numeric.rows.items():
        if row.src and row.src not in out:
            out[row.src] = uid
    for stream in ctx.numeric.streams:   # every stream names the forward line that carries it
        out.setdefault(stream.src, stream.uid)
    return out


def evidence(ctx: Context) -> str:
    s = ctx.evidence.source
    n = len(anchors(ctx))
    if s is None:
        return f"no source snapshot ({n} anchors)"
    return f"{s.source} ({len(s.excerpts)} forward methods, {n} anchors)"


_REBUMP = "re-record with the pinned release: archledger snapshot MODEL --config CONFIG --meta (docs/verification.md)"


def pinned(ctx: Context) -> list[Finding]:
    """Errors for modeling-code evidence not recorded with the pinned transformers release, a
    source snapshot without the file's hash, and a manifest built from another modeling file."""
    pin = ctx.registry.oracle
    source, manifest = ctx.evidence.source, ctx.evidence.manifest
    out = []
    files = [("source snapshot", source.provenance if source else None),
             ("tensor manifest", manifest.provenance if manifest else None)]
    for label, provenance in files:
        if not provenance or provenance.get("kind") != "modeling-code":
            continue
        release = transformers_release(provenance)
        if pin and release != pin:
            out.append(Finding(NAME, "error", "", f"the {label} was recorded with transformers {release}; "
                               f"the corpus pins {pin} (corpus/verification.yaml oracle)", _REBUMP))
    recorded = source.provenance.get("sha256") if source else None
    if source and source.provenance.get("kind") == "modeling-code" and not recorded:
        out.append(Finding(NAME, "error", "", "the source snapshot records no sha256 of the modeling file", _REBUMP))
    built = manifest.provenance.get("source_sha256") if manifest else None
    if recorded and built and built != recorded:
        out.append(Finding(NAME, "error", "", "the tensor manifest was built from another modeling source "
                           f"(sha256 {built[:12]}) than the recorded one ({recorded[:12]})", _REBUMP))
    return out


def check(ctx: Context) -> list[Finding]:
    return pinned(ctx) + _anchored(ctx)


def _anchored(ctx: Context) -> list[Finding]:
    found = anchors(ctx)
    s = ctx.evidence.source
    if not found:
        return [Finding(NAME, "info", "", "the spec declares no src: anchors", "")]
    if s is None:
        return [Finding(NAME, "error", next(iter(found.values())), "src: anchors but no forward-source snapshot",
                        "record it: archledger snapshot MODEL")]
    out = []
    for text, uid in found.items():
        if s.contains(text) is None:
            out.append(Finding(NAME, "error", uid, f"src: {text!r} does not occur in the forward source "
                               f"({s.source})", "quote a line of the model's forward code exactly"))
    return out
